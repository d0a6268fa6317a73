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
 * side) and were dropped from this table: on a Zen 4 core, whose 512-bit operations take both of
 * its 256-bit pipes, they ran below AVX2's tiles (minions-bench-matmul, F32: 45-90 GFLOP/s against
 * 57-106; SmolLM2 Q4_1 decode 0.59-0.61x at one sequence, 0.86-1.00x at 16, three runs each), and
 * these tiles run level with them or above (docs/runtime.md, "Kernel sets").
 *
 * A Zen 5 core runs a 512-bit FMA as fast as a 256-bit one (two a cycle: 264-265 against 128-133
 * GFLOP/s in minions-bench-matmul's two FMA peak loops), so there twice the work per instruction is twice the peak. The
 * second table here, avx512w, is this one with its float passes of 5 rows or more and its quantized
 * passes of 2 or more in 512-bit tiles (tile_w, tile_q8w: the same chains, two a register); it is
 * the default only where a probe at first use finds 512-bit FMAs at >= 1.5x the 256-bit FLOP rate
 * (x16w_prefer), so Zen 4 keeps avx512.
 *
 * kernels_avx512_emu.c compiles this file for AVX2 alone (MN_X16_EMULATE): the same shapes and
 * index arithmetic with 16 registers and without VNNI (each 512-bit register two 256-bit ones), so
 * that the tests check both tables' tiles bit for bit on CPUs without AVX-512.
 */
#include "cpu/kernels.h"

#include <string.h>

#if defined(__x86_64__)
#ifdef MN_X16_EMULATE
#pragma GCC target("avx2,fma,f16c")
#else
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

#include "cpu/kernels_x86.h"
#include "util/clock.h"

/* ---- 512-bit registers: two 8-lane chains side by side ------------------------------------------
 * v16f holds two of the 8-lane accumulators every table reduces with: lanes 0..7 one output's,
 * lanes 8..15 another's, for the same token. Compiled with MN_X16_EMULATE (kernels_avx512_emu.c)
 * each primitive is two AVX2 operations on the halves, so the tiles' layout and index arithmetic
 * run, and are tested bit for bit, on CPUs without AVX-512. */
#ifdef MN_X16_EMULATE
typedef struct v16f {
    __m256 h[2];
} v16f;
ALWAYS_INLINE v16f f_zero(void) { return (v16f){{_mm256_setzero_ps(), _mm256_setzero_ps()}}; }
ALWAYS_INLINE v16f f_halves(__m256 lo, __m256 hi) { return (v16f){{lo, hi}}; }
ALWAYS_INLINE v16f f_dup(const float *p)
{
    __m256 v = _mm256_loadu_ps(p);
    return (v16f){{v, v}};
}
ALWAYS_INLINE __m256 f_half(v16f a, int hi) { return a.h[hi]; }
ALWAYS_INLINE v16f f_load(const float *p) { return (v16f){{_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}}; }
ALWAYS_INLINE v16f f_dup_row(uint32_t type, const void *row, int k)
{
    __m256 v = load8(type, row, k);
    return (v16f){{v, v}};
}
ALWAYS_INLINE v16f f_load_row(uint32_t type, const void *row, int k)
{
    return (v16f){{load8(type, row, k), load8(type, row, k + 8)}};
}
ALWAYS_INLINE void f_store(float *p, v16f a)
{
    _mm256_storeu_ps(p, a.h[0]);
    _mm256_storeu_ps(p + 8, a.h[1]);
}
ALWAYS_INLINE v16f f_set1(float a) { return (v16f){{_mm256_set1_ps(a), _mm256_set1_ps(a)}}; }
ALWAYS_INLINE v16f f_fmadd(v16f a, v16f b, v16f c)
{
    return (v16f){{_mm256_fmadd_ps(a.h[0], b.h[0], c.h[0]), _mm256_fmadd_ps(a.h[1], b.h[1], c.h[1])}};
}
#define F_IN_REGISTER(v)                                                                                        \
    do {                                                                                                        \
        IN_REGISTER((v).h[0]);                                                                                  \
        IN_REGISTER((v).h[1]);                                                                                  \
    } while (0)
/* 16 int32 or 32 int16 lanes, halves as v16f's: int16 lanes 0..15 the low output's */
typedef struct v16i {
    __m256i h[2];
} v16i;
ALWAYS_INLINE v16f f_mul(v16f a, v16f b)
{
    return (v16f){{_mm256_mul_ps(a.h[0], b.h[0]), _mm256_mul_ps(a.h[1], b.h[1])}};
}
ALWAYS_INLINE v16f f_from_i32(v16i p) { return (v16f){{_mm256_cvtepi32_ps(p.h[0]), _mm256_cvtepi32_ps(p.h[1])}}; }
ALWAYS_INLINE v16f f_exp(v16f a) { return (v16f){{exp_ps(a.h[0]), exp_ps(a.h[1])}}; }
ALWAYS_INLINE v16f f_swiglu(v16f g, v16f u) { return (v16f){{swiglu8(g.h[0], u.h[0]), swiglu8(g.h[1], u.h[1])}}; }
ALWAYS_INLINE v16f f_sub(v16f a, v16f b)
{
    return (v16f){{_mm256_sub_ps(a.h[0], b.h[0]), _mm256_sub_ps(a.h[1], b.h[1])}};
}
/* lanes l < n (n < 16): p[l] - m; the rest -infinity */
ALWAYS_INLINE v16f f_tail_minus(const float *p, int n, float m)
{
    float pad[16];
    for (int l = 0; l < 16; l++)
        pad[l] = l < n ? p[l] - m : -INFINITY;
    return f_load(pad);
}
/* p[l] = lane l for l < n (n < 16) */
ALWAYS_INLINE void f_store_first(float *p, int n, v16f a)
{
    float lanes[16];
    f_store(lanes, a);
    memcpy(p, lanes, (size_t)n * sizeof(float));
}
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
ALWAYS_INLINE v16i i16_sub(v16i a, int16_t d)
{
    __m256i v = _mm256_set1_epi16(d);
    return (v16i){{_mm256_sub_epi16(a.h[0], v), _mm256_sub_epi16(a.h[1], v)}};
}
/* 16 int16 at x in both halves */
ALWAYS_INLINE v16i i16_dup(const int16_t *x)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)x);
    return (v16i){{v, v}};
}
/* kernels_x86.h's dot_lanes in each half */
ALWAYS_INLINE v16i i_dot(v16i wlo, v16i xlo, v16i whi, v16i xhi)
{
    return (v16i){{dot_lanes(wlo.h[0], whi.h[0], xlo.h[0], xhi.h[0]),
                   dot_lanes(wlo.h[1], whi.h[1], xlo.h[1], xhi.h[1])}};
}
#define I_IN_REGISTER(v) F_IN_REGISTER(v)
/* half0[i], half1[i] = hsum of register i's half 0, 1: kernels_x86.h's hsums of each half's chains */
ALWAYS_INLINE void f_hsums(const v16f z[8], float *half0, float *half1)
{
    __m256 a[8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            a[i] = z[i].h[h];
        hsums(a, h ? half1 : half0);
    }
}
#else
typedef __m512 v16f;
ALWAYS_INLINE v16f f_zero(void) { return _mm512_setzero_ps(); }
ALWAYS_INLINE v16f f_halves(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }
ALWAYS_INLINE v16f f_dup(const float *p) { return _mm512_broadcast_f32x8(_mm256_loadu_ps(p)); }
ALWAYS_INLINE __m256 f_half(v16f a, int hi) { return hi ? _mm512_extractf32x8_ps(a, 1) : _mm512_castps512_ps256(a); }
ALWAYS_INLINE v16f f_load(const float *p) { return _mm512_loadu_ps(p); }
/* 8 elements of an F32 or F16 row from element k in both halves: a half row's 16 bytes broadcast to
 * both 128-bit lanes by the load itself, then one conversion of the 16 */
