/* tuner.h - the speculation length, chosen online from measured cost per produced token (Minions,
 * section 3.3). docs/speculation.md, "The length tuner", has the measurements behind each choice.
 *
 * What is measured. After every verification step whose shape the length decided (every sequence
 * decoding, or every one speculating), the caller reports its batch size, length, time and produced
 * tokens (accepted drafts plus each sequence's own token): mn_tuner_step. A length's cost is
 * seconds per produced token. With cost = MN_TUNER_COST_ROUND the time is drafting + verification +
 * the step's hand-offs (the compute worker's and the loop's wake-ups): on the CPU the drafters and
 * the target take turns on the same cores, and a step pays its hand-offs whatever it carries, so a
 * step that produces more tokens saves them too. The drafters' backlog (a round catching the model
 * drafts up on tokens that plain steps produced) is left out: it is a cost of having decoded plain,
 * not of the length. MN_TUNER_COST_VERIFY counts the pass alone, the paper's t_LLM / vl (right once
 * drafting overlaps verification). The first warm_up speculating sequences count nowhere: the
 * vote's weights are still parting, and its first rounds cost twice the later ones.
 *
 * Classes. Batch sizes 1, 2, 3-4, 5-8, 9-16, 17-32 and 33+ each have their own length and figures
 * (the best length falls as the batch grows: a wide pass stops being cheap). A class that has not
 * decided yet runs at the length its leader rests at, the nearest class that has decided (the
 * larger batch on a tie).
 *
 * Three rules (mn_tuner_params.rule):
 * - slope: the paper's rule, with a measured point per length. Every decision_threshold steps at s
 *   the window's cost becomes the point of s, and a least-squares line through the fresh points
 *   among s - 1, s and s + 1 moves s against its slope (s_reward up, s_punish down, within
 *   [s_min, s_max]; a slope of 0 moves up), unless the target's own point is fresh and not cheaper
 *   by margin: then s rests at a measured minimum (with only s fresh it probes upward, downward at
 *   s_max). A fresh point is averaged with each new window at its length. A point goes stale after
 *   probe_every decisions, so a resting class re-measures its neighbors one at a time (s + 1, back,
 *   s - 1, back: 4 windows in about 20 away from the best length; tests/test_spec.c models it).
 *   The paper's rule always moves, and one noisy window swings it; this one rests, at the cost of
 *   a probe now and then.
 * - model: one verification tells the yield of every shorter length too (the first x tokens of a
 *   draft are the draft of length x). Per class, decayed by MN_TUNER_MODEL_DECAY a window (what
 *   only speculating steps feed, only after windows that speculated): the summed yield
 *   1 + min(a, x) of every length x, the sequences that kept a whole draft (their yield past it
 *   extrapolated with the continuation rate rho = kept / (kept + stopped)), and the time per
 *   sequence and step by length (a weighted line where a length has not run). The class
 *   moves to the cheapest length when that is cheaper by margin; every probe_every-th window runs
 *   at a neighbor, so that the times around s stay current.
 * - sequence (the default): each sequence drafts its own length, by the marginal rule: one more
 *   draft token at position j pays when P_i(j) c > beta, that is P_i(j) > theta = beta / c, where c
 *   is the class's seconds per produced token at speculating steps and beta what one more draft
 *   token adds to the target's pass (the slope of a decayed line of pass time over drafted tokens).
 *   P_i(j) = f_i carry(2) ... carry(j): the sequence's own rate of keeping a first token (decayed
 *   by MN_TUNER_SEQ_DECAY a verification, the class's rate as one draft's prior) times the class's
 *   rates of keeping token k once k - 1 was kept (acceptance along a draft is not geometric).
 *   Two kinds of draft (mn_tuner_kind) have their own figures and lengths. A free drafter's (the
 *   n-gram, on the loop: its draft costs beta alone) is at least one token long. A costly
 *   drafter's (a model: each position it drafts is a pass of each such drafter) pays above
 *   theta = (beta + delta) / c, delta the costly drafters' seconds per sequence and position in
 *   the passes that draft a second or later token (the first comes with the pass that catches the
 *   drafter up on the tokens it has not seen, which grows with the rounds it sat out: a cost of
 *   having sat out, as the backlog is of plain decoding), and where not even its first token pays,
 *   the sequence asks none.
 *   Each kind's acceptance is learned from the verified drafts its drafters won the vote with:
 *   with spec.cascade the models draft where the n-gram found nothing, the hardest positions
 *   (docs/speculation.md, "Two kinds of draft"). The class's own length is then a bound, s_max,
 *   or 0 where plain decoding costs less, and only a paired probe decides which: for one window
 *   the class's steps alternate between its home and the other side, MN_TUNER_PAIR_BLOCK steps at
 *   a time. The first probe chooses by the measured costs; later ones move the class only when the
 *   other side is cheaper by PAIR_Z standard errors or by PAIR_CLEAR of home's cost (tuner.c).
 *   Probes come every probe_gap windows (probe_every, doubling up to 4 probe_every while they
 *   change nothing), and at once after a home window that cost PROBE_ALARM times the other side's
 *   last figure, or home's own in the probe that chose or kept it when that brings home within
 *   PROBE_ALARM of the other side (the text changed). A class takes theta and acceptance figures
 *   it has not measured yet from the nearest class that has them.
 *
 * Defaults (mn_tuner_defaults): s_min 0, s_max 8, decision_threshold 32, s_reward = s_punish = 1,
 * probe_every 16, margin 0.01, warm_up 64, cost round, rule sequence.
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
    MN_TUNER_RULE_SEQUENCE, /* a length per sequence from its own acceptance (above) */
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
 * probe_every, margin, warm_up; cost and rule take their names as text) into *p, checked together
 * with the others.
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
/* "slope" / "model" / "sequence" (-1 when none). */
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
/* A group of sums whose weight (its steps, sequences, positions) decayed below this holds no
 * evidence and is set to 0 (unknown): decayed on, doubles reach their denormals (after some 5,300
 * windows unfed), where 0.875 x the least of them rounds back to itself, and the ratios the rules
 * read of those stuck values go anywhere in [0.25, 4] (a costly draft's theta and acceptance 1). */
