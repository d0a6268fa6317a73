/* weights.c - per-drafter ACR windows and the reward/punish rule.
 *
 * Invariants: for each drafter, count <= par.window <= MN_WEIGHTS_WINDOW_MAX; the last `count`
 * rates are rate[d][head-count .. head) modulo par.window, oldest first; every weight lies in
 * [par.min_weight, par.max_weight] once it has been updated (the initial 1 lies there by the
 * parameter ranges). The ACR is recomputed from the ring, oldest to newest, on every read, so it is
 * exact for the values held and never drifts the way a running sum would.
 */
#include "spec/weights.h"

#include <math.h>
#include <string.h>

mn_weights_params mn_weights_defaults(void)
{
    return (mn_weights_params){
        .window = 16,
        .reward_threshold = 0.6f,
        .punish_threshold = 0.3f,
        .reward_factor = 1.1f,
        .punish_factor = 0.8f,
        .min_weight = 1.0f / 16.0f,
        .max_weight = 16.0f,
    };
}

mn_status mn_weights_check(const mn_weights_params *p, mn_err *err)
{
    if (p->window < 1 || p->window > MN_WEIGHTS_WINDOW_MAX)
        return mn_fail(err, MN_INVALID, "weights: window %u outside 1..%u", p->window,
                       MN_WEIGHTS_WINDOW_MAX);
    if (!isfinite(p->reward_threshold) || !isfinite(p->punish_threshold) ||
        !(p->punish_threshold <= p->reward_threshold))
        return mn_fail(err, MN_INVALID, "weights: want punish_threshold %g <= reward_threshold %g",
                       (double)p->punish_threshold, (double)p->reward_threshold);
    if (!isfinite(p->reward_factor) || !(p->reward_factor >= 1.0f))
        return mn_fail(err, MN_INVALID, "weights: reward_factor %g is not >= 1",
                       (double)p->reward_factor);
    if (!(p->punish_factor > 0.0f && p->punish_factor <= 1.0f))
        return mn_fail(err, MN_INVALID, "weights: punish_factor %g is not in (0, 1]",
                       (double)p->punish_factor);
    if (!(p->min_weight > 0.0f && p->min_weight <= 1.0f))
        return mn_fail(err, MN_INVALID, "weights: min_weight %g is not in (0, 1]",
                       (double)p->min_weight);
    if (!(p->max_weight >= 1.0f && p->max_weight <= MN_WEIGHTS_MAX_WEIGHT)) /* summed, never infinite */
        return mn_fail(err, MN_INVALID, "weights: max_weight %g is not in [1, %g]", (double)p->max_weight,
                       (double)MN_WEIGHTS_MAX_WEIGHT);
    return MN_OK;
}

mn_status mn_weights_init(mn_weights *w, uint32_t n_drafters, const mn_weights_params *p, mn_err *err)
{
    if (n_drafters < 1 || n_drafters > MN_WEIGHTS_MAX_DRAFTERS)
        return mn_fail(err, MN_INVALID, "weights: %u drafters outside 1..%u", n_drafters,
                       MN_WEIGHTS_MAX_DRAFTERS);
    mn_status st = mn_weights_check(p, err);
    if (st != MN_OK)
        return st;
    memset(w, 0, sizeof *w);
    w->par = *p;
    w->n_drafters = n_drafters;
    for (uint32_t i = 0; i < n_drafters; i++)
        w->w[i] = 1.0f;
    return MN_OK;
}

void mn_weights_init_from(mn_weights *seq, const mn_weights *global)
{
    if (seq == global)
        return;
    memset(seq, 0, sizeof *seq);
    seq->par = global->par;
    seq->n_drafters = global->n_drafters;
    memcpy(seq->w, global->w, sizeof seq->w);
}

/* Rates of drafter d, oldest first, into out; returns how many. */
static uint32_t window_rates(const mn_weights *w, uint32_t d, float *out)
{
    uint32_t n = w->count[d], win = w->par.window;
    uint32_t start = (w->head[d] + win - n) % win;
    for (uint32_t k = 0; k < n; k++)
        out[k] = w->rate[d][(start + k) % win];
    return n;
}

