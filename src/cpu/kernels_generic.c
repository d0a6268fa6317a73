/* kernels_generic.c - the kernel table in plain C: every CPU runs it, and it defines the others.
 *
 * Each function here is the reference its SIMD twins must equal bit for bit (kernels.h): the same
 * operations in the same order, written as loops over the SIMD code's lanes. Fused multiply-adds
 * are fmaf (exact, whatever the CPU; glibc uses the instruction where there is one), every other
 * operation rounds once, and -ffp-contract=off keeps the compiler from fusing anything itself.
 *
 * Float matrix product, one output (the tiles of kernels_avx2.c take these chains side by side):
 *   lane[0..8) = 0; for column k < 8 * (cols / 8): lane[k % 8] = fma(w[k], x[k], lane[k % 8])
 *   s = hsum8(lane) = ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))
 *   for the columns past the last full chunk: s = fma(w[k], x[k], s) in order
 * with w the row dequantized by mn_dequant_row.
 *
 * 16-bit activation product (packed weights, mn_q8_pack: a row of nb blocks is [d: nb f16][m: nb
 * f16, Q4_1 only][quants: nb blocks of 32 int8 (Q8_0) or 16 nibble bytes (Q4_0, Q4_1)], as many
 * bytes as GGUF's row, so a tile reads 8 blocks' scales with one load; activations, mn_quantize_q8:
 * groups of 8 blocks whose d and s sit side by side), one output:
 *   for group g, for block j < n_g of it (b = 8g + j):
 *       p[l] = w[2l]q[2l] + w[2l+1]q[2l+1] + w[16+2l]q[16+2l] + w[17+2l]q[17+2l]   (l < 8; exact)
 *       acc[l] = fma(dw_b * dx_b, (float)p[l], acc[l])
 *   Q4_1, then: acc[j] = fma(m_b, s_b, acc[j]) for j < 8 (both 0 past the row's last block)
 *   y = hsum8(acc)
 * Weight integers: Q8_0 qs, Q4_0 nibble - 8, Q4_1 nibble (its min m enters through
 * s_x = dx * sum(qx)). The integer sums are exact, so any grouping of them gives the same p.
 */
#include "cpu/kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "model/draw.h"
#include "model/dtype.h"
#include "model/quant.h"

static float hsum8(const float l[8])
{
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static void generic_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
                           uint32_t o_begin, uint32_t o_end)
{
    float wrow[W->cols];
    const uint32_t full = W->cols / 8 * 8;
    for (uint32_t o = o_begin; o < o_end; o++) {
        mn_dequant_row(W->type, W->data + (size_t)o * W->row_bytes, wrow, W->cols);
        for (int t = 0; t < T; t++) {
            const float *xr = x + (size_t)t * ldx;
            float lane[8] = {0};
            for (uint32_t k = 0; k < full; k++)
                lane[k % 8] = fmaf(wrow[k], xr[k], lane[k % 8]);
            float s = hsum8(lane);
            for (uint32_t k = full; k < W->cols; k++)
                s = fmaf(wrow[k], xr[k], s);
            y[(size_t)t * ldy + o] = s;
        }
    }
}

