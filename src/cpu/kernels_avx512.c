/* kernels_avx512.c - the kernel table for AVX-512 (F, BW, DQ, VL) with VNNI: the matrix products in
 * the tiles kernels_x86.h shares with AVX2, in shapes that use what AVX-512 adds to them (32 vector
 * registers, and VNNI's vpdpwssd for the 16-bit activations' dot products); every other slot is the
 * AVX2 table's.
 *
 * The chains are AVX2's 8-lane accumulators, so this table gives the same bits as the others
 * (kernels_generic.c's reduction order). What changes is how many run side by side: up to 24 in
 * 32 registers (AVX2's tiles hold 12 in 16), so a float pass of up to 7 rows reads each weight
 * once, in one sweep, and a quantized tile takes 4 rows x 4 outputs.
 *
 * 512-bit tiles came first (two 8-lane chains per register, the weights of two outputs side by
 * side) and were dropped: on a Zen 4 core, whose 512-bit operations take both of its 256-bit
 * pipes, they ran below AVX2's tiles (minions-bench-matmul, F32: 45-90 GFLOP/s against 57-106;
 * SmolLM2 Q4_1 decode 0.59-0.61x at one sequence, 0.86-1.00x at 16, three runs each), and these
 * tiles run level with them or above (docs/runtime.md, "Kernel sets"). On Intel cores with two
 * 512-bit FMA units the 512-bit tiles had measured 1.06-1.40x AVX2 (a 16-core Xeon); that host was
 * not at hand to measure these.
 *
 * kernels_avx512_emu.c compiles this file for AVX2 alone (MN_X16_EMULATE): the same shapes and
 * index arithmetic with 16 registers and without VNNI, so that the tests check this table's tiles
 * bit for bit on CPUs without AVX-512.
 */
#include "cpu/kernels.h"

#if defined(__x86_64__)
#ifdef MN_X16_EMULATE
#pragma GCC target("avx2,fma,f16c")
#else
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

#include "cpu/kernels_x86.h"

/* ---- float weights (F32, F16) in passes of 3 to 31 rows: verification's shape ------------------ */

/* The rows in blocks of RB and one of the remaining 1..RB-1, each block one tile of OT outputs a
 * stride apart (the hardware prefetcher follows the OT streams). With more than one block, the
 * second prefetches a later group's rows (`next`) into L2 while the others run on this group's from
 * L1, as kernels_avx2.c's 2 x 6 tiles do; a pass of one tile (3..7 rows) prefetches them itself.
 * Measured on 6b505ec (tools/ab-decode.py --verify-curve, medians of 8 alternating rounds,
 * one sequence): a pass of 3..7 tokens took 0.71-0.87 of the time without it on SmolLM2 F32 and,
 * with kernels_x86.h's scalar_w fix, 0.58-0.78 on F16; on the bundled target, whose weights mostly
 * stay in L3, 0.88-1.05 (noise). An L3-resident 8 MB matrix alone (minions-bench-matmul) ran 5-15%
 * slower with it, a 16 MB one 6-60% faster; the first tile of two prefetching instead of the second
 * lost 10-20% on a 32 MB matrix at T = 8..16. */
ALWAYS_INLINE void rows_f(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy,
                          int T, uint32_t o, uint32_t stride, const uint8_t *next, const int RB, const int OT)
{
#define TILE_F(RT, PF) tile(type, W, x, ldx, y, ldy, t, o, stride, RT, OT, (PF) ? OT : 0, PF, pf_step)
    const size_t pf_step = W->cols >= 8 ? W->row_bytes / (W->cols / 8) : 0;
    int t = 0;
    for (; t + RB <= T; t += RB)
        TILE_F(RB, t == RB || T == RB ? next : NULL);
    const uint8_t *pf = t == RB || t == 0 ? next : NULL; /* the second tile, or the only one */
    switch (T - t) {
    case 6: TILE_F(6, pf); break;
    case 5: TILE_F(5, pf); break;
    case 4: TILE_F(4, pf); break;
    case 3: TILE_F(3, pf); break;
    case 2: TILE_F(2, pf); break;
    case 1: TILE_F(1, pf); break;
    default: break;
    }
#undef TILE_F
}

/* How many groups ahead rows_f prefetches. One group ahead left the bundled target's passes of
 * 2..7 tokens waiting on L3: with two, they took 0.78-0.88 of the time (tools/ab-decode.py
 * --verify-curve, medians of 30-40 alternating rounds, one sequence; 8 tokens, two tiles a group
 * and so twice the time to hide a fetch in, 0.94-0.99), SmolLM2 F16 0.95-1.00 and F32 level
 * (memory-bound: 6 rounds). Three groups ahead was no better on the target and lost 5-11% on F16's
 * passes of 5..8 tokens; six lost the gain. */
