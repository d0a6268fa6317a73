/* admin.h - the admin actor: the control socket's commands, answered by asking the actors.
 *
 * One JSON object per message on the admin socket (net/adminsock.h): {"cmd":"stats"},
 * {"cmd":"get"[,"key":K]}, {"cmd":"set","key":K,"value":V}, {"cmd":"drain"}. Replies
 * {"ok":true,...} or {"ok":false,"error":"..."}; every message gets exactly one reply, whatever its
 * bytes (a reply never fails on bad UTF-8: what it quotes is sanitized). Stats are gathered by
 * message (MN_MSG_STATS to client, intake, kvmem and verifier, and those below, each filling its
 * own section) and sent when all have answered. A setting goes to the actors that own it as
 * MN_MSG_SET.
 * Settable keys (docs/server.md): batch.max_sequences, queue.max, log.level; with drafters also
 * spec.enabled, pipeline.enabled (verifier), spec.weights, spec.reward_threshold,
 * spec.punish_threshold, spec.reward_factor, spec.punish_factor, spec.skip_below,
 * spec.cascade and drafter.<name>.enabled (voter; the verifier also hears whether any drafter is
 * left enabled, MN_SET_DRAFTERS_ON), drafter.ngram.short_len, drafter.ngram.min_n,
 * drafter.ngram.shared and drafter.ngram.learn (the n-gram drafter),
 * spec.length and tuner.mode, tuner.s_min, tuner.s_max, tuner.decision_threshold, tuner.s_reward,
 * tuner.s_punish, tuner.probe_every, tuner.margin, tuner.warm_up, tuner.cost (tuner). The voter and
 * the tuner answer stats too when there are drafters, the n-gram drafter when there is one, and
 * the http actor with --http.
 *
 * Messages in: STATS (the parts coming back). Out: STATS, SET.
 * Thread: the engine's loop.
 */
#ifndef MN_ADMIN_H
#define MN_ADMIN_H

#include "actors/msg.h"

typedef struct mn_admin_config {
    const char *addr;            /* ipc://PATH or a loopback tcp:// address */
    unsigned socket_mode;        /* the ipc socket file's permissions */
    uint32_t max_batch, max_queue;       /* the starting values, also the caps */
    uint32_t kv_block_size;
    const char *kv_type;         /* "f32" or "f16" (mem/kv.h's mn_kv_type_name) */
    uint32_t n_drafters;         /* 0: no spec keys */
    const char *const *drafter_names; /* borrowed: [n_drafters] */
    uint32_t spec_length;        /* starting values of the spec keys */
    bool pipeline;
    mn_weights_mode weights_mode;
    mn_weights_params weights;
    float skip_below;
    bool cascade;
    bool ngram_cache;            /* the n-gram drafter has a shared cache (drafter.ngram.shared) */
    mn_tuner_mode tuner_mode;
    mn_tuner_params tuner;
    const mn_addr *addr_book;    /* borrowed: the mailboxes */
    void (*on_drain)(void *owner);       /* the drain command (the engine starts the drain) */
    void *owner;
} mn_admin_config;

typedef struct mn_admin mn_admin;

mn_status mn_admin_new(struct event_base *base, const mn_admin_config *cfg, mn_admin **out, mn_err *err);
void mn_admin_handle(void *admin, mn_msg *m);
void mn_admin_free(mn_admin *a);

#endif
