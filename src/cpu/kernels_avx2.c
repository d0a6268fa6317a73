/* kernels_avx2.c - the kernel table for AVX2 + FMA + F16C (x86-64-v3).
 *
 * Reduction order of one matrix output (the contract of every path below; kernels_generic.c spells
 * it out in plain loops and is the reference these must equal bit for bit):
 *   acc[0..8) = 0; for chunk c of 8 columns: acc = fma(w[c], x[c], acc)   (lane-wise)
 *   s = hsum(acc) as ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
 *   for the columns past the last full chunk (F32/F16 only): s = fma(w, x, s) in order
 * Quantized chunks are dequantized exactly as mn_dequant_row does (d*q, or d*q + m, unfused).
 *
 * A tile computes RT rows x OT outputs with RT*OT independent accumulators; the tile shape changes
 * only which chains run side by side, never the order inside one chain.
 *
 * The file is compiled for the baseline like the rest of the library; the pragma below lets these
 * functions (and only these) use the wider instructions, and matmul.c calls them only where
 * mn_kernels_avx2.usable() says the CPU has them.
 */
#include "cpu/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")

#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu/kernels_x86.h"
#include "model/draw.h"

/* The row-major tiles (tile, tile_q8) live in kernels_x86.h, shared with kernels_avx512.c; this file
 * covers a matrix with them in the shapes that suit 16 registers. */

/* Long F32 passes (lane_pass in kernels_x86.h): lane panels. A block of LANE_ROWS = 24 weight rows
 * (three groups of 8) is put once into a panel in lane order: for group m, output o, column
 * k = 8j + l,
 *   panel[m][l][j][o] = w[8m + o][k]     then the tail columns: panel[m][8 * n_chunks + k'][o]
 * so that lane l's run is, for 8 outputs side by side, the chain of accumulator lane l of the
 * reduction order, in column order. A tile then multiplies one activation (a broadcast) by 8
 * outputs' weights (one load) in one FMA, runs each lane's chains on their own (lanes are
 * independent chains: running them one after another changes no chain's order), adds the eight
 * lanes' results vertically as hsum does, 8 outputs at once, and fuses the tail columns on in
 * order: the same bits as the row-major tiles below, with no horizontal sums and one broadcast
 * serving three weight vectors, and the pass's rows taken 32 at a time. Against the previous
 * prefill panels (six rows in chunk order, 2 x 6 tiles with horizontal sums), 128-token prefill
 * 1.15-1.19x faster (docs/runtime.md).
 * When. The row-major tiles stream all T rows of activations past each group of six weight rows,
 * which pays while those rows stay in L2; the panels pay for their packing once the activations
 * have outgrown it. Without panels, against with them (the row-major tiles of 3858323, the two
 * minions-bench-decode builds alternating, medians of 5-6 rounds): prefill (tools/ab-decode.py
 * --prefill N) of 512 tokens ran at 0.85x the speed on the bundled target (256 columns) and 0.89x
 * on SmolLM2 F32 (576, 1536), of 192-256 at 0.91-0.92x on SmolLM2 F32; but verification
 * (--verify-curve) of 4 x 8 and 16 x 2..8 tokens of the bundled target (T = 32..128) took 0.77x
 * and 0.79-0.92x the time, and SmolLM2 F16 prefill of 128 and 512 tokens ran at 1.04-1.24x and
 * 0.96-1.08x the speed (its row-major tiles convert on load, the panels once). Hence: F32 only,
 * from 256 KB of activations on: the bundled target's 256-column matrices from 256 rows, its down
 * projection from 96, SmolLM2's from 114 and 43. Rows of more than LANE_MAX_COLS columns, and
 * the outputs of a thread's range past its last whole block of 24, take the row-major tiles. */
#define LANE_ROWS 24

