/* tuner.c - per-class curves of cost per token and the slope rule (see tuner.h).
 *
 * Invariants: every class's s lies in [p.s_min, p.s_max]; its window counts only steps at s; a
 * point's age counts the class's decisions since it was measured. */
#include "spec/tuner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIT_REACH 1 /* the fit takes the fresh points next to s: a local slope */
#define PROBE_LOSES 1.5 /* a probe this much dearer per token than home ends early (window_done) */
#define PROBE_ALARM 1.1 /* a home window this much dearer than the other side's paired figure probes at once */
#define PAIR_Z 2.0      /* standard errors by which a paired probe's other side must be cheaper, */
#define PAIR_CLEAR 0.15 /* or this share of home's cost, whatever the errors */

mn_tuner_params mn_tuner_defaults(void)
{
    return (mn_tuner_params){
        .s_min = 0,
        .s_max = 8,
        .decision_threshold = 32,
        .s_reward = 1,
        .s_punish = 1,
        .probe_every = 16,
        .margin = 0.01f,
        .warm_up = 64,
        .cost = MN_TUNER_COST_ROUND,
        .rule = MN_TUNER_RULE_SEQUENCE,
    };
}

mn_status mn_tuner_check(const mn_tuner_params *p, mn_err *err)
{
    if (p->s_max > MN_TUNER_MAX_LEN || p->s_min > p->s_max)
        return mn_fail(err, MN_INVALID, "tuner: want 0 <= s_min (%u) <= s_max (%u) <= %d", p->s_min, p->s_max,
                       MN_TUNER_MAX_LEN);
    if (p->decision_threshold < 1 || p->decision_threshold > 1000000)
        return mn_fail(err, MN_INVALID, "tuner: decision_threshold %u outside 1..1000000", p->decision_threshold);
    if (p->s_reward < 1 || p->s_reward > MN_TUNER_MAX_LEN || p->s_punish < 1 || p->s_punish > MN_TUNER_MAX_LEN)
        return mn_fail(err, MN_INVALID, "tuner: s_reward (%u) and s_punish (%u) must be in 1..%d", p->s_reward,
                       p->s_punish, MN_TUNER_MAX_LEN);
    if (p->probe_every < 1 || p->probe_every > 1000000)
        return mn_fail(err, MN_INVALID, "tuner: probe_every %u outside 1..1000000", p->probe_every);
    if (!(p->margin >= 0.0f && p->margin < 1.0f))
        return mn_fail(err, MN_INVALID, "tuner: margin %g is not in [0, 1)", (double)p->margin);
    if (p->cost != MN_TUNER_COST_ROUND && p->cost != MN_TUNER_COST_VERIFY)
        return mn_fail(err, MN_INVALID, "tuner: unknown cost %d", (int)p->cost);
    if (p->rule != MN_TUNER_RULE_SLOPE && p->rule != MN_TUNER_RULE_MODEL && p->rule != MN_TUNER_RULE_SEQUENCE)
        return mn_fail(err, MN_INVALID, "tuner: unknown rule %d", (int)p->rule);
    return MN_OK;
}

/* One key's value into *q, unchecked against the others. */
static mn_status assign(mn_tuner_params *q, const char *key, double value, const char *text, mn_err *err)
{
    if (!strcmp(key, "cost")) {
        int c = text ? mn_tuner_cost_parse(text) : -1;
        if (c < 0)
            return mn_fail(err, MN_INVALID, "tuner.cost must be round or verify");
        q->cost = (mn_tuner_cost)c;
    } else if (!strcmp(key, "rule")) {
        int r = text ? mn_tuner_rule_parse(text) : -1;
        if (r < 0)
            return mn_fail(err, MN_INVALID, "tuner.rule must be slope, model or sequence");
        q->rule = (mn_tuner_rule)r;
    } else if (!strcmp(key, "margin")) {
        if (text || !(value >= 0 && value < 1)) /* as given: -1e-60 is -0 as a float */
            return mn_fail(err, MN_INVALID, "tuner.margin must be a number in [0, 1)");
        q->margin = (float)value;
    } else {
        static const char *const names[] = {"s_min", "s_max", "decision_threshold", "s_reward", "s_punish",
                                            "probe_every", "warm_up"};
        uint32_t *fields[] = {&q->s_min, &q->s_max, &q->decision_threshold, &q->s_reward, &q->s_punish,
                              &q->probe_every, &q->warm_up};
        size_t i = 0;
        while (i < sizeof names / sizeof *names && strcmp(key, names[i]))
            i++;
        if (i == sizeof names / sizeof *names)
            return mn_fail(err, MN_INVALID, "unknown tuner key '%s'", key);
        if (text || !(value >= 0 && value <= 1000000) || value != floor(value))
            return mn_fail(err, MN_INVALID, "tuner.%s must be a whole number in 0..1000000", key);
        *fields[i] = (uint32_t)value;
    }
    return MN_OK;
}

mn_status mn_tuner_set_param(mn_tuner_params *p, const char *key, double value, const char *text, mn_err *err)
{
    mn_tuner_params q = *p;
    mn_status st = assign(&q, key, value, text, err);
    if (st == MN_OK)
        st = mn_tuner_check(&q, err);
    if (st == MN_OK)
        *p = q;
    return st;
}

