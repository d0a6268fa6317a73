/* sampler.c - greedy and nucleus sampling. */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul.h"
#include "model/draw.h"
#include "util/alloc.h"

typedef struct cand {
    uint64_t w;
    int32_t id;
} cand;

struct mn_draw_space {
    uint32_t n;
    uint64_t *w; /* [n] each token's weight (model/draw.h), by id */
    cand *c;     /* [n] the same, reordered to find the nucleus */
};

struct mn_sampler {
    mn_sampler_params par;
    mn_rng rng;
    mn_draw_space *d;
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

mn_draw_space *mn_draw_space_new(uint32_t n_vocab)
{
    mn_draw_space *d = mn_calloc(1, sizeof *d);
    if (!d || !(d->w = mn_malloc((size_t)n_vocab * sizeof *d->w)) || !(d->c = mn_malloc((size_t)n_vocab * sizeof *d->c))) {
        mn_draw_space_free(d);
        return NULL;
    }
    d->n = n_vocab;
    return d;
}

void mn_draw_space_free(mn_draw_space *d)
{
    if (d) {
        mn_free(d->w);
        mn_free(d->c);
        mn_free(d);
    }
}

mn_status mn_sampler_new(uint32_t n_vocab, const mn_sampler_params *params, mn_sampler **out)
{
    mn_sampler *s = mn_calloc(1, sizeof *s);
    if (!s || !(s->d = mn_draw_space_new(n_vocab))) {
        mn_free(s);
        return MN_NOMEM;
    }
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
        mn_draw_space_free(s->d);
        mn_free(s);
    }
}

int32_t mn_argmax(const float *logits, uint32_t n) { return mn_vec_argmax(logits, (int)n); }

/* Whether a comes before b in the nucleus's order: heavier first, then the lower id. A total order:
 * ids are unique. */
static bool before(const cand *a, const cand *b) { return a->w > b->w || (a->w == b->w && a->id < b->id); }

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

/* The nucleus of a row (model/draw.h), every token's weight left in d->w. At top_p 1 it is every
 * token of some weight (theta 0). Otherwise the nucleus is usually a few hundred tokens of a
 * vocabulary of tens of thousands, so only the first k in order are found (select_first) and
 * sorted, k growing until they hold what is needed: the same prefix as sorting them all (6.6-8.7
 * ms a token over SmolLM2's 49,152 entries; tools/bench-sampler.c), in a fraction of the time. */
static mn_draw_nucleus nucleus(mn_draw_space *d, const float *logits, float temperature, float top_p)
{
    uint32_t n = d->n;
    float mx = logits[mn_argmax(logits, n)];
    uint64_t total = mn_draw_weights(logits, (int)n, mx, mn_draw_scale(temperature), d->w);
    uint64_t need = mn_draw_need(top_p, total);
    if (need == total)
        return (mn_draw_nucleus){0, 0, total};
    for (uint32_t i = 0; i < n; i++)
        d->c[i] = (cand){d->w[i], (int32_t)i};
    for (uint32_t k = n < 256 ? n : 256;; k = k > n / 8 ? n : 8 * k) {
        select_first(d->c, n, k);
        qsort(d->c, k, sizeof *d->c, by_prob_desc);
        uint64_t acc = 0;
        for (uint32_t keep = 0; keep < k;) {
            acc += d->c[keep++].w;
            if (acc < need)
                continue;
            uint64_t theta = d->c[keep - 1].w, ties = 0;
            while (ties < keep && d->c[keep - 1 - ties].w == theta)
                ties++;
            return (mn_draw_nucleus){theta, ties, acc};
        }
    } /* k reaches n, where acc reaches total >= need */
}

int32_t mn_draw_row(mn_draw_space *d, const float *logits, float temperature, float top_p, double u)
{
    mn_draw_nucleus pl = nucleus(d, logits, temperature, top_p);
    /* the point lies below the nucleus's weight: the walk over every id finds it */
    return pl.mass ? mn_draw_walk(d->w, 0, d->n, pl, 0, mn_draw_point(u, pl.mass)) : mn_argmax(logits, d->n);
}

bool mn_sampler_greedy(const mn_sampler *s) { return s->par.temperature <= 0.0f; }

mn_sampler_params mn_sampler_settings(const mn_sampler *s) { return s->par; }

int32_t mn_sampler_next(mn_sampler *s, const float *logits)
{
    if (s->par.temperature <= 0.0f)
        return mn_argmax(logits, s->d->n);
    return mn_draw_row(s->d, logits, s->par.temperature, s->par.top_p, mn_rng_uniform(&s->rng));
}

void mn_sampler_peek(const mn_sampler *s, uint32_t n, double *u)
{
    mn_rng r = s->rng;
    for (uint32_t i = 0; i < n; i++)
        u[i] = mn_rng_uniform(&r);
}

void mn_sampler_skip(mn_sampler *s, uint32_t n)
{
    while (n-- > 0)
        mn_rng_uniform(&s->rng);
}

void mn_sampler_probs(mn_sampler *s, const float *logits, float *p)
{
    uint32_t n = s->d->n;
    memset(p, 0, (size_t)n * sizeof *p);
    mn_draw_nucleus pl = {0};
    if (s->par.temperature > 0.0f)
        pl = nucleus(s->d, logits, s->par.temperature, s->par.top_p);
    if (!pl.mass) {
        p[mn_argmax(logits, n)] = 1.0f;
        return;
    }
    uint64_t seen = 0;
    for (uint32_t i = 0; i < n; i++)
        if (mn_draw_held(s->d->w[i], pl.theta, &seen, pl.ties))
            p[i] = (float)((double)s->d->w[i] / (double)pl.mass);
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
