/* tuner.h - the speculation length, chosen online from measured cost per token (Minions, section
 * 3.3, "adaptive speculation length selector").
 *
 * What is measured. After every verification step whose shape the length decides (every sequence
 * decoding, every one speculating), the caller reports the step's batch size, the length s it ran
 * at, its time and the tokens it produced (accepted drafts plus each sequence's own token). The
 * cost of s is seconds per produced token. With mn_tuner_params.cost = MN_TUNER_COST_ROUND the time
 * is drafting + verification, because on the CPU the drafters and the target take turns on the
 * same cores and a longer draft costs its own passes, plus the hand-offs around the pass (the
 * compute worker's and the loop's wake-ups), which every step pays whatever it carries, so that a
 * step that produces more tokens saves them too: with 16 clients on two cores they and the loop's
 * own turn took 254-377 us a step, and a tuner that did not count them rested at plain decoding
 * where the n-gram drafter at a fixed length served 1.08-1.11x plain (docs/speculation.md, "The
 * length tuner"). Not counted:
 * the model drafters' backlog (a round catching them up on tokens plain decoding steps produced,
 * the caller's step.drafting leaves it out), a cost of having decoded plain, not of the length.
 * MN_TUNER_COST_VERIFY counts the target's pass alone, the paper's t_LLM / vl (right when drafting
 * overlaps verification).
 *
 * The warm-up: the first warm_up (64) speculating sequences the tuner is told of count nowhere:
 * no window, no model. They are the vote's learning. Its drafters' weights start equal, so every
 * model draft drafts every round until they part and the losers sit their rounds out; at one
 * sequence the first window's rounds cost 228 us a produced token, the next three's 97-109
 * (`tools/bench-steps.py --first-windows 6`, the fixed vote, docs/speculation.md), and a tuner
 * that judged speculating on that window left it for good. Plain steps count from the first.
 *
 * The rule: the paper's slope rule, with measured points kept per length. Each batch-size class
 * (1, 2, 3-4, 5-8, 9-16, 17-32, 33+: the best length falls as the batch grows, because a wide pass
 * stops being cheap) has its own s and its own curve. Once `decision_threshold` steps at the current
 * s have arrived, their cost becomes the point of s, and the tuner fits a least-squares line
 * through the fresh points among s - 1, s and s + 1 (a local slope):
 *     slope < 0 (longer is cheaper)  ->  the target is s + s_reward
 *     slope > 0 (shorter is cheaper) ->  the target is s - s_punish
 *     slope = 0                      ->  the target is s + s_reward
 * clamped to [s_min, s_max]. It moves to the target unless the target's own point is fresh and not
 * cheaper than s by `margin` (then s is a measured local minimum and it stays). A point is fresh
 * for `probe_every` decisions; a stale one leaves the fit, so a resting tuner re-measures its
 * neighbors now and then and follows a curve that drifts (other text, other load). With only the
 * current point fresh it probes upward (downward at s_max).
 *
 * Why not the paper's rule as it stands: it fits the line over the time series since the last
 * change and always moves, so it never rests at the best length, and one noisy window on this
 * shared 2-core machine swings it (windows of 16 steps vary by 10-20%). Keeping a point per length
 * and resting at a measured minimum cost little: a probe every probe_every windows. And the length
 * may reach 0, plain decoding, when s_min = 0: where no draft pays (a large batch, a text no drafter
 * knows), the tuner finds that out instead of paying for drafts forever.
 *
 * A fresh point is averaged with each new window at its length (halving a resting length's noise).
 *
 * Defaults (mn_tuner_defaults): s_min 0, s_max 8, decision_threshold 32, s_reward = s_punish = 1,
 * probe_every 16, margin 0.01, warm_up 64, cost round, rule sequence (the best worst case of the
 * three side by side: README). Under the slope rule at rest the two neighbors go stale at different times and are
 * re-measured one by one (s + 1, back, s - 1, back): 4 windows in about 20 away from the best
 * length, at neighbors that cost a few % more on a flat optimum (tests/test_spec.c models it).
 *
 * The model rule (rule = model): what the slope rule compares are windows measured at different
 * times, on different text: a repetitive stretch is cheap at any s, and the machine's speed moves,
 * so the noise between two windows is larger than the difference between two lengths. But one
 * verification tells more than the cost of its own s. A sequence that drafted s tokens and kept a of
 * them would, at any length x, have kept min(a, x) (the first x tokens of a draft are the draft of
 * length x: drafters and the vote propose prefix by prefix), unless it kept all s (then it is
 * censored: a longer draft might have kept more). So every verification gives, on the same text and
 * at the same moment, the yield of every length up to s, and of every length when it stopped short.
 * The model keeps per class, decayed by MN_TUNER_MODEL_DECAY per window (a memory of about eight
 * windows, so that it follows a change of text; what only speculating steps feed decays only after
 * windows that speculated, so plain decoding does not wear it away):
 *   - the summed yield 1 + min(a, x) of every length x over the sequences verified;
 *   - the censored sequences by s, whose yield past s is extrapolated with the continuation
 *     probability rho = (draft tokens kept) / (kept + drafts stopped), the censored-geometric
 *     estimate over all verifications;
 *   - the time per sequence and step at each length that ran.
 * The cost of x is its time over its yield; a length that has not run (or not for long) takes its
 * time from a line fitted through the lengths >= 1 that have, weighted by their decayed steps.
 * After every window the class moves to the cheapest length if it is cheaper than s by `margin`,
 * and every probe_every-th window runs at a neighbor (above, then below) so that the times around
 * s stay current. Acceptance needs no probes: it comes with every verification.
 *
 * The sequence rule (rule = sequence): one length for a whole class is a compromise between its
 * sequences, and between the stretches of one sequence: a request that copies its prompt accepts
 * 8 tokens in a row while its neighbor in the batch, or the same request a sentence later, accepts
 * none. So each sequence gets its own draft length, from the marginal rule: one more draft token
 * at position j pays when its chance of being kept times what a produced token costs exceeds what
 * it costs to draft and verify it,
 *     P_i(j) c > beta   <=>   P_i(j) > theta = beta / c,
 * where c is the class's seconds per produced token at speculating steps and beta the seconds one
 * more draft token adds to the target's pass (the slope of a decayed least-squares line of the
 * steps' pass time over their drafted tokens, which the varying lengths themselves spread).
 * Drafting stays out of beta (and in c): what a draft token adds to a round is no marginal that
 * holds still. With the vote, longer drafts let the drafters' weights part and the losers sit out,
 * so rounds get cheaper as drafts get longer (one client, kjv and web, fixed lengths 1, 2, 4, 6:
 * rounds of about 375, 255, 130 and 95 us a step; `tools/bench-steps.py --configs plain,vote
 * --spec-length L`); a line over the steps took the cost of every drafter drafting at the short
 * lengths for a draft token's, theta came to 0.6-0.9, and drafts to 1-3 tokens with all three model
 * drafts drafting: the adaptive vote lost to the fixed one by far (docs/speculation.md, "The
 * length tuner"). The chance of keeping the
 * j-th token is the sequence's own chance of keeping the first, times the class's chance of keeping
 * each later one once the one before it was kept:
 *     P_i(j) = f_i * carry(2) * ... * carry(j),
 * f_i from the sequence's recent verifications (decayed by MN_TUNER_SEQ_DECAY per verification,
 * with one draft's worth of the class's first-token rate as a prior), carry(k) = (drafts that kept
 * token k) / (drafts that kept token k - 1 and reached k), decayed with the model's sums (one
 * pseudo-draft at carry(k - 1) as a prior, so a position no draft has reached yet is assumed as
 * good as the one before it, and the lengths keep reaching further until measured). Acceptance is
 * not geometric along a draft: a draft whose first tokens were kept is most likely copying or
 * following text every drafter knows, and it goes on (on the bundled family, kjv, web and devil
 * with the vote of all four: the first token kept 0.70 of the time, each next one after a kept
 * one 0.77-0.94; `tools/bench-steps.py --by-draft` prints it by position). Until 2026-11-29 the rule took one rate rho_i for every position, rho_i^j,
 * and so cut drafts short where they paid best (docs/speculation.md, "Acceptance along a draft").
 * Every speculating sequence drafts at least 1 token. The class's own length is then a bound,
 * s_max, or 0 where plain decoding costs less per produced token. Which side is cheaper only a
 * paired probe decides: for one window the class's steps alternate between its home and the other
 * side, MN_TUNER_PAIR_BLOCK steps at a time, and the two sides' costs over those steps are
 * compared. Until 2026-11-29 the sides' figures came from windows
 * run one after the other, and the noise between two windows on this shared host (10-20%, above)
 * was larger than the difference to find: with one client one slow window sent the vote to plain
 * decoding, where a stale figure of the other side kept it. The first paired probe chooses by the figures alone; after it, the other side must be
 * cheaper by PAIR_Z standard errors (of a ratio of the steps' seconds over their tokens), or by
 * PAIR_CLEAR (15%) of home's cost, to move the class; a probe ends once either holds (tuner.c,
 * window_done). Probes come every probe_gap windows (probe_every, doubling up to 4 probe_every while
 * they change nothing), and at once after a home window that cost PROBE_LOSES (1.5) times the
 * other side's last figure. A probe whose other side already costs PROBE_LOSES times home's over
 * the same steps ends after two of its steps: at a large batch, where model drafters lose by far,
 * every step of it is paid for.
 *
 * A class that has not decided yet (a batch size the load passes through briefly, 2-8 sequences
 * while 16 clients ramp up and down, may never fill a window) runs at the length its leader rests
 * at (not at a probe's), the leader being the nearest class that has decided (the larger batch on a
 * tie): a neighbor's length is a better guess than the starting one, which with model drafters
 * that do not pay drafts at every step. Under the sequence rule any class, decided or not, takes
 * theta and the acceptance figures it has not measured yet from the nearest class that has them
 * (without theta every sequence would draft its cap, the dearest length there is).
 *
 * Storage is inline and fixed; nothing allocates. Thread: one owner (the tuner actor).
 */
