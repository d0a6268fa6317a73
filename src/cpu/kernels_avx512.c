/* kernels_avx512.c - the kernel table for AVX-512 (F, BW, DQ, VL) with VNNI: the integer products
 * of quantized weights in 512-bit registers, and float weights in passes of 3 to 31 rows
 * (verification's shape) in 8-lane chains that use all 32 vector registers; every other slot is
 * the AVX2 table's.
 *
 * The products keep kernels_generic.c's reduction order exactly, so this table gives the same bits
 * as the others. Float weights: each output's chain is AVX2's 8-lane accumulator, in tiles of up
 * to 24 chains (AVX2's 16 registers hold 12), so that a pass of up to 7 rows reads each weight
 * once. 512-bit float tiles (two chains per register, the weights of two rows side by side) came
 * first and were dropped: on a Zen 4 core, whose 512-bit FMAs take both 256-bit pipes, they
 * reached 48-89 GFLOP/s where AVX2's 2 x 6 tiles reached 57-106. Quantized weights: a 512-bit
 * register holds two chains side by side, lanes 0..7 output o's, lanes 8..15 output o+1's, for the
 * same token; one block of 32 weights of both outputs is widened to int16 in one register
 * (elements 0..15 of o, then of o+1), the token's 16 activations are duplicated into both halves,
 * and vpdpwssd forms the 8 pair sums of each output at once (integer, exact, so the same p as
 * vpmaddwd + vpaddd). The float steps (scale, FMA into the chain, the Q4_1 min term) are
 * lane-wise, as in AVX2, and each half is summed at the end with the same horizontal order.
 *
 * The file is written against a few vector primitives (v16f, v16i below). Compiled normally
 * they are AVX-512 instructions; compiled with MN_X16_EMULATE (kernels_avx512_emu.c) each is two
 * AVX2 operations on the halves, which gives the table "avx512-emu": the same tiles, index
 * arithmetic and lane layout, runnable and tested bit for bit on CPUs without AVX-512. Only the
 * one-line mapping of each primitive to its AVX-512 instruction is not exercised there.
 */
#include "cpu/kernels.h"

#if defined(__x86_64__)
#ifdef MN_X16_EMULATE
#pragma GCC target("avx2,fma,f16c")
#else
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

#include <math.h>

#include "cpu/kernels_x86.h"

/* ---- primitives: 16 float lanes (v16f), 16 int32 / 32 int16 lanes (v16i) ----------------------
 * Lanes 0..7 (int16 lanes 0..15) are the low half, output o's; the rest the high half, o+1's. */
#ifdef MN_X16_EMULATE
typedef struct v16f {
    __m256 h[2];
} v16f;
typedef struct v16i {
    __m256i h[2];
} v16i;

