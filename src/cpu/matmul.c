/* matmul.c - AVX2 matrix products with a fixed reduction order per output.
 *
 * Reduction order of one output (the contract every path below keeps, and mn_matmul_ref spells out):
 *   acc[0..8) = 0; for chunk c of 8 columns: acc = fma(w[c], x[c], acc)   (lane-wise)
 *   s = hsum(acc) as ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
 *   for the columns past the last full chunk (F32/F16 only): s = fma(w, x, s) in order
 * Quantized chunks are dequantized exactly as mn_dequant_row does (d*q, or d*q + m, unfused).
 *
 * A tile computes RT rows x OT outputs with RT*OT independent accumulators; the tile shape changes
 * only which chains run side by side, never the order inside one chain.
 */
#include "cpu/matmul.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "model/dtype.h"
#include "model/quant.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Chunk c (8 columns) of a row, dequantized. `type` is a constant after inlining. */
ALWAYS_INLINE __m256 load_chunk(uint32_t type, const uint8_t *row, int c)
{
    switch (type) {
    case MN_F32:
        return _mm256_loadu_ps((const float *)row + c * 8);
    case MN_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + c * 16)));
    case MN_Q8_0: {
        const uint8_t *b = row + (c >> 2) * 34;
        __m256 d = _mm256_set1_ps(_cvtsh_ss(*(const uint16_t *)b));
        __m128i q = _mm_loadl_epi64((const __m128i *)(b + 2 + (c & 3) * 8));
        return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
    case MN_Q4_0:
    case MN_Q4_1: {
        int q41 = type == MN_Q4_1;
        const uint8_t *b = row + (c >> 2) * (q41 ? 20 : 18);
        const uint8_t *qs = b + (q41 ? 4 : 2);
        int sub = c & 3;
        __m128i q = _mm_loadl_epi64((const __m128i *)(qs + (sub & 1) * 8));
        if (sub >= 2)
            q = _mm_srli_epi16(q, 4);
        q = _mm_and_si128(q, _mm_set1_epi8(15));
        __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
        __m256 d = _mm256_set1_ps(_cvtsh_ss(*(const uint16_t *)b));
        if (q41)
            return _mm256_add_ps(_mm256_mul_ps(d, qf), _mm256_set1_ps(_cvtsh_ss(*(const uint16_t *)(b + 2))));
        return _mm256_mul_ps(d, _mm256_sub_ps(qf, _mm256_set1_ps(8.0f)));
    }
    default:
        return _mm256_setzero_ps();
    }
}

ALWAYS_INLINE float hsum(__m256 a)
{
    __m128 lo = _mm256_castps256_ps128(a), hi = _mm256_extractf128_ps(a, 1);
    __m128 s = _mm_add_ps(lo, hi);                 /* a0+a4, a1+a5, a2+a6, a3+a7 */
    __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s)); /* (a0+a4)+(a2+a6), (a1+a5)+(a3+a7) */
    t = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
    return _mm_cvtss_f32(t);
}

ALWAYS_INLINE float scalar_w(uint32_t type, const uint8_t *row, int k)
{
    return type == MN_F32 ? ((const float *)row)[k] : mn_f16_to_f32(((const uint16_t *)row)[k]);
}

