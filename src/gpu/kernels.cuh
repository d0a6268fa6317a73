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
 * Parallel enough for the latency of a decode step, and batch-invariant: a thread per element
 * (embedding, RoPE pair, SwiGLU), a warp per token (RMSNorm), per output and group of up to
 * MN_G_TB tokens (projections: the weight is read once for the group, each token's sum keeps the
 * order it has alone) and per (token, head) (attention, 32 positions at a time, a lane each).
 * Every sum has one fixed order that depends on nothing but its own row, so a token's logits are
 * the same bits whatever else shares its pass. The twin replays warps lane by lane. cuBLAS GEMMs
 * for F16/F32 may replace the projections where measured faster and still batch-invariant; they
 * stay for the weight types cuBLAS has no GEMM for (Q8_0, Q4_0, Q4_1).
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

/* On the device every half and float of a weight is aligned to its size (each weight has its own
 * allocation, and every block layout puts its halves at even offsets): one load each there. */
MN_HD float mn_g_f16(const uint8_t *p)
{
    __half_raw r;
#ifdef __CUDA_ARCH__
    r.x = *(const unsigned short *)p;
#else
    r.x = (unsigned short)(p[0] | (p[1] << 8));
#endif
    return __half2float(__half(r));
}

/* Element k of a weight row of the given type (quant.c's block layouts: a 32-element block is a
 * scale (and Q4_1's min) followed by its quants; Q4 keeps elements j and j + 16 in one byte, low
 * nibble first). */
