/* bench-attention.c - what one attention pair's kernels cost on their own: the scores of a query,
 * and of the two and three query heads of a GQA group (the bundled target's groups are two heads,
 * SmolLM2's three), against n keys (mn_dots), their softmax (mn_softmax) and the weighted sum of n
 * value rows for one head and for two and three heads that share them (mn_weighted_sum), rows of
 * 32 and 64 floats (the bundled target's and SmolLM2's head width), every row in L1. Not part of
 * the build; against a build's library:
 *
 *   gcc -O2 -Isrc -Ibuild tools/bench-attention.c build/libminions.a -o /tmp/bench-attention \
 *       -lm -lpthread -ljemalloc -L/usr/local/cuda/lib64 -lcudart -lstdc++ && /tmp/bench-attention
 *
 * (the CUDA libraries where the build has CUDA, as configure's default does when nvcc is found)
 *
 * Nanoseconds per call, the median of 5 rounds of 20,000 calls, for n = 72 keys (a verification
 * after 64 tokens) and 512 (a long prompt). */
#include <stdio.h>
#include <stdlib.h>

#include "cpu/matmul.h"
#include "model/dtype.h"
#include "util/clock.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { ROUNDS = 5, CALLS = 20000, MAX_N = 512, MAX_HD = 64 };

int main(void)
{
    static float keys[MAX_N * MAX_HD], q[3 * MAX_HD], sc[3 * MAX_N], out[3 * MAX_HD];
    static const void *rows[MAX_N];
    for (int i = 0; i < MAX_N * MAX_HD; i++)
        keys[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < 3 * MAX_HD; i++)
        q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    printf("kernels %s; ns per call, median of %d rounds of %d calls\n", mn_cpu_kernels_name(), ROUNDS, CALLS);
    static const int ns[] = {72, 512}, hds[] = {32, 64};
    for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++) {
            int hd = hds[a], n = ns[b];
            for (int i = 0; i < n; i++)
                rows[i] = keys + (size_t)i * hd;
            /* the columns in print order: dots of 1, 2, 3 heads, softmax, weighted sums of 1, 2, 3 */
            enum { COLS = 7 };
            double t[COLS][ROUNDS];
            for (int r = 0; r < ROUNDS; r++) {
                int col = 0;
#define TIMED(call)                                                                                     \
    do {                                                                                                \
        double t0 = mn_now();                                                                           \
        for (int c = 0; c < CALLS; c++) {                                                               \
            call;                                                                                       \
            __asm__ volatile("" ::: "memory");                                                          \
        }                                                                                               \
        t[col++][r] = mn_now() - t0;                                                                    \
    } while (0)
                TIMED(mn_dots(q, 0, 1, rows, MN_F32, n, hd, sc, 0));
                TIMED(mn_dots(q, (size_t)hd, 2, rows, MN_F32, n, hd, sc, (size_t)n));
                TIMED(mn_dots(q, (size_t)hd, 3, rows, MN_F32, n, hd, sc, (size_t)n));
                TIMED(mn_softmax(sc, n, 0.01f));
                TIMED(mn_weighted_sum(out, (size_t)hd, sc, (size_t)n, 1, rows, MN_F32, n, hd));
                TIMED(mn_weighted_sum(out, (size_t)hd, sc, 0, 2, rows, MN_F32, n, hd)); /* the heads read one sc */
                TIMED(mn_weighted_sum(out, (size_t)hd, sc, 0, 3, rows, MN_F32, n, hd));
#undef TIMED
            }
            double med[COLS];
            for (int k = 0; k < COLS; k++) {
                qsort(t[k], ROUNDS, sizeof(double), cmp);
                med[k] = 1e9 * t[k][ROUNDS / 2] / CALLS;
            }
            printf("head %2d, %3d keys: dots %7.0f, 2 heads %7.0f, 3 heads %7.0f  softmax %6.0f  weighted sum, "
                   "1 head %7.0f, 2 heads %7.0f, 3 heads %7.0f\n",
                   hd, n, med[0], med[1], med[2], med[3], med[4], med[5], med[6]);
        }
    return 0;
}