mn_status mn_tuner_parse(const char *spec, mn_tuner_mode *mode, mn_tuner_params *p, mn_err *err)
{
    char buf[256];
    if (strlen(spec) >= sizeof buf)
        return mn_fail(err, MN_INVALID, "--tuner: too long");
    strcpy(buf, spec);
    char *save = NULL, *tok = strtok_r(buf, ",", &save);
    int m = tok ? mn_tuner_mode_parse(tok) : -1;
    if (m < 0)
        return mn_fail(err, MN_INVALID, "--tuner: starts with fixed or adaptive, not '%s'", tok ? tok : "");
    mn_tuner_params q = *p;
    while ((tok = strtok_r(NULL, ",", &save))) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return mn_fail(err, MN_INVALID, "--tuner: '%s' is not KEY=VALUE", tok);
        *eq = 0;
        char *end;
        double v = strtod(eq + 1, &end);
        bool number = end != eq + 1 && !*end;
        mn_status st = assign(&q, tok, number ? v : NAN, number ? NULL : eq + 1, err);
        if (st != MN_OK)
            return st;
    }
    mn_status st = mn_tuner_check(&q, err); /* once, the keys together: their order does not matter */
    if (st != MN_OK)
        return st;
    *mode = (mn_tuner_mode)m;
    *p = q;
    return MN_OK;
}

int mn_tuner_mode_parse(const char *name)
{
    return !strcmp(name, "adaptive") ? MN_TUNER_ADAPTIVE : !strcmp(name, "fixed") ? MN_TUNER_FIXED : -1;
}

const char *mn_tuner_mode_name(mn_tuner_mode m) { return m == MN_TUNER_ADAPTIVE ? "adaptive" : "fixed"; }

int mn_tuner_cost_parse(const char *name)
{
    return !strcmp(name, "round") ? MN_TUNER_COST_ROUND : !strcmp(name, "verify") ? MN_TUNER_COST_VERIFY : -1;
}

const char *mn_tuner_cost_name(mn_tuner_cost c) { return c == MN_TUNER_COST_VERIFY ? "verify" : "round"; }

static const char *const rule_names[] = {[MN_TUNER_RULE_SLOPE] = "slope", [MN_TUNER_RULE_MODEL] = "model",
                                          [MN_TUNER_RULE_SEQUENCE] = "sequence"};

int mn_tuner_rule_parse(const char *name)
{
    for (size_t i = 0; i < sizeof rule_names / sizeof *rule_names; i++)
        if (!strcmp(name, rule_names[i]))
            return (int)i;
    return -1;
}

const char *mn_tuner_rule_name(mn_tuner_rule r)
{
    return (size_t)r < sizeof rule_names / sizeof *rule_names ? rule_names[r] : "?";
}

static uint32_t clamp_s(const mn_tuner_params *p, uint32_t s)
{
    return s < p->s_min ? p->s_min : s > p->s_max ? p->s_max : s;
}

static void restart_window(mn_tuner_class *c)
{
    c->win_seconds = 0;
    c->win_tokens = 0;
    c->win_steps = 0;
    c->win_seqs = 0;
    memset(c->pair, 0, sizeof c->pair);
}

/* What a step's time counts changed (tuner.cost: with or without drafting and hand-offs): the
 * points and the model's sums of a step's seconds measured another quantity, and go. What the pass
 * alone cost (the draft-time line, the one-sequence passes) and what was kept stay. */
static void forget_times(mn_tuner_class *c)
{
    for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN; x++)
        c->at[x].known = false;
    mn_tuner_model *m = &c->model;
    memset(m->seconds, 0, sizeof m->seconds);
    memset(m->steps, 0, sizeof m->steps);
    m->spec_seconds = m->produced = 0;
}

void mn_tuner_reparam(mn_tuner *t, const mn_tuner_params *p)
{
    bool rule_changed = p->rule != t->p.rule, cost_changed = p->cost != t->p.cost;
    t->p = *p;
    for (int i = 0; i < MN_TUNER_CLASSES; i++) {
        if (rule_changed) { /* the model rule's neighbor probes are not the sequence rule's paired ones */
            t->c[i].probes = 0;
            t->c[i].probed_at = t->c[i].decisions;
            t->c[i].probe_gap = 0;
            t->c[i].home = t->c[i].s; /* the slope rule moves s alone: home is where it started */
        }
        if (cost_changed)
            forget_times(&t->c[i]);
        t->c[i].s = clamp_s(p, t->c[i].s);
        t->c[i].home = clamp_s(p, t->c[i].home);
        t->c[i].home_paired = 0;
        t->c[i].pairing = false;
        restart_window(&t->c[i]);
    }
}

void mn_tuner_restart(mn_tuner *t, uint32_t s0, bool clamp)
{
    for (int i = 0; i < MN_TUNER_CLASSES; i++) {
        t->c[i].s = t->c[i].home = clamp ? clamp_s(&t->p, s0) : s0;
        t->c[i].home_paired = 0;
        t->c[i].pairing = false;
        restart_window(&t->c[i]);
    }
}

void mn_tuner_init(mn_tuner *t, const mn_tuner_params *p, uint32_t s0)
{
    memset(t, 0, sizeof *t);
    t->p = *p;
    mn_tuner_restart(t, s0, true);
}

uint32_t mn_tuner_class_of(uint32_t batch)
{
    uint32_t c = 0;
    for (uint32_t top = 1; batch > top && c + 1 < MN_TUNER_CLASSES; top *= 2)
        c++;
    return c;
}

const char *mn_tuner_class_name(uint32_t cls)
{
    static const char *const names[MN_TUNER_CLASSES] = {"1", "2", "3-4", "5-8", "9-16", "17-32", "33+"};
    return cls < MN_TUNER_CLASSES ? names[cls] : "?";
}

/* The side other than home that a paired probe alternates with: s_max when home is plain, else 0. */
static uint32_t other_side(const mn_tuner *t, const mn_tuner_class *c)
{
    return c->home == t->p.s_min ? t->p.s_max : t->p.s_min;
}

static bool fresh(const mn_tuner *t, const mn_tuner_class *c, uint32_t s)
{
    return c->at[s].known && c->at[s].age <= t->p.probe_every;
}

