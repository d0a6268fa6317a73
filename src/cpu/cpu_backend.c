/* cpu_backend.c - the llama forward pass on the CPU over an unpadded batch and a paged KV cache.
 *
 * Activations are [T][width] row-major for the T new tokens of the whole batch. Every buffer is
 * sized once at creation for cfg->max_tokens, so a pass allocates nothing.
 *
 * Parallel regions per layer: RMSNorm + QKV projections, attention, output projection (+ residual),
 * RMSNorm + gate/up projections (+ SwiGLU), down projection (+ residual). Work is split by output
 * rows or by KV heads, never inside one reduction, so results do not depend on the thread count.
 *
 * Each call of a projection region prepares the rows it reads itself, in rows of its own (`own`):
 * the RMSNorm of every token (and their 16-bit copy for quantized weights), and the projection's
 * output before its residual add. Done once and shared, those rows were written by one thread and
 * read, then overwritten, by the other, and every line of them crossed between the cores twice a
 * layer: in the hours when the host places the two vCPUs apart that cost a pass of 8 tokens of the
 * bundled target 6% (docs/runtime.md, "Two kinds of hours"). A norm costs about a thousand
 * operations a token, against more than a million in a layer's projections.
 */
#include "cpu/cpu_backend.h"

#include <math.h>
#include <string.h>

#include "cpu/matmul.h"
#include "model/dtype.h"
#include "model/quant.h"
#include "runtime/pool.h"
#include "util/alloc.h"

/* A layer's projections as the kernels take them. */
typedef struct cpu_layer {
    mn_weight wq, wk, wv, wo, w_gate, w_up, w_down;
} cpu_layer;

typedef struct cpu_state {
    mn_pool *pool;   /* cfg.pool, or its own */
    bool own_pool;
    /* activations, [cfg.max_tokens][...] */
    float *x;        /* [dim] residual stream */
    float *q;        /* [n_heads*head_dim] */
    float *k;        /* [kv_dim] */
    float *v;        /* [kv_dim] */
    float *att;      /* [n_heads*head_dim] attention output */
    float *gate;     /* [n_ff] (holds SwiGLU output after the gate/up region) */
    float *up;       /* [n_ff] */
    float *rope_cs;  /* [n_ctx][rope_dim] cos, sin interleaved per pair, by position */
    uint32_t rope_filled; /* positions of rope_cs computed so far */
    float *scores;   /* [n_threads][heads per KV head][n_ctx] attention scratch */
    const void **rows; /* [n_threads][2][n_ctx] K and V rows of the positions being attended */
    float *inv_freq; /* [rope_dim/2] */
    /* the model's projections, copied into `copy` (owned, copy_bytes, mn_alloc_pages): the
     * quantized ones repacked for mn_matmul_q8, the others as they are */
    cpu_layer *w;    /* [n_layers] */
    mn_weight output;
    uint8_t *copy;
    size_t copy_bytes;
    /* each call's own rows (call ith's at ith * max_tokens rows): a projection region's input as it
     * reads it (a block's normed rows; their 16-bit copy, or that of the activations it projects,
     * when the weights are quantized), then its output before the residual add */
    float *own;      /* [n_threads][cfg.max_tokens][dim] */
    mn_q8 *own_q8;   /* [n_threads][cfg.max_tokens][q8_ld] */
    size_t q8_ld;    /* groups per row of own_q8: the widest input's */
    uint32_t max_tokens;
    /* per token of the current pass */
    uint32_t *tok_seq; /* sequence index */
    uint32_t *tok_pos; /* absolute position */
    uint32_t *out_rows;/* token indices whose logits are wanted */
} cpu_state;

/* What a parallel region needs to know. */
typedef struct pass {
    const mn_model *m;
    mn_kv_pool *kv;
    cpu_state *st;
    const mn_batch *batch;
    uint32_t T;
    uint32_t layer;
    float *logits;
    uint32_t n_out;
    bool heads_split; /* every call of the attention region takes whole KV heads (region_attention) */
} pass;

static void rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps)
{
    float ss = mn_dot(x, x, (int)n);
    mn_scale_mul(out, x, 1.0f / sqrtf(ss / (float)n + eps), w, (int)n);
}