MN_HD float mn_g_weight(uint32_t type, const uint8_t *row, uint32_t k)
{
    switch (type) {
    case MN_F32: {
#ifdef __CUDA_ARCH__
        return ((const float *)row)[k];
#else
        float f;
        memcpy(&f, row + 4 * (size_t)k, 4);
        return f;
#endif
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

/* x[t][i] = element i of the embedding row of tokens[t]. */
MN_HD void mn_g_embed(uint32_t type, const uint8_t *table, size_t row_bytes, const int32_t *tokens, float *x,
                      uint32_t dim, uint32_t t, uint32_t i)
{
    x[(size_t)t * dim + i] = mn_g_weight(type, table + (size_t)tokens[t] * row_bytes, i);
}

/* Sums over a warp: lane l takes elements l, l + 32, l + 64, ... in order, then the 32 partial
 * sums meet in a fixed butterfly (lane l adds lane l ^ 16, then l ^ 8, ..., l ^ 1), as
 * __shfl_xor_sync does it on the device and mn_g_butterfly does it on the host. */
#define MN_G_WARP 32

/* RMSNorm, a warp per token: out[t] = x[src(t)] / rms(x[src(t)]) * w, where src(t) = rows ? rows[t]
 * : t (the logits take only the rows that return logits). mn_g_rms_lane is a lane's part of the sum
 * of squares; mn_g_rms_write its elements of the output, given the total. */
MN_HD const float *mn_g_rms_src(const float *x, const uint32_t *rows, uint32_t n, uint32_t t)
{
    return x + (size_t)(rows ? rows[t] : t) * n;
}

MN_HD float mn_g_rms_lane(const float *r, uint32_t n, uint32_t lane)
{
    float ss = 0.0f;
    for (uint32_t i = lane; i < n; i += MN_G_WARP)
        ss += r[i] * r[i];
    return ss;
}

MN_HD void mn_g_rms_write(const float *r, const float *w, float *out_row, uint32_t n, float eps, float ss,
                          uint32_t lane)
{
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t i = lane; i < n; i += MN_G_WARP)
        out_row[i] = r[i] * scale * w[i];
}

/* y[t][o] = sum_k W[o][k] x[t][k] (+ y[t][o] when accumulate: the residual add), a warp per output
 * (neighbouring lanes read neighbouring weights) and per group of up to MN_G_TB tokens, each with
 * its own sums in the warp's order above. An output's sum depends on nothing but its row and its
 * input, not on the group it was computed in: batch-invariant. */
#define MN_G_TB 8

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

/* Pair j (elements 2j, 2j + 1) of query head h of token t rotated in place; for h < n_kv_heads also
 * that pair of KV head h's key and value written into the cache at the token's position, the key
 * rotated there. Pairs past rope_dim / 2 are not rotated. */
MN_HD void mn_g_rope_store(const mn_gpu_attn *a, float *q, const float *k, const float *v, uint32_t t, uint32_t h,
                           uint32_t j)
{
    uint32_t hd = a->head_dim, pos = a->tok[t].pos;
    bool rotate = j < a->rope_dim / 2;
    if (rotate)
        mn_g_rope_pair(q + (size_t)t * a->n_heads * hd + (size_t)h * hd, pos, j, a->rope_dim, a->rope_base);
    if (h >= a->n_kv_heads)
        return;
    size_t at = mn_g_slot(a, a->tok[t].seq, pos) + (size_t)h * hd, from = (size_t)t * a->kv_dim + (size_t)h * hd;
    for (uint32_t i = 2 * j; i < 2 * j + 2; i++) {
        a->k[at + i] = k[from + i];
        a->v[at + i] = v[from + i];
    }
    if (rotate)
        mn_g_rope_pair(a->k + at, pos, j, a->rope_dim, a->rope_base);
}

/* out[t][head h] = softmax(q . K / sqrt(hd)) V over the token's positions 0..pos (causal), read
 * through its sequence's block table; query head h reads KV head h / (n_heads / n_kv_heads). A warp
 * per (token, head) takes the positions 32 at a time, lane l position c + l: the lane's score is
 * its own dot product (in dimension order); the chunk's maximum and its sum of weights meet across
 * the warp (the sum in the butterfly); an online softmax (a running maximum, no score buffer)
 * rescales the output so far. Then lane l adds, for its head dimensions l, l + 32, ...
 * (MN_G_LANE_DIMS of them at most), the chunk's weighted values in position order. */
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

/* How many positions the chunk starting at c holds for token t (1..MN_G_WARP). */
MN_HD uint32_t mn_g_chunk_len(const mn_gpu_attn *a, uint32_t t, uint32_t c)
{
    uint32_t left = a->tok[t].pos + 1 - c;
    return left < MN_G_WARP ? left : MN_G_WARP;
}

/* Lane's score in the chunk starting at c: scale * (q . K[c + lane]), or -inf past the chunk. */
MN_HD float mn_g_lane_score(const mn_gpu_attn *a, const float *qh, uint32_t t, uint32_t h, uint32_t c,
                            uint32_t lane, float scale)
{
    if (lane >= mn_g_chunk_len(a, t, c))
        return -INFINITY;
    const float *kr = a->k + mn_g_head_at(a, t, h, c + lane);
    float s = 0.0f;
#ifdef __CUDA_ARCH__
#pragma unroll 8
#endif
    for (uint32_t i = 0; i < a->head_dim; i++)
        s += qh[i] * kr[i];
    return s * scale;
}

/* The online softmax's step for a chunk whose largest score is chunk_max: *m becomes the running
 * maximum; returns the factor the output and the sum so far are scaled by. The chunk's weights are
 * then expf(score - *m) (0 for the lanes past it). */
MN_HD float mn_g_chunk_rescale(float chunk_max, float *m)
{
    float m_new = chunk_max > *m ? chunk_max : *m, old = expf(*m - m_new);
    *m = m_new;
    return old;
}

/* Lane's share of the output (its dimensions only): scaled by old, then += w * v. */
MN_HD void mn_g_lane_scale(float *acc, uint32_t hd, uint32_t lane, float old)
{
    for (uint32_t j = 0, i = lane; i < hd; j++, i += MN_G_WARP)
        acc[j] *= old;
}

MN_HD void mn_g_lane_acc(float *acc, const float *v, uint32_t hd, uint32_t lane, float w)
{
    for (uint32_t j = 0, i = lane; i < hd; j++, i += MN_G_WARP)
        acc[j] += w * v[i];
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
#define MN_G_FULL 0xffffffffu

/* The butterfly on the device: every lane gets the total. */
static __device__ inline float mn_g_warp_sum(float s)
{
    for (uint32_t off = MN_G_WARP / 2; off > 0; off /= 2)
        s += __shfl_xor_sync(MN_G_FULL, s, off);
    return s;
}

/* grid: x over the T * dim elements */
__global__ void mn_k_embed(uint32_t type, const uint8_t *table, size_t row_bytes, const int32_t *tokens,
                           float *x, uint32_t dim, uint32_t T)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)T * dim)
        mn_g_embed(type, table, row_bytes, tokens, x, dim, (uint32_t)(i / dim), (uint32_t)(i % dim));
}

/* a warp per token */
__global__ void mn_k_rmsnorm(const float *x, const uint32_t *rows, const float *w, float *out, uint32_t n,
                             float eps, uint32_t T)
{
    uint32_t lane = threadIdx.x % MN_G_WARP, t = blockIdx.x * (blockDim.x / MN_G_WARP) + threadIdx.x / MN_G_WARP;
    if (t >= T)
        return; /* whole warps leave */
    const float *r = mn_g_rms_src(x, rows, n, t);
    mn_g_rms_write(r, w, out + (size_t)t * n, n, eps, mn_g_warp_sum(mn_g_rms_lane(r, n, lane)), lane);
}

/* One warp's sums for one output row over nt tokens, the weight type fixed at compile time (the
 * element decoder then has no branch) and MN_G_UNROLL of a lane's weights loaded before they are
 * used, so that a lane has that many loads in flight: a decode step's projections are a few
 * hundred rows each, too few warps to hide memory latency otherwise. Each token's sum still adds
 * its lane's products in column order. */
#define MN_G_UNROLL 8