static void line_add(mn_tuner_line *l, double w, double x, double y)
{
    l->w += w, l->x += w * x, l->y += w * y, l->xx += w * x * x, l->xy += w * x * y;
}

/* The denominator of the slope: > 0 when the points do not all share one x. */
static double line_den(const mn_tuner_line *l) { return l->w * l->xx - l->x * l->x; }

static double line_slope(const mn_tuner_line *l) { return (l->w * l->xy - l->x * l->y) / line_den(l); }

/* Least-squares slope of cost over the fresh points within FIT_REACH of s; *n gets their count. */
static double fit_slope(const mn_tuner *t, const mn_tuner_class *c, uint32_t s, int *n)
{
    uint32_t lo = s > FIT_REACH ? s - FIT_REACH : 0, hi = s + FIT_REACH;
    mn_tuner_line l = {0};
    *n = 0;
    for (uint32_t x = lo; x <= hi && x <= MN_TUNER_MAX_LEN; x++) {
        if (x < t->p.s_min || x > t->p.s_max || !fresh(t, c, x))
            continue;
        line_add(&l, 1, x, c->at[x].cost);
        (*n)++;
    }
    return *n >= 2 && line_den(&l) > 0 ? line_slope(&l) : 0.0;
}

/* The window at c->s is complete: it becomes the point of s, averaged with the point's last value
 * when that is still fresh (a resting length's point then carries the last windows, not one noisy
 * window); every other point ages. Returns the new point. */
static double record(const mn_tuner *t, mn_tuner_class *c)
{
    double cost = c->win_tokens ? c->win_seconds / (double)c->win_tokens : INFINITY;
    for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN; x++)
        c->at[x].age += c->at[x].known;
    mn_tuner_point *pt = &c->at[c->s];
    if (pt->known && pt->age <= t->p.probe_every + 1) /* fresh (it aged just above): smooth */
        cost = 0.5 * (pt->cost + cost);
    *pt = (mn_tuner_point){.cost = cost, .age = 0, .known = true, .steps = pt->steps};
    restart_window(c);
    return cost;
}

/* After record(): the rule of tuner.h moves c->s, or not. */
static void decide(mn_tuner *t, mn_tuner_class *c, uint32_t cls, double cost, mn_tuner_decision *d)
{
    const mn_tuner_params *p = &t->p;
    uint32_t s = c->s;
    int n;
    double slope = fit_slope(t, c, s, &n);
    bool up_ok = s + p->s_reward <= p->s_max, down_ok = s >= p->s_min + p->s_punish;
    bool go_up = n >= 2 ? slope <= 0 : true;
    if ((go_up && !up_ok) || (!go_up && !down_ok))
        go_up = !go_up;
    uint32_t target = s;
    if (go_up && up_ok)
        target = s + p->s_reward;
    else if (!go_up && down_ok)
        target = s - p->s_punish;
    const char *why = n >= 2 ? "slope" : "probe";
    if (target != s && fresh(t, c, target)) {
        if (!(c->at[target].cost < cost * (1.0 - p->margin)))
            target = s, why = "rest";
    } else if (target != s) {
        why = "probe";
    }
    c->decisions++;
    c->moves += target != s;
    c->s = target;
    *d = (mn_tuner_decision){.cls = cls, .from = s, .to = target, .cost = cost, .slope = slope, .why = why};
}

/* ---- the model rule ---- */

/* One step into the class's model: its time at its length, what each length would have kept, and
 * its time against its drafted tokens. */
static void model_add(mn_tuner_model *m, const mn_tuner_step *st)
{
    uint32_t s = st->s;
    m->seconds[s] += st->seconds / st->batch;
    m->steps[s] += 1;
    if (s == 0) /* plain decoding: no draft, nothing learned about acceptance */
        return;
    double work = st->seconds - st->handoff - st->drafting; /* the pass: beta's (tuner.h) */
    line_add(&m->draft_time, 1, (double)st->drafted / st->batch, work / st->batch); /* per sequence */
    if (st->batch == 1 && st->drafted <= MN_TUNER_MAX_LEN)
        m->pass_seconds[st->drafted] += work, m->pass_steps[st->drafted] += 1;
    m->spec_seconds += st->seconds / st->batch;
    m->produced += (double)st->tokens / st->batch;
    for (uint32_t a = 0; a <= s; a++) {
        double ended = st->ended[a], full = st->full[a], n = ended + full;
        if (n == 0)
            continue;
        m->seqs += n;
        m->kept += n * a;
        m->stopped += ended;
        m->full[a] += full;
        for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN; x++)
            m->yield[x] += n * (1 + (a < x ? a : x));
        /* by kind: the costly drafts' counts, the free ones' the rest */
        double c_ended = st->costly_ended[a], c_n = c_ended + st->costly_full[a];
        double k_ended[MN_TUNER_KINDS] = {ended - c_ended - (a == 0 ? st->undrafted : 0), c_ended};
        double k_n[MN_TUNER_KINDS] = {n - c_n, c_n};
        for (uint32_t k = 0; k < MN_TUNER_KINDS; k++) {
            for (uint32_t j = 1; j <= a; j++) /* positions kept */
                m->reach[k][j] += k_n[k], m->keep[k][j] += k_n[k];
            if (a < MN_TUNER_MAX_LEN) /* the one an ended draft stopped at */
                m->reach[k][a + 1] += k_ended[k];
        }
    }
    m->costly_seconds += st->costly_drafting;
    m->costly_positions += st->costly_positions;
}

