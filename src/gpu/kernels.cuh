/* kernels.cuh - the CUDA forward pass's kernels, written once for the device and the host.
 *
 * Each kernel is a body for one grid index (one token, one (token, head), one output element),
 * marked __host__ __device__, plus a thin __global__ wrapper that maps blockIdx/threadIdx onto
 * that index. The device runs the wrappers; the twin backend (gpu/twin.h) runs the same bodies in
 * host loops over the same grid, so every index, layout and formula here is checked against the
 * CPU backend on machines without a GPU (tests/test_gpu.c). What the twin cannot check is what
 * only a device has: launches, streams, graphs, cuBLAS and timing.
 *
 * The pass is laid out as the CPU backend lays it out: tokens of all sequences one after another
 * (no padding), token t belonging to sequence tok[t].seq at position tok[t].pos; activations are
 * [T][width] floats. KV: per layer, K and V are [n_blocks][block_size][kv_dim] floats, and
 * sequence s's position p lives in block tables[table_off[s] + p / block_size], slot
 * p % block_size (mem/kv.h's layout, with the block tables of the batch flattened into one array).
 *
 * These first kernels favour being obviously right over being fast: one thread per token or per
 * element with serial loops, except the projections (a warp per output) and attention (a warp per
 * (token, head)), whose lanes the twin replays one by one. cuBLAS GEMMs for F16/F32 may replace
 * matvec where measured faster and still batch-invariant; matvec stays for the weight types
 * cuBLAS has no GEMM for (Q8_0, Q4_0, Q4_1).
 */
#ifndef MN_GPU_KERNELS_CUH
#define MN_GPU_KERNELS_CUH

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/dtype.h"

#define MN_HD static __host__ __device__ inline

/* A token of the pass: its sequence (index in the batch) and its position in that sequence. */
typedef struct mn_gpu_tok {
    uint32_t seq;
    uint32_t pos;
} mn_gpu_tok;

/* What a layer's attention reads: the pass's tokens, the flattened block tables and the cache. */
typedef struct mn_gpu_attn {
    const mn_gpu_tok *tok;      /* [T] */
    const uint32_t *tables;     /* block ids of every sequence of the batch, one table after another */
    const uint32_t *table_off;  /* [n_seqs]: where sequence s's table starts in tables */
    float *k, *v;               /* this layer's cache: [n_blocks][block_size][kv_dim] */
    uint32_t block_size, kv_dim, head_dim, n_heads, n_kv_heads, rope_dim;
    float rope_base;
} mn_gpu_attn;

/* ---- weights in their stored type ------------------------------------------------------------ */

MN_HD float mn_g_f16(const uint8_t *p)
{
    __half_raw r;
    r.x = (unsigned short)(p[0] | (p[1] << 8));
    return __half2float(__half(r));
}

/* Element k of a weight row of the given type (quant.c's block layouts: a 32-element block is a
 * scale (and Q4_1's min) followed by its quants; Q4 keeps elements j and j + 16 in one byte, low
 * nibble first). */
MN_HD float mn_g_weight(uint32_t type, const uint8_t *row, uint32_t k)
{
    switch (type) {
    case MN_F32: {
        float f;
        memcpy(&f, row + 4 * (size_t)k, 4);
        return f;
    }
    case MN_F16: return mn_g_f16(row + 2 * (size_t)k);
    case MN_Q8_0: {
        const uint8_t *b = row + (k / 32) * 34;
        return mn_g_f16(b) * (float)(int8_t)b[2 + k % 32];
    }
    case MN_Q4_0:
    case MN_Q4_1: {
        uint32_t q41 = type == MN_Q4_1, j = k % 32;
        const uint8_t *b = row + (k / 32) * (q41 ? 20 : 18), *qs = b + (q41 ? 4 : 2);
        int q = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
        return q41 ? mn_g_f16(b) * (float)q + mn_g_f16(b + 2) : mn_g_f16(b) * (float)(q - 8);
    }
    default: return 0.0f;
    }
}