ALWAYS_INLINE void tile(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy,
                        int t0, uint32_t o0, const int RT, const int OT)
{
    const int n_chunks = (int)(W->cols / 8), tail = (int)(W->cols % 8);
    const uint8_t *rows[8];
    __m256 acc[4][8];
#pragma GCC unroll 8
    for (int o = 0; o < OT; o++)
        rows[o] = W->data + (size_t)(o0 + o) * W->row_bytes;
#pragma GCC unroll 4
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 8
        for (int o = 0; o < OT; o++)
            acc[t][o] = _mm256_setzero_ps();
    for (int c = 0; c < n_chunks; c++) {
#pragma GCC unroll 8
        for (int o = 0; o < OT; o++) {
            __m256 w = load_chunk(type, rows[o], c);
#pragma GCC unroll 4
            for (int t = 0; t < RT; t++)
                acc[t][o] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + (size_t)(t0 + t) * ldx + c * 8), acc[t][o]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 8
        for (int o = 0; o < OT; o++) {
            float s = hsum(acc[t][o]);
            const float *xr = x + (size_t)(t0 + t) * ldx;
            for (int k = n_chunks * 8; k < n_chunks * 8 + tail; k++)
                s = fmaf(scalar_w(type, rows[o], k), xr[k], s);
            y[(size_t)(t0 + t) * ldy + o0 + o] = s;
        }
}

/* Tile the [T x (o_begin, o_end)] block: outputs outer (a weight tile is read once from memory and
 * reused for every row), rows inner. */
ALWAYS_INLINE void matmul_typed(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y,
                                size_t ldy, int T, uint32_t ob, uint32_t oe)
{
    uint32_t o = ob;
    if (T == 1) {
        for (; o + 4 <= oe; o += 4)
            tile(type, W, x, ldx, y, ldy, 0, o, 1, 4);
        for (; o < oe; o++)
            tile(type, W, x, ldx, y, ldy, 0, o, 1, 1);
        return;
    }
    for (; o + 2 <= oe; o += 2) {
        int t = 0;
        for (; t + 4 <= T; t += 4)
            tile(type, W, x, ldx, y, ldy, t, o, 4, 2);
        for (; t < T; t++)
            tile(type, W, x, ldx, y, ldy, t, o, 1, 2);
    }
    for (; o < oe; o++)
        for (int t = 0; t < T; t++)
            tile(type, W, x, ldx, y, ldy, t, o, 1, 1);
}

#define DEFINE_MATMUL(name, type)                                                                 \
    static void name(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,   \
                     uint32_t ob, uint32_t oe)                                                      \
    {                                                                                               \
        matmul_typed(type, W, x, ldx, y, ldy, T, ob, oe);                                           \
    }
DEFINE_MATMUL(matmul_f32, MN_F32)
DEFINE_MATMUL(matmul_f16, MN_F16)
DEFINE_MATMUL(matmul_q8_0, MN_Q8_0)
DEFINE_MATMUL(matmul_q4_0, MN_Q4_0)
DEFINE_MATMUL(matmul_q4_1, MN_Q4_1)

void mn_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
               uint32_t o_begin, uint32_t o_end)
{
    switch (W->type) {
    case MN_F32: matmul_f32(W, x, ldx, y, ldy, T, o_begin, o_end); break;
    case MN_F16: matmul_f16(W, x, ldx, y, ldy, T, o_begin, o_end); break;
    case MN_Q8_0: matmul_q8_0(W, x, ldx, y, ldy, T, o_begin, o_end); break;
    case MN_Q4_0: matmul_q4_0(W, x, ldx, y, ldy, T, o_begin, o_end); break;
    case MN_Q4_1: matmul_q4_1(W, x, ldx, y, ldy, T, o_begin, o_end); break;
    default: break; /* the loader admits no other type */
    }
}

void mn_matmul_ref(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
                   uint32_t o_begin, uint32_t o_end)
{
    float wrow[W->cols];
    for (uint32_t o = o_begin; o < o_end; o++) {
        mn_dequant_row(W->type, W->data + (size_t)o * W->row_bytes, wrow, W->cols);
        for (int t = 0; t < T; t++) {
            const float *xr = x + (size_t)t * ldx;
            float lane[8] = {0};
            uint32_t full = W->cols / 8 * 8;
            for (uint32_t k = 0; k < full; k++)
                lane[k % 8] = fmaf(wrow[k], xr[k], lane[k % 8]);
            float s = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
            for (uint32_t k = full; k < W->cols; k++)
                s = fmaf(wrow[k], xr[k], s);
            y[(size_t)t * ldy + o] = s;
        }
    }
}

float mn_dot(const float *a, const float *b, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= n; k += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
    float s = hsum(acc);
    for (; k < n; k++)
        s = fmaf(a[k], b[k], s);
    return s;
}

void mn_axpy(float *y, float a, const float *x, int n)
{
    __m256 va = _mm256_set1_ps(a);
    int k = 0;
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(y + k, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k)));
    for (; k < n; k++)
        y[k] = fmaf(a, x[k], y[k]);
}