ALWAYS_INLINE v16f f_dup_row(uint32_t type, const void *row, int k)
{
    return type == MN_F32 ? _mm512_broadcast_f32x8(_mm256_loadu_ps((const float *)row + k))
                          : _mm512_cvtph_ps(_mm256_broadcastsi128_si256(
                                _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k))));
}
/* 16 elements of an F32 or F16 row from element k, as floats (kernels_x86.h's load8, 16 wide) */
ALWAYS_INLINE v16f f_load_row(uint32_t type, const void *row, int k)
{
    return type == MN_F32 ? _mm512_loadu_ps((const float *)row + k)
                          : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k)));
}
ALWAYS_INLINE void f_store(float *p, v16f a) { _mm512_storeu_ps(p, a); }
ALWAYS_INLINE v16f f_set1(float a) { return _mm512_set1_ps(a); }
ALWAYS_INLINE v16f f_fmadd(v16f a, v16f b, v16f c) { return _mm512_fmadd_ps(a, b, c); }
#define F_IN_REGISTER(v) IN_REGISTER(v)
typedef __m512i v16i;
ALWAYS_INLINE v16f f_mul(v16f a, v16f b) { return _mm512_mul_ps(a, b); }
ALWAYS_INLINE v16f f_from_i32(v16i p) { return _mm512_cvtepi32_ps(p); }
ALWAYS_INLINE v16f f_sub(v16f a, v16f b) { return _mm512_sub_ps(a, b); }
ALWAYS_INLINE v16f f_tail_minus(const float *p, int n, float m)
{
    __mmask16 k = (__mmask16)((1u << n) - 1);
    return _mm512_mask_sub_ps(_mm512_set1_ps(-INFINITY), k, _mm512_maskz_loadu_ps(k, p), _mm512_set1_ps(m));
}
ALWAYS_INLINE void f_store_first(float *p, int n, v16f a) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), a); }
/* kernels_x86.h's exp_ps in 16 lanes: kernels.h's MN_EXP steps on each lane, so the same bits (the
 * two repeat each other's shape: one macro over both widths would hide what each instruction is). */
ALWAYS_INLINE v16f f_exp(v16f x)
{
    const __m512 lo = _mm512_set1_ps(MN_EXP_LO);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(MN_EXP_HI));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(MN_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(MN_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(MN_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(MN_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MN_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MN_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MN_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MN_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MN_EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~under, p, _mm512_castsi512_ps(e));
}
/* kernels_x86.h's swiglu8 in 16 lanes */
ALWAYS_INLINE v16f f_swiglu(v16f g, v16f u)
{
    __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f), f_exp(_mm512_sub_ps(_mm512_setzero_ps(), g)));
    return _mm512_mul_ps(_mm512_div_ps(g, den), u);
}
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
ALWAYS_INLINE v16i i16_sub(v16i a, int16_t d) { return _mm512_sub_epi16(a, _mm512_set1_epi16(d)); }
ALWAYS_INLINE v16i i16_dup(const int16_t *x) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x)); }
ALWAYS_INLINE v16i i_dot(v16i wlo, v16i xlo, v16i whi, v16i xhi)
{
    return _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), wlo, xlo), whi, xhi);
}
/* half0[i], half1[i] = hsum of register i's half 0, 1: kernels_x86.h's hsums in 512-bit registers
 * (14 shuffles, 7 adds and a permute for 16 sums, where 16 hsums take about 110 operations), the
 * same bits. With it the avx512w table's passes of k = 5..8 tokens of the bundled target took 0.91-0.94x
 * the time at one sequence and 0.92-0.95x at four (tools/ab-decode.py --verify-curve, 20 rounds),
 * 16 sequences decoded 1.08x as fast (SmolLM2 F16 1.03x, F32 level: memory-bound) and a 256-token
 * prompt prefilled 1.06x as fast (the target and SmolLM2 F16). */
