/* kernels_x86.h - what the x86 kernel files share (kernels_avx2.c, kernels_avx512.c): helpers and
 * the tiles of the matrix products.
 *
 * Include it after the file's `#pragma GCC target`: every function here is static inline and
 * compiles for that file's instruction set (AVX2, FMA and F16C at least; with AVX-512 the tiles
 * get 32 registers and VNNI). Nothing here is a symbol of its own. */
#ifndef MN_KERNELS_X86_H
#define MN_KERNELS_X86_H

#include <immintrin.h>
#include <math.h>
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

/* out[i] = hsum(a[i]) for 8 accumulators: hsum's three steps each done once for all eight (12
 * shuffles, 7 adds and a permute, where 8 hsums take about 50 operations), every add with hsum's
 * operands in hsum's order, so the same bits. A tile sums its chains this way, eight at a time: in
 * an 8 x 6 tile over 256 columns the one-by-one sums were about a fifth of the tile's operations.
 * Alone (minions-bench-matmul, one core, the bundled target's shapes, T = 2..64, two alternating
 * runs on a Zen 5 core, 2026-11-30): AVX2's tiles 3-5% more GFLOP/s, the avx512 table's 1-5% from
 * T = 3 on (T = 2 level); the 512-bit tiles' form, f_hsums in kernels_avx512.c, 3-13%. */
ALWAYS_INLINE void hsums(const __m256 a[8], float out[8])
{
    __m256 s[4]; /* a0+a4 .. a3+a7 of a[2j], then of a[2j + 1] */
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        s[j] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x31));
    __m256 w[2]; /* per 128-bit lane: (s0+s2, s1+s3) of s[2k], then of s[2k+1] */
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        __m256d x = _mm256_castps_pd(s[2 * k]), y = _mm256_castps_pd(s[2 * k + 1]);
        w[k] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1))); /* a0 a2 a4 a6 a1 a3 a5 a7 */
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* exp(x) in 8 lanes, kernels.h's MN_EXP steps (relative error ~1e-7; e^88 ~ 1.7e38, so callers see
 * a huge value rather than infinity above the clamp). */
ALWAYS_INLINE __m256 exp_ps(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(MN_EXP_LO);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(MN_EXP_HI));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(MN_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(MN_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(MN_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(MN_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MN_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MN_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MN_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MN_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MN_EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* silu(g) * u = g / (1 + e^-g) * u over eight lanes. */
ALWAYS_INLINE __m256 swiglu8(__m256 g, __m256 u)
{
    __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g)));
    return _mm256_mul_ps(_mm256_div_ps(g, den), u);
}

/* The softmax's first pass: x[i] *= scale, 8 lanes at a time, and the largest of them. */
ALWAYS_INLINE float softmax_scale_max(float *x, int n, float scale)
{
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        _mm256_storeu_ps(x + i, v);
        vmax = _mm256_max_ps(v, vmax); /* v > vmax ? v : vmax: a NaN is passed over, as in C */
    }
    float mx = -INFINITY, lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    for (int l = 0; l < 8; l++)
        mx = lanes[l] > mx ? lanes[l] : mx;
    for (; i < n; i++) {
        x[i] *= scale;
        mx = x[i] > mx ? x[i] : mx;
    }
    return mx;
}

/* The softmax's second pass: x[j] = exp(x[j] - mx), 8 at a time into a sum (element j joins lane
 * j % 8), the last few through the same vector exp padded with lanes that come out 0; returns
 * hsum of the sum. */
ALWAYS_INLINE float softmax_exps(float *x, int n, float mx)
{
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        float pad[8];
        for (int l = 0; l < 8; l++)
            pad[l] = i + l < n ? x[i + l] - mx : -INFINITY;
        __m256 e = exp_ps(_mm256_loadu_ps(pad));
        _mm256_storeu_ps(pad, e);
        sum = _mm256_add_ps(sum, e);
        for (int l = 0; i + l < n; l++)
            x[i + l] = pad[l];
    }
    return hsum(sum);
}

