/* alloc.c - allocation wrapper. Debian's jemalloc is built without a symbol prefix, so linking it
 * replaces malloc for the whole process; these wrappers are where a per-subsystem arena or
 * accounting would hook in. */
#include "util/alloc.h"

#include <stdlib.h>
#include <string.h>

#ifdef MN_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

void *mn_malloc(size_t n) { return malloc(n ? n : 1); }
void *mn_calloc(size_t count, size_t size) { return calloc(count ? count : 1, size ? size : 1); }
void *mn_realloc(void *p, size_t n) { return realloc(p, n ? n : 1); }
void mn_free(void *p) { free(p); }

void *mn_aligned_calloc(size_t align, size_t n)
{
    size_t rounded = (n + align - 1) / align * align;
    if (rounded < n)
        return NULL;
#ifdef MN_HAVE_JEMALLOC
    /* jemalloc zeroes only what it hands out dirty: fresh pages of a large pool (the KV cache) are
     * left untouched until used, so they cost no memory or start-up time before then */
    return mallocx(rounded ? rounded : align, MALLOCX_ALIGN(align) | MALLOCX_ZERO);
#else
    void *p = NULL;
    if (posix_memalign(&p, align, rounded ? rounded : align) != 0)
        return NULL;
    memset(p, 0, rounded);
    return p;
#endif
}

char *mn_strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}
