/* drafter.h - a drafter actor: proposes the next tokens of a round's requests, one per draft source.
 *
 * Two kinds. A model drafter (--draft FILE) owns a backend for its draft model, whose KV blocks
 * kvmem reserves and releases per request (mn_req.spec.d[index].kv); a round becomes one job on
 * the compute worker: every request first rolls its draft KV back to the prefix the target kept
 * and catches up on the tokens it has not seen (its prompt the first time, then the accepted draft
 * and the target's own token, whoever proposed them), in unpadded passes of up to the backend's
 * max_tokens; then it drafts spec.len[MN_TUNER_COSTLY] tokens greedily, one pass per position for
 * the whole batch (a request with none sits the round out: the voter does not ask for it).
 * The n-gram drafter (--draft ngram, no model) proposes on the loop thread at once: the
 * continuation of the latest earlier occurrence of the request's last tokens (spec/ngram.h), at
 * most spec.len[MN_TUNER_FREE] of them, or,
 * when its own tokens have none, what a finished request did after them (its shared cache, which it
 * fills as released requests pass through it on their way from the voter to kvmem).
 *
 * A drafter writes only its own slot spec.d[index] of the round's requests, and only while it holds
 * the round; the proposal is greedy and deterministic, so the voted draft is a function of the
 * requests' tokens (what the sampling rule in spec/accept.h needs to be lossless).
 *
 * Messages in: DRAFT (mn_round_part), DRAFT_DONE (its job); the n-gram drafter also RELEASE (mn_req)
 * and SET (drafter.ngram.short_len, min_n, shared, learn), and STATS (its cache's figures, as they
 * are now). Out: PROPOSED (the part) to the voter, its job to the worker; RELEASE on to kvmem;
 * STATS_BACK to the asker.
 * Thread: the engine's loop; the job runs on the worker.
 */
#ifndef MN_DRAFTER_H
#define MN_DRAFTER_H

#include "actors/msg.h"
#include "actors/request.h"
#include "runtime/backend.h"
#include "runtime/worker.h"

typedef struct mn_drafter_config {
    uint32_t index;              /* its slot in spec.d[] and in the voter's lists */
    mn_backend *be;              /* borrowed: the draft model's backend; NULL for the n-gram drafter */
    mn_worker *worker;           /* borrowed: the compute worker (model drafters) */
    mn_mailbox *self;            /* its own mailbox: job completions come back to it */
    uint32_t max_batch;          /* most requests in a round */
    uint32_t ngram_cache;        /* the n-gram drafter: tokens of its shared cache (0: none) */
    const mn_addr *addr;         /* borrowed */
} mn_drafter_config;

typedef struct mn_drafter mn_drafter;

mn_status mn_drafter_new(const mn_drafter_config *cfg, mn_drafter **out, mn_err *err);
void mn_drafter_handle(void *drafter, mn_msg *m);
void mn_drafter_free(mn_drafter *d);

/* Refuse a draft model whose vocabulary differs from the target's: MN_INVALID with a message naming
 * the first token id that differs (its text in both), or the differing size or eos. */
mn_status mn_drafter_check_vocab(const mn_model *target, const mn_model *draft, mn_err *err);

#endif
