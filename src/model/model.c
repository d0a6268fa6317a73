/* model.c - llama model loading and validation. */
#include "model/model.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/dtype.h"
#include "model/quant.h"
#include "util/alloc.h"

static mn_status get_u32(gguf_file *f, const char *key, uint32_t *out, int required, uint32_t dflt,
                         mn_err *err)
{
    uint64_t v;
    mn_status s = gguf_get_uint(f, key, &v, err);
    if (s == MN_NOTFOUND && !required) {
        *out = dflt;
        return MN_OK;
    }
    if (s != MN_OK)
        return s == MN_NOTFOUND ? mn_fail(err, MN_INVALID, "model: required key '%s' is missing", key) : s;
    if (v == 0 || v > (1u << 24))
        return mn_fail(err, MN_INVALID, "model: '%s' = %llu is out of range", key, (unsigned long long)v);
    *out = (uint32_t)v;
    return MN_OK;
}

static mn_status get_f32(gguf_file *f, const char *key, float *out, float dflt, mn_err *err)
{
    double v;
    mn_status s = gguf_get_float(f, key, &v, err);
    if (s == MN_NOTFOUND) {
        *out = dflt;
        return MN_OK;
    }
    if (s != MN_OK)
        return s;
    float f32 = (float)v; /* checked as the float the model uses: a double of 1e-300 is 0 there */
    if (!(f32 > 0) || f32 > 1e9f)
        return mn_fail(err, MN_INVALID, "model: '%s' = %g is out of range", key, v);
    *out = f32;
    return MN_OK;
}

static mn_status read_hparams(gguf_file *f, mn_hparams *hp, mn_err *err)
{
    gguf_str arch;
    mn_status s = gguf_get_string(f, "general.architecture", &arch, err);
    if (s != MN_OK)
        return s == MN_NOTFOUND ? mn_fail(err, MN_INVALID, "model: general.architecture is missing") : s;
    if (!gguf_str_eq(arch, "llama"))
        return mn_fail(err, MN_UNSUPPORTED, "model: architecture '%.*s' is not supported (llama is)",
                       (int)(arch.len > 32 ? 32 : arch.len), arch.ptr);
    if ((s = get_u32(f, "llama.context_length", &hp->n_ctx, 1, 0, err)) ||
        (s = get_u32(f, "llama.embedding_length", &hp->dim, 1, 0, err)) ||
        (s = get_u32(f, "llama.block_count", &hp->n_layers, 1, 0, err)) ||
        (s = get_u32(f, "llama.feed_forward_length", &hp->n_ff, 1, 0, err)) ||
        (s = get_u32(f, "llama.attention.head_count", &hp->n_heads, 1, 0, err)) ||
        (s = get_u32(f, "llama.attention.head_count_kv", &hp->n_kv_heads, 0, hp->n_heads, err)))
        return s;
    if (hp->dim % hp->n_heads || hp->n_heads % hp->n_kv_heads)
        return mn_fail(err, MN_INVALID, "model: %u heads / %u kv heads do not divide dim %u", hp->n_heads,
                       hp->n_kv_heads, hp->dim);
    hp->head_dim = hp->dim / hp->n_heads;
    if ((s = get_u32(f, "llama.rope.dimension_count", &hp->rope_dim, 0, hp->head_dim, err)))
        return s;
    if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2 || hp->head_dim % 2)
        return mn_fail(err, MN_INVALID, "model: rope dimension %u does not fit head dimension %u",
                       hp->rope_dim, hp->head_dim);
    if ((s = get_f32(f, "llama.attention.layer_norm_rms_epsilon", &hp->rms_eps, 1e-5f, err)) ||
        (s = get_f32(f, "llama.rope.freq_base", &hp->rope_base, 10000.0f, err)))
        return s;
    /* RoPE's largest inverse frequency, base^-(rope_dim - 2) / rope_dim, must be a float: a base of
     * 1e-45 passes as positive and makes it inf, and every angle at position 0 NaN (0 x inf) */
    if (hp->rope_dim && !(pow(hp->rope_base, -(double)(hp->rope_dim - 2) / hp->rope_dim) <= FLT_MAX))
        return mn_fail(err, MN_INVALID, "model: llama.rope.freq_base %g gives RoPE frequencies past a float",
                       (double)hp->rope_base);
    if (hp->n_ctx > (1u << 20))
        return mn_fail(err, MN_INVALID, "model: context length %u is absurd", hp->n_ctx);
    /* a block has nine tensors: a count the file cannot hold is refused before it sizes anything (a
     * fuzzed file's 2^28 blocks asked for 4 GB before its first missing tensor was found) */
    if (hp->n_layers > gguf_n_tensors(f) / 9)
        return mn_fail(err, MN_INVALID, "model: llama.block_count is %u, but the file holds %zu tensors (9 a block)",
                       hp->n_layers, gguf_n_tensors(f));
    return MN_OK;
}

