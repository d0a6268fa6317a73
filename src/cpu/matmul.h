/* matmul.h - batch-invariant matrix products over weights in their stored type, and the other
 * kernels of a forward pass.
 *
 * y[t][o] = sum_k W[o][k] * x[t][k]  for t in [0, T), o in [o_begin, o_end).
 *
 * Batch invariance: every output is reduced in one fixed order (an 8-lane accumulator fed chunk by
 * chunk in column order, a fixed horizontal sum, then a scalar tail), whatever T is and whichever
 * tile shape computes it. So a sequence's logits are bit-identical alone or in a batch, one token or
 * many at a time. (A BLAS GEMM picks kernels and blocking by T, which breaks that; see docs/.)
 *
 * Quantized weights are dequantized block by block in registers; nothing is expanded in memory.
 * x rows are F32 with stride ldx; y rows have stride ldy. No allocation; any thread; disjoint
 * [o_begin, o_end) ranges may run concurrently.
 *
 * Every function runs on the kernel set (kernels.h) picked at first use: the widest this CPU runs
 * (avx512w where 512-bit FMAs run at full rate, avx512, avx2, generic C), or the one the
 * environment variable MINIONS_CPU names. All sets
 * give the same bits, so the choice changes speed only.
 */
#ifndef MN_MATMUL_H
#define MN_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/kernels.h" /* mn_q8 */
#include "model/model.h"

void mn_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
               uint32_t o_begin, uint32_t o_end);

/* The same product in plain scalar loops with the same reduction order (the generic kernel set,
 * whichever set is in use): the test oracle. */
void mn_matmul_ref(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
                   uint32_t o_begin, uint32_t o_end);

/* ---- 16-bit activations for quantized weights -----------------------------------------------
 * Weights in Q8_0, Q4_0 and Q4_1 multiply activations quantized per 32-block to int16: integer dot
 * products per block (exact in int32), then an 8-lane float accumulator in column order and a fixed
 * horizontal sum, so batch invariance holds as above. The rounding of activations (at most
 * max|x| / 65534 per element) is the only difference from the float product. 8-bit activations,
 * as llama.cpp uses, are faster but moved SmolLM2's top-1 token at 3.5% of positions against the
 * float reference; 16-bit ones keep it within the 1% near-tie bar (tests/test_smollm2.c).
 *
 * The weights are first repacked (mn_q8_pack: a row's scales together, then its quants) and the
 * activations come in groups of 8 blocks, so that a tile handles 8 blocks' scales as one vector;
 * kernels_generic.c gives the layouts and the reduction order; mn_q8 is in kernels.h. */

/* Whether W's products take 16-bit activations (mn_matmul_q8) or float ones (mn_matmul). */
int mn_weight_uses_q8(const mn_weight *W);
/* Groups (mn_q8) that hold a row of n activations. */
size_t mn_q8_groups(size_t n);
/* Quantize n floats (n a multiple of 32) into mn_q8_groups(n) groups. */
void mn_quantize_q8(const float *x, size_t n, mn_q8 *out);
/* Repack W (mn_weight_uses_q8) for mn_matmul_q8 into dst, W->rows * W->row_bytes bytes the caller
 * owns; *out describes it (W with data = dst). */
void mn_q8_pack(const mn_weight *W, uint8_t *dst, mn_weight *out);
/* y[t][o] for packed W and activations xq (row t starts at xq + t * ldxq groups). */
void mn_matmul_q8(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy, int T, uint32_t o_begin,
                  uint32_t o_end);
/* Its scalar twin, the same order of operations in plain loops. */
void mn_matmul_q8_ref(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy, int T,
                      uint32_t o_begin, uint32_t o_end);

/* The kernel set in use: "avx512w", "avx512", "avx2" or "generic" (or an emulation, named). Any thread. */
const char *mn_cpu_kernels_name(void);
/* Whether this CPU (and OS) runs the kernel set `name`; 0 for names that are no set. Any thread. */
int mn_cpu_kernels_usable(const char *name);
/* The name of the library's kernel set i, widest first (whether or not this CPU runs it), NULL
 * past the last: what tests and tools iterate. Any thread. */