ALWAYS_INLINE v16f f_zero(void) { return (v16f){{_mm256_setzero_ps(), _mm256_setzero_ps()}}; }
ALWAYS_INLINE v16f f_halves(__m256 lo, __m256 hi) { return (v16f){{lo, hi}}; }
ALWAYS_INLINE v16f f_dup(__m256 v) { return (v16f){{v, v}}; }
ALWAYS_INLINE __m256 f_half(v16f a, int hi) { return a.h[hi]; }
ALWAYS_INLINE v16f f_mul(v16f a, v16f b)
{
    return (v16f){{_mm256_mul_ps(a.h[0], b.h[0]), _mm256_mul_ps(a.h[1], b.h[1])}};
}
ALWAYS_INLINE v16f f_fmadd(v16f a, v16f b, v16f c)
{
    return (v16f){{_mm256_fmadd_ps(a.h[0], b.h[0], c.h[0]), _mm256_fmadd_ps(a.h[1], b.h[1], c.h[1])}};
}
ALWAYS_INLINE v16f f_from_i32(v16i p) { return (v16f){{_mm256_cvtepi32_ps(p.h[0]), _mm256_cvtepi32_ps(p.h[1])}}; }
/* lanes 0..7 = a's lane j, lanes 8..15 = a's lane 8 + j */
ALWAYS_INLINE v16f f_lane(v16f a, int j)
{
    __m256i idx = _mm256_set1_epi32(j);
    return (v16f){{_mm256_permutevar8x32_ps(a.h[0], idx), _mm256_permutevar8x32_ps(a.h[1], idx)}};
}
/* 16 bytes at lo and 16 at hi, widened to int16 (zero- or sign-extended) */
ALWAYS_INLINE v16i i_widen_u8(const uint8_t *lo, const uint8_t *hi)
{
    return (v16i){{_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)lo)),
                   _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)hi))}};
}
ALWAYS_INLINE v16i i_widen_i8(const uint8_t *lo, const uint8_t *hi)
{
    return (v16i){{_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)lo)),
                   _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)hi))}};
}
ALWAYS_INLINE v16i i16_and(v16i a, int16_t m)
{
    __m256i v = _mm256_set1_epi16(m);
    return (v16i){{_mm256_and_si256(a.h[0], v), _mm256_and_si256(a.h[1], v)}};
}
ALWAYS_INLINE v16i i16_srl4(v16i a) { return (v16i){{_mm256_srli_epi16(a.h[0], 4), _mm256_srli_epi16(a.h[1], 4)}}; }
ALWAYS_INLINE v16i i16_sub(v16i a, int16_t s)
{
    __m256i v = _mm256_set1_epi16(s);
    return (v16i){{_mm256_sub_epi16(a.h[0], v), _mm256_sub_epi16(a.h[1], v)}};
}
/* 16 int16 at x in both halves */
ALWAYS_INLINE v16i i16_dup(const int16_t *x)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)x);
    return (v16i){{v, v}};
}
/* int32 lane l of each half: w_lo[2l]x_lo[2l] + w_lo[2l+1]x_lo[2l+1] + the same of w_hi, x_hi */
ALWAYS_INLINE v16i i_dot(v16i wlo, v16i xlo, v16i whi, v16i xhi)
{
    __m256i a0 = _mm256_madd_epi16(wlo.h[0], xlo.h[0]), b0 = _mm256_madd_epi16(whi.h[0], xhi.h[0]);
    __m256i a1 = _mm256_madd_epi16(wlo.h[1], xlo.h[1]), b1 = _mm256_madd_epi16(whi.h[1], xhi.h[1]);
    return (v16i){{_mm256_add_epi32(a0, b0), _mm256_add_epi32(a1, b1)}};
}
#else
typedef __m512 v16f;
typedef __m512i v16i;

ALWAYS_INLINE v16f f_zero(void) { return _mm512_setzero_ps(); }
ALWAYS_INLINE v16f f_halves(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }
ALWAYS_INLINE v16f f_dup(__m256 v) { return _mm512_broadcast_f32x8(v); }
ALWAYS_INLINE __m256 f_half(v16f a, int hi) { return hi ? _mm512_extractf32x8_ps(a, 1) : _mm512_castps512_ps256(a); }
ALWAYS_INLINE v16f f_mul(v16f a, v16f b) { return _mm512_mul_ps(a, b); }
ALWAYS_INLINE v16f f_fmadd(v16f a, v16f b, v16f c) { return _mm512_fmadd_ps(a, b, c); }
ALWAYS_INLINE v16f f_from_i32(v16i p) { return _mm512_cvtepi32_ps(p); }
ALWAYS_INLINE v16f f_lane(v16f a, int j)
{
    return _mm512_permutexvar_ps(_mm512_inserti64x4(_mm512_set1_epi32(j), _mm256_set1_epi32(8 + j), 1), a);
}
ALWAYS_INLINE v16i i_widen_u8(const uint8_t *lo, const uint8_t *hi)
{
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)lo)),
                                        _mm_loadu_si128((const __m128i *)hi), 1);
    return _mm512_cvtepu8_epi16(b);
}
ALWAYS_INLINE v16i i_widen_i8(const uint8_t *lo, const uint8_t *hi)
{
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)lo)),
                                        _mm_loadu_si128((const __m128i *)hi), 1);
    return _mm512_cvtepi8_epi16(b);
}
ALWAYS_INLINE v16i i16_and(v16i a, int16_t m) { return _mm512_and_si512(a, _mm512_set1_epi16(m)); }
ALWAYS_INLINE v16i i16_srl4(v16i a) { return _mm512_srli_epi16(a, 4); }
ALWAYS_INLINE v16i i16_sub(v16i a, int16_t s) { return _mm512_sub_epi16(a, _mm512_set1_epi16(s)); }
ALWAYS_INLINE v16i i16_dup(const int16_t *x) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x)); }
ALWAYS_INLINE v16i i_dot(v16i wlo, v16i xlo, v16i whi, v16i xhi)
{
    return _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), wlo, xlo), whi, xhi);
}
#endif