/* Rows [o0, o0 + 24) of W into panel: each chunk of 8 rows x 8 columns transposed in registers. */
ALWAYS_INLINE void pack_lanes(uint32_t type, const mn_weight *W, uint32_t o0, float *panel)
{
    const int n_chunks = (int)(W->cols / 8), tail = (int)(W->cols % 8);
    const size_t gsz = (size_t)W->cols * 8;
    for (int m = 0; m < 3; m++) {
        const uint8_t *rows[8];
        for (int o = 0; o < 8; o++)
            rows[o] = W->data + (size_t)(o0 + 8 * (uint32_t)m + (uint32_t)o) * W->row_bytes;
        float *g = panel + (size_t)m * gsz;
        for (int c = 0; c < n_chunks; c++) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int o = 0; o < 8; o++)
                r[o] = load_chunk(type, rows[o], c);
            /* 8 x 8 transpose: r[o] lane l -> t[l] lane o */
            __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
            __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
            __m256 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]);
            __m256 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
            __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
            __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
            __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
            __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
            __m256 t[8] = {_mm256_permute2f128_ps(b0, b4, 0x20), _mm256_permute2f128_ps(b1, b5, 0x20),
                           _mm256_permute2f128_ps(b2, b6, 0x20), _mm256_permute2f128_ps(b3, b7, 0x20),
                           _mm256_permute2f128_ps(b0, b4, 0x31), _mm256_permute2f128_ps(b1, b5, 0x31),
                           _mm256_permute2f128_ps(b2, b6, 0x31), _mm256_permute2f128_ps(b3, b7, 0x31)};
#pragma GCC unroll 8
            for (int l = 0; l < 8; l++)
                _mm256_store_ps(g + ((size_t)l * n_chunks + (size_t)c) * 8, t[l]);
        }
        for (int k = 0; k < tail; k++)
            for (int o = 0; o < 8; o++)
                g[((size_t)n_chunks * 8 + (size_t)k) * 8 + (size_t)o] = scalar_w(type, rows[o], n_chunks * 8 + k);
    }
}

/* One lane's chains for TT rows x the panel's three groups: pl is the lane's run in group 0 (the
 * other groups' lie gsz floats on), xl the lane's first activation of row 0; the 3 TT chain results
 * go to out[t][m]. At TT = 4 the three weight vectors are held and the rows' broadcasts streamed
 * past them (3 + 12 + 1 registers). */
ALWAYS_INLINE void lane_run(const float *pl, size_t gsz, int nc, const float *xl, size_t ldx, __m256 (*out)[3],
                            const int TT)
{
    __m256 acc[4][3];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
#pragma GCC unroll 8
        for (int m = 0; m < 3; m++)
            acc[t][m] = _mm256_setzero_ps();
    for (int j = 0; j < nc; j++, pl += 8, xl += 8) {
        __m256 w[3];
#pragma GCC unroll 8
        for (int m = 0; m < 3; m++) {
            w[m] = _mm256_load_ps(pl + m * gsz);
            IN_REGISTER(w[m]);
        }
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            __m256 xb = _mm256_broadcast_ss(xl + (size_t)t * ldx);
#pragma GCC unroll 8
            for (int m = 0; m < 3; m++)
                acc[t][m] = _mm256_fmadd_ps(w[m], xb, acc[t][m]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
#pragma GCC unroll 8
        for (int m = 0; m < 3; m++)
            out[t][m] = acc[t][m];
}

/* The three shapes (12, 9 and 3 chains), each compiled once on its own: inlined into every weight
 * type's matmul, GCC spilled accumulators of the earlier panel tiles. */
#define LANE_RUN(TT)                                                                                 \
    static __attribute__((noinline)) void lane_run_##TT(const float *pl, size_t gsz, int nc, const float *xl, \
                                                        size_t ldx, __m256(*out)[3])                  \
    {                                                                                                \
        lane_run(pl, gsz, nc, xl, ldx, out, TT);                                                     \
    }
LANE_RUN(4)
LANE_RUN(3)
LANE_RUN(1)
#undef LANE_RUN

enum { LANE_CHUNK = 32 }; /* rows per sweep of the lanes: their chain results fit 24 KB */

/* The whole blocks of LANE_ROWS outputs of [ob, oe) through lane panels; returns the first output
 * left. For each block, rows go LANE_CHUNK at a time; for each lane, every row of the chunk passes
 * the lane's runs (an eighth of the panel: in L1 up to 2048 columns, 24 KB) in tiles
 * of 4 (the rest as 3, 1, or 3 + 3); then each row's eight lane results are added as hsum does and
 * the tail fused on. */
ALWAYS_INLINE uint32_t matmul_lanes(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y,
                                    size_t ldy, int T, uint32_t ob, uint32_t oe)
{
    float panel[LANE_ROWS * LANE_MAX_COLS] __attribute__((aligned(32))); /* 384 KB of the thread's stack */
    __m256 part[8][LANE_CHUNK][3];                                        /* [lane][row][group] */
    const int nc = (int)(W->cols / 8), tail = (int)(W->cols % 8);
    const size_t gsz = (size_t)W->cols * 8;
    uint32_t o = ob;
    for (; o + LANE_ROWS <= oe; o += LANE_ROWS) {
        pack_lanes(type, W, o, panel);
        for (int t0 = 0; t0 < T; t0 += LANE_CHUNK) {
            const int n = T - t0 < LANE_CHUNK ? T - t0 : LANE_CHUNK;
            const float *xc = x + (size_t)t0 * ldx;
            for (int l = 0; l < 8; l++) {
                const float *pl = panel + (size_t)l * nc * 8;
                int t = 0;
                for (int fours = n % 4 == 2 ? n / 4 - 1 : n / 4; fours > 0; fours--, t += 4)
                    lane_run_4(pl, gsz, nc, xc + (size_t)t * ldx + l, ldx, &part[l][t]);
                for (; n - t >= 3; t += 3)
                    lane_run_3(pl, gsz, nc, xc + (size_t)t * ldx + l, ldx, &part[l][t]);
                for (; t < n; t++)
                    lane_run_1(pl, gsz, nc, xc + (size_t)t * ldx + l, ldx, &part[l][t]);
            }
            for (int t = 0; t < n; t++)
                for (int m = 0; m < 3; m++) {
                    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(part[0][t][m], part[4][t][m]),
                                                           _mm256_add_ps(part[2][t][m], part[6][t][m])),
                                             _mm256_add_ps(_mm256_add_ps(part[1][t][m], part[5][t][m]),
                                                           _mm256_add_ps(part[3][t][m], part[7][t][m])));
                    const float *pt = panel + m * gsz + (size_t)nc * 64, *xr = xc + (size_t)t * ldx + nc * 8;
                    for (int k = 0; k < tail; k++)
                        s = _mm256_fmadd_ps(_mm256_load_ps(pt + k * 8), _mm256_broadcast_ss(xr + k), s);
                    _mm256_storeu_ps(y + (size_t)(t0 + t) * ldy + o + 8 * (uint32_t)m, s);
                }
        }
    }
    return o;
}

