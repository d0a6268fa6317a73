/* tuner.h - the speculation length, chosen online from measured cost per token (Minions, section
 * 3.3, "adaptive speculation length selector").
 *
 * What is measured. After every verification step whose shape the length decides (every sequence
 * decoding, every one speculating), the caller reports the step's batch size, the length s it ran
 * at, its time and the tokens it produced (accepted drafts plus each sequence's own token). The
 * cost of s is seconds per produced token. With mn_tuner_params.cost = MN_TUNER_COST_ROUND the time
 * is drafting + verification, because on the CPU the drafters and the target take turns on the same
 * cores and a longer draft costs its own passes; MN_TUNER_COST_VERIFY counts the target's pass
 * alone, the paper's t_LLM / vl (right when drafting overlaps verification).
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
 * probe_every 16, margin 0.01, cost round. At rest the two neighbors go stale at different times
 * and are re-measured one by one (s + 1, back, s - 1, back): 4 windows in about 20 away from the
 * best length, at neighbors that cost a few % more on a flat optimum (tests/test_spec.c models it).
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
    MN_TUNER_COST_ROUND,  /* (drafting + verification) / produced tokens */
    MN_TUNER_COST_VERIFY, /* verification / produced tokens (the paper's) */
} mn_tuner_cost;

typedef struct mn_tuner_params {
    uint32_t s_min, s_max;       /* 0 <= s_min <= s_max <= MN_TUNER_MAX_LEN */
    uint32_t decision_threshold; /* steps at the current s per decision, >= 1 */
    uint32_t s_reward, s_punish; /* step up / down, >= 1 */
    uint32_t probe_every;        /* decisions a point stays fresh, >= 1 */
    float margin;                /* a fresh target must be cheaper by this share to move, [0, 1) */
    mn_tuner_cost cost;
} mn_tuner_params;

mn_tuner_params mn_tuner_defaults(void);
mn_status mn_tuner_check(const mn_tuner_params *p, mn_err *err);
/* Set one parameter by its key name (s_min, s_max, decision_threshold, s_reward, s_punish,
 * probe_every, margin; cost takes its name as text) into *p, checked together with the others.
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

/* One length's point on a class's curve. */
typedef struct mn_tuner_point {
    double cost;       /* seconds per produced token at its last measurement */
    uint32_t age;      /* decisions since then */
    bool known;
    uint64_t steps;    /* steps measured at this length, ever */
} mn_tuner_point;

typedef struct mn_tuner_class {
    uint32_t s;                       /* the current length */
    double win_seconds;               /* the window at s since the last decision */
    uint64_t win_tokens;
    uint32_t win_steps;
    mn_tuner_point at[MN_TUNER_MAX_LEN + 1];
    uint64_t decisions, moves;
} mn_tuner_class;

typedef struct mn_tuner {
    mn_tuner_params p;
    mn_tuner_class c[MN_TUNER_CLASSES];
} mn_tuner;

/* One decision, as the actor publishes it. */
typedef struct mn_tuner_decision {
    uint32_t cls, from, to;
    double cost;       /* the point of `from` after this window: seconds per token */
    double slope;      /* of the fit, seconds per token per unit of s (0 with one point) */
    const char *why;   /* "slope", "probe" (the target had no fresh point), "rest" (stays at a minimum) */
} mn_tuner_decision;

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
 * rule then decides, returns true and says what in *d; without (fixed mode) s stays. */
bool mn_tuner_observe(mn_tuner *t, uint32_t batch, uint32_t s, double seconds, uint32_t tokens, bool adapt,
                      mn_tuner_decision *d);

#endif