/* What a projection region's call reads: the float rows, and their 16-bit copy when the weights
 * take integer activations (prepare_input). */
typedef struct input {
    const float *x;
    const mn_q8 *q8;
} input;

/* Call ith's own rows (cpu_state.own). */
static float *own_rows(const pass *p, int ith)
{
    return p->st->own + (size_t)ith * p->st->max_tokens * p->m->hp.dim;
}

/* The T rows of `width` floats at x as call ith reads them for the n weights ws (a group that shares
 * its input: Q, K and V; gate and up): RMSNorm'd with norm_w into its own rows first when norm_w is
 * not NULL, and copied to 16 bits into its own where one of ws takes integer activations (a file
 * may quantize the group's matrices differently). */
static input prepare_input(const pass *p, int ith, const float *x, const float *norm_w, const mn_weight *const *ws,
                           int n, uint32_t T, uint32_t width)
{
    const cpu_state *st = p->st;
    input in = {x, NULL};
    if (norm_w) {
        float *own = own_rows(p, ith);
        for (uint32_t t = 0; t < T; t++)
            rmsnorm(own + (size_t)t * width, x + (size_t)t * width, norm_w, width, p->m->hp.rms_eps);
        in.x = own;
    }
    bool q8_wanted = false;
    for (int i = 0; i < n; i++)
        q8_wanted |= mn_weight_uses_q8(ws[i]);
    if (q8_wanted) {
        mn_q8 *q8 = st->own_q8 + (size_t)ith * st->max_tokens * st->q8_ld;
        for (uint32_t t = 0; t < T; t++)
            mn_quantize_q8(in.x + (size_t)t * width, width, q8 + (size_t)t * st->q8_ld);
        in.q8 = q8;
    }
    return in;
}

/* y = x W^T for outputs [b, e), from the float input or its 16-bit copy, whichever w takes. */
static void project(const cpu_state *st, const mn_weight *w, input in, float *y, uint32_t T, unsigned b, unsigned e)
{
    if (b >= e)
        return;
    if (mn_weight_uses_q8(w))
        mn_matmul_q8(w, in.q8, st->q8_ld, y, w->rows, (int)T, b, e);
    else
        mn_matmul(w, in.x, w->cols, y, w->rows, (int)T, b, e);
}

/* ---- region: the attention block's RMSNorm and Q, K, V projections ------------------------------
 * The three matrices form one virtual row space [wq rows | wk rows | wv rows] split among threads. */
static void region_qkv(void *arg, int ith, int nth)
{
    pass *p = arg;
    const cpu_layer *L = &p->st->w[p->layer];
    const mn_weight *w[3] = {&L->wq, &L->wk, &L->wv};
    float *dst[3] = {p->st->q, p->st->k, p->st->v};
    uint32_t total = L->wq.rows + L->wk.rows + L->wv.rows;
    unsigned b, e;
    mn_pool_split(ith, nth, total, 4, &b, &e);
    if (b >= e)
        return;
    input in = prepare_input(p, ith, p->st->x, p->m->layers[p->layer].attn_norm, w, 3, p->T, p->m->hp.dim);
    uint32_t base = 0;
    for (int i = 0; i < 3; i++) {
        uint32_t lo = b > base ? b - base : 0, hi = e - base < w[i]->rows ? e - base : w[i]->rows;
        if (e > base && lo < hi)
            project(p->st, w[i], in, dst[i], p->T, lo, hi);
        base += w[i]->rows;
    }
}

/* ---- RoPE (adjacent pairs) and the KV write: in the attention region, or before it -------------- */
static void rope_rows(float *v, uint32_t n_heads, const mn_hparams *hp, const float *cs)
{
    for (uint32_t h = 0; h < n_heads; h++)
        mn_rope(v + (size_t)h * hp->head_dim, cs, (int)(hp->rope_dim / 2));
}

/* cos and sin of every pair's angle at the positions [rope_filled, n): each computed once, when a
 * pass first reaches it (a pass of 8 tokens computed 256 of them, 2-3 us of its 280 here). */