#ifndef MN_TUNER_H
#define MN_TUNER_H

#include <stdbool.h>
#include <stdint.h>

#include "util/status.h"

#define MN_TUNER_MAX_LEN 16 /* = MN_SPEC_MAX_LEN */
#define MN_TUNER_CLASSES 7  /* batch sizes 1, 2, 3-4, 5-8, 9-16, 17-32, 33+ */

typedef enum mn_tuner_mode {
    MN_TUNER_FIXED,     /* s = spec.length in every class */
    MN_TUNER_ADAPTIVE,  /* s per class, chosen by the rule above, starting from spec.length */
} mn_tuner_mode;

typedef enum mn_tuner_cost {
    MN_TUNER_COST_ROUND,  /* (drafting + verification + hand-offs) / produced tokens */
    MN_TUNER_COST_VERIFY, /* verification / produced tokens (the paper's) */
} mn_tuner_cost;

typedef enum mn_tuner_rule {
    MN_TUNER_RULE_SLOPE,    /* the paper's slope over measured points per length */
    MN_TUNER_RULE_MODEL,    /* time per length over counterfactual yield (above) */
    MN_TUNER_RULE_SEQUENCE, /* a length per sequence from its own acceptance (below) */
} mn_tuner_rule;

typedef struct mn_tuner_params {
    uint32_t s_min, s_max;       /* 0 <= s_min <= s_max <= MN_TUNER_MAX_LEN */
    uint32_t decision_threshold; /* steps at the current s per decision, >= 1 */
    uint32_t s_reward, s_punish; /* step up / down, >= 1 */
    uint32_t probe_every;        /* decisions a point stays fresh, >= 1 */
    float margin;                /* a fresh target must be cheaper by this share to move, [0, 1) */
    uint32_t warm_up;            /* speculating sequences verified before any step counts */
    mn_tuner_cost cost;
    mn_tuner_rule rule;
} mn_tuner_params;