ALWAYS_INLINE void f_hsums(const v16f z[8], float *half0, float *half1)
{
    __m512 s[4]; /* a0+a4 .. a3+a7 of z[2j] half 0, z[2j] half 1, z[2j+1] half 0, z[2j+1] half 1 */
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        s[j] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * j], z[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(z[2 * j], z[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 w[2]; /* per 128-bit lane: (s0+s2, s1+s3) of s[2k], then of s[2k+1] */
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        __m512d a = _mm512_castps_pd(s[2 * k]), b = _mm512_castps_pd(s[2 * k + 1]);
        w[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    /* r's lane 4 L + j holds register i = 2 j + L / 2, half h = L % 2; `order` puts it at 8 h + i */
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    r = _mm512_permutexvar_ps(order, r);
    _mm256_storeu_ps(half0, _mm512_castps512_ps256(r));
    _mm256_storeu_ps(half1, _mm512_extractf32x8_ps(r, 1));
}
#define I_IN_REGISTER(v) IN_REGISTER(v)
#endif

/* kernels_x86.h's tile() in 512-bit registers: RT rows x 2 NP outputs (o0, o0 + stride, ...), the
 * outputs 2p and 2p + 1 in the halves of one register. The same chains, fed the same chunks in the
 * same order, summed in hsum's order (f_hsums): the same bits as tile(), with half the FMA
 * instructions. */
ALWAYS_INLINE void tile_w(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy,
                          int t0, uint32_t o0, uint32_t stride, const int RT, const int NP, const int NPF,
                          const uint8_t *pf, size_t pf_step)
{
    const int n_chunks = (int)(W->cols / 8), tail = (int)(W->cols % 8);
    const uint8_t *rows[16];
    const float *xr[8];
    v16f acc[8][8];
#pragma GCC unroll 16
    for (int o = 0; o < 2 * NP; o++)
        rows[o] = W->data + (size_t)(o0 + (uint32_t)o * stride) * W->row_bytes;
#pragma GCC unroll 8
    for (int t = 0; t < RT; t++)
        xr[t] = x + (size_t)(t0 + t) * ldx;
#pragma GCC unroll 8
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++)
            acc[t][p] = f_zero();
    for (int c = 0; c < n_chunks; c++) {
#pragma GCC unroll 16
        for (int i = 0; i < NPF; i++)
            _mm_prefetch((const char *)pf + (size_t)i * stride * W->row_bytes + (size_t)c * pf_step, _MM_HINT_T1);
        if (NP <= RT) { /* weights held, activations streamed */
            v16f w[8];
#pragma GCC unroll 8
            for (int p = 0; p < NP; p++) {
                w[p] = f_halves(load_chunk(type, rows[2 * p], c), load_chunk(type, rows[2 * p + 1], c));
                F_IN_REGISTER(w[p]);
            }
#pragma GCC unroll 8
            for (int t = 0; t < RT; t++) {
                v16f xv = f_dup(xr[t] + c * 8);
                F_IN_REGISTER(xv);
#pragma GCC unroll 8
                for (int p = 0; p < NP; p++)
                    acc[t][p] = f_fmadd(w[p], xv, acc[t][p]);
            }
        } else { /* activations held, weights streamed */
            v16f xv[8];
#pragma GCC unroll 8
            for (int t = 0; t < RT; t++)
                xv[t] = f_dup(xr[t] + c * 8);
#pragma GCC unroll 8
            for (int p = 0; p < NP; p++) {
                v16f w = f_halves(load_chunk(type, rows[2 * p], c), load_chunk(type, rows[2 * p + 1], c));
                F_IN_REGISTER(w);
#pragma GCC unroll 8
                for (int t = 0; t < RT; t++)
                    acc[t][p] = f_fmadd(w, xv[t], acc[t][p]);
            }
        }
    }
    /* the chains eight registers at a time (register i = t NP + p), the last few one by one */
#pragma GCC unroll 8
    for (int g = 0; g < RT * NP; g += 8) {
        const int n = RT * NP - g < 8 ? RT * NP - g : 8;
        v16f z[8];
        float sums[16];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            z[i] = i < n ? acc[(g + i) / NP][(g + i) % NP] : f_zero();
        if (n == 8)
            f_hsums(z, sums, sums + 8);
        else
#pragma GCC unroll 16
            for (int j = 0; j < 2 * n; j++)
                sums[8 * (j % 2) + j / 2] = hsum(f_half(z[j / 2], j % 2));
#pragma GCC unroll 16
        for (int j = 0; j < 2 * n; j++) {
            const int i = j / 2, h = j % 2, t = (g + i) / NP, o = 2 * ((g + i) % NP) + h;
            float s = sums[8 * h + i];
            for (int k = n_chunks * 8; k < n_chunks * 8 + tail; k++)
                s = fmaf(scalar_w(type, rows[o], k), xr[t][k], s);
            y[(size_t)(t0 + t) * ldy + o0 + (uint32_t)o * stride] = s;
        }
    }
}

/* tile_w turned around: RP pairs of rows x OT outputs a stride apart, rows 2p and 2p + 1 in the
 * halves of one register, and each output's chunk broadcast to both halves by its load. tile_w
 * merges two outputs' chunks into a register, a shuffle beside the load for every two outputs; here
 * the rows come interleaved by pairs once for the whole matrix (pair_rows), and every load is a
 * load. The chains, their order and the sums are tile_w's, so are the bits. Its end repeats
 * tile_w's with the other register-to-(row, output) map: one inline helper for both (the map a
 * flag) changed the code GCC made for tile_w's shapes, and passes of 3 and 4 tokens of the bundled
 * target took 1.06x and 1.09x the time (10 alternating rounds of 300 passes). */
ALWAYS_INLINE void tile_wp(uint32_t type, const mn_weight *W, const float *xp, const float *x, size_t ldx, float *y,
                           size_t ldy, uint32_t o0, uint32_t stride, const int RP, const int OT, const int NPF,
                           const uint8_t *pf, size_t pf_step)
{
    const int n_chunks = (int)(W->cols / 8), tail = (int)(W->cols % 8);
    const uint8_t *rows[8];
    v16f acc[4][8];
#pragma GCC unroll 8
    for (int o = 0; o < OT; o++)
        rows[o] = W->data + (size_t)(o0 + (uint32_t)o * stride) * W->row_bytes;
#pragma GCC unroll 4
    for (int p = 0; p < RP; p++)
#pragma GCC unroll 8
        for (int o = 0; o < OT; o++)
            acc[p][o] = f_zero();
    for (int c = 0; c < n_chunks; c++) {
#pragma GCC unroll 16
        for (int i = 0; i < NPF; i++)
            _mm_prefetch((const char *)pf + (size_t)i * stride * W->row_bytes + (size_t)c * pf_step, _MM_HINT_T1);
        v16f xv[4];
#pragma GCC unroll 4
        for (int p = 0; p < RP; p++) {
            xv[p] = f_load(xp + ((size_t)p * (size_t)n_chunks + (size_t)c) * 16);
            F_IN_REGISTER(xv[p]);
        }
#pragma GCC unroll 8
        for (int o = 0; o < OT; o++) {
            v16f w = f_dup_row(type, rows[o], c * 8);
            F_IN_REGISTER(w);
#pragma GCC unroll 4
            for (int p = 0; p < RP; p++)
                acc[p][o] = f_fmadd(w, xv[p], acc[p][o]);
        }
    }
#pragma GCC unroll 8
    for (int g = 0; g < RP * OT; g += 8) {
        const int n = RP * OT - g < 8 ? RP * OT - g : 8;
        v16f z[8];
        float sums[16];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            z[i] = i < n ? acc[(g + i) / OT][(g + i) % OT] : f_zero();
        if (n == 8)
            f_hsums(z, sums, sums + 8);
        else
#pragma GCC unroll 16
            for (int j = 0; j < 2 * n; j++)
                sums[8 * (j % 2) + j / 2] = hsum(f_half(z[j / 2], j % 2));
#pragma GCC unroll 16
        for (int j = 0; j < 2 * n; j++) {
            const int i = j / 2, h = j % 2, t = 2 * ((g + i) / OT) + h, o = (g + i) % OT;
            float s = sums[8 * h + i];
            for (int k = n_chunks * 8; k < n_chunks * 8 + tail; k++)
                s = fmaf(scalar_w(type, rows[o], k), x[(size_t)t * ldx + (size_t)k], s);
            y[(size_t)t * ldy + o0 + (uint32_t)o * stride] = s;
        }
    }
}

/* xp = rows 0 .. 2 RP - 1 of x interleaved by pairs: pair p's chunk c is row 2p's then row 2p + 1's,
 * 16 floats at xp + (p n_chunks + c) 16. */
ALWAYS_INLINE void pair_rows(const float *x, size_t ldx, int RP, int n_chunks, float *xp)
{
    for (int p = 0; p < RP; p++)
        for (int c = 0; c < n_chunks; c++)
            for (int h = 0; h < 2; h++)
                memcpy(xp + ((size_t)p * (size_t)n_chunks + (size_t)c) * 16 + h * 8,
                       x + (size_t)(2 * p + h) * ldx + (size_t)c * 8, 8 * sizeof(float));
}

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
                          int T, uint32_t o, uint32_t stride, const uint8_t *next, const int RB, const int OT,
                          const bool WIDE)
{
#define TILE_F(RT, PF)                                                                                         \
    do {                                                                                                       \
        if (WIDE)                                                                                              \
            tile_w(type, W, x, ldx, y, ldy, t, o, stride, RT, OT / 2, (PF) ? OT : 0, PF, pf_step);             \
        else                                                                                                   \
            tile(type, W, x, ldx, y, ldy, t, o, stride, RT, OT, (PF) ? OT : 0, PF, pf_step);                   \
    } while (0)
    const size_t pf_step = W->cols >= 8 ? W->row_bytes / (W->cols / 8) : 0;
    int t = 0;
    if (RB == 0) { /* 8 rows or more (512-bit tiles): blocks of 8, the last 9..11 rows as two */
        for (int i = 0; t < T; i++) {
            int n = T - t, rt = n >= 12 ? 8 : n >= 9 ? n / 2 : n;
            const uint8_t *pf = i == 1 || rt == T ? next : NULL;
            switch (rt) {
            case 8: TILE_F(8, pf); break;
            case 7: TILE_F(7, pf); break;
            case 6: TILE_F(6, pf); break;
            case 5: TILE_F(5, pf); break;
            case 4: TILE_F(4, pf); break;
            default: break; /* n >= 4 whenever T >= 8 */
            }
            t += rt;
        }
        return;
    }
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
                             int T, uint32_t ob, uint32_t oe, const int RB, const int OT, const bool WIDE)
{
    const uint32_t q = (oe - ob) / (uint32_t)OT;
    for (uint32_t o = ob; o < ob + q; o++) {
        const uint8_t *next = o + PF_GROUPS < ob + q ? W->data + (size_t)(o + PF_GROUPS) * W->row_bytes : NULL;
        rows_f(type, W, x, ldx, y, ldy, T, o, q, next, RB, OT, WIDE);
    }
    for (uint32_t o = ob + (uint32_t)OT * q; o < oe; o++)
        rows_f(type, W, x, ldx, y, ldy, T, o, 1, NULL, RB, 1, false);
}

/* outputs_f for exactly 2 RP rows in tile_wp's (RP <= 4, OT <= 8), the rows paired once for all
 * tiles on the stack: 8 to PAIRED_MAX_COLS columns, 64 KB at most for 8 rows. */
#define PAIRED_MAX_COLS 2048
ALWAYS_INLINE void outputs_fp(uint32_t type, const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy,
                              uint32_t ob, uint32_t oe, const int RP, const int OT)
{
    const int n_chunks = (int)(W->cols / 8);
    float xp[RP * n_chunks * 16];
    pair_rows(x, ldx, RP, n_chunks, xp);
    const size_t pf_step = W->cols >= 8 ? W->row_bytes / (W->cols / 8) : 0;
    const uint32_t q = (oe - ob) / (uint32_t)OT;
    for (uint32_t o = ob; o < ob + q; o++) {
        const uint8_t *next = o + PF_GROUPS < ob + q ? W->data + (size_t)(o + PF_GROUPS) * W->row_bytes : NULL;
        if (next)
            tile_wp(type, W, xp, x, ldx, y, ldy, o, q, RP, OT, OT, next, pf_step);
        else
            tile_wp(type, W, xp, x, ldx, y, ldy, o, q, RP, OT, 0, NULL, pf_step);
    }
    for (uint32_t o = ob + (uint32_t)OT * q; o < oe; o++)
        rows_f(type, W, x, ldx, y, ldy, 2 * RP, o, 1, NULL, 2 * RP, 1, false);
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
#define SHAPE_F(NAME, TYPE, RB, OT, EXACT, WIDE)                                                                \
    static __attribute__((noinline)) void NAME(const mn_weight *W, const float *x, size_t ldx, float *y,       \
                                               size_t ldy, int T, uint32_t ob, uint32_t oe)                    \
    {                                                                                                           \
        outputs_f(TYPE, W, x, ldx, y, ldy, (EXACT) ? (RB) : T, ob, oe, RB, OT, WIDE);                           \
    }
#define SHAPES_F(SHAPE, RB, OT, EXACT)                                                                          \
    SHAPE_F(f32_##SHAPE, MN_F32, RB, OT, EXACT, false)                                                          \
    SHAPE_F(f16_##SHAPE, MN_F16, RB, OT, EXACT, false)
SHAPES_F(2x8, 2, 8, true)
SHAPES_F(3x6, 3, 6, true)
SHAPES_F(4x6, 4, 6, false)
SHAPES_F(5x5, 5, 5, true)
SHAPES_F(6x4, 6, 4, true)
SHAPES_F(7x3, 7, 3, true)
/* The 512-bit tiles (the avx512w table): rows x outputs, two outputs a register, so 5 x 10 holds
 * 25 registers of chains as 5 x 5 does; 8 rows or more in blocks of 8 x 6 (24 registers), the last
 * 9..11 rows as two blocks of 4..6 (rows_f). */
#define WIDE_F(SHAPE, RB, OT)                                                                                   \
    SHAPE_F(f32w_##SHAPE, MN_F32, RB, OT, true, true)                                                           \
    SHAPE_F(f16w_##SHAPE, MN_F16, RB, OT, true, true)
WIDE_F(3x6, 3, 6)
WIDE_F(4x6, 4, 6)
WIDE_F(5x10, 5, 10)
WIDE_F(6x8, 6, 8)
WIDE_F(7x6, 7, 6)
/* Passes of exactly 8 rows in paired tiles of 8 x 6 (tile_wp). */
#define PAIRED_F(NAME, TYPE, RP, OT)                                                                            \
    static __attribute__((noinline)) void NAME(const mn_weight *W, const float *x, size_t ldx, float *y,       \
                                               size_t ldy, int T, uint32_t ob, uint32_t oe)                    \
    {                                                                                                           \
        (void)T;                                                                                                \
        outputs_fp(TYPE, W, x, ldx, y, ldy, ob, oe, RP, OT);                                                    \
    }
PAIRED_F(f32w_8x6p, MN_F32, 4, 6)
PAIRED_F(f16w_8x6p, MN_F16, 4, 6)
SHAPE_F(f32w_blocks, MN_F32, 0, 6, false, true)
SHAPE_F(f16w_blocks, MN_F16, 0, 6, false, true)
#undef WIDE_F
#undef PAIRED_F
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

/* x16_matmul with its float passes of 3 rows or more in 512-bit tiles. Two rows stay in 256-bit
 * ones: a 512-bit tile of 2 rows merges two weight rows into a register for only 2 x OT/2 FMAs, and
 * ran level with 2 x 8 (minions-bench-matmul, one core, 2026-11-29, a Zen 5 core: 66-88 against
 * 65-92 GFLOP/s on the bundled target's four shapes). Two F32 rows take AVX2's 2 x 6 tile, which on
 * that core ran 1.3-1.5x as fast as 2 x 8 alone (98-123 against 67-91 GFLOP/s, the same four shapes,
 * three alternating runs) and made the passes of two tokens 0.89-0.90x the time on the bundled
 * target and 0.83-0.88x on SmolLM2 F32 (ab-decode --verify-curve --batches 1,2, 12-20 rounds: k = 2
 * of one sequence, k = 1 of two); SmolLM2 F16's passes of two ran 0.91x and 1.12x there, so F16
 * keeps 2 x 8. Three and four rows take 3 x 6 and 4 x 6
 * outputs (three registers of pairs: six weight streams, as AVX2's tiles read): alone 102-160
 * against 101-120 GFLOP/s, and in the bundled target's passes of 4 tokens 0.90-0.91x the time in two
 * runs beside 4 x 6 in 256-bit registers (tools/ab-decode.py --verify-curve, 8 rounds; 3 tokens
 * level, 1.00-1.01x, the weights' stream from L3 bounding it); with six pairs a register's worth of
 * outputs (4 x 12) it had run level alone and 1.1x slower there. From 5 rows on the 512-bit tiles
 * reached 140-196 GFLOP/s against 113-125 (T = 5..512, the target's four shapes). Exactly 8 rows
 * (a verification of 8 tokens, or of 4 of two sequences) take the paired 8 x 6 tiles (tile_wp):
 * one core, the target's shapes at T = 8, 200-211 -> 205-220 GFLOP/s; in the target's passes
 * (ab-decode --verify-curve, 20 rounds) 0.94x the time for 8 tokens of one sequence, 0.95x for 4 of
 * two. Paired 4 x 8, 4 x 12 and 6 x 8 ran level or slower than the tiles above (123-191 against
 * 150-190). */
/* Passes of 9..PAIRED_BLOCKS_MAX_T rows whose share of the weights (the outputs [o_begin, o_end)) fits
 * in PAIRED_BLOCKS_MAX_BYTES, half of a Zen 5 core's L2, go 8 rows at a time through the paired
 * tiles, the share read again from L2 for every block, and their last T % 8 rows through the shapes
 * above. Alone, one core, T = 16..64: 256 x 256 and 768 x 256 172-192 -> 216-224 GFLOP/s; 2048 x
 * 256 (2 MB, from L3 for every block) 189-197 -> 179. In the bundled target, whose shares are
 * 128-352 KB but for the output's 1 MB (tools/ab-decode.py, beside the build before): passes of 16
 * sequences' 2-8 tokens 0.93-0.96x the time, four sequences' 4-8 0.94-0.98x (--verify-curve, 12
 * rounds), 16 sequences decoded 1.03x as fast (12 rounds), prompts of 64 and 128 tokens prefilled
 * 1.19x and 1.07x. With a bound of 320 KB (the feed-forward shares left out) passes of 16 and 48
 * tokens took 1.035-1.05x the time of 512's, with 2 MB level; prompts of 256 tokens, whose rows
 * crowd the share out of L2, prefilled 0.81-0.97x as fast, hence the bound on T. SmolLM2 F16's
 * shares (331-885 KB) ran level. */
#define PAIRED_BLOCKS_MAX_T 128
#define PAIRED_BLOCKS_MAX_BYTES (512 * 1024)

static void x16w_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
                        uint32_t o_begin, uint32_t o_end)
{
    static matmul_f_fn *const shapes[2][6] = {{f32w_3x6, f32w_4x6, f32w_5x10, f32w_6x8, f32w_7x6, f32w_blocks},
                                              {f16w_3x6, f16w_4x6, f16w_5x10, f16w_6x8, f16w_7x6, f16w_blocks}};
    const int f16 = W->type == MN_F16;
    if (W->type != MN_F32 && !f16) {
        x16_matmul(W, x, ldx, y, ldy, T, o_begin, o_end);
        return;
    }
    int t = 0; /* rows done in the paired tiles */
    if (W->cols >= 8 && W->cols <= PAIRED_MAX_COLS &&
        (T == 8 || (T > 8 && T <= PAIRED_BLOCKS_MAX_T &&
                    (size_t)(o_end - o_begin) * W->row_bytes <= PAIRED_BLOCKS_MAX_BYTES)))
        for (; t + 8 <= T; t += 8)
            (f16 ? f16w_8x6p : f32w_8x6p)(W, x + (size_t)t * ldx, ldx, y + (size_t)t * ldy, ldy, 8, o_begin, o_end);
    const int n = T - t;
    x += (size_t)t * ldx;
    y += (size_t)t * ldy;
    if (n >= 3)
        shapes[f16][(n < 8 ? n : 8) - 3](W, x, ldx, y, ldy, n, o_begin, o_end);
    else if (n == 2 && !f16)
        mn_kernels_avx2.matmul(W, x, ldx, y, ldy, n, o_begin, o_end);
    else if (n > 0)
        x16_matmul(W, x, ldx, y, ldy, n, o_begin, o_end);
}

/* ---- quantized weights, 16-bit activations ------------------------------------------------------ */

/* The 32 weights of one block of two outputs (quants at a and b) as int16: lo = elements 0..15 of a
 * then of b, hi = elements 16..31 of a then of b (kernels_x86.h's load_wq, for two rows at once). */
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

/* kernels_x86.h's tile_q8 in 512-bit registers: RT rows x 2 NP outputs a stride apart, outputs 2p
 * and 2p + 1 in the halves of one register. Per block, one vpdpwssd pair, conversion and FMA make
 * both outputs' lanes, from the same integers, scales and order as tile_q8: the same bits. */
ALWAYS_INLINE void tile_q8w(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy,
                            int t0, uint32_t o0, uint32_t stride, const int RT, const int NP)
{
    const int nb = (int)(W->cols / 32), ng = (nb + 7) / 8, q41 = type == MN_Q4_1;
    const size_t qb = q_quant_bytes(type);
    const bool prefetch = stride == 1; /* rows a stride apart are streams the hardware follows */
    const uint8_t *dp[8], *mp[8], *qp[8];
    v16f acc[Q8_MAX_RT][4];
#pragma GCC unroll 8
    for (int o = 0; o < 2 * NP; o++) {
        dp[o] = W->data + (size_t)(o0 + (uint32_t)o * stride) * W->row_bytes;
        mp[o] = dp[o] + 2 * (size_t)nb;
        qp[o] = dp[o] + 2 * (size_t)nb * (1 + q41);
    }
#pragma GCC unroll 5
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++)
            acc[t][p] = f_zero();
    for (int g = 0; g < ng; g++) {
        const int n = nb - 8 * g < 8 ? nb - 8 * g : 8;
        /* the group's scales dw_b * dx_b of a pair's two outputs: block j in lanes j and 8 + j */
        v16f sc[Q8_MAX_RT][4];
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) {
            if (prefetch) {
                _mm_prefetch((const char *)(dp[2 * p] + 16 * g) + PREFETCH_BYTES, _MM_HINT_T0);
                _mm_prefetch((const char *)(dp[2 * p + 1] + 16 * g) + PREFETCH_BYTES, _MM_HINT_T0);
            }
            v16f dw = f_halves(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp[2 * p] + 16 * g))),
                               _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp[2 * p + 1] + 16 * g))));