static void fill_rope(cpu_state *st, const mn_hparams *hp, uint32_t n)
{
    for (; st->rope_filled < n; st->rope_filled++) {
        float *cs = st->rope_cs + (size_t)st->rope_filled * hp->rope_dim;
        for (uint32_t j = 0; j < hp->rope_dim / 2; j++) {
            double angle = (double)st->rope_filled * st->inv_freq[j];
            cs[2 * j] = (float)cos(angle);
            cs[2 * j + 1] = (float)sin(angle);
        }
    }
}

/* RoPE of KV heads [g0, g1) and of their groups' query heads, and those heads' K and V elements into
 * the cache, for every token of the pass. */
static void rope_and_store(pass *p, uint32_t g0, uint32_t g1)
{
    const mn_hparams *hp = &p->m->hp;
    cpu_state *st = p->st;
    uint32_t hd = hp->head_dim, group = hp->n_heads / hp->n_kv_heads;
    uint32_t qdim = hp->n_heads * hd, kvdim = hp->n_kv_heads * hd, lo = g0 * hd, n = (g1 - g0) * hd;
    for (uint32_t t = 0; t < p->T; t++) {
        const float *cs = st->rope_cs + (size_t)st->tok_pos[t] * hp->rope_dim;
        float *k = st->k + (size_t)t * kvdim, *v = st->v + (size_t)t * kvdim;
        rope_rows(st->q + (size_t)t * qdim + (size_t)g0 * group * hd, (g1 - g0) * group, hp, cs);
        rope_rows(k + lo, g1 - g0, hp, cs);
        const mn_kv_seq *kv = p->batch->seqs[st->tok_seq[t]].kv;
        void *kc = mn_kv_k(p->kv, kv, p->layer, st->tok_pos[t]), *vc = mn_kv_v(p->kv, kv, p->layer, st->tok_pos[t]);
        if (p->kv->type == MN_KV_F16) {
            mn_to_f16(k + lo, (uint16_t *)kc + lo, (int)n);
            mn_to_f16(v + lo, (uint16_t *)vc + lo, (int)n);
        } else {
            memcpy((float *)kc + lo, k + lo, n * sizeof(float));
            memcpy((float *)vc + lo, v + lo, n * sizeof(float));
        }
    }
}

/* ---- region: causal attention, one (token, KV head) pair at a time -----------------------------
 * A pair covers the query heads that share the KV head (grouped-query attention), so its K and V
 * rows are located once and each K and V row is loaded once for the group (mn_dots and
 * mn_weighted_sum take the group's heads together). A call's pairs are split by KV head, or
 * round-robin (region_attention): both give each call every position of its tokens, which later
 * tokens have more of, and a call's next pair is mostly the same sequence's and head's, whose rows
 * it has located already up to the last pair's position. Each score and each output element is
 * reduced in one fixed order whatever the grouping (mn_dots equals mn_dot bit for bit), so results
 * stay batch-invariant. */

/* rows[i] = the head-g slice of K (or V), from element head_off, at positions from..n-1 of a
 * sequence, block by block (the kernels read the cache's elements, floats or half floats, in place). */
static void gather_rows(const void **rows, const void *base, const mn_kv_pool *kv, const mn_kv_seq *seq,
                        uint32_t from, uint32_t n, size_t head_off)
{
    uint32_t bs = kv->block_size;
    size_t elem = mn_kv_elem_bytes(kv->type);
    for (uint32_t b = from / bs, i = from; i < n; b++) {
        const char *blk = (const char *)base + (size_t)seq->blocks[b] * kv->block_stride + head_off * elem;
        for (uint32_t slot = i % bs; slot < bs && i < n; slot++, i++)
            rows[i] = blk + (size_t)slot * kv->row_bytes;
    }
}

/* The rows of K and V located last (per call): for which sequence and KV head, positions 0..n-1.
 * Pairs go KV head by KV head, so the next pair of the same sequence locates only the positions
 * this one adds. */
typedef struct located {
    const mn_kv_seq *seq;
    uint32_t g, n;
} located;

/* Token t's attention over KV head g: its group's query heads into st->att, the scores scaled by
 * `scale` (1 / sqrt(head_dim), worked out once per call of the region). */