mn_tuner_params mn_tuner_defaults(void);
mn_status mn_tuner_check(const mn_tuner_params *p, mn_err *err);
/* Set one parameter by its key name (s_min, s_max, decision_threshold, s_reward, s_punish,
 * probe_every, margin; cost and rule take their names as text) into *p, checked together with the others.
 * Exactly one of value / text is used. MN_INVALID with a message naming the key otherwise. */
mn_status mn_tuner_set_param(mn_tuner_params *p, const char *key, double value, const char *text, mn_err *err);
/* --tuner: "MODE[,KEY=VALUE...]" (MODE fixed or adaptive, keys as above) into *mode and *p, which
 * keep their values on error. */
mn_status mn_tuner_parse(const char *spec, mn_tuner_mode *mode, mn_tuner_params *p, mn_err *err);
/* "adaptive" / "fixed" (-1 when neither); "round" / "verify" likewise. */
int mn_tuner_mode_parse(const char *name);
const char *mn_tuner_mode_name(mn_tuner_mode m);
int mn_tuner_cost_parse(const char *name);
const char *mn_tuner_cost_name(mn_tuner_cost c);
/* "slope" / "model" (-1 when neither). */
int mn_tuner_rule_parse(const char *name);
const char *mn_tuner_rule_name(mn_tuner_rule r);