#define MN_TUNER_MODEL_FLOOR 1e-100
#define MN_TUNER_SEQ_DECAY 0.75    /* a sequence's acceptance sums, by this per verification */

/* The two kinds of draft (the sequence rule, above): a free drafter's, a costly one's. */
typedef enum mn_tuner_kind {
    MN_TUNER_FREE,   /* no model: the n-gram drafter */
    MN_TUNER_COSTLY, /* a model: one pass per drafted position */
    MN_TUNER_KINDS
} mn_tuner_kind;

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
    /* sequence rule, by kind: drafts that reached position j (drafted it after keeping j - 1), and
     * that kept it (index 0 unused); the costly drafters' seconds and the positions they drafted */
    double reach[MN_TUNER_KINDS][MN_TUNER_MAX_LEN + 1], keep[MN_TUNER_KINDS][MN_TUNER_MAX_LEN + 1];
    double costly_seconds, costly_positions;
    /* sequence rule, steps of one sequence: the pass's time summed by the tokens it drafted, and
     * how many (the verify curve a one-sequence draft is priced by) */
    double pass_seconds[MN_TUNER_MAX_LEN + 1], pass_steps[MN_TUNER_MAX_LEN + 1];
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
    double home_paired;               /* sequence rule: home's seconds per token in the probe that */
                                      /* last chose or kept it (0 before one) */
    bool pairing;                     /* sequence rule: this window alternates home and the other side */
    mn_tuner_pair pair[2];            /* and their steps in it */
} mn_tuner_class;