static void attend(pass *p, int ith, float scale, uint32_t t, uint32_t g, located *at)
{
    const mn_hparams *hp = &p->m->hp;
    cpu_state *st = p->st;
    uint32_t hd = hp->head_dim, qdim = hp->n_heads * hd, group = hp->n_heads / hp->n_kv_heads;
    float *sc = st->scores + (size_t)ith * group * hp->n_ctx; /* [group][n_ctx] */
    const void **krows = st->rows + (size_t)ith * 2 * hp->n_ctx, **vrows = krows + hp->n_ctx;
    const uint32_t type = p->kv->type == MN_KV_F16 ? MN_F16 : MN_F32; /* the kernels' row types */
    float sum[group];
    uint32_t n = st->tok_pos[t] + 1;
    const mn_kv_seq *seq = p->batch->seqs[st->tok_seq[t]].kv;
    const float *q = st->q + (size_t)t * qdim + (size_t)g * group * hd;
    if (seq != at->seq || g != at->g)
        *at = (located){seq, g, 0};
    if (n > at->n) {
        gather_rows(krows, p->kv->k[p->layer], p->kv, seq, at->n, n, (size_t)g * hd);
        gather_rows(vrows, p->kv->v[p->layer], p->kv, seq, at->n, n, (size_t)g * hd);
        at->n = n;
    }
    mn_dots(q, hd, (int)group, krows, type, (int)n, (int)hd, sc, hp->n_ctx);
    for (uint32_t h = 0; h < group; h++)
        sum[h] = mn_softmax(sc + (size_t)h * hp->n_ctx, (int)n, scale);
    float *out = st->att + (size_t)t * qdim + (size_t)g * group * hd;
    mn_weighted_sum(out, hd, sc, hp->n_ctx, (int)group, vrows, type, (int)n, (int)hd);
    for (uint32_t h = 0; h < group; h++)
        mn_scale(out + (size_t)h * hd, 1.0f / sum[h], (int)hd);
}

/* Where the KV heads divide among the calls (p->heads_split), each call takes whole heads: their
 * RoPE and cache writes, then every token's attention over them, with no join between (a head's
 * keys are only its own call's). Until 2026-11-30 RoPE and the writes ran on the calling thread
 * between the QKV and attention regions while the pool's other thread waited: 1,532 cycles a layer
 * in a pass of 8 tokens of the bundled target, 1.3% of it. Otherwise (SmolLM2's three KV heads on
 * two threads) the caller does them first, and pairs go round-robin, KV head by KV head, each
 * head's tokens rotated by the head: with two threads each takes every other token of a head, and
 * the other half of the next head's, so that both attend over every sequence, whatever its
 * context. */
static void region_attention(void *arg, int ith, int nth)
{
    pass *p = arg;
    const mn_hparams *hp = &p->m->hp;
    located at = {NULL, 0, 0};
    const float scale = 1.0f / sqrtf((float)hp->head_dim);
    if (p->heads_split) {
        unsigned g0, g1;
        mn_pool_split(ith, nth, hp->n_kv_heads, 1, &g0, &g1);
        if (g0 < g1)
            rope_and_store(p, g0, g1);
        for (uint32_t g = g0; g < g1; g++)
            for (uint32_t t = 0; t < p->T; t++)
                attend(p, ith, scale, t, g, &at);
        return;
    }
    for (uint32_t pair = (uint32_t)ith; pair < p->T * hp->n_kv_heads; pair += (uint32_t)nth) {
        uint32_t g = pair / p->T;
        attend(p, ith, scale, (pair % p->T + g) % p->T, g, &at);
    }
}

/* x += a W^T for the rows [b, e) of W, call ith's share of a block's output projection and its
 * residual add: the product goes to the call's own rows first (written and read back by one core),
 * and then onto x. */
static void project_residual(const pass *p, int ith, const mn_weight *w, const float *a, float *x, unsigned b,
                             unsigned e)
{
    if (b >= e)
        return;
    float *tmp = own_rows(p, ith);
    project(p->st, w, prepare_input(p, ith, a, NULL, &w, 1, p->T, w->cols), tmp, p->T, b, e);
    for (uint32_t t = 0; t < p->T; t++)
        mn_axpy(x + (size_t)t * w->rows + b, 1.0f, tmp + (size_t)t * w->rows + b, (int)(e - b));
}