/* ---- float weights (F32, F16) in passes shorter than prefill: verification's shape ------------- */

/* These tiles keep AVX2's 8-lane chains (kernels_avx2.c's tile, the same reduction) and use what
 * AVX-512 adds for them: 32 vector registers. A tile of RT rows x OT outputs holds its OT weight
 * chunks and RT * OT chains (up to 24) in registers and streams the rows past them (4 x 6: 10 loads
 * per 24 FMAs, where AVX2's 2 x 6 takes 8 per 12), so a pass of up to 7 rows reads each weight
 * once, in one sweep. The OT outputs lie a fraction of the thread's range apart, as in AVX2's
 * tiles, so the hardware prefetcher follows OT streams. Under MN_X16_EMULATE (16 registers) the
 * same code spills; it is there for the tests' bits, not for speed. */
ALWAYS_INLINE __m256 chunk_f(uint32_t type, const uint8_t *row, int c)
{
    if (type == MN_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 16 * c)));
    return _mm256_loadu_ps((const float *)row + 8 * c);
}

ALWAYS_INLINE void tile_y(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy,
                          int t0, uint32_t o0, uint32_t stride, const int RT, const int OT, const uint8_t *pf,
                          size_t pf_step)
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
        if (pf) /* the next group's rows toward L2, at the pace this tile reads its own */
#pragma GCC unroll 8
            for (int o = 0; o < OT; o++)
                _mm_prefetch((const char *)pf + (size_t)o * stride * W->row_bytes + (size_t)c * pf_step, _MM_HINT_T1);
        __m256 w[8];
#pragma GCC unroll 8
        for (int o = 0; o < OT; o++) {
            w[o] = chunk_f(type, rows[o], c);
            __asm__("" : "+v"(w[o])); /* in a register, not folded into every FMA (kernels_avx2.c) */
        }