/* Tiles of the float path, chosen by T (the rows of the pass). Passes of a few rows (decode, and
 * verification's 2..9) read every weight once or nearly, so they run at the speed a thread pulls
 * memory; here two threads reading one run of memory each get 9.6-11.6 GB/s and four runs each
 * 14.9-15.7 (tools/read-streams.c). So the tiles of these passes take their outputs a
 * fraction of the thread's range apart: each of a tile's OT outputs lies in its own 1/OT of the
 * range, and the hardware prefetcher follows the OT streams by itself (software prefetch on top
 * lost 5-10% at decode).
 *   T = 1      1 x 4: one row of each quarter; 1 x 8, one of each eighth, where the thread's rows
 *              hold at most ONE_ROW_WIDE_BYTES (below)
 *   T = 3      3 x 3: 9 chains, the three weight chunks held, the rows streamed past them
 *   other T    2 x 6 (and one 1 x 6 when T is odd): 12 chains, the two activation chunks held and
 *              six weight chunks streamed; the six weight rows are read from memory by the first
 *              tile and from L1 by the others, which meanwhile prefetch the next group's rows
 *              (two rows each, into L2), so that its first tile no longer waits on memory: on a
 *              9216 x 256 matrix (minions-bench-matmul, medians of 15 alternating runs) T = 8 / 9
 *              went from 38.4 / 37.2 to 48.7 / 46.1 GFLOP/s, of which keeping each weight chunk in
 *              a register (IN_REGISTER, kernels_x86.h) gave 1.17x / 1.08x
 *   lane_pass  blocks of 24 adjacent rows put once into lane panels (above): long F32 passes
 * Outputs left past the last full stride go one at a time. Against the previous tiles, which read
 * adjacent rows and prefetched ahead in software (1 x 4 at T = 1, 4 x 3 twice at T = 7, 8, T x 2 at
 * T = 5, 6, contiguous 2 x 6 and 3 x 3 elsewhere), the two binaries alternating
 * (tools/ab-decode.py, medians of 8-12 rounds): decode 1.12x-1.31x (the bundled target,
 * SmolLM2 F16 and F32); a k-token verification pass after 64 tokens, k = 2..8, 7-22% faster on the
 * bundled target, 5-22% on SmolLM2 F32, 14-28% on F16, 20-28% on draft-kjv. On an L2-resident
 * 256 x 256 matrix (one core, minions-bench-matmul) 4 x 3 and T x 2 were faster; inside a model
 * the weights come from further away. */