static uint16_t rd_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static void generic_matmul_q8(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy, int T,
                              uint32_t o_begin, uint32_t o_end)
{
    const size_t nb = W->cols / 32, qb = W->type == MN_Q8_0 ? 32 : 16;
    const int q41 = W->type == MN_Q4_1;
    for (uint32_t o = o_begin; o < o_end; o++)
        for (int t = 0; t < T; t++) {
            const uint8_t *d = W->data + (size_t)o * W->row_bytes, *m = d + 2 * nb, *qs = d + 2 * nb * (1 + q41);
            float acc[8] = {0};
            for (size_t g = 0; g < (nb + 7) / 8; g++) {
                const mn_q8 *xg = xq + (size_t)t * ldxq + g;
                for (size_t j = 0; j < 8 && 8 * g + j < nb; j++) {
                    size_t b = 8 * g + j;
                    int w[32];
                    for (int k = 0; k < 32; k++) {
                        if (W->type == MN_Q8_0)
                            w[k] = (int8_t)qs[b * qb + k];
                        else {
                            int nib = k < 16 ? (qs[b * qb + k] & 15) : (qs[b * qb + k - 16] >> 4);
                            w[k] = W->type == MN_Q4_0 ? nib - 8 : nib;
                        }
                    }
                    float s = mn_f16_to_f32(rd_u16(d + 2 * b)) * xg->d[j];
                    for (int l = 0; l < 8; l++) {
                        int p = w[2 * l] * xg->qs[j][2 * l] + w[2 * l + 1] * xg->qs[j][2 * l + 1] +
                                w[16 + 2 * l] * xg->qs[j][16 + 2 * l] + w[17 + 2 * l] * xg->qs[j][17 + 2 * l];
                        acc[l] = fmaf(s, (float)p, acc[l]);
                    }
                }
                for (size_t j = 0; q41 && j < 8; j++)
                    acc[j] = fmaf(8 * g + j < nb ? mn_f16_to_f32(rd_u16(m + 2 * (8 * g + j))) : 0.0f, xg->s[j], acc[j]);
            }
            y[(size_t)t * ldy + o] = hsum8(acc);
        }
}

static void generic_quantize_q8(const float *x, size_t n, mn_q8 *out)
{
    size_t nb = n / 32;
    for (size_t b = 0; b < nb; b++) {
        const float *v = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            float a = v[j] < 0.0f ? -v[j] : v[j];
            amax = a > amax ? a : amax;
        }
        float d = amax / 32767.0f, id = d >= FLT_MIN ? 1.0f / d : 0.0f; /* 1 / d finite */
        int sum = 0;
        mn_q8 *g = &out[b / 8];
        for (int j = 0; j < 32; j++) {
            long l = lrintf(v[j] * id); /* LONG_MIN for a NaN or an inf, as cvtps2dq's INT_MIN */
            int q = l > 32767 ? 32767 : l < -32767 ? -32767 : (int)l;
            g->qs[b % 8][j] = (int16_t)q;
            sum += q;
        }
        g->d[b % 8] = d;
        g->s[b % 8] = d * (float)sum;
    }
    for (size_t j = nb % 8; nb % 8 && j < 8; j++) /* the last group's missing blocks count 0 */
        out[nb / 8].d[j] = out[nb / 8].s[j] = 0.0f;
}

/* Element k of an attention row of `type` (MN_F32 or MN_F16, converted exactly). */
static float row_elem(uint32_t type, const void *row, int k)
{
    return type == MN_F16 ? mn_f16_to_f32(((const uint16_t *)row)[k]) : ((const float *)row)[k];
}

/* The dot product of a and b, b of `type`: 8 lane chains, hsum8, then the tail in order. */
static float dot_row(const float *a, const void *b, uint32_t type, int n)
{
    float lane[8] = {0};
    int k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++)
            lane[l] = fmaf(a[k + l], row_elem(type, b, k + l), lane[l]);
    float s = hsum8(lane);
    for (; k < n; k++)
        s = fmaf(a[k], row_elem(type, b, k), s);
    return s;
}

static float generic_dot(const float *a, const float *b, int n) { return dot_row(a, b, MN_F32, n); }

static void generic_dots(const float *q, size_t ldq, int n_heads, const void *const *b, uint32_t type, int n_b, int n,
                         float *out, size_t ldo)
{
    for (int h = 0; h < n_heads; h++)
        for (int j = 0; j < n_b; j++)
            out[(size_t)h * ldo + j] = dot_row(q + (size_t)h * ldq, b[j], type, n);
}

/* The SIMD exp, one lane: x = k ln2 + r with |r| <= ln2/2, exp(r) by Cephes' degree-7 polynomial,
 * times 2^k built in the exponent bits; 0 below -87, x clamped at 88 (a NaN comes out as e^-87, as
 * the max instruction returns its second operand). */
