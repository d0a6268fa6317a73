/* model.h - a llama-architecture model loaded from GGUF: hyper-parameters, weights, tokenizer.
 *
 * Weights stay in the file mapping in their stored type (quantized ones stay quantized); only the
 * small norm vectors are converted to F32 copies. Every tensor the forward pass uses is checked for
 * presence, type and shape at load, so the compute code trusts the model.
 *
 * Ownership: mn_model owns the gguf_file (mapping) and the tokenizer. Immutable after load: any
 * thread may read it.
 */
#ifndef MN_MODEL_H
#define MN_MODEL_H

#include <stdint.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "util/status.h"

typedef struct mn_hparams {
    uint32_t n_vocab;     /* rows of token_embd */
    uint32_t n_ctx;       /* llama.context_length: the longest sequence */
    uint32_t dim;         /* llama.embedding_length */
    uint32_t n_layers;    /* llama.block_count */
    uint32_t n_ff;        /* llama.feed_forward_length */
    uint32_t n_heads;     /* llama.attention.head_count */
    uint32_t n_kv_heads;  /* llama.attention.head_count_kv (defaults to n_heads) */
    uint32_t head_dim;    /* dim / n_heads */
    uint32_t rope_dim;    /* llama.rope.dimension_count (defaults to head_dim): rotated dims per head */
    float rms_eps;        /* llama.attention.layer_norm_rms_epsilon */
    float rope_base;      /* llama.rope.freq_base (defaults to 10000) */
} mn_hparams;

/* A weight matrix of `rows` outputs by `cols` inputs, rows contiguous, in its stored type. */
typedef struct mn_weight {
    uint32_t type;        /* mn_dtype */
    uint32_t rows;        /* output features (GGUF ne[1]) */
    uint32_t cols;        /* input features (GGUF ne[0]) */
    size_t row_bytes;     /* bytes of one row */
    const uint8_t *data;  /* rows * row_bytes bytes inside the mapping */
} mn_weight;

typedef struct mn_layer {
    float *attn_norm;     /* [dim] */
    mn_weight wq;         /* [n_heads*head_dim x dim] */
    mn_weight wk;         /* [n_kv_heads*head_dim x dim] */
    mn_weight wv;         /* [n_kv_heads*head_dim x dim] */
    mn_weight wo;         /* [dim x n_heads*head_dim] */
    float *ffn_norm;      /* [dim] */
    mn_weight w_gate;     /* [n_ff x dim] */
    mn_weight w_up;       /* [n_ff x dim] */
    mn_weight w_down;     /* [dim x n_ff] */
} mn_layer;

typedef struct mn_model {
    mn_hparams hp;
    gguf_file *gguf;
    mn_weight token_embd; /* [n_vocab x dim] */
    mn_layer *layers;     /* [n_layers] */
    float *output_norm;   /* [dim] */
    mn_weight output;     /* [n_vocab x dim]; a copy of token_embd's descriptor when tied */
    int tied_output;      /* output.weight was absent */
    mn_tokenizer *tok;
    char *name;           /* general.name, or the file name */
} mn_model;

/* Load and validate a model. On failure *out is untouched, err names the problem (missing key,
 * missing tensor, wrong shape, unsupported type, malformed file). Call from any thread. */
mn_status mn_model_load(const char *path, mn_model **out, mn_err *err);
/* Same, from an already opened file; takes ownership of f whatever the outcome. */
mn_status mn_model_from_gguf(gguf_file *f, const char *name, mn_model **out, mn_err *err);
void mn_model_free(mn_model *m);

/* Parameter count (elements of all weights the pass uses; a tied output counts once). */
uint64_t mn_model_n_params(const mn_model *m);

#endif