/* One row's tile takes 8 outputs (8 chains, summed by one hsums) where the thread's share of the
 * matrix is at most this many bytes, and 4 where it is larger. Small matrices come from L2 or L3,
 * where more chains run faster; a large model's stream from memory, where eight streams a thread
 * are more than the prefetcher follows well. Decode of one sequence (tools/ab-decode.py --batches 1,
 * 10 rounds, a Zen 5 host, 2026-11-30), 1 x 8 against 1 x 4 up to 128 KB / 256 KB / 512 KB: the
 * draft models 1.09-1.14x / 1.15-1.19x / 1.16-1.20x as fast (draft-kjv, draft-devil), SmolLM2's
 * 10 MB draft 1.03-1.04x, the bundled target 0.99-1.01x, SmolLM2 F16 level; 1 x 8 everywhere ran
 * SmolLM2 F16 and F32 at 0.89-0.90x. Alone (minions-bench-matmul --tokens 1, one core), L2-resident
 * 256 x 256 to 256 x 688 F32 matrices ran at 85-101 against 69-79 GFLOP/s. */
#define ONE_ROW_WIDE_BYTES ((size_t)256 << 10)

ALWAYS_INLINE void matmul_typed(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y,
                                size_t ldy, int T, uint32_t ob, uint32_t oe)
{
#define TILE(t, o, stride, RT, OT) tile(type, W, x, ldx, y, ldy, t, o, stride, RT, OT, 0, NULL, 0)
    uint32_t o = ob;
    if (T == 1) {
        const bool wide = (size_t)(oe - ob) * W->row_bytes <= ONE_ROW_WIDE_BYTES;
        const uint32_t ot = wide ? 8 : 4, q = (oe - ob) / ot;
        for (; o < ob + q; o++) {
            if (wide)
                TILE(0, o, q, 1, 8);
            else
                TILE(0, o, q, 1, 4);
        }
        for (o = ob + ot * q; o < oe; o++)
            TILE(0, o, 1, 1, 1);
    } else if (T == 3 && type != MN_F16) {
        const uint32_t q = (oe - ob) / 3;
        for (; o < ob + q; o++)
            TILE(0, o, q, 3, 3);
        for (o = ob + 3 * q; o < oe; o++)
            TILE(0, o, 1, 3, 1);
    } else {
        if (lane_pass(type, T, W->cols))
            o = matmul_lanes(type, W, x, ldx, y, ldy, T, o, oe);
        const uint32_t b = o, q = (oe - b) / 6;
        const size_t step = (size_t)q * W->row_bytes, pf_step = W->cols >= 8 ? W->row_bytes / (W->cols / 8) : 0;
        for (; o < b + q; o++) {
            /* The group's first tile reads its six rows from memory; while the next ones run on them
             * from L1, each pulls two rows of the next group (o + 1) toward L2. */
            const uint8_t *next = W->data + (size_t)(o + 1) * W->row_bytes;
            const size_t last = o + 1 < b + q ? 6 : 0; /* the last group's "next" lies past the strides */
            int t = 0;
            if (T & 1)
                TILE(0, o, q, 1, 6), t = 1;
            else
                TILE(0, o, q, 2, 6), t = 2;
            for (size_t k = 0; t < T; t += 2, k += 2) {
                if (k < last)
                    tile(type, W, x, ldx, y, ldy, t, o, q, 2, 6, 2, next + k * step, pf_step);
                else
                    TILE(t, o, q, 2, 6);
            }
        }
        for (o = b + 6 * q; o < oe; o++) {
            if (T & 1)
                TILE(0, o, 1, 1, 1);
            for (int t = T & 1; t < T; t += 2)
                TILE(t, o, 1, 2, 1);
        }
    }
#undef TILE
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

static void avx2_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
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

/* The dot product of a and b, n elements, b of `type` (MN_F32 or MN_F16: load8). */
ALWAYS_INLINE float dot_typed(const float *a, const void *b, uint32_t type, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= n; k += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), load8(type, b, k), acc);
    float s = hsum(acc);
    for (; k < n; k++)
        s = fmaf(a[k], scalar_w(type, b, k), s);
    return s;
}

