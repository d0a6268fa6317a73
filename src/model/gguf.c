/* gguf.c - validating GGUF reader.
 *
 * All parsing goes through `struct rd`, a cursor that refuses to move past the end. Counts are
 * bounded by the bytes left before anything is allocated for them, so a hostile header cannot ask
 * for absurd memory. After open, the index (kvs, tensors) is immutable.
 */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/dtype.h"
#include "util/alloc.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ARRAY_DEPTH 4

struct gguf_file {
    const uint8_t *base;   /* the whole file */
    size_t len;
    int mapped;            /* base came from mmap and must be unmapped */
    uint32_t version;
    size_t alignment;
    size_t n_kv;
    gguf_kv *kvs;
    size_t n_tensors;
    gguf_tensor *tensors;
};

struct rd {
    const uint8_t *p;
    const uint8_t *end;
};

static size_t rd_left(const struct rd *r) { return (size_t)(r->end - r->p); }

static int rd_bytes(struct rd *r, void *out, size_t n)
{
    if (rd_left(r) < n)
        return 0;
    memcpy(out, r->p, n);
    r->p += n;
    return 1;
}

static int rd_u32(struct rd *r, uint32_t *v) { return rd_bytes(r, v, 4); }
static int rd_u64(struct rd *r, uint64_t *v) { return rd_bytes(r, v, 8); }

static int rd_str(struct rd *r, gguf_str *s)
{
    uint64_t n;
    if (!rd_u64(r, &n) || n > rd_left(r))
        return 0;
    s->ptr = (const char *)r->p;
    s->len = n;
    r->p += n;
    return 1;
}

static size_t vtype_size(uint32_t t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0; /* STRING, ARRAY: variable; unknown: invalid */
    }
}

/* Skip `n` elements of type t, validating them (strings and nested arrays walk). */
static int skip_elems(struct rd *r, uint32_t t, uint64_t n, int depth, mn_err *err, const char *key)
{
    size_t sz = vtype_size(t);
    if (sz) {
        if (n > rd_left(r) / sz)
            return mn_fail(err, MN_INVALID, "gguf: array '%s' of %llu elements runs past the end",
                           key, (unsigned long long)n), 0;
        r->p += n * sz;
        return 1;
    }
    if (t == GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            gguf_str s;
            if (!rd_str(r, &s))
                return mn_fail(err, MN_INVALID, "gguf: string %llu of array '%s' runs past the end",
                               (unsigned long long)i, key), 0;
        }
        return 1;
    }
    if (t == GGUF_ARRAY) {
        if (depth >= GGUF_MAX_ARRAY_DEPTH)
            return mn_fail(err, MN_INVALID, "gguf: arrays nested too deep in '%s'", key), 0;
        for (uint64_t i = 0; i < n; i++) {
            uint32_t et;
            uint64_t en;
            if (!rd_u32(r, &et) || !rd_u64(r, &en))
                return mn_fail(err, MN_INVALID, "gguf: nested array in '%s' is truncated", key), 0;
            if (!skip_elems(r, et, en, depth + 1, err, key))
                return 0;
        }
        return 1;
    }
    return mn_fail(err, MN_INVALID, "gguf: key '%s' has unknown value type %u", key, t), 0;
}