#pragma GCC unroll 5
            for (int t = 0; t < RT; t++)
                sc[t][p] = f_mul(dw, f_dup(xq[(size_t)(t0 + t) * ldxq + g].d));
        }
        for (int j = 0; j < n; j++) {
            const size_t b = (size_t)(8 * g + j);
            v16i xlo[Q8_MAX_RT], xhi[Q8_MAX_RT]; /* the block's activations, in both halves */
#pragma GCC unroll 5
            for (int t = 0; t < RT; t++) {
                const int16_t *x = xq[(size_t)(t0 + t) * ldxq + g].qs[j];
                xlo[t] = i16_dup(x);
                xhi[t] = i16_dup(x + 16);
                if (NP > 1) {
                    I_IN_REGISTER(xlo[t]);
                    I_IN_REGISTER(xhi[t]);
                }
            }
#pragma GCC unroll 4
            for (int p = 0; p < NP; p++) {
                if (prefetch) {
                    _mm_prefetch((const char *)(qp[2 * p] + b * qb) + PREFETCH_BYTES, _MM_HINT_T0);
                    _mm_prefetch((const char *)(qp[2 * p + 1] + b * qb) + PREFETCH_BYTES, _MM_HINT_T0);
                }
                v16i wlo, whi;
                load_wq2(type, qp[2 * p] + b * qb, qp[2 * p + 1] + b * qb, &wlo, &whi);
#pragma GCC unroll 5
                for (int t = 0; t < RT; t++)
                    acc[t][p] = f_fmadd(f_lane(sc[t][p], j), f_from_i32(i_dot(wlo, xlo[t], whi, xhi[t])), acc[t][p]);
            }
        }
        if (q41) {
            __m256 keep = _mm256_castsi256_ps(
                _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
#pragma GCC unroll 4
            for (int p = 0; p < NP; p++) {
                /* past the row's end: other bytes of the row, masked to 0 */
                v16f m = f_halves(
                    _mm256_and_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mp[2 * p] + 16 * g))), keep),
                    _mm256_and_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mp[2 * p + 1] + 16 * g))), keep));
