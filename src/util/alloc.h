/* alloc.h - the one allocation wrapper of the project.
 *
 * Every host allocation goes through these functions; with jemalloc configured (the default build)
 * they are jemalloc's, under the sanitizers they are the C library's so ASan/TSan can see them.
 * Failures return NULL (never abort); callers turn that into MN_NOMEM. Thread-safe.
 */
#ifndef MN_ALLOC_H
#define MN_ALLOC_H

#include <stddef.h>

void *mn_malloc(size_t n);
void *mn_calloc(size_t count, size_t size);
void *mn_realloc(void *p, size_t n);
/* Memory aligned to `align` (a power of two >= sizeof(void *)), zero-filled; free with mn_free.
 * With jemalloc, pages fresh from the system are not touched here (they are zero already). */
void *mn_aligned_calloc(size_t align, size_t n);
void mn_free(void *p);
/* n zero-filled bytes for large, long-lived data that passes stream over (the CPU backend's weights,
 * the KV pool), 2 MiB-aligned, which the kernel is asked to back with transparent huge pages
 * (MADV_HUGEPAGE; Linux's default THP mode, "madvise", gives them only on request). A pass over 20
 * MB of weights then needs 10 TLB entries, where 4 KiB pages need 5,000, more than a core's
 * second-level TLB holds (docs/runtime.md). Private pages straight from the system with jemalloc
 * (committed when first written), the C library's memory in the sanitizer builds (so ASan checks
 * every access); where the kernel has no THP, ordinary pages: the same bytes, only slower. Free
 * with mn_free_pages(p, n), n as allocated. NULL on failure (n = 0 included). Thread-safe. */
void *mn_alloc_pages(size_t n);
void mn_free_pages(void *p, size_t n);
/* A NUL-terminated copy of the first n bytes of s. */
char *mn_strndup(const char *s, size_t n);

/* Multiplication that reports overflow: returns 0 and leaves *out untouched when a*b overflows. */
static inline int mn_mul_ok(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

#endif
