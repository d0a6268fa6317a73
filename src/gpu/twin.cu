/* twin.cu - the CUDA pass (gpu/pass.h) with an executor that walks every kernel's grid in host
 * loops over host buffers (see twin.h). The weights stay where the model maps them; the KV cache
 * is the backend's host pool, read through the same flattened block tables the device reads. */
#include "gpu/twin.h"

#include <string.h>

#include "gpu/pass.h"

extern "C" {
#include "util/alloc.h"
}

typedef struct twin {
    mn_gpu_bufs bufs;      /* [max_tokens][width] as on the device */
    mn_gpu_host_layout h;  /* the pass's layout, read by the kernels where it is */
    mn_gpu_model model;    /* the weights where they are mapped */
    mn_gpu_layer *layers;
} twin;

static void twin_free(mn_backend *be)
{
    twin *tw = (twin *)be->impl;
    if (tw) {
        const mn_gpu_bufs *b = &tw->bufs;
        float *bufs[] = {b->x, b->xb, b->q, b->att, b->ffn};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            mn_free(bufs[i]);
        mn_gpu_layout_free(&tw->h);
        mn_free(tw->layers);
        mn_free(tw);
    }
    mn_kv_pool_free(be->kv);
    mn_free(be);
}

/* The executor: every kernel's grid walked in host loops. */
static void x_embed(void *, const mn_gpu_weight *w, const int32_t *tokens, float *x, uint32_t dim, uint32_t T)
{
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t i = 0; i < dim; i++)
            mn_g_embed(w->type, w->data, w->row_bytes, tokens, x, dim, t, i);
}

static void x_rmsnorm(void *, const float *x, const uint32_t *rows, const float *w, float *out, uint32_t n, float eps,
                      uint32_t T)
{
    for (uint32_t t = 0; t < T; t++) { /* a block per token: its warps in turn, each warp's lanes in turn */
        const float *r = mn_g_rms_src(x, rows, n, t);
        float ss = 0.0f;
        for (uint32_t wp = 0; wp < MN_G_NORM_WARPS; wp++) {
            float p[MN_G_WARP];
            for (uint32_t lane = 0; lane < MN_G_WARP; lane++)
                p[lane] = mn_g_rms_part(r, n, wp * MN_G_WARP + lane);
            ss += mn_g_butterfly(p);
        }
        for (uint32_t i = 0; i < MN_G_NORM_THREADS; i++)
            mn_g_rms_write(r, w, out + (size_t)t * n, n, eps, ss, i);
    }
}

/* One output row's sum for token t, its lanes in turn. */
static float row_sum(const mn_gpu_weight *w, uint32_t o, const float *x, uint32_t t)
{
    float p[MN_G_WARP];
    for (uint32_t lane = 0; lane < MN_G_WARP; lane++)
        p[lane] = mn_g_matvec_lane(w->type, w->data + (size_t)o * w->row_bytes, x + (size_t)t * w->cols, w->cols,
                                   lane);
    return mn_g_butterfly(p);
}

/* Token by token: the device's groups of MN_G_TB tokens give each token the sums it has alone. */
static void x_proj(void *, const float *x, const mn_gpu_outs *outs, const mn_gpu_attn *a, uint32_t T)
{
    for (uint32_t t = 0; t < T; t++) {
        if (outs->mode == MN_G_OUT_QKV) { /* a warp per pair of rows */
            for (uint32_t i = 0; i < outs->n; i++)
                for (uint32_t o = 0; o < outs->w[i].rows; o += 2)
                    mn_g_qkv_store(a, outs->y[0], i, o, t, row_sum(&outs->w[i], o, x, t),
                                   row_sum(&outs->w[i], o + 1, x, t));
            continue;
        }
        if (outs->mode == MN_G_OUT_SWIGLU) {
            for (uint32_t o = 0; o < outs->w[0].rows; o++)
                mn_g_store(outs->y[0], outs->w[0].rows, 0, t, o,
                           mn_g_silu_mul(row_sum(&outs->w[0], o, x, t), row_sum(&outs->w[1], o, x, t)));
            continue;
        }
        for (uint32_t i = 0; i < outs->n; i++)
            for (uint32_t o = 0; o < outs->w[i].rows; o++)
                mn_g_store(outs->y[i], outs->w[i].rows, outs->mode == MN_G_OUT_ACCUMULATE, t, o,
                           row_sum(&outs->w[i], o, x, t));
    }
}