#pragma GCC unroll 8
        for (int t = 0; t < RT; t++) {
            __m256 xv = _mm256_loadu_ps(xr[t] + c * 8);
            __asm__("" : "+v"(xv));
#pragma GCC unroll 8
            for (int o = 0; o < OT; o++)
                acc[t][o] = _mm256_fmadd_ps(w[o], xv, acc[t][o]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 8
        for (int o = 0; o < OT; o++) {
            float s = hsum(acc[t][o]);
            for (int k = n_chunks * 8; k < n_chunks * 8 + tail; k++)
                s = fmaf(scalar_w(type, rows[o], k), xr[t][k], s);
            y[(size_t)(t0 + t) * ldy + o0 + (uint32_t)o * stride] = s;
        }
}

/* The rows in blocks of RB and one of the remaining 1..RB-1, each block one tile of OT outputs.
 * With more than one block, the second prefetches the next group's rows (o + 1) into L2 while the
 * others run on this group's from L1, as kernels_avx2.c's 2 x 6 tiles do. */
ALWAYS_INLINE void rows_y(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy,
                          int T, uint32_t o, uint32_t stride, bool last, const int RB, const int OT)
{
#define TILE_Y(RT, PF) tile_y(type, W, x, ldx, y, ldy, t, o, stride, RT, OT, PF, pf_step)
    const size_t pf_step = W->cols >= 8 ? W->row_bytes / (W->cols / 8) : 0;
    const uint8_t *next = last ? NULL : W->data + (size_t)(o + 1) * W->row_bytes;
    int t = 0;
    for (; t + RB <= T; t += RB)
        TILE_Y(RB, t == RB ? next : NULL);
    const uint8_t *pf = t == RB ? next : NULL;
    switch (T - t) {
    case 7: TILE_Y(7, pf); break;
    case 6: TILE_Y(6, pf); break;
    case 5: TILE_Y(5, pf); break;
    case 4: TILE_Y(4, pf); break;
    case 3: TILE_Y(3, pf); break;
    case 2: TILE_Y(2, pf); break;
    case 1: TILE_Y(1, pf); break;
    default: break;
    }
#undef TILE_Y
}

/* OT outputs a tile, a q = range / OT apart; the outputs past the last full stride one at a time. */
ALWAYS_INLINE void outputs_y(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy,
                             int T, uint32_t ob, uint32_t oe, const int RB, const int OT)
{
    const uint32_t q = (oe - ob) / (uint32_t)OT;
    for (uint32_t o = ob; o < ob + q; o++)
        rows_y(type, W, x, ldx, y, ldy, T, o, q, o + 1 == ob + q, RB, OT);
    for (uint32_t o = ob + (uint32_t)OT * q; o < oe; o++)
        rows_y(type, W, x, ldx, y, ldy, T, o, 1, true, RB, 1);
}

/* The tile by the rows of the pass (2 rows go to AVX2's 2 x 6): 3 x 6, 5 x 4, 6 x 4 and 7 x 3 in
 * one sweep over the weights; 4 and more than 7 in blocks of 4 x 6. On a Zen 4 core
 * (minions-bench-matmul, F32, L2-resident and 9.4 MB matrices) these reach 85-112 GFLOP/s at
 * T = 3..16, against 48-89 for the 512-bit tiles they replace and 57-106 for AVX2's; 7 x 3 beat
 * 4 x 6 + 3 x 6 there at T = 7 (84-96 against 64-84). */
ALWAYS_INLINE void matmul_f_typed(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y,
                                  size_t ldy, int T, uint32_t ob, uint32_t oe)
{
    if (T == 3)
        outputs_y(type, W, x, ldx, y, ldy, T, ob, oe, 3, 6);
    else if (T == 5 || T == 6)
        outputs_y(type, W, x, ldx, y, ldy, T, ob, oe, 6, 4);
    else if (T == 7)
        outputs_y(type, W, x, ldx, y, ldy, T, ob, oe, 7, 3);
    else
        outputs_y(type, W, x, ldx, y, ldy, T, ob, oe, 4, 6);
}

static void matmul_f32(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T, uint32_t ob,
                       uint32_t oe)
{
    matmul_f_typed(MN_F32, W, x, ldx, y, ldy, T, ob, oe);
}

static void matmul_f16(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T, uint32_t ob,
                       uint32_t oe)
{
    matmul_f_typed(MN_F16, W, x, ldx, y, ldy, T, ob, oe);
}

/* Float weights in passes of 2 to X16_MAX_T - 1 rows here; longer ones go to AVX2, whose 2 x 6
 * tiles and lane panels (lane_pass) were measured for them. One row (decode: it streams the
 * weights, the width of the registers does not matter) and quantized weights in the float path
 * (the tests' twin; the backend takes the integer path) go to AVX2 too. */
#define X16_MAX_T 32
static void x16_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
                       uint32_t o_begin, uint32_t o_end)
{
    const bool short_pass = T >= 3 && T < X16_MAX_T;
    if (short_pass && W->type == MN_F32)
        matmul_f32(W, x, ldx, y, ldy, T, o_begin, o_end);
    else if (short_pass && W->type == MN_F16)
        matmul_f16(W, x, ldx, y, ldy, T, o_begin, o_end);
    else
        mn_kernels_avx2.matmul(W, x, ldx, y, ldy, T, o_begin, o_end);
}

/* The 32 weight integers of one block of two outputs (quants at a and b): lo = elements 0..15 of
 * a then of b, hi = elements 16..31 of a then of b. */
ALWAYS_INLINE void load_wq2(uint32_t type, const uint8_t *a, const uint8_t *b, v16i *lo, v16i *hi)
{
    if (type == MN_Q8_0) {
        *lo = i_widen_i8(a, b);
        *hi = i_widen_i8(a + 16, b + 16);
        return;
    }
    /* byte k holds element k in its low nibble and element 16 + k in its high one */
    v16i w = i_widen_u8(a, b);
    *lo = i16_and(w, 15);
    *hi = i16_srl4(w);
    if (type == MN_Q4_0) {
        *lo = i16_sub(*lo, 8);
        *hi = i16_sub(*hi, 8);
    }
}

