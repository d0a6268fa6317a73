/* request.h - one generation request: its state machine and its text.
 *
 * The request is a message (req->msg) that travels: owner -> intake -> kvmem -> verifier -> kvmem
 * -> owner, and its owner (the client actor, or the http actor) frees it after writing its final
 * answer. Every actor runs on the engine's loop thread, so the fields need no lock; each says which
 * actor writes it. The compute workers touch only the KV lengths, the tokens, the sampler, the
 * drafts, the step's verdict (spec.kept, spec.n_kept, kept_lp) and a drafter's own part of a round,
 * and only while the job that holds the request is in flight: its step (phase VERIFYING) or its
 * round (DRAFTING).
 *
 * State machine (mn_req_event is the only code that changes state; illegal events are refused):
 *
 *   NEW --queued--> QUEUED --admitted--> ADMITTED --produced--> RUNNING
 *                     ^                     |  ^                 |  ^
 *                     |                throttled resumed    throttled resumed
 *                     |                     v  |                 v  |
 *                     |                    PAUSED <--------------+--+
 *                     |                     |
 *                     +--- PREEMPTED <--preempted-- (ADMITTED, RUNNING or PAUSED)
 *   PREEMPTED --admitted--> ADMITTED (its tokens are recomputed, bit for bit)
 *   any state --finished--> FINISHED (then exactly one final answer, written by its owner: client or http)
 *
 * ADMITTED means it holds KV for its whole length and its known tokens are being computed; RUNNING,
 * that it has produced a token since. PAUSED requests keep their KV but neither run nor take a batch
 * slot; kvmem may preempt them to admit others. A throttled request that is still queued stays
 * QUEUED (it is skipped at admission) and is admitted straight into PAUSED if its turn comes.
 */
#ifndef MN_REQUEST_H
#define MN_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/msg.h"
#include "mem/kv.h"
#include "model/sampler.h"
#include "model/tokenizer.h"
#include "net/proto.h"
#include "runtime/mailbox.h"
#include "spec/weights.h"
#include "util/clock.h"

#define MN_SPEC_MAX_LEN MN_PROTO_MAX_SPEC_LEN /* the longest draft of one verification */
#define MN_MAX_DRAFTERS MN_WEIGHTS_MAX_DRAFTERS

typedef enum mn_req_state {
    MN_REQ_NEW,        /* parsed, on its way to intake */
    MN_REQ_QUEUED,     /* tokenized, in kvmem's pending queue */
    MN_REQ_ADMITTED,   /* holds KV; its known tokens are being computed */
    MN_REQ_RUNNING,    /* producing tokens */
    MN_REQ_PAUSED,     /* holds KV, its client does not read: neither runs nor takes a batch slot */
    MN_REQ_PREEMPTED,  /* lost its KV to others; queued again, to be recomputed from its tokens */
    MN_REQ_FINISHED,   /* on its way to its final line */
} mn_req_state;

typedef enum mn_req_ev {
    MN_REQ_EV_QUEUED,     /* intake: NEW -> QUEUED */
    MN_REQ_EV_ADMITTED,   /* kvmem: QUEUED/PREEMPTED -> ADMITTED (PAUSED when its client is throttled) */
    MN_REQ_EV_PRODUCED,   /* verifier: a token was sampled (ADMITTED -> RUNNING) */
    MN_REQ_EV_THROTTLED,  /* client: its connection stopped reading (ADMITTED/RUNNING -> PAUSED) */
    MN_REQ_EV_RESUMED,    /* client: reading again (PAUSED -> where it was) */
    MN_REQ_EV_PREEMPTED,  /* kvmem: its KV was released (ADMITTED/RUNNING/PAUSED -> PREEMPTED) */
    MN_REQ_EV_FINISHED,   /* whoever holds it: done, failed or cancelled (-> FINISHED) */
} mn_req_ev;

/* Where a running request is in the verifier's cycle (r->phase; the verifier writes it). A request
 * is in at most one of the round out at the voter and the step out on the worker, so the drafters'
 * jobs and the target's never touch it at once, and every hand-off happens on the loop thread. */
typedef enum mn_req_phase {
    MN_PHASE_IDLE,      /* wants its next step: a prompt chunk, a plain step, or drafts first */
    MN_PHASE_DRAFTING,  /* in the round out at the voter */
    MN_PHASE_DRAFTED,   /* its voted draft waits in the pool for a step */
    MN_PHASE_VERIFYING, /* in the step out on the worker */
} mn_req_phase;

