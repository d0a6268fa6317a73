/* backend.h - the compute backend interface: one forward pass over an unpadded batch.
 *
 * A batch is a list of sequences, each bringing its own new tokens (any number >= 1) and its own
 * KV cache (block table + length). The new tokens of sequence s take positions
 * [s.kv->len, s.kv->len + s.n_tokens); the caller reserves those positions in the backend's KV pool
 * first (mn_kv_reserve), and the pass advances s.kv->len by n_tokens. No padding exists anywhere:
 * the pass computes exactly the tokens given.
 *
 * Output: logits rows, sequence by sequence in batch order: all n_tokens rows for a sequence with
 * want_all_logits, otherwise only its last token's row. mn_batch_n_logits says how many rows.
 * With batch.pick, also each row's token: its argmax (mn_argmax's: the first largest logit), or
 * for a sequence with a draw, row i's token drawn at the draw's temperature and top_p with the
 * uniform u[i] (model/sampler.h's mn_draw_row, bit for bit). A sequence that wants nothing else
 * (pick_only: decoding without log-probabilities, drafting) may have its logits rows left
 * unwritten, which spares a GPU backend copying them down (CUDA picks on the device and copies
 * only the rows still wanted).
 *
 * Invariance: a sequence's logits are bit-identical whatever else is in the batch and however its
 * tokens are split into passes (the CPU backend guarantees it; see src/cpu/matmul.h).
 *
 * Implementations are vtables (CPU in src/cpu, CUDA in src/gpu); this interface knows neither.
 * runtime/registry.h creates one by kind (mn_backend_new).
 *
 * Thread: one thread drives a backend (forward, kv ops); internally it may use many.
 */
#ifndef MN_BACKEND_H
#define MN_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "mem/kv.h"
#include "model/model.h"
#include "runtime/pool.h"
#include "util/status.h"

/* How a sequence's rows are drawn: one uniform per row. */
typedef struct mn_draw {
    float temperature;       /* > 0 */
    float top_p;             /* (0, 1] */
    const double *u;         /* [the sequence's rows]: each in [0, 1) */
} mn_draw;

typedef struct mn_batch_seq {
    mn_kv_seq *kv;           /* the sequence's cache; len advances by n_tokens */
    const int32_t *tokens;   /* [n_tokens] new tokens */
    uint32_t n_tokens;       /* >= 1 */
    bool want_all_logits;    /* logits for every new token (verification) or only the last */
    bool pick_only;          /* only batch.pick of its rows is wanted: its logits rows may stay unwritten */
    const mn_draw *draw;     /* NULL: its rows' pick is their argmax; else their draw (needs batch.pick) */
} mn_batch_seq;

typedef struct mn_batch {
    const mn_batch_seq *seqs;
    uint32_t n_seqs;
    int32_t *pick;           /* NULL, or mn_batch_n_logits entries: each row's token (required by pick_only and draw) */
} mn_batch;

typedef enum mn_backend_kind {
    MN_BACKEND_AUTO = 0,     /* CUDA where it is compiled in and a device runs it, else the CPU */
    MN_BACKEND_CPU,          /* the CPU backend (src/cpu) */
    MN_BACKEND_CUDA,         /* the CUDA backend (src/gpu); fails when it cannot run */
} mn_backend_kind;

typedef struct mn_backend_config {
    int n_threads;           /* CPU compute threads (>= 1) */
    uint32_t max_tokens;     /* most new tokens in one pass (sizes activations) */
    uint32_t kv_block_size;  /* tokens per KV block */
    uint32_t kv_blocks;      /* blocks in the KV pool */
    mn_kv_type kv_type;      /* its rows' elements (mem/kv.h): floats or IEEE halves */
    mn_backend_kind kind;    /* which implementation (runtime/registry.h picks it) */
    struct mn_pool *pool;    /* CPU: compute threads shared with other backends (borrowed; n_threads
                              * is then its size), so that a target and its drafts, driven one
                              * after the other by one worker, never compete for cores; NULL: own */
} mn_backend_config;

typedef struct mn_backend mn_backend;

typedef struct mn_backend_ops {
    const char *name;
    /* the pass over a validated batch; mn_backend_forward advances the lengths when it succeeds */
    mn_status (*forward)(mn_backend *b, const mn_batch *batch, float *logits, mn_err *err);
    void (*free)(mn_backend *b);
    bool pick;               /* forward fills batch->pick; else mn_backend_forward does, from the logits */
    /* fn(ctx, i, n) for every i in [0, n) over the backend's compute threads (runtime/pool.h's
     * mn_pool_run); NULL: a backend without host threads, where mn_backend_run calls fn(ctx, 0, 1) */
    void (*run)(mn_backend *b, mn_pool_fn fn, void *ctx);
} mn_backend_ops;

struct mn_backend {
    const mn_backend_ops *ops;
    const mn_model *model;   /* borrowed: must outlive the backend */
    mn_kv_pool *kv;          /* owned: the model's paged KV memory */
    struct mn_draw_space **draws; /* owned: scratch of mn_backend_forward's draws for a backend that
                                   * cannot pick, one per compute thread (cfg.n_threads), made on the
                                   * first (freed by mn_backend_free) */
    mn_backend_config cfg;
    void *impl;
    /* Testing the failure paths: when fail_pass is set (the engine reads MINIONS_FAIL_PASS), the
     * pass of that number, counted from then, fails with MN_ERROR before it runs, as a device or
     * allocation failure would. */
    uint64_t fail_pass, passes;
};

/* Sensible defaults for a model: threads = online CPUs, 512 tokens a pass, 16-token blocks and
 * enough blocks for `n_ctx_total` positions in all. */
mn_backend_config mn_backend_defaults(const mn_model *m, uint32_t n_ctx_total);

void mn_backend_free(mn_backend *b);

/* Rows of logits sequence s produces: all of its tokens' with want_all_logits, else its last's. */
static inline uint32_t mn_batch_seq_rows(const mn_batch_seq *s) { return s->want_all_logits ? s->n_tokens : 1; }

/* Rows of logits the batch produces. */
uint32_t mn_batch_n_logits(const mn_batch *batch);

/* Validate the batch (sizes, reserved positions, context length) and run the pass. logits holds
 * mn_batch_n_logits(batch) * n_vocab floats (rows of pick_only sequences may be left as they
 * were). MN_INVALID (nothing computed) for a malformed batch: pick_only or a draw without
 * batch->pick, a draw's temperature not above 0 or top_p outside (0, 1] included. MN_NOMEM when
 * the first draw on a backend that cannot pick finds no memory for its scratch. */
mn_status mn_backend_forward(mn_backend *b, const mn_batch *batch, float *logits, mn_err *err);

/* Host work beside the passes, spread over the backend's compute threads: fn(ctx, i, n) for every i
 * in [0, n), n <= cfg.n_threads, each call on one thread, returning when all have (the CPU backend's
 * pool; once, on the caller, for a backend without one). From the thread that drives the backend,
 * between passes; fn must not call into the backend. */
void mn_backend_run(mn_backend *b, mn_pool_fn fn, void *ctx);

/* Reserve KV for and feed tokens[0..n) to one sequence in passes of at most max_tokens; the last
 * token's logits land in logits (n_vocab floats). MN_BUSY when the KV pool is too small. */
mn_status mn_backend_prefill(mn_backend *b, mn_kv_seq *kv, const int32_t *tokens, uint32_t n, float *logits,
                             mn_err *err);

#endif
