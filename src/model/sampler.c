/* sampler.c - greedy and nucleus sampling. */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul.h"
#include "util/alloc.h"

typedef struct cand {
    float p;
    int32_t id;
} cand;

struct mn_sampler {
    uint32_t n;
    mn_sampler_params par;
    mn_rng rng;
    cand *c;   /* [n] */
};

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void mn_rng_seed(mn_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

double mn_rng_uniform(mn_rng *r)
{
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(out >> 11) * 0x1.0p-53;
}

mn_status mn_sampler_new(uint32_t n_vocab, const mn_sampler_params *params, mn_sampler **out)
{
    mn_sampler *s = mn_calloc(1, sizeof *s);
    if (!s || !(s->c = mn_malloc((size_t)n_vocab * sizeof *s->c))) {
        mn_free(s);
        return MN_NOMEM;
    }
    s->n = n_vocab;
    s->par = *params;
    if (!(s->par.top_p > 0.0f) || s->par.top_p > 1.0f)
        s->par.top_p = 1.0f;
    mn_rng_seed(&s->rng, params->seed);
    *out = s;
    return MN_OK;
}

void mn_sampler_free(mn_sampler *s)
{
    if (s) {
        mn_free(s->c);
        mn_free(s);
    }
}

int32_t mn_argmax(const float *logits, uint32_t n) { return mn_vec_argmax(logits, (int)n); }

/* Whether a comes before b in the nucleus's order: more probable first, then the lower id. A total
 * order: ids are unique. */
static bool before(const cand *a, const cand *b) { return a->p > b->p || (a->p == b->p && a->id < b->id); }

/* qsort's form of `before`. */
static int by_prob_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

static void swap_cand(cand *a, cand *b)
{
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange c[0..n) so that its k first in `before`'s order fill c[0..k), in some order
 * (quickselect, the pivot the median of three). */
static void select_first(cand *c, uint32_t n, uint32_t k)
{
    uint32_t lo = 0, hi = n; /* c[0..lo) are among the k first, c[hi..n) are not */
    while (lo < k && k < hi) {
        cand *a = &c[lo], *m = &c[lo + (hi - lo) / 2], *z = &c[hi - 1];
        cand pv = before(a, m) ? (before(m, z) ? *m : before(a, z) ? *z : *a)
                               : (before(a, z) ? *a : before(m, z) ? *z : *m);
        uint32_t i = lo;
        for (uint32_t j = lo; j < hi; j++)
            if (before(&c[j], &pv))
                swap_cand(&c[i++], &c[j]);
        if (i >= k) { /* the pivot is not among them */
            hi = i;
            continue;
        }
        for (uint32_t j = i; j < hi; j++) /* the pivot next: it is */
            if (c[j].id == pv.id) {
                swap_cand(&c[i], &c[j]);
                break;
            }
        lo = i + 1;
    }
}

/* Fill s->c with the nucleus, most probable first when top_p < 1: unnormalised weights; returns
 * how many are kept and their sum in *mass. The nucleus is usually a few hundred tokens of a
 * vocabulary of tens of thousands, so only the first k in order are found (select_first) and
 * sorted, k growing until they hold top_p of the mass: the same prefix as sorting them all (6.6-8.7
 * ms a token over SmolLM2's 49,152 entries; tools/bench-sampler.c), in a fraction of the time. */
static uint32_t nucleus(mn_sampler *s, const float *logits, double *mass)
{
    float mx = logits[mn_argmax(logits, s->n)];
    double sum = 0.0;
    for (uint32_t i = 0; i < s->n; i++) {
        s->c[i].p = expf((logits[i] - mx) / s->par.temperature);
        s->c[i].id = (int32_t)i;
        sum += s->c[i].p;
    }
    uint32_t keep = s->n;
    for (uint32_t k = s->n < 256 ? s->n : 256; s->par.top_p < 1.0f; k = k > s->n / 8 ? s->n : 8 * k) {
        select_first(s->c, s->n, k);
        qsort(s->c, k, sizeof *s->c, by_prob_desc);
        double acc = 0.0;
        bool held = false;
        for (keep = 0; keep < k && !held;) {
            acc += s->c[keep++].p;
            held = acc >= s->par.top_p * sum;
        }
        if (held || k == s->n) {
            sum = acc;
            break;
        }
    }
    *mass = sum;
    return keep;
}

bool mn_sampler_greedy(const mn_sampler *s) { return s->par.temperature <= 0.0f; }

int32_t mn_sampler_next(mn_sampler *s, const float *logits)
{
    if (s->par.temperature <= 0.0f)
        return mn_argmax(logits, s->n);
    double sum;
    uint32_t keep = nucleus(s, logits, &sum);
    double r = mn_rng_uniform(&s->rng) * sum, acc = 0.0;
    for (uint32_t i = 0; i < keep; i++) {
        acc += s->c[i].p;
        if (r < acc)
            return s->c[i].id;
    }
    return s->c[keep - 1].id;
}

void mn_sampler_probs(mn_sampler *s, const float *logits, float *p)
{
    memset(p, 0, (size_t)s->n * sizeof *p);
    if (s->par.temperature <= 0.0f) {
        p[mn_argmax(logits, s->n)] = 1.0f;
        return;
    }
    double sum;
    uint32_t keep = nucleus(s, logits, &sum);
    for (uint32_t i = 0; i < keep; i++)
        p[s->c[i].id] = (float)(s->c[i].p / sum);
}

void mn_logprobs(const float *logits, uint32_t n, int32_t token, uint32_t k, mn_logprob *out)
{
    k = k < MN_LOGPROB_TOP ? k : MN_LOGPROB_TOP;
    float mx = logits[mn_argmax(logits, n)];
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        sum += exp((double)(logits[i] - mx));
    double lse = mx + log(sum);
    out->token = token;
    out->logprob = (float)(logits[token] - lse);
    out->n_top = 0;
    for (uint32_t i = 0; i < n && k; i++) { /* insertion into the k best, kept sorted */
        uint32_t at = out->n_top;
        while (at > 0 && logits[i] > logits[out->top[at - 1]])
            at--;
        if (at >= k)
            continue;
        uint32_t last = out->n_top < k ? out->n_top : k - 1;
        for (uint32_t j = last; j > at; j--)
            out->top[j] = out->top[j - 1];
        out->top[at] = (int32_t)i;
        out->n_top = last + 1;
    }
    for (uint32_t j = 0; j < out->n_top; j++)
        out->top_logprob[j] = (float)(logits[out->top[j]] - lse);
}