static float avx2_dot(const float *a, const float *b, int n) { return dot_typed(a, b, MN_F32, n); }

/* The four sums of s[0..3] (each lo + hi of one accumulator), reduced exactly as hsum() does:
 * result lane i = (s_i0 + s_i2) + (s_i1 + s_i3). */
ALWAYS_INLINE __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    __m128 s0 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    __m128 s1 = _mm_add_ps(_mm256_castps256_ps128(a1), _mm256_extractf128_ps(a1, 1));
    __m128 s2 = _mm_add_ps(_mm256_castps256_ps128(a2), _mm256_extractf128_ps(a2, 1));
    __m128 s3 = _mm_add_ps(_mm256_castps256_ps128(a3), _mm256_extractf128_ps(a3, 1));
    _MM_TRANSPOSE4_PS(s0, s1, s2, s3); /* s_j now holds lane j of each sum */
    return _mm_add_ps(_mm_add_ps(s0, s2), _mm_add_ps(s1, s3));
}

/* The attention kernels below index arrays of vectors in short loops. GCC at -O2 does not unroll
 * them by itself, and then keeps the arrays on the stack: every FMA became a load, the FMA and a
 * store, chained through memory (tools/bench-attention.c, 32-float heads over 72 keys: dots
 * 251-403 -> 104-113 ns, a two-head weighted sum 850-948 -> 107-112). Hence the unroll pragmas,
 * as in the matrix tiles (kernels_x86.h); `objdump -d` of each should show no stack access in its FMA loops. */
ALWAYS_INLINE void dots_one(const float *a, const void *const *b, const uint32_t type, int n_b, int n, float *out)
{
    const int full = n / 8 * 8;
    int j = 0;
    for (; j + 8 <= n_b; j += 8) { /* eight independent chains keep both FMA pipes busy */
        __m256 acc[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            acc[i] = _mm256_setzero_ps();
        for (int k = 0; k < full; k += 8) {
            __m256 va = _mm256_loadu_ps(a + k);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                acc[i] = _mm256_fmadd_ps(va, load8(type, b[j + i], k), acc[i]);
        }
        _mm_storeu_ps(out + j, hsum4(acc[0], acc[1], acc[2], acc[3]));
        _mm_storeu_ps(out + j + 4, hsum4(acc[4], acc[5], acc[6], acc[7]));
        for (int k = full; k < n; k++)
            for (int i = 0; i < 8; i++)
                out[j + i] = fmaf(a[k], scalar_w(type, b[j + i], k), out[j + i]);
    }
    for (; j < n_b; j++)
        out[j] = dot_typed(a, b[j], type, n);
}

static void avx2_dots(const float *q, size_t ldq, int n_heads, const void *const *b, uint32_t type, int n_b, int n,
                      float *out, size_t ldo)
{
    for (int h = 0; h < n_heads; h++) {
        if (type == MN_F16)
            dots_one(q + (size_t)h * ldq, b, MN_F16, n_b, n, out + (size_t)h * ldo);
        else
            dots_one(q + (size_t)h * ldq, b, MN_F32, n_b, n, out + (size_t)h * ldo);
    }
}

/* generic_argmax with 32 lanes in four registers (vmaxps(v, m) is v > m ? v : m, NaN-passing as
 * the generic compare), then the first index equal to the maximum, 8 compared at a time. */
static int32_t avx2_argmax(const float *x, int n)
{
    __m256 m[4];
    for (int r = 0; r < 4; r++)
        m[r] = _mm256_set1_ps(x[0]);
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int r = 0; r < 4; r++)
            m[r] = _mm256_max_ps(_mm256_loadu_ps(x + i + 8 * r), m[r]);
    float lanes[32], mx = x[0];
    for (int r = 0; r < 4; r++)
        _mm256_storeu_ps(lanes + 8 * r, m[r]);
    for (int l = 0; l < 32; l++)
        mx = lanes[l] > mx ? lanes[l] : mx;
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    const __m256 vm = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (hit)
            return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
        if (x[i] == mx)
            return i;
    return 0; /* mx is x[0], a NaN */
}

