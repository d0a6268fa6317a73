/* msg.h - every message the actors exchange, its payload, and the actors' addresses.
 *
 * An actor is state + a mailbox + a handler on the engine's loop thread (runtime/mailbox.h). It
 * never reads another actor's fields: it posts a message. Messages are intrusive (an mn_msg first in
 * the payload) and live inside the object they are about, so the hot path posts without allocating;
 * a message is in at most one mailbox at a time.
 *
 * The flow is one way: net -> owner -> intake -> kvmem -> verifier -> kvmem -> owner -> net, where
 * the owner (mn_req.owner) is the front end that took the request: the client actor (JSON lines) or
 * the http actor (--http). Plus the kicks that make an actor look again, the compute worker's
 * completions, and the admin's questions (answered by posting the same message back). With
 * drafters, a request's verification is preceded by a round verifier -> voter -> every enabled
 * drafter -> voter -> verifier (mn_round; with the pipeline, one group's round runs while another
 * group's step does), and requests leave the verifier through the voter (verifier -> voter ->
 * kvmem), which judges their last vote on the way. After each verification step the verifier
 * reports its cost to the tuner (mn_measure), which sets the verifier's speculation length per
 * batch size (MN_SET_SPEC_LENGTH).
 */
#ifndef MN_MSG_H
#define MN_MSG_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/mailbox.h"
#include "spec/tuner.h"
#include "spec/weights.h"
#include "util/hist.h"

typedef enum mn_msg_type {
    MN_MSG_ADMIT = 1, /* client or http -> intake: a parsed request (mn_req) */
    MN_MSG_ENQUEUE,   /* intake -> kvmem: tokenized, wants KV and a batch slot (mn_req) */
    MN_MSG_START,     /* kvmem -> verifier: admitted with KV for its whole length (mn_req) */
    MN_MSG_RELEASE,   /* verifier -> kvmem (with drafters through the voter, then the n-gram drafter if any):
                       * finished, or given back for preemption (mn_req) */
    MN_MSG_DONE,      /* intake/kvmem -> the request's owner (client or http): ended; write its final
                       * answer and free it (mn_req) */
    MN_MSG_FLUSH,     /* verifier -> the request's owner (client or http): stream the new text
                       * (mn_req.flush) */
    MN_MSG_STEP_DONE, /* worker -> verifier: a step job completed */
    MN_MSG_KICK,      /* anyone -> kvmem/verifier: look again (cancel, pause, resume, preempt) */
    MN_MSG_STATS,     /* admin or http -> any actor: fill in your part (mn_stats_part) */
    MN_MSG_STATS_BACK,/* any actor -> the asker: the part is filled in (mn_stats_part) */
    MN_MSG_SET,       /* admin -> kvmem/verifier/voter/tuner/n-gram drafter, tuner -> verifier: a live setting (mn_setting) */
    MN_MSG_DRAIN,     /* engine -> client, and http with --http (one each): stop taking requests
                       * (mn_drain) */
    MN_MSG_DRAFT,     /* verifier -> voter (mn_round), voter -> drafter (mn_round_part): propose */
    MN_MSG_PROPOSED,  /* drafter -> voter: its proposals are in the requests (mn_round_part) */
    MN_MSG_VOTED,     /* voter -> verifier: each request's voted draft is in its spec (mn_round) */
    MN_MSG_DRAFT_DONE,/* worker -> drafter: a draft job completed */
    MN_MSG_MEASURED,  /* verifier -> tuner: a verification step's time and yield (mn_measure) */
} mn_msg_type;

#define MN_ADDR_MAX_DRAFTERS 8 /* = MN_WEIGHTS_MAX_DRAFTERS */

/* One drafting round: the verifier's requests that want drafts (each with spec.len and cap set). The
 * verifier owns it and has at most one out; the voter fans it out to the drafters as parts. */