/* One length's point on a class's curve. */
typedef struct mn_tuner_point {
    double cost;       /* seconds per produced token at its last measurement */
    uint32_t age;      /* decisions since then */
    bool known;
    uint64_t steps;    /* steps measured at this length, ever */
} mn_tuner_point;

#define MN_TUNER_MODEL_DECAY 0.875 /* the model's sums are multiplied by this after every window */
#define MN_TUNER_SEQ_DECAY 0.75    /* a sequence's acceptance sums, by this per verification */

/* Sums for a weighted least-squares line y = a + b x: weights, w x, w y, w x^2, w x y. */
typedef struct mn_tuner_line {
    double w, x, y, xx, xy;
} mn_tuner_line;

/* The model rule's decayed sums (see above). */
typedef struct mn_tuner_model {
    double seqs;                              /* sequences verified at s >= 1 */
    double yield[MN_TUNER_MAX_LEN + 1];       /* sum of 1 + min(a, x) by length x */
    double full[MN_TUNER_MAX_LEN + 1];        /* sequences that kept a whole draft, by its length */
    double kept, stopped;                     /* draft tokens kept; drafts that stopped short */
    double seconds[MN_TUNER_MAX_LEN + 1];     /* seconds per sequence, summed over steps, by length */
    double steps[MN_TUNER_MAX_LEN + 1];
    /* speculating steps (sequence rule), per sequence of a step: the line of the step's work
     * (seconds less hand-offs) over drafted tokens (one point a step), the seconds and the
     * produced tokens */
    mn_tuner_line draft_time;
    double spec_seconds, produced;
    /* sequence rule: drafts that reached position j (drafted it after keeping j - 1), and that
     * kept it; index 0 unused */
    double reach[MN_TUNER_MAX_LEN + 1], keep[MN_TUNER_MAX_LEN + 1];
} mn_tuner_model;

/* One side's steps in a paired probe (sequence rule): index 0 plain decoding, 1 speculating; with
 * the sums of squares and products of the steps' seconds and produced tokens (the ratio's error). */
typedef struct mn_tuner_pair {
    double seconds, ss, st, tt;
    uint64_t tokens, seqs;
    uint32_t steps;
} mn_tuner_pair;

typedef struct mn_tuner_class {
    uint32_t s;                       /* the current length */
    double win_seconds;               /* the window at s since the last decision */
    uint64_t win_tokens;
    uint32_t win_steps;
    uint64_t win_seqs;                /* sequences verified in the window */
    mn_tuner_point at[MN_TUNER_MAX_LEN + 1];
    mn_tuner_model model;
    uint32_t home;                    /* model and sequence rules: the length a probe returns to */
    uint64_t decisions, moves, probes;
    uint64_t probed_at;               /* sequence rule: the decision of the last probe, */
    uint32_t probe_gap;               /* and the decisions until the next */
    bool pairing;                     /* sequence rule: this window alternates home and the other side */
    mn_tuner_pair pair[2];            /* and their steps in it */
} mn_tuner_class;

typedef struct mn_tuner {
    mn_tuner_params p;
    mn_tuner_class c[MN_TUNER_CLASSES];
    uint64_t warmed;                  /* speculating sequences seen while warming up (<= p.warm_up) */
} mn_tuner;

/* One decision, as the actor publishes it. */
typedef struct mn_tuner_decision {
    uint32_t cls, from, to;
    double cost;       /* the point of `from` after this window: seconds per token */
    double slope;      /* of the fit, seconds per token per unit of s (0 with one point) */
    const char *why;   /* "slope", "probe" (the target had no fresh point; model rule: a neighbor's time;
                        * sequence rule: a paired probe starts), "rest" (stays at a minimum), "model"
                        * (the model's cheapest length), "pair" (a paired probe moved the class) */
} mn_tuner_decision;

/* One measured verification step. The histograms feed the model rule (a, the draft tokens a
 * sequence kept, indexes them; their counts sum to batch when s >= 1): */
typedef struct mn_tuner_step {
    uint32_t batch, s;
    double seconds;
    double handoff;                      /* of seconds, the hand-offs around the pass: no draft
                                          * token adds to them (a step pays them per produced
                                          * token, whatever it drafted) */
    double drafting;                     /* of seconds, the drafting round: left out of beta too
                                          * (the sequence rule, tuner.h) */
    uint32_t tokens;                     /* produced: accepted drafts + each sequence's own token */
    uint32_t drafted;                    /* draft tokens verified */
    uint16_t ended[MN_TUNER_MAX_LEN + 1]; /* sequences whose draft stopped after a tokens: the next was
                                          * rejected, or the draft ended there shorter than s */
    uint16_t full[MN_TUNER_MAX_LEN + 1];  /* sequences that kept all of a draft as long as they were
                                          * allowed (a = its cap: s, or its own under the sequence
                                          * rule): a longer one might have kept more */
    uint16_t undrafted;                   /* of ended[0], those with no draft at all (the drafters
                                          * proposed nothing): no position was tried */
} mn_tuner_step;

