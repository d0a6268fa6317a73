/* cuda_backend.cu - the CUDA backend: gpu/pass.h's pass with an executor that launches the kernels
 * of gpu/kernels.cuh on one stream.
 *
 * State on the device: every projection in its stored type and the norms (uploaded once), the KV
 * cache ([n_blocks][block_size][kv_dim] floats, or halves with --kv-type f16, per layer and K/V;
 * block ids shared with the host pool, made without storage, that owns the tables), activations for
 * max_tokens tokens, the pass's layout (token table, flattened block tables, logits rows) and its
 * logits. A forward pass lays the batch out on the
 * host, copies the layout up (one copy from pinned memory), launches the pass, copies the logits
 * down and waits for the stream: it blocks its calling thread (the compute worker, never the loop).
 *
 * The kernels' logic and the pass are tested on the host through the twin backend (gpu/twin.h,
 * tests/test_gpu.c); on a device (an H200 and an H100, issue #13's sessions) the same tests,
 * greedy text against the CPU's, speculative greedy against plain greedy and compute-sanitizer
 * have run, so `auto` (mn_backend_new) takes this backend wherever a device runs it. Each pass
 * shape is captured once as a CUDA graph and replayed (below; MINIONS_CUDA_GRAPHS=0 turns it off,
 * to compare; MINIONS_CUDA_PROFILE=1 times every step with events instead and logs the totals at
 * the end). Passes of many tokens project quantized weights through mn_k_proj_wide (WIDE_T;
 * MINIONS_CUDA_WIDE=0 keeps them on mn_k_proj, to compare: the same bits either way). On sm_90 a
 * pass's kernels after the first are programmatic dependent launches (launch(); MINIONS_CUDA_PDL=0
 * turns them into plain ones), which mn_k_proj uses to copy its weight rows into shared memory
 * while the kernel before it runs (proj_stage; MINIONS_CUDA_STAGE=0 reads them in place, =all copies
 * for mn_k_proj_wide too, which no device has run yet). Every
 * backend has its own stream, so the target and each draft model launch on streams of their own.
 * Completion is the stream waited for in the compute worker's thread, which then posts the job to
 * its actor (a cudaLaunchHostFunc callback could not run the verdict on the logits, which needs
 * the copy done and a thread that may call CUDA). Each row's token is picked on the device (its
 * argmax, or a sequence's draw with the caller's uniforms: mn_k_draw, model/draw.h's rule), and
 * only the rows still wanted come down. Still to come: cuBLAS or tensor-core GEMMs where they are
 * faster and keep batch invariance.
 *
 * Every CUDA call goes through CUDA_TRY, which turns a failure into an mn_status with the
 * expression, file and line in the message.
 */
#include "gpu/cuda_backend.h"

#include <cuda_runtime.h>

#include "gpu/graph_cache.h"
#define MN_GPU_KERNELS /* the device wrappers of kernels.cuh are compiled here */
#include "gpu/pass.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "util/alloc.h"
#include "util/log.h"
}

/* A failed call's error is also the thread's last error, which the next pass's cudaGetLastError
 * would report as its own: it is cleared here (a sticky one, a fault on the device, stays). */
#define CUDA_TRY(expr)                                                                              \
    do {                                                                                            \
        cudaError_t e_ = (expr);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            (void)cudaGetLastError();                                                               \
            return mn_fail(err, MN_UNSUPPORTED, "%s failed: %s (%s:%d)", #expr, cudaGetErrorString(e_), \
                           __FILE__, __LINE__);                                                     \
        }                                                                                           \
    } while (0)

/* out[i] = i * 2 + 1: a result the host can check. */
__global__ static void probe_kernel(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = i * 2 + 1;
}

/* A device exists and runs our code. */
static mn_status probe(mn_err *err)
{
    int n_dev = 0;
    cudaError_t count = cudaGetDeviceCount(&n_dev); /* no driver, or no device: nothing here to use */
    if (count != cudaSuccess || n_dev == 0)
        return mn_fail(err, MN_NOTFOUND, "no CUDA device (%s)", count ? cudaGetErrorString(count) : "none found");
    enum { N = 256 };
    int *d = NULL, h[N];
    CUDA_TRY(cudaMalloc((void **)&d, N * sizeof(int)));
    probe_kernel<<<1, N>>>(d, N);
    cudaError_t e = cudaGetLastError(); /* no kernel image for this device (no PTX for a newer one) */
    if (e == cudaSuccess)
        e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (e != cudaSuccess)
        return mn_fail(err, MN_UNSUPPORTED, "probe kernel failed: %s", cudaGetErrorString(e));
    for (int i = 0; i < N; i++)
        if (h[i] != i * 2 + 1)
            return mn_fail(err, MN_UNSUPPORTED, "probe kernel computed a wrong result");
    return MN_OK;
}

/* MINIONS_CUDA_STAGE: 0 no copies; all: mn_k_proj_wide's too (not yet run on a device, so not the
 * default); else mn_k_proj's alone (the default). */
enum { STAGE_NONE, STAGE_PROJ, STAGE_ALL };