/* Element k of an F32 or F16 row (a weight row's columns past the last full chunk of 8; a half-float
 * KV cache's attention rows). F16C's conversion, not mn_f16_to_f32 (both exact): a call after the
 * main loop clobbers every vector register, and GCC then kept the tiles' accumulators on the stack
 * through the whole loop (every F16 tile loaded and stored each chain at each chunk, about 2,300
 * stack accesses in the AVX-512 file). */
ALWAYS_INLINE float scalar_w(uint32_t type, const void *row, int k)
{
    return type == MN_F32 ? ((const float *)row)[k] : _cvtsh_ss(((const uint16_t *)row)[k]);
}

/* Eight elements of an F32 or F16 row from element k, as floats (F16C's conversion is exact). */
ALWAYS_INLINE __m256 load8(uint32_t type, const void *row, int k)
{
    return type == MN_F32 ? _mm256_loadu_ps((const float *)row + k)
                          : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
}

/* Attention's weighted sums of G heads for the elements [i, n) one at a time, each over the rows in
 * order (kernels_generic.c's form): the elements past the vector tables' last full register. */
ALWAYS_INLINE void weighted_sum_tail(float *out, size_t ldo, const float *w, size_t ldw, const void *const *rows,
                                     uint32_t type, int n_rows, int i, int n, int G)
{
    for (; i < n; i++)
        for (int h = 0; h < G; h++) {
            float s = 0.0f;
            for (int j = 0; j < n_rows; j++)
                s = fmaf(w[(size_t)h * ldw + j], scalar_w(type, rows[j], i), s);
            out[(size_t)h * ldo + i] = s;
        }
}

/* Whether kernels_avx2.c takes a float pass through lane panels (its comment says why this rule):
 * F32 weights of at most LANE_MAX_COLS columns, in a pass whose activations reach
 * MN_LANE_MIN_ACT_FLOATS (kernels.h: 256 KB, half of a Zen 3 core's L2). The AVX-512 set hands
 * every float pass of 32 rows or more to AVX2. */
#define LANE_MAX_COLS 4096
ALWAYS_INLINE bool lane_pass(uint32_t type, int T, uint32_t cols)
{
    return type == MN_F32 && cols <= LANE_MAX_COLS && (size_t)T * cols >= MN_LANE_MIN_ACT_FLOATS;
}

/* Bytes of a packed block's quants (mn_q8_pack): 32 int8 for Q8_0, 16 nibble bytes for Q4_x. */
ALWAYS_INLINE size_t q_quant_bytes(uint32_t type) { return type == MN_Q8_0 ? 32 : 16; }

/* ---- the tiles of the matrix products, shared by kernels_avx2.c and kernels_avx512.c ----------
 * Each file covers a matrix with them in its own shapes; compiled for AVX-512 the same tiles get 32
 * registers (so 24 chains fit) and VNNI's dot product. The reduction order is kernels_generic.c's
 * (kernels_avx2.c's opening comment), whatever the shape. */