void mn_weights_follow(mn_weights *seq, const mn_weights *global)
{
    if (memcmp(&seq->par, &global->par, sizeof seq->par))
        mn_weights_set_params(seq, &global->par, NULL); /* checked when the global set took them */
}

mn_status mn_weights_set_params(mn_weights *w, const mn_weights_params *p, mn_err *err)
{
    mn_status st = mn_weights_check(p, err);
    if (st != MN_OK)
        return st;
    for (uint32_t d = 0; d < w->n_drafters; d++) {
        float tmp[MN_WEIGHTS_WINDOW_MAX];
        uint32_t n = window_rates(w, d, tmp);
        uint32_t keep = n < p->window ? n : p->window;
        /* Re-lay the ring from slot 0 with the newest `keep` rates, so head and count follow the
         * new window size. */
        memcpy(w->rate[d], tmp + (n - keep), keep * sizeof *tmp);
        w->count[d] = keep;
        w->head[d] = keep % p->window;
    }
    w->par = *p;
    return MN_OK;
}

float mn_weights_rate(const int32_t *draft, uint32_t len, const int32_t *kept, uint32_t n_kept)
{
    if (len == 0 || n_kept == 0)
        return -1.0f;
    uint32_t judged = len < n_kept ? len : n_kept, a = 0;
    while (a < judged && draft[a] == kept[a])
        a++;
    if (a == judged)
        return 1.0f; /* agreed with everything the target decided */
    return (float)a / (float)len;
}

float mn_weights_acr(const mn_weights *w, uint32_t drafter)
{
    if (drafter >= w->n_drafters || w->count[drafter] == 0)
        return -1.0f;
    float tmp[MN_WEIGHTS_WINDOW_MAX];
    uint32_t n = window_rates(w, drafter, tmp);
    double sum = 0.0;
    for (uint32_t k = 0; k < n; k++)
        sum += tmp[k];
    return (float)(sum / n);
}

mn_weights_verdict mn_weights_observe(mn_weights *w, uint32_t drafter, float rate)
{
    if (drafter >= w->n_drafters || !(rate >= 0.0f))
        return MN_WEIGHTS_ABSTAIN;
    if (rate > 1.0f)
        rate = 1.0f;
    uint32_t win = w->par.window;
    w->rate[drafter][w->head[drafter]] = rate;
    w->head[drafter] = (w->head[drafter] + 1) % win;
    if (w->count[drafter] < win)
        w->count[drafter]++;

    /* The rates are floats like a / len, and so is their mean: within TIE of a threshold it is
     * the threshold (a window of 3/10s averages 0.29999998 in floats), which is neither above nor
     * below it. */
    const float TIE = 1e-6f;
    float acr = mn_weights_acr(w, drafter), x = w->w[drafter];
    mn_weights_verdict v = MN_WEIGHTS_KEEP;
    if (acr > w->par.reward_threshold + TIE) {
        x *= w->par.reward_factor;
        v = MN_WEIGHTS_REWARD;
    } else if (acr < w->par.punish_threshold - TIE) {
        x *= w->par.punish_factor;
        v = MN_WEIGHTS_PUNISH;
    }
    if (x < w->par.min_weight)
        x = w->par.min_weight;
    if (x > w->par.max_weight)
        x = w->par.max_weight;
    w->w[drafter] = x;
    return v;
}

void mn_weights_learn(mn_weights *w, const int32_t *const *drafts, const uint32_t *lens,
                      const int32_t *kept, uint32_t n_kept, mn_weights_verdict *verdicts)
{
    for (uint32_t i = 0; i < w->n_drafters; i++) {
        float r = mn_weights_rate(drafts[i], lens[i], kept, n_kept);
        mn_weights_verdict v = mn_weights_observe(w, i, r);
        if (verdicts)
            verdicts[i] = v;
    }
}
