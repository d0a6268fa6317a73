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
 * [T][width] floats. KV: per layer, K and V are n_blocks blocks of [block_size][kv_dim] floats (or IEEE
 * halves, a->kv_half: rounded to nearest as they are stored, read back exactly), and
 * sequence s's position p lives in block tables[table_off[s] + p / block_size], slot
 * p % block_size (mem/kv.h's layout, with the block tables of the batch flattened into one array).
 *
 * Parallel enough for the latency of a decode step, few launches, and batch-invariant: a thread
 * per element (embedding), a block per token (RMSNorm), a warp per output row and group of up to
 * MN_G_TB tokens (projections: Q, K and V share one launch, which also rotates Q and K and writes
 * K and V into the cache, and gate and up one that stores SwiGLU's product), a block per (token,
 * head) (attention, its warps taking 32 positions at a time, a lane each); passes of many tokens
 * may take the projections a warp per 4 rows and 8 tokens instead (mn_k_proj_wide), the same sums
 * in the same order. Seven launches a layer; on sm_90 every launch of a pass but the first may
 * start while the one before it runs (programmatic dependent launch: mn_g_after_previous), and a
 * projection copies its weight rows into shared memory meanwhile. Every sum has one fixed order
 * that depends on nothing but its own row, so a token's logits are the same bits whatever else
 * shares its pass. The twin replays warps lane by lane.
 * cuBLAS GEMMs for F16/F32 may replace the projections where measured faster and still
 * batch-invariant; they stay for the weight types cuBLAS has no GEMM for (Q8_0, Q4_0, Q4_1).
 */
#ifndef MN_GPU_KERNELS_CUH
#define MN_GPU_KERNELS_CUH

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/draw.h"
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
    void *k, *v;                /* this layer's cache: n_blocks blocks of [block_size][kv_dim] elements */
    size_t block_stride;        /* elements from a block of k (or v) to the next */
    uint32_t block_size, kv_dim, head_dim, n_heads, n_kv_heads, rope_dim;
    float rope_base;
    uint32_t kv_half;           /* the cache's elements: 0 floats, 1 IEEE halves (--kv-type f16) */
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

/* Element i of a layer's K or V cache as a float (a half converted exactly: H, the cache holds
 * halves, a constant where a kernel is compiled for each), and x stored there (rounded to the
 * nearest half, ties to even: the CPU's mn_to_f16, the same bits). */
/* A half float's bits as a float (exact). */
MN_HD float mn_g_half_bits(unsigned short bits)
{
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
}

template <bool H>
MN_HD float mn_g_kv_at(const void *cache, size_t i)
{
    return H ? mn_g_half_bits(((const unsigned short *)cache)[i]) : ((const float *)cache)[i];
}

MN_HD float mn_g_kv_get(const mn_gpu_attn *a, const void *cache, size_t i)
{
    return a->kv_half ? mn_g_kv_at<true>(cache, i) : mn_g_kv_at<false>(cache, i);
}

MN_HD void mn_g_kv_put(const mn_gpu_attn *a, void *cache, size_t i, float x)
{
    if (a->kv_half)
        ((__half *)cache)[i] = __float2half_rn(x);
    else
        ((float *)cache)[i] = x;
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

/* ---- projections ------------------------------------------------------------------------------ *
 * y[t][o] = sum_k W[o][k] x[t][k], a warp per output row (neighbouring lanes read neighbouring
 * weights) and per group of up to MN_G_TB tokens, each token with its own sums: lane l adds
 * columns l, l + 32, l + 64, ... in order, then the 32 partial sums meet in a fixed butterfly
 * (lane l adds lane l ^ 16, then l ^ 8, ..., l ^ 1), as __shfl_xor_sync does it on the device and
 * mn_g_butterfly on the host. An output's sum depends on nothing but its row and its token's
 * input, not on the group or the batch: batch-invariant.
 * One launch projects one input through one to MN_G_MAX_OUTS weights of its width, and stores as
 * its mode says:
 *   MN_G_OUT_STORE       each weight's rows one after another into its own y (the logits);
 *   MN_G_OUT_QKV         Q, K and V: the warp of rows o, o + 1 (a pair of a head) sums both, rotates
 *                        Q's and K's pair for the token's position and stores Q into y[0], K and V
 *                        into the layer's KV cache (mn_g_qkv_store), so RoPE and the cache write
 *                        are no launch of their own;
 *   MN_G_OUT_ACCUMULATE  y += (the residual add after the attention's and the FFN's output);
 *   MN_G_OUT_SWIGLU      two weights, gate and up: the warp of row o sums both rows o and stores
 *                        silu(gate) * up into y[0], so SwiGLU is no launch or buffer of its own. */
#define MN_G_WARP 32
#define MN_G_TB 8
#define MN_G_MAX_OUTS 3

/* A weight as the kernels take it: the stored type, the shape, the rows. */
typedef struct mn_gpu_weight {
    uint32_t type, rows, cols;
    size_t row_bytes;
    const uint8_t *data;
} mn_gpu_weight;

enum { MN_G_OUT_STORE, MN_G_OUT_ACCUMULATE, MN_G_OUT_SWIGLU, MN_G_OUT_QKV };

typedef struct mn_gpu_outs {
    uint32_t mode;           /* MN_G_OUT_* */
    uint32_t n;              /* 1..MN_G_MAX_OUTS weights (2 for MN_G_OUT_SWIGLU), all of the input's width */
    mn_gpu_weight w[MN_G_MAX_OUTS];
    float *y[MN_G_MAX_OUTS]; /* [tokens][w[i].rows] */
} mn_gpu_outs;

/* How many warps a launch has: one per output row, or per pair of rows in MN_G_OUT_QKV. */
MN_HD uint32_t mn_g_out_rows(const mn_gpu_outs *outs)
{
    if (outs->mode == MN_G_OUT_SWIGLU)
        return outs->w[0].rows;
    uint32_t rows = 0;
    for (uint32_t i = 0; i < outs->n; i++)
        rows += outs->w[i].rows;
    return outs->mode == MN_G_OUT_QKV ? rows / 2 : rows;
}

/* Which weight of outs global row g belongs to, and its row there (false past the last). */
MN_HD bool mn_g_out_of(const mn_gpu_outs *outs, uint32_t g, uint32_t *i, uint32_t *o)
{
    for (*i = 0; *i < outs->n; (*i)++) {
        if (g < outs->w[*i].rows) {
            *o = g;
            return true;
        }
        g -= outs->w[*i].rows;
    }
    return false;
}

/* The host's view of a lane's sum over a row for one token. */
MN_HD float mn_g_matvec_lane(uint32_t type, const uint8_t *row, const float *x, uint32_t cols, uint32_t lane)
{
    float s = 0.0f;
    for (uint32_t k = lane; k < cols; k += MN_G_WARP)
        s += mn_g_weight(type, row, k) * x[k];
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

MN_HD float mn_g_silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* Store an output: y[t][o] = s, or y[t][o] += s. */
MN_HD void mn_g_store(float *y, uint32_t rows, int accumulate, uint32_t t, uint32_t o, float s)
{
    float *dst = y + (size_t)t * rows + o;
    *dst = accumulate ? *dst + s : s;
}

/* RMSNorm, a block of MN_G_NORM_THREADS threads per token: out[t] = x[src(t)] / rms(x[src(t)]) * w,
 * where src(t) = rows ? rows[t] : t (the logits take only the rows that return logits). Thread i
 * sums the squares of elements i, i + MN_G_NORM_THREADS, ... (mn_g_rms_part: a few each, loaded at
 * once, where a warp per token waited for one load after another); each warp's 32 sums meet in the
 * butterfly and the warps' totals are added in warp order; mn_g_rms_write writes thread i's
 * elements of the output, given the total. */
#define MN_G_NORM_WARPS 8
#define MN_G_NORM_THREADS (MN_G_NORM_WARPS * MN_G_WARP)

MN_HD const float *mn_g_rms_src(const float *x, const uint32_t *rows, uint32_t n, uint32_t t)
{
    return x + (size_t)(rows ? rows[t] : t) * n;
}

MN_HD float mn_g_rms_part(const float *r, uint32_t n, uint32_t i)
{
    float ss = 0.0f;
#ifdef __CUDA_ARCH__
#pragma unroll 4
#endif
    for (uint32_t k = i; k < n; k += MN_G_NORM_THREADS)
        ss += r[k] * r[k];
    return ss;
}

MN_HD void mn_g_rms_write(const float *r, const float *w, float *out_row, uint32_t n, float eps, float ss,
                          uint32_t i)
{
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
#ifdef __CUDA_ARCH__
#pragma unroll 4
#endif
    for (uint32_t k = i; k < n; k += MN_G_NORM_THREADS)
        out_row[k] = r[k] * scale * w[k];
}

/* Rotate pair j of a head, (*a, *b) = its elements 2j and 2j + 1, for position pos (adjacent pairs,
 * as the CPU backend: the angle is pos * base^(-2j/rope_dim), with that power rounded to float
 * first). */
MN_HD void mn_g_rope(float *a, float *b, uint32_t pos, uint32_t j, uint32_t rope_dim, float base)
{
    float inv_freq = (float)pow((double)base, -2.0 * (double)j / (double)rope_dim);
    double angle = (double)pos * (double)inv_freq;
    float c = (float)cos(angle), s = (float)sin(angle), x = *a, y = *b;
    *a = x * c - y * s;
    *b = x * s + y * c;
}

/* Where position pos of sequence seq lives in one layer's K (or V) cache. */
MN_HD size_t mn_g_slot(const mn_gpu_attn *a, uint32_t seq, uint32_t pos)
{
    uint32_t block = a->tables[a->table_off[seq] + pos / a->block_size];
    return (size_t)block * a->block_stride + (size_t)(pos % a->block_size) * a->kv_dim;
}

/* The Q/K/V launch's store (mode MN_G_OUT_QKV): rows o and o + 1 of weight i (0 Q, 1 K, 2 V), which
 * are elements 2j and 2j + 1 of one head, for token t, summed to (s0, s1). Q and K are rotated for
 * the token's position (pairs past rope_dim / 2 are not); Q goes to q[t], K and V into the cache
 * at the token's position. */
MN_HD void mn_g_qkv_store(const mn_gpu_attn *a, float *q, uint32_t i, uint32_t o, uint32_t t, float s0, float s1)
{
    uint32_t pos = a->tok[t].pos, j = o % a->head_dim / 2;
    if (i < 2 && j < a->rope_dim / 2)
        mn_g_rope(&s0, &s1, pos, j, a->rope_dim, a->rope_base);
    if (i == 0) {
        float *dst = q + (size_t)t * a->n_heads * a->head_dim + o;
        dst[0] = s0;
        dst[1] = s1;
        return;
    }
    void *cache = i == 1 ? a->k : a->v;
    size_t at = mn_g_slot(a, a->tok[t].seq, pos) + o;
    mn_g_kv_put(a, cache, at, s0);
    mn_g_kv_put(a, cache, at + 1, s1);
}

/* out[t][head h] = softmax(q . K / sqrt(hd)) V over the token's positions 0..pos (causal), read
 * through its sequence's block table; query head h reads KV head h / (n_heads / n_kv_heads).
 * The positions go in chunks of C (mn_g_att_chunk: the fewest of 4, 8, 16, 32 that give no warp
 * more than one chunk, else 32), chunk i to warp i % MN_G_ATT_WARPS of the (token, head)'s block,
 * so that a short context keeps all 8 warps busy instead of a few (with 32 a chunk, the others
 * waited at the block's barrier). In a chunk lane l < C takes its l-th position: its score is its
 * own dot product (in dimension order); the chunk's maximum and its sum of weights meet across the
 * warp (the sum in the butterfly, the lanes past the chunk adding 0); an online softmax (a running
 * maximum, no score buffer) rescales the warp's output so far; then lane l adds, for its head
 * dimensions l, l + 32, ... (MN_G_LANE_DIMS of them at most), the chunk's weighted values in
 * position order. Last, warp 0 merges the others' (maximum, sum, output) into its own in warp
 * order. C and which warp takes which positions depend on the token's own position alone, so the
 * result is the same bits in any batch. */
#define MN_G_MAX_HEAD_DIM 256
#define MN_G_LANE_DIMS (MN_G_MAX_HEAD_DIM / MN_G_WARP)
#define MN_G_ATT_WARPS 8

/* The head's rows: the query's, and for position p the K (or V) row of its KV head. */
MN_HD const float *mn_g_query(const mn_gpu_attn *a, const float *q, uint32_t t, uint32_t h)
{
    return q + (size_t)t * a->n_heads * a->head_dim + (size_t)h * a->head_dim;
}

MN_HD size_t mn_g_head_at(const mn_gpu_attn *a, uint32_t t, uint32_t h, uint32_t p)
{
    return mn_g_slot(a, a->tok[t].seq, p) + (size_t)(h / (a->n_heads / a->n_kv_heads)) * a->head_dim;
}

/* Positions a chunk of token t holds: 4, 8, 16 or 32, by the token's own position alone. */
MN_HD uint32_t mn_g_att_chunk(const mn_gpu_attn *a, uint32_t t)
{
    uint32_t C = 4;
    while (C < MN_G_WARP && MN_G_ATT_WARPS * C < a->tok[t].pos + 1)
        C *= 2;
    return C;
}

/* How many positions the chunk starting at c holds for token t (1..C). */
MN_HD uint32_t mn_g_chunk_len(const mn_gpu_attn *a, uint32_t t, uint32_t c, uint32_t C)
{
    uint32_t left = a->tok[t].pos + 1 - c;
    return left < C ? left : C;
}

/* scale * (q . K row at), in dimension order. */
MN_HD float mn_g_score_at(const mn_gpu_attn *a, const float *qh, size_t at, float scale)
{
    float s = 0.0f;
    if (a->kv_half) { /* a half at a time, converted exactly: the same products in the same order */
#ifdef __CUDA_ARCH__
        /* Four halves a load (8 bytes: with head_dim % 4 == 0 every K row starts on them) beside
         * four floats of the query, as the float rows below: one 2-byte and one 4-byte load a
         * dimension had made the half cache's scores the dearer. Element 4i + k is bits 16k.. of
         * the pair (little-endian), added in dimension order: the same bits as the loop after. */
        if (a->head_dim % 4 == 0) {
            const float4 *q4 = (const float4 *)qh;
            const uint2 *k4 = (const uint2 *)((const unsigned short *)a->k + at);
#pragma unroll 16
            for (uint32_t i = 0; i < a->head_dim / 4; i++) {
                float4 x = q4[i];
                uint2 y = k4[i];
                s += x.x * mn_g_half_bits((unsigned short)(y.x & 0xffffu));
                s += x.y * mn_g_half_bits((unsigned short)(y.x >> 16));
                s += x.z * mn_g_half_bits((unsigned short)(y.y & 0xffffu));
                s += x.w * mn_g_half_bits((unsigned short)(y.y >> 16));
            }
            return s * scale;
        }
#endif
        for (uint32_t i = 0; i < a->head_dim; i++)
            s += qh[i] * mn_g_kv_get(a, a->k, at + i);
        return s * scale;
    }
    const float *kr = (const float *)a->k + at;
#ifdef __CUDA_ARCH__
    /* Four dimensions a load where rows start on 16 bytes (head_dim % 4 == 0: every query and K row
     * then does), the products still added one by one in dimension order: the same bits, and a
     * lane's K row (a different row per lane) in a quarter of the load instructions. */
    if (a->head_dim % 4 == 0) {
        const float4 *q4 = (const float4 *)qh, *k4 = (const float4 *)kr;
#pragma unroll 16
        for (uint32_t i = 0; i < a->head_dim / 4; i++) {
            float4 x = q4[i], y = k4[i];
            s += x.x * y.x;
            s += x.y * y.y;
            s += x.z * y.z;
            s += x.w * y.w;
        }
        return s * scale;
    }
#pragma unroll 8
#endif
    for (uint32_t i = 0; i < a->head_dim; i++)
        s += qh[i] * kr[i];
    return s * scale;
}

/* Lane's score in the chunk of C starting at c: scale * (q . K[c + lane]), or -inf past the chunk. */
MN_HD float mn_g_lane_score(const mn_gpu_attn *a, const float *qh, uint32_t t, uint32_t h, uint32_t c,
                            uint32_t C, uint32_t lane, float scale)
{
    if (lane >= mn_g_chunk_len(a, t, c, C))
        return -INFINITY;
    return mn_g_score_at(a, qh, mn_g_head_at(a, t, h, c + lane), scale);
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

/* Lane's share of the output: its dimensions lane + 32 j below hd, acc[j] for j < D (D = hd / 32
 * rounded up at least: the device kernel is compiled for D = 1, 2, 4, 8 and launched with the
 * least that holds the head, so its registers stay few; the twin takes MN_G_LANE_DIMS). The loops
 * run over every j < D with the dimensions past hd skipped, so that acc's indices are constants
 * once unrolled and the device keeps acc in registers (a loop bounded by hd put it in local
 * memory). */
#ifdef __CUDA_ARCH__
#define MN_G_EACH_DIM(D) _Pragma("unroll") for (uint32_t j = 0; j < (D); j++)
#else
#define MN_G_EACH_DIM(D) for (uint32_t j = 0; j < (D); j++)
#endif

/* scaled by old */
template <uint32_t D = MN_G_LANE_DIMS>
MN_HD void mn_g_lane_scale(float *acc, uint32_t hd, uint32_t lane, float old)
{
    MN_G_EACH_DIM(D)
    if (lane + j * MN_G_WARP < hd)
        acc[j] *= old;
}

/* += w * the V row at `at` */
template <uint32_t D = MN_G_LANE_DIMS>
MN_HD void mn_g_lane_acc(float *acc, const mn_gpu_attn *a, size_t at, uint32_t hd, uint32_t lane, float w)
{
    MN_G_EACH_DIM(D)
    if (lane + j * MN_G_WARP < hd)
        acc[j] += w * mn_g_kv_get(a, a->v, at + lane + j * MN_G_WARP);
}

template <uint32_t D = MN_G_LANE_DIMS>
MN_HD void mn_g_lane_out(float *o, const float *acc, uint32_t hd, uint32_t lane, float sum)
{
    MN_G_EACH_DIM(D)
    if (lane + j * MN_G_WARP < hd)
        o[lane + j * MN_G_WARP] = acc[j] / sum;
}

/* Merge another warp's (m2, sum2, its whole output row acc2) into a lane's (*m, *sum, acc); a warp
 * that had no positions (m2 = -inf) changes nothing. */
template <uint32_t D = MN_G_LANE_DIMS>
MN_HD void mn_g_lane_merge(float *m, float *sum, float *acc, float m2, float sum2, const float *acc2, uint32_t hd,
                           uint32_t lane)
{
    if (m2 == -INFINITY)
        return;
    float mx = m2 > *m ? m2 : *m, f1 = expf(*m - mx), f2 = expf(m2 - mx);
    *sum = *sum * f1 + sum2 * f2;
    MN_G_EACH_DIM(D)
    if (lane + j * MN_G_WARP < hd)
        acc[j] = acc[j] * f1 + acc2[lane + j * MN_G_WARP] * f2;
    *m = mx;
}

/* ---- argmax ---------------------------------------------------------------------------------- *
 * A row's first largest element, NaNs passed over (model/sampler.h's mn_argmax), by a block of
 * MN_G_ARGMAX_THREADS: thread i scans elements i, i + MN_G_ARGMAX_THREADS, ... keeping the first
 * largest it meets (mn_g_argmax_scan); the threads' candidates meet pairwise, the larger winning
 * and of equal ones the lower index (mn_g_argmax_meet: a total order, so the order of meeting
 * changes nothing); a row whose first element is NaN answers 0, as the CPU's loop does. */
#define MN_G_ARGMAX_THREADS 256
#define MN_G_NONE 0xffffffffu

MN_HD void mn_g_argmax_scan(const float *row, uint32_t n, uint32_t i, float *m, uint32_t *at)
{
    *m = -INFINITY, *at = MN_G_NONE;
    for (uint32_t k = i; k < n; k += MN_G_ARGMAX_THREADS) {
        float x = row[k];
        if (x == x && (*at == MN_G_NONE || x > *m))
            *m = x, *at = k;
    }
}

MN_HD void mn_g_argmax_meet(float *m, uint32_t *at, float m2, uint32_t at2)
{
    if (at2 != MN_G_NONE && (*at == MN_G_NONE || m2 > *m || (m2 == *m && at2 < *at)))
        *m = m2, *at = at2;
}

MN_HD int32_t mn_g_argmax_answer(const float *row, uint32_t at)
{
    return row[0] != row[0] || at == MN_G_NONE ? 0 : (int32_t)at;
}

/* ---- draws ------------------------------------------------------------------------------------ *
 * A sampled row's token by model/draw.h's rule (the CPU's mn_draw_row: the same token), by a block
 * of MN_G_DRAW_THREADS per row over a scratch row w[0..n) of its weights:
 *  1. thread i weighs ids i, i + MN_G_DRAW_THREADS, ... into w and adds them (mn_g_draw_weigh); the
 *     block adds the threads' sums: integers, so any order gives the CPU's total;
 *  2. below top_p 1, theta is the largest weight whose tokens of at least that weight reach the
 *     need. It lies in an interval [lo, hi), at first mn_g_draw_range's bounds. A pass over the
 *     weights adds up the tokens at least as heavy as each of MN_G_DRAW_PROBES thresholds inside
 *     it (mn_g_draw_tally; in octaves while it spans many, since weights are exponentials, else
 *     evenly: mn_g_draw_probe) and gathers the tokens strictly inside into shared memory. Where
 *     there are more than MN_G_DRAW_GATHER of those, the thresholds narrow it (mn_g_draw_narrow);
 *     else theta is the heaviest of them that qualifies, each thread judging one
 *     (mn_g_draw_candidate), or lo, and the nucleus follows (mn_g_draw_plan);
 *  3. thread i takes the ids [i C, i C + C), C = ceil(n / MN_G_DRAW_THREADS) (mn_g_draw_span): the
 *     prefix, in thread order, of its counts of tokens weighing theta says which of the nucleus's
 *     ties are its, the prefix of its nucleus weights whose ids hold the point; that thread walks
 *     them (mn_draw_walk).
 * Each pass waits on loads from L2 (a row's weights are 384 KB at SmolLM2's vocabulary), so the
 * fewer passes and the more loads in flight the better: a block of 256 threads and plain bisection
 * from [1, 2^40] made a draw at top_p 0.9 take 800 us on an H200 (41 passes), 1,024 threads and
 * the bounds 477 us (about 20), 7 thresholds a pass 401 us (14.5 passes on the Gaussian rows
 * below). Thresholds in octaves and the gathering end the search in 3.9 passes on average on
 * Gaussian rows of SmolLM2's vocabulary and 8.0 on rows of integer logits, whose thousands of
 * ties stay inside until a threshold falls on them, against 14.5 and 14.2 before (test_gpu's
 * nucleus_search_on_vocabulary_rows counts them; the gathering alone: 5.4 and 11.5; the octaves
 * alone: 11.3 and 10.7, each in a throwaway build). Not yet timed on a device
 * (gpu_device/draws_on_vocabulary_rows does). */
#define MN_G_DRAW_THREADS 1024
#define MN_G_DRAW_ROWS 64  /* rows one launch draws: the weights' scratch holds as many rows */
#define MN_G_DRAW_PROBES 7   /* thresholds a pass tries: theta's interval shrinks 8-fold */
#define MN_G_DRAW_GATHER 256 /* the tokens inside a pass keeps: with no more, theta is among them */

/* One row to draw: its index among the pass's logits rows and its settings. */
typedef struct mn_gpu_draw {
    uint32_t row;
    float temperature, top_p;
    double u;
} mn_gpu_draw;

MN_HD uint64_t mn_g_draw_weigh(const float *row, uint32_t n, uint32_t i, float mx, float temperature, uint64_t *w)
{
    float scale = mn_draw_scale(temperature);
    uint64_t sum = 0;
#ifdef __CUDA_ARCH__
#pragma unroll 4
#endif
    for (uint32_t k = i; k < n; k += MN_G_DRAW_THREADS)
        sum += w[k] = mn_draw_weight(row[k], mx, scale);
    return sum;
}

/* Where theta lies, [lo, hi), below top_p 1 (need < total) over n tokens: at most the first's
 * weight, 2^40, and at least (total - need) / n, since the tokens lighter than that weigh less than
 * total - need in all, so those at least that heavy weigh more than need (and at least 1, which
 * every token of some weight reaches). */
MN_HD void mn_g_draw_range(uint64_t total, uint64_t need, uint32_t n, uint64_t *lo, uint64_t *hi)
{
    uint64_t floor = (total - need) / n;
    *lo = floor > 1 ? floor : 1;
    *hi = ((uint64_t)1 << MN_DRAW_ONE_BITS) + 1;
}

/* The bits of x >= 1: x lies in [2^(bits - 1), 2^bits). */
MN_HD uint32_t mn_g_bits(uint64_t x)
{
#ifdef __CUDA_ARCH__
    return 64 - (uint32_t)__clzll((long long)x);
#else
    return 64 - (uint32_t)__builtin_clzll(x);
#endif
}

/* Threshold j of a pass over [lo, hi) (1 <= lo, hi - lo >= 2, hi <= 2^40 + 1: no overflow), strictly
 * between lo and hi and rising with j. Weights are exponentials of the logits, so an interval
 * spanning many octaves is split in octaves: powers of two spread evenly over its exponents, while
 * they span at least MN_G_DRAW_PROBES + 1 (then e_0 > bits(lo) - 1 and e_last < bits(hi - 1), each
 * rising); narrower ones evenly. */
MN_HD uint64_t mn_g_draw_probe(uint64_t lo, uint64_t hi, uint32_t j)
{
    uint32_t a = mn_g_bits(lo), b = mn_g_bits(hi - 1);
    if (b - a >= MN_G_DRAW_PROBES + 1)
        return (uint64_t)1 << (a + (b - a) * (j + 1) / (MN_G_DRAW_PROBES + 1));
    return lo + (hi - lo) * (j + 1) / (MN_G_DRAW_PROBES + 1);
}

/* One token's part in a pass over theta's interval [lo, hi): its weight x added to heavy[j] for
 * every threshold j it reaches; whether it weighs strictly between lo and hi (never x = 0: lo >= 1). */
MN_HD bool mn_g_draw_tally(uint64_t x, uint64_t lo, uint64_t hi, const uint64_t *probe, uint64_t *heavy)
{
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (uint32_t j = 0; j < MN_G_DRAW_PROBES; j++)
        heavy[j] += x >= probe[j] ? x : 0;
    return x > lo && x < hi;
}

/* Theta among the m tokens strictly inside its interval [lo, hi), once a pass has gathered them
 * all, c their weights (in any order), s_hi the weight of the tokens at least hi: the largest
 * weight v whose tokens at least that heavy reach the need. Candidate t's verdict: c[t] when it
 * qualifies, else 0, with *above the weight of the tokens heavier than it. Where none qualifies,
 * theta is lo, and the tokens heavier than lo weigh s_hi and all of c. */
MN_HD uint64_t mn_g_draw_candidate(const uint64_t *c, uint32_t m, uint32_t t, uint64_t need, uint64_t s_hi,
                                   uint64_t *above)
{
    uint64_t v = c[t], ge = 0, gt = 0;
    for (uint32_t j = 0; j < m; j++) {
        ge += c[j] >= v ? c[j] : 0;
        gt += c[j] > v ? c[j] : 0;
    }
    *above = s_hi + gt;
    return s_hi + ge >= need ? v : 0;
}

/* A pass's verdict when more tokens than a pass gathers weigh strictly between lo and hi: theta's
 * interval narrows to between the last threshold whose tokens at least that heavy weigh `need` and
 * the first whose do not (s_hi: the weight of the tokens at least hi). Thresholds lie strictly
 * between lo and hi, so every pass narrows it. */
MN_HD void mn_g_draw_narrow(uint64_t need, const uint64_t *probe, const uint64_t *heavy, uint64_t *lo, uint64_t *hi,
                            uint64_t *s_hi)
{
    for (uint32_t j = 0; j < MN_G_DRAW_PROBES; j++)
        if (heavy[j] >= need)
            *lo = probe[j] > *lo ? probe[j] : *lo;
        else if (probe[j] < *hi)
            *hi = probe[j], *s_hi = heavy[j];
}

/* The nucleus from the total, the need and the search's end (theta = lo, s_hi the weight of the
 * tokens heavier than it). */
MN_HD mn_draw_nucleus mn_g_draw_plan(uint64_t need, uint64_t total, uint64_t lo, uint64_t s_hi)
{
    if (need == total)
        return mn_draw_nucleus{0, 0, total};
    uint64_t ties = mn_draw_ties(need, s_hi, lo);
    return mn_draw_nucleus{lo, ties, s_hi + ties * lo};
}

MN_HD void mn_g_draw_span(uint32_t n, uint32_t i, uint32_t *b, uint32_t *e)
{
    uint32_t c = (n + MN_G_DRAW_THREADS - 1) / MN_G_DRAW_THREADS;
    *b = i * c < n ? i * c : n;
    *e = *b + c < n ? *b + c : n;
}

/* the tokens of [b, e) weighing exactly theta (> 0) */
MN_HD uint64_t mn_g_draw_tied(const uint64_t *w, uint32_t b, uint32_t e, uint64_t theta)
{
    uint64_t c = 0;
#ifdef __CUDA_ARCH__
#pragma unroll 8
#endif
    for (uint32_t k = b; k < e; k++)
        c += theta && w[k] == theta;
    return c;
}

/* The nucleus's weight in [b, e), `seen` of its ties being before b (model/draw.h's mn_draw_walk
 * then finds the token in the span holding the point). */
MN_HD uint64_t mn_g_draw_held(const uint64_t *w, uint32_t b, uint32_t e, mn_draw_nucleus nu, uint64_t seen)
{
    uint64_t sum = 0;
#ifdef __CUDA_ARCH__
#pragma unroll 8
#endif
    for (uint32_t k = b; k < e; k++)
        sum += mn_draw_held(w[k], nu.theta, &seen, nu.ties) ? w[k] : 0;
    return sum;
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

/* Programmatic dependent launch (sm_90; cuda_backend.cu's launch()): every kernel of a pass after
 * the first is launched while the one before it still runs. Its blocks may read, before this call,
 * only what no kernel of the pass writes (its weights); the call waits until the kernel before has
 * finished and its writes are seen (and, through that one's own wait, every kernel before it), and
 * then lets the next kernel launch. So a kernel's prologue overlaps the one before, and the one after
 * is scheduled while this one works. A no-op on older devices and in launches without the attribute;
 * every block calls it, before any early return, so that no kernel can finish ahead of the one
 * before it. */
static __device__ inline void mn_g_after_previous(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Bytes [row, row + n) into L2, a 128-byte line per lane in turn (the loads that follow the wait then
 * find them there instead of in device memory). */
static __device__ inline void mn_g_prefetch(const uint8_t *row, size_t n, uint32_t lane)
{
    uintptr_t line = (uintptr_t)row & ~(uintptr_t)127, end = (uintptr_t)row + n;
    for (line += (uintptr_t)lane * 128; line < end; line += MN_G_WARP * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
}

/* A projection block's dynamic shared memory: each warp's weight rows (stage bytes a warp), then
 * the block's tokens' inputs (mn_k_proj). */
extern __shared__ __align__(16) uint8_t mn_g_smem[];

/* Bytes [src[r], src[r] + n[r]) of NR weight rows copied by the warp into dst + r * stride, 16 bytes a
 * lane at a time from each row's 16-byte line on (the weights' allocations are 16 bytes longer than
 * their rows, so the last line is theirs); src[r] becomes its copy, at dst + r * stride + src[r] % 16
 * (every half and float keeps its alignment). stride holds n rounded up to 16, plus 16. A round
 * issues all its loads (MN_G_STAGE_LOADS a row, for every row) before its first store, so that a
 * row of a few KB costs one round trip, not one a line. */
#define MN_G_STAGE_LOADS 4
template <uint32_t NR>
static __device__ inline void mn_g_stage_rows(const uint8_t **src, const size_t *n, uint8_t *dst, size_t stride,
                                              uint32_t lane)
{
    const uint4 *s[NR];
    uint32_t lines[NR], most = 0;
#pragma unroll
    for (uint32_t r = 0; r < NR; r++) {
        uintptr_t from = (uintptr_t)src[r] & ~(uintptr_t)15, to = ((uintptr_t)src[r] + n[r] + 15) & ~(uintptr_t)15;
        s[r] = (const uint4 *)from;
        lines[r] = (uint32_t)((to - from) / 16);
        most = lines[r] > most ? lines[r] : most;
    }
    for (uint32_t u0 = lane; u0 < most; u0 += MN_G_STAGE_LOADS * MN_G_WARP) {
        uint4 v[NR][MN_G_STAGE_LOADS];
#pragma unroll
        for (uint32_t r = 0; r < NR; r++)
#pragma unroll
            for (uint32_t j = 0; j < MN_G_STAGE_LOADS; j++)
                if (u0 + j * MN_G_WARP < lines[r])
                    v[r][j] = s[r][u0 + j * MN_G_WARP];
#pragma unroll
        for (uint32_t r = 0; r < NR; r++)
#pragma unroll
            for (uint32_t j = 0; j < MN_G_STAGE_LOADS; j++)
                if (u0 + j * MN_G_WARP < lines[r])
                    ((uint4 *)(dst + r * stride))[u0 + j * MN_G_WARP] = v[r][j];
    }
#pragma unroll
    for (uint32_t r = 0; r < NR; r++)
        src[r] = dst + r * stride + ((uintptr_t)src[r] & 15);
}

/* n floats of the block's tokens' inputs from x (n a multiple of 4, x 16-byte aligned) copied by the
 * whole block into xs; xs. */
static __device__ inline const float *mn_g_stage_inputs(const float *x, uint32_t n, float *xs)
{
    for (uint32_t e = threadIdx.x; e < n / 4; e += blockDim.x)
        ((float4 *)xs)[e] = ((const float4 *)x)[e];
    return xs;
}

/* grid: x over the T * dim elements */
__global__ void mn_k_embed(uint32_t type, const uint8_t *table, size_t row_bytes, const int32_t *tokens,
                           float *x, uint32_t dim, uint32_t T)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    mn_g_after_previous();
    if (i < (size_t)T * dim)
        mn_g_embed(type, table, row_bytes, tokens, x, dim, (uint32_t)(i / dim), (uint32_t)(i % dim));
}

/* a block of MN_G_NORM_THREADS per token */
__global__ void mn_k_rmsnorm(const float *x, const uint32_t *rows, const float *w, float *out, uint32_t n,
                             float eps, uint32_t T)
{
    __shared__ float warp_ss[MN_G_NORM_WARPS];
    uint32_t i = threadIdx.x, t = blockIdx.x;
    mn_g_after_previous();
    if (t >= T)
        return; /* the whole block leaves */
    const float *r = mn_g_rms_src(x, rows, n, t);
    float part = mn_g_warp_sum(mn_g_rms_part(r, n, i)), ss = 0.0f;
    if (i % MN_G_WARP == 0)
        warp_ss[i / MN_G_WARP] = part;
    __syncthreads();
    for (uint32_t wp = 0; wp < MN_G_NORM_WARPS; wp++)
        ss += warp_ss[wp];
    mn_g_rms_write(r, w, out + (size_t)t * n, n, eps, ss, i);
}

/* One warp's sums for NR weight rows of one type over nt tokens' inputs, the type fixed at compile
 * time (no branch per element) and MN_G_UNROLL of a lane's weights loaded before they are used, so
 * that a lane has that many loads in flight: a decode step's projections are a few hundred rows
 * each, too few warps to hide memory latency otherwise. Each (row, token) sum still adds its lane's
 * products in column order. (16 loads in flight with the last round predicated, tried on an H100,
 * made every projection 1.3-3x slower.) */
#define MN_G_UNROLL 8

template <uint32_t TYPE, uint32_t NR, uint32_t TB>
static __device__ inline void mn_g_proj_warp(const uint8_t *const *row, const float *xt, uint32_t cols, uint32_t nt,
                                             uint32_t lane, float (*s)[TB])
{
    uint32_t k = lane;
    for (; k + (MN_G_UNROLL - 1) * MN_G_WARP < cols; k += MN_G_UNROLL * MN_G_WARP) {
        float w[NR][MN_G_UNROLL];
#pragma unroll
        for (uint32_t r = 0; r < NR; r++)
#pragma unroll
            for (uint32_t u = 0; u < MN_G_UNROLL; u++)
                w[r][u] = mn_g_weight(TYPE, row[r], k + u * MN_G_WARP);
#pragma unroll
        for (uint32_t u = 0; u < MN_G_UNROLL; u++)
#pragma unroll
            for (uint32_t j = 0; j < TB; j++)
                if (j < nt) {
                    float xv = xt[(size_t)j * cols + k + u * MN_G_WARP];
#pragma unroll
                    for (uint32_t r = 0; r < NR; r++)
                        s[r][j] += w[r][u] * xv;
                }
    }
    for (; k < cols; k += MN_G_WARP) {
        float w[NR];
#pragma unroll
        for (uint32_t r = 0; r < NR; r++)
            w[r] = mn_g_weight(TYPE, row[r], k);
#pragma unroll
        for (uint32_t j = 0; j < TB; j++)
            if (j < nt) {
                float xv = xt[(size_t)j * cols + k];
#pragma unroll
                for (uint32_t r = 0; r < NR; r++)
                    s[r][j] += w[r] * xv;
            }
    }
}

template <uint32_t NR, uint32_t TB = MN_G_TB>
static __device__ inline void mn_g_proj_rows(uint32_t type, const uint8_t *const *row, const float *xt, uint32_t cols,
                                             uint32_t nt, uint32_t lane, float (*s)[TB])
{
    switch (type) {
    case MN_F32: mn_g_proj_warp<MN_F32, NR, TB>(row, xt, cols, nt, lane, s); break;
    case MN_F16: mn_g_proj_warp<MN_F16, NR, TB>(row, xt, cols, nt, lane, s); break;
    case MN_Q8_0: mn_g_proj_warp<MN_Q8_0, NR, TB>(row, xt, cols, nt, lane, s); break;
    case MN_Q4_0: mn_g_proj_warp<MN_Q4_0, NR, TB>(row, xt, cols, nt, lane, s); break;
    case MN_Q4_1: mn_g_proj_warp<MN_Q4_1, NR, TB>(row, xt, cols, nt, lane, s); break;
    default: break;
    }
}

/* grid: x over the launch's warps (mn_g_out_rows, blockDim.x / 32 per block), y over groups of
 * MN_G_TB tokens; a is read by MN_G_OUT_QKV only.
 * With stage > 0 each warp first copies its weight rows into shared memory (stage bytes a warp,
 * before waiting for the kernel before: weights are no kernel's output), and with stage_x the
 * block copies its tokens' inputs there (cols a multiple of 4), so that the sums' loads wait on
 * shared memory instead of a chain of device-memory (or L2) round trips: a decode step's
 * projection has few warps and each lane only a few loads in flight. The sums read the copies
 * through the same code in the same order: the same bits either way. */
__global__ void mn_k_proj(const float *x, const __grid_constant__ mn_gpu_outs outs, const __grid_constant__ mn_gpu_attn a,
                          uint32_t T, uint32_t stage, uint32_t stage_x)
{
    uint32_t lane = threadIdx.x % MN_G_WARP, t0 = blockIdx.y * MN_G_TB;
    uint32_t g = blockIdx.x * (blockDim.x / MN_G_WARP) + threadIdx.x / MN_G_WARP, i = 0, o = g;
    /* the warp's weight rows: rows o, o + 1 of weight i (a pair of Q/K/V), row g of gate and up, or
     * row o of weight i */
    const uint8_t *row[2] = {NULL, NULL};
    bool live = t0 < T && g < mn_g_out_rows(&outs);
    if (live) {
        if (outs.mode == MN_G_OUT_SWIGLU) {
            row[0] = outs.w[0].data + (size_t)g * outs.w[0].row_bytes;
            row[1] = outs.w[1].data + (size_t)g * outs.w[1].row_bytes;
        } else {
            mn_g_out_of(&outs, outs.mode == MN_G_OUT_QKV ? 2 * g : g, &i, &o);
            row[0] = outs.w[i].data + (size_t)o * outs.w[i].row_bytes;
            if (outs.mode == MN_G_OUT_QKV)
                row[1] = row[0] + outs.w[i].row_bytes;
        }
        size_t n[2] = {outs.w[outs.mode == MN_G_OUT_SWIGLU ? 0 : i].row_bytes,
                       outs.w[outs.mode == MN_G_OUT_SWIGLU ? 1 : i].row_bytes};
        uint8_t *mine = mn_g_smem + (size_t)(threadIdx.x / MN_G_WARP) * stage;
        if (stage && row[1]) /* a pair: the second row in stage's second half */
            mn_g_stage_rows<2>(row, n, mine, stage / 2, lane);
        else if (stage)
            mn_g_stage_rows<1>(row, n, mine, stage, lane);
        else if (blockIdx.y == 0) /* one token group pulls them into L2 for all */
            for (uint32_t r = 0; r < 2 && row[r]; r++)
                mn_g_prefetch(row[r], n[r], lane);
    }
    mn_g_after_previous();
    uint32_t nt = T - t0 < MN_G_TB ? T - t0 : MN_G_TB, cols = outs.w[0].cols;
    const float *xt = x + (size_t)t0 * cols;
    if (stage_x && t0 < T) /* the whole block: its token group is the same for all its warps */
        xt = mn_g_stage_inputs(xt, nt * cols, (float *)(mn_g_smem + (size_t)(blockDim.x / MN_G_WARP) * stage));
    if (stage || stage_x)
        __syncthreads();
    if (!live)
        return; /* a whole warp leaves together: its row is the same for its 32 lanes */
    float s[2][MN_G_TB] = {{0}};
    if (outs.mode == MN_G_OUT_QKV) {
        mn_g_proj_rows<2>(outs.w[i].type, row, xt, cols, nt, lane, s);
        float m0 = 0.0f, m1 = 0.0f; /* lane j keeps token j's sums and stores them (RoPE's sines in parallel) */
#pragma unroll
        for (uint32_t j = 0; j < MN_G_TB; j++)
            if (j < nt) {
                float s0 = mn_g_warp_sum(s[0][j]), s1 = mn_g_warp_sum(s[1][j]);
                if (lane == j)
                    m0 = s0, m1 = s1;
            }
        if (lane < nt)
            mn_g_qkv_store(&a, outs.y[0], i, o, t0 + lane, m0, m1);
        return;
    }
    if (outs.mode == MN_G_OUT_SWIGLU) {
        if (outs.w[0].type == outs.w[1].type) {
            mn_g_proj_rows<2>(outs.w[0].type, row, xt, cols, nt, lane, s);
        } else {
            mn_g_proj_rows<1>(outs.w[0].type, row, xt, cols, nt, lane, s);
            mn_g_proj_rows<1>(outs.w[1].type, row + 1, xt, cols, nt, lane, s + 1);
        }
#pragma unroll
        for (uint32_t j = 0; j < MN_G_TB; j++)
            if (j < nt) {
                float gate = mn_g_warp_sum(s[0][j]), up = mn_g_warp_sum(s[1][j]);
                if (lane == 0)
                    mn_g_store(outs.y[0], outs.w[0].rows, 0, t0 + j, g, mn_g_silu_mul(gate, up));
            }
        return;
    }
    mn_g_proj_rows<1>(outs.w[i].type, row, xt, cols, nt, lane, s);
#pragma unroll
    for (uint32_t j = 0; j < MN_G_TB; j++)
        if (j < nt) {
            float sum = mn_g_warp_sum(s[0][j]);
            if (lane == 0)
                mn_g_store(outs.y[i], outs.w[i].rows, outs.mode == MN_G_OUT_ACCUMULATE, t0 + j, o, sum);
        }
}

/* The butterfly of N sums at once (N a multiple of 32), as a reduce-scatter: in each round a lane
 * keeps the half of its sums its partner (lane ^ half) does not, adds the partner's share of that
 * half and hands over the other, so 32 sums take 31 shuffles instead of 160. Every addition is the
 * butterfly's own, in its order (the lane's sum + its partner's, rounds 16, 8, ..., 1): the same
 * bits as mn_g_warp_sum. Lane l ends with sum 32 c + l of chunk c in out[c]. */
template <uint32_t N>
static __device__ inline void mn_g_warp_sums(float *v, uint32_t lane, float *out)
{
#pragma unroll
    for (uint32_t c = 0; c < N / MN_G_WARP; c++) {
        float *p = v + c * MN_G_WARP;
#pragma unroll
        for (uint32_t round = 0; round < 5; round++) { /* 32 = 2^5 */
            uint32_t half = MN_G_WARP / 2 >> round;
            bool upper = lane & half;
#pragma unroll
            for (uint32_t i = 0; i < half; i++) {
                float keep = upper ? p[i + half] : p[i], give = upper ? p[i] : p[i + half];
                p[i] = keep + __shfl_xor_sync(MN_G_FULL, give, half);
            }
        }
        out[c] = p[0];
    }
}

/* Weight row r of the wide warp whose first unit (row, or pair of Q/K/V, or row of gate and up) is
 * g0: its weight *wi and row *wo there; false past the last unit (*wi, *wo then name the warp's
 * first row, summed and dropped, which keeps the loops free of branches). */
static __device__ inline bool mn_g_wide_row(const mn_gpu_outs *outs, uint32_t n_out, uint32_t g0, uint32_t r,
                                            uint32_t *wi, uint32_t *wo)
{
    bool paired = outs->mode == MN_G_OUT_QKV || outs->mode == MN_G_OUT_SWIGLU;
    uint32_t g = paired ? g0 + r / 2 : g0 + r, half = paired ? r % 2 : 0;
    bool live = g < n_out;
    if (!live)
        g = g0, half = 0;
    if (outs->mode == MN_G_OUT_SWIGLU) {
        *wi = half, *wo = g;
    } else {
        mn_g_out_of(outs, paired ? 2 * g : g, wi, wo);
        *wo += half;
    }
    return live;
}

/* Projections over many tokens (a verification batch, many sequences' decode step, a prompt): the
 * same sums as mn_k_proj, in the same order, so a token's bits do not depend on which of the two
 * its pass took. A warp takes NR weight rows (NR rows; NR / 2 pairs of rows of Q/K/V; NR / 2 rows
 * of gate and up) and TB tokens: each input element it loads serves NR rows and each dequantized
 * weight TB tokens, where mn_k_proj loads both for one or two rows and 8 tokens, and the NR * TB
 * sums meet in mn_g_warp_sums. Sum r * TB + j is row r's for token j. */
template <uint32_t NR, uint32_t TB, bool STAGE>
__global__ void __launch_bounds__(128) mn_k_proj_wide(const float *x, const __grid_constant__ mn_gpu_outs outs,
                                                      const __grid_constant__ mn_gpu_attn a, uint32_t T, uint32_t stage,
                                                      uint32_t stage_x)
{
    static_assert(NR % 2 == 0 && NR * TB % MN_G_WARP == 0 && TB < MN_G_WARP && MN_G_WARP % TB == 0,
                  "a pair's two sums in one chunk of 32");
    bool paired = outs.mode == MN_G_OUT_QKV || outs.mode == MN_G_OUT_SWIGLU;
    uint32_t lane = threadIdx.x % MN_G_WARP, t0 = blockIdx.y * TB, n_out = mn_g_out_rows(&outs);
    uint32_t g0 = (blockIdx.x * (blockDim.x / MN_G_WARP) + threadIdx.x / MN_G_WARP) * (paired ? NR / 2 : NR);
    bool live = t0 < T && g0 < n_out;
    uint32_t wi[NR], wo;
    const uint8_t *row[NR];
    size_t n[NR];
    bool one_type = true;
#pragma unroll
    for (uint32_t r = 0; r < NR; r++) {
        mn_g_wide_row(&outs, n_out, live ? g0 : 0, r, &wi[r], &wo);
        n[r] = outs.w[wi[r]].row_bytes;
        row[r] = outs.w[wi[r]].data + (size_t)wo * n[r];
        one_type = one_type && outs.w[wi[r]].type == outs.w[wi[0]].type;
        if (live && !(STAGE && stage) && blockIdx.y == 0) /* one token group pulls them in for all */
            mn_g_prefetch(row[r], n[r], lane);
    }
    if (STAGE && live && stage) /* as mn_k_proj does: the rows into shared memory, stage / NR bytes each */
        mn_g_stage_rows<NR>(row, n, mn_g_smem + (size_t)(threadIdx.x / MN_G_WARP) * stage, stage / NR, lane);
    mn_g_after_previous();
    uint32_t nt = T - t0 < TB ? T - t0 : TB, cols = outs.w[0].cols;
    const float *xt = x + (size_t)t0 * cols;
    if (STAGE && stage_x && t0 < T) /* as in mn_k_proj */
        xt = mn_g_stage_inputs(xt, nt * cols, (float *)(mn_g_smem + (size_t)(blockDim.x / MN_G_WARP) * stage));
    if (STAGE && (stage || stage_x))
        __syncthreads();
    if (!live)
        return; /* a whole warp leaves together */
    float s[NR][TB] = {{0}};
    if (one_type) {
        mn_g_proj_rows<NR, TB>(outs.w[wi[0]].type, row, xt, cols, nt, lane, s);
    } else {
#pragma unroll
        for (uint32_t r = 0; r < NR; r++)
            mn_g_proj_rows<1, TB>(outs.w[wi[r]].type, row + r, xt, cols, nt, lane, s + r);
    }
    float sum[NR * TB / MN_G_WARP];
    /* the reduce-scatter picks its sums by lane, so they go through memory; with STAGE a copy keeps
     * that memory away from s, which otherwise (its address taken, the rows pointers that may point
     * to shared memory or anywhere) stays in local memory through every product: 2,900 local loads
     * and stores in the PTX */
    float flat[STAGE ? NR * TB : 1], *v = &s[0][0];
    if (STAGE) {
#pragma unroll
        for (uint32_t i = 0; i < NR * TB; i++)
            flat[i] = s[i / TB][i % TB];
        v = flat;
    }
    mn_g_warp_sums<NR * TB>(v, lane, sum);
#pragma unroll
    for (uint32_t c = 0; c < NR * TB / MN_G_WARP; c++) {
        uint32_t idx = c * MN_G_WARP + lane, r = idx / TB, j = idx % TB, i, o;
        float second = __shfl_xor_sync(MN_G_FULL, sum[c], TB); /* row r ^ 1's sum: a pair's other half */
        if (!mn_g_wide_row(&outs, n_out, g0, r, &i, &o) || j >= nt || (paired && r % 2))
            continue;
        if (outs.mode == MN_G_OUT_QKV)
            mn_g_qkv_store(&a, outs.y[0], i, o, t0 + j, sum[c], second);
        else if (outs.mode == MN_G_OUT_SWIGLU)
            mn_g_store(outs.y[0], outs.w[0].rows, 0, t0 + j, o, mn_g_silu_mul(sum[c], second));
        else
            mn_g_store(outs.y[i], outs.w[i].rows, outs.mode == MN_G_OUT_ACCUMULATE, t0 + j, o, sum[c]);
    }
}

/* a block of MN_G_ARGMAX_THREADS per row: out[r] = the argmax of logits row r */
__global__ void mn_k_argmax(const float *logits, uint32_t n_vocab, int32_t *out, uint32_t rows)
{
    __shared__ float sm_m[MN_G_ARGMAX_THREADS / MN_G_WARP];
    __shared__ uint32_t sm_at[MN_G_ARGMAX_THREADS / MN_G_WARP];
    uint32_t i = threadIdx.x, r = blockIdx.x;
    if (r >= rows)
        return; /* the whole block leaves */
    const float *row = logits + (size_t)r * n_vocab;
    float m;
    uint32_t at;
    mn_g_argmax_scan(row, n_vocab, i, &m, &at);
    for (uint32_t off = MN_G_WARP / 2; off > 0; off /= 2)
        mn_g_argmax_meet(&m, &at, __shfl_xor_sync(MN_G_FULL, m, off), __shfl_xor_sync(MN_G_FULL, at, off));
    if (i % MN_G_WARP == 0)
        sm_m[i / MN_G_WARP] = m, sm_at[i / MN_G_WARP] = at;
    __syncthreads();
    if (i != 0)
        return;
    for (uint32_t w = 1; w < MN_G_ARGMAX_THREADS / MN_G_WARP; w++)
        mn_g_argmax_meet(&m, &at, sm_m[w], sm_at[w]);
    out[r] = mn_g_argmax_answer(row, at);
}

/* v summed over the block (MAX: its largest), in every thread (sm: a warp's slot each) */
template <bool MAX>
static __device__ uint64_t mn_d_block_reduce(uint64_t v, uint64_t *sm)
{
    for (uint32_t off = MN_G_WARP / 2; off > 0; off /= 2) {
        uint64_t o = __shfl_xor_sync(MN_G_FULL, v, off);
        v = MAX ? (o > v ? o : v) : v + o;
    }
    if (threadIdx.x % MN_G_WARP == 0)
        sm[threadIdx.x / MN_G_WARP] = v;
    __syncthreads();
    v = 0; /* weights: none below 0 */
    for (uint32_t w = 0; w < MN_G_DRAW_THREADS / MN_G_WARP; w++)
        v = MAX ? (sm[w] > v ? sm[w] : v) : v + sm[w];
    __syncthreads();
    return v;
}
static __device__ uint64_t mn_d_block_sum(uint64_t v, uint64_t *sm) { return mn_d_block_reduce<false>(v, sm); }
static __device__ uint64_t mn_d_block_max(uint64_t v, uint64_t *sm) { return mn_d_block_reduce<true>(v, sm); }

/* v[0..MN_G_DRAW_PROBES) summed over the block, into every thread's out[] (sm: the warps' sums,
 * total: the block's) */
static __device__ void mn_d_block_sums(const uint64_t *v, uint64_t (*sm)[MN_G_DRAW_PROBES], uint64_t *total,
                                       uint64_t *out)
{
    uint32_t lane = threadIdx.x % MN_G_WARP, warp = threadIdx.x / MN_G_WARP;
    for (uint32_t j = 0; j < MN_G_DRAW_PROBES; j++) {
        uint64_t x = v[j];
        for (uint32_t off = MN_G_WARP / 2; off > 0; off /= 2)
            x += __shfl_xor_sync(MN_G_FULL, x, off);
        if (lane == 0)
            sm[warp][j] = x;
    }
    __syncthreads();
    if (warp == 0 && lane < MN_G_DRAW_PROBES) {
        uint64_t x = 0;
        for (uint32_t k = 0; k < MN_G_DRAW_THREADS / MN_G_WARP; k++)
            x += sm[k][lane];
        total[lane] = x;
    }
    __syncthreads();
    for (uint32_t j = 0; j < MN_G_DRAW_PROBES; j++)
        out[j] = total[j];
    __syncthreads();
}

/* the sum of v over the threads before this one (sm: a warp's slot each): within the warp by
 * shuffles, then the warps' totals before its own */
static __device__ uint64_t mn_d_block_before(uint64_t v, uint64_t *sm)
{
    uint32_t lane = threadIdx.x % MN_G_WARP, warp = threadIdx.x / MN_G_WARP;
    uint64_t x = v;
    for (uint32_t off = 1; off < MN_G_WARP; off *= 2) {
        uint64_t y = __shfl_up_sync(MN_G_FULL, x, off);
        x += lane >= off ? y : 0;
    }
    if (lane == MN_G_WARP - 1)
        sm[warp] = x;
    __syncthreads();
    x -= v;
    for (uint32_t w = 0; w < warp; w++)
        x += sm[w];
    __syncthreads();
    return x;
}

/* This thread's part of a pass over theta's interval [lo, hi): mn_g_draw_tally into heavy, and the
 * tokens strictly inside gathered into gather[0..MN_G_DRAW_GATHER), a warp's slots taken at once
 * (*gathered counts them all, kept or not). MN_G_DRAW_BATCH loads are issued before the first is
 * tallied; every lane of a warp goes round as often, for the ballot. */
#define MN_G_DRAW_BATCH 4
static __device__ void mn_d_draw_pass(const uint64_t *w, uint32_t n, uint64_t lo, uint64_t hi, const uint64_t *probe,
                                      uint64_t *heavy, uint64_t *gather, uint32_t *gathered)
{
    uint32_t lane = threadIdx.x % MN_G_WARP;
    for (uint32_t j = 0; j < MN_G_DRAW_PROBES; j++)
        heavy[j] = 0;
    for (uint32_t k0 = threadIdx.x - lane; k0 < n; k0 += MN_G_DRAW_BATCH * MN_G_DRAW_THREADS) {
        uint64_t x[MN_G_DRAW_BATCH];
#pragma unroll
        for (uint32_t u = 0; u < MN_G_DRAW_BATCH; u++) {
            uint32_t k = k0 + u * MN_G_DRAW_THREADS + lane;
            x[u] = k < n ? w[k] : 0; /* weight 0: in no sum, never inside */
        }
#pragma unroll
        for (uint32_t u = 0; u < MN_G_DRAW_BATCH; u++) {
            bool in = mn_g_draw_tally(x[u], lo, hi, probe, heavy);
            uint32_t mask = __ballot_sync(MN_G_FULL, in);
            if (!mask)
                continue;
            uint32_t first = __ffs(mask) - 1, base = 0;
            if (lane == first)
                base = atomicAdd(gathered, __popc(mask));
            uint32_t slot = __shfl_sync(MN_G_FULL, base, first) + __popc(mask & ((1u << lane) - 1));
            if (in && slot < MN_G_DRAW_GATHER)
                gather[slot] = x[u];
        }
    }
}

/* a block of MN_G_DRAW_THREADS per drawn row: pick[d.row] = its draw (pick holds its argmax);
 * w: a scratch row of n_vocab weights per block */
__global__ void __launch_bounds__(MN_G_DRAW_THREADS)
    mn_k_draw(const float *logits, uint32_t n_vocab, const mn_gpu_draw *draws, uint64_t *wbuf, int32_t *pick)
{
    __shared__ uint64_t sm[MN_G_DRAW_THREADS / MN_G_WARP], sm_sums[MN_G_DRAW_THREADS / MN_G_WARP][MN_G_DRAW_PROBES];
    __shared__ uint64_t sm_total[MN_G_DRAW_PROBES], sm_gather[MN_G_DRAW_GATHER];
    __shared__ uint32_t sm_gathered[2]; /* pass p counts into [p % 2], reset at its start: the last
                                         * reads of it were before pass p - 1's barriers */
    uint32_t i = threadIdx.x;
    const mn_gpu_draw d = draws[blockIdx.x];
    const float *row = logits + (size_t)d.row * n_vocab;
    uint64_t *w = wbuf + (size_t)blockIdx.x * n_vocab;
    uint64_t total = mn_d_block_sum(mn_g_draw_weigh(row, n_vocab, i, row[pick[d.row]], d.temperature, w), sm);
    if (!total)
        return; /* the whole block: no token weighs anything, the argmax stays */
    uint64_t need = mn_draw_need(d.top_p, total), lo, hi, s_hi = 0;
    mn_g_draw_range(total, need, n_vocab, &lo, &hi);
    for (uint32_t p = 0; need < total; p++) {
        uint64_t probe[MN_G_DRAW_PROBES], heavy[MN_G_DRAW_PROBES];
        for (uint32_t j = 0; j < MN_G_DRAW_PROBES; j++)
            probe[j] = mn_g_draw_probe(lo, hi, j);
        if (i == 0)
            sm_gathered[p % 2] = 0;
        __syncthreads();
        mn_d_draw_pass(w, n_vocab, lo, hi, probe, heavy, sm_gather, &sm_gathered[p % 2]);
        mn_d_block_sums(heavy, sm_sums, sm_total, heavy); /* its barriers also publish the gathered */
        uint32_t m = sm_gathered[p % 2];
        if (m > MN_G_DRAW_GATHER) {
            mn_g_draw_narrow(need, probe, heavy, &lo, &hi, &s_hi);
            continue;
        }
        uint64_t above = 0, v = i < m ? mn_g_draw_candidate(sm_gather, m, i, need, s_hi, &above) : 0;
        uint64_t best = mn_d_block_max(v, sm);
        if (!best) { /* theta is lo, every gathered token heavier */
            s_hi += mn_d_block_sum(i < m ? sm_gather[i] : 0, sm);
            break;
        }
        if (v == best)
            sm_total[0] = above; /* every thread holding it computed the same */
        __syncthreads();
        lo = best, s_hi = sm_total[0];
        break;
    }
    mn_draw_nucleus nu = mn_g_draw_plan(need, total, lo, s_hi);
    uint32_t b, e;
    mn_g_draw_span(n_vocab, i, &b, &e);
    uint64_t seen = mn_d_block_before(mn_g_draw_tied(w, b, e, nu.theta), sm);
    uint64_t held = mn_g_draw_held(w, b, e, nu, seen), before = mn_d_block_before(held, sm);
    uint64_t r = mn_draw_point(d.u, nu.mass);
    if (before <= r && r - before < held)
        pick[d.row] = mn_draw_walk(w, b, e, nu, seen, r - before);
}

/* a block of MN_G_ATT_WARPS warps per (token, query head); D: the head's dimensions a lane holds;
 * H: the cache holds halves (a constant, so a float cache's loop is the code it was) */
#define MN_G_V_BATCH 8
template <uint32_t D, bool H>
__global__ void mn_k_attention(const __grid_constant__ mn_gpu_attn a, const float *q, float *out, uint32_t T)
{
    __shared__ float sm_m[MN_G_ATT_WARPS], sm_sum[MN_G_ATT_WARPS], sm_acc[MN_G_ATT_WARPS][MN_G_MAX_HEAD_DIM];
    uint32_t lane = threadIdx.x % MN_G_WARP, wp = threadIdx.x / MN_G_WARP, pair = blockIdx.x;
    mn_g_after_previous();
    if (pair >= T * a.n_heads)
        return; /* the whole block leaves */
    uint32_t t = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    const float *qh = mn_g_query(&a, q, t, h);
    float acc[D] = {0}, m = -INFINITY, sum = 0.0f, scale = 1.0f / sqrtf((float)hd);
    uint32_t C = mn_g_att_chunk(&a, t);
    for (uint32_t c = wp * C; c <= a.tok[t].pos; c += MN_G_ATT_WARPS * C) {
        /* the lane's position's row in the cache (K's and V's alike), looked up once */
        uint32_t n = mn_g_chunk_len(&a, t, c, C);
        unsigned long long at = lane < n ? mn_g_head_at(&a, t, h, c + lane) : 0;
        float s = lane < n ? mn_g_score_at(&a, qh, at, scale) : -INFINITY, cmax = s;
        for (uint32_t off = MN_G_WARP / 2; off > 0; off /= 2)
            cmax = fmaxf(cmax, __shfl_xor_sync(MN_G_FULL, cmax, off));
        float old = mn_g_chunk_rescale(cmax, &m), w = expf(s - m);
        sum = sum * old + mn_g_warp_sum(w);
        mn_g_lane_scale<D>(acc, hd, lane, old);
        /* the chunk's value rows MN_G_V_BATCH positions at a time, a batch's loads all issued before
         * its first product (one position after another, each load waited for the last's product);
         * the products still added in position order, as mn_g_lane_acc adds them */
        for (uint32_t l0 = 0; l0 < n; l0 += MN_G_V_BATCH) {
            float vv[MN_G_V_BATCH][D], wv[MN_G_V_BATCH];
#pragma unroll
            for (uint32_t u = 0; u < MN_G_V_BATCH; u++) {
                unsigned long long at_l = __shfl_sync(MN_G_FULL, at, (l0 + u) % MN_G_WARP);
                wv[u] = __shfl_sync(MN_G_FULL, w, (l0 + u) % MN_G_WARP);
                MN_G_EACH_DIM(D)
                vv[u][j] = l0 + u < n && lane + j * MN_G_WARP < hd ? mn_g_kv_at<H>(a.v, at_l + lane + j * MN_G_WARP)
                                                                    : 0.0f;
            }
#pragma unroll
            for (uint32_t u = 0; u < MN_G_V_BATCH; u++) {
                if (l0 + u < n) {
                    MN_G_EACH_DIM(D)
                    if (lane + j * MN_G_WARP < hd)
                        acc[j] += wv[u] * vv[u][j];
                }
            }
        }
    }
    if (lane == 0) {
        sm_m[wp] = m;
        sm_sum[wp] = sum;
    }
    MN_G_EACH_DIM(D)
    if (lane + j * MN_G_WARP < hd)
        sm_acc[wp][lane + j * MN_G_WARP] = acc[j];
    __syncthreads();
    if (wp != 0)
        return;
    for (uint32_t w2 = 1; w2 < MN_G_ATT_WARPS; w2++)
        mn_g_lane_merge<D>(&m, &sum, acc, sm_m[w2], sm_sum[w2], sm_acc[w2], hd, lane);
    mn_g_lane_out<D>(out + (size_t)t * a.n_heads * hd + (size_t)h * hd, acc, hd, lane, sum);
}
#endif

#endif