static void region_wo(void *arg, int ith, int nth)
{
    pass *p = arg;
    const cpu_layer *L = &p->st->w[p->layer];
    unsigned b, e;
    mn_pool_split(ith, nth, L->wo.rows, 4, &b, &e);
    project_residual(p, ith, &L->wo, p->st->att, p->st->x, b, e);
}

static void region_gate_up(void *arg, int ith, int nth)
{
    pass *p = arg;
    const cpu_layer *L = &p->st->w[p->layer];
    uint32_t ff = L->w_gate.rows;
    unsigned b, e;
    mn_pool_split(ith, nth, ff, 4, &b, &e);
    if (b >= e)
        return;
    const mn_weight *w[2] = {&L->w_gate, &L->w_up};
    input in = prepare_input(p, ith, p->st->x, p->m->layers[p->layer].ffn_norm, w, 2, p->T, p->m->hp.dim);
    project(p->st, &L->w_gate, in, p->st->gate, p->T, b, e);
    project(p->st, &L->w_up, in, p->st->up, p->T, b, e);
    for (uint32_t t = 0; t < p->T; t++)
        mn_swiglu(p->st->gate + (size_t)t * ff + b, p->st->up + (size_t)t * ff + b, (int)(e - b));
}

static void region_down(void *arg, int ith, int nth)
{
    pass *p = arg;
    const cpu_layer *L = &p->st->w[p->layer];
    unsigned b, e;
    mn_pool_split(ith, nth, L->w_down.rows, 4, &b, &e);
    project_residual(p, ith, &L->w_down, p->st->gate, p->st->x, b, e);
}

/* The output norm of the rows whose logits are wanted (gathered into st->x's first n_out rows by
 * the caller), and the output projection. */
static void region_logits(void *arg, int ith, int nth)
{
    pass *p = arg;
    const mn_weight *w = &p->st->output;
    unsigned b, e;
    mn_pool_split(ith, nth, w->rows, 8, &b, &e);
    if (b >= e)
        return;
    input in = prepare_input(p, ith, p->st->x, p->m->output_norm, &w, 1, p->n_out, p->m->hp.dim);
    project(p->st, w, in, p->logits, p->n_out, b, e);
}

static mn_status cpu_forward(mn_backend *be, const mn_batch *batch, float *logits, mn_err *err)
{
    cpu_state *st = be->impl;
    const mn_model *m = be->model;
    const mn_hparams *hp = &m->hp;
    pass p = {.m = m, .kv = be->kv, .st = st, .batch = batch, .logits = logits,
              .heads_split = hp->n_kv_heads % (uint32_t)mn_pool_size(st->pool) == 0};

    /* Lay the batch out token by token. */
    uint32_t T = 0, n_out = 0;
    for (uint32_t s = 0; s < batch->n_seqs; s++) {
        const mn_batch_seq *bs = &batch->seqs[s];
        for (uint32_t i = 0; i < bs->n_tokens; i++, T++) {
            st->tok_seq[T] = s;
            st->tok_pos[T] = bs->kv->len + i;
            if (bs->want_all_logits || i + 1 == bs->n_tokens)
                st->out_rows[n_out++] = T;
            mn_dequant_row(m->token_embd.type, m->token_embd.data + (size_t)bs->tokens[i] * m->token_embd.row_bytes,
                           st->x + (size_t)T * hp->dim, hp->dim);
        }
        fill_rope(st, hp, bs->kv->len + bs->n_tokens);
    }
    p.T = T;
    p.n_out = n_out;

    for (uint32_t l = 0; l < hp->n_layers; l++) {
        p.layer = l;
        mn_pool_run(st->pool, region_qkv, &p);
        if (!p.heads_split)
            rope_and_store(&p, 0, hp->n_kv_heads);
        mn_pool_run(st->pool, region_attention, &p);
        mn_pool_run(st->pool, region_wo, &p);
        mn_pool_run(st->pool, region_gate_up, &p);
        mn_pool_run(st->pool, region_down, &p);
    }
    for (uint32_t i = 0; i < n_out; i++) /* out_rows ascend: a row moves up or stays */
        if (st->out_rows[i] != i)
            memcpy(st->x + (size_t)i * hp->dim, st->x + (size_t)st->out_rows[i] * hp->dim, hp->dim * sizeof(float));
    mn_pool_run(st->pool, region_logits, &p);
    (void)err; /* a validated batch cannot fail on the CPU */
    return MN_OK;
}