/* After a window: the per-length times decay; the speculation sums (acceptance, the
 * line of drafting time, seconds and tokens at speculating steps) only after a window that
 * speculated. Decaying them while the class decodes plainly renews nothing: their ratios stay
 * where they were, but their weights fell until the line had less than its two points' worth
 * (theta NAN) and every sequence drafted s_max. With the vote at 16 sequences, a probe after
 * long plain decoding then verified 122-128 draft tokens a step, passes of 11.7-15.8 ms where a
 * plain step took 2.6 (bench-steps traces, docs/speculation.md, "The length tuner"). */
static void model_decay(mn_tuner_model *m, bool speculated)
{
    for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN; x++) {
        m->seconds[x] *= MN_TUNER_MODEL_DECAY;
        m->steps[x] *= MN_TUNER_MODEL_DECAY;
        if (m->steps[x] < MN_TUNER_MODEL_FLOOR)
            m->seconds[x] = m->steps[x] = 0;
    }
    if (!speculated)
        return;
    mn_tuner_line *l = &m->draft_time;
    double *sums[] = {&m->seqs, &m->kept, &m->stopped, &l->w, &l->x, &l->y, &l->xx, &l->xy, &m->spec_seconds,
                      &m->produced, &m->costly_seconds, &m->costly_positions};
    for (size_t i = 0; i < sizeof sums / sizeof *sums; i++)
        *sums[i] *= MN_TUNER_MODEL_DECAY;
    for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN; x++) {
        m->yield[x] *= MN_TUNER_MODEL_DECAY;
        m->full[x] *= MN_TUNER_MODEL_DECAY;
        for (uint32_t k = 0; k < MN_TUNER_KINDS; k++) {
            m->reach[k][x] *= MN_TUNER_MODEL_DECAY;
            m->keep[k][x] *= MN_TUNER_MODEL_DECAY;
            if (m->reach[k][x] < MN_TUNER_MODEL_FLOOR)
                m->reach[k][x] = m->keep[k][x] = 0;
        }
        m->pass_seconds[x] *= MN_TUNER_MODEL_DECAY;
        m->pass_steps[x] *= MN_TUNER_MODEL_DECAY;
        if (m->pass_steps[x] < MN_TUNER_MODEL_FLOOR)
            m->pass_seconds[x] = m->pass_steps[x] = 0;
    }
    if (m->seqs < MN_TUNER_MODEL_FLOOR) { /* what a sequence's drafts kept: seqs weighs it */
        m->seqs = m->kept = m->stopped = m->spec_seconds = m->produced = 0;
        memset(m->yield, 0, sizeof m->yield);
        memset(m->full, 0, sizeof m->full);
    }
    if (l->w < MN_TUNER_MODEL_FLOOR)
        *l = (mn_tuner_line){0};
    if (m->costly_positions < MN_TUNER_MODEL_FLOOR)
        m->costly_seconds = m->costly_positions = 0;
}

/* Tokens a sequence produces per step at length x: the exact part, plus, for the sequences censored
 * at a shorter length s, the geometric continuation rho + rho^2 + ... + rho^(x - s). */
static double model_yield(const mn_tuner_model *m, uint32_t x)
{
    if (x == 0)
        return 1;
    if (!(m->seqs > 0))
        return NAN;
    double rho = m->kept + m->stopped > 0 ? m->kept / (m->kept + m->stopped) : 0;
    double y = m->yield[x];
    for (uint32_t s = 0; s < x; s++) {
        double extra = 0, r = 1;
        for (uint32_t j = s; j < x; j++)
            extra += r *= rho;
        y += m->full[s] * extra;
    }
    return y / m->seqs;
}

/* Seconds per sequence and step at x: its own mean once it has a quarter of a window's steps (any
 * step at 0, which the line below does not describe: no drafting round), else the weighted
 * least-squares line through the lengths >= 1 that ran (NAN without two). For 0 the line's value
 * overestimates (it carries the round's fixed cost), which errs toward speculating. */
static double model_time(const mn_tuner *t, const mn_tuner_model *m, uint32_t x)
{
    double enough = t->p.decision_threshold / 4.0;
    if (m->steps[x] >= enough || (x == 0 && m->steps[0] > 0))
        return m->seconds[x] / m->steps[x];
    mn_tuner_line l = {0};
    int n = 0;
    for (uint32_t k = 1; k <= MN_TUNER_MAX_LEN; k++) {
        double wk = m->steps[k];
        if (!(wk > 0))
            continue;
        line_add(&l, wk, k, m->seconds[k] / wk);
        n++;
    }
    if (n < 2 || !(line_den(&l) > 0))
        return NAN;
    double b = line_slope(&l), a = (l.y - b * l.x) / l.w;
    double y = a + b * x;
    return y > 0 ? y : NAN;
}

double mn_tuner_model_cost(const mn_tuner *t, uint32_t cls, uint32_t x)
{
    if (cls >= MN_TUNER_CLASSES || x > MN_TUNER_MAX_LEN)
        return NAN;
    const mn_tuner_model *m = &t->c[cls].model;
    return model_time(t, m, x) / model_yield(m, x);
}

/* After record(): the cheapest length by the model becomes home when it beats home's estimate by the
 * margin (or home has none). The class runs at home, except that every probe_every-th decision, and
 * whenever neither neighbor of home has an estimate, it runs one window at a neighbor (above, then
 * below; the other one at a bound) so that the times around home stay current. */