template <uint32_t TYPE>
static __device__ inline void mn_g_matvec_warp(const uint8_t *row, const float *xt, uint32_t cols, uint32_t nt,
                                               uint32_t lane, float *s)
{
    uint32_t k = lane;
    for (; k + (MN_G_UNROLL - 1) * MN_G_WARP < cols; k += MN_G_UNROLL * MN_G_WARP) {
        float w[MN_G_UNROLL];
#pragma unroll
        for (uint32_t u = 0; u < MN_G_UNROLL; u++)
            w[u] = mn_g_weight(TYPE, row, k + u * MN_G_WARP);
#pragma unroll
        for (uint32_t u = 0; u < MN_G_UNROLL; u++)
#pragma unroll
            for (uint32_t j = 0; j < MN_G_TB; j++)
                if (j < nt)
                    s[j] += w[u] * xt[(size_t)j * cols + k + u * MN_G_WARP];
    }
    for (; k < cols; k += MN_G_WARP) {
        float wk = mn_g_weight(TYPE, row, k);
#pragma unroll
        for (uint32_t j = 0; j < MN_G_TB; j++)
            if (j < nt)
                s[j] += wk * xt[(size_t)j * cols + k];
    }
}

/* grid: x over groups of outputs (a warp each, blockDim.x / 32 per block), y over groups of
 * MN_G_TB tokens */
__global__ void mn_k_matvec(uint32_t type, const uint8_t *W, size_t row_bytes, uint32_t cols, uint32_t rows,
                            const float *x, float *y, int accumulate, uint32_t T)
{
    uint32_t lane = threadIdx.x % MN_G_WARP, t0 = blockIdx.y * MN_G_TB;
    uint32_t o = blockIdx.x * (blockDim.x / MN_G_WARP) + threadIdx.x / MN_G_WARP;
    if (o >= rows || t0 >= T)
        return; /* a whole warp leaves together: o is the same for its 32 lanes */
    uint32_t nt = T - t0 < MN_G_TB ? T - t0 : MN_G_TB;
    const uint8_t *row = W + (size_t)o * row_bytes;
    const float *xt = x + (size_t)t0 * cols;
    float s[MN_G_TB] = {0};
    switch (type) {
    case MN_F32: mn_g_matvec_warp<MN_F32>(row, xt, cols, nt, lane, s); break;
    case MN_F16: mn_g_matvec_warp<MN_F16>(row, xt, cols, nt, lane, s); break;
    case MN_Q8_0: mn_g_matvec_warp<MN_Q8_0>(row, xt, cols, nt, lane, s); break;
    case MN_Q4_0: mn_g_matvec_warp<MN_Q4_0>(row, xt, cols, nt, lane, s); break;
    case MN_Q4_1: mn_g_matvec_warp<MN_Q4_1>(row, xt, cols, nt, lane, s); break;
    default: break;
    }
#pragma unroll
    for (uint32_t j = 0; j < MN_G_TB; j++)
        if (j < nt) {
            float sum = mn_g_warp_sum(s[j]);
            if (lane == 0)
                mn_g_store(y, rows, accumulate, t0 + j, o, sum);
        }
}

/* grid: x over tokens x query heads x pairs of a head */
__global__ void mn_k_rope_store(mn_gpu_attn a, float *q, const float *k, const float *v, uint32_t T)
{
    uint32_t pairs = a.head_dim / 2, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < T * a.n_heads * pairs)
        mn_g_rope_store(&a, q, k, v, i / (a.n_heads * pairs), i / pairs % a.n_heads, i % pairs);
}

/* a warp per (token, query head) */
__global__ void mn_k_attention(mn_gpu_attn a, const float *q, float *out, uint32_t T)
{
    uint32_t lane = threadIdx.x % MN_G_WARP, pair = blockIdx.x * (blockDim.x / MN_G_WARP) + threadIdx.x / MN_G_WARP;
    if (pair >= T * a.n_heads)
        return; /* whole warps leave */
    uint32_t t = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    const float *qh = mn_g_query(&a, q, t, h);
    float acc[MN_G_LANE_DIMS] = {0}, m = -INFINITY, sum = 0.0f, scale = 1.0f / sqrtf((float)hd);
    for (uint32_t c = 0; c <= a.tok[t].pos; c += MN_G_WARP) {
        float s = mn_g_lane_score(&a, qh, t, h, c, lane, scale), cmax = s;
        for (uint32_t off = MN_G_WARP / 2; off > 0; off /= 2)
            cmax = fmaxf(cmax, __shfl_xor_sync(MN_G_FULL, cmax, off));
        float old = mn_g_chunk_rescale(cmax, &m), w = expf(s - m);
        sum = sum * old + mn_g_warp_sum(w);
        mn_g_lane_scale(acc, hd, lane, old);
        for (uint32_t l = 0, n = mn_g_chunk_len(&a, t, c); l < n; l++)
            mn_g_lane_acc(acc, a.v + mn_g_head_at(&a, t, h, c + l), hd, lane, __shfl_sync(MN_G_FULL, w, l));
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