#pragma GCC unroll 5
                for (int t = 0; t < RT; t++)
                    acc[t][p] = f_fmadd(m, f_dup(xq[(size_t)(t0 + t) * ldxq + g].s), acc[t][p]);
            }
        }
    }
#pragma GCC unroll 5
    for (int t = 0; t < RT; t++)
#pragma GCC unroll 8
        for (int o = 0; o < 2 * NP; o++)
            y[(size_t)(t0 + t) * ldy + o0 + (uint32_t)o * stride] = hsum(f_half(acc[t][o / 2], o % 2));
}

/* The rows of one group of OT outputs (a stride apart) in tiles of RB <= 5 rows, then one of the rest;
 * WIDE: in 512-bit tiles (OT even). */
ALWAYS_INLINE void rows_q8(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy,
                           int T, uint32_t o, uint32_t stride, const int RB, const int OT, const bool WIDE)
{
#define TILE_Q(RT)                                                                                              \
    do {                                                                                                        \
        if (WIDE)                                                                                               \
            tile_q8w(type, W, xq, ldxq, y, ldy, t, o, stride, RT, OT / 2);                                      \
        else                                                                                                    \
            tile_q8(type, W, xq, ldxq, y, ldy, t, o, stride, RT, OT);                                           \
    } while (0)
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
                              int T, uint32_t ob, uint32_t oe, const int RB, const int OT, const bool WIDE)
{
    const uint32_t q = (oe - ob) / (uint32_t)OT;
    for (uint32_t o = ob; o < ob + q; o++)
        rows_q8(type, W, xq, ldxq, y, ldy, T, o, q, RB, OT, WIDE);
    for (uint32_t o = ob + (uint32_t)OT * q; o < oe; o++)
        rows_q8(type, W, xq, ldxq, y, ldy, T, o, 1, RB, 1, false);
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
        outputs_q8(type, W, xq, ldxq, y, ldy, T, ob, oe, 5, 4, false);
    else
        outputs_q8(type, W, xq, ldxq, y, ldy, T, ob, oe, 4, 4, false);
}

