/* tuner.c - per-class curves of cost per token and the slope rule (see tuner.h).
 *
 * Invariants: every class's s lies in [p.s_min, p.s_max]; its window counts only steps at s; a
 * point's age counts the class's decisions since it was measured. */
#include "spec/tuner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIT_REACH 1 /* the fit takes the fresh points next to s: a local slope */

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
        .cost = MN_TUNER_COST_ROUND,
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
    return MN_OK;
}

mn_status mn_tuner_set_param(mn_tuner_params *p, const char *key, double value, const char *text, mn_err *err)
{
    mn_tuner_params q = *p;
    if (!strcmp(key, "cost")) {
        int c = text ? mn_tuner_cost_parse(text) : -1;
        if (c < 0)
            return mn_fail(err, MN_INVALID, "tuner.cost must be round or verify");
        q.cost = (mn_tuner_cost)c;
    } else if (!strcmp(key, "margin")) {
        if (text || !isfinite(value))
            return mn_fail(err, MN_INVALID, "tuner.margin must be a number");
        q.margin = (float)value;
    } else {
        static const char *const names[] = {"s_min", "s_max", "decision_threshold", "s_reward", "s_punish",
                                            "probe_every"};
        uint32_t *fields[] = {&q.s_min, &q.s_max, &q.decision_threshold, &q.s_reward, &q.s_punish, &q.probe_every};
        size_t i = 0;
        while (i < sizeof names / sizeof *names && strcmp(key, names[i]))
            i++;
        if (i == sizeof names / sizeof *names)
            return mn_fail(err, MN_INVALID, "unknown tuner key '%s'", key);
        if (text || !(value >= 0 && value <= 1000000) || value != floor(value))
            return mn_fail(err, MN_INVALID, "tuner.%s must be a whole number", key);
        *fields[i] = (uint32_t)value;
    }
    mn_status st = mn_tuner_check(&q, err);
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
        mn_status st = mn_tuner_set_param(&q, tok, number ? v : NAN, number ? NULL : eq + 1, err);
        if (st != MN_OK)
            return st;
    }
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

static uint32_t clamp_s(const mn_tuner_params *p, uint32_t s)
{
    return s < p->s_min ? p->s_min : s > p->s_max ? p->s_max : s;
}

static void restart_window(mn_tuner_class *c)
{
    c->win_seconds = 0;
    c->win_tokens = 0;
    c->win_steps = 0;
}

void mn_tuner_reparam(mn_tuner *t, const mn_tuner_params *p)
{
    t->p = *p;
    for (int i = 0; i < MN_TUNER_CLASSES; i++) {
        t->c[i].s = clamp_s(p, t->c[i].s);
        restart_window(&t->c[i]);
    }
}

void mn_tuner_restart(mn_tuner *t, uint32_t s0, bool clamp)
{
    for (int i = 0; i < MN_TUNER_CLASSES; i++) {
        t->c[i].s = clamp ? clamp_s(&t->p, s0) : s0;
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

static bool fresh(const mn_tuner *t, const mn_tuner_class *c, uint32_t s)
{
    return c->at[s].known && c->at[s].age <= t->p.probe_every;
}

/* Least-squares slope of cost over the fresh points within FIT_REACH of s; *n gets their count. */
static double fit_slope(const mn_tuner *t, const mn_tuner_class *c, uint32_t s, int *n)
{
    uint32_t lo = s > FIT_REACH ? s - FIT_REACH : 0, hi = s + FIT_REACH;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    *n = 0;
    for (uint32_t x = lo; x <= hi && x <= MN_TUNER_MAX_LEN; x++) {
        if (x < t->p.s_min || x > t->p.s_max || !fresh(t, c, x))
            continue;
        double y = c->at[x].cost;
        sx += x;
        sy += y;
        sxx += (double)x * x;
        sxy += x * y;
        (*n)++;
    }
    double den = *n * sxx - sx * sx;
    return *n >= 2 && den > 0 ? (*n * sxy - sx * sy) / den : 0.0;
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

bool mn_tuner_observe(mn_tuner *t, uint32_t batch, uint32_t s, double seconds, uint32_t tokens, bool adapt,
                      mn_tuner_decision *d)
{
    uint32_t cls = mn_tuner_class_of(batch ? batch : 1);
    mn_tuner_class *c = &t->c[cls];
    if (s != c->s || s > MN_TUNER_MAX_LEN || !(seconds >= 0))
        return false;
    c->win_seconds += seconds;
    c->win_tokens += tokens;
    c->at[s].steps++;
    if (++c->win_steps < t->p.decision_threshold)
        return false;
    double cost = record(t, c);
    if (!adapt)
        return false;
    decide(t, c, cls, cost, d);
    return true;
}
