/* pass.h - the CUDA forward pass written once, run by the device or by its host twin.
 *
 * mn_gpu_layout lays an unpadded batch out as the kernels read it (a token table, the rows that
 * return logits, the sequences' block tables flattened into one array); mn_gpu_pass is the order
 * of the steps of one pass over it. Each step goes through an executor (mn_gpu_exec): the CUDA
 * backend's launches the kernels of gpu/kernels.cuh on its stream, the twin's runs their bodies in
 * host loops (gpu/twin.h). So the pass the tests check on the host is the pass the device runs.
 *
 * Pointers in mn_gpu_model, mn_gpu_bufs and the mn_gpu_attn given to mn_gpu_pass are the
 * executor's (device memory for the CUDA backend); mn_gpu_layout writes host arrays.
 * No allocation; any thread; errors are the executor's to keep (the pass itself cannot fail).
 */
#ifndef MN_GPU_PASS_H
#define MN_GPU_PASS_H

#include "gpu/kernels.cuh"

extern "C" {
#include "runtime/backend.h"
}

typedef struct mn_gpu_layer {
    const float *attn_norm, *ffn_norm;
    mn_gpu_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    void *k, *v;  /* the layer's KV cache: blocks of [block_size][kv_dim] floats or halves (mn_gpu_attn) */
} mn_gpu_layer;

typedef struct mn_gpu_model {
    mn_hparams hp;
    mn_gpu_weight embd, output;
    const float *output_norm;
    const mn_gpu_layer *layers; /* [n_layers], a host array whose pointers are the executor's */
} mn_gpu_model;

/* Activations, [max_tokens][width] each (K and V go straight into the cache). */
typedef struct mn_gpu_bufs {
    float *x, *xb, *q, *att, *ffn;
} mn_gpu_bufs;

/* One step each; ctx is the executor's own. proj: T tokens' rows of x through outs (kernels.cuh),
 * a the layer's attention for MN_G_OUT_QKV (NULL for the other modes). */
typedef struct mn_gpu_exec {
    void (*embed)(void *ctx, const mn_gpu_weight *table, const int32_t *tokens, float *x, uint32_t dim, uint32_t T);
    void (*rmsnorm)(void *ctx, const float *x, const uint32_t *rows, const float *w, float *out, uint32_t n,
                    float eps, uint32_t T);
    void (*proj)(void *ctx, const float *x, const mn_gpu_outs *outs, const mn_gpu_attn *a, uint32_t T);
    void (*attention)(void *ctx, const mn_gpu_attn *a, const float *q, float *out, uint32_t T);
} mn_gpu_exec;

/* The batch's layout on the host: arrays of max_tokens entries (a pass has at most that many
 * tokens, so at most that many sequences) and the block tables, grown on demand. */
typedef struct mn_gpu_host_layout {
    mn_gpu_tok *tok;
    int32_t *tokens;
    uint32_t *out_rows;
    uint32_t *table_off;
    uint32_t *tables;   /* [cap_tables] */
    size_t cap_tables;
    uint32_t T, n_out, n_tables;
} mn_gpu_host_layout;

/* The limits the device pass and its twin share: max_tokens 1..65535 (a grid's y dimension
 * counts tokens; MN_INVALID) and an even head_dim <= MN_G_MAX_HEAD_DIM (MN_UNSUPPORTED). who names the
 * backend in the message. */
mn_status mn_gpu_check_config(const mn_model *m, const mn_backend_config *cfg, const char *who, mn_err *err);
/* Allocate l's arrays for max_tokens tokens (tables come with mn_gpu_layout_reserve); MN_NOMEM.
 * mn_gpu_layout_free frees them (l may be partly allocated or zeroed). */
mn_status mn_gpu_layout_init(mn_gpu_host_layout *l, uint32_t max_tokens, mn_err *err);
void mn_gpu_layout_free(mn_gpu_host_layout *l);
/* Room in l->tables for the batch's block tables (growing to at least twice the old capacity);
 * MN_NOMEM, l unchanged. */
mn_status mn_gpu_layout_reserve(mn_gpu_host_layout *l, const mn_batch *batch, mn_err *err);
/* Fill l from the batch (after mn_gpu_layout_reserve): token t of the pass is token i of sequence
 * s at position kv->len + i. */
void mn_gpu_layout(const mn_batch *batch, mn_gpu_host_layout *l);

/* One forward pass over T tokens: a (tok, tables, table_off in the executor's memory; the rest is
 * filled here per layer) and tokens and out_rows in the executor's memory; n_out logits rows of
 * n_vocab floats land in logits (the executor's memory). */
void mn_gpu_pass(const mn_gpu_exec *ex, void *ctx, const mn_gpu_model *m, const mn_gpu_bufs *b, mn_gpu_attn a,
                 const int32_t *tokens, uint32_t T, const uint32_t *out_rows, uint32_t n_out, float *logits);

/* The model's weights as mn_gpu_weights pointing at the host mapping (the twin's view; the CUDA
 * backend copies them to the device and points there). */
mn_gpu_weight mn_gpu_weight_of(const mn_weight *w);

#endif