/* CUDA graphs: a pass's launches depend on its shape only (T tokens, n_out logits rows): every
 * pointer they take is fixed for the backend's life and the layout they read is copied into
 * those buffers before each launch. So a shape that recurs is captured once into a bounded cache
 * and replayed (gpu/graph_cache.h: at its second pass; with the cache full, the graph used least
 * recently goes). Growing the block-table buffer moves a pointer the graphs hold, so it empties
 * the cache. */

/* The steps MINIONS_CUDA_PROFILE times apart. */
enum { S_EMBED, S_RMSNORM, S_QKV, S_ATTENTION, S_WO, S_GATE_UP, S_DOWN, S_LOGITS, S_ARGMAX, S_DRAW, N_STEPS };
static const char *const step_name[N_STEPS] = {"embed",        "rmsnorm", "qkv+rope+kv", "attention", "wo",
                                               "gate/up+silu", "down",    "logits",      "argmax",    "draw"};

typedef struct cuda_state {
    cudaStream_t stream;
    void **allocs;            /* everything cudaMalloc'd, freed together: 11 a layer and a few more */
    int n_allocs, cap_allocs;
    mn_gpu_model model;       /* device pointers */
    mn_gpu_layer *layers;     /* host array of device pointers */
    mn_gpu_bufs bufs;
    /* The pass's layout goes up in one copy: h_pack (pinned host memory, so the copy is a plain
     * DMA) holds it as d_pack does, tok | tokens | out_rows | table_off for max_tokens entries
     * each, then pack_tables block ids (h.cap_tables may be ahead after a failure); d_tok ..
     * d_tables point into d_pack. */
    uint8_t *h_pack, *d_pack;
    size_t pack_tables;
    uint32_t cfg_max_tokens;  /* the entries of each of the pack's first four arrays */
    mn_gpu_tok *d_tok;
    int32_t *d_tokens;
    uint32_t *d_out_rows, *d_table_off, *d_tables;
    float *d_logits;          /* [max_tokens][n_vocab] */
    int32_t *d_pick;          /* [max_tokens]: each logits row's token (argmax or draw), when the batch asks */
    mn_gpu_draw *h_draws, *d_draws; /* [max_tokens]: the rows to draw (pinned on the host) */
    uint64_t *d_weights;      /* [MN_G_DRAW_ROWS][n_vocab]: mn_k_draw's scratch, made on the first draw */
    mn_gpu_host_layout h;     /* host side of the layout */
    bool graphs;              /* replay captured passes (MINIONS_CUDA_GRAPHS=0: plain launches) */
    bool profile;             /* MINIONS_CUDA_PROFILE=1: every step timed (graphs off), logged at the end */
    bool wide;                /* quantized weights through mn_k_proj_wide from WIDE_T tokens (MINIONS_CUDA_WIDE=0: no) */
    bool pdl;                 /* a pass's kernels after the first as programmatic dependents (sm_90, not when
                               * profiling; MINIONS_CUDA_PDL=0: no) */
    int stage;                /* which projections copy their rows and inputs into shared memory first: STAGE_* */
    cudaEvent_t ev[2];
    double step_ms[N_STEPS];
    uint64_t step_n[N_STEPS];
    mn_graph_cache gc;        /* which shape each graph is */
    cudaGraphExec_t graph[MN_GRAPH_SLOTS];
    uint64_t replays, captures, evictions;
} cuda_state;

static mn_status dalloc(cuda_state *st, size_t bytes, void **out, mn_err *err)
{
    if (st->n_allocs == st->cap_allocs) {
        int cap = st->cap_allocs ? 2 * st->cap_allocs : 256;
        void **grown = (void **)mn_realloc(st->allocs, (size_t)cap * sizeof *grown);
        if (!grown)
            return mn_fail(err, MN_NOMEM, "cuda: out of host memory");
        st->allocs = grown;
        st->cap_allocs = cap;
    }
    CUDA_TRY(cudaMalloc(out, bytes ? bytes : 1));
    st->allocs[st->n_allocs++] = *out;
    return MN_OK;
}