typedef struct mn_round {
    mn_msg msg;                    /* MN_MSG_DRAFT to the voter, MN_MSG_VOTED back */
    struct mn_req **reqs;          /* [n] the verifier's: each in phase DRAFTING while the round is out */
    uint32_t n;
    uint32_t pending;              /* voter: drafters not yet answered */
    double backlog_seconds;        /* voter: the parts' backlog_seconds, summed */
    double costly_seconds;         /* voter: the costly drafters' parts' position_seconds, summed, */
    uint32_t costly_positions;     /* and the most positions one of them drafted (the tuner's delta) */
    bool idle;                     /* voter: no drafter was enabled, none was asked (a drafter disabled
                                    * before the verifier heard that the last one was): its step is
                                    * not measured */
    bool cascade;                  /* voter: the free drafters' parts are out, the costly ones' next
                                    * (spec.cascade) */
    struct mn_round_part {
        mn_msg msg;                /* MN_MSG_DRAFT to drafter i, MN_MSG_PROPOSED back */
        struct mn_round *round;
        uint32_t drafter;
        double seconds;            /* drafter: time its proposals took, */
        uint32_t positions;        /* model drafter: draft positions it drafted in passes of their
                                    * own (each request's second to last), summed over requests, */
        double position_seconds;   /* and those passes' time */
        double backlog_seconds;    /* of which catching up on tokens that plain decoding steps
                                    * produced (spec.plain_from/end), its share of the passes by
                                    * tokens */
        uint32_t from_cache;       /* n-gram drafter: proposals it took from its shared cache */
    } part[MN_ADDR_MAX_DRAFTERS];
} mn_round;
typedef struct mn_round_part mn_round_part;

/* One verification step as the tuner sees it. The verifier owns it and posts it when not already
 * queued (a step that finds it queued goes unreported); the tuner marks it taken. */
typedef struct mn_measure {
    mn_msg msg;                    /* MN_MSG_MEASURED */
    bool queued;
    mn_tuner_step step;            /* batch, s (the length the step was planned with), tokens and
                                    * what each sequence kept; the tuner sets step.seconds */
    double draft_seconds;          /* from planning to the voted drafts (0 without a round), */
    double backlog_seconds;        /* of which the drafters' backlog (the round's backlog_seconds) */
    double verify_seconds;         /* the target's pass and acceptance */
    double handoff_seconds;        /* the step's hand-offs: submitted to its pass's start (the
                                    * compute worker's wake-up), the pass's end to the loop taking
                                    * it (the loop's) */
} mn_measure;

/* A kick: one message per target actor, posted only when not already queued. */
typedef struct mn_kick {
    mn_msg msg;
    bool queued;
} mn_kick;

/* The mailboxes, so that an actor can address the others without knowing their structs, and the
 * kicks of the actors that others ask to look again. The engine owns all of them. */
typedef struct mn_addr {
    mn_mailbox *client, *intake, *kvmem, *verifier, *admin;
    mn_mailbox *voter, *tuner;                  /* NULL without drafters */
    mn_mailbox *http;                           /* NULL without --http */
    mn_mailbox *drafters[MN_ADDR_MAX_DRAFTERS]; /* [n_drafters] */
    mn_mailbox *ngram;                          /* the n-gram drafter's (one of drafters), or NULL */
    uint32_t n_drafters;
    mn_kick *kvmem_kick, *verifier_kick;
} mn_addr;

/* Post k to mb unless it is already on its way. */
static inline void mn_kick_post(mn_kick *k, mn_mailbox *mb)
{
    if (k->queued)
        return;
    k->queued = true;
    k->msg.type = MN_MSG_KICK;
    mn_mailbox_post(mb, &k->msg);
}
/* The receiver took its kick: it may be posted again. */
static inline void mn_kick_taken(mn_kick *k) { k->queued = false; }
static inline void mn_kick_kvmem(const mn_addr *a) { mn_kick_post(a->kvmem_kick, a->kvmem); }
static inline void mn_kick_verifier(const mn_addr *a) { mn_kick_post(a->verifier_kick, a->verifier); }

/* ---- admin questions ------------------------------------------------------------------------- */

#define MN_STATS_SECONDS 10 /* tok/s is averaged over this window */
#define MN_SPEC_HIST 17     /* accepted lengths 0..16 */

/* One drafter as the voter sees it. */
typedef struct mn_drafter_stats {
    bool enabled;
    float weight, acr;             /* global weight; mean of its recent rates (-1: none yet) */
    uint64_t rounds;               /* rounds it was asked to draft */
    uint64_t proposed, agreed;     /* judged tokens it proposed; of them, on the kept path */
    uint64_t voted;                /* votes it won that the target verified */
    double seconds;                /* time spent proposing */
    uint64_t cache_proposals;      /* n-gram drafter: proposals from its shared cache */
} mn_drafter_stats;

