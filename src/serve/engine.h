/* engine.h - minionsd's engine: the model, the actors on one libevent loop, the sockets.
 *
 * mn_engine_new loads the model, creates the backend, the compute worker, the actors (net, intake,
 * kvmem, verifier), the client listeners and the admin socket. mn_engine_run runs the loop until a
 * drain (admin `drain`, SIGTERM or SIGINT) has finished every accepted request and flushed every
 * reply; it returns MN_OK then. A drain that outlives drain_timeout_s, or a second SIGTERM/SIGINT,
 * closes every client connection (cancelling what they still wait for), so a client that stopped
 * reading cannot hold the daemon up. mn_engine_free releases everything.
 *
 * Thread: the calling thread becomes the loop thread; all three calls on it. Errors: start-up
 * failures come back as a status and a message (the caller exits); after start-up a failure fails
 * one request, never the engine.
 */
#ifndef MN_ENGINE_H
#define MN_ENGINE_H

#include <stdint.h>

#include "util/status.h"

typedef struct mn_engine_config {
    const char *model_path;
    const char *host;          /* TCP listen address (default 127.0.0.1) */
    int port;                  /* 0: an ephemeral port; < 0: no TCP listener */
    const char *unix_path;     /* Unix socket path, or NULL */
    const char *admin_addr;    /* nanomsg address (ipc://PATH or tcp://127.0.0.1:N), or NULL */
    int n_threads;             /* compute threads; 0: all cores */
    uint32_t max_batch;        /* most running sequences (live: batch.max_sequences) */
    uint32_t kv_blocks;        /* KV blocks of 16 tokens; 0: from kv_mib, or max_batch full contexts */
    uint32_t kv_mib;           /* KV budget in MiB when kv_blocks is 0 (0: max_batch full contexts) */
    uint32_t max_queue;        /* most requests waiting for admission before `busy` */
    uint32_t max_line;         /* longest request line in bytes */
    uint32_t max_tokens_limit; /* largest max_tokens a request may ask for */
    uint32_t out_high;         /* bytes of unsent output that throttle a connection (resumes at 1/4) */
    uint32_t drain_timeout_s;  /* a drain still running after this long closes every connection (0: never) */
} mn_engine_config;

mn_engine_config mn_engine_defaults(void);

typedef struct mn_engine mn_engine;

mn_status mn_engine_new(const mn_engine_config *cfg, mn_engine **out, mn_err *err);
/* The TCP port actually bound (useful with port 0), or -1. */
int mn_engine_port(const mn_engine *e);
mn_status mn_engine_run(mn_engine *e, mn_err *err);
void mn_engine_free(mn_engine *e);

#endif
