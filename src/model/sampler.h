/* sampler.h - next-token choice from logits: greedy, or temperature + top-p with a seeded RNG.
 *
 * Greedy (temperature <= 0) takes the first index of the largest logit, so it is deterministic and
 * matches any other greedy implementation on ties. Sampling is reproducible for a given seed: each
 * draw takes one uniform from the sampler's generator and turns it into a token by model/draw.h's
 * rule, which a CUDA backend also runs on the device (mn_draw_row's token, bit for bit), so a
 * caller may hand the uniforms to a backend (mn_sampler_peek), let it draw, and then use up as
 * many as it drew (mn_sampler_skip).
 * Ownership: the sampler owns its scratch (sized for the vocabulary). Thread: one owner.
 */
#ifndef MN_SAMPLER_H
#define MN_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "util/status.h"

typedef struct mn_sampler_params {
    float temperature;  /* <= 0: greedy */
    float top_p;        /* (0, 1]: nucleus mass */
    uint64_t seed;
} mn_sampler_params;

typedef struct mn_sampler mn_sampler;

mn_status mn_sampler_new(uint32_t n_vocab, const mn_sampler_params *params, mn_sampler **out);
void mn_sampler_free(mn_sampler *s);
int32_t mn_sampler_next(mn_sampler *s, const float *logits);
/* Whether s is greedy: mn_sampler_next is then mn_argmax of the logits, and draws nothing. */
bool mn_sampler_greedy(const mn_sampler *s);
/* Its settings, top_p brought into (0, 1]. */
mn_sampler_params mn_sampler_settings(const mn_sampler *s);
/* The uniforms the next n draws would take, into u[0..n), the generator left as it was. */
void mn_sampler_peek(const mn_sampler *s, uint32_t n, double *u);
/* Use up n uniforms: what n draws of mn_sampler_next would have taken. */
void mn_sampler_skip(mn_sampler *s, uint32_t n);

/* Scratch for draws over a vocabulary of n_vocab (the sampler's, or a backend's). NULL: no memory. */
typedef struct mn_draw_space mn_draw_space;
mn_draw_space *mn_draw_space_new(uint32_t n_vocab);
void mn_draw_space_free(mn_draw_space *d);
/* The token drawn from a row of logits at temperature > 0 and top_p in (0, 1] with the uniform u in
 * [0, 1): model/draw.h's rule (what mn_sampler_next does with its next uniform). A row where no
 * token has weight (its largest logit infinite or NaN) gives its argmax. */
int32_t mn_draw_row(mn_draw_space *d, const float *logits, float temperature, float top_p, double u);

/* The distribution mn_sampler_next draws from, written to p[0..n_vocab): each token's weight in the
 * nucleus over the nucleus's (model/draw.h), 0 outside it, summing to 1 up to rounding. Greedy (or
 * a row without weight): one-hot on the argmax. For
 * acceptance rules that need p (spec/accept.h) and for tests of the sampled distribution. */
void mn_sampler_probs(mn_sampler *s, const float *logits, float *p);

/* The index of the first largest logit, NaNs passed over (cpu/matmul.h's mn_vec_argmax). */
int32_t mn_argmax(const float *logits, uint32_t n);

/* A token's log-probability under the model's own distribution (softmax of the logits at
 * temperature 1, whatever the request samples with), and the k most likely tokens (ties: the lower
 * id first), most likely first. */
#define MN_LOGPROB_TOP 5
typedef struct mn_logprob {
    int32_t token;
    float logprob;
    uint32_t n_top;                 /* k, at most MN_LOGPROB_TOP */
    int32_t top[MN_LOGPROB_TOP];
    float top_logprob[MN_LOGPROB_TOP];
} mn_logprob;
void mn_logprobs(const float *logits, uint32_t n, int32_t token, uint32_t k, mn_logprob *out);

/* xoshiro256** generator: uniform in [0, 1). */
typedef struct mn_rng {
    uint64_t s[4];
} mn_rng;
void mn_rng_seed(mn_rng *r, uint64_t seed);
double mn_rng_uniform(mn_rng *r);

#endif
