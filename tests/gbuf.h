/* gbuf.h - GGUF bytes written by hand, for tests that build a file in memory (gguf_open_mem). */
#ifndef MN_TEST_GBUF_H
#define MN_TEST_GBUF_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

typedef struct gbuf {
    unsigned char *p;     /* malloc'd; the test frees it */
    size_t n;
} gbuf;

static inline void put(gbuf *b, const void *x, size_t n)
{
    b->p = realloc(b->p, b->n + n);
    cr_assert(b->p);
    memcpy(b->p + b->n, x, n);
    b->n += n;
}

static inline void put_u32(gbuf *b, uint32_t v) { put(b, &v, 4); } /* GGUF and the test hosts are little-endian */
static inline void put_u64(gbuf *b, uint64_t v) { put(b, &v, 8); }

static inline void put_str(gbuf *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

static inline void put_key(gbuf *b, const char *key, gguf_vtype type)
{
    put_str(b, key, strlen(key));
    put_u32(b, type);
}

#endif
