/* hist.h - a latency histogram with fixed bounds, as Prometheus exposes one.
 *
 * Every histogram shares one set of bounds in seconds (1 ms .. 60 s), fine enough for a time to
 * first token and for a time per token on a CPU or a GPU. A plain value: copy it, sum it.
 * Thread: none of its own; its owner's.
 */
#ifndef MN_HIST_H
#define MN_HIST_H

#include <stdint.h>

#define MN_HIST_BOUNDS 16

typedef struct mn_hist {
    uint64_t n[MN_HIST_BOUNDS + 1]; /* n[i]: observations in (bound[i-1], bound[i]]; n[BOUNDS]: above the last */
    uint64_t count;
    double sum;
} mn_hist;

/* The upper bounds, increasing: mn_hist_bounds[i] for i < MN_HIST_BOUNDS. */
extern const double mn_hist_bounds[MN_HIST_BOUNDS];

void mn_hist_observe(mn_hist *h, double x);
/* Observations <= mn_hist_bounds[i] (i == MN_HIST_BOUNDS: all of them), as Prometheus's `le`. */
uint64_t mn_hist_cumulative(const mn_hist *h, int i);
/* The observations of a and b together. */
mn_hist mn_hist_sum(const mn_hist *a, const mn_hist *b);

#endif
