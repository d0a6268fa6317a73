/* alloc.c - allocation wrapper. Debian's jemalloc is built without a symbol prefix, so linking it
 * replaces malloc for the whole process; these wrappers are where a per-subsystem arena or
 * accounting would hook in. */
#include "util/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

#define HUGE_PAGE ((size_t)2 << 20)

#ifdef MN_HAVE_JEMALLOC
static size_t pages_len(size_t n) { return (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE; }

/* Straight from the system, outside the allocator's arenas: the mapping is n rounded up to whole
 * huge pages plus one more, so that a 2 MiB-aligned start lies inside it; the unaligned head and
 * the spare tail are unmapped again. */
void *mn_alloc_pages(size_t n)
{
    size_t len = pages_len(n);
    if (!n || len < n || len + HUGE_PAGE < len)
        return NULL;
    uint8_t *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    munmap(p + len, HUGE_PAGE - (size_t)(p - raw));
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice: EINVAL without THP, and then plain pages serve */
    return p;
}

void mn_free_pages(void *p, size_t n)
{
    if (p)
        munmap(p, pages_len(n));
}
#else
/* The sanitizer builds: from the C library, exactly n bytes, so that ASan checks every read of the
 * weights too. */
void *mn_alloc_pages(size_t n)
{
    void *p = NULL;
    if (!n || posix_memalign(&p, HUGE_PAGE, n) != 0)
        return NULL;
    memset(p, 0, n);
    (void)madvise(p, n, MADV_HUGEPAGE);
    return p;
}

void mn_free_pages(void *p, size_t n)
{
    (void)n;
    free(p);
}
#endif

char *mn_strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}
