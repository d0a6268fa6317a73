/* pass.cu - the order of a CUDA forward pass's steps (see pass.h); host code only. */
#include "gpu/pass.h"

size_t mn_gpu_table_size(const mn_batch *batch)
{
    size_t n = 0;
    for (uint32_t s = 0; s < batch->n_seqs; s++)
        n += batch->seqs[s].kv->n_blocks;
    return n;
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
    ex->embed(ctx, &m->embd, tokens, b->x, dim, T);
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const mn_gpu_layer *L = &m->layers[l];
        a.k = L->k;
        a.v = L->v;
        ex->rmsnorm(ctx, b->x, NULL, L->attn_norm, b->xb, dim, hp->rms_eps, T);
        ex->matvec(ctx, &L->wq, b->xb, b->q, 0, T);
        ex->matvec(ctx, &L->wk, b->xb, b->k, 0, T);
        ex->matvec(ctx, &L->wv, b->xb, b->v, 0, T);
        ex->rope_store(ctx, &a, b->q, b->k, b->v, T);
        ex->attention(ctx, &a, b->q, b->att, T);
        ex->matvec(ctx, &L->wo, b->att, b->x, 1, T);
        ex->rmsnorm(ctx, b->x, NULL, L->ffn_norm, b->xb, dim, hp->rms_eps, T);
        ex->matvec(ctx, &L->w_gate, b->xb, b->gate, 0, T);
        ex->matvec(ctx, &L->w_up, b->xb, b->up, 0, T);
        ex->swiglu(ctx, b->gate, b->up, (size_t)T * hp->n_ff);
        ex->matvec(ctx, &L->w_down, b->gate, b->x, 1, T);
    }
    ex->rmsnorm(ctx, b->x, out_rows, m->output_norm, b->xb, dim, hp->rms_eps, n_out);
    ex->matvec(ctx, &m->output, b->xb, logits, 0, n_out);
}

mn_gpu_weight mn_gpu_weight_of(const mn_weight *w)
{
    return {w->type, w->rows, w->cols, w->row_bytes, w->data};
}
