/* kernels_x86.h - helpers the x86 kernel files share (kernels_avx2.c, kernels_avx512.c).
 *
 * Include it after the file's `#pragma GCC target`: every function here is static inline and
 * compiles for that file's instruction set (AVX2, FMA and F16C at least). Nothing here is a symbol
 * of its own. */
#ifndef MN_KERNELS_X86_H
#define MN_KERNELS_X86_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/kernels.h"
#include "model/dtype.h"
#include "model/quant.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* kernels_generic.c's hsum8 of an 8-lane accumulator: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)). */
ALWAYS_INLINE float hsum(__m256 a)
{
    __m128 lo = _mm256_castps256_ps128(a), hi = _mm256_extractf128_ps(a, 1);
    __m128 s = _mm_add_ps(lo, hi);                 /* a0+a4, a1+a5, a2+a6, a3+a7 */
    __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s)); /* (a0+a4)+(a2+a6), (a1+a5)+(a3+a7) */
    t = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
    return _mm_cvtss_f32(t);
}

/* Element k of an F32 or F16 row (the columns past the last full chunk of 8). */
ALWAYS_INLINE float scalar_w(uint32_t type, const uint8_t *row, int k)
{
    return type == MN_F32 ? ((const float *)row)[k] : mn_f16_to_f32(((const uint16_t *)row)[k]);
}

/* Whether kernels_avx2.c takes a float pass through lane panels (its comment says why this rule):
 * F32 weights of at most LANE_MAX_COLS columns, in a pass whose activations reach
 * MN_LANE_MIN_ACT_FLOATS (kernels.h: 256 KB, half of a Zen 3 core's L2). The AVX-512 set hands every float pass of 32 rows or more to AVX2. */
#define LANE_MAX_COLS 4096
ALWAYS_INLINE bool lane_pass(uint32_t type, int T, uint32_t cols)
{
    return type == MN_F32 && cols <= LANE_MAX_COLS && (size_t)T * cols >= MN_LANE_MIN_ACT_FLOATS;
}

/* Bytes of a packed block's quants (mn_q8_pack): 32 int8 for Q8_0, 16 nibble bytes for Q4_x. */
ALWAYS_INLINE size_t q_quant_bytes(uint32_t type) { return type == MN_Q8_0 ? 32 : 16; }

#endif