static void decide_model(mn_tuner *t, mn_tuner_class *c, uint32_t cls, double cost, mn_tuner_decision *d)
{
    const mn_tuner_params *p = &t->p;
    double est[MN_TUNER_MAX_LEN + 2]; /* the model's cost by length; NAN unknown, and past the end */
    for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN + 1; x++)
        est[x] = mn_tuner_model_cost(t, cls, x);
    uint32_t from = c->s, best = c->home;
    for (uint32_t x = p->s_min; x <= p->s_max; x++)
        if (!isnan(est[x]) && (isnan(est[best]) || est[x] < est[best]))
            best = x;
    const char *why = "rest";
    if (best != c->home && (isnan(est[c->home]) || est[best] < est[c->home] * (1 - p->margin)))
        c->home = best, why = "model";
    uint32_t to = c->home;
    bool up_ok = to < p->s_max, down_ok = to > p->s_min;
    bool blind = !(up_ok && !isnan(est[to + 1])) && !(down_ok && !isnan(est[to - 1]));
    c->decisions++;
    if (from == c->home && (blind || c->decisions % p->probe_every == 0) && (up_ok || down_ok)) {
        to = up_ok && (!down_ok || c->probes % 2 == 0) ? to + 1 : to - 1;
        why = "probe";
        c->probes++;
    }
    c->moves += to != from;
    c->s = to;
    double slope = 0; /* the model's local slope for the event: cost(to + 1) - cost(to) */
    if (!isnan(est[to + 1]) && !isnan(est[to]))
        slope = est[to + 1] - est[to];
    *d = (mn_tuner_decision){.cls = cls, .from = from, .to = to, .cost = cost, .slope = slope, .why = why};
}

/* ---- classes that have not decided ---- */

/* Every class into near[0..MN_TUNER_CLASSES), nearest to cls (< MN_TUNER_CLASSES) first: cls
 * itself, then at each distance the larger batch before the smaller. */
static void nearest_first(uint32_t cls, uint32_t *near)
{
    uint32_t n = 0;
    near[n++] = cls;
    for (uint32_t k = 1; k < MN_TUNER_CLASSES; k++) {
        if (cls + k < MN_TUNER_CLASSES)
            near[n++] = cls + k;
        if (cls >= k)
            near[n++] = cls - k;
    }
}

/* The nearest class that has decided, the larger batch on a tie; -1 when none has. */
static int leader(const mn_tuner *t, uint32_t cls)
{
    uint32_t near[MN_TUNER_CLASSES];
    nearest_first(cls, near);
    for (uint32_t i = 1; i < MN_TUNER_CLASSES; i++)
        if (t->c[near[i]].decisions)
            return (int)near[i];
    return -1;
}

/* Classes that have not decided yet run at their leader's length rather than the starting one: a
 * batch size the load passes through only briefly (2 to 8 sequences while 16 clients ramp up and
 * down) may never fill a window, and the best length moves with the batch size, so a neighbor's is
 * the best guess; with model drafters that cost more than they save it is plain decoding, where
 * the starting length would draft at every step. */
static void follow_leaders(mn_tuner *t)
{
    for (uint32_t k = 0; k < MN_TUNER_CLASSES; k++) {
        mn_tuner_class *c = &t->c[k];
        int lead = c->decisions ? -1 : leader(t, k);
        if (lead < 0)
            continue;
        /* the leader's resting length, not a probe's: a probe is the leader's own measurement (of
         * s_max at 16 sequences, say), and followers copying it drafted at every ramp step while it ran */
        uint32_t s = t->p.rule == MN_TUNER_RULE_SLOPE ? t->c[lead].s : t->c[lead].home;
        if (c->s == s && c->home == s)
            continue;
        c->s = c->home = s;
        restart_window(c);
    }
}

/* ---- the sequence rule ---- */

/* The class's rate of keeping a first token of kind k (NAN before any such draft was verified) into
 * rate->first, and into carry[2..MN_TUNER_MAX_LEN] its rate of keeping token j once j - 1 was
 * kept: one pseudo-draft at the rate before it as a prior, so that a position no draft reached is
 * taken as good as the one before it. */
static void class_acceptance(const mn_tuner_model *m, mn_tuner_kind k, mn_tuner_rate *rate)
{
    const double *reach = m->reach[k], *keep = m->keep[k];
    double first = reach[1] > 0 ? keep[1] / reach[1] : NAN, prev = first;
    for (uint32_t j = 2; j <= MN_TUNER_MAX_LEN; j++)
        rate->carry[j] = (float)(prev = (keep[j] + prev) / (reach[j] + 1));
    rate->first = (float)first;
}

static float clamp_theta(double theta) { return (float)(theta < 0.01 ? 0.01 : theta > 1 ? 1 : theta); }

/* c: the class's seconds per produced token at speculating steps, hand-offs included (what a
 * produced token saves); NAN before any. */
static double class_c(const mn_tuner_model *m)
{
    return m->produced > 0 && m->spec_seconds > 0 ? m->spec_seconds / m->produced : NAN;
}

/* The free drafts' theta = beta / c: the slope of the steps' work over drafted tokens (both per
 * sequence of a step: the seconds one more draft token adds), over seconds per produced token at
 * speculating steps (class_c). NAN without two distinct draft totals. A slope at or below 0 (noise,
 * or drafting that costs nothing measurable) makes the least theta, 0.01 (clamp_theta). Hand-offs
 * stay out of the slope: a step pays them whatever it drafted, and they are large and vary (254-377
 * us a step with 16 clients on two cores, most of it the workers' wake-up), which would only blur
 * it. *delta_c: the costly drafters' seconds per sequence and position over c (0 before they
 * drafted). */
static double class_theta(const mn_tuner_model *m, double *delta_c)
{
    const mn_tuner_line *l = &m->draft_time;
    double c = class_c(m);
    if (!(l->w >= 2) || !(line_den(l) > 1e-9 * l->w * l->xx) || isnan(c))
        return NAN;
    double beta = line_slope(l);
    *delta_c = m->costly_positions > 0 ? m->costly_seconds / m->costly_positions / c : 0;
    return beta / c;
}

