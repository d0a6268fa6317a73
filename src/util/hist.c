/* hist.c - latency histograms (see hist.h). */
#include "util/hist.h"

const double mn_hist_bounds[MN_HIST_BOUNDS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                               0.5,   1,      2.5,   5,    10,    20,   30,  60};

void mn_hist_observe(mn_hist *h, double x)
{
    int i = 0;
    while (i < MN_HIST_BOUNDS && x > mn_hist_bounds[i])
        i++;
    h->n[i]++;
    h->count++;
    h->sum += x;
}

mn_hist mn_hist_sum(const mn_hist *a, const mn_hist *b)
{
    mn_hist s = {.count = a->count + b->count, .sum = a->sum + b->sum};
    for (int i = 0; i <= MN_HIST_BOUNDS; i++)
        s.n[i] = a->n[i] + b->n[i];
    return s;
}

uint64_t mn_hist_cumulative(const mn_hist *h, int i)
{
    uint64_t c = 0;
    for (int j = 0; j <= i && j <= MN_HIST_BOUNDS; j++)
        c += h->n[j];
    return c;
}
