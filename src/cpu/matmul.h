/* matmul.h - batch-invariant matrix products over weights in their stored type (AVX2 + FMA).
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
 */
#ifndef MN_MATMUL_H
#define MN_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

void mn_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
               uint32_t o_begin, uint32_t o_end);

/* The same product in plain scalar loops with the same reduction order: the test oracle. */
void mn_matmul_ref(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T,
                   uint32_t o_begin, uint32_t o_end);

/* A fixed-order dot product of n floats (the attention kernels use it). */
float mn_dot(const float *a, const float *b, int n);
/* y[i] += a * x[i] for n floats. */
void mn_axpy(float *y, float a, const float *x, int n);

#endif