/* Chunk c (8 columns) of a row, dequantized. `type` is a constant after inlining. */
ALWAYS_INLINE __m256 load_chunk(uint32_t type, const uint8_t *row, int c)
{
    switch (type) {
    case MN_F32:
    case MN_F16:
        return load8(type, row, c * 8);
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

/* Keep a loaded vector in a register: without this GCC folds the load into every FMA that uses it,
 * doubling the loads of a tile whose held side is reused (loads, not FMAs, then bound it). "v": any
 * vector register the target has (16, or 32 with AVX-512). */
#define IN_REGISTER(v) __asm__("" : "+v"(v))

/* One tile: RT rows (t0..) x OT outputs o0, o0 + stride, ..., RT*OT independent chains. The smaller
 * side is held in registers for a chunk and the larger one streamed past it (12 chains then need 15
 * registers and 8 loads per 12 FMAs); either way every chain takes its chunks in column order, so
 * neither the shape nor the stride ever changes a result. NPF > 0 prefetches the rows another tile
 * will read while this one runs from L1. */
ALWAYS_INLINE void tile(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy,
                        int t0, uint32_t o0, uint32_t stride, const int RT, const int OT, const int NPF,
                        const uint8_t *pf, size_t pf_step)
{
    const int n_chunks = (int)(W->cols / 8), tail = (int)(W->cols % 8);
    const uint8_t *rows[8];
    const float *xr[8];
    __m256 acc[8][8];
#pragma GCC unroll 8
    for (int o = 0; o < OT; o++)
        rows[o] = W->data + (size_t)(o0 + (uint32_t)o * stride) * W->row_bytes;
#pragma GCC unroll 8
    for (int t = 0; t < RT; t++)
        xr[t] = x + (size_t)(t0 + t) * ldx;
#pragma GCC unroll 8
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 8
        for (int o = 0; o < OT; o++)
            acc[t][o] = _mm256_setzero_ps();
    for (int c = 0; c < n_chunks; c++) {
        /* NPF rows from pf on, a stride apart, toward L2, at the pace this tile reads its own */
#pragma GCC unroll 8
        for (int i = 0; i < NPF; i++)
            _mm_prefetch((const char *)pf + (size_t)i * stride * W->row_bytes + (size_t)c * pf_step, _MM_HINT_T1);
        if (OT <= RT) { /* weights held, activations streamed */
            __m256 w[8];
#pragma GCC unroll 8
            for (int o = 0; o < OT; o++) {
                w[o] = load_chunk(type, rows[o], c);
                IN_REGISTER(w[o]); /* else GCC reloads the weights in every FMA: 12 loads per 9 in 3 x 3 */
            }
#pragma GCC unroll 8
            for (int t = 0; t < RT; t++) {
                __m256 xv = _mm256_loadu_ps(xr[t] + c * 8);
                IN_REGISTER(xv);
#pragma GCC unroll 8
                for (int o = 0; o < OT; o++)
                    acc[t][o] = _mm256_fmadd_ps(w[o], xv, acc[t][o]);
            }
        } else { /* activations held, weights streamed */
            __m256 xv[8];
#pragma GCC unroll 8
            for (int t = 0; t < RT; t++)
                xv[t] = _mm256_loadu_ps(xr[t] + c * 8);
#pragma GCC unroll 8
            for (int o = 0; o < OT; o++) {
                __m256 w = load_chunk(type, rows[o], c);
                IN_REGISTER(w); /* else GCC loads it again in every FMA: 14 loads per 12 FMAs in 2 x 6 */
#pragma GCC unroll 8
                for (int t = 0; t < RT; t++)
                    acc[t][o] = _mm256_fmadd_ps(w, xv[t], acc[t][o]);
            }
        }
    }
    /* the chains eight at a time (chain i = t OT + o), the last few one by one */
#pragma GCC unroll 8
    for (int g = 0; g < RT * OT; g += 8) {
        const int n = RT * OT - g < 8 ? RT * OT - g : 8;
        __m256 a[8];
        float sums[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            a[i] = i < n ? acc[(g + i) / OT][(g + i) % OT] : _mm256_setzero_ps();
        if (n == 8)
            hsums(a, sums);
        else
#pragma GCC unroll 8
            for (int i = 0; i < n; i++)
                sums[i] = hsum(a[i]);
#pragma GCC unroll 8
        for (int i = 0; i < n; i++) {
            const int t = (g + i) / OT, o = (g + i) % OT;
            float s = sums[i];
            for (int k = n_chunks * 8; k < n_chunks * 8 + tail; k++)
                s = fmaf(scalar_w(type, rows[o], k), xr[t][k], s);
            y[(size_t)(t0 + t) * ldy + o0 + (uint32_t)o * stride] = s;
        }
    }
}

/* The 32 weight integers of a block's quants as int16: lo = elements 0..15, hi = elements 16..31. */
ALWAYS_INLINE void load_wq(uint32_t type, const uint8_t *qs, __m256i *lo, __m256i *hi)
{
    if (type == MN_Q8_0) {
        *lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)qs));
        *hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qs + 16)));
        return;
    }
    /* byte k holds element k in its low nibble and element 16 + k in its high one */
    __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)qs));
    *lo = _mm256_and_si256(w, _mm256_set1_epi16(15));
    *hi = _mm256_srli_epi16(w, 4);
    if (type == MN_Q4_0) {
        *lo = _mm256_sub_epi16(*lo, _mm256_set1_epi16(8));
        *hi = _mm256_sub_epi16(*hi, _mm256_set1_epi16(8));
    }
}