/* One drafter's view of a request. Its KV positions [0, kv.len) hold toks[0, prop_at) followed by
 * prop[0, kv.len - prop_at): what it fed itself while proposing. The drafter rolls back to the
 * prefix the target kept at its next draft; kvmem reserves and releases the blocks, and at
 * admission sets kv.len = prop_at to what the pool's prefix cache gave (no proposal yet). */
typedef struct mn_req_draft {
    mn_kv_seq kv;                   /* model drafters (unused by the n-gram one) */
    int32_t prop[MN_SPEC_MAX_LEN];  /* its latest proposal */
    uint32_t prop_len;              /* 0: none */
    uint32_t prop_at;               /* toks.n when it was proposed */
} mn_req_draft;

/* Speculation state of a request. Writers: intake (on, max_len, d), verifier (cap, the counters),
 * each drafter (its d[i], during a round), voter (w, the vote), step job (kept). A request's round
 * and its step follow each other (r->phase), so no two of them touch it at the same time. */
typedef struct mn_req_spec {
    bool on;                        /* drafters exist and the request did not say "speculate": false */
    uint32_t max_len;               /* the request's cap on a draft (spec.max_len) */
    uint32_t cap;                   /* verifier: tokens the round's vote may take (the longer len) */
    uint32_t len[MN_TUNER_KINDS];   /* verifier: what a drafter of each kind may propose this round */
    bool no_room;                   /* verifier: the last round planned had no room for its drafts (the
                                     * pass's budget went to others): its next step is plain */
    uint64_t round;                 /* verifier: the round that made its draft (the count of rounds then):
                                     * with the pipeline a draft a step left in the pool may meet a later
                                     * round's, planned at another length */
    uint32_t plain_from, plain_end; /* verifier: the positions the request's latest run of plain
                                     * decoding steps produced (none when equal); a model drafter
                                     * catching up on them missed them because the request decoded
                                     * plain: a backlog, not the cost of a length */
    mn_tuner_seq acc[MN_TUNER_KINDS]; /* verifier: its own acceptance of each kind of draft (the
                                       * tuner's sequence rule), by the voted drafter's kind */
    mn_req_draft *d;                /* [n_drafters], intake allocates; NULL without drafters */
    mn_weights w;                   /* voter: the sequence's weights (n_drafters 0 until its first vote) */
    uint32_t ask;                   /* voter: bit i: drafter i drafts for it this round */
    bool unjudged;                  /* voter: a vote waits for the target's verdict */
    uint32_t voted_at;              /* voter: toks.n when that vote was made */
    uint32_t voted_verifications;   /* voter: `verifications` then (more now: the vote was verified) */
    uint32_t voted;                 /* voter: the voted drafter, MN_VOTE_NONE when nothing */
    int32_t vtoks[1 + MN_SPEC_MAX_LEN]; /* the pending token, then the voted draft */
    uint32_t n_draft;               /* voter: length of the voted draft (0: plain step) */
    int32_t kept[1 + MN_SPEC_MAX_LEN];  /* step job: accepted draft tokens, then the target's own */
    uint32_t n_kept;
    /* the done line's figures (verifier) */
    uint32_t drafted, accepted, verifications;
    uint32_t voted_n[MN_MAX_DRAFTERS];
} mn_req_spec;