/* The verifier's pipeline (verifier.h). */
typedef struct mn_pipeline_stats {
    bool enabled;          /* pipeline.enabled */
    uint32_t depth;        /* drafted sequences waiting for a step now */
    uint32_t batch;        /* the pool's bound B when the last round was planned */
    uint64_t rounds;       /* drafting rounds */
    uint64_t overlapped;   /* rounds that started while a step was out */
    uint64_t pauses;       /* times drafting paused: the pool held B with sequences to draft */
    uint64_t resumes;      /* rounds that started after a pause */
} mn_pipeline_stats;

/* How requests ended, as their front end answered them. */
typedef enum mn_outcome {
    MN_OUTCOME_STOP,      /* done: a stop string or the end-of-text token */
    MN_OUTCOME_LENGTH,    /* done: max_tokens or the context */
    MN_OUTCOME_CANCELLED, /* done: cancelled, or its client went away */
    MN_OUTCOME_ERROR,     /* an error answer (refused at once, or failed later) */
    MN_OUTCOMES,
} mn_outcome;

/* A front end's figures (the client actor's JSON lines, the http actor's HTTP). */
typedef struct mn_frontend_stats {
    uint64_t in_flight, done, failed;
    uint64_t outcomes[MN_OUTCOMES];
    uint64_t rejected;             /* refused before they became requests (bad input, draining) */
    uint32_t connections, throttled;
    uint64_t accept_pauses;
    uint64_t idle_closed;          /* connections closed for idling past the timeout */
    uint64_t stalled_closed;       /* connections closed for leaving their output unread that long */
    mn_hist tpot;                  /* per request answered, seconds per token after the first (>= 2 tokens) */
    mn_hist e2e;                   /* seconds from arrival to the last token (requests that produced one) */
    bool draining;
} mn_frontend_stats;

/* Each actor's figures; an actor fills only its own section. */
typedef struct mn_stats {
    mn_frontend_stats client;      /* client */
    mn_frontend_stats http;        /* http (zero without --http) */
    struct {                       /* intake */
        uint64_t prompt_tokens;
    } intake;
    struct {                       /* kvmem */
        uint32_t running, queued, paused;
        uint64_t preemptions;
        uint32_t kv_used, kv_free, kv_total;
        uint32_t draft_kv_used;    /* blocks held in all draft pools */
        uint32_t kv_cached;        /* the target's prefix cache: blocks no request holds */
        uint64_t kv_adopted;       /* prompt positions taken from it instead of computed, ever */
        uint64_t draft_kv_adopted; /* the same in the draft pools' caches, summed */
    } kvmem;
    struct {                       /* verifier */
        uint64_t steps, tokens_generated;
        double tok_per_s;
        double step_seconds;       /* time spent in target passes */
        bool spec_enabled;
        uint32_t spec_lengths[MN_TUNER_CLASSES]; /* the length in effect per batch class */
        uint64_t verifications, drafted, accepted;
        uint64_t accepted_hist[MN_SPEC_HIST]; /* verifications that kept exactly i draft tokens */
        mn_hist ttft;              /* seconds from arrival to the first token */
        mn_pipeline_stats pipeline;
    } verifier;
    struct {                       /* voter */
        const char *weights_mode;
        mn_drafter_stats drafter[MN_ADDR_MAX_DRAFTERS];
    } voter;
    struct {                       /* the n-gram drafter's shared cache */
        uint32_t cache_cap;        /* its size in tokens (0: none) */
        uint64_t cache_added;      /* tokens finished requests added to it */
    } ngram;
    struct {                       /* tuner */
        mn_tuner_mode mode;
        uint32_t spec_length;      /* spec.length: the fixed length, and where adaptive starts */
        uint64_t measured;         /* steps reported to it */
        double backlog_seconds;    /* drafters' backlogs left out of those steps' cost */
        mn_tuner state;            /* parameters, each class's s and curve */
    } tuner;
    size_t depth[4];               /* mailbox depths: client, intake, kvmem, verifier (the admin's) */
} mn_stats;