/* A copy of n host bytes on the device, in an allocation `pad` zeroed bytes longer. */
static mn_status upload(cuda_state *st, const void *src, size_t n, size_t pad, const void **out, mn_err *err)
{
    void *d = NULL;
    mn_status s = dalloc(st, n + pad, &d, err);
    if (s != MN_OK)
        return s;
    CUDA_TRY(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
    if (pad)
        CUDA_TRY(cudaMemset((uint8_t *)d + n, 0, pad));
    *out = d;
    return MN_OK;
}

/* A weight on the device, 16 bytes longer than its rows: mn_g_stage_rows reads whole 16-byte lines,
 * the last row's last line included. */
static mn_status upload_weight(cuda_state *st, const mn_weight *w, mn_gpu_weight *out, mn_err *err)
{
    *out = mn_gpu_weight_of(w);
    const void *d = NULL;
    mn_status s = upload(st, w->data, (size_t)w->rows * w->row_bytes, 16, &d, err);
    out->data = (const uint8_t *)d;
    return s;
}

static mn_status upload_floats(cuda_state *st, const float *src, size_t n, const float **out, mn_err *err)
{
    const void *d = NULL;
    mn_status s = upload(st, src, n * sizeof(float), 0, &d, err);
    *out = (const float *)d;
    return s;
}

/* ---- the executor: launches on st->stream ---------------------------------------------------- */
enum { THREADS = 128 };

static unsigned blocks_for(size_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }

/* A launch, timed with events when profiling (which waits for it: a measurement, not a mode to
 * serve in). */
#define LAUNCH(st, step, launch)                                                                    \
    do {                                                                                            \
        if ((st)->profile)                                                                          \
            cudaEventRecord((st)->ev[0], (st)->stream);                                             \
        launch;                                                                                     \
        if ((st)->profile)                                                                          \
            profile_step(st, step);                                                                 \
    } while (0)

static void profile_step(cuda_state *st, int step)
{
    float ms = 0.0f;
    cudaEventRecord(st->ev[1], st->stream);
    if (cudaEventSynchronize(st->ev[1]) == cudaSuccess &&
        cudaEventElapsedTime(&ms, st->ev[0], st->ev[1]) == cudaSuccess) {
        st->step_ms[step] += ms;
        st->step_n[step]++;
    }
}

/* Launches kernel k on st->stream. A kernel of the pass after its first (after_kernel) goes as a
 * programmatic dependent launch where st->pdl: it may start while the kernel before it runs, and
 * waits for it in mn_g_after_previous (kernels.cuh); graph capture keeps that edge. Errors surface
 * in cudaGetLastError after the pass, as a <<<>>> launch's do. */
template <typename... P, typename... A>
static void launch(cuda_state *st, bool after_kernel, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t q, A &&...args)
{
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = q;
    cfg.attrs = attr;
    cfg.numAttrs = st->pdl && after_kernel ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, k, static_cast<A &&>(args)...);
}

static void k_embed(void *ctx, const mn_gpu_weight *w, const int32_t *tokens, float *x, uint32_t dim, uint32_t T)
{
    cuda_state *st = (cuda_state *)ctx;
    LAUNCH(st, S_EMBED, launch(st, false, mn_k_embed, blocks_for((size_t)T * dim), THREADS, 0, st->stream, w->type, w->data,
                               w->row_bytes, tokens, x, dim, T)); /* the pass's first: after the layout's copy */
}

static void k_rmsnorm(void *ctx, const float *x, const uint32_t *rows, const float *w, float *out, uint32_t n,
                      float eps, uint32_t T)
{
    cuda_state *st = (cuda_state *)ctx;
    LAUNCH(st, S_RMSNORM, launch(st, true, mn_k_rmsnorm, T, MN_G_NORM_THREADS, 0, st->stream, x, rows, w, out, n, eps, T));
}

/* Passes of this many tokens or more project quantized weights through mn_k_proj_wide, a warp per 4
 * rows (2 pairs) and 8 tokens. Measured on an H200 against mn_k_proj alone (docs/gpu-runs/
 * 2026-11-27-h200-wide.log, -argmax-wide.log): 4 x 8 makes a SmolLM2-shaped Q4_1 model's forward
 * pass over 64 sequences 1.16x as fast and its 64-token prefill 1.23x, and leaves 16 sequences
 * where they were; on F16 and F32 weights it gained nothing (the bundled target's prefill 0.88x);
 * shapes of 2 x 16, 4 x 16 and 8 x 8 made 64-sequence Q4_1 decode 0.71-0.79x as fast. */
enum { WIDE_T = 16, WIDE_NR = 4, WIDE_TB = 8 };

/* A projection launch's shared memory: each warp's `rows` weight rows (*stage bytes a warp, in equal
 * slots of a row rounded up to 16 bytes plus the 16 its copy may start off a line) and, where it
 * still fits, the block's tb tokens' inputs (*stage_x); the bytes a block takes. Past the default
 * 48 KB a block, rows or inputs go unstaged. */
enum { STAGE_MAX = 48 * 1024 };
static size_t proj_stage(const mn_gpu_outs *outs, uint32_t T, uint32_t rows, uint32_t tb, uint32_t *stage,
                         uint32_t *stage_x)
{
    size_t row = 0, warps = THREADS / MN_G_WARP, cols = outs->w[0].cols;
    for (uint32_t i = 0; i < outs->n; i++)
        row = outs->w[i].row_bytes > row ? outs->w[i].row_bytes : row;
    size_t per_warp = rows * (((row + 15) & ~(size_t)15) + 16);
    size_t xs = cols % 4 == 0 ? (size_t)(T < tb ? T : tb) * cols * sizeof(float) : 0;
    *stage = warps * per_warp <= STAGE_MAX ? (uint32_t)per_warp : 0;
    *stage_x = warps * *stage + xs <= STAGE_MAX && xs > 0;
    return warps * *stage + (*stage_x ? xs : 0);
}

