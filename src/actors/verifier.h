/* verifier.h - the verifier actor: continuous batching over the target model.
 *
 * Each step it takes every request that may produce (ADMITTED or RUNNING: not paused), gives each its
 * next tokens - the rest of its prompt (in chunks that share the pass's token budget) or the token
 * sampled last step - and runs one unpadded target pass on the compute worker. When the pass comes
 * back it samples, streams (MN_MSG_FLUSH), applies stop strings and max_tokens, hands finished
 * requests back to kvmem (MN_MSG_RELEASE) and starts the next step at once, so waiting requests join
 * and finished ones leave between any two steps. KV for every position a step writes was reserved
 * at admission. A paused request that kvmem wants back (preempt_wanted) is returned between steps.
 * Plain decoding is speculation with no drafts: every step verifies just the target's own token.
 *
 * Messages in: START (mn_req), STEP_DONE (its job), KICK, SET, STATS. Out: RELEASE to kvmem, FLUSH
 * to the client actor, the step job to the worker.
 * Thread: the engine's loop; the step itself runs on the worker.
 */
#ifndef MN_VERIFIER_H
#define MN_VERIFIER_H

#include "actors/msg.h"
#include "actors/request.h"
#include "runtime/backend.h"
#include "runtime/worker.h"

typedef struct mn_verifier_config {
    mn_backend *be;              /* borrowed: the target's backend */
    mn_worker *worker;           /* borrowed: the target backend's compute worker */
    uint32_t max_batch;          /* sequences in one step (live: batch.max_sequences) */
    uint32_t max_held;           /* requests that may hold KV at once (the running set's size) */
    const mn_addr *addr;         /* borrowed */
} mn_verifier_config;

typedef struct mn_verifier mn_verifier;

mn_status mn_verifier_new(const mn_verifier_config *cfg, mn_verifier **out, mn_err *err);
void mn_verifier_handle(void *verifier, mn_msg *m);
void mn_verifier_free(mn_verifier *v);

#endif
