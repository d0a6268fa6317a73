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

/* The 256 byte tokens of a GPT-2 byte-level vocabulary, in byte order, each as the code point
 * GPT-2's map gives it (printable bytes themselves, the others 256, 257, ... in order). */
static inline void put_byte_tokens(gbuf *b)
{
    for (int byte = 0, extra = 0; byte < 256; byte++) {
        int printable = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174;
        int cp = printable ? byte : 256 + extra++;
        char u[2] = {(char)cp, 0};
        if (cp >= 128) { /* two-byte UTF-8: every code point of the map is below 0x800 */
            u[0] = (char)(0xc0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3f));
        }
        put_str(b, u, cp >= 128 ? 2 : 1);
    }
}

#endif