/* avx512w's: one row as above; more in 512-bit 4 x 4 tiles (two pairs of outputs). */
ALWAYS_INLINE void matmul_q8w_typed(uint32_t type, const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y,
                                    size_t ldy, int T, uint32_t ob, uint32_t oe)
{
    if (T == 1)
        outputs_q8(type, W, xq, ldxq, y, ldy, T, ob, oe, 4, 4, false);
    else
        outputs_q8(type, W, xq, ldxq, y, ldy, T, ob, oe, 4, 4, true);
}

DEFINE_MATMUL_Q8_ENTRY(x16_matmul_q8, matmul_q8_typed)
DEFINE_MATMUL_Q8_ENTRY(x16w_matmul_q8, matmul_q8w_typed)

/* ---- attention scores, two heads at a time ------------------------------------------------------
 * mn_dots for the heads of a GQA group (they share the keys): two heads' query chunks in the halves
 * of one register and each key's chunk in both (f_dup), so one load and one FMA feed both heads'
 * 8-lane chains, where AVX2's dots spends a load and an FMA on each. Eight keys at a time, their 16
 * chains summed by f_hsums, each chain fed its chunks in order and its tail after the sum as AVX2's
 * dots does: the same bits. A last few keys run as an eight whose missing keys repeat the first and
 * are dropped (tools/bench-attention.c: two 32-float heads over 36 keys in 53 ns, against 63-65 with
 * the last four through AVX2's dots and 55 over 40 keys); a last odd head goes to AVX2's.
 * tools/bench-attention.c (one core, a Zen 5 host, 2026-11-30): two 32-float heads over 72 / 512
 * keys in 78 / 611 ns against AVX2's 118 / 1,070, two 64-float heads in 138 / 1,064 against 189 /
 * 2,082. In the bundled target (--verify-curve, three runs alternating with the build before), passes
 * of 4-8 tokens after 512 tokens of context took 0.85-0.96x the time; after 64, level (0.95-1.03x),
 * where the K rows' loads from L2 and L3 bound the pass's attention more than its FMAs do. */