/* The class of one sequence prices a draft of j tokens by its own verify curve: price[j] =
 * (t(j) - t(0)) / c, t(j) the mean pass time of its steps that drafted j tokens where a step's
 * worth of them is left after the decay, else interpolated between the measured ones around it,
 * or past the last one extended by theta c a token; and never falling (a longer draft's pass is
 * not cheaper: the means are noisy). A straight line over drafted tokens misses the curve's steps:
 * on the bundled target a pass of 4 new tokens cost 1.50 decode steps and one of 5 cost 1.93
 * (README, "What a verification costs"), and a fixed length can sit just below a step. False
 * without t(0) or c. */
static bool curve_price(const mn_tuner_model *m, double theta, float *price)
{
    double c = class_c(m), t[MN_TUNER_MAX_LEN + 1];
    if (!(m->pass_steps[0] >= 1) || isnan(c))
        return false;
    uint32_t lo = 0; /* the last measured length */
    for (uint32_t j = 0; j <= MN_TUNER_MAX_LEN; j++) {
        if (m->pass_steps[j] >= 1) {
            t[lo = j] = m->pass_seconds[j] / m->pass_steps[j];
            continue;
        }
        uint32_t hi = j + 1;
        while (hi <= MN_TUNER_MAX_LEN && !(m->pass_steps[hi] >= 1))
            hi++;
        t[j] = hi <= MN_TUNER_MAX_LEN ? t[lo] + (m->pass_seconds[hi] / m->pass_steps[hi] - t[lo]) * (j - lo) / (hi - lo)
                                      : t[lo] + theta * c * (j - lo);
    }
    for (uint32_t j = 0; j <= MN_TUNER_MAX_LEN; j++) {
        t[j] = j && t[j - 1] > t[j] ? t[j - 1] : t[j];
        price[j] = (float)((t[j] - t[0]) / c);
    }
    return true;
}

mn_tuner_advice mn_tuner_fixed_advice(uint32_t s)
{
    mn_tuner_advice a = {.s = s, .other = s};
    for (uint32_t k = 0; k < MN_TUNER_KINDS; k++) {
        a.kind[k].theta = a.kind[k].first = NAN;
        for (uint32_t j = 0; j <= MN_TUNER_MAX_LEN; j++)
            a.kind[k].price[j] = NAN;
    }
    a.kind[MN_TUNER_FREE].least = 1;
    return a;
}

mn_tuner_advice mn_tuner_advise(const mn_tuner *t, uint32_t cls)
{
    cls = cls < MN_TUNER_CLASSES ? cls : 0;
    const mn_tuner_class *c = &t->c[cls];
    mn_tuner_advice a = mn_tuner_fixed_advice(c->s);
    if (t->p.rule != MN_TUNER_RULE_SEQUENCE)
        return a;
    if (c->pairing)
        a.other = other_side(t, c);
    /* A figure the class has not measured yet comes from the nearest class that has it (the larger
     * batch on a tie): without theta every sequence drafts its cap, the dearest length there is,
     * and a class's first probe of speculating (a batch size that has only decoded plainly) then
     * drafted s_max for every sequence (with the vote at 16 sequences, passes of 11.7-15.8 ms
     * against 2.6 for a plain step). A smaller batch's theta is lower (its draft tokens are
     * cheaper), but nearer than that. */
    uint32_t near[MN_TUNER_CLASSES];
    nearest_first(cls, near);
    mn_tuner_rate *free = &a.kind[MN_TUNER_FREE], *costly = &a.kind[MN_TUNER_COSTLY];
    double theta = NAN, delta_c = 0;
    for (uint32_t i = 0; i < MN_TUNER_CLASSES; i++) {
        const mn_tuner_model *m = &t->c[near[i]].model;
        if (isnan(theta))
            theta = class_theta(m, &delta_c);
        for (uint32_t k = 0; k < MN_TUNER_KINDS; k++)
            if (isnan(a.kind[k].first))
                class_acceptance(m, (mn_tuner_kind)k, &a.kind[k]);
    }
    if (!isnan(theta)) {
        free->theta = clamp_theta(theta);
        costly->theta = clamp_theta(theta + delta_c);
        float curve[MN_TUNER_MAX_LEN + 1];
        bool own = cls == 0 && curve_price(&c->model, free->theta, curve);
        for (uint32_t j = 0; j <= MN_TUNER_MAX_LEN; j++) {
            free->price[j] = own ? curve[j] : (float)j * free->theta;
            costly->price[j] = own ? curve[j] + (float)(j * delta_c) : (float)j * costly->theta;
        }
    }
    if (isnan(costly->first)) { /* no costly draft verified yet: as good as a free one */
        costly->first = free->first;
        memcpy(costly->carry, free->carry, sizeof costly->carry);
    }
    return a;
}

void mn_tuner_seq_observe(mn_tuner_seq *q, uint32_t kept)
{
    q->tries = q->tries * MN_TUNER_SEQ_DECAY + 1;
    q->hits = q->hits * MN_TUNER_SEQ_DECAY + (kept > 0);
}

uint32_t mn_tuner_seq_length(const mn_tuner_seq *q, const mn_tuner_rate *rate, uint32_t cap)
{
    if (!cap || isnan(rate->price[1]) || isnan(rate->first))
        return cap;
    /* P_i(1), the class's first-token rate as one draft's worth of prior; P_i(j + 1) = P_i(j) carry(j + 1) */
    double p = (q->hits + rate->first) / (q->tries + 1), kept = 0, most = 0;
    uint32_t best = 0;
    for (uint32_t j = 1; j <= cap && j <= MN_TUNER_MAX_LEN; j++) {
        kept += p; /* P_i(1) + ... + P_i(j): the tokens a draft of j keeps, expected */
        if (kept - rate->price[j] > most)
            most = kept - rate->price[j], best = j;
        if (j < MN_TUNER_MAX_LEN)
            p *= rate->carry[j + 1];
    }
    return best > rate->least ? best : rate->least < cap ? rate->least : cap;
}