/* ---- bodies ----------------------------------------------------------------------------------- */

/* x[t] = the embedding row of tokens[t]. */
MN_HD void mn_g_embed(uint32_t type, const uint8_t *table, size_t row_bytes, const int32_t *tokens, float *x,
                      uint32_t dim, uint32_t t)
{
    const uint8_t *row = table + (size_t)tokens[t] * row_bytes;
    for (uint32_t i = 0; i < dim; i++)
        x[(size_t)t * dim + i] = mn_g_weight(type, row, i);
}

/* out[t] = x[src(t)] / rms(x[src(t)]) * w, where src(t) = rows ? rows[t] : t (the logits take only
 * the rows that return logits). */
MN_HD void mn_g_rmsnorm(const float *x, const uint32_t *rows, const float *w, float *out, uint32_t n, float eps,
                        uint32_t t)
{
    const float *r = x + (size_t)(rows ? rows[t] : t) * n;
    float ss = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        ss += r[i] * r[i];
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t i = 0; i < n; i++)
        out[(size_t)t * n + i] = r[i] * scale * w[i];
}

/* y[t][o] = sum_k W[o][k] x[t][k] (+ y[t][o] when accumulate: the residual add), one warp of
 * MN_G_WARP lanes per output: lane l sums columns l, l + 32, l + 64, ... in order (neighbouring lanes
 * read neighbouring weights), then the 32 partial sums meet in a fixed butterfly (lane l adds lane
 * l ^ 16, then l ^ 8, ..., l ^ 1), as __shfl_xor_sync does it on the device and mn_g_butterfly does
 * it on the host. An output's sum depends on nothing but its row and its input: batch-invariant. */
#define MN_G_WARP 32

MN_HD float mn_g_matvec_lane(uint32_t type, const uint8_t *row, const float *xr, uint32_t cols, uint32_t lane)
{
    float s = 0.0f;
    for (uint32_t k = lane; k < cols; k += MN_G_WARP)
        s += mn_g_weight(type, row, k) * xr[k];
    return s;
}

/* The butterfly of the 32 lanes' partial sums, on the host (p is overwritten; every lane ends with
 * the total, as on the device). */
MN_HD float mn_g_butterfly(float *p)
{
    for (uint32_t off = MN_G_WARP / 2; off > 0; off /= 2) {
        float q[MN_G_WARP];
        for (uint32_t l = 0; l < MN_G_WARP; l++)
            q[l] = p[l] + p[l ^ off];
        for (uint32_t l = 0; l < MN_G_WARP; l++)
            p[l] = q[l];
    }
    return p[0];
}

/* Store an output: y[t][o] = s, or y[t][o] += s. */
MN_HD void mn_g_store(float *y, uint32_t rows, int accumulate, uint32_t t, uint32_t o, float s)
{
    float *dst = y + (size_t)t * rows + o;
    *dst = accumulate ? *dst + s : s;
}

/* Rotate pair j of a head in place for position pos (adjacent pairs, as the CPU backend: the
 * angle is pos * base^(-2j/rope_dim), with that power rounded to float first). */
MN_HD void mn_g_rope_pair(float *head, uint32_t pos, uint32_t j, uint32_t rope_dim, float base)
{
    float inv_freq = (float)pow((double)base, -2.0 * (double)j / (double)rope_dim);
    double angle = (double)pos * (double)inv_freq;
    float c = (float)cos(angle), s = (float)sin(angle), a = head[2 * j], b = head[2 * j + 1];
    head[2 * j] = a * c - b * s;
    head[2 * j + 1] = a * s + b * c;
}

/* Where position pos of sequence seq lives in one layer's K (or V) cache. */
MN_HD size_t mn_g_slot(const mn_gpu_attn *a, uint32_t seq, uint32_t pos)
{
    uint32_t block = a->tables[a->table_off[seq] + pos / a->block_size];
    return ((size_t)block * a->block_size + pos % a->block_size) * a->kv_dim;
}

