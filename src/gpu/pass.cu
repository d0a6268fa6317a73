/* pass.cu - the order of a CUDA forward pass's steps (see pass.h); host code only. */
#include "gpu/pass.h"

extern "C" {
#include "util/alloc.h"
}

mn_status mn_gpu_check_config(const mn_model *m, const mn_backend_config *cfg, const char *who, mn_err *err)
{
    if (cfg->max_tokens == 0 || cfg->max_tokens > 65535)
        return mn_fail(err, MN_INVALID, "%s: max_tokens %u is out of range 1..65535", who, cfg->max_tokens);
    if (m->hp.head_dim > MN_G_MAX_HEAD_DIM || m->hp.head_dim % 2)
        return mn_fail(err, MN_UNSUPPORTED, "%s: head dimension %u is odd or over %d", who, m->hp.head_dim,
                       MN_G_MAX_HEAD_DIM);
    return MN_OK;
}

mn_status mn_gpu_layout_init(mn_gpu_host_layout *l, uint32_t max_tokens, mn_err *err)
{
    *l = {};
    l->tok = (mn_gpu_tok *)mn_calloc(max_tokens, sizeof *l->tok);
    l->tokens = (int32_t *)mn_calloc(max_tokens, sizeof *l->tokens);
    l->out_rows = (uint32_t *)mn_calloc(max_tokens, sizeof *l->out_rows);
    l->table_off = (uint32_t *)mn_calloc(max_tokens, sizeof *l->table_off);
    if (!l->tok || !l->tokens || !l->out_rows || !l->table_off) {
        mn_gpu_layout_free(l);
        return mn_fail(err, MN_NOMEM, "gpu: cannot allocate the layout of %u tokens", max_tokens);
    }
    return MN_OK;
}

void mn_gpu_layout_free(mn_gpu_host_layout *l)
{
    mn_free(l->tok);
    mn_free(l->tokens);
    mn_free(l->out_rows);
    mn_free(l->table_off);
    mn_free(l->tables);
    *l = {};
}

mn_status mn_gpu_layout_reserve(mn_gpu_host_layout *l, const mn_batch *batch, mn_err *err)
{
    size_t n = 0;
    for (uint32_t s = 0; s < batch->n_seqs; s++)
        n += batch->seqs[s].kv->n_blocks;
    if (n <= l->cap_tables)
        return MN_OK;
    size_t cap = n > 2 * l->cap_tables ? n : 2 * l->cap_tables;
    uint32_t *t = (uint32_t *)mn_calloc(cap, sizeof *t);
    if (!t)
        return mn_fail(err, MN_NOMEM, "gpu: cannot grow the block tables to %zu", cap);
    mn_free(l->tables);
    l->tables = t;
    l->cap_tables = cap;
    return MN_OK;
}

void mn_gpu_layout(const mn_batch *batch, mn_gpu_host_layout *l)
{
    l->T = l->n_out = l->n_tables = 0;
    for (uint32_t s = 0; s < batch->n_seqs; s++) {
        const mn_batch_seq *bs = &batch->seqs[s];
        l->table_off[s] = l->n_tables;
        memcpy(l->tables + l->n_tables, bs->kv->blocks, bs->kv->n_blocks * sizeof(uint32_t));
        l->n_tables += bs->kv->n_blocks;
        for (uint32_t i = 0; i < bs->n_tokens; i++, l->T++) {
            l->tok[l->T] = {s, bs->kv->len + i};
            l->tokens[l->T] = bs->tokens[i];
            if (bs->want_all_logits || i + 1 == bs->n_tokens)
                l->out_rows[l->n_out++] = l->T;
        }
    }
}

void mn_gpu_pass(const mn_gpu_exec *ex, void *ctx, const mn_gpu_model *m, const mn_gpu_bufs *b, mn_gpu_attn a,
                 const int32_t *tokens, uint32_t T, const uint32_t *out_rows, uint32_t n_out, float *logits)
{
    const mn_hparams *hp = &m->hp;
    uint32_t dim = hp->dim;
    float eps = hp->rms_eps;
    ex->embed(ctx, &m->embd, tokens, b->x, dim, T);
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const mn_gpu_layer *L = &m->layers[l];
        a.k = L->k;
        a.v = L->v;
        ex->rmsnorm(ctx, b->x, NULL, L->attn_norm, b->xb, dim, eps, T);
        mn_gpu_outs qkv = {MN_G_OUT_QKV, 3, {L->wq, L->wk, L->wv}, {b->q}};
        ex->proj(ctx, b->xb, &qkv, &a, T);
        ex->attention(ctx, &a, b->q, b->att, T);
        mn_gpu_outs wo = {MN_G_OUT_ACCUMULATE, 1, {L->wo}, {b->x}};
        ex->proj(ctx, b->att, &wo, NULL, T);
        ex->rmsnorm(ctx, b->x, NULL, L->ffn_norm, b->xb, dim, eps, T);
        mn_gpu_outs gate_up = {MN_G_OUT_SWIGLU, 2, {L->w_gate, L->w_up}, {b->ffn}};
        ex->proj(ctx, b->xb, &gate_up, NULL, T);
        mn_gpu_outs down = {MN_G_OUT_ACCUMULATE, 1, {L->w_down}, {b->x}};
        ex->proj(ctx, b->ffn, &down, NULL, T);
    }
    ex->rmsnorm(ctx, b->x, out_rows, m->output_norm, b->xb, dim, eps, n_out);
    mn_gpu_outs head = {MN_G_OUT_STORE, 1, {m->output}, {logits}};
    ex->proj(ctx, b->xb, &head, NULL, n_out);
}

mn_gpu_weight mn_gpu_weight_of(const mn_weight *w)
{
    return {w->type, w->rows, w->cols, w->row_bytes, w->data};
}