/* A block per (token, head): its warps in turn, each warp's lanes in turn, then warp 0's merge. */
static void x_attention(void *, const mn_gpu_attn *a, const float *q, float *out, uint32_t T)
{
    enum { NW = MN_G_ATT_WARPS };
    uint32_t hd = a->head_dim;
    float scale = 1.0f / sqrtf((float)hd);
    for (uint32_t i = 0; i < T * a->n_heads; i++) {
        uint32_t t = i / a->n_heads, h = i % a->n_heads;
        const float *qh = mn_g_query(a, q, t, h);
        float acc[NW][MN_G_WARP][MN_G_LANE_DIMS], m[NW], sum[NW];
        for (uint32_t wp = 0; wp < NW; wp++) {
            memset(acc[wp], 0, sizeof acc[wp]);
            m[wp] = -INFINITY;
            sum[wp] = 0.0f;
            uint32_t C = mn_g_att_chunk(a, t);
            for (uint32_t c = wp * C; c <= a->tok[t].pos; c += NW * C) {
                float s[MN_G_WARP], w[MN_G_WARP], cmax = -INFINITY;
                for (uint32_t lane = 0; lane < MN_G_WARP; lane++) {
                    s[lane] = mn_g_lane_score(a, qh, t, h, c, C, lane, scale);
                    cmax = fmaxf(cmax, s[lane]); /* a maximum has one value in any order */
                }
                float old = mn_g_chunk_rescale(cmax, &m[wp]);
                for (uint32_t lane = 0; lane < MN_G_WARP; lane++)
                    w[lane] = expf(s[lane] - m[wp]);
                float part[MN_G_WARP];
                memcpy(part, w, sizeof part);
                sum[wp] = sum[wp] * old + mn_g_butterfly(part);
                for (uint32_t lane = 0; lane < MN_G_WARP; lane++) {
                    mn_g_lane_scale(acc[wp][lane], hd, lane, old);
                    for (uint32_t l = 0, n = mn_g_chunk_len(a, t, c, C); l < n; l++)
                        mn_g_lane_acc(acc[wp][lane], a, mn_g_head_at(a, t, h, c + l), hd, lane, w[l]);
                }
            }
        }
        float lm[MN_G_WARP], ls[MN_G_WARP]; /* warp 0's lanes' copies of the maximum and the sum */
        for (uint32_t lane = 0; lane < MN_G_WARP; lane++)
            lm[lane] = m[0], ls[lane] = sum[0];
        for (uint32_t wp = 1; wp < NW; wp++) {
            float row[MN_G_MAX_HEAD_DIM]; /* warp wp's output row, as the device shares it */
            for (uint32_t lane = 0; lane < MN_G_WARP; lane++)
                for (uint32_t j = 0, d = lane; d < hd; j++, d += MN_G_WARP)
                    row[d] = acc[wp][lane][j];
            for (uint32_t lane = 0; lane < MN_G_WARP; lane++)
                mn_g_lane_merge(&lm[lane], &ls[lane], acc[0][lane], m[wp], sum[wp], row, hd, lane);
        }
        float *o = out + (size_t)t * a->n_heads * hd + (size_t)h * hd;
        for (uint32_t lane = 0; lane < MN_G_WARP; lane++)
            mn_g_lane_out(o, acc[0][lane], hd, lane, ls[lane]);
    }
}

static const mn_gpu_exec host_exec = {x_embed, x_rmsnorm, x_proj, x_attention};

/* mn_k_argmax's block on one row: every thread's scan, their candidates met in thread order (the
 * device's warps meet them in another, which a total order makes the same answer). */
extern "C" int32_t mn_gpu_twin_argmax(const float *row, uint32_t n)
{
    float m;
    uint32_t at;
    mn_g_argmax_scan(row, n, 0, &m, &at);
    for (uint32_t i = 1; i < MN_G_ARGMAX_THREADS; i++) {
        float m2;
        uint32_t at2;
        mn_g_argmax_scan(row, n, i, &m2, &at2);
        mn_g_argmax_meet(&m, &at, m2, at2);
    }
    return mn_g_argmax_answer(row, at);
}