/* Query head h of token t rotated in place; for h < n_kv_heads also KV head h's key, then that
 * key and value written into the cache at the token's position. */
MN_HD void mn_g_rope_store(const mn_gpu_attn *a, float *q, const float *k, const float *v, uint32_t t, uint32_t h)
{
    uint32_t hd = a->head_dim, pos = a->tok[t].pos;
    float *qh = q + (size_t)t * a->n_heads * hd + (size_t)h * hd;
    for (uint32_t j = 0; j < a->rope_dim / 2; j++)
        mn_g_rope_pair(qh, pos, j, a->rope_dim, a->rope_base);
    if (h >= a->n_kv_heads)
        return;
    size_t at = mn_g_slot(a, a->tok[t].seq, pos) + (size_t)h * hd;
    const float *kh = k + (size_t)t * a->kv_dim + (size_t)h * hd, *vh = v + (size_t)t * a->kv_dim + (size_t)h * hd;
    for (uint32_t i = 0; i < hd; i++) {
        a->k[at + i] = kh[i];
        a->v[at + i] = vh[i];
    }
    for (uint32_t j = 0; j < a->rope_dim / 2; j++)
        mn_g_rope_pair(a->k + at, pos, j, a->rope_dim, a->rope_base);
}

/* out[t][head h] = softmax(q . K / sqrt(hd)) V over the token's positions 0..pos (causal), read
 * through its sequence's block table; query head h reads KV head h / (n_heads / n_kv_heads). A warp
 * per (token, head): lane l holds head dimensions l, l + 32, ... (MN_G_LANE_DIMS of them at most).
 * Per position the lanes' partial dot products meet in the butterfly (every lane gets the score),
 * then one step of an online softmax (a running maximum, so no score buffer) rescales each lane's
 * share of the output. The bodies below are one lane's work; the device runs them in a warp, the
 * twin lane by lane. */
#define MN_G_MAX_HEAD_DIM 256
#define MN_G_LANE_DIMS (MN_G_MAX_HEAD_DIM / MN_G_WARP)

/* The head's rows: the query's, and for position p the K (or V) row of its KV head. */
MN_HD const float *mn_g_query(const mn_gpu_attn *a, const float *q, uint32_t t, uint32_t h)
{
    return q + (size_t)t * a->n_heads * a->head_dim + (size_t)h * a->head_dim;
}

MN_HD size_t mn_g_head_at(const mn_gpu_attn *a, uint32_t t, uint32_t h, uint32_t p)
{
    return mn_g_slot(a, a->tok[t].seq, p) + (size_t)(h / (a->n_heads / a->n_kv_heads)) * a->head_dim;
}

/* Lane's part of x . y over n elements. */
MN_HD float mn_g_lane_dot(const float *x, const float *y, uint32_t n, uint32_t lane)
{
    float s = 0.0f;
    for (uint32_t i = lane; i < n; i += MN_G_WARP)
        s += x[i] * y[i];
    return s;
}

/* The online softmax's step for score s: *m, *sum updated; returns the factor the output so far
 * is scaled by, and *w the new position's weight. */
MN_HD float mn_g_softmax_step(float s, float *m, float *sum, float *w)
{
    float m_new = s > *m ? s : *m, old = expf(*m - m_new);
    *w = expf(s - m_new);
    *sum = *sum * old + *w;
    *m = m_new;
    return old;
}

/* Lane's share of the output: acc = acc * old + w * v (its dimensions only), then out = acc / sum. */
MN_HD void mn_g_lane_acc(float *acc, const float *v, uint32_t hd, uint32_t lane, float old, float w)
{
    for (uint32_t j = 0, i = lane; i < hd; j++, i += MN_G_WARP)
        acc[j] = acc[j] * old + w * v[i];
}