/* 8 int32 lanes: lane l = w[2l]x[2l] + w[2l+1]x[2l+1] + w[16+2l]x[16+2l] + w[17+2l]x[17+2l]. Exact
 * (int32 arithmetic wraps alike either way), so AVX-512 VNNI's two vpdpwssd give vpmaddwd + vpaddd's
 * bits in one instruction fewer. */
ALWAYS_INLINE __m256i dot_lanes(__m256i wlo, __m256i whi, __m256i xlo, __m256i xhi)
{
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpwssd_epi32(_mm256_dpwssd_epi32(_mm256_setzero_si256(), wlo, xlo), whi, xhi);
#else
    return _mm256_add_epi32(_mm256_madd_epi16(wlo, xlo), _mm256_madd_epi16(whi, xhi));
#endif
}

/* Software prefetch of the weight stream, which the hardware prefetchers follow poorly when a tile
 * reads several adjacent rows at once. Wider tiles prefetch 384 bytes ahead in their own rows.
 * Measured in A/B runs on SmolLM2 decode (before the packed layout): 109-119 tok/s without
 * prefetch, 123-137 with 384 bytes ahead, 143-147 with a single-row tile prefetching the rows one
 * tile further down. Decode now reads four rows a quarter of the outputs apart (stride), four
 * streams the hardware follows by itself, as in kernels_avx2.c's float path: SmolLM2 Q4_1 decode
 * 143 -> 183 tok/s (tools/ab-decode.py: medians of 10 alternating rounds, batch 1); prefetching
 * one or two rows ahead in each stream on top changed nothing. */
#define PREFETCH_BYTES 384

/* Whether a quantized tile holds its rows' activations in registers across its outputs (2 per row)
 * rather than loading them again for each output: with 32 registers (AVX-512) they fit beside the
 * chains, and a (block, row) pair's two activation loads and scale broadcast had bound the tile as
 * much as its two vpdpwssd and one FMA did (loads: 3 a pair, at most 2 a cycle). SmolLM2 Q4_1
 * verification passes of 1..8 tokens took 0.94-0.96x the time, of four sequences 0.96-1.01x
 * (tools/ab-decode.py --verify-curve, 8 rounds); decode of 16 sequences 1.04x, of one level. */
#ifdef __AVX512F__
#define Q8_HOLD_X 1
#else
#define Q8_HOLD_X 0
#endif

#define Q8_MAX_RT 5 /* the most rows of a quantized tile (kernels_avx512.c's 5 x 4) */

ALWAYS_INLINE void tile_q8(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy,
                           int t0, uint32_t o0, uint32_t stride, const int RT, const int OT)
{
    const int nb = (int)(W->cols / 32), ng = (nb + 7) / 8, q41 = type == MN_Q4_1;
    const size_t qb = q_quant_bytes(type), ahead = RT == 1 ? (size_t)OT * W->row_bytes : PREFETCH_BYTES;
    const bool prefetch = stride == 1; /* rows a stride apart are streams the hardware follows */
    const uint8_t *dp[4], *mp[4], *qp[4];
    __m256 acc[Q8_MAX_RT][4];
#pragma GCC unroll 4
    for (int o = 0; o < OT; o++) {
        dp[o] = W->data + (size_t)(o0 + (uint32_t)o * stride) * W->row_bytes;
        mp[o] = dp[o] + 2 * (size_t)nb;
        qp[o] = dp[o] + 2 * (size_t)nb * (1 + q41);
    }
#pragma GCC unroll 5
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 4
        for (int o = 0; o < OT; o++)
            acc[t][o] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const int n = nb - 8 * g < 8 ? nb - 8 * g : 8;
        /* the group's scales dw_b * dx_b, computed 8 at a time, broadcast block by block from here */
        float sc[Q8_MAX_RT][4][8] __attribute__((aligned(32)));
#pragma GCC unroll 4
        for (int o = 0; o < OT; o++) {
            if (prefetch)
                _mm_prefetch((const char *)(dp[o] + 16 * g) + ahead, _MM_HINT_T0);
            __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp[o] + 16 * g)));