static void k_proj(void *ctx, const float *x, const mn_gpu_outs *outs, const mn_gpu_attn *a, uint32_t T)
{
    cuda_state *st = (cuda_state *)ctx;
    int step = outs->mode == MN_G_OUT_QKV              ? S_QKV
               : outs->mode == MN_G_OUT_SWIGLU          ? S_GATE_UP
               : outs->mode == MN_G_OUT_STORE           ? S_LOGITS
               : outs->w[0].cols == st->model.hp.n_ff   ? S_DOWN
                                                        : S_WO;
    mn_gpu_attn at = a ? *a : mn_gpu_attn{};
    if (st->wide && T >= WIDE_T && mn_dtype_quantized(outs->w[0].type)) {
        uint32_t per_warp = outs->mode == MN_G_OUT_QKV || outs->mode == MN_G_OUT_SWIGLU ? WIDE_NR / 2 : WIDE_NR;
        size_t warps = (mn_g_out_rows(outs) + per_warp - 1) / per_warp;
        dim3 grid(blocks_for(warps * MN_G_WARP), (T + WIDE_TB - 1) / WIDE_TB);
        uint32_t stage = 0, stage_x = 0;
        size_t smem = st->stage == STAGE_ALL ? proj_stage(outs, T, WIDE_NR, WIDE_TB, &stage, &stage_x) : 0;
        LAUNCH(st, step, launch(st, true, smem ? mn_k_proj_wide<WIDE_NR, WIDE_TB, true> : mn_k_proj_wide<WIDE_NR, WIDE_TB, false>,
                                grid, THREADS, smem, st->stream, x, *outs, at, T, stage, stage_x));
    } else {
        dim3 grid(blocks_for((size_t)mn_g_out_rows(outs) * MN_G_WARP), (T + MN_G_TB - 1) / MN_G_TB); /* a warp each */
        uint32_t stage = 0, stage_x = 0, pair = outs->mode == MN_G_OUT_QKV || outs->mode == MN_G_OUT_SWIGLU;
        size_t smem = st->stage != STAGE_NONE ? proj_stage(outs, T, pair ? 2 : 1, MN_G_TB, &stage, &stage_x) : 0;
        LAUNCH(st, step, launch(st, true, mn_k_proj, grid, THREADS, smem, st->stream, x, *outs, at, T, stage, stage_x));
    }
}

static void k_attention(void *ctx, const mn_gpu_attn *a, const float *q, float *out, uint32_t T)
{
    cuda_state *st = (cuda_state *)ctx;
    unsigned grid = T * a->n_heads, block = MN_G_ATT_WARPS * MN_G_WARP; /* a lane holds hd / 32 dims */
    typedef void attention_fn(const mn_gpu_attn, const float *, float *, uint32_t);
    static attention_fn *const by_dims[2][4] = {
        {mn_k_attention<1, false>, mn_k_attention<2, false>, mn_k_attention<4, false>,
         mn_k_attention<MN_G_LANE_DIMS, false>},
        {mn_k_attention<1, true>, mn_k_attention<2, true>, mn_k_attention<4, true>,
         mn_k_attention<MN_G_LANE_DIMS, true>}};
    attention_fn *k = by_dims[a->kv_half][a->head_dim <= 32 ? 0 : a->head_dim <= 64 ? 1 : a->head_dim <= 128 ? 2 : 3];
    LAUNCH(st, S_ATTENTION, launch(st, true, k, grid, block, 0, st->stream, *a, q, out, T));
}

static const mn_gpu_exec device_exec = {k_embed, k_rmsnorm, k_proj, k_attention};

/* ---- the backend ------------------------------------------------------------------------------ */

static void drop_graphs(cuda_state *st)
{
    for (int i = 0; i < MN_GRAPH_SLOTS; i++)
        if (st->graph[i]) {
            cudaGraphExecDestroy(st->graph[i]);
            st->graph[i] = NULL;
        }
    mn_graph_cache_clear(&st->gc);
}

static void cuda_free(mn_backend *be)
{
    cuda_state *st = (cuda_state *)be->impl;
    if (st) {
        if (st->captures)
            mn_log(MN_LOG_INFO, "cuda: %d pass graphs (%llu captured, %llu evicted), %llu replays",
                   mn_graph_cache_count(&st->gc), (unsigned long long)st->captures,
                   (unsigned long long)st->evictions, (unsigned long long)st->replays);
        for (int i = 0; i < N_STEPS; i++) /* asked for by name: printed whatever the log level */
            if (st->step_n[i])
                fprintf(stderr, "minions cuda profile: %-11s %8llu launches %10.3f ms %8.2f us each\n", step_name[i],
                        (unsigned long long)st->step_n[i], st->step_ms[i], 1e3 * st->step_ms[i] / st->step_n[i]);
        for (int i = 0; i < 2; i++)
            if (st->ev[i])
                cudaEventDestroy(st->ev[i]);
        drop_graphs(st);
        for (int i = 0; i < st->n_allocs; i++)
            cudaFree(st->allocs[i]);
        mn_free(st->allocs);
        cudaFreeHost(st->h_pack);
        cudaFreeHost(st->h_draws);
        if (st->stream)
            cudaStreamDestroy(st->stream);
        mn_free(st->layers);
        mn_gpu_layout_free(&st->h);
        mn_free(st);
    }
    mn_kv_pool_free(be->kv);
    mn_free(be);
}