MN_HD void mn_g_lane_out(float *o, const float *acc, uint32_t hd, uint32_t lane, float sum)
{
    for (uint32_t j = 0, i = lane; i < hd; j++, i += MN_G_WARP)
        o[i] = acc[j] / sum;
}

/* gate[i] = silu(gate[i]) * up[i], element i of the flattened [T][n_ff] rows. */
MN_HD void mn_g_swiglu(float *gate, const float *up, size_t i)
{
    float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
}

/* ---- device wrappers: one thread per grid index ----------------------------------------------- *
 * Compiled by the one file that launches them (cuda_backend.cu defines MN_GPU_KERNELS); the twin
 * includes only the bodies. */
#ifdef MN_GPU_KERNELS
__global__ void mn_k_embed(uint32_t type, const uint8_t *table, size_t row_bytes, const int32_t *tokens,
                                  float *x, uint32_t dim, uint32_t T)
{
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < T)
        mn_g_embed(type, table, row_bytes, tokens, x, dim, t);
}

__global__ void mn_k_rmsnorm(const float *x, const uint32_t *rows, const float *w, float *out, uint32_t n,
                                    float eps, uint32_t T)
{
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < T)
        mn_g_rmsnorm(x, rows, w, out, n, eps, t);
}

/* grid: x over groups of outputs (a warp each, blockDim.x / 32 per block), y over tokens */
__global__ void mn_k_matvec(uint32_t type, const uint8_t *W, size_t row_bytes, uint32_t cols, uint32_t rows,
                            const float *x, float *y, int accumulate, uint32_t T)
{
    uint32_t lane = threadIdx.x % MN_G_WARP, t = blockIdx.y;
    uint32_t o = blockIdx.x * (blockDim.x / MN_G_WARP) + threadIdx.x / MN_G_WARP;
    if (o >= rows || t >= T)
        return; /* a whole warp leaves together: o is the same for its 32 lanes */
    float s = mn_g_matvec_lane(type, W + (size_t)o * row_bytes, x + (size_t)t * cols, cols, lane);
    for (uint32_t off = MN_G_WARP / 2; off > 0; off /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0)
        mn_g_store(y, rows, accumulate, t, o, s);
}

/* grid: x over tokens x query heads */
__global__ void mn_k_rope_store(mn_gpu_attn a, float *q, const float *k, const float *v, uint32_t T)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < T * a.n_heads)
        mn_g_rope_store(&a, q, k, v, i / a.n_heads, i % a.n_heads);
}

/* a warp per (token, query head) */
__global__ void mn_k_attention(mn_gpu_attn a, const float *q, float *out, uint32_t T)
{
    uint32_t lane = threadIdx.x % MN_G_WARP, pair = blockIdx.x * (blockDim.x / MN_G_WARP) + threadIdx.x / MN_G_WARP;
    if (pair >= T * a.n_heads)
        return; /* whole warps leave */
    uint32_t t = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    const float *qh = mn_g_query(&a, q, t, h);
    float acc[MN_G_LANE_DIMS] = {0}, m = -INFINITY, sum = 0.0f, scale = 1.0f / sqrtf((float)hd), w;
    for (uint32_t p = 0; p <= a.tok[t].pos; p++) {
        size_t at = mn_g_head_at(&a, t, h, p);
        float s = mn_g_lane_dot(qh, a.k + at, hd, lane);
        for (uint32_t off = MN_G_WARP / 2; off > 0; off /= 2)
            s += __shfl_xor_sync(0xffffffffu, s, off);
        float old = mn_g_softmax_step(s * scale, &m, &sum, &w);
        mn_g_lane_acc(acc, a.v + at, hd, lane, old, w);
    }
    mn_g_lane_out(out + (size_t)t * a.n_heads * hd + (size_t)h * hd, acc, hd, lane, sum);
}

__global__ void mn_k_swiglu(float *gate, const float *up, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        mn_g_swiglu(gate, up, i);
}
#endif

#endif