#pragma GCC unroll 5
            for (int t = 0; t < RT; t++)
                _mm256_store_ps(sc[t][o], _mm256_mul_ps(dw, _mm256_loadu_ps(xq[(size_t)(t0 + t) * ldxq + g].d)));
        }
        for (int j = 0; j < n; j++) {
            const size_t b = (size_t)(8 * g + j);
            __m256i xlo[Q8_MAX_RT], xhi[Q8_MAX_RT]; /* the block's activations, once for all OT outputs */
#pragma GCC unroll 5
            for (int t = 0; t < RT; t++) {
                const int16_t *x = xq[(size_t)(t0 + t) * ldxq + g].qs[j];
                xlo[t] = _mm256_loadu_si256((const __m256i *)x);
                xhi[t] = _mm256_loadu_si256((const __m256i *)(x + 16));
                if (Q8_HOLD_X && OT > 1) {
                    IN_REGISTER(xlo[t]);
                    IN_REGISTER(xhi[t]);
                }
            }
#pragma GCC unroll 4
            for (int o = 0; o < OT; o++) {
                if (prefetch)
                    _mm_prefetch((const char *)(qp[o] + b * qb) + ahead, _MM_HINT_T0);
                __m256i wlo, whi;
                load_wq(type, qp[o] + b * qb, &wlo, &whi);
#pragma GCC unroll 5
                for (int t = 0; t < RT; t++)
                    acc[t][o] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[t][o][j]),
                                                _mm256_cvtepi32_ps(dot_lanes(wlo, whi, xlo[t], xhi[t])), acc[t][o]);
            }
        }
        if (q41) {
            __m256 keep = _mm256_castsi256_ps(
                _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
#pragma GCC unroll 4
            for (int o = 0; o < OT; o++) {
                __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mp[o] + 16 * g)));
                m = _mm256_and_ps(m, keep); /* past the row's end: other bytes of the row */
#pragma GCC unroll 5
                for (int t = 0; t < RT; t++)
                    acc[t][o] = _mm256_fmadd_ps(m, _mm256_loadu_ps(xq[(size_t)(t0 + t) * ldxq + g].s), acc[t][o]);
            }
        }
    }
#pragma GCC unroll 5
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 4
        for (int o = 0; o < OT; o++)
            y[(size_t)(t0 + t) * ldy + o0 + (uint32_t)o * stride] = hsum(acc[t][o]);
}

/* A file's mn_cpu_kernels.matmul_q8 entry `name`: its `typed` function (defined before this, with
 * the weight type as its first argument) compiled once per quantized type, where the type is a
 * constant, and picked by W->type. */
#define DEFINE_MATMUL_Q8_ENTRY(name, typed)                                                           \
    static void name##_q8_0(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy,   \
                            int T, uint32_t ob, uint32_t oe)                                          \
    {                                                                                                 \
        typed(MN_Q8_0, W, xq, ldxq, y, ldy, T, ob, oe);                                               \
    }                                                                                                 \
    static void name##_q4_0(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy,   \
                            int T, uint32_t ob, uint32_t oe)                                          \
    {                                                                                                 \
        typed(MN_Q4_0, W, xq, ldxq, y, ldy, T, ob, oe);                                               \
    }                                                                                                 \
    static void name##_q4_1(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy,   \
                            int T, uint32_t ob, uint32_t oe)                                          \
    {                                                                                                 \
        typed(MN_Q4_1, W, xq, ldxq, y, ldy, T, ob, oe);                                               \
    }                                                                                                 \
    static void name(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy, int T,   \
                     uint32_t ob, uint32_t oe)                                                        \
    {                                                                                                 \
        switch (W->type) {                                                                            \
        case MN_Q8_0: name##_q8_0(W, xq, ldxq, y, ldy, T, ob, oe); break;                             \
        case MN_Q4_0: name##_q4_0(W, xq, ldxq, y, ldy, T, ob, oe); break;                             \
        case MN_Q4_1: name##_q4_1(W, xq, ldxq, y, ldy, T, ob, oe); break;                             \
        default: break; /* mn_weight_uses_q8 is false for every other type */                        \
        }                                                                                             \
    }

#endif