/* Where each array of the layout starts in the pack, for max_tokens T. */
static size_t pack_tokens_at(size_t T) { return T * sizeof(mn_gpu_tok); }
static size_t pack_rows_at(size_t T) { return pack_tokens_at(T) + T * sizeof(int32_t); }
static size_t pack_off_at(size_t T) { return pack_rows_at(T) + T * sizeof(uint32_t); }
static size_t pack_tables_at(size_t T) { return pack_off_at(T) + T * sizeof(uint32_t); }

/* A pack with room for cap_tables block ids, host and device, replacing the old one (whose device
 * buffer stays in allocs until the backend is freed: tables grow a few times at most). */
static mn_status grow_pack(cuda_state *st, size_t T, size_t cap_tables, mn_err *err)
{
    size_t bytes = pack_tables_at(T) + cap_tables * sizeof(uint32_t);
    void *h = NULL, *d = NULL;
    CUDA_TRY(cudaHostAlloc(&h, bytes, cudaHostAllocDefault));
    mn_status s = dalloc(st, bytes, &d, err);
    if (s != MN_OK) {
        cudaFreeHost(h);
        return s;
    }
    cudaFreeHost(st->h_pack);
    st->h_pack = (uint8_t *)h;
    st->d_pack = (uint8_t *)d;
    st->pack_tables = cap_tables;
    st->d_tok = (mn_gpu_tok *)d;
    st->d_tokens = (int32_t *)(st->d_pack + pack_tokens_at(T));
    st->d_out_rows = (uint32_t *)(st->d_pack + pack_rows_at(T));
    st->d_table_off = (uint32_t *)(st->d_pack + pack_off_at(T));
    st->d_tables = (uint32_t *)(st->d_pack + pack_tables_at(T));
    drop_graphs(st); /* they hold the old buffer */
    return MN_OK;
}

/* Room for the batch's block tables in the layout, host and pack. */
static mn_status reserve_tables(cuda_state *st, const mn_batch *batch, mn_err *err)
{
    mn_status s = mn_gpu_layout_reserve(&st->h, batch, err);
    if (s != MN_OK || st->h.cap_tables <= st->pack_tables)
        return s;
    return grow_pack(st, st->cfg_max_tokens, st->h.cap_tables, err);
}

/* The layout of the pass st->h holds, copied into the pack and up in one copy on q. */
static mn_status upload_layout(cuda_state *st, uint32_t n_seqs, cudaStream_t q, mn_err *err)
{
    size_t T = st->cfg_max_tokens;
    const mn_gpu_host_layout *h = &st->h;
    memcpy(st->h_pack, h->tok, h->T * sizeof *h->tok);
    memcpy(st->h_pack + pack_tokens_at(T), h->tokens, h->T * sizeof *h->tokens);
    memcpy(st->h_pack + pack_rows_at(T), h->out_rows, h->n_out * sizeof *h->out_rows);
    memcpy(st->h_pack + pack_off_at(T), h->table_off, n_seqs * sizeof *h->table_off);
    memcpy(st->h_pack + pack_tables_at(T), h->tables, h->n_tables * sizeof *h->tables);
    CUDA_TRY(cudaMemcpyAsync(st->d_pack, st->h_pack, pack_tables_at(T) + h->n_tables * sizeof *h->tables,
                             cudaMemcpyHostToDevice, q));
    return MN_OK;
}

/* The graph of a pass of T tokens and n_out logits rows: cached, else captured now if the shape
 * recurs (gpu/graph_cache.h). NULL for plain launches: a shape's first pass, or capture failed
 * (graphs are then off for this backend, said once). */
static cudaGraphExec_t graph_for(cuda_state *st, mn_gpu_attn a, uint32_t T, uint32_t n_out)
{
    int i = 0;
    bool evict = false;
    mn_graph_verdict v = mn_graph_cache_pass(&st->gc, T, n_out, &i, &evict);
    if (v != MN_GRAPH_CAPTURE)
        return v == MN_GRAPH_REPLAY ? st->graph[i] : NULL;
    if (evict) {
        cudaGraphExecDestroy(st->graph[i]);
        st->graph[i] = NULL;
        st->evictions++;
    }
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        mn_gpu_pass(&device_exec, st, &st->model, &st->bufs, a, st->d_tokens, T, st->d_out_rows, n_out, st->d_logits);
        e = cudaStreamEndCapture(st->stream, &graph);
    }
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph)
        cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        mn_log(MN_LOG_WARN, "cuda: graph capture failed (%s): plain launches from now on", cudaGetErrorString(e));
        cudaGetLastError(); /* clear it */
        mn_graph_cache_drop(&st->gc, i);
        st->graphs = false;
        return NULL;
    }
    st->graph[i] = exec;
    st->captures++;
    return exec;
}

/* The logits rows down to the host, but those of sequences that want only their argmax: each run
 * of consecutive rows still wanted in one copy on q. */