/* A paired probe's figure for one side: seconds per produced token. */
static double pair_cost(const mn_tuner_pair *q) { return q->tokens ? q->seconds / (double)q->tokens : NAN; }

/* How many standard errors side a's cost per token (its steps' seconds over their tokens) lies
 * below side b's (negative: above; both need two steps). A step's time and tokens vary with what
 * it kept (a speculating step of one sequence makes 1 to s + 1 tokens) and with the machine; the
 * ratio's variance is the delta method's, sum (s_i - R t_i)^2 / (n (n - 1) tbar^2). */
static double pair_z(const mn_tuner_pair *a, const mn_tuner_pair *b)
{
    double r[2], v = 0;
    const mn_tuner_pair *q[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        double n = q[i]->steps, tbar = q[i]->tokens / n;
        r[i] = pair_cost(q[i]);
        double dev = q[i]->ss - 2 * r[i] * q[i]->st + r[i] * r[i] * q[i]->tt;
        double var = dev / (n * (n - 1) * tbar * tbar);
        v += var > 0 ? var : 0;
    }
    return v > 0 ? (r[1] - r[0]) / sqrt(v) : r[1] > r[0] ? INFINITY : r[1] < r[0] ? -INFINITY : 0;
}

/* Whether side a of a paired probe is clearly cheaper than side b: by PAIR_Z standard errors or by
 * PAIR_CLEAR of b's cost. The second is for speculating steps whose costs have heavy tails (a
 * model draft that sat out catching up when it is asked again): with the vote at 16 sequences a
 * probe found speculating 60% dearer at 1.1 standard errors, and a class that had chosen it stayed. */
static bool pair_clearly_cheaper(const mn_tuner_pair *a, const mn_tuner_pair *b)
{
    return pair_cost(a) < pair_cost(b) * (1 - PAIR_CLEAR) || pair_z(a, b) > PAIR_Z;
}

/* Whether side `to` of a paired probe is cheaper than side `from`: by the margin over their steps,
 * and, when `clearly`, pair_clearly_cheaper. */
static bool pair_cheaper(const mn_tuner_pair *to, const mn_tuner_pair *from, float margin, bool clearly)
{
    return to->steps >= 2 && from->steps >= 2 && pair_cost(to) < pair_cost(from) * (1 - margin) &&
           (!clearly || pair_clearly_cheaper(to, from));
}

/* After a paired probe: both sides' points on the curve, from their own steps; the window's cost. */
static double record_pair(const mn_tuner *t, mn_tuner_class *c)
{
    for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN; x++)
        c->at[x].age += c->at[x].known;
    for (int side = 0; side < 2; side++) {
        mn_tuner_point *pt = &c->at[side ? t->p.s_max : t->p.s_min];
        if (c->pair[side].tokens)
            *pt = (mn_tuner_point){.cost = pair_cost(&c->pair[side]), .age = 0, .known = true, .steps = pt->steps};
    }
    double cost = c->win_tokens ? c->win_seconds / (double)c->win_tokens : INFINITY;
    restart_window(c);
    return cost;
}

/* After a window: the sequences choose their lengths, so the class's length is their bound s_max,
 * or, when s_min is 0, plain decoding where that costs less per produced token. Which side is
 * cheaper only a paired probe decides: for one window the class's steps alternate between its
 * home and the other side, and whichever costs less per token over those steps, by the margin,
 * becomes home; after the class's first probe, only clearly (pair_cheaper: a home stays while the
 * steps do not tell). The class starts with one (right after its window at the starting length,
 * which is neither side), and runs one every probe_gap windows; a probe that changes nothing doubles
 * the gap (up to 4 probe_every: a side that loses by far, model drafters at a large batch, should
 * not cost half a window in 16 forever), one that moves the class resets it to probe_every. A
 * home window that costs PROBE_ALARM times the other side's last paired figure starts one at once:
 * the probe that chose home is contradicted; so does one that costs PROBE_ALARM times home's own
 * figure in that probe and comes within PROBE_ALARM of the other side's: the text changed (served
 * kjv, then devil, at 16 clients, the vote's windows went from 52 us a token, its figure, to 59,
 * beside plain decoding's 60, and the next timed probe was 32 windows away, past the end of the
 * run). At 16 sequences on devil the vote's class stayed speculating at 1.5 (as PROBE_LOSES was),
 * its windows 12% dearer a token than the plain decoding its first probe had measured: that probe
 * had found the opposite on the warm-up's noise, and the next was probe_every windows away, past
 * the end of a benchmark's run. */