static void cpu_free(mn_backend *be)
{
    cpu_state *st = be->impl;
    if (st) {
        if (st->own_pool)
            mn_pool_free(st->pool);
        float *bufs[] = {st->x, st->own, st->q, st->k, st->v, st->att, st->gate, st->up, st->rope_cs,
                         st->scores, st->inv_freq};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            mn_free(bufs[i]);
        mn_free(st->own_q8);
        mn_free(st->w);
        mn_free_pages(st->copy, st->copy_bytes);
        mn_free(st->rows);
        mn_free(st->tok_seq);
        mn_free(st->tok_pos);
        mn_free(st->out_rows);
        mn_free(st);
    }
    mn_kv_pool_free(be->kv);
    mn_free(be);
}

static void cpu_run(mn_backend *be, mn_pool_fn fn, void *ctx) { mn_pool_run(((cpu_state *)be->impl)->pool, fn, ctx); }

static const mn_backend_ops cpu_ops = {
    .name = "cpu",
    .forward = cpu_forward,
    .free = cpu_free,
    .run = cpu_run,
};

/* A weight's bytes in the copy, each starting on a cache line. */
static size_t weight_bytes(const mn_weight *w) { return ((size_t)w->rows * w->row_bytes + 63) / 64 * 64; }

/* dst = src as the kernels take it, at *at (which advances): a quantized one repacked, the others
 * copied as they are. src's pages of the file then leave the resident set (gguf_drop_pages):
 * without that, a float model was resident twice, mapping and copy (peak RSS of minions-generate
 * on SmolLM2 F32: 1,339 MB; with the drop 925, and 691 when the passes read the mapping). */
static void take_weight(const mn_weight *src, mn_weight *dst, uint8_t **at, const gguf_file *file)
{
    size_t n = (size_t)src->rows * src->row_bytes;
    *dst = *src;
    if (mn_weight_uses_q8(src))
        mn_q8_pack(src, *at, dst);
    else {
        memcpy(*at, src->data, n);
        dst->data = *at;
    }
    *at += weight_bytes(src);
    gguf_drop_pages(file, src->data, n);
}

/* The model's projections into st->w and st->output, copied once at start-up into huge pages
 * (mn_alloc_pages), quantized ones repacked. Every pass streams them all, and the model's own
 * bytes (the GGUF file, mapped) lie in 4 KiB pages: a pass over the bundled target's 19.5 MB then
 * misses the second-level TLB on nearly every page (4,760 pages; a Zen 3 core has 2,048 entries),
 * over the copy on 10. Verification passes of the bundled target ran 1.06-1.11x faster on the copy,
 * its decode about 1.05x (docs/runtime.md). The copied weights' pages of the mapping leave the
 * resident set (take_weight); the token embedding, of which a pass reads a row per token, is read
 * from the mapping. */
static mn_status take_weights(cpu_state *st, const mn_model *m, mn_err *err)
{
    const mn_hparams *hp = &m->hp;
    size_t bytes = weight_bytes(&m->output);
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const mn_layer *L = &m->layers[l];
        const mn_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            bytes += weight_bytes(ws[i]);
    }
    st->w = mn_calloc(hp->n_layers, sizeof *st->w);
    st->copy = mn_alloc_pages(bytes);
    if (!st->w || !st->copy)
        return mn_fail(err, MN_NOMEM, "cpu: cannot allocate %zu bytes for the weights", bytes);
    st->copy_bytes = bytes;
    uint8_t *at = st->copy;
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const mn_layer *L = &m->layers[l];
        cpu_layer *W = &st->w[l];
        take_weight(&L->wq, &W->wq, &at, m->gguf);
        take_weight(&L->wk, &W->wk, &at, m->gguf);
        take_weight(&L->wv, &W->wv, &at, m->gguf);
        take_weight(&L->wo, &W->wo, &at, m->gguf);
        take_weight(&L->w_gate, &W->w_gate, &at, m->gguf);
        take_weight(&L->w_up, &W->w_up, &at, m->gguf);
        take_weight(&L->w_down, &W->w_down, &at, m->gguf);
    }
    /* a tied output is the token embedding too: a pass's rows of it fault back in as it reads them */
    take_weight(&m->output, &st->output, &at, m->gguf);
    return MN_OK;
}