/* RT tokens (t0..) x OT outputs (o0.., OT <= 2 OP) in OP pair registers per token. An odd OT's
 * last pair reads its one row twice and stores the low half only. Prefetching as kernels_avx2.c's
 * tile_q8 did before its decode tiles took rows a quarter apart (not measured on AVX-512
 * hardware since): a single-token tile one tile ahead in the same rows, wider ones 384 bytes ahead. */
ALWAYS_INLINE void tile_q8x2(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy,
                             int t0, uint32_t o0, const int RT, const int OT, const int OP)
{
    const int nb = (int)(W->cols / 32), ng = (nb + 7) / 8, q41 = type == MN_Q4_1;
    const size_t qb = q_quant_bytes(type), ahead = RT == 1 ? (size_t)OT * W->row_bytes : 384;
    const uint8_t *dp[8], *mp[8], *qp[8];
    v16f acc[4][4];
#pragma GCC unroll 8
    for (int o = 0; o < 2 * OP; o++) {
        dp[o] = W->data + (size_t)(o0 + (o < OT ? o : OT - 1)) * W->row_bytes;
        mp[o] = dp[o] + 2 * (size_t)nb;
        qp[o] = dp[o] + 2 * (size_t)nb * (1 + q41);
    }
#pragma GCC unroll 4
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 4
        for (int p = 0; p < OP; p++)
            acc[t][p] = f_zero();
    for (int g = 0; g < ng; g++) {
        const int n = nb - 8 * g < 8 ? nb - 8 * g : 8;
        /* the group's scales dw_b * dx_b of both outputs of a pair, lane j / 8 + j = block j */
        v16f sc[4][4];
#pragma GCC unroll 4
        for (int p = 0; p < OP; p++) {
            v16f dw = f_halves(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp[2 * p] + 16 * g))),
                               _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp[2 * p + 1] + 16 * g))));
#pragma GCC unroll 4
            for (int t = 0; t < RT; t++)
                sc[t][p] = f_mul(dw, f_dup(_mm256_loadu_ps(xq[(size_t)(t0 + t) * ldxq + g].d)));
        }
        for (int j = 0; j < n; j++) {
            const size_t b = (size_t)(8 * g + j);
            v16i xlo[4], xhi[4];
#pragma GCC unroll 4
            for (int t = 0; t < RT; t++) {
                const int16_t *x = xq[(size_t)(t0 + t) * ldxq + g].qs[j];
                xlo[t] = i16_dup(x);
                xhi[t] = i16_dup(x + 16);
            }
#pragma GCC unroll 4
            for (int p = 0; p < OP; p++) {
                _mm_prefetch((const char *)(qp[2 * p] + b * qb) + ahead, _MM_HINT_T0);
                if (2 * p + 1 < OT)
                    _mm_prefetch((const char *)(qp[2 * p + 1] + b * qb) + ahead, _MM_HINT_T0);
                v16i wlo, whi;
                load_wq2(type, qp[2 * p] + b * qb, qp[2 * p + 1] + b * qb, &wlo, &whi);
#pragma GCC unroll 4
                for (int t = 0; t < RT; t++)
                    acc[t][p] = f_fmadd(f_lane(sc[t][p], j), f_from_i32(i_dot(wlo, xlo[t], whi, xhi[t])), acc[t][p]);
            }
        }
        if (q41) {
            __m256 keep = _mm256_castsi256_ps(
                _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
#pragma GCC unroll 4
            for (int p = 0; p < OP; p++) {
                /* past the row's end the bytes are other data of the row: masked to 0 */
                v16f m = f_halves(
                    _mm256_and_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mp[2 * p] + 16 * g))), keep),
                    _mm256_and_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mp[2 * p + 1] + 16 * g))), keep));
#pragma GCC unroll 4
                for (int t = 0; t < RT; t++)
                    acc[t][p] = f_fmadd(m, f_dup(_mm256_loadu_ps(xq[(size_t)(t0 + t) * ldxq + g].s)), acc[t][p]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 8
        for (int o = 0; o < OT; o++)
            y[(size_t)(t0 + t) * ldy + o0 + o] = hsum(f_half(acc[t][o / 2], o & 1));
}