static mn_status parse_kv(struct rd *r, gguf_kv *kv, mn_err *err, size_t idx)
{
    gguf_str key;
    uint32_t t;
    if (!rd_str(r, &key))
        return mn_fail(err, MN_INVALID, "gguf: key %zu is truncated", idx);
    if (key.len == 0 || key.len > 65535)
        return mn_fail(err, MN_INVALID, "gguf: key %zu has invalid length %llu", idx,
                       (unsigned long long)key.len);
    if (!(kv->key = mn_strndup(key.ptr, key.len)))
        return MN_NOMEM;
    if (!rd_u32(r, &t))
        return mn_fail(err, MN_INVALID, "gguf: key '%s' has no value type", kv->key);
    kv->type = (gguf_vtype)t;
    uint8_t b1 = 0;
    uint16_t b2 = 0;
    uint32_t b4 = 0;
    uint64_t b8 = 0;
    int ok = 1;
    switch (t) {
    case GGUF_U8: ok = rd_bytes(r, &b1, 1); kv->v.u = b1; break;
    case GGUF_I8: ok = rd_bytes(r, &b1, 1); kv->v.i = (int8_t)b1; break;
    case GGUF_BOOL:
        ok = rd_bytes(r, &b1, 1);
        if (ok && b1 > 1)
            return mn_fail(err, MN_INVALID, "gguf: bool '%s' has value %u", kv->key, b1);
        kv->v.u = b1;
        break;
    case GGUF_U16: ok = rd_bytes(r, &b2, 2); kv->v.u = b2; break;
    case GGUF_I16: ok = rd_bytes(r, &b2, 2); kv->v.i = (int16_t)b2; break;
    case GGUF_U32: ok = rd_u32(r, &b4); kv->v.u = b4; break;
    case GGUF_I32: ok = rd_u32(r, &b4); kv->v.i = (int32_t)b4; break;
    case GGUF_U64: ok = rd_u64(r, &b8); kv->v.u = b8; break;
    case GGUF_I64: ok = rd_u64(r, &b8); kv->v.i = (int64_t)b8; break;
    case GGUF_F32: {
        float f = 0;
        ok = rd_bytes(r, &f, 4);
        kv->v.f = f;
        break;
    }
    case GGUF_F64: ok = rd_bytes(r, &kv->v.f, 8); break;
    case GGUF_STRING: ok = rd_str(r, &kv->v.s); break;
    case GGUF_ARRAY: {
        uint32_t et;
        if (!rd_u32(r, &et) || !rd_u64(r, &kv->arr_n))
            return mn_fail(err, MN_INVALID, "gguf: array '%s' header is truncated", kv->key);
        kv->arr_type = (gguf_vtype)et;
        kv->arr_data = r->p;
        if (!skip_elems(r, et, kv->arr_n, 1, err, kv->key))
            return MN_INVALID;
        break;
    }
    default:
        return mn_fail(err, MN_INVALID, "gguf: key '%s' has unknown value type %u", kv->key, t);
    }
    if (!ok)
        return mn_fail(err, MN_INVALID, "gguf: value of '%s' is truncated", kv->key);
    return MN_OK;
}

static mn_status parse_tensor(struct rd *r, gguf_tensor *t, uint64_t *offset, mn_err *err, size_t idx)
{
    gguf_str name;
    if (!rd_str(r, &name))
        return mn_fail(err, MN_INVALID, "gguf: name of tensor %zu is truncated", idx);
    if (name.len == 0 || name.len > 65535)
        return mn_fail(err, MN_INVALID, "gguf: tensor %zu has a name of invalid length", idx);
    if (!(t->name = mn_strndup(name.ptr, name.len)))
        return MN_NOMEM;
    if (!rd_u32(r, &t->n_dims))
        return mn_fail(err, MN_INVALID, "gguf: tensor '%s' is truncated", t->name);
    if (t->n_dims < 1 || t->n_dims > 4)
        return mn_fail(err, MN_INVALID, "gguf: tensor '%s' has %u dimensions (1..4 allowed)",
                       t->name, t->n_dims);
    uint64_t nelem = 1;
    for (uint32_t d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && !rd_u64(r, &t->ne[d]))
            return mn_fail(err, MN_INVALID, "gguf: shape of tensor '%s' is truncated", t->name);
        if (t->ne[d] == 0 || t->ne[d] > ((uint64_t)1 << 40) ||
            __builtin_mul_overflow(nelem, t->ne[d], &nelem) || nelem > ((uint64_t)1 << 40))
            return mn_fail(err, MN_INVALID, "gguf: tensor '%s' has an absurd shape", t->name);
    }
    if (!rd_u32(r, &t->type) || !rd_u64(r, offset))
        return mn_fail(err, MN_INVALID, "gguf: tensor '%s' is truncated", t->name);
    const mn_dtype_info *info = mn_dtype_get(t->type);
    if (!info)
        return mn_fail(err, MN_INVALID, "gguf: tensor '%s' has unknown type %u", t->name, t->type);
    if (t->ne[0] % info->elems)
        return mn_fail(err, MN_INVALID, "gguf: tensor '%s': row of %llu is not a multiple of the %s block (%u)",
                       t->name, (unsigned long long)t->ne[0], info->name, info->elems);
    t->nbytes = (size_t)(nelem / info->elems) * info->bytes;
    return MN_OK;
}