typedef struct mn_req {
    mn_msg msg;               /* the request's travelling message (first member) */
    mn_msg flush;             /* verifier -> client: new text to stream; queued at most once (flush_queued) */
    mn_req_params p;          /* owned */
    mn_mailbox *owner;        /* the front end that took it (client or http): FLUSH and DONE go there */
    void *conn;               /* owner: its connection's state; NULL once the client is gone */
    struct mn_req *conn_next; /* owner: the connection's in-flight list */
    mn_req_state state;       /* mn_req_event only */
    mn_req_state resume_to;   /* mn_req_event: where PAUSED goes back to */
    bool throttled;           /* client (through mn_req_event): its connection does not read */
    bool cancelled;           /* client: cancel or disconnect; actors drop it at their next look */
    bool preempt_wanted;      /* kvmem: give its KV back at the verifier's next look (the verifier clears it and
                               * kicks kvmem instead when the request is no longer paused then) */
    bool flush_queued;        /* verifier/client */
    mn_req_phase phase;       /* verifier: IDLE when it arrives (START) */
    uint64_t serial;          /* kvmem: admission order; the newest paused one is preempted first */
    /* tokens: the prompt, then every generated token (a preempted request recomputes them all) */
    mn_tokens toks;           /* intake fills the prompt, verifier appends */
    uint32_t n_prompt;
    uint32_t n_gen;           /* verifier: tokens generated (counted even when eos) */
    int32_t end_of_turn;      /* intake: p.end_of_turn's control token, -1 for none: it ends r as eos does */
    uint32_t kv_need;         /* intake: positions reserved at admission (its whole length + window) */
    mn_kv_seq kv;             /* kvmem owns the table; positions [0, kv.len) hold toks[0, kv.len) */
    mn_sampler *smp;          /* intake creates; the verifier peeks its uniforms for a step, the step job draws */
    mn_req_spec spec;
    /* output text and how much of it went out */
    char *text;               /* verifier: decoded pieces, truncated at a stop string */
    size_t text_len, text_cap;
    size_t ready;             /* verifier: bytes that may be streamed (no partial UTF-8 or stop string) */
    size_t sent;              /* client: bytes streamed */
    /* log-probabilities (p.logprobs; NULL otherwise), both allocated by intake */
    mn_logprob *kept_lp;      /* [1 + MN_SPEC_MAX_LEN] step job: those of spec.kept */
    mn_logprob *lp;           /* [p.max_tokens] verifier: one per generated token, in order */
    uint32_t n_lp;            /* verifier */
    uint32_t lp_sent;         /* owner: entries streamed */
    const char *finish;       /* verifier/kvmem: "length", "stop", "cancelled"; NULL while running */
    bool failed;              /* the request ends with an error line (err_code, err_msg) */
    mn_errcode err_code;
    char err_msg[200];        /* kept in the request: failing never needs memory */
    double t_arrive, t_first, t_last; /* seconds, monotonic: arrival, first and last token */
} mn_req;

/* A request for params p (moved in: p is zeroed), in state NEW, answered to owner (the front end
 * whose connection conn sent it). NULL on OOM (p is then freed). */
mn_req *mn_req_new(mn_req_params *p, mn_mailbox *owner, void *conn);
void mn_req_free(mn_req *r);
/* The positions of drafter view x's KV that hold r's own tokens: toks[0, prop_at), then as many of
 * its proposals as the target kept; at most toks.n - 1 (the last known token is fed again to
 * draft). What the drafter rolls back to, and what kvmem may file in the draft pool's prefix cache. */
uint32_t mn_req_draft_valid(const mn_req_draft *x, const mn_req *r);
/* Apply ev; false (state unchanged, an error logged) when ev is not allowed in r's state. */
bool mn_req_event(mn_req *r, mn_req_ev ev);
const char *mn_req_state_name(mn_req_state s);
/* True while r holds KV (ADMITTED, RUNNING, PAUSED). */
static inline bool mn_req_holds_kv(const mn_req *r)
{
    return r->state == MN_REQ_ADMITTED || r->state == MN_REQ_RUNNING || r->state == MN_REQ_PAUSED;
}

/* How a finished request ended (for the front ends' counts). */
mn_outcome mn_req_outcome(const mn_req *r);
/* A finished request's latencies, when it produced a token and did not fail: arrival to last token
 * into e2e, and (two tokens or more) seconds per token after the first into tpot. The front ends
 * call it for every request they answer, wherever it ended (a preempted request cancelled in the
 * queue ends in kvmem, not in the verifier). */
void mn_req_observe_latency(const mn_req *r, mn_hist *e2e, mn_hist *tpot);

/* End the request with an error line instead of a done line. */
void mn_req_fail(mn_req *r, mn_errcode code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Append a decoded piece; apply stop strings (the text is cut before the first stop string found
 * and true is returned: finish "stop") and update r->ready. MN_NOMEM leaves the text as it was. */
mn_status mn_req_append(mn_req *r, const char *piece, size_t n, bool *stopped);
/* Make everything left ready (the request is finishing). */
void mn_req_seal(mn_req *r);

#endif