typedef struct mn_tuner {
    mn_tuner_params p;
    mn_tuner_class c[MN_TUNER_CLASSES];
    uint64_t warmed;                  /* speculating sequences seen while warming up (stops at p.warm_up or
                                       * past it by the last step's batch) */
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
    uint32_t planned;                    /* the batch size whose class the step's length came from (the
                                          * step's class: with the pipeline the pool's bound, and batch,
                                          * how many it verified, may be of another), or 0: batch's */
    double seconds;
    double handoff;                      /* of seconds, the hand-offs around the pass: no draft
                                          * token adds to them (a step pays them per produced
                                          * token, whatever it drafted) */
    double drafting;                     /* of seconds, the drafting round: left out of beta too
                                          * (the sequence rule, tuner.h) */
    double costly_drafting;              /* of drafting, the costly drafters' passes that drafted a */
    uint32_t costly_positions;           /* second or later position, and those positions, summed over
                                          * sequences (each once, however many drafted it) */
    uint32_t tokens;                     /* produced: accepted drafts + each sequence's own token */
    uint32_t drafted;                    /* draft tokens verified */
    uint16_t ended[MN_TUNER_MAX_LEN + 1]; /* sequences whose draft stopped after a tokens: the next was
                                          * rejected, or the draft ended there shorter than s */
    uint16_t full[MN_TUNER_MAX_LEN + 1];  /* sequences that kept all of a draft as long as they were
                                          * allowed (a = its cap: s, or its own under the sequence
                                          * rule): a longer one might have kept more */
    uint16_t undrafted;                   /* of ended[0], those with no draft at all (the drafters
                                          * proposed nothing): no position was tried */
    uint16_t costly_ended[MN_TUNER_MAX_LEN + 1]; /* of ended and full, the sequences whose voted */
    uint16_t costly_full[MN_TUNER_MAX_LEN + 1];  /* draft was a costly drafter's */
} mn_tuner_step;

/* The sequence rule's figures for one kind of draft: the threshold theta, the class's rate of
 * keeping a draft's first token, and carry[j], its rate of keeping token j once token j - 1 was
 * kept (j = 2..s_max; 0 and 1 unused). theta and first are NAN under the other rules, or before
 * the class has measured them (carry is then unused). */
typedef struct mn_tuner_rate {
    float theta, first;
    float carry[MN_TUNER_MAX_LEN + 1];
    float price[MN_TUNER_MAX_LEN + 1]; /* price[j]: what a draft of j tokens costs, in produced
                                        * tokens: j theta, or at one sequence, once measured, the
                                        * verify curve's (t(j) - t(0)) / c (and j delta / c for a
                                        * costly draft); NAN with theta */
    uint32_t least;    /* the shortest length: 1 for a free draft (it costs beta alone, and a
                        * sequence that drafts nothing learns nothing), 0 for a costly one (a model
                        * pass that does not pay is not run; the voter's exploration rounds ask 1) */
} mn_tuner_rate;

/* What the verifier needs of a class: its length, and the figures of each kind of draft. A costly
 * draft's acceptance not measured yet is taken as the free one's, and its delta as 0. */
typedef struct mn_tuner_advice {
    uint32_t s;
    uint32_t other;    /* != s: a paired probe, the class's steps alternate between s and other */
    mn_tuner_rate kind[MN_TUNER_KINDS];
} mn_tuner_advice;

mn_tuner_advice mn_tuner_advise(const mn_tuner *t, uint32_t cls);
/* Length s with no figures: every sequence drafts its cap (fixed mode). */
mn_tuner_advice mn_tuner_fixed_advice(uint32_t s);
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
/* The sequence's draft length of one kind, by its acceptance q of that kind and the kind's figures:
 * the j in [rate->least, cap] that gains the most, P_i(1) + ... + P_i(j) - price[j] (with the
 * straight price j theta, the largest j with P_i(j) > theta), or cap without figures; 0 when cap
 * is 0. */
uint32_t mn_tuner_seq_length(const mn_tuner_seq *q, const mn_tuner_rate *rate, uint32_t cap);

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