static const char *kv_name(const gguf_file *f, size_t i) { return f->kvs[i].key; }
static const char *tensor_name(const gguf_file *f, size_t i) { return f->tensors[i].name; }

static int cmp_names(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* *dup: a name that two of the n entries share (name(f, i)), or NULL. Sorted, not compared pair by
 * pair: a header of 1.7 MB holds 80,000 keys, and comparing each with every earlier one took 43 s. */
static mn_status first_twice(size_t n, const gguf_file *f, const char *(*name)(const gguf_file *, size_t),
                             const char **dup)
{
    *dup = NULL;
    const char **names = mn_malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return MN_NOMEM;
    for (size_t i = 0; i < n; i++)
        names[i] = name(f, i);
    qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 1; i < n && !*dup; i++)
        if (!strcmp(names[i - 1], names[i]))
            *dup = names[i];
    mn_free(names);
    return MN_OK;
}

typedef struct span {
    uint64_t off, end;
    const char *name;
} span;

static int cmp_spans(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Every tensor's bytes its own: a file whose tensors share one region (9,000 tensors at offset 0
 * of a 10 MB file) would load as a model of 67 billion parameters, whose copy no memory holds. */
static mn_status check_disjoint(const gguf_file *f, const uint64_t *offsets, mn_err *err)
{
    span *sp = mn_malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *sp);
    if (!sp)
        return MN_NOMEM;
    for (size_t i = 0; i < f->n_tensors; i++)
        sp[i] = (span){offsets[i], offsets[i] + f->tensors[i].nbytes, f->tensors[i].name};
    qsort(sp, f->n_tensors, sizeof *sp, cmp_spans);
    mn_status s = MN_OK;
    for (size_t i = 1; i < f->n_tensors && s == MN_OK; i++)
        if (sp[i].off < sp[i - 1].end)
            s = mn_fail(err, MN_INVALID, "gguf: tensors '%s' and '%s' share bytes", sp[i - 1].name, sp[i].name);
    mn_free(sp);
    return s;
}

