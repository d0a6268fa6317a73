/* sampler.c - greedy and nucleus sampling. */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul.h"
#include "model/draw.h"
#include "util/alloc.h"

struct mn_draw_space {
    uint32_t n;
    uint64_t *w; /* [n] each token's weight (model/draw.h), by id */
    uint64_t *c; /* [n] the weights theta may still be among (nucleus) */
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

/* Radix steps of the search for theta: 2^RADIX_BITS bins a step; at most SMALL weights left are
 * sorted instead. */
enum { RADIX_BITS = 8, RADIX_BINS = 1 << RADIX_BITS, SMALL = 32 };
#define OCTAVES (-1) /* a step's shift that bins by octave */

/* Weight w's bin in a step (a higher bin, a heavier weight): its octave, bits(w) (w in [2^(bits -
 * 1), 2^bits), 0 for 0), or its RADIX_BITS bits from bit `shift` on. */
static uint32_t bin_of(uint64_t w, int shift)
{
    if (shift == OCTAVES)
        return w ? 64 - (uint32_t)__builtin_clzll(w) : 0;
    return (uint32_t)(w >> shift) & (RADIX_BINS - 1);
}

/* One radix step over the *m weights c[0..*m), which hold every token whose weight lies in theta's
 * range, the tokens above that range weighing *above < need: the bin where the weights from the
 * top bin down reach the need holds theta; c keeps only that bin's weights (in place, *m their
 * count), *above grows by the bins above it. Returns the bin. */
static uint32_t radix_step(uint64_t *c, uint32_t *m, uint64_t need, uint64_t *above, int shift)
{
    uint64_t sum[RADIX_BINS] = {0}; /* octaves: 65 bins */
    for (uint32_t i = 0; i < *m; i++)
        sum[bin_of(c[i], shift)] += c[i];
    uint32_t bin = RADIX_BINS - 1, kept = 0;
    while (*above + sum[bin] < need)
        *above += sum[bin--];
    for (uint32_t i = 0; i < *m; i++)
        if (bin_of(c[i], shift) == bin)
            c[kept++] = c[i];
    *m = kept;
    return bin;
}

static int heavier_first(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Theta (model/draw.h) among the m weights c[0..m) that hold it, the heavier tokens weighing
 * *above < need <= *above + the sum of c; *above becomes the weight of the tokens heavier than
 * theta. First the octave, then RADIX_BITS bits below the leading one at a time, each step keeping
 * the bin that holds theta: every kept weight shares the bits above the step's, so a step's bins
 * are in weight order. Then the few left, sorted. */
static uint64_t find_theta(uint64_t *c, uint32_t m, uint64_t need, uint64_t *above)
{
    /* every kept weight lies in [2^(bits - 1), 2^bits); its bits below the leading one decide */
    uint32_t bits = radix_step(c, &m, need, above, OCTAVES);
    for (int shift = (int)bits - 1; m > SMALL && shift > 0;) {
        shift = shift > RADIX_BITS ? shift - RADIX_BITS : 0;
        radix_step(c, &m, need, above, shift);
    }
    qsort(c, m, sizeof *c, heavier_first);
    uint32_t i = 0;
    while (*above + c[i] < need)
        *above += c[i++];
    uint64_t theta = c[i];
    while (i > 0 && c[i - 1] == theta) /* the tokens of weight theta before it are not heavier */
        *above -= c[--i];
    return theta;
}

/* The nucleus of a row (model/draw.h), every token's weight left in d->w. At top_p 1 it is every
 * token of some weight (theta 0). Otherwise theta comes from radix steps over the weights
 * (find_theta): a pass over the vocabulary and a few over what is left, where sorting the whole
 * vocabulary took 6.6-8.7 ms a token over SmolLM2's 49,152 entries, and quickselect with a sort of
 * the first few hundred to thousands 0.8-2.8 ms (tools/bench-sampler.c). */
static mn_draw_nucleus nucleus(mn_draw_space *d, const float *logits, float temperature, float top_p)
{
    uint32_t n = d->n;
    float mx = logits[mn_argmax(logits, n)];
    uint64_t total = mn_draw_weights(logits, (int)n, mx, mn_draw_scale(temperature), d->w);
    uint64_t need = mn_draw_need(top_p, total);
    if (need == total)
        return (mn_draw_nucleus){0, 0, total};
    memcpy(d->c, d->w, (size_t)n * sizeof *d->c);
    uint64_t above = 0, theta = find_theta(d->c, n, need, &above);
    uint64_t ties = mn_draw_ties(need, above, theta);
    return (mn_draw_nucleus){theta, ties, above + ties * theta};
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
