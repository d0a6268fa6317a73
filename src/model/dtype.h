/* dtype.h - ggml tensor element types as GGUF stores them (ids, block sizes, names).
 *
 * A block holds `elems` consecutive elements of a row in `bytes` bytes. The engine computes with
 * F32, F16, Q8_0, Q4_0 and Q4_1; the other ids are only sized so a file that carries them opens and
 * the loader can name the unsupported tensor.
 */
#ifndef MN_DTYPE_H
#define MN_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum mn_dtype {
    MN_F32 = 0,   /* 4-byte float */
    MN_F16 = 1,   /* IEEE half */
    MN_Q4_0 = 2,  /* f16 scale d, 16 bytes of nibbles: x = d * (q - 8) */
    MN_Q4_1 = 3,  /* f16 scale d, f16 min m, 16 bytes of nibbles: x = d * q + m */
    MN_Q5_0 = 6,  /* sized only */
    MN_Q5_1 = 7,  /* sized only */
    MN_Q8_0 = 8,  /* f16 scale d, 32 int8: x = d * q */
    MN_Q8_1 = 9,  /* sized only */
    MN_Q2_K = 10, /* sized only */
    MN_Q3_K = 11, /* sized only */
    MN_Q4_K = 12, /* sized only */
    MN_Q5_K = 13, /* sized only */
    MN_Q6_K = 14, /* sized only */
    MN_Q8_K = 15, /* sized only */
    MN_BF16 = 30, /* sized only */
} mn_dtype;

/* Elements per quantization block: a row of `ne0` elements must have ne0 % QK == 0. */
#define MN_QK 32

typedef struct mn_dtype_info {
    const char *name;   /* ggml's name, e.g. "Q4_1" */
    uint32_t elems;     /* elements per block */
    uint32_t bytes;     /* bytes per block */
    int computable;     /* the engine has kernels for it */
} mn_dtype_info;

/* Information on type id t, or NULL for an id this engine cannot even size. */
const mn_dtype_info *mn_dtype_get(uint32_t t);

/* Whether t is one of the block-quantized types the engine computes with (Q8_0, Q4_0, Q4_1: a
 * scale, and for Q4_1 a minimum, per 32 elements), which the CPU multiplies with 16-bit activations
 * and the CUDA backend projects through its wide kernel over many tokens. */
static inline int mn_dtype_quantized(uint32_t t) { return t == MN_Q8_0 || t == MN_Q4_0 || t == MN_Q4_1; }

/* Bytes of one row of n elements of type t (n must be a multiple of the block size). */
static inline size_t mn_dtype_row_bytes(const mn_dtype_info *info, uint64_t n)
{
    return (size_t)(n / info->elems) * info->bytes;
}

#endif