/* Find a matrix of shape [rows x cols] (GGUF ne = {cols, rows}) in a computable type. */
static mn_status get_weight(gguf_file *f, const char *name, uint32_t rows, uint32_t cols, mn_weight *w,
                            mn_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t)
        return mn_fail(err, MN_INVALID, "model: tensor '%s' is missing", name);
    if (t->n_dims != 2)
        return mn_fail(err, MN_INVALID, "model: tensor '%s' has %u dimensions, expected 2 ([%u, %u])", name,
                       (unsigned)t->n_dims, cols, rows);
    if (t->ne[0] != cols || t->ne[1] != rows)
        return mn_fail(err, MN_INVALID, "model: tensor '%s' has shape [%llu, %llu], expected [%u, %u]", name,
                       (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], cols, rows);
    const mn_dtype_info *info = mn_dtype_get(t->type);
    if (!info->computable)
        return mn_fail(err, MN_UNSUPPORTED, "model: tensor '%s' has type %s, which is not supported", name,
                       info->name);
    if (info->elems > 1 && cols % MN_QK)
        return mn_fail(err, MN_INVALID, "model: tensor '%s': %u columns is not a multiple of %d", name, cols, MN_QK);
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = mn_dtype_row_bytes(info, cols);
    w->data = t->data;
    return MN_OK;
}

/* A norm vector [n] as an owned F32 copy. */
static mn_status get_vector(gguf_file *f, const char *name, uint32_t n, float **out, mn_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t)
        return mn_fail(err, MN_INVALID, "model: tensor '%s' is missing", name);
    if (t->ne[0] != n || t->ne[1] * t->ne[2] * t->ne[3] != 1)
        return mn_fail(err, MN_INVALID, "model: tensor '%s' has %llu elements, expected %u", name,
                       (unsigned long long)t->ne[0], n);
    if (t->type != MN_F32 && t->type != MN_F16)
        return mn_fail(err, MN_UNSUPPORTED, "model: norm '%s' must be F32 or F16", name);
    if (!(*out = mn_aligned_calloc(64, (size_t)n * sizeof(float))))
        return mn_fail(err, MN_NOMEM, "model: out of memory");
    mn_dequant_row(t->type, t->data, *out, n);
    return MN_OK;
}

