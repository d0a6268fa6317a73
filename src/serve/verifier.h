/* verifier.h - the verifier actor: continuous batching over the target model.
 *
 * Each step it takes every running request that may produce (its client is not throttled), gives
 * each its next tokens - the rest of its prompt (in chunks that share the pass's token budget) or
 * the token sampled last step - and runs one unpadded target pass on the compute worker. When the
 * pass comes back it samples, streams, applies stop strings and max_tokens, hands finished requests
 * to kvmem (MN_MSG_FINISH) and starts the next step at once, so waiting requests join and finished
 * ones leave between any two steps. Plain decoding is speculation with no drafts: every step
 * verifies just the target's own token.
 * Thread: the engine's loop; the step itself runs on the worker. Handler: mn_verifier_handle.
 */
#ifndef MN_VERIFIER_H
#define MN_VERIFIER_H
#include "serve/engine_impl.h"
#endif