static float *fbuf(size_t rows, size_t cols, int *ok)
{
    size_t n;
    float *p = mn_mul_ok(rows, cols * sizeof(float), &n) ? mn_aligned_calloc(64, n) : NULL;
    if (!p)
        *ok = 0;
    return p;
}

mn_status mn_cpu_backend_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out, mn_err *err)
{
    const mn_hparams *hp = &m->hp;
    if (cfg->max_tokens == 0 || cfg->max_tokens > 65536)
        return mn_fail(err, MN_INVALID, "cpu: max_tokens %u is out of range 1..65536", cfg->max_tokens);
    mn_backend *be = mn_calloc(1, sizeof *be);
    cpu_state *st = mn_calloc(1, sizeof *st);
    if (!be || !st) {
        mn_free(be);
        mn_free(st);
        return mn_fail(err, MN_NOMEM, "cpu: out of memory");
    }
    be->ops = &cpu_ops;
    be->model = m;
    be->cfg = *cfg;
    be->impl = st;
    mn_status s;
    uint32_t T = cfg->max_tokens, qdim = hp->n_heads * hp->head_dim, kvdim = hp->n_kv_heads * hp->head_dim;
    if ((s = mn_kv_pool_new(hp->n_layers, kvdim, cfg->kv_block_size, cfg->kv_blocks, cfg->kv_type, &be->kv, err)) ||
        (!cfg->pool && (s = mn_pool_new(cfg->n_threads, &st->pool, err))))
        goto fail;
    st->own_pool = !cfg->pool;
    if (cfg->pool) {
        st->pool = cfg->pool;
        be->cfg.n_threads = mn_pool_size(cfg->pool);
        cfg = &be->cfg; /* the scratch below is sized for the shared pool's threads */
    }
    int ok = 1;
    st->x = fbuf(T, hp->dim, &ok);
    st->own = fbuf((size_t)cfg->n_threads * T, hp->dim, &ok);
    st->max_tokens = T;
    st->q = fbuf(T, qdim, &ok);
    st->k = fbuf(T, kvdim, &ok);
    st->v = fbuf(T, kvdim, &ok);
    st->att = fbuf(T, qdim, &ok);
    st->gate = fbuf(T, hp->n_ff, &ok);
    st->up = fbuf(T, hp->n_ff, &ok);
    st->rope_cs = fbuf(hp->n_ctx, hp->rope_dim, &ok);
    st->scores = fbuf((size_t)cfg->n_threads * (hp->n_heads / hp->n_kv_heads), hp->n_ctx, &ok);
    st->inv_freq = fbuf(1, hp->rope_dim / 2, &ok);
    st->rows = mn_calloc((size_t)cfg->n_threads * 2 * hp->n_ctx, sizeof *st->rows);
    st->tok_seq = mn_calloc(T, sizeof(uint32_t));
    st->tok_pos = mn_calloc(T, sizeof(uint32_t));
    st->out_rows = mn_calloc(T, sizeof(uint32_t));
    uint32_t widest = hp->dim > hp->n_ff ? hp->dim : hp->n_ff;
    widest = widest > qdim ? widest : qdim;
    st->q8_ld = mn_q8_groups(widest);
    st->own_q8 = mn_aligned_calloc(64, (size_t)cfg->n_threads * T * st->q8_ld * sizeof(mn_q8));
    if (!ok || !st->own_q8 || !st->rows || !st->tok_seq || !st->tok_pos || !st->out_rows) {
        s = mn_fail(err, MN_NOMEM, "cpu: cannot allocate activations for %u tokens", T);
        goto fail;
    }
    if ((s = take_weights(st, m, err)))
        goto fail;
    for (uint32_t j = 0; j < hp->rope_dim / 2; j++)
        st->inv_freq[j] = (float)pow((double)hp->rope_base, -2.0 * j / (double)hp->rope_dim);
    (void)mn_cpu_kernels_name(); /* the kernel set is picked now, not in the first pass: its probe takes ms */
    *out = be;
    return MN_OK;
fail:
    cpu_free(be);
    return s;
}
