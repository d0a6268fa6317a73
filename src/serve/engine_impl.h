/* engine_impl.h - the engine's layout, shared by the actors that implement it (serve/, net/).
 *
 * Every actor below runs on the engine's single loop thread; they talk only through their
 * mailboxes (messages listed in mn_msg_type). Model work goes to the compute worker, whose
 * completions come back to the verifier's mailbox.
 */
#ifndef MN_ENGINE_IMPL_H
#define MN_ENGINE_IMPL_H

#include <event2/event.h>
#include <stdbool.h>

#include "model/model.h"
#include "runtime/backend.h"
#include "runtime/mailbox.h"
#include "runtime/worker.h"
#include "serve/engine.h"
#include "serve/request.h"

typedef enum mn_msg_type {
    MN_MSG_ADMIT,     /* net -> intake: a parsed request */
    MN_MSG_ENQUEUE,   /* intake -> kvmem: tokenized, wants KV and a batch slot */
    MN_MSG_START,     /* kvmem -> verifier: admitted with KV for its known tokens */
    MN_MSG_FINISH,    /* verifier -> kvmem: finished or cancelled; free its KV */
    MN_MSG_DONE,      /* intake/kvmem -> net: write the done or error line, free the request */
    MN_MSG_FLUSH,     /* verifier -> net: stream the new text */
    MN_MSG_GROW,      /* verifier -> kvmem: KV for the next step (mn_kv_grow) */
    MN_MSG_GROWN,     /* kvmem -> verifier: the same message, answered */
    MN_MSG_STEP_DONE, /* worker -> verifier: a step job completed */
    MN_MSG_KICK,      /* anyone -> kvmem/verifier: look again (cancel, unthrottle, config change) */
} mn_msg_type;

/* A kick: one static message per target actor, posted only when not already queued. */
typedef struct mn_kick {
    mn_msg msg;
    bool queued;
} mn_kick;

#define MN_STATS_SECONDS 10 /* tok/s is averaged over this window */

typedef struct mn_stats {
    uint64_t requests_done;      /* finished with a done line */
    uint64_t requests_failed;    /* ended with an error line */
    uint64_t tokens_generated;
    uint64_t prompt_tokens;
    uint64_t steps;              /* target passes */
    uint64_t preemptions;
    uint64_t per_second[MN_STATS_SECONDS]; /* tokens generated in each of the last seconds */
    int64_t second;              /* the second per_second[second % N] counts */
} mn_stats;

typedef struct mn_kvmem mn_kvmem;
typedef struct mn_verifier mn_verifier;
typedef struct mn_net mn_net;
typedef struct mn_admin mn_admin;

struct mn_engine {
    mn_engine_config cfg;
    struct event_base *base;
    struct event *sigterm, *sigint;
    struct event *drain_timer;   /* armed when a drain starts (cfg.drain_timeout_s > 0) */
    mn_model *model;
    mn_backend *be;
    mn_worker *worker;
    mn_mailbox *intake_mb, *kvmem_mb, *verifier_mb, *net_mb;
    mn_kvmem *kvmem;
    mn_verifier *verifier;
    mn_net *net;
    mn_admin *admin;
    mn_kick kvmem_kick, verifier_kick;
    uint32_t max_batch;          /* live setting: batch.max_sequences */
    uint32_t max_batch_cap;      /* what the buffers were sized for */
    uint32_t max_running;        /* admitted requests, paused ones included (max_batch_cap + max_queue_cap) */
    uint32_t max_queue;          /* live setting: queue.max */
    uint32_t max_queue_cap;      /* what kvmem's queue was sized for */
    uint64_t live_requests;      /* accepted and not yet answered */
    bool draining;
    mn_stats stats;
};

/* Ask kvmem (admit, drop cancelled) or the verifier (schedule) to look again; a kick already
 * queued is not posted twice. */
void mn_engine_kick_kvmem(mn_engine *e);
void mn_engine_kick_verifier(mn_engine *e);
/* The actor received its kick: it may be posted again. */
static inline void mn_kick_taken(mn_kick *k) { k->queued = false; }
/* Count generated tokens into the stats. */
void mn_engine_count_tokens(mn_engine *e, uint32_t n);
/* Tokens per second over the last MN_STATS_SECONDS. */
double mn_engine_tok_per_s(mn_engine *e);
/* Start draining: no new requests; the loop ends once the last reply is flushed. */
void mn_engine_drain(mn_engine *e);
/* Called by net when a request has been answered and its connection output may be flushed. */
void mn_engine_check_drained(mn_engine *e);

/* Actors (one .c each): create, handle, free. */
void mn_intake_handle(void *engine, mn_msg *m);

mn_status mn_kvmem_new(mn_engine *e, mn_kvmem **out, mn_err *err);
void mn_kvmem_handle(void *kvmem, mn_msg *m);
void mn_kvmem_free(mn_kvmem *k);
uint32_t mn_kvmem_queued(const mn_kvmem *k);
uint32_t mn_kvmem_running(const mn_kvmem *k);

mn_status mn_verifier_new(mn_engine *e, mn_verifier **out, mn_err *err);
void mn_verifier_handle(void *verifier, mn_msg *m);
void mn_verifier_free(mn_verifier *v);

/* True when r's client is not reading: r keeps its KV but neither runs nor counts against the batch. */
bool mn_req_paused(const mn_req *r);

/* The KV request of one verifier step: sequences and the length each must reach. */
typedef struct mn_kv_grow {
    mn_msg msg;          /* MN_MSG_GROW, answered as MN_MSG_GROWN */
    mn_req **reqs;       /* [n] */
    uint32_t *need;      /* [n] positions to make addressable */
    uint32_t n;
} mn_kv_grow;

#endif