#define PF_GROUPS 2

/* OT outputs a tile, q = range / OT apart; the outputs past the last full stride one at a time. */
ALWAYS_INLINE void outputs_f(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy,
                             int T, uint32_t ob, uint32_t oe, const int RB, const int OT)
{
    const uint32_t q = (oe - ob) / (uint32_t)OT;
    for (uint32_t o = ob; o < ob + q; o++) {
        const uint8_t *next = o + PF_GROUPS < ob + q ? W->data + (size_t)(o + PF_GROUPS) * W->row_bytes : NULL;
        rows_f(type, W, x, ldx, y, ldy, T, o, q, next, RB, OT);
    }
    for (uint32_t o = ob + (uint32_t)OT * q; o < oe; o++)
        rows_f(type, W, x, ldx, y, ldy, T, o, 1, NULL, RB, 1);
}

/* The tile by the rows of the pass: 2 x 8, 3 x 6, 5 x 5, 6 x 4 and 7 x 3 in one sweep over the
 * weights; 4 and more than 7 rows in blocks of 4 x 6. On a Zen 4 core (minions-bench-matmul, F32,
 * L2-resident and 9.4 MB matrices, alternating) these reached 80-112 GFLOP/s at T = 3..16, against
 * 57-106 for AVX2's 3 x 3 and 2 x 6; at T = 7, 7 x 3 beat 4 x 6 + 3 x 6 (84-96 against 64-84).
 * Two and five rows ran as the remainders of 4 x 6 and 6 x 4 (2 x 6, 5 x 4) until 2026-11-29; as
 * 2 x 8 and 5 x 5 (25 chains), one core, L2-resident matrices of the bundled target's and
 * SmolLM2's shapes, three alternating rounds (minions-bench-matmul --tokens 2,5): F32 five rows
 * 57-73 -> 75-97 GFLOP/s, F16 62-79 -> 87-96; two rows F32 level, F16 576 x 576 49 -> 63-73. In
 * the model (bundled target, --verify-curve --rounds 60, 16 runs alternating with the build before,
 * medians of the runs' ratios) a pass of 5 tokens took 0.92x the time (quartiles 0.89-0.93), the
 * other lengths 0.96-1.03x; the same binary against itself gives 0.96-1.02x.
 *
 * Each weight type and shape is a function of its own, compiled apart (noinline): with all shapes
 * inlined into one dispatch, giving five rows a branch of its own changed the code GCC made for
 * the 6 x 4 sweep, and passes of 6 and 7 tokens of the bundled target took 1.06-1.20x the time
 * (--verify-curve, 5-8 alternating runs). The shapes of one tile (EXACT) take T as the constant
 * RB, so no remainder tiles are compiled for them: half the code and the compile time of passing T
 * through, at the same speed (14 alternating runs, 0.98-1.01x at k = 2..8). */
typedef void matmul_f_fn(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T, uint32_t ob,
                         uint32_t oe);
#define SHAPE_F(NAME, TYPE, RB, OT, EXACT)                                                                      \
    static __attribute__((noinline)) void NAME(const mn_weight *W, const float *x, size_t ldx, float *y,       \
                                               size_t ldy, int T, uint32_t ob, uint32_t oe)                    \
    {                                                                                                           \
        outputs_f(TYPE, W, x, ldx, y, ldy, (EXACT) ? (RB) : T, ob, oe, RB, OT);                                 \
    }