static mn_status parse(gguf_file *f, mn_err *err)
{
    struct rd r = {f->base, f->base + f->len};
    uint32_t magic;
    uint64_t n_tensors, n_kv;
    if (!rd_u32(&r, &magic))
        return mn_fail(err, MN_INVALID, "gguf: file is too short (%zu bytes)", f->len);
    if (magic != GGUF_MAGIC)
        return mn_fail(err, MN_INVALID, "gguf: bad magic 0x%08x (not a GGUF file)", magic);
    if (!rd_u32(&r, &f->version))
        return mn_fail(err, MN_INVALID, "gguf: header is truncated");
    if (f->version != 2 && f->version != 3)
        return mn_fail(err, MN_UNSUPPORTED, "gguf: unsupported version %u (2 and 3 are)", f->version);
    if (!rd_u64(&r, &n_tensors) || !rd_u64(&r, &n_kv))
        return mn_fail(err, MN_INVALID, "gguf: header is truncated");
    /* The smallest key/value takes 13 bytes and the smallest tensor info 29: bound counts by what
     * the file can hold before allocating for them. */
    if (n_kv > rd_left(&r) / 13)
        return mn_fail(err, MN_INVALID, "gguf: %llu keys cannot fit in the file", (unsigned long long)n_kv);
    if (n_tensors > rd_left(&r) / 29)
        return mn_fail(err, MN_INVALID, "gguf: %llu tensors cannot fit in the file",
                       (unsigned long long)n_tensors);
    f->kvs = mn_calloc(n_kv, sizeof *f->kvs);
    f->tensors = mn_calloc(n_tensors, sizeof *f->tensors);
    if (!f->kvs || !f->tensors)
        return MN_NOMEM;
    mn_status s;
    for (f->n_kv = 0; f->n_kv < n_kv; f->n_kv++) {
        if ((s = parse_kv(&r, &f->kvs[f->n_kv], err, f->n_kv)) != MN_OK) {
            f->n_kv++; /* free the partly parsed key too */
            return s;
        }
    }
    const char *dup = NULL;
    if ((s = first_twice(f->n_kv, f, kv_name, &dup)) != MN_OK)
        return s;
    if (dup)
        return mn_fail(err, MN_INVALID, "gguf: key '%s' appears twice", dup);
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_U32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)) || al->v.u > 65536)
            return mn_fail(err, MN_INVALID, "gguf: general.alignment must be a uint32 power of two");
        f->alignment = al->v.u;
    }
    uint64_t *offsets = mn_calloc(n_tensors, sizeof *offsets);
    if (!offsets)
        return MN_NOMEM;
    s = MN_OK;
    for (f->n_tensors = 0; f->n_tensors < n_tensors && s == MN_OK; f->n_tensors++)
        s = parse_tensor(&r, &f->tensors[f->n_tensors], &offsets[f->n_tensors], err, f->n_tensors);
    if (s == MN_OK && (s = first_twice(f->n_tensors, f, tensor_name, &dup)) == MN_OK && dup)
        s = mn_fail(err, MN_INVALID, "gguf: tensor '%s' appears twice", dup);
    size_t header_end = (size_t)(r.p - f->base);
    size_t data_start = (header_end + f->alignment - 1) / f->alignment * f->alignment;
    for (size_t i = 0; s == MN_OK && i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t off = offsets[i];
        if (off % f->alignment)
            s = mn_fail(err, MN_INVALID, "gguf: tensor '%s' offset %llu is not aligned to %zu", t->name,
                        (unsigned long long)off, f->alignment);
        else if (data_start > f->len || off > f->len - data_start || t->nbytes > f->len - data_start - off)
            s = mn_fail(err, MN_INVALID, "gguf: data of tensor '%s' (offset %llu, %zu bytes) runs past the end of the file",
                        t->name, (unsigned long long)off, t->nbytes);
        else
            t->data = f->base + data_start + off;
    }
    if (s == MN_OK)
        s = check_disjoint(f, offsets, err);
    mn_free(offsets);
    return s;
}

static mn_status open_common(gguf_file *f, gguf_file **out, mn_err *err)
{
    mn_status s = parse(f, err);
    if (s == MN_NOMEM)
        mn_fail(err, s, "gguf: out of memory while indexing the file");
    if (s != MN_OK) {
        gguf_close(f);
        return s;
    }
    *out = f;
    return MN_OK;
}

mn_status gguf_open_mem(const void *buf, size_t len, gguf_file **out, mn_err *err)
{
    gguf_file *f = mn_calloc(1, sizeof *f);
    if (!f)
        return mn_fail(err, MN_NOMEM, "gguf: out of memory");
    f->base = buf;
    f->len = len;
    return open_common(f, out, err);
}

mn_status gguf_open_file(const char *path, gguf_file **out, mn_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mn_fail(err, MN_IO, "gguf: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mn_fail(err, MN_IO, "gguf: %s is not a regular file", path);
    }
    if (st.st_size < 24) {
        close(fd);
        return mn_fail(err, MN_INVALID, "gguf: %s is too short (%lld bytes) to be a GGUF file", path,
                       (long long)st.st_size);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return mn_fail(err, MN_IO, "gguf: cannot map %s: %s", path, strerror(errno));
    gguf_file *f = mn_calloc(1, sizeof *f);
    if (!f) {
        munmap(map, (size_t)st.st_size);
        return mn_fail(err, MN_NOMEM, "gguf: out of memory");
    }
    f->base = map;
    f->len = (size_t)st.st_size;
    f->mapped = 1;
    return open_common(f, out, err);
}

void gguf_close(gguf_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_kv; i++)
        mn_free(f->kvs[i].key);
    for (size_t i = 0; i < f->n_tensors; i++)
        mn_free(f->tensors[i].name);
    mn_free(f->kvs);
    mn_free(f->tensors);
    if (f->mapped)
        munmap((void *)f->base, f->len);
    mn_free(f);
}