static mn_status copy_logits(cuda_state *st, const mn_batch *batch, float *logits, uint32_t n_vocab, cudaStream_t q,
                             mn_err *err)
{
    size_t row = 0, from = 0, run = 0; /* rows [from, from + run) wanted and not yet copied */
    for (uint32_t i = 0; i <= batch->n_seqs; i++) {
        const mn_batch_seq *s = i < batch->n_seqs ? &batch->seqs[i] : NULL;
        size_t n = s ? mn_batch_seq_rows(s) : 0;
        if (s && !(batch->pick && s->pick_only)) {
            from = run ? from : row;
            run += n;
        } else if (run) {
            size_t at = from * n_vocab, bytes = run * n_vocab * sizeof(float);
            CUDA_TRY(cudaMemcpyAsync(logits + at, st->d_logits + at, bytes, cudaMemcpyDeviceToHost, q));
            run = 0;
        }
        row += n;
    }
    return MN_OK;
}

/* The rows of sequences with a draw into st->h_draws; how many. */
static uint32_t gather_draws(cuda_state *st, const mn_batch *batch)
{
    uint32_t n = 0, row = 0;
    for (uint32_t i = 0; i < batch->n_seqs; i++) {
        const mn_batch_seq *s = &batch->seqs[i];
        uint32_t rows = mn_batch_seq_rows(s);
        for (uint32_t j = 0; s->draw && j < rows; j++)
            st->h_draws[n++] = mn_gpu_draw{row + j, s->draw->temperature, s->draw->top_p, s->draw->u[j]};
        row += rows;
    }
    return n;
}

/* Each row's token into batch->pick: every row's argmax, then the draws over theirs, MN_G_DRAW_ROWS
 * rows a launch (the scratch's). */
static mn_status pick(cuda_state *st, const mn_batch *batch, uint32_t n_out, uint32_t n_vocab, cudaStream_t q,
                      mn_err *err)
{
    LAUNCH(st, S_ARGMAX, (mn_k_argmax<<<n_out, MN_G_ARGMAX_THREADS, 0, q>>>(st->d_logits, n_vocab, st->d_pick, n_out)));
    uint32_t n = gather_draws(st, batch);
    if (n && !st->d_weights) {
        void *d = NULL;
        mn_status s = dalloc(st, (size_t)MN_G_DRAW_ROWS * n_vocab * sizeof(uint64_t), &d, err);
        if (s != MN_OK)
            return s;
        st->d_weights = (uint64_t *)d;
    }
    if (n)
        CUDA_TRY(cudaMemcpyAsync(st->d_draws, st->h_draws, n * sizeof *st->h_draws, cudaMemcpyHostToDevice, q));
    for (uint32_t at = 0; at < n; at += MN_G_DRAW_ROWS) {
        uint32_t rows = n - at < MN_G_DRAW_ROWS ? n - at : MN_G_DRAW_ROWS;
        LAUNCH(st, S_DRAW, (mn_k_draw<<<rows, MN_G_DRAW_THREADS, 0, q>>>(st->d_logits, n_vocab, st->d_draws + at,
                                                                         st->d_weights, st->d_pick)));
    }
    CUDA_TRY(cudaMemcpyAsync(batch->pick, st->d_pick, n_out * sizeof(int32_t), cudaMemcpyDeviceToHost, q));
    return MN_OK;
}

/* What cuda_forward queues on the stream, in order; it stops at the first failure. */
static mn_status queue_pass(mn_backend *be, cuda_state *st, const mn_batch *batch, float *logits, mn_err *err)
{
    const mn_hparams *hp = &be->model->hp;
    uint32_t T = st->h.T, n_out = st->h.n_out;
    cudaStream_t q = st->stream;
    mn_status s;
    if ((s = upload_layout(st, batch->n_seqs, q, err)) != MN_OK)
        return s;
    /* on the device a layer's K (and V) is an array of its own, its blocks one after another */
    mn_gpu_attn a = {st->d_tok, st->d_tables, st->d_table_off, NULL, NULL,
                     (size_t)be->kv->block_size * be->kv->kv_dim, be->kv->block_size, be->kv->kv_dim,
                     hp->head_dim, hp->n_heads, hp->n_kv_heads, hp->rope_dim, hp->rope_base,
                     be->kv->type == MN_KV_F16};
    cudaGraphExec_t g = st->graphs ? graph_for(st, a, T, n_out) : NULL;
    if (g) {
        CUDA_TRY(cudaGraphLaunch(g, q));
        st->replays++;
    } else {
        mn_gpu_pass(&device_exec, st, &st->model, &st->bufs, a, st->d_tokens, T, st->d_out_rows, n_out, st->d_logits);
    }
    /* launches after the graph's (which then serves every kind of pass) */
    if (batch->pick && (s = pick(st, batch, n_out, hp->n_vocab, q, err)) != MN_OK)
        return s;
    CUDA_TRY(cudaGetLastError());
    return copy_logits(st, batch, logits, hp->n_vocab, q, err);
}