/* mn_draw_weight in 8 lanes, the same operations in the same order (separate multiplies and adds,
 * the round-to-even of the 1.5 * 2^23 addition, truncation to an int, the shift in 64-bit lanes:
 * left by max(s, 0), then right by max(-s, 0)), so the same bits; lanes whose exponent is not above
 * -41 (and NaNs) weigh 0. */
static uint64_t avx2_draw_weights(const float *x, int n, float mx, float scale, uint64_t *w)
{
    static const float c[MN_DRAW_POLY_N] = MN_DRAW_POLY;
    const __m256 vmx = _mm256_set1_ps(-mx), vs = _mm256_set1_ps(scale), round = _mm256_set1_ps(MN_DRAW_ROUND);
    const __m256 floor = _mm256_set1_ps(-(float)MN_DRAW_ONE_BITS - 1.0f);
    const __m256 mant = _mm256_set1_ps((float)(1 << MN_DRAW_MANT_BITS));
    __m256i sum = _mm256_setzero_si256();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 t = _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(x + i), vmx), vs);
        __m256 valid = _mm256_cmp_ps(t, floor, _CMP_GT_OQ);
        __m256 k = _mm256_sub_ps(_mm256_add_ps(t, round), round), f = _mm256_sub_ps(t, k);
        __m256 p = _mm256_set1_ps(c[0]);
        for (int j = 1; j < MN_DRAW_POLY_N; j++)
            p = _mm256_add_ps(_mm256_mul_ps(p, f), _mm256_set1_ps(c[j]));
        __m256i m = _mm256_and_si256(_mm256_cvttps_epi32(_mm256_mul_ps(p, mant)), _mm256_castps_si256(valid));
        __m256i s = _mm256_add_epi32(_mm256_cvttps_epi32(_mm256_and_ps(k, valid)),
                                     _mm256_set1_epi32(MN_DRAW_ONE_BITS - MN_DRAW_MANT_BITS));
        const __m256i zero = _mm256_setzero_si256();
        __m256i ls = _mm256_max_epi32(s, zero), rs = _mm256_max_epi32(_mm256_sub_epi32(zero, s), zero);
        for (int h = 0; h < 2; h++) {
            __m256i mh = _mm256_cvtepu32_epi64(h ? _mm256_extracti128_si256(m, 1) : _mm256_castsi256_si128(m));
            __m256i lh = _mm256_cvtepu32_epi64(h ? _mm256_extracti128_si256(ls, 1) : _mm256_castsi256_si128(ls));
            __m256i rh = _mm256_cvtepu32_epi64(h ? _mm256_extracti128_si256(rs, 1) : _mm256_castsi256_si128(rs));
            __m256i wv = _mm256_srlv_epi64(_mm256_sllv_epi64(mh, lh), rh);
            _mm256_storeu_si256((__m256i *)(w + i + 4 * h), wv);
            sum = _mm256_add_epi64(sum, wv);
        }
    }
    uint64_t lanes[4], total = 0;
    _mm256_storeu_si256((__m256i *)lanes, sum);
    for (int l = 0; l < 4; l++)
        total += lanes[l];
    for (; i < n; i++)
        total += w[i] = mn_draw_weight(x[i], mx, scale);
    return total;
}

static float avx2_softmax(float *x, int n, float scale)
{
    return softmax_exps(x, n, softmax_scale_max(x, n, scale));
}

static void avx2_swiglu(float *gate, const float *up, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) { /* the tail through the same lanes, so every element gets the same arithmetic */
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, (size_t)(n - i) * sizeof(float));
        memcpy(u, up + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(g, swiglu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, (size_t)(n - i) * sizeof(float));
    }
}