/* mn_k_draw's search on one row: its threads one after another at each of the kernel's steps (the
 * device adds their sums in another order: integers, the same totals). */
extern "C" mn_draw_nucleus mn_gpu_twin_nucleus(const float *row, uint32_t n, int32_t argmax, float temperature,
                                               float top_p, uint64_t *w, uint32_t *passes)
{
    uint64_t total = 0;
    *passes = 0;
    for (uint32_t i = 0; i < MN_G_DRAW_THREADS; i++)
        total += mn_g_draw_weigh(row, n, i, row[argmax], temperature, w);
    if (!total)
        return mn_draw_nucleus{0, 0, 0};
    uint64_t need = mn_draw_need(top_p, total), lo, hi, s_hi = 0;
    mn_g_draw_range(total, need, n, &lo, &hi);
    while (need < total) {
        uint64_t probe[MN_G_DRAW_PROBES], heavy[MN_G_DRAW_PROBES] = {0}, gather[MN_G_DRAW_GATHER];
        uint32_t m = 0;
        for (uint32_t j = 0; j < MN_G_DRAW_PROBES; j++)
            probe[j] = mn_g_draw_probe(lo, hi, j);
        for (uint32_t i = 0; i < MN_G_DRAW_THREADS; i++)
            for (uint32_t k = i; k < n; k += MN_G_DRAW_THREADS)
                if (mn_g_draw_tally(w[k], lo, hi, probe, heavy) && m++ < MN_G_DRAW_GATHER)
                    gather[m - 1] = w[k];
        ++*passes;
        if (m > MN_G_DRAW_GATHER) {
            mn_g_draw_narrow(need, probe, heavy, &lo, &hi, &s_hi);
            continue;
        }
        uint64_t best = 0, best_above = 0, all = 0;
        for (uint32_t t = 0; t < m; t++) {
            uint64_t above, v = mn_g_draw_candidate(gather, m, t, need, s_hi, &above);
            if (v > best)
                best = v, best_above = above;
            all += gather[t];
        }
        s_hi = best ? best_above : s_hi + all; /* none: theta is lo, every gathered token heavier */
        lo = best ? best : lo;
        break;
    }
    return mn_g_draw_plan(need, total, lo, s_hi);
}

/* mn_k_draw's block on one row: the search, then its threads' spans one after another. */
extern "C" int32_t mn_gpu_twin_draw(const float *row, uint32_t n, int32_t argmax, float temperature, float top_p,
                                    double u, uint64_t *w)
{
    uint32_t passes;
    mn_draw_nucleus nu = mn_gpu_twin_nucleus(row, n, argmax, temperature, top_p, w, &passes);
    if (!nu.mass)
        return argmax;
    uint64_t r = mn_draw_point(u, nu.mass), seen = 0, before = 0;
    for (uint32_t i = 0; i < MN_G_DRAW_THREADS; i++) {
        uint32_t b, e;
        mn_g_draw_span(n, i, &b, &e);
        uint64_t held = mn_g_draw_held(w, b, e, nu, seen);
        if (before <= r && r - before < held)
            return mn_draw_walk(w, b, e, nu, seen, r - before);
        seen += mn_g_draw_tied(w, b, e, nu.theta);
        before += held;
    }
    return -1; /* r < mass: not reached */
}