void gguf_drop_pages(const gguf_file *f, const void *p, size_t n)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)p, hi = lo + n;
    if (!f->mapped || !n || lo < (uintptr_t)f->base || hi > (uintptr_t)f->base + f->len)
        return;
    lo = (lo + page - 1) / page * page; /* whole pages only: a neighbour's bytes stay */
    hi = hi / page * page;
    if (lo < hi)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: a failure changes nothing */
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
size_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i) { return i < f->n_kv ? &f->kvs[i] : NULL; }
size_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_kv; i++)
        if (f->kvs[i].key && strcmp(f->kvs[i].key, key) == 0)
            return &f->kvs[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name && strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

static mn_status find(const gguf_file *f, const char *key, const gguf_kv **kv)
{
    *kv = gguf_find_kv(f, key);
    return *kv ? MN_OK : MN_NOTFOUND;
}

mn_status gguf_get_uint(const gguf_file *f, const char *key, uint64_t *out, mn_err *err)
{
    const gguf_kv *kv;
    if (find(f, key, &kv) != MN_OK)
        return mn_fail(err, MN_NOTFOUND, "gguf: key '%s' is missing", key);
    switch (kv->type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64:
        *out = kv->v.u;
        return MN_OK;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64:
        if (kv->v.i < 0)
            return mn_fail(err, MN_INVALID, "gguf: '%s' is negative", key);
        *out = (uint64_t)kv->v.i;
        return MN_OK;
    default:
        return mn_fail(err, MN_INVALID, "gguf: '%s' is not an integer", key);
    }
}

mn_status gguf_get_float(const gguf_file *f, const char *key, double *out, mn_err *err)
{
    const gguf_kv *kv;
    if (find(f, key, &kv) != MN_OK)
        return mn_fail(err, MN_NOTFOUND, "gguf: key '%s' is missing", key);
    if (kv->type != GGUF_F32 && kv->type != GGUF_F64)
        return mn_fail(err, MN_INVALID, "gguf: '%s' is not a float", key);
    *out = kv->v.f;
    return MN_OK;
}

mn_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, mn_err *err)
{
    const gguf_kv *kv;
    if (find(f, key, &kv) != MN_OK)
        return mn_fail(err, MN_NOTFOUND, "gguf: key '%s' is missing", key);
    if (kv->type != GGUF_BOOL)
        return mn_fail(err, MN_INVALID, "gguf: '%s' is not a bool", key);
    *out = kv->v.u != 0;
    return MN_OK;
}

mn_status gguf_get_string(const gguf_file *f, const char *key, gguf_str *out, mn_err *err)
{
    const gguf_kv *kv;
    if (find(f, key, &kv) != MN_OK)
        return mn_fail(err, MN_NOTFOUND, "gguf: key '%s' is missing", key);
    if (kv->type != GGUF_STRING)
        return mn_fail(err, MN_INVALID, "gguf: '%s' is not a string", key);
    *out = kv->v.s;
    return MN_OK;
}

mn_status gguf_get_array(const gguf_file *f, const char *key, gguf_vtype elem, const gguf_kv **out,
                         mn_err *err)
{
    const gguf_kv *kv;
    if (find(f, key, &kv) != MN_OK)
        return mn_fail(err, MN_NOTFOUND, "gguf: key '%s' is missing", key);
    if (kv->type != GGUF_ARRAY || kv->arr_type != elem)
        return mn_fail(err, MN_INVALID, "gguf: '%s' is not an array of value type %d", key, (int)elem);
    *out = kv;
    return MN_OK;
}

void gguf_array_strings(const gguf_kv *kv, gguf_str *out)
{
    const uint8_t *p = kv->arr_data;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        uint64_t n;
        memcpy(&n, p, 8);
        out[i].ptr = (const char *)p + 8;
        out[i].len = n;
        p += 8 + n;
    }
}

bool gguf_str_eq(gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}