/* A pass: the layout's upload, the kernels (a graph's replay or launches), the picks and logits
 * down, then the stream's end. A failure after anything was queued waits for the stream before it
 * returns: the next pass rewrites the pinned buffers the queued copies may still be reading. */
static mn_status cuda_forward(mn_backend *be, const mn_batch *batch, float *logits, mn_err *err)
{
    cuda_state *st = (cuda_state *)be->impl;
    mn_status s = reserve_tables(st, batch, err);
    if (s != MN_OK)
        return s;
    mn_gpu_layout(batch, &st->h);
    if ((s = queue_pass(be, st, batch, logits, err)) != MN_OK) {
        (void)cudaStreamSynchronize(st->stream);
        (void)cudaGetLastError();
        return s;
    }
    CUDA_TRY(cudaStreamSynchronize(st->stream));
    return MN_OK;
}

static const mn_backend_ops cuda_ops = {"cuda", cuda_forward, cuda_free, true, NULL};

/* Weights, KV, activations and the layout on the device. */
static mn_status setup(mn_backend *be, cuda_state *st, mn_err *err)
{
    const mn_model *m = be->model;
    const mn_hparams *hp = &m->hp;
    const mn_backend_config *cfg = &be->cfg;
    uint32_t T = cfg->max_tokens, qdim = hp->n_heads * hp->head_dim, kvdim = hp->n_kv_heads * hp->head_dim;
    mn_status s;
    CUDA_TRY(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    if ((s = mn_kv_pool_new_tables(hp->n_layers, kvdim, cfg->kv_block_size, cfg->kv_blocks, cfg->kv_type, &be->kv,
                                   err)))
        return s;
    if ((s = mn_gpu_layout_init(&st->h, T, err)))
        return s;
    st->layers = (mn_gpu_layer *)mn_calloc(hp->n_layers, sizeof *st->layers);
    if (!st->layers)
        return mn_fail(err, MN_NOMEM, "cuda: out of host memory");
    size_t cache = (size_t)cfg->kv_blocks * cfg->kv_block_size * kvdim * mn_kv_elem_bytes(cfg->kv_type);
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const mn_layer *L = &m->layers[l];
        mn_gpu_layer *D = &st->layers[l];
        void *k = NULL, *v = NULL;
        if ((s = upload_floats(st, L->attn_norm, hp->dim, &D->attn_norm, err)) ||
            (s = upload_floats(st, L->ffn_norm, hp->dim, &D->ffn_norm, err)) ||
            (s = upload_weight(st, &L->wq, &D->wq, err)) || (s = upload_weight(st, &L->wk, &D->wk, err)) ||
            (s = upload_weight(st, &L->wv, &D->wv, err)) || (s = upload_weight(st, &L->wo, &D->wo, err)) ||
            (s = upload_weight(st, &L->w_gate, &D->w_gate, err)) || (s = upload_weight(st, &L->w_up, &D->w_up, err)) ||
            (s = upload_weight(st, &L->w_down, &D->w_down, err)) || (s = dalloc(st, cache, &k, err)) ||
            (s = dalloc(st, cache, &v, err)))
            return s;
        D->k = k;
        D->v = v;
    }
    st->model.hp = *hp;
    st->model.layers = st->layers;
    if ((s = upload_weight(st, &m->token_embd, &st->model.embd, err)) ||
        (s = upload_weight(st, &m->output, &st->model.output, err)) ||
        (s = upload_floats(st, m->output_norm, hp->dim, &st->model.output_norm, err)))
        return s;
    struct {
        float **p;
        size_t width;
    } bufs[] = {{&st->bufs.x, hp->dim},   {&st->bufs.xb, hp->dim},   {&st->bufs.q, qdim},
                {&st->bufs.att, qdim},    {&st->bufs.ffn, hp->n_ff}, {&st->d_logits, hp->n_vocab}};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        void *d = NULL;
        if ((s = dalloc(st, (size_t)T * bufs[i].width * sizeof(float), &d, err)))
            return s;
        *bufs[i].p = (float *)d;
    }
    void *d = NULL;
    if ((s = dalloc(st, (size_t)T * sizeof(int32_t), &d, err)))
        return s;
    st->d_pick = (int32_t *)d;
    if ((s = dalloc(st, (size_t)T * sizeof(mn_gpu_draw), &d, err)))
        return s;
    st->d_draws = (mn_gpu_draw *)d;
    CUDA_TRY(cudaMallocHost((void **)&st->h_draws, (size_t)T * sizeof(mn_gpu_draw)));
    st->cfg_max_tokens = T;
    if ((s = grow_pack(st, T, 0, err)))
        return s;
    const char *graphs = getenv("MINIONS_CUDA_GRAPHS"), *profile = getenv("MINIONS_CUDA_PROFILE");
    st->profile = profile && strcmp(profile, "0") != 0;
    st->graphs = !st->profile && (!graphs || strcmp(graphs, "0") != 0);
    const char *wide = getenv("MINIONS_CUDA_WIDE"), *pdl = getenv("MINIONS_CUDA_PDL"), *stage = getenv("MINIONS_CUDA_STAGE");
    st->wide = !wide || strcmp(wide, "0") != 0;
    st->stage = !stage ? STAGE_PROJ : !strcmp(stage, "0") ? STAGE_NONE : !strcmp(stage, "all") ? STAGE_ALL : STAGE_PROJ;
    int dev = 0, major = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    st->pdl = major >= 9 && !st->profile && (!pdl || strcmp(pdl, "0") != 0); /* profiling times kernels one by one */
    if (st->profile)
        for (int i = 0; i < 2; i++)
            CUDA_TRY(cudaEventCreate(&st->ev[i]));
    return MN_OK;
}