static mn_status twin_forward(mn_backend *be, const mn_batch *batch, float *logits, mn_err *err)
{
    twin *tw = (twin *)be->impl;
    const mn_hparams *hp = &be->model->hp;
    mn_gpu_host_layout *l = &tw->h;
    mn_status s = mn_gpu_layout_reserve(l, batch, err);
    if (s != MN_OK)
        return s;
    mn_gpu_layout(batch, l);
    /* the host pool's layout (mem/kv.h): a layer's blocks lie every layer's K and V apart */
    mn_gpu_attn a = {l->tok, l->tables, l->table_off, NULL, NULL, be->kv->block_stride / mn_kv_elem_bytes(be->kv->type),
                     be->kv->block_size, be->kv->kv_dim,
                     hp->head_dim, hp->n_heads, hp->n_kv_heads, hp->rope_dim, hp->rope_base,
                     be->kv->type == MN_KV_F16};
    uint64_t *w = NULL; /* the draws' scratch row, before the pass so that a failure computes nothing */
    for (uint32_t i = 0; batch->pick && !w && i < batch->n_seqs; i++)
        if (batch->seqs[i].draw && !(w = (uint64_t *)mn_malloc((size_t)hp->n_vocab * sizeof *w)))
            return mn_fail(err, MN_NOMEM, "cuda twin: out of memory");
    mn_gpu_pass(&host_exec, NULL, &tw->model, &tw->bufs, a, l->tokens, l->T, l->out_rows, l->n_out, logits);
    for (uint32_t i = 0, r = 0; batch->pick && i < batch->n_seqs; i++) {
        const mn_batch_seq *sq = &batch->seqs[i];
        for (uint32_t j = 0; j < mn_batch_seq_rows(sq); j++, r++) {
            const float *row = logits + (size_t)r * hp->n_vocab;
            batch->pick[r] = mn_gpu_twin_argmax(row, hp->n_vocab);
            if (sq->draw)
                batch->pick[r] = mn_gpu_twin_draw(row, hp->n_vocab, batch->pick[r], sq->draw->temperature,
                                                  sq->draw->top_p, sq->draw->u[j], w);
        }
    }
    mn_free(w);
    return MN_OK;
}

static const mn_backend_ops twin_ops = {"cuda-twin", twin_forward, twin_free, true, NULL};

static float *fbuf(size_t rows, size_t cols, int *ok)
{
    float *p = (float *)mn_calloc(rows * cols, sizeof(float));
    if (!p)
        *ok = 0;
    return p;
}

extern "C" mn_status mn_gpu_twin_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out, mn_err *err)
{
    const mn_hparams *hp = &m->hp;
    mn_status s = mn_gpu_check_config(m, cfg, "cuda twin", err);
    if (s != MN_OK)
        return s;
    mn_backend *be = (mn_backend *)mn_calloc(1, sizeof *be);
    twin *tw = (twin *)mn_calloc(1, sizeof *tw);
    if (!be || !tw) {
        mn_free(be);
        mn_free(tw);
        return mn_fail(err, MN_NOMEM, "cuda twin: out of memory");
    }
    be->ops = &twin_ops;
    be->model = m;
    be->cfg = *cfg;
    be->impl = tw;
    uint32_t T = cfg->max_tokens, qdim = hp->n_heads * hp->head_dim, kvdim = hp->n_kv_heads * hp->head_dim;
    if ((s = mn_kv_pool_new(hp->n_layers, kvdim, cfg->kv_block_size, cfg->kv_blocks, cfg->kv_type, &be->kv, err)) !=
            MN_OK ||
        (s = mn_gpu_layout_init(&tw->h, T, err)) != MN_OK) {
        twin_free(be);
        return s;
    }
    int ok = 1;
    mn_gpu_bufs *b = &tw->bufs;
    b->x = fbuf(T, hp->dim, &ok);
    b->xb = fbuf(T, hp->dim, &ok);
    b->q = fbuf(T, qdim, &ok);
    b->att = fbuf(T, qdim, &ok);
    b->ffn = fbuf(T, hp->n_ff, &ok);
    tw->layers = (mn_gpu_layer *)mn_calloc(hp->n_layers, sizeof *tw->layers);
    if (!ok || !tw->layers) {
        twin_free(be);
        return mn_fail(err, MN_NOMEM, "cuda twin: cannot allocate activations for %u tokens", T);
    }
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const mn_layer *L = &m->layers[l];
        tw->layers[l] = {L->attn_norm, L->ffn_norm, mn_gpu_weight_of(&L->wq), mn_gpu_weight_of(&L->wk),
                         mn_gpu_weight_of(&L->wv), mn_gpu_weight_of(&L->wo), mn_gpu_weight_of(&L->w_gate),
                         mn_gpu_weight_of(&L->w_up), mn_gpu_weight_of(&L->w_down), be->kv->k[l], be->kv->v[l]};
    }
    tw->model = {*hp, mn_gpu_weight_of(&m->token_embd), mn_gpu_weight_of(&m->output), m->output_norm, tw->layers};
    *out = be;
    return MN_OK;
}