static float exp_lane(float x)
{
    const int under = x < MN_EXP_LO;
    x = x > MN_EXP_LO ? x : MN_EXP_LO;
    x = x < MN_EXP_HI ? x : MN_EXP_HI;
    float k = rintf(x * MN_EXP_LOG2E); /* the default rounding: to nearest, ties to even */
    float r = fmaf(-k, MN_EXP_LN2_HI, x);
    r = fmaf(-k, MN_EXP_LN2_LO, r);
    float p = MN_EXP_P0;
    p = fmaf(p, r, MN_EXP_P1);
    p = fmaf(p, r, MN_EXP_P2);
    p = fmaf(p, r, MN_EXP_P3);
    p = fmaf(p, r, MN_EXP_P4);
    p = fmaf(p, r, MN_EXP_P5);
    p = fmaf(p, r * r, r + 1.0f);
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return under ? 0.0f : p * scale;
}

static float generic_softmax(float *x, int n, float scale)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        x[i] *= scale;
        mx = x[i] > mx ? x[i] : mx;
    }
    float sum[8] = {0};
    for (int i = 0; i < n; i++) { /* element i joins lane i % 8, as the vector loop and its padded tail do */
        x[i] = exp_lane(x[i] - mx);
        sum[i % 8] += x[i];
    }
    return hsum8(sum);
}

static void generic_swiglu(float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + exp_lane(0.0f - g)) * up[i];
    }
}

static void generic_weighted_sum(float *out, size_t ldo, const float *w, size_t ldw, int n_heads,
                                 const void *const *rows, uint32_t type, int n_rows, int n)
{
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < n; i++) {
            float s = 0.0f;
            for (int j = 0; j < n_rows; j++)
                s = fmaf(w[(size_t)h * ldw + j], row_elem(type, rows[j], i), s);
            out[(size_t)h * ldo + i] = s;
        }
}

static void generic_axpy(float *y, float a, const float *x, int n)
{
    for (int k = 0; k < n; k++)
        y[k] = fmaf(a, x[k], y[k]);
}

static void generic_scale(float *x, float s, int n)
{
    for (int k = 0; k < n; k++)
        x[k] *= s;
}

static void generic_scale_mul(float *out, const float *x, float s, const float *w, int n)
{
    for (int k = 0; k < n; k++)
        out[k] = x[k] * s * w[k];
}

static void generic_rope(float *x, const float *cs, int n_pairs)
{
    for (int i = 0; i < n_pairs; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1], a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = a * s + b * c;
    }
}

/* The maximum in 16 lanes (element i joins lane i % 16: no lane waits on another), x[0] where it
 * is a NaN (no element is greater), then the first element equal to it. */
static int32_t generic_argmax(const float *x, int n)
{
    enum { L = 16 };
    float lane[L], mx = x[0];
    for (int l = 0; l < L; l++)
        lane[l] = x[0];
    int i = 0;
    for (; i + L <= n; i += L)
        for (int l = 0; l < L; l++)
            lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
    for (int l = 0; l < L; l++)
        mx = lane[l] > mx ? lane[l] : mx;
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (i = 0; i < n; i++)
        if (x[i] == mx)
            return i;
    return 0; /* mx is x[0], a NaN */
}

/* model/draw.h's weight of every element; their sum (integers: exact in any order) */
static uint64_t generic_draw_weights(const float *x, int n, float mx, float scale, uint64_t *w)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += w[i] = mn_draw_weight(x[i], mx, scale);
    return sum;
}

static void generic_to_f16(const float *x, uint16_t *h, int n)
{
    for (int i = 0; i < n; i++)
        h[i] = mn_f32_to_f16(x[i]);
}

static int generic_usable(void) { return 1; }

const mn_cpu_kernels mn_kernels_generic = {
    .name = "generic",
    .usable = generic_usable,
    .matmul = generic_matmul,
    .matmul_q8 = generic_matmul_q8,
    .quantize_q8 = generic_quantize_q8,
    .dot = generic_dot,
    .dots = generic_dots,
    .softmax = generic_softmax,
    .swiglu = generic_swiglu,
    .weighted_sum = generic_weighted_sum,
    .axpy = generic_axpy,
    .scale = generic_scale,
    .scale_mul = generic_scale_mul,
    .rope = generic_rope,
    .argmax = generic_argmax,
    .draw_weights = generic_draw_weights,
    .to_f16 = generic_to_f16,
};