extern "C" mn_status mn_cuda_backend_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out,
                                         mn_err *err)
{
    mn_status s = probe(err);
    if (s != MN_OK)
        return s;
    if ((s = mn_gpu_check_config(m, cfg, "cuda", err)) != MN_OK)
        return s;
    mn_backend *be = (mn_backend *)mn_calloc(1, sizeof *be);
    cuda_state *st = (cuda_state *)mn_calloc(1, sizeof *st);
    if (!be || !st) {
        mn_free(be);
        mn_free(st);
        return mn_fail(err, MN_NOMEM, "cuda: out of memory");
    }
    be->ops = &cuda_ops;
    be->model = m;
    be->cfg = *cfg;
    be->impl = st;
    if ((s = setup(be, st, err)) != MN_OK) {
        cuda_free(be);
        return s;
    }
    static int said; /* tools build several backends; one line is enough */
    cudaDeviceProp prop;
    if (!said++ && cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        mn_log(MN_LOG_INFO, "backend: cuda, %s (%zu MiB)", prop.name, prop.totalGlobalMem >> 20);
    *out = be;
    return MN_OK;
}

/* ---- draws from host rows, for tests and timing ------------------------------------------------ */

/* Frees what mn_cuda_draw_rows allocated, whichever step it failed at. */
typedef struct draw_bufs {
    float *logits;
    mn_gpu_draw *draws;
    uint64_t *weights;
    int32_t *pick;
    cudaEvent_t start, stop;
} draw_bufs;

static mn_status draw_rows(draw_bufs *b, const float *rows, uint32_t n_rows, uint32_t n, const float *temperature,
                           const float *top_p, const double *u, int32_t *pick, double *seconds, mn_err *err)
{
    mn_status s = probe(err);
    if (s != MN_OK)
        return s;
    if (n_rows == 0 || n_rows > MN_G_DRAW_ROWS || n == 0)
        return mn_fail(err, MN_INVALID, "cuda draw: %u rows of %u (1..%u rows)", n_rows, n, MN_G_DRAW_ROWS);
    mn_gpu_draw h[MN_G_DRAW_ROWS];
    for (uint32_t r = 0; r < n_rows; r++)
        h[r] = mn_gpu_draw{r, temperature[r], top_p[r], u[r]};
    CUDA_TRY(cudaMalloc((void **)&b->logits, (size_t)n_rows * n * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&b->draws, n_rows * sizeof(mn_gpu_draw)));
    CUDA_TRY(cudaMalloc((void **)&b->weights, (size_t)n_rows * n * sizeof(uint64_t)));
    CUDA_TRY(cudaMalloc((void **)&b->pick, n_rows * sizeof(int32_t)));
    CUDA_TRY(cudaEventCreate(&b->start));
    CUDA_TRY(cudaEventCreate(&b->stop));
    CUDA_TRY(cudaMemcpy(b->logits, rows, (size_t)n_rows * n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemcpy(b->draws, h, n_rows * sizeof(mn_gpu_draw), cudaMemcpyHostToDevice));
    mn_k_argmax<<<n_rows, MN_G_ARGMAX_THREADS>>>(b->logits, n, b->pick, n_rows);
    CUDA_TRY(cudaEventRecord(b->start));
    mn_k_draw<<<n_rows, MN_G_DRAW_THREADS>>>(b->logits, n, b->draws, b->weights, b->pick);
    CUDA_TRY(cudaGetLastError());
    CUDA_TRY(cudaEventRecord(b->stop));
    CUDA_TRY(cudaMemcpy(pick, b->pick, n_rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
    float ms = 0.0f;
    CUDA_TRY(cudaEventElapsedTime(&ms, b->start, b->stop));
    *seconds = ms * 1e-3;
    return MN_OK;
}

extern "C" mn_status mn_cuda_draw_rows(const float *rows, uint32_t n_rows, uint32_t n, const float *temperature,
                                       const float *top_p, const double *u, int32_t *pick, double *seconds,
                                       mn_err *err)
{
    draw_bufs b = {};
    mn_status s = draw_rows(&b, rows, n_rows, n, temperature, top_p, u, pick, seconds, err);
    cudaFree(b.logits);
    cudaFree(b.draws);
    cudaFree(b.weights);
    cudaFree(b.pick);
    if (b.start)
        cudaEventDestroy(b.start);
    if (b.stop)
        cudaEventDestroy(b.stop);
    return s;
}
