/* weights.h - drafter weights for the majority vote, learned from the target's verdicts (Minions,
 * section 3.2, "speculation quality metric").
 *
 * The rule. Weights start at 1. After each verification every drafter that proposed something is
 * judged on its own proposal, not only the voted drafter: its rate is the share of its proposal the
 * target agreed with (mn_weights_rate). The rate goes into the drafter's window of the last `window`
 * rates; the window's mean is the drafter's average acceptance rate, ACR (the paper's Equation 1).
 * Then, once per verification:
 *     ACR >  reward_threshold  ->  weight *= reward_factor
 *     ACR <  punish_threshold  ->  weight *= punish_factor
 *     otherwise                ->  weight unchanged
 * and the weight is clamped to [min_weight, max_weight]. The comparisons are strict, as in the paper
 * ("exceeds", "falls below"), and a mean within 1e-6 of a threshold counts as on it (the rates are
 * floats: a window of 3/10s averages 0.29999998). A drafter that proposed nothing is not judged and keeps its weight.
 * Judging every drafter matters, and is where we depart from the paper (which averages a drafter's
 * rate only over the outputs it won): a drafter that keeps losing the vote would otherwise never
 * earn the weight to win it, however good its proposals.
 *
 * Two levels. One set per sequence (what that sequence's vote reads) learns from that sequence
 * alone; one global set per drafter pool learns from every sequence's verdicts and seeds each new
 * sequence (mn_weights_init_from: the global weights, empty windows). The actor feeds every verdict
 * to both. So a new request starts from what the pool has learned and then adapts to its own text.
 *
 * Defaults (mn_weights_defaults) and why:
 *   window = 16 verifications: at s = 4 that is about 64 judged tokens, enough that one unlucky
 *     verification (rates move in steps of 1/s) does not swing the mean, and short enough that
 *     weights follow a change of topic within one response (a 256-token answer is ~60-90 steps).
 *   reward_threshold = 0.6, punish_threshold = 0.3: at s = 4, an ACR of 0.6 is ~2.4 of 4 drafted
 *     tokens accepted per verification (plus the target's own), clearly paying for the verified
 *     positions; below 0.3 (~1.2 of 4) most of what the drafter proposes is wasted. The dead band
 *     between them keeps a middling drafter's weight still instead of drifting with noise.
 *   reward_factor = 1.1, punish_factor = 0.8: punish faster than reward, as in the weighted
 *     majority algorithm (which only punishes), because a wrong vote wastes a whole verification
 *     while a right one only beats drafters that may agree anyway; gentler than its classic 1/2
 *     because our signal is a noisy graded rate, not a clean mistake. With three drafters at 1, a
 *     drafter that keeps scoring > 0.6 outvotes the other two together after 8 verifications
 *     (1.1^8 = 2.14 > 2).
 *   min_weight = 1/16, max_weight = 16 (symmetric in log scale): the floor keeps a punished
 *     drafter alive (a multiplicative weight at 0 could never recover) and back at weight 1 after
 *     30 good verifications (1.1^30 > 16); the ceiling bounds how long a former leader
 *     keeps winning once its drafts go bad: from 16 down to 1 in 13 punishments (0.8^13 < 1/16).
 *
 * One verification of one sequence, as an actor runs it (seq and global are mn_weights):
 *     mn_vote(drafts, lens, seq.w, n, scratch, cap, &voted, err);   voted.tokens go to the target
 *     ... the target keeps kept[0..n_kept) (accepted draft + its own token) ...
 *     mn_weights_learn(&seq, drafts, lens, kept, n_kept, NULL);
 *     mn_weights_learn(&global, drafts, lens, kept, n_kept, NULL);
 *
 * Storage is inline and fixed (MN_WEIGHTS_MAX_DRAFTERS x MN_WEIGHTS_WINDOW_MAX rates, ~2 KiB), so a
 * set embeds in a request and nothing allocates. Fields are read-only outside weights.c.
 * Thread: a set has one owner (the actor that votes); no locking. Functions touch only their args.
 */
#ifndef MN_WEIGHTS_H
#define MN_WEIGHTS_H

#include <stdint.h>

#include "util/status.h"

#define MN_WEIGHTS_MAX_DRAFTERS 8  /* drafters in one pool; more would mean more draft passes than pay */
#define MN_WEIGHTS_MAX_WEIGHT 1e30f /* the largest max_weight: the vote sums up to 8 weights in floats */
#define MN_WEIGHTS_WINDOW_MAX 64   /* longest ACR window a set can hold */