typedef enum mn_stats_who {
    MN_WHO_CLIENT,    /* mn_stats.client */
    MN_WHO_INTAKE,    /* mn_stats.intake */
    MN_WHO_KVMEM,     /* mn_stats.kvmem */
    MN_WHO_VERIFIER,  /* mn_stats.verifier */
    MN_WHO_VOTER,     /* mn_stats.voter (asked only when there are drafters) */
    MN_WHO_TUNER,     /* mn_stats.tuner (likewise) */
    MN_WHO_HTTP,      /* mn_stats.http (asked only with --http) */
    MN_WHO_NGRAM,     /* mn_stats.ngram (asked only with --draft ngram) */
    MN_WHO_N,
} mn_stats_who;

/* One actor's part of a stats question: it fills stats (its own section) and answers with
 * mn_stats_reply. The asker owns it (actors/stats.h gathers a whole mn_stats). */
typedef struct mn_stats_part {
    mn_msg msg;
    mn_stats *stats;
    mn_mailbox *reply_to;
} mn_stats_part;

/* The part is filled in: back to the asker as MN_MSG_STATS_BACK. */
static inline void mn_stats_reply(mn_stats_part *q)
{
    q->msg.type = MN_MSG_STATS_BACK;
    mn_mailbox_post(q->reply_to, &q->msg);
}

typedef enum mn_setting_key {
    MN_SET_MAX_BATCH,   /* batch.max_sequences: kvmem admits, the verifier steps at most this many */
    MN_SET_MAX_QUEUE,   /* queue.max: kvmem's pending queue bound */
    MN_SET_SPEC_ENABLED,/* verifier: spec.enabled (value 0/1) */
    MN_SET_PIPELINE,    /* verifier: pipeline.enabled (value 0/1) */
    MN_SET_SPEC_LENGTH, /* tuner: spec.length (value 0..16); tuner -> verifier: the advice (length,
                         * and the sequence rule's figures) of batch class `index` (MN_TUNER_CLASSES:
                         * every class) */
    MN_SET_TUNER,       /* tuner: tuner.mode (value) and its parameters (tuner) */
    MN_SET_VOTER,       /* voter: the weight rule (params), weights mode (value), skip_below (fvalue),
                         * cascade (flag) */
    MN_SET_DRAFTER,     /* voter: drafter.<index>.enabled (index, value 0/1) */
    MN_SET_DRAFTERS_ON, /* verifier: whether any drafter is enabled (value 0/1): with none, requests
                         * step plainly instead of waiting for empty rounds */
    MN_SET_NGRAM_SHORT, /* the n-gram drafter: drafter.ngram.short_len (value 0..16) */
    MN_SET_NGRAM_MIN_N, /* the n-gram drafter: drafter.ngram.min_n (value 1..MN_NGRAM_MAX_N_DEFAULT) */
    MN_SET_NGRAM_SHARED,/* the n-gram drafter: drafter.ngram.shared (value 0/1) */
    MN_SET_NGRAM_LEARN, /* the n-gram drafter: drafter.ngram.learn (value 0/1) */
} mn_setting_key;

/* Which weights a sequence's vote reads (spec.weights). */
typedef enum mn_weights_mode {
    MN_WEIGHTS_SEQUENCE, /* its own, seeded from the global ones */
    MN_WEIGHTS_GLOBAL,   /* the drafter pool's */
    MN_WEIGHTS_FIXED,    /* all 1: a plain majority, nothing learned is used */
} mn_weights_mode;

/* A live setting for one actor, allocated by the sender (mn_malloc) and freed by the receiver. */
typedef struct mn_setting {
    mn_msg msg;
    mn_setting_key key;
    uint32_t value;
    uint32_t index;              /* MN_SET_DRAFTER: which drafter */
    float fvalue;                /* MN_SET_VOTER: spec.skip_below */
    bool flag;                   /* MN_SET_VOTER: spec.cascade */
    mn_weights_params params;    /* MN_SET_VOTER */
    mn_tuner_params tuner;       /* MN_SET_TUNER */
    mn_tuner_advice advice;      /* MN_SET_SPEC_LENGTH, tuner -> verifier */
} mn_setting;

/* Start draining (each front end, the client actor and the http actor, owns its connections and
 * its count of live requests, and gets one of these). With force, close every connection now (a
 * drain that cannot finish). Allocated by the sender, freed by the receiver. */
typedef struct mn_drain {
    mn_msg msg;
    bool force;
} mn_drain;

#endif