#define SHAPES_F(SHAPE, RB, OT, EXACT)                                                                          \
    SHAPE_F(f32_##SHAPE, MN_F32, RB, OT, EXACT)                                                                 \
    SHAPE_F(f16_##SHAPE, MN_F16, RB, OT, EXACT)
SHAPES_F(2x8, 2, 8, true)
SHAPES_F(3x6, 3, 6, true)
SHAPES_F(4x6, 4, 6, false)
SHAPES_F(5x5, 5, 5, true)
SHAPES_F(6x4, 6, 4, true)
SHAPES_F(7x3, 7, 3, true)
#undef SHAPES_F
#undef SHAPE_F

/* By the pass's rows, 2..7 (no pass of fewer comes here); more run in 4 x 6 blocks, as 4 do. */
static matmul_f_fn *const f32_by_rows[8] = {NULL, NULL, f32_2x8, f32_3x6, f32_4x6, f32_5x5, f32_6x4, f32_7x3};
static matmul_f_fn *const f16_by_rows[8] = {NULL, NULL, f16_2x8, f16_3x6, f16_4x6, f16_5x5, f16_6x4, f16_7x3};
#define BY_ROWS(T) ((T) < 8 ? (T) : 4)

/* Float weights in passes of 2 rows or more here (F32: fewer than X16_MAX_T). One row (decode: it
 * streams the weights, the registers do not matter), F32 passes of 32 rows or more (AVX2's 2 x 6
 * tiles and lane panels, measured for them) and quantized weights in the float path (the tests'
 * twin; the backend takes the integer path) go to AVX2.
 * - Two rows run here too, prefetching the next group as one tile does here (AVX2's 2 x 6 does
 *   not: it cost the bundled target there): in ab-decode's --verify-curve (8 rounds), passes of two
 *   tokens in a 2 x 6 tile took 0.84x the time on SmolLM2 F16 and 0.92x on F32 against AVX2's
 *   tile, level on the bundled target (2 x 8 since, above).
 * - Long F16 passes (no lane panels: those are F32's) convert each weight chunk once for four rows
 *   in the 4 x 6 blocks, where AVX2's 2 x 6 tiles convert it for two: SmolLM2 F16 prefilled 1.075x
 *   as fast (ab-decode --prefill 128, 6 rounds) and decoded 32 sequences 1.025x; on their own,
 *   1536 x 576 and 576 x 1536 matrices (minions-bench-matmul, T = 32..128) 104-111 against 95-99
 *   GFLOP/s. */
#define X16_MAX_T 32
static void x16_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
                       uint32_t o_begin, uint32_t o_end)
{
    if (W->type == MN_F32 && T >= 2 && T < X16_MAX_T)
        f32_by_rows[BY_ROWS(T)](W, x, ldx, y, ldy, T, o_begin, o_end);
    else if (W->type == MN_F16 && T >= 2)
        f16_by_rows[BY_ROWS(T)](W, x, ldx, y, ldy, T, o_begin, o_end);
    else
        mn_kernels_avx2.matmul(W, x, ldx, y, ldy, T, o_begin, o_end);
}

/* ---- quantized weights, 16-bit activations ------------------------------------------------------ */

/* The rows of one group of OT outputs (a stride apart) in tiles of RB <= 5 rows, then one of the rest. */
ALWAYS_INLINE void rows_q8(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy,
                           int T, uint32_t o, uint32_t stride, const int RB, const int OT)
{
#define TILE_Q(RT) tile_q8(type, W, xq, ldxq, y, ldy, t, o, stride, RT, OT)
    int t = 0;
    for (; t + RB <= T; t += RB)
        TILE_Q(RB);
    switch (T - t) {
    case 4: TILE_Q(4); break;
    case 3: TILE_Q(3); break;
    case 2: TILE_Q(2); break;
    case 1: TILE_Q(1); break;
    default: break;
    }
#undef TILE_Q
}

/* Outputs outer, OT streams range / OT apart, rows inner; the outputs past the last full stride one
 * at a time. */
ALWAYS_INLINE void outputs_q8(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy,
                              int T, uint32_t ob, uint32_t oe, const int RB, const int OT)
{
    const uint32_t q = (oe - ob) / (uint32_t)OT;
    for (uint32_t o = ob; o < ob + q; o++)
        rows_q8(type, W, xq, ldxq, y, ldy, T, o, q, RB, OT);
    for (uint32_t o = ob + (uint32_t)OT * q; o < oe; o++)
        rows_q8(type, W, xq, ldxq, y, ldy, T, o, 1, RB, 1);
}

/* One row (decode) in 1 x 4 tiles, as AVX2 does; more in 4 x 4 tiles (16 chains) and one tile of
 * the 1..3 rows left, five rows in one 5 x 4. With VNNI, SmolLM2 Q4_1 decoded 16 sequences at
 * 1.14-1.17x AVX2's 4 x 2 tiles on a Zen 4 core and one at 0.98-1.00x (tools/ab-decode.py, two
 * runs of 6-8 rounds each). Three rows left in one 3 x 4 tile rather than 2 x 4 + 1 x 4 (a second
 * decode of the weights), and five rows in one tile: verification passes of 3, 5 and 7 tokens took
 * 0.86-0.94x the time (ab-decode --verify-curve, 12 rounds, one sequence, two runs). Wider tiles
 * were slower or level: 8 x 3 at 8 rows 1.30x, 6 x 4 1.07x, 7 x 3 and 8 x 2 1.00-1.03x, 3 + 3 rows
 * 1.06x (Q8_MAX_RT in kernels_x86.h bounds the tiles at five rows since). */
ALWAYS_INLINE void matmul_q8_typed(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y,
                                   size_t ldy, int T, uint32_t ob, uint32_t oe)
{
    if (T == 5) /* the tile shapes must be constants: each call compiles its own */
        outputs_q8(type, W, xq, ldxq, y, ldy, T, ob, oe, 5, 4);
    else
        outputs_q8(type, W, xq, ldxq, y, ldy, T, ob, oe, 4, 4);
}

DEFINE_MATMUL_Q8_ENTRY(x16_matmul_q8)

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