ALWAYS_INLINE void dots_w(const float *q, size_t ldq, int n_heads, const void *const *b, const uint32_t type, int n_b,
                          int n, float *out, size_t ldo)
{
    const int full = n / 8 * 8;
    int h = 0;
    for (; h + 2 <= n_heads; h += 2) {
        const float *q0 = q + (size_t)h * ldq, *q1 = q0 + ldq;
        float *o0 = out + (size_t)h * ldo, *o1 = o0 + ldo;
        for (int j = 0; j < n_b; j += 8) {
            const int m = n_b - j < 8 ? n_b - j : 8; /* keys in this eight; the rest rerun key j */
            const void *kb[8];
            float s0[8], s1[8], *d0 = m == 8 ? o0 + j : s0, *d1 = m == 8 ? o1 + j : s1;
            v16f acc[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                kb[i] = b[j + (i < m ? i : 0)];
                acc[i] = f_zero();
            }
            for (int k = 0; k < full; k += 8) {
                v16f qq = f_halves(_mm256_loadu_ps(q0 + k), _mm256_loadu_ps(q1 + k));
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    acc[i] = f_fmadd(qq, f_dup_row(type, kb[i], k), acc[i]);
            }
            f_hsums(acc, d0, d1); /* key j + i: head h's chain in half 0, h + 1's in half 1 */
            for (int k = full; k < n; k++)
                for (int i = 0; i < m; i++) {
                    d0[i] = fmaf(q0[k], scalar_w(type, kb[i], k), d0[i]);
                    d1[i] = fmaf(q1[k], scalar_w(type, kb[i], k), d1[i]);
                }
            if (m < 8) {
                memcpy(o0 + j, s0, (size_t)m * sizeof(float));
                memcpy(o1 + j, s1, (size_t)m * sizeof(float));
            }
        }
    }
    if (h < n_heads)
        mn_kernels_avx2.dots(q + (size_t)h * ldq, ldq, 1, b, type, n_b, n, out + (size_t)h * ldo, ldo);
}

/* SwiGLU and the softmax's exponentials 16 lanes at a time, every lane the AVX2 table's arithmetic
 * (f_exp, f_swiglu), and the softmax's sum fed each 16 as its two 8-lane halves in turn: the 8-lane
 * chunks' order, so the same bits. SwiGLU's last few go as the AVX2 table takes them; the softmax's
 * in one more register, its lanes past the row -infinity as AVX2's padded tail has them: their 0s
 * add nothing to the sum's lanes (a half of only such lanes adds +0 to sums that are +0 or more).
 * AVX2's padded tail, built and copied back in scalar loops, cost a 36-score row nearly as much as
 * the rest of it (tools/bench-attention.c: 44-45 ns, 27-30 with this tail; 72 scores, none, 32). */
static void x16w_swiglu(float *gate, const float *up, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        f_store(gate + i, f_swiglu(f_load(gate + i), f_load(up + i)));
    mn_kernels_avx2.swiglu(gate + i, up + i, n - i);
}

static float x16w_softmax(float *x, int n, float scale)
{
    float mx = softmax_scale_max(x, n, scale);
    v16f vm = f_set1(mx);
    __m256 sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f e = f_exp(f_sub(f_load(x + i), vm));
        f_store(x + i, e);
        sum = _mm256_add_ps(_mm256_add_ps(sum, f_half(e, 0)), f_half(e, 1));
    }
    if (i < n) {
        v16f e = f_exp(f_tail_minus(x + i, n - i, mx));
        f_store_first(x + i, n - i, e);
        sum = _mm256_add_ps(_mm256_add_ps(sum, f_half(e, 0)), f_half(e, 1));
    }
    return hsum(sum);
}

static void x16w_dots(const float *q, size_t ldq, int n_heads, const void *const *b, uint32_t type, int n_b, int n,
                      float *out, size_t ldo)
{
    if (type == MN_F16)
        dots_w(q, ldq, n_heads, b, MN_F16, n_b, n, out, ldo);
    else
        dots_w(q, ldq, n_heads, b, MN_F32, n_b, n, out, ldo);
}

/* ---- attention's weighted sums, 16 elements a register ------------------------------------------
 * out[h][i] = sum over the rows j, in order, of w[h][j] rows[j][i]: each element's own chain of
 * FMAs, as every table runs it, so any register width gives the same bits. AVX2's takes 32 elements
 * a pass over the rows (four 8-lane registers) and two heads at most; here G heads (up to three: a
 * GQA group of SmolLM2) of C registers of 16 elements each share each row's loads.
 * tools/bench-attention.c (one core, a Zen 5 host, 2026-11-30, two runs): SmolLM2's three 64-float
 * heads over 72 / 512 rows in 114-116 / 1,094-1,114 ns against AVX2's 270-272 / 2,661-2,664; two
 * 32-float heads (the bundled target's group) 71 / 542-549 against 74-85 / 554-556. In the models
 * (tools/ab-decode.py, 8 rounds, alternating with the build before): SmolLM2 Q4_1 decoded after
 * 1,024 tokens of context 1.14x as fast at one sequence and 1.11x at four, SmolLM2-shaped F16 1.08x
 * (6 rounds); after 32 tokens, and the bundled target after 512, level (0.99-1.01x). */