/* What the verifier needs of a class: its length, and for the sequence rule the threshold theta, the
 * class's rate of keeping a draft's first token, and carry[j], its rate of keeping token j once
 * token j - 1 was kept (j = 2..s_max; 0 and 1 unused). theta and first are NAN under the other
 * rules, or before the class has measured them (carry is then unused). */
typedef struct mn_tuner_advice {
    uint32_t s;
    uint32_t other;    /* != s: a paired probe, the class's steps alternate between s and other */
    float theta, first;
    float carry[MN_TUNER_MAX_LEN + 1];
} mn_tuner_advice;

mn_tuner_advice mn_tuner_advise(const mn_tuner *t, uint32_t cls);
/* During a paired probe the class's steps alternate between its two sides in blocks of
 * MN_TUNER_PAIR_BLOCK steps, so that few of them are transitions: on the CPU the other side's passes
 * have just filled the caches. Alternating one by one, plain steps beside the vote's at 16
 * sequences cost a quarter more a token than in a run of them, and the probes kept the class
 * speculating where it lost a fifth. Transitions count: left out, they took with them the first
 * rounds of requests that arrived during a plain block (the model drafts catching up on their
 * prompts), a cost speculating pays at every length, and the vote at 16 sequences looked cheaper
 * than plain decoding in probes while it served 0.7-0.85x of it (docs/speculation.md). The tokens
 * of the plain block, which a speculating block's first round catches up on, are left out as the
 * drafters' backlog (mn_tuner_step.drafting). */
#define MN_TUNER_PAIR_BLOCK 4

/* The length of a class's next step under advice a, `steps` steps into a paired probe (the caller
 * counts the class's steps while a->other != a->s, from 0): a->s, or a->other in the other side's
 * blocks. */
uint32_t mn_tuner_step_length(const mn_tuner_advice *a, uint32_t steps);

/* A sequence's own acceptance (the sequence rule): its decayed count of verified drafts and of
 * those that kept their first token. Zero-initialized, fed every verification of a draft. */
typedef struct mn_tuner_seq {
    double tries, hits;
} mn_tuner_seq;

/* A verification of a draft of at least one token kept `kept` of them. */
void mn_tuner_seq_observe(mn_tuner_seq *q, uint32_t kept);
/* The sequence's draft length under advice a: the largest j in [1, cap] with P_i(j) > theta (1 when
 * none), or cap when a has no theta; 0 when cap is 0. */
uint32_t mn_tuner_seq_length(const mn_tuner_seq *q, const mn_tuner_advice *a, uint32_t cap);

/* The model rule's estimate for length x of class cls: seconds per produced token, NAN where it
 * has no basis yet (no verification, or no time for x and no line). */
double mn_tuner_model_cost(const mn_tuner *t, uint32_t cls, uint32_t x);

/* Every class at s0 (clamped to the bounds), no points. */
void mn_tuner_init(mn_tuner *t, const mn_tuner_params *p, uint32_t s0);
/* New parameters: curves kept, each s clamped to the new bounds, windows restarted. */
void mn_tuner_reparam(mn_tuner *t, const mn_tuner_params *p);
/* Every class at s0 (clamped to the bounds when `clamp`), windows restarted, curves kept. */
void mn_tuner_restart(mn_tuner *t, uint32_t s0, bool clamp);
/* The class of a step with `batch` verified sequences (batch >= 1). */
uint32_t mn_tuner_class_of(uint32_t batch);
/* "1", "2", "3-4", ... */
const char *mn_tuner_class_name(uint32_t cls);
/* One measured step. A step at another s than its class's current one (in flight across a change)
 * is not counted. When it completes a window, the window becomes the point of s; with `adapt` the
 * rule then decides, returns true and says what in *d, and the classes that have not decided yet
 * follow their leaders (their s may change too: the caller re-reads every such class); without
 * (fixed mode) s stays. Every rule keeps its figures in fixed mode too. */
bool mn_tuner_observe(mn_tuner *t, const mn_tuner_step *st, bool adapt, mn_tuner_decision *d);

#endif
