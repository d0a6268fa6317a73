/* gguf.h - a validating GGUF (v2/v3, little-endian) reader.
 *
 * gguf_open_file maps the file read-only; gguf_open_mem reads a caller-owned buffer (tests, fuzzing).
 * Every count, length, offset, type and the alignment is checked against the buffer length during
 * open, so after a successful open every pointer the accessors hand out lies inside the buffer and
 * every array can be walked without further checks. A malformed file is MN_INVALID with a message
 * naming the problem; nothing is read out of bounds.
 *
 * Ownership: the gguf_file owns the mapping and its index; strings and tensor data returned by the
 * accessors point into the mapping and live until gguf_close. Keys and tensor names are copied and
 * NUL-terminated. Thread-safety: immutable after open, so any thread may read concurrently.
 */
#ifndef MN_GGUF_H
#define MN_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef enum gguf_vtype {
    GGUF_U8 = 0,     /* uint8 */
    GGUF_I8 = 1,     /* int8 */
    GGUF_U16 = 2,    /* uint16 */
    GGUF_I16 = 3,    /* int16 */
    GGUF_U32 = 4,    /* uint32 */
    GGUF_I32 = 5,    /* int32 */
    GGUF_F32 = 6,    /* float32 */
    GGUF_BOOL = 7,   /* one byte, 0 or 1 */
    GGUF_STRING = 8, /* uint64 length + bytes (not NUL-terminated) */
    GGUF_ARRAY = 9,  /* uint32 element type + uint64 count + elements */
    GGUF_U64 = 10,   /* uint64 */
    GGUF_I64 = 11,   /* int64 */
    GGUF_F64 = 12,   /* float64 */
} gguf_vtype;

/* A string inside the mapping: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    char *key;              /* NUL-terminated copy */
    gguf_vtype type;
    union {
        uint64_t u;         /* U8..U64 (and BOOL as 0/1) */
        int64_t i;          /* I8..I64 */
        double f;           /* F32, F64 */
        gguf_str s;         /* STRING */
    } v;
    gguf_vtype arr_type;    /* ARRAY: element type */
    uint64_t arr_n;         /* ARRAY: element count */
    const uint8_t *arr_data;/* ARRAY: first element (strings: length-prefixed, back to back) */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;             /* NUL-terminated copy */
    uint32_t n_dims;        /* 1..4 */
    uint64_t ne[4];         /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint32_t type;          /* mn_dtype id */
    size_t nbytes;          /* size of the data */
    const void *data;       /* inside the mapping, aligned to the file's alignment */
} gguf_tensor;

typedef struct gguf_file gguf_file;

mn_status gguf_open_file(const char *path, gguf_file **out, mn_err *err);
mn_status gguf_open_mem(const void *buf, size_t len, gguf_file **out, mn_err *err);
void gguf_close(gguf_file *f);
/* Advice that the bytes [p, p + n) of f will not be read again soon (a backend took its own copy):
 * the whole pages inside that range leave this process's resident set (MADV_DONTNEED on the
 * read-only mapping; the page cache keeps them while memory allows, and a later read faults them
 * back in, unchanged unless the file itself changed). Nothing happens for gguf_open_mem buffers.
 * Any thread. */
void gguf_drop_pages(const gguf_file *f, const void *p, size_t n);

uint32_t gguf_version(const gguf_file *f);
size_t gguf_n_kv(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i);
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
size_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: MN_NOTFOUND when absent, MN_INVALID (with message) when of the wrong type or
 * out of range. get_uint accepts any integer type holding a non-negative value. */
mn_status gguf_get_uint(const gguf_file *f, const char *key, uint64_t *out, mn_err *err);
mn_status gguf_get_float(const gguf_file *f, const char *key, double *out, mn_err *err);
mn_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, mn_err *err);
mn_status gguf_get_string(const gguf_file *f, const char *key, gguf_str *out, mn_err *err);
/* An array whose elements have type elem. */
mn_status gguf_get_array(const gguf_file *f, const char *key, gguf_vtype elem, const gguf_kv **out,
                         mn_err *err);
/* Fill out[0..kv->arr_n) with the elements of a string array (already validated at open). */
void gguf_array_strings(const gguf_kv *kv, gguf_str *out);

/* True when s equals the NUL-terminated c. */
bool gguf_str_eq(gguf_str s, const char *c);

#endif