static mn_status load_weights(mn_model *m, mn_err *err)
{
    gguf_file *f = m->gguf;
    const mn_hparams *hp = &m->hp;
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb)
        return mn_fail(err, MN_INVALID, "model: tensor 'token_embd.weight' is missing");
    if (emb->ne[1] == 0 || emb->ne[1] > (1u << 22))
        return mn_fail(err, MN_INVALID, "model: vocabulary size %llu is absurd", (unsigned long long)emb->ne[1]);
    m->hp.n_vocab = (uint32_t)emb->ne[1];
    uint32_t qdim = hp->n_heads * hp->head_dim, kvdim = hp->n_kv_heads * hp->head_dim;
    mn_status s;
    if ((s = get_weight(f, "token_embd.weight", hp->n_vocab, hp->dim, &m->token_embd, err)) ||
        (s = get_vector(f, "output_norm.weight", hp->dim, &m->output_norm, err)))
        return s;
    if (gguf_find_tensor(f, "output.weight")) {
        if ((s = get_weight(f, "output.weight", hp->n_vocab, hp->dim, &m->output, err)))
            return s;
    } else {
        m->output = m->token_embd;
        m->tied_output = 1;
    }
    if (!(m->layers = mn_calloc(hp->n_layers, sizeof *m->layers)))
        return mn_fail(err, MN_NOMEM, "model: out of memory");
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        mn_layer *L = &m->layers[l];
        char n[9][64];
        static const char *const parts[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                             "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 9; i++)
            snprintf(n[i], sizeof n[i], "blk.%u.%s.weight", l, parts[i]);
        if ((s = get_vector(f, n[0], hp->dim, &L->attn_norm, err)) ||
            (s = get_weight(f, n[1], qdim, hp->dim, &L->wq, err)) ||
            (s = get_weight(f, n[2], kvdim, hp->dim, &L->wk, err)) ||
            (s = get_weight(f, n[3], kvdim, hp->dim, &L->wv, err)) ||
            (s = get_weight(f, n[4], hp->dim, qdim, &L->wo, err)) ||
            (s = get_vector(f, n[5], hp->dim, &L->ffn_norm, err)) ||
            (s = get_weight(f, n[6], hp->n_ff, hp->dim, &L->w_gate, err)) ||
            (s = get_weight(f, n[7], hp->n_ff, hp->dim, &L->w_up, err)) ||
            (s = get_weight(f, n[8], hp->dim, hp->n_ff, &L->w_down, err)))
            return s;
    }
    return MN_OK;
}

mn_status mn_model_from_gguf(gguf_file *f, const char *name, mn_model **out, mn_err *err)
{
    mn_model *m = mn_calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        return mn_fail(err, MN_NOMEM, "model: out of memory");
    }
    m->gguf = f;
    mn_status s;
    if ((s = read_hparams(f, &m->hp, err)) || (s = load_weights(m, err)) ||
        (s = mn_tok_load(f, m->hp.n_vocab, &m->tok, err)))
        goto fail;
    gguf_str gname;
    if (gguf_get_string(f, "general.name", &gname, NULL) == MN_OK)
        m->name = mn_strndup(gname.ptr, gname.len);
    else
        m->name = mn_strndup(name, strlen(name));
    if (!m->name) {
        s = mn_fail(err, MN_NOMEM, "model: out of memory");
        goto fail;
    }
    *out = m;
    return MN_OK;
fail:
    mn_model_free(m);
    return s;
}

mn_status mn_model_load(const char *path, mn_model **out, mn_err *err)
{
    gguf_file *f;
    mn_status s = gguf_open_file(path, &f, err);
    if (s != MN_OK)
        return s;
    return mn_model_from_gguf(f, path, out, err);
}

void mn_model_free(mn_model *m)
{
    if (!m)
        return;
    if (m->layers)
        for (uint32_t l = 0; l < m->hp.n_layers; l++) {
            mn_free(m->layers[l].attn_norm);
            mn_free(m->layers[l].ffn_norm);
        }
    mn_free(m->layers);
    mn_free(m->output_norm);
    mn_tok_free(m->tok);
    mn_free(m->name);
    gguf_close(m->gguf);
    mn_free(m);
}

static uint64_t welems(const mn_weight *w) { return (uint64_t)w->rows * w->cols; }

uint64_t mn_model_n_params(const mn_model *m)
{
    uint64_t n = welems(&m->token_embd) + m->hp.dim;
    if (!m->tied_output)
        n += welems(&m->output);
    for (uint32_t l = 0; l < m->hp.n_layers; l++) {
        const mn_layer *L = &m->layers[l];
        n += 2ull * m->hp.dim + welems(&L->wq) + welems(&L->wk) + welems(&L->wv) + welems(&L->wo) +
             welems(&L->w_gate) + welems(&L->w_up) + welems(&L->w_down);
    }
    return n;
}
