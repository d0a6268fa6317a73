/* accept.c - greedy, one-hot and classic acceptance.
 *
 * Every rule returns a prefix of the draft plus one target token; the sampling rules draw from a
 * row by inverse CDF over the token ids in ascending order, in double precision, so one uniform
 * value maps to one token deterministically. A rounding shortfall at the end of the walk falls to
 * the last token with positive mass, never to a token of zero mass.
 */
#include "spec/accept.h"

#include <math.h>

mn_accept_result mn_accept_greedy(const int32_t *draft, uint32_t n_draft,
                                  const int32_t *target_argmax)
{
    uint32_t i = 0;
    while (i < n_draft && draft[i] == target_argmax[i])
        i++;
    return (mn_accept_result){.n_accepted = i, .next = target_argmax[i]};
}

mn_accept_result mn_accept_coupled(const int32_t *draft, uint32_t n_draft, mn_accept_draw_fn draw, void *ctx)
{
    for (uint32_t i = 0;; i++) {
        int32_t t = draw(ctx, i);
        if (i == n_draft || t != draft[i])
            return (mn_accept_result){.n_accepted = i, .next = t};
    }
}

/* Sum of a row, or -1 when an entry is negative or NaN, or the sum is not positive and finite. */
static double row_mass(const float *row, uint32_t n)
{
    double s = 0.0;
    for (uint32_t y = 0; y < n; y++) {
        if (!(row[y] >= 0.0f))
            return -1.0;
        s += row[y];
    }
    return s > 0.0 && isfinite(s) ? s : -1.0;
}

/* Inverse-CDF draw from row with token `skip` left out (-1: none); mass is the sum of what is
 * left. -1 when nothing has positive mass. */
static int32_t draw(const float *row, uint32_t n, int32_t skip, double mass, double u)
{
    double r = u * mass, acc = 0.0;
    int32_t last = -1;
    for (uint32_t y = 0; y < n; y++) {
        if ((int32_t)y == skip || row[y] <= 0.0f)
            continue;
        acc += row[y];
        last = (int32_t)y;
        if (r < acc)
            return last;
    }
    return last;
}

static mn_status bad_row(mn_err *err, mn_accept_result *out, const char *which, uint32_t i)
{
    *out = (mn_accept_result){.n_accepted = 0, .next = -1};
    return mn_fail(err, MN_INVALID,
                   "accept: %s row %u has a negative or NaN entry or no positive mass", which, i);
}

static mn_status check_draft(const int32_t *draft, uint32_t n_draft, uint32_t n_vocab,
                             mn_accept_result *out, mn_err *err)
{
    *out = (mn_accept_result){.n_accepted = 0, .next = -1};
    if (n_vocab == 0)
        return mn_fail(err, MN_INVALID, "accept: empty vocabulary");
    for (uint32_t i = 0; i < n_draft; i++)
        if (draft[i] < 0 || (uint32_t)draft[i] >= n_vocab)
            return mn_fail(err, MN_INVALID, "accept: draft token %d at %u outside the vocabulary of %u",
                           draft[i], i, n_vocab);
    return MN_OK;
}

/* The bonus token after a fully accepted draft: a plain draw from the last row. */
static mn_status bonus(const float *row, uint32_t n_vocab, uint32_t n_draft,
                       mn_accept_uniform_fn uniform, void *ctx, mn_accept_result *out, mn_err *err)
{
    double mass = row_mass(row, n_vocab);
    if (mass < 0.0)
        return bad_row(err, out, "target", n_draft);
    out->n_accepted = n_draft;
    out->next = draw(row, n_vocab, -1, mass, uniform(ctx));
    return MN_OK;
}

mn_status mn_accept_onehot(const int32_t *draft, uint32_t n_draft, const float *p, uint32_t n_vocab,
                           mn_accept_uniform_fn uniform, void *ctx, mn_accept_result *out,
                           mn_err *err)
{
    mn_status st = check_draft(draft, n_draft, n_vocab, out, err);
    if (st != MN_OK)
        return st;
    for (uint32_t i = 0; i < n_draft; i++) {
        const float *row = p + (size_t)i * n_vocab;
        int32_t x = draft[i];
        double mass = row_mass(row, n_vocab);
        if (mass < 0.0)
            return bad_row(err, out, "target", i);
        /* u < p(x) / mass, multiplied out so an exact 1-row needs no division */
        if (uniform(ctx) * mass < (double)row[x])
            continue;
        double rest = mass - row[x];
        int32_t y = rest > 0.0 ? draw(row, n_vocab, x, rest, uniform(ctx)) : -1;
        if (y < 0)
            continue; /* all mass on x after rounding: the test above can only fail by rounding */
        out->n_accepted = i;
        out->next = y;
        return MN_OK;
    }
    return bonus(p + (size_t)n_draft * n_vocab, n_vocab, n_draft, uniform, ctx, out, err);
}

mn_status mn_accept_classic(const int32_t *draft, uint32_t n_draft, const float *p, const float *q,
                            uint32_t n_vocab, mn_accept_uniform_fn uniform, void *ctx,
                            mn_accept_result *out, mn_err *err)
{
    mn_status st = check_draft(draft, n_draft, n_vocab, out, err);
    if (st != MN_OK)
        return st;
    for (uint32_t i = 0; i < n_draft; i++) {
        const float *pr = p + (size_t)i * n_vocab, *qr = q + (size_t)i * n_vocab;
        int32_t x = draft[i];
        double sp = row_mass(pr, n_vocab), sq = row_mass(qr, n_vocab);
        if (sp < 0.0)
            return bad_row(err, out, "target", i);
        if (sq < 0.0)
            return bad_row(err, out, "draft", i);
        /* u < (p(x)/sp) / (q(x)/sq), multiplied out: q(x) == 0 accepts whenever p(x) > 0 */
        if (uniform(ctx) * (double)qr[x] * sp < (double)pr[x] * sq)
            continue;
        /* Residual max(0, p - q) over the normalised rows; x itself has p(x)/sp < q(x)/sq here
         * (up to rounding), so it carries no residual mass. */
        double rest = 0.0;
        for (uint32_t y = 0; y < n_vocab; y++) {
            double d = pr[y] / sp - qr[y] / sq;
            rest += d > 0.0 ? d : 0.0;
        }
        int32_t tok = -1;
        if (rest > 0.0) {
            double r = uniform(ctx) * rest, acc = 0.0;
            for (uint32_t y = 0; y < n_vocab; y++) {
                double d = pr[y] / sp - qr[y] / sq;
                if (d <= 0.0)
                    continue;
                acc += d;
                tok = (int32_t)y;
                if (r < acc)
                    break;
            }
        }
        if (tok < 0 && pr[x] > 0.0f)
            continue; /* p == q after rounding: the rejection was rounding, keep x */
        if (tok < 0) /* p == q, both 0 at x: x is impossible, so the target's own draw without it */
            tok = draw(pr, n_vocab, x, sp, uniform(ctx));
        out->n_accepted = i;
        out->next = tok;
        return MN_OK;
    }
    return bonus(p + (size_t)n_draft * n_vocab, n_vocab, n_draft, uniform, ctx, out, err);
}
