/* accept.h - how much of a draft the target keeps, and the token it adds (speculative decoding's
 * verification step), for one sequence and one verification.
 *
 * Layout shared by every function: the draft is draft[0..n_draft). Row i of the target (i in
 * 0..n_draft) is its prediction for the position of draft[i], given the sequence and draft[0..i);
 * row n_draft is its prediction after the whole draft. Every rule keeps a prefix
 * draft[0..n_accepted) and then exactly one token of the target's own, `next`: the correction at
 * the first rejected position, or the bonus token when the whole draft was kept. So a verification
 * always advances the sequence by n_accepted + 1 >= 1 tokens, and n_draft == 0 is plain decoding.
 *
 * Rules:
 *  - Greedy (temperature 0): keep the longest prefix on which the target's argmax agrees; next is the
 *    target's argmax at the first disagreement (or after the draft). Same tokens as greedy decoding
 *    without a draft.
 *  - One-hot (temperature > 0, any number of drafters): the voted draft is a deterministic function
 *    of the drafters' proposals, so it is a draft whose distribution q is one-hot on the drafted
 *    token x. Leviathan et al.'s rule with that q: accept x with probability p(x); otherwise sample
 *    next from p with x removed, renormalised, and stop. Each emitted token is then distributed
 *    exactly as p: P(x) = p(x), and P(y) = (1 - p(x)) p(y) / (1 - p(x)) = p(y) for y != x.
 *  - Classic (one model drafter whose distribution q is known): accept x with probability
 *    min(1, p(x) / q(x)); otherwise sample next from max(0, p - q), renormalised, and stop. Also
 *    exact when x was sampled from q, and accepts more than one-hot when q is close to p.
 *
 * p (and q) rows are probabilities after the caller's temperature and top_p: entries >= 0 with a
 * positive sum; each row is divided by its own sum, so rows a float rounding away from 1 are fine.
 * Random numbers come from the caller's `uniform(ctx)`, one value in [0, 1) per call, consumed in a
 * fixed order: for each examined draft position one draw for the accept test; on a rejection one
 * more for the replacement; when the whole draft is accepted one for the bonus token. So a seeded
 * or scripted source makes a verification reproducible.
 *
 * Cost: greedy O(n_accepted); the sampling rules O(n_vocab) per examined row. No allocation.
 * Thread: pure over the caller's arrays; any thread (uniform is called on the caller's thread).
 */
#ifndef MN_ACCEPT_H
#define MN_ACCEPT_H

#include <stdint.h>

#include "util/status.h"

/* A uniform random number in [0, 1) from the caller's generator state ctx. */
typedef double (*mn_accept_uniform_fn)(void *ctx);

typedef struct mn_accept_result {
    uint32_t n_accepted;  /* draft tokens kept, 0..n_draft */
    int32_t next;         /* the target's own token after them: correction or bonus */
} mn_accept_result;

/* The target's own draw for row i of the verification (the caller's sampler on the logits of
 * position i, with the request's generator: one draw per call, rows asked in order from 0). */
typedef int32_t (*mn_accept_draw_fn)(void *ctx, uint32_t row);

/* Coupled rule, what minionsd uses for every request, greedy or sampled: the target draws its own
 * token at each position exactly as plain decoding would, and the draft is kept while it equals
 * those draws; the first draw that differs (or the draw after a fully kept draft) is `next`.
 * Distribution: the draw at a position is x with probability p(x), so x is kept with probability
 * p(x), and on a rejection the emitted token is the target's draw given that it is not x, i.e. p
 * without x renormalised: exactly the one-hot rule's. Better than drawing that rule's coins
 * separately: a verification consumes one draw per emitted token, the draws plain decoding makes,
 * and the logits are bit-identical to plain decoding's, so a seeded request yields plain decoding's
 * own text whatever the drafts and the vote (tested). With a greedy sampler it is the greedy rule.
 * draw is called n_accepted + 1 times. */
mn_accept_result mn_accept_coupled(const int32_t *draft, uint32_t n_draft, mn_accept_draw_fn draw, void *ctx);

/* Greedy rule. target_argmax[0..n_draft] is the target's argmax of each row (n_draft + 1 entries).
 * Cannot fail. */
mn_accept_result mn_accept_greedy(const int32_t *draft, uint32_t n_draft,
                                  const int32_t *target_argmax);

/* One-hot rule. p is [n_draft + 1][n_vocab], row-major. On MN_OK *out holds the verdict. Fails with
 * MN_INVALID (message in err, *out = {0, -1}) when n_vocab is 0, a draft token is outside
 * [0, n_vocab), or a row it examines has a negative or NaN entry or no positive mass; rows past the
 * first rejection are not read. */
mn_status mn_accept_onehot(const int32_t *draft, uint32_t n_draft, const float *p, uint32_t n_vocab,
                           mn_accept_uniform_fn uniform, void *ctx, mn_accept_result *out,
                           mn_err *err);

/* Classic rule. p is [n_draft + 1][n_vocab] (the target), q is [n_draft][n_vocab] (the drafter that
 * sampled the draft), row-major. q(x) == 0 with p(x) > 0 accepts (the ratio is infinite). Errors as
 * mn_accept_onehot, q rows checked like p rows. */
mn_status mn_accept_classic(const int32_t *draft, uint32_t n_draft, const float *p, const float *q,
                            uint32_t n_vocab, mn_accept_uniform_fn uniform, void *ctx,
                            mn_accept_result *out, mn_err *err);

#endif
