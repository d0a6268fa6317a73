/* verifier.h - the verifier actor: continuous batching over the target model.
 *
 * Each step it takes every request that may produce (ADMITTED or RUNNING: not paused), gives each its
 * next tokens - the rest of its prompt (in chunks that share the pass's token budget) or the token
 * sampled last step - and runs one unpadded target pass on the compute worker. When the pass comes
 * back it samples, streams (MN_MSG_FLUSH), applies stop strings and max_tokens, hands finished
 * requests back to kvmem (MN_MSG_RELEASE) and starts the next step at once, so waiting requests join
 * and finished ones leave between any two steps. KV for every position a step writes was reserved
 * at admission. A paused request that kvmem wants back (preempt_wanted) is returned as soon as it
 * is in no step or round.
 * Plain decoding is speculation with no drafts: every step verifies just the target's own token.
 *
 * Speculation (when the engine has drafters: addr->voter): before its step, a decoding request goes
 * to the voter in a round (each with spec.len, what each kind of drafter may propose, and spec.cap,
 * the longer: what its vote may take); the voted drafts come back
 * (MN_MSG_VOTED) and wait in the pool (phase DRAFTED) until a step takes them: each such request
 * brings its pending token plus its draft to the unpadded pass, with logits for every position. On the worker the coupled rule of
 * spec/accept.h decides: the target draws its own token at each position with the request's
 * sampler, exactly as plain decoding would (argmax when greedy), and the draft is kept while it
 * matches; the first differing draw is the target's own token. So the output is plain decoding's
 * own text, greedy or seeded, whatever the vote. The rejected positions are dropped from the KV
 * length. Counters
 * for the done line and stats (accepted-length histogram) are kept here. A request's tokens are
 * taken one by one, so stop strings, eos, max_tokens and the context end it at exactly the token
 * plain decoding would.
 *
 * The pipeline (pipeline.enabled, live). Off: the verifier alternates a round over every request that
 * may draft and one step over everything (prompt chunks and plain steps join the drafted). On: the
 * step and the round each start as soon as their previous one is back, so one group is drafted
 * while another is verified. The step takes every drafted request (and those needing no draft);
 * the round takes idle requests up to the pool's bound B = half the speculating sequences (at most
 * batch.max_sequences), and pauses while the pool holds B. A request is in at most one of the two
 * (r->phase), and all hand-offs happen on the loop thread. With model drafters on their own
 * compute worker (the engine's --draft-threads) drafting and verification run on the CPU at once.
 *
 * The length. A round drafts at the length the tuner set for the batch class (spec/tuner.h) of the
 * step that will verify it (the decoding sequences; with the pipeline, B), capped per request.
 * Every step that the length shaped (all its sequences drafted, or all decoding plainly at a
 * length of 0) is reported to the tuner, under that class: its length, the drafting time of the
 * last round (planned to voted), pass time and tokens produced (MN_MSG_MEASURED). Not reported: a
 * step that takes drafts a step before it left (the round's time went with that one), drafts of
 * an older round, or a round that asked no drafter. With every drafter disabled no round is
 * planned (MN_SET_DRAFTERS_ON): requests step plainly.
 *
 * The step trace (--step-trace): with a file, every step that comes back writes one JSON line to
 * it, times in seconds of the monotonic clock (mn_now, CLOCK_MONOTONIC):
 *   {"step":N,"submit":T,"start":T,"end":T,"back":T,"round":[T,T]|null,"seqs":N,"tokens":N,
 *    "prompt":N,"drafted":N,"produced":N,"s":N,"measured":B}
 * submit: handed to the worker; start/end: the pass (and acceptance) on the worker; back: the loop
 * took the result; round: planned and voted, of the round whose drafts the step verifies (null
 * without drafts); tokens: the pass's (prompt + one per sampled sequence + drafted); produced:
 * tokens the step gave its requests; s: the length its drafts were made at; measured: reported
 * to the tuner. The time between a line's back and the next submit is the loop's (streaming,
 * scheduling, a round). Buffered; complete once the engine is freed.
 *
 * Messages in: START (mn_req), STEP_DONE (its job), VOTED (its round), KICK, SET, STATS. Out:
 * RELEASE to kvmem (through the voter when there is one), FLUSH to the client actor, DRAFT to the
 * voter, MEASURED to the tuner, the step job to the worker.
 * Thread: the engine's loop; the step itself runs on the worker.
 */
#ifndef MN_VERIFIER_H
#define MN_VERIFIER_H

#include <stdio.h>

#include "actors/msg.h"
#include "actors/request.h"
#include "runtime/backend.h"
#include "runtime/worker.h"

typedef struct mn_verifier_config {
    mn_backend *be;              /* borrowed: the target's backend */
    mn_worker *worker;           /* borrowed: the target backend's compute worker */
    uint32_t max_batch;          /* sequences in one step (live: batch.max_sequences) */
    uint32_t max_held;           /* requests that may hold KV at once (the running set's size) */
    bool spec_enabled;           /* spec.enabled (live): draft when there are drafters (addr->voter) */
    bool drafters_on;            /* (live, MN_SET_DRAFTERS_ON) some drafter is enabled */
    bool pipeline;               /* pipeline.enabled (live): draft one group while verifying another */
    uint32_t spec_length;        /* tokens drafted per verification, 0..16, until the tuner says */
    uint32_t costly;             /* bit i: drafter i runs a model (the voter's mask): the drafts it
                                  * wins the vote with are of the tuner's costly kind */
    FILE *step_trace;            /* borrowed: a line per step (above), or NULL */
    const mn_addr *addr;         /* borrowed */
} mn_verifier_config;

typedef struct mn_verifier mn_verifier;

mn_status mn_verifier_new(const mn_verifier_config *cfg, mn_verifier **out, mn_err *err);
void mn_verifier_handle(void *verifier, mn_msg *m);
void mn_verifier_free(mn_verifier *v);

#endif