/* G heads (1 or 2) at once over the same rows: out[h*ldo + i] = sum_j w[h*ldw + j] * rows[j][i]. */
ALWAYS_INLINE void weighted_sum_g(float *out, size_t ldo, const float *w, size_t ldw, const void *const *rows,
                                  const uint32_t type, int n_rows, int n, const int G)
{
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 acc[2][4];
#pragma GCC unroll 2
        for (int h = 0; h < G; h++)
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                acc[h][c] = _mm256_setzero_ps();
        for (int j = 0; j < n_rows; j++) {
            __m256 v[4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                v[c] = load8(type, rows[j], i + 8 * c);
#pragma GCC unroll 2
            for (int h = 0; h < G; h++) {
                __m256 a = _mm256_set1_ps(w[(size_t)h * ldw + j]);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    acc[h][c] = _mm256_fmadd_ps(a, v[c], acc[h][c]);
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < G; h++)
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                _mm256_storeu_ps(out + (size_t)h * ldo + i + 8 * c, acc[h][c]);
    }
    weighted_sum_tail(out, ldo, w, ldw, rows, type, n_rows, i, n, G);
}

/* The heads two at a time (two heads share each row load and double the chains), a last one alone. */
ALWAYS_INLINE void weighted_sum_typed(float *out, size_t ldo, const float *w, size_t ldw, int n_heads,
                                      const void *const *rows, const uint32_t type, int n_rows, int n)
{
    int h = 0;
    for (; h + 2 <= n_heads; h += 2)
        weighted_sum_g(out + (size_t)h * ldo, ldo, w + (size_t)h * ldw, ldw, rows, type, n_rows, n, 2);
    if (h < n_heads)
        weighted_sum_g(out + (size_t)h * ldo, ldo, w + (size_t)h * ldw, ldw, rows, type, n_rows, n, 1);
}

static void avx2_weighted_sum(float *out, size_t ldo, const float *w, size_t ldw, int n_heads, const void *const *rows,
                              uint32_t type, int n_rows, int n)
{
    if (type == MN_F16)
        weighted_sum_typed(out, ldo, w, ldw, n_heads, rows, MN_F16, n_rows, n);
    else
        weighted_sum_typed(out, ldo, w, ldw, n_heads, rows, MN_F32, n_rows, n);
}

static void avx2_axpy(float *y, float a, const float *x, int n)
{
    __m256 va = _mm256_set1_ps(a);
    int k = 0;
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(y + k, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k)));
    for (; k < n; k++)
        y[k] = fmaf(a, x[k], y[k]);
}

static void avx2_scale(float *x, float s, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int k = 0;
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(x + k, _mm256_mul_ps(_mm256_loadu_ps(x + k), vs));
    for (; k < n; k++)
        x[k] *= s;
}

static void avx2_scale_mul(float *out, const float *x, float s, const float *w, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int k = 0;
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(out + k, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), vs), _mm256_loadu_ps(w + k)));
    for (; k < n; k++)
        out[k] = x[k] * s * w[k];
}

/* Four pairs at a time: x c with each pair's c in both lanes, the pair swapped times its s, then
 * vaddsubps (a c - b s in the even lanes, b c + a s in the odd: the scalar's sum, its operands
 * swapped, which IEEE addition does not see). */
static void avx2_rope(float *x, const float *cs, int n_pairs)
{
    int i = 0;
    for (; i + 4 <= n_pairs; i += 4) {
        __m256 v = _mm256_loadu_ps(x + 2 * i), t = _mm256_loadu_ps(cs + 2 * i);
        __m256 vc = _mm256_mul_ps(v, _mm256_moveldup_ps(t));
        __m256 vs = _mm256_mul_ps(_mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)), _mm256_movehdup_ps(t));
        _mm256_storeu_ps(x + 2 * i, _mm256_addsub_ps(vc, vs));
    }
    for (; i < n_pairs; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1], a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = a * s + b * c;
    }
}

/* Half floats by F16C: vcvtps2ph rounds to nearest even (the immediate), as mn_f32_to_f16 does; the
 * tail goes through the same instruction, a lane at a time. */
static void avx2_to_f16(const float *x, uint16_t *h, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        h[i] = (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x[i]), _MM_FROUND_TO_NEAREST_INT), 0);
}

/* ---- 16-bit activation path (packed layouts and reduction order: kernels_generic.c) ------------ */

/* kernels_generic.c's quantization, 32 floats a block in four registers: the max of |x| as a tree
 * (exact, so the same as the scalar loop's for finite x), q = the rounding of x * id under the
 * default rounding mode as lrintf does, clamped; the integer sum is exact. */