ALWAYS_INLINE void wsum_slice(float *out, size_t ldo, const float *w, size_t ldw, const void *const *rows,
                              const uint32_t type, int n_rows, int i, const int G, const int C)
{
    v16f acc[3][4];
#pragma GCC unroll 3
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            acc[h][c] = f_zero();
    for (int j = 0; j < n_rows; j++) {
        v16f v[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            v[c] = f_load_row(type, rows[j], i + 16 * c);
#pragma GCC unroll 3
        for (int h = 0; h < G; h++) {
            v16f a = f_set1(w[(size_t)h * ldw + j]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                acc[h][c] = f_fmadd(a, v[c], acc[h][c]);
        }
    }
#pragma GCC unroll 3
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            f_store(out + (size_t)h * ldo + i + 16 * c, acc[h][c]);
}

/* G heads over all n elements: slices of 64, then 32 and 16, then the last few one by one. */
ALWAYS_INLINE void wsum_heads(float *out, size_t ldo, const float *w, size_t ldw, const void *const *rows,
                              const uint32_t type, int n_rows, int n, const int G)
{
    int i = 0;
    for (; i + 64 <= n; i += 64)
        wsum_slice(out, ldo, w, ldw, rows, type, n_rows, i, G, 4);
    if (i + 32 <= n) {
        wsum_slice(out, ldo, w, ldw, rows, type, n_rows, i, G, 2);
        i += 32;
    }
    if (i + 16 <= n) {
        wsum_slice(out, ldo, w, ldw, rows, type, n_rows, i, G, 1);
        i += 16;
    }
    weighted_sum_tail(out, ldo, w, ldw, rows, type, n_rows, i, n, G);
}

/* A GQA group's heads three, two or one at a time (three only as the whole of what is left); a head
 * alone of fewer than 64 elements goes to AVX2's, whose four 8-lane chains ran 11% faster over 512
 * rows of 32 than two 16-lane ones (tools/bench-attention.c). */
ALWAYS_INLINE void wsum_typed(float *out, size_t ldo, const float *w, size_t ldw, int n_heads, const void *const *rows,
                              const uint32_t type, int n_rows, int n)
{
    for (int h = 0, g; h < n_heads; h += g) {
        const int left = n_heads - h;
        g = left == 3 ? 3 : left >= 2 ? 2 : 1;
        float *o = out + (size_t)h * ldo;
        const float *wh = w + (size_t)h * ldw;
        if (g == 3)
            wsum_heads(o, ldo, wh, ldw, rows, type, n_rows, n, 3);
        else if (g == 2)
            wsum_heads(o, ldo, wh, ldw, rows, type, n_rows, n, 2);
        else if (n >= 64)
            wsum_heads(o, ldo, wh, ldw, rows, type, n_rows, n, 1);
        else
            mn_kernels_avx2.weighted_sum(o, ldo, wh, ldw, 1, rows, type, n_rows, n);
    }
}

static void x16w_weighted_sum(float *out, size_t ldo, const float *w, size_t ldw, int n_heads, const void *const *rows,
                              uint32_t type, int n_rows, int n)
{
    if (type == MN_F16)
        wsum_typed(out, ldo, w, ldw, n_heads, rows, MN_F16, n_rows, n);
    else
        wsum_typed(out, ldo, w, ldw, n_heads, rows, MN_F32, n_rows, n);
}

#ifdef MN_X16_EMULATE
static int x16_usable(void) { return mn_kernels_avx2.usable(); }
static int never_default(void) { return 0; } /* an emulation runs only when named */
#define X16_PREFER never_default
#define X16W_PREFER never_default
#define X16_TABLE mn_kernels_avx512_emu
#define X16_NAME "avx512-emu"
#define X16W_TABLE mn_kernels_avx512w_emu
#define X16W_NAME "avx512w-emu"
#else
static int x16_usable(void)
{
    __builtin_cpu_init();
    return mn_kernels_avx2.usable() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
}

/* Seconds for STEPS steps of ten independent FMA chains (two pipes x four cycles of latency need
 * eight), in 256-bit or 512-bit registers: one loop each, so that the chains stay in registers.
 * The first probe (until 2026-11-30) ran both in one loop with the width tested inside; GCC kept the
 * chains on the stack there, the store-to-load round trip bounded both widths, and the ratio came
 * out 1.5-1.75 on a Zen 5 core instead of its 2: 4 of 30 starts picked avx512, whose verification
 * passes run about 1.2x as long. noinline: no AVX-512 instruction of it may be scheduled before
 * the caller's usable() check. Ten variables, not an array: an ASan build stored an array's ten
 * registers to the stack at every step (GCC keeps addressable arrays in memory there), and its probe,
 * bound by 512-bit stores, measured 1.3 and took avx512. */
#define FMA_CHAINS(V, FMADD, SET1)                                                                                \
    do {                                                                                                        \
        const V m = SET1(0.999999f), c = SET1(1e-6f);                                                           \
        V a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), a5 = SET1(5), a6 = SET1(6),      \
          a7 = SET1(7), a8 = SET1(8), a9 = SET1(9);                                                             \
        double t0 = mn_now();                                                                                   \
        for (int s = 0; s < steps; s++) {                                                                       \
            a0 = FMADD(a0, m, c), a1 = FMADD(a1, m, c), a2 = FMADD(a2, m, c), a3 = FMADD(a3, m, c);             \
            a4 = FMADD(a4, m, c), a5 = FMADD(a5, m, c), a6 = FMADD(a6, m, c), a7 = FMADD(a7, m, c);             \
            a8 = FMADD(a8, m, c), a9 = FMADD(a9, m, c);                                                         \
        }                                                                                                       \
        t = mn_now() - t0;                                                                                      \
        sink = a0[0] + a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0] + a7[0] + a8[0] + a9[0];                   \
    } while (0)
static __attribute__((noinline)) double fma_seconds(bool wide, int steps)
{
    double t;
    volatile float sink;
    if (wide)
        FMA_CHAINS(__m512, _mm512_fmadd_ps, _mm512_set1_ps);
    else
        FMA_CHAINS(__m256, _mm256_fmadd_ps, _mm256_set1_ps);
    (void)sink;
    return t;
}
#undef FMA_CHAINS

/* Whether this core runs 512-bit FMAs at (nearly) the rate of 256-bit ones, so that the 512-bit
 * tiles do twice the work per instruction: on Zen 5 (and Intel cores with two 512-bit FMA units)
 * yes; on Zen 4, which splits each over its 256-bit pipes, no (see the opening comment). Measured
 * once, at the table's first use: a warm-up of both widths (the clock ramps up from idle, and a
 * core may power its 512-bit units up on first use), then the best of five short runs each: 26
 * runs of about 5 us. The FLOP-rate ratio is near 1 on a core that splits 512-bit FMAs and near 2 on one
 * that does not; the choice is made at 1.5. */
static int x16w_prefer(void)
{
    if (!x16_usable())
        return 0;
    enum { STEPS = 4096 };
    for (int r = 0; r < 8; r++) {
        fma_seconds(true, STEPS);
        fma_seconds(false, STEPS);
    }
    double narrow = 1e9, wide = 1e9;
    for (int r = 0; r < 5; r++) {
        double n = fma_seconds(false, STEPS), w = fma_seconds(true, STEPS);
        narrow = n < narrow ? n : narrow;
        wide = w < wide ? w : wide;
    }
    return 2.0 * narrow >= 1.5 * wide; /* 512-bit FLOPs at >= 1.5x the 256-bit rate */
}
#define X16_PREFER NULL
#define X16W_PREFER x16w_prefer
#define X16_TABLE mn_kernels_avx512
#define X16_NAME "avx512"
#define X16W_TABLE mn_kernels_avx512w
#define X16W_NAME "avx512w"
#endif

const mn_cpu_kernels X16_TABLE = {
    .name = X16_NAME,
    .usable = x16_usable,
    .prefer = X16_PREFER,
    .base = &mn_kernels_avx2, /* the attention kernels, the quantization */
    .matmul = x16_matmul,
    .matmul_q8 = x16_matmul_q8,
};

const mn_cpu_kernels X16W_TABLE = {
    .name = X16W_NAME,
    .usable = x16_usable,
    .prefer = X16W_PREFER,
    .base = &mn_kernels_avx2,
    .matmul = x16w_matmul,
    .matmul_q8 = x16w_matmul_q8,
    .dots = x16w_dots,
    .softmax = x16w_softmax,
    .swiglu = x16w_swiglu,
    .weighted_sum = x16w_weighted_sum,
};

#else /* not x86-64 */

static int x16_usable(void) { return 0; }
#ifdef MN_X16_EMULATE
const mn_cpu_kernels mn_kernels_avx512_emu = {.name = "avx512-emu", .usable = x16_usable};
const mn_cpu_kernels mn_kernels_avx512w_emu = {.name = "avx512w-emu", .usable = x16_usable};
#else
const mn_cpu_kernels mn_kernels_avx512 = {.name = "avx512", .usable = x16_usable};
const mn_cpu_kernels mn_kernels_avx512w = {.name = "avx512w", .usable = x16_usable};
#endif

#endif