typedef struct mn_weights_params {
    uint32_t window;        /* rates averaged into the ACR, 1..MN_WEIGHTS_WINDOW_MAX (16) */
    float reward_threshold; /* ACR strictly above: reward (0.6) */
    float punish_threshold; /* ACR strictly below: punish; <= reward_threshold (0.3) */
    float reward_factor;    /* >= 1 (1.1) */
    float punish_factor;    /* in (0, 1] (0.8) */
    float min_weight;       /* in (0, 1] (1/16) */
    float max_weight;       /* >= 1 (16) */
} mn_weights_params;

/* What one observation did to a drafter's weight. */
typedef enum mn_weights_verdict {
    MN_WEIGHTS_ABSTAIN = 0, /* nothing proposed (or bad rate/index): window and weight unchanged */
    MN_WEIGHTS_KEEP,        /* ACR within [punish_threshold, reward_threshold]: weight unchanged */
    MN_WEIGHTS_REWARD,      /* ACR above reward_threshold: weight multiplied by reward_factor */
    MN_WEIGHTS_PUNISH,      /* ACR below punish_threshold: weight multiplied by punish_factor */
} mn_weights_verdict;

typedef struct mn_weights {
    mn_weights_params par;
    uint32_t n_drafters;
    float w[MN_WEIGHTS_MAX_DRAFTERS];                           /* weights; contiguous for mn_vote */
    float rate[MN_WEIGHTS_MAX_DRAFTERS][MN_WEIGHTS_WINDOW_MAX]; /* ring of the last rates */
    uint32_t head[MN_WEIGHTS_MAX_DRAFTERS];                     /* ring slot the next rate goes to */
    uint32_t count[MN_WEIGHTS_MAX_DRAFTERS];                    /* rates held, <= par.window */
} mn_weights;

/* The defaults above. */
mn_weights_params mn_weights_defaults(void);

/* MN_OK when p is usable (ranges above, all finite), else MN_INVALID with the reason in err. For
 * settings given at start and live. */
mn_status mn_weights_check(const mn_weights_params *p, mn_err *err);

/* Start a set for n_drafters (1..MN_WEIGHTS_MAX_DRAFTERS): every weight 1, every window empty, p
 * copied. The caller owns *w (embed it anywhere). MN_INVALID (w untouched) on a bad count or p. */
mn_status mn_weights_init(mn_weights *w, uint32_t n_drafters, const mn_weights_params *p, mn_err *err);

/* Start a sequence's set from the global one: its weights and parameters, empty windows, so the
 * sequence learns from its own verdicts alone. global is only read. Cannot fail. */
void mn_weights_init_from(mn_weights *seq, const mn_weights *global);
/* A sequence's set takes the global parameters where they were set live since it started (as
 * mn_weights_set_params: its weights stay, its windows keep their newest rates). */
void mn_weights_follow(mn_weights *seq, const mn_weights *global);

/* Change the parameters live. Weights stay; a shorter window keeps the most recent rates. New
 * bounds apply at the next update. MN_INVALID (w untouched) when p fails mn_weights_check. */
mn_status mn_weights_set_params(mn_weights *w, const mn_weights_params *p, mn_err *err);

/* The target's verdict on one proposal, in [0, 1]: let a = the length of the common prefix of
 * draft[0..len) and kept[0..n_kept) (the tokens the target kept this verification: the accepted
 * draft and its own next token). If the proposal diverged from kept (a < min(len, n_kept)), the rate
 * is a / len: everything after the first wrong token is wrong too, as the paper counts it. If it
 * never diverged, the rate is 1: the target agreed with every token it decided, and a proposal
 * longer than what was verified is not blamed for tokens the target never judged. Negative (-1)
 * when there is nothing to judge (len == 0 or n_kept == 0). Pure. */
float mn_weights_rate(const int32_t *draft, uint32_t len, const int32_t *kept, uint32_t n_kept);

/* Record one rate for drafter `drafter` and apply the rule once. A negative or NaN rate, or
 * drafter >= n_drafters, abstains (nothing changes). Returns what was done. */
mn_weights_verdict mn_weights_observe(mn_weights *w, uint32_t drafter, float rate);

/* One verification, all drafters: observe mn_weights_rate(drafts[i], lens[i], kept, n_kept) for
 * each i < w->n_drafters (drafts, lens and verdicts have that many entries). verdicts receives
 * each outcome when non-NULL. */
void mn_weights_learn(mn_weights *w, const int32_t *const *drafts, const uint32_t *lens,
                      const int32_t *kept, uint32_t n_kept, mn_weights_verdict *verdicts);

/* Drafter i's ACR (mean of its window), or -1 when its window is empty or i is out of range. */
float mn_weights_acr(const mn_weights *w, uint32_t drafter);

#endif
