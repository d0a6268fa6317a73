/* draw.h - the arithmetic of a sampled draw, written once for the CPU's sampler (model/sampler.c)
 * and the CUDA kernel that draws on the device (gpu/kernels.cuh), so that both pick the same token
 * from the same logits and uniform, bit for bit.
 *
 * A row's token x gets the integer weight w(x) = floor(2^40 * 2^((l(x) - max) * (log2 e / T))),
 * about 2^40 * softmax's numerator: the largest logit weighs exactly 2^40, a token 2^-40 (about
 * 1e-12) times less likely than the first weighs 0 and is never drawn. Sums of integers are exact,
 * so a block of device threads adding them in any order gets the CPU's loop's total; 2^x is a
 * polynomial in IEEE float multiplies and adds (no fused multiply-add: the device is told so
 * explicitly, the host builds with -ffp-contract=off), rounded the same way on both.
 *
 * The nucleus (top_p < 1) is the shortest prefix, in the order heavier first and then the lower
 * id, whose weight reaches mn_draw_need; its last member's weight is theta, and it holds every
 * token heavier than theta and the first `ties` (by id) of those weighing exactly theta. The draw
 * walks the nucleus in id order and stops where the running weight passes mn_draw_point(u, mass):
 * token x is chosen with probability w(x) / mass.
 *
 * Thread: pure functions.
 */
#ifndef MN_DRAW_H
#define MN_DRAW_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MN_DRAW_FN static __host__ __device__ inline
#else
#define MN_DRAW_FN static inline
#endif

#if defined(__CUDA_ARCH__) /* round each operation on its own, as the host does */
#define MN_DRAW_MUL(a, b) __fmul_rn(a, b)
#define MN_DRAW_ADD(a, b) __fadd_rn(a, b)
#define MN_DRAW_DIV(a, b) __fdiv_rn(a, b)
#else
#define MN_DRAW_MUL(a, b) ((a) * (b))
#define MN_DRAW_ADD(a, b) ((a) + (b))
#define MN_DRAW_DIV(a, b) ((a) / (b))
#endif

#define MN_DRAW_ONE_BITS 40       /* the largest logit's weight is 2^40 */
#define MN_DRAW_ROUND 12582912.0f /* 1.5 * 2^23: adding and subtracting it rounds |t| < 2^22 to even */
#define MN_DRAW_MANT_BITS 24      /* 2^f in [2^-1/2, 2^1/2] is scaled by 2^24 to an int */
/* 2^f's Taylor coefficients, ln2^7 / 7! down to ln2^0 / 0!, for Horner's rule */
#define MN_DRAW_POLY {1.5252734e-05f, 1.5403530e-04f, 1.3333558e-03f, 9.6181291e-03f, \
                      5.5504109e-02f, 2.4022651e-01f, 6.9314718e-01f, 1.0f}
#define MN_DRAW_POLY_N 8

/* What a row's logits are scaled by before 2^: log2 e / temperature (temperature > 0), one float
 * division for the row. */
MN_DRAW_FN float mn_draw_scale(float temperature) { return MN_DRAW_DIV(1.44269504f, temperature); }

/* The weight of logit x in a row whose largest logit is mx, at scale mn_draw_scale(T). 0 for NaN,
 * -inf and anything 2^-40 below the first. t = (x - mx) * scale splits into the nearest integer k
 * (by the float addition and subtraction of 1.5 * 2^23, which rounds |t| < 2^22 to even) and f =
 * t - k in [-1/2, 1/2]; 2^f is Taylor's polynomial of degree 7 (its error 5e-9, below float
 * rounding). */
MN_DRAW_FN uint64_t mn_draw_weight(float x, float mx, float scale)
{
    float t = MN_DRAW_MUL(MN_DRAW_ADD(x, -mx), scale);
    if (!(t > -(float)MN_DRAW_ONE_BITS - 1.0f))
        return 0;
    float k = MN_DRAW_ADD(MN_DRAW_ADD(t, MN_DRAW_ROUND), -MN_DRAW_ROUND), f = MN_DRAW_ADD(t, -k); /* f exact */
    const float c[MN_DRAW_POLY_N] = MN_DRAW_POLY;
    float p = c[0];
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int j = 1; j < MN_DRAW_POLY_N; j++)
        p = MN_DRAW_ADD(MN_DRAW_MUL(p, f), c[j]);
    /* 2^f * 2^24 in [2^23.5, 2^24.5]: an int */
    uint64_t m = (uint32_t)(int32_t)MN_DRAW_MUL(p, (float)(1 << MN_DRAW_MANT_BITS));
    int shift = MN_DRAW_ONE_BITS - MN_DRAW_MANT_BITS + (int)k; /* k in [-41, 0] */
    return shift >= 0 ? m << shift : shift > -64 ? m >> -shift : 0;
}

/* The weight the nucleus must reach, out of a row's total: all of it at top_p >= 1, else
 * ceil(top_p * total) in doubles, at least 1. */
MN_DRAW_FN uint64_t mn_draw_need(float top_p, uint64_t total)
{
    if (!(top_p < 1.0f))
        return total;
    double need = ceil((double)top_p * (double)total);
    uint64_t n = need < 1.0 ? 1 : (uint64_t)need;
    return n < total ? n : total;
}

/* Where the walk stops: the point floor(u * mass) in [0, mass), for u in [0, 1) and mass >= 1. */
MN_DRAW_FN uint64_t mn_draw_point(double u, uint64_t mass)
{
    uint64_t r = (uint64_t)(u * (double)mass);
    return r < mass ? r : mass - 1;
}

/* How many of the tokens weighing exactly theta the nucleus holds, given the weight `above` of
 * those heavier: the fewest that reach need (theta >= 1, above < need). */
MN_DRAW_FN uint64_t mn_draw_ties(uint64_t need, uint64_t above, uint64_t theta)
{
    return (need - above + theta - 1) / theta;
}

/* A row's nucleus: the weight theta of its last member in the order heavier first (0: every token
 * of some weight, the nucleus at top_p 1), how many tokens of exactly that weight it holds (the
 * first by id), and its total weight (0: no token weighs anything, the row's largest logit being
 * infinite or NaN; its argmax is then the token). */
typedef struct mn_draw_nucleus {
    uint64_t theta, ties, mass;
} mn_draw_nucleus;

/* Whether a token of weight w is in the nucleus (theta, ties) met in id order; seen counts the
 * tokens of weight theta met so far. theta 0: every token of some weight. */
MN_DRAW_FN int mn_draw_held(uint64_t w, uint64_t theta, uint64_t *seen, uint64_t ties)
{
    return w > theta || (w == theta && w != 0 && (*seen)++ < ties);
}

/* The walk over ids [b, e) of weights w, `seen` of the nucleus's ties lying before b: the id where
 * the nucleus's running weight passes r, or -1 when its weight in [b, e) does not. */
MN_DRAW_FN int32_t mn_draw_walk(const uint64_t *w, uint32_t b, uint32_t e, mn_draw_nucleus nu, uint64_t seen,
                                uint64_t r)
{
    uint64_t acc = 0;
    for (uint32_t k = b; k < e; k++)
        if (mn_draw_held(w[k], nu.theta, &seen, nu.ties) && r < (acc += w[k]))
            return (int32_t)k;
    return -1;
}

#endif