/* Outputs outer (a weight tile is read from memory once and reused for every token), tokens
 * inner: one token (decode) in 1 x 8 tiles; more in 4 x 4 tiles, then 2 x 4 and 1 x 4 for the
 * remaining tokens; the last outputs in a tile of their own width. */
ALWAYS_INLINE void matmul_q8_typed(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y,
                                   size_t ldy, int T, uint32_t ob, uint32_t oe)
{
#define Q8_TILES(OT, OP)                                                                           \
    do {                                                                                           \
        int t_ = 0;                                                                                \
        for (; t_ + 4 <= T; t_ += 4)                                                               \
            tile_q8x2(type, W, xq, ldxq, y, ldy, t_, o, 4, OT, OP);                                \
        for (; t_ + 2 <= T; t_ += 2)                                                               \
            tile_q8x2(type, W, xq, ldxq, y, ldy, t_, o, 2, OT, OP);                                \
        for (; t_ < T; t_++)                                                                       \
            tile_q8x2(type, W, xq, ldxq, y, ldy, t_, o, 1, OT, OP);                                \
    } while (0)
    uint32_t o = ob;
    if (T == 1) {
        for (; o + 8 <= oe; o += 8)
            tile_q8x2(type, W, xq, ldxq, y, ldy, 0, o, 1, 8, 4);
    } else {
        for (; o + 4 <= oe; o += 4)
            Q8_TILES(4, 2);
    }
    switch (oe - o) { /* fewer than a tile's outputs left */
    case 7: Q8_TILES(7, 4); break;
    case 6: Q8_TILES(6, 3); break;
    case 5: Q8_TILES(5, 3); break;
    case 4: Q8_TILES(4, 2); break;
    case 3: Q8_TILES(3, 2); break;
    case 2: Q8_TILES(2, 1); break;
    case 1: Q8_TILES(1, 1); break;
    default: break;
    }
#undef Q8_TILES
}

#define DEFINE_MATMUL_Q8(name, type)                                                                 \
    static void name(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy, int T,    \
                     uint32_t ob, uint32_t oe)                                                         \
    {                                                                                                  \
        matmul_q8_typed(type, W, xq, ldxq, y, ldy, T, ob, oe);                                         \
    }
DEFINE_MATMUL_Q8(matmul_q8_q8_0, MN_Q8_0)
DEFINE_MATMUL_Q8(matmul_q8_q4_0, MN_Q4_0)
DEFINE_MATMUL_Q8(matmul_q8_q4_1, MN_Q4_1)

static void x16_matmul_q8(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy, int T,
                          uint32_t o_begin, uint32_t o_end)
{
    switch (W->type) {
    case MN_Q8_0: matmul_q8_q8_0(W, xq, ldxq, y, ldy, T, o_begin, o_end); break;
    case MN_Q4_0: matmul_q8_q4_0(W, xq, ldxq, y, ldy, T, o_begin, o_end); break;
    case MN_Q4_1: matmul_q8_q4_1(W, xq, ldxq, y, ldy, T, o_begin, o_end); break;
    default: break; /* mn_weight_uses_q8 is false for every other type */
    }
}

#ifdef MN_X16_EMULATE
static int x16_usable(void) { return mn_kernels_avx2.usable(); }
#define X16_TABLE mn_kernels_avx512_emu
#define X16_NAME "avx512-emu"
#else
static int x16_usable(void)
{
    __builtin_cpu_init();
    return mn_kernels_avx2.usable() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
}
#define X16_TABLE mn_kernels_avx512
#define X16_NAME "avx512"
#endif

const mn_cpu_kernels X16_TABLE = {
    .name = X16_NAME,
    .usable = x16_usable,
    .base = &mn_kernels_avx2, /* the attention kernels, the quantization */
    .matmul = x16_matmul,
    .matmul_q8 = x16_matmul_q8,
};

#else /* not x86-64 */

static int x16_usable(void) { return 0; }
#ifdef MN_X16_EMULATE
const mn_cpu_kernels mn_kernels_avx512_emu = {.name = "avx512-emu", .usable = x16_usable};
#else
const mn_cpu_kernels mn_kernels_avx512 = {.name = "avx512", .usable = x16_usable};
#endif

#endif