static void decide_sequence(mn_tuner *t, mn_tuner_class *c, uint32_t cls, double cost,
                            const mn_tuner_pair *paired, mn_tuner_decision *d)
{
    const mn_tuner_params *p = &t->p;
    uint32_t from = c->home, lo = p->s_min, hi = p->s_max;
    const char *why = "rest";
    if (paired) {
        bool clearly = c->probes > 1; /* the first chooses; later ones must be sure to move it */
        if (c->home == hi && pair_cheaper(&paired[0], &paired[1], p->margin, clearly))
            c->home = lo, why = "pair";
        else if (c->home == lo && pair_cheaper(&paired[1], &paired[0], p->margin, clearly))
            c->home = hi, why = "pair";
        c->probe_gap = c->home == from ? 2 * c->probe_gap : p->probe_every;
        c->home_paired = pair_cost(&paired[c->home != lo]);
    } else if (c->home != hi && (lo > 0 || c->home != 0)) { /* the starting length; above s_min 0 */
        c->home = hi, why = "model";                            /* there is no plain side either */
    }
    uint32_t max_gap = 4 * p->probe_every;
    c->probe_gap = c->probe_gap < p->probe_every ? p->probe_every : c->probe_gap > max_gap ? max_gap : c->probe_gap;
    c->decisions++;
    /* a home window that cost PROBE_ALARM times the other side's last paired figure: something
     * changed (the text, the load), or the probe that chose home was wrong, and the next probe
     * should not wait out the gap; so too when it cost PROBE_ALARM times home's own figure and
     * came within PROBE_ALARM of the other side's (far below it, home stays whatever it costs) */
    const mn_tuner_point *there = &c->at[other_side(t, c)];
    bool dearer = there->known && cost > PROBE_ALARM * there->cost;
    bool risen = there->known && c->home_paired > 0 && cost > PROBE_ALARM * c->home_paired &&
                 cost * PROBE_ALARM > there->cost;
    bool alarm = !paired && (dearer || risen);
    bool first = !c->probes, due = alarm || c->decisions - c->probed_at >= c->probe_gap;
    c->pairing = lo == 0 && hi > 0 && !paired && (first || due);
    if (c->pairing) {
        why = "probe";
        c->probes++;
        c->probed_at = c->decisions;
    }
    c->moves += c->home != from;
    c->s = c->home;
    *d = (mn_tuner_decision){.cls = cls, .from = from, .to = c->home, .cost = cost, .slope = 0, .why = why};
}

/* Whether the class's window is complete: decision_threshold steps at s. A paired probe (sequence
 * rule) runs until one side is clearly cheaper (by PAIR_Z standard errors or PAIR_CLEAR of the
 * other's cost), once each side holds decision_threshold verified sequences and half
 * decision_threshold steps (a class's first probe, whose choice later ones must clearly refute to
 * undo, decision_threshold); or after two
 * steps on each once the other side already costs PROBE_LOSES times home's figure a token over
 * the same steps (the vote of three model drafts at 16 sequences costs 2.5 times plain decoding a
 * token); at most 4 decision_threshold steps, or 4 blocks of MN_TUNER_PAIR_BLOCK where that is more
 * (at decision_threshold 1 the window ended inside home's first block, and the other side never
 * ran). It asks a coarse question (is the other side cheaper at all?), and with many sequences a step, where speculating usually loses by far, every
 * step of it at the other side is paid for: with three model drafts and the n-gram one at 16
 * sequences, a probe's 32 steps at s_max cost a fifth of a 32-request run. */
static bool window_done(const mn_tuner *t, const mn_tuner_class *c)
{
    uint32_t n = t->p.decision_threshold;
    if (!c->pairing)
        return c->win_steps >= n;
    uint32_t most = 4 * n > 4 * MN_TUNER_PAIR_BLOCK ? 4 * n : 4 * MN_TUNER_PAIR_BLOCK; /* blocks on each side */
    if (c->win_steps >= most)
        return true;
    const mn_tuner_pair *a = &c->pair[c->home > 0], *b = &c->pair[c->home == 0];
    if (a->steps < 2 || b->steps < 2 || b->seqs < n)
        return false;
    if (pair_cost(b) > PROBE_LOSES * pair_cost(a))
        return true;
    uint32_t least = c->probes > 1 ? (n + 1) / 2 : n; /* the first probe's choice is the hardest to undo */
    if (a->steps < least || b->steps < least || a->seqs < n)
        return false;
    return pair_clearly_cheaper(a, b) || pair_clearly_cheaper(b, a);
}

uint32_t mn_tuner_step_length(const mn_tuner_advice *a, uint32_t steps)
{
    return steps / MN_TUNER_PAIR_BLOCK % 2 ? a->other : a->s;
}

bool mn_tuner_observe(mn_tuner *t, const mn_tuner_step *st, bool adapt, mn_tuner_decision *d)
{
    uint32_t cls = mn_tuner_class_of(st->planned ? st->planned : st->batch ? st->batch : 1);
    mn_tuner_class *c = &t->c[cls];
    if (st->s > MN_TUNER_MAX_LEN || !(st->seconds >= 0) || !isfinite(st->seconds) || !st->batch || !st->tokens)
        return false;
    if (st->s && t->warmed < t->p.warm_up) { /* the drafters' weights are still learning */
        t->warmed += st->batch;
        return false;
    }
    model_add(&c->model, st); /* any length's step tells the model something */
    bool paired = c->pairing && st->s == other_side(t, c);
    if (st->s != c->s && !paired)
        return false;
    if (c->pairing) {
        mn_tuner_pair *q = &c->pair[st->s > 0];
        q->ss += st->seconds * st->seconds;
        q->st += st->seconds * st->tokens;
        q->tt += (double)st->tokens * st->tokens;
        q->seconds += st->seconds;
        q->tokens += st->tokens;
        q->steps++;
        q->seqs += st->batch;
    }
    c->win_seconds += st->seconds;
    c->win_tokens += st->tokens;
    c->win_seqs += st->batch;
    c->at[st->s].steps++;
    c->win_steps++;
    if (!window_done(t, c))
        return false;
    bool was_pairing = c->pairing, speculated = c->s > 0 || c->pair[1].steps > 0;
    mn_tuner_pair pair[2] = {c->pair[0], c->pair[1]};
    double cost = was_pairing ? record_pair(t, c) : record(t, c);
    model_decay(&c->model, speculated);
    c->pairing = false; /* decide_sequence may start the next one */
    if (!adapt)
        return false;
    if (t->p.rule == MN_TUNER_RULE_MODEL)
        decide_model(t, c, cls, cost, d);
    else if (t->p.rule == MN_TUNER_RULE_SEQUENCE)
        decide_sequence(t, c, cls, cost, was_pairing ? pair : NULL, d);
    else
        decide(t, c, cls, cost, d);
    follow_leaders(t);
    return true;
}
