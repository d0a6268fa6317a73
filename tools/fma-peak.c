/* fma-peak.c - one core's float FMA peak, 512-bit and 256-bit: the ceiling a compute-bound pass is
 * measured against (README's verification costs, docs/runtime.md "Speed notes").
 *
 * Twelve independent FMA chains per width, enough to cover the FMA latency on the cores here, so
 * the loop runs at the FMA units' throughput. Run one copy per vCPU at once for the machine's peak:
 *
 *   gcc -O2 -mavx512f -mfma -o /tmp/fma-peak tools/fma-peak.c
 *   /tmp/fma-peak & /tmp/fma-peak; wait
 *
 * Zen 4 splits a 512-bit FMA into two 256-bit halves, so both widths print the same figure there;
 * Zen 5 (full-width units) prints about twice as much for 512 bits. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

enum { CHAINS = 12 };
static const long ITERS = 200000000;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void run512(void)
{
    __m512 acc[CHAINS], b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_set1_ps((float)i);
    double t0 = now();
    for (long k = 0; k < ITERS; k++)
#pragma GCC unroll 12 /* the chains stay in registers */
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], b, c);
    double t = now() - t0;
    float sum = 0; /* used, so the chains are not optimized away */
    for (int i = 0; i < CHAINS; i++)
        sum += _mm512_reduce_add_ps(acc[i]);
    printf("512-bit: %.1f GFLOP/s (%g)\n", (double)ITERS * CHAINS * 32 / t / 1e9, sum);
}

static void run256(void)
{
    __m256 acc[CHAINS], b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm256_set1_ps((float)i);
    double t0 = now();
    for (long k = 0; k < ITERS; k++)
#pragma GCC unroll 12 /* the chains stay in registers */
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], b, c);
    double t = now() - t0;
    float sum = 0, lanes[8];
    for (int i = 0; i < CHAINS; i++) {
        _mm256_storeu_ps(lanes, acc[i]);
        for (int j = 0; j < 8; j++)
            sum += lanes[j];
    }
    printf("256-bit: %.1f GFLOP/s (%g)\n", (double)ITERS * CHAINS * 16 / t / 1e9, sum);
}

int main(void)
{
    run512();
    run256();
    return 0;
}