static void avx2_quantize_q8(const float *x, size_t n, mn_q8 *out)
{
    const size_t nb = n / 32;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i hi = _mm256_set1_epi32(32767), lo = _mm256_set1_epi32(-32767);
    for (size_t b = 0; b < nb; b++) {
        __m256 v[4], m = _mm256_setzero_ps();
#pragma GCC unroll 4 /* else v[] and q[] live on the stack (see the attention kernels' note) */
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + b * 32 + 8 * i);
            m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m); /* a NaN passed over, as in C */
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float d = _mm_cvtss_f32(h) / 32767.0f, id = d >= FLT_MIN ? 1.0f / d : 0.0f;
        __m256i q[4], sum = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
            q[i] = _mm256_max_epi32(_mm256_min_epi32(q[i], hi), lo);
            sum = _mm256_add_epi32(sum, q[i]);
        }
        mn_q8 *g = &out[b / 8];
        /* packs interleaves 128-bit lanes: (q0 lo, q1 lo, q0 hi, q1 hi); the permute restores order */
        _mm256_storeu_si256((__m256i *)g->qs[b % 8], _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8));
        _mm256_storeu_si256((__m256i *)(g->qs[b % 8] + 16),
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xd8));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        g->d[b % 8] = d;
        g->s[b % 8] = d * (float)_mm_cvtsi128_si32(s);
    }
    for (size_t j = nb % 8; nb % 8 && j < 8; j++) /* the last group's missing blocks count 0 */
        out[nb / 8].d[j] = out[nb / 8].s[j] = 0.0f;
}

/* Cover the [T x (ob, oe)] block with integer-path tiles: outputs outer (a weight tile is read once
 * from memory and reused for every row), rows inner; for a single row (decode) 1 x 4 tiles of
 * outputs a quarter of the block apart, else
 * 4 x 2, then 2 x 2 and 1 x 2 for the remaining rows (4 x 2 keeps its 8 accumulators, a row's
 * weights and the scales in the 16 registers). */
ALWAYS_INLINE void matmul_q8_typed(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y,
                                   size_t ldy, int T, uint32_t ob, uint32_t oe)
{
    uint32_t o = ob;
    if (T == 1) {
        const uint32_t q = (oe - ob) / 4; /* rows in each quarter, as the float path does */
        for (; o < ob + q; o++)
            tile_q8(type, W, xq, ldxq, y, ldy, 0, o, q, 1, 4);
        o = ob + 4 * q;
    } else {
        for (; o + 2 <= oe; o += 2) {
            int t = 0;
            for (; t + 4 <= T; t += 4)
                tile_q8(type, W, xq, ldxq, y, ldy, t, o, 1, 4, 2);
            for (; t + 2 <= T; t += 2)
                tile_q8(type, W, xq, ldxq, y, ldy, t, o, 1, 2, 2);
            for (; t < T; t++)
                tile_q8(type, W, xq, ldxq, y, ldy, t, o, 1, 1, 2);
        }
    }
    for (; o < oe; o++)
        for (int t = 0; t < T; t++)
            tile_q8(type, W, xq, ldxq, y, ldy, t, o, 1, 1, 1);
}

DEFINE_MATMUL_Q8_ENTRY(avx2_matmul_q8, matmul_q8_typed)

static int avx2_usable(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

const mn_cpu_kernels mn_kernels_avx2 = {
    .name = "avx2",
    .usable = avx2_usable,
    .matmul = avx2_matmul,
    .matmul_q8 = avx2_matmul_q8,
    .quantize_q8 = avx2_quantize_q8,
    .dot = avx2_dot,
    .dots = avx2_dots,
    .softmax = avx2_softmax,
    .swiglu = avx2_swiglu,
    .weighted_sum = avx2_weighted_sum,
    .axpy = avx2_axpy,
    .scale = avx2_scale,
    .scale_mul = avx2_scale_mul,
    .rope = avx2_rope,
    .argmax = avx2_argmax,
    .draw_weights = avx2_draw_weights,
    .to_f16 = avx2_to_f16,
};

#else /* not x86-64: a table no CPU uses */

static int avx2_usable(void) { return 0; }

const mn_cpu_kernels mn_kernels_avx2 = {.name = "avx2", .usable = avx2_usable};

#endif
