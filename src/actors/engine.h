/* engine.h - minionsd's engine: the model, its backend and compute worker, the actors on one
 * libevent loop, the sockets, the signals.
 *
 * mn_engine_new loads the model, creates the backend (runtime/registry.h), its KV pool and compute
 * worker, the actors (client, intake, kvmem, verifier, admin; http with an HTTP address) and their
 * mailboxes, the listeners and the admin socket. With drafts it also loads each draft model (its vocabulary checked against the
 * target's), gives it a backend and a KV pool as large as the target's in positions, and creates a
 * drafter actor per draft, the voter and the length tuner. On the CPU, the target and the drafts
 * share one compute worker and one thread pool (a round drafts, then verifies, on all cores),
 * unless draft_threads splits the cores: then the model drafters have their own worker and pool of
 * draft_threads threads, the target the rest, and with the pipeline on drafting and verification
 * run at once (two busy pools must never share cores: each spins while it waits).
 * mn_engine_run runs the loop until a drain (admin `drain`, SIGTERM, SIGINT or SIGHUP) has
 * finished every accepted request and written every reply; it returns MN_OK then. A drain that
 * outlives drain_timeout_s, or a second such signal, closes every client connection
 * (cancelling what they still wait for), so a client that stopped reading cannot hold the daemon up.
 * SIGHUP drains like SIGTERM: a service manager's hang-up must not lose requests silently, and this
 * daemon has no configuration file or log file to reload (it logs to stderr). mn_engine_free
 * releases everything.
 *
 * Thread: the calling thread becomes the loop thread; all calls on it. Errors: start-up failures
 * come back as a status and a message (the caller exits); after start-up a failure fails one
 * request, never the engine.
 */
#ifndef MN_ENGINE_H
#define MN_ENGINE_H

#include <stdint.h>

#include "runtime/backend.h"
#include "spec/tuner.h"
#include "spec/weights.h"
#include "util/status.h"

#define MN_ENGINE_MAX_DRAFTS MN_WEIGHTS_MAX_DRAFTERS

/* The most KV blocks a pool takes (--kv-blocks; --kv-mib past it is refused, the default clamped). */
#define MN_ENGINE_MAX_KV_BLOCKS (1u << 24)

typedef struct mn_engine_config {
    const char *model_path;
    mn_backend_kind backend;   /* cpu, cuda or auto */
    int draft_backend;         /* the model drafts' mn_backend_kind; -1: the target's */
    const char *host;          /* TCP listen address (default 127.0.0.1) */
    int port;                  /* 0: an ephemeral port; < 0: no TCP listener */
    const char *unix_path;     /* Unix socket path, or NULL */
    const char *http_host;     /* --http: the HTTP API's numeric listen address, or NULL: none */
    int http_port;             /* its port (0: ephemeral) */
    const char *api_key;       /* the HTTP API wants `Authorization: Bearer KEY` (NULL: no key) */
    uint32_t http_timeout_s;   /* an idle or stuck HTTP connection is closed after this long */
    uint32_t idle_timeout_s;   /* a line connection with no request in flight and no whole line for
                                * this long is closed (0: never) */
    const char *admin_addr;    /* nanomsg address (ipc://PATH or tcp://127.0.0.1:N), or NULL */
    unsigned socket_mode;      /* permissions of the Unix and ipc socket files (default 0600) */
    int n_threads;             /* compute threads; 0: all cores */
    uint32_t max_batch;        /* most running sequences (live: batch.max_sequences) */
    uint32_t kv_blocks;        /* KV blocks of 16 tokens; 0: from kv_mib, or max_batch full contexts
                                * capped at a quarter of physical memory */
    uint32_t kv_mib;           /* KV budget in MiB when kv_blocks is 0 (0: max_batch full contexts) */
    mn_kv_type kv_type;        /* the KV cache's elements, the target's and the drafts' (mem/kv.h) */
    uint32_t max_queue;        /* most requests waiting for admission before `busy` */
    uint32_t max_line;         /* longest request line in bytes */
    uint32_t max_tokens_limit; /* largest max_tokens a request may ask for */
    uint32_t out_high;         /* bytes of unsent output that throttle a connection (resumes at 1/4) */
    uint32_t drain_timeout_s;  /* a drain still running after this long closes every connection (0: never) */
    /* speculation */
    const char *drafts[MN_ENGINE_MAX_DRAFTS]; /* --draft: GGUF paths or "ngram", in priority order */
    uint32_t n_drafts;         /* 0: plain decoding, exactly as without speculation */
    uint32_t spec_length;      /* tokens drafted per verification (live: spec.length) */
    int weights_mode;          /* mn_weights_mode (live: spec.weights) */
    mn_weights_params weights; /* the vote's weight rule (live: spec.reward_threshold, ...) */
    float skip_below;          /* live: spec.skip_below (voter.h) */
    bool cascade;              /* live: spec.cascade (voter.h) */
    uint32_t ngram_cache;      /* tokens of the n-gram drafter's shared cache (spec/ngram.h); 0: none */
    bool prefix_cache;         /* keep finished requests' KV blocks for later ones with the same start
                                * (mem/kv.h; default true) */
    const char *events_addr;   /* --events: nanomsg PUB address, or NULL */
    const char *step_trace;    /* --step-trace: the file that gets a line per target step
                                * (verifier.h), or NULL */
    int tuner_mode;            /* mn_tuner_mode (live: tuner.mode) */
    mn_tuner_params tuner;     /* the length tuner's rule (live: tuner.s_min, ...) */
    bool pipeline;             /* live: pipeline.enabled (verifier.h) */
    int draft_threads;         /* of n_threads, the model drafters' own (0: they share the target's;
                                * < 0: the default, a quarter of n_threads, at least 1, with the
                                * pipeline and a draft model; else 0) */
} mn_engine_config;

mn_engine_config mn_engine_defaults(void);

typedef struct mn_engine mn_engine;

mn_status mn_engine_new(const mn_engine_config *cfg, mn_engine **out, mn_err *err);
/* The TCP port actually bound (useful with port 0), or -1. */
int mn_engine_port(const mn_engine *e);
/* The HTTP port actually bound, or -1 without --http. */
int mn_engine_http_port(const mn_engine *e);
mn_status mn_engine_run(mn_engine *e, mn_err *err);
void mn_engine_free(mn_engine *e);

#endif
