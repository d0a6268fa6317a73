/* alloc.c - allocation wrapper. Debian's jemalloc is built without a symbol prefix, so linking it
 * replaces malloc for the whole process; these wrappers are where a per-subsystem arena or
 * accounting would hook in. */
#include "util/alloc.h"

#include <stdlib.h>
#include <string.h>

void *mn_malloc(size_t n) { return malloc(n ? n : 1); }
void *mn_calloc(size_t count, size_t size) { return calloc(count ? count : 1, size ? size : 1); }
void *mn_realloc(void *p, size_t n) { return realloc(p, n ? n : 1); }
void mn_free(void *p) { free(p); }

void *mn_aligned_calloc(size_t align, size_t n)
{
    void *p = NULL;
    size_t rounded = (n + align - 1) / align * align;
    if (rounded < n || posix_memalign(&p, align, rounded ? rounded : align) != 0)
        return NULL;
    memset(p, 0, rounded);
    return p;
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