const char *mn_cpu_kernels_at(size_t i);
/* Run every later call on the set `name`; returns 0, or -1 (nothing changed) when the set is
 * unknown or this CPU cannot run it. For start-up and tests: no pass may run during the call. */
int mn_cpu_kernels_use(const char *name);

/* A fixed-order dot product of n floats (the attention kernels use it). */
float mn_dot(const float *a, const float *b, int n);
/* out[h*ldo + j] = mn_dot(q + h*ldq, b[j], n) for h < n_heads and j < n_b, bit for bit: eight keys at
 * a time, and where 512-bit FMAs run at full rate (`avx512w`) two heads at a time over each key.
 * The keys b[j] are n elements of `type`: MN_F32, or MN_F16 (a half-float KV cache's rows, each
 * element converted exactly as it is loaded: the bits of the same keys as floats). */
void mn_dots(const float *q, size_t ldq, int n_heads, const void *const *b, uint32_t type, int n_b, int n, float *out,
             size_t ldo);
/* y[i] += a * x[i] for n floats, as one fused multiply-add each (with a = 1 exactly y[i] + x[i]). */
void mn_axpy(float *y, float a, const float *x, int n);
/* x[i] *= s for n floats (attention's division by the softmax's sum, as a product by its inverse). */
void mn_scale(float *x, float s, int n);
/* out[i] = x[i] * s * w[i] for n floats, the two products in that order (RMSNorm's scaling). */
void mn_scale_mul(float *out, const float *x, float s, const float *w, int n);
/* RoPE over adjacent pairs: (x[2i], x[2i+1]) = (a c - b s, a s + b c) for i < n_pairs, with (a, b) the
 * pair and (c, s) = (cs[2i], cs[2i+1]), each product rounded, then the sum. */
void mn_rope(float *x, const float *cs, int n_pairs);
/* h[i] = x[i] as a half float, rounded to nearest even (model/quant.h's mn_f32_to_f16: a NaN may
 * keep more of its payload where the CPU converts), n >= 0: the rows a half-float KV cache stores
 * (mem/kv.h). The attention kernels convert them back as they load them (mn_dots). */
void mn_to_f16(const float *x, uint16_t *h, int n);
/* Softmax numerators in place: x[i] = exp(scale * x[i] - max_j(scale * x[j])); returns their sum.
 * exp is a vector polynomial (relative error ~1e-7; results below e^-87 are 0) applied to every
 * element alike, and the sum's order depends on n only: the same scores give the same bits. */
float mn_softmax(float *x, int n, float scale);
/* The index of the first of x's largest elements, NaNs passed over (0 if x[0] is one, or n is 0):
 * the plain loop `if (x[i] > x[best]) best = i`, whose every step waited on the last one's load
 * (210 us over a 49,152-entry vocabulary on a Zen 3 core, 64 of them a step for 64 sequences),
 * done as a maximum in independent lanes and then a search for its first index. */
int32_t mn_vec_argmax(const float *x, int n);
/* w[i] = model/draw.h's mn_draw_weight(x[i], mx, scale) for i < n, in vector lanes where the CPU
 * has them (the same operations, so the same bits); returns the weights' sum. The sampler's pass
 * over a row: 49,152 calls of the scalar function cost about what expf over the row did. */
uint64_t mn_draw_weights(const float *x, int n, float mx, float scale, uint64_t *w);
/* gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], with the vector exp of
 * mn_softmax; every element alike, whatever its index. */
void mn_swiglu(float *gate, const float *up, int n);
/* For h < n_heads: out[h*ldo + i] = sum_j w[h*ldw + j] * rows[j][i] for i < n, accumulated in j
 * order from 0 with fused multiply-adds (the same result as zeroing the output and calling mn_axpy
 * for each j), with the sums held in registers; heads that share rows (grouped-query attention)
 * go two at a time over each row. The rows are n elements of `type`, MN_F32 or MN_F16, as mn_dots's
 * keys. */
void mn_weighted_sum(float *out, size_t ldo, const float *w, size_t ldw, int n_heads, const void *const *rows,
                     uint32_t type, int n_rows, int n);

#endif
