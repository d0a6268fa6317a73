/* read-streams.c - how fast two threads read memory when each reads 1, 2, 4, 8 or 16 runs of it
 * side by side (the figure behind the decode tiles in src/cpu/kernels_avx2.c). Not part of the build:
 *
 *   gcc -O2 -pthread tools/read-streams.c -o /tmp/read-streams && /tmp/read-streams
 *
 * 512 MB of floats, split in two halves (one a thread); a thread splits its half into S slices and
 * sums them with 256-bit loads, slice after slice within each 32-byte step. Three rounds of each S;
 * GB/s = bytes read / wall time. */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static float *buf;
static size_t n_floats;
static int streams;

typedef struct half {
    size_t begin, end;
    float sink;
} half;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

__attribute__((target("avx2"))) static void *read_half(void *arg)
{
    half *h = arg;
    size_t len = (h->end - h->begin) / (size_t)streams;
    const float *at[16];
    __m256 acc[8];
    for (int i = 0; i < 8; i++)
        acc[i] = _mm256_setzero_ps();
    for (int s = 0; s < streams; s++)
        at[s] = buf + h->begin + (size_t)s * len;
    for (size_t i = 0; i + 8 <= len; i += 8)
        for (int s = 0; s < streams; s++)
            acc[s & 7] = _mm256_add_ps(acc[s & 7], _mm256_loadu_ps(at[s] + i));
    for (int i = 1; i < 8; i++)
        acc[0] = _mm256_add_ps(acc[0], acc[i]);
    h->sink = acc[0][0];
    return NULL;
}

int main(void)
{
    n_floats = (size_t)128 << 20;
    if (!(buf = aligned_alloc(64, n_floats * sizeof(float))))
        return 1;
    for (size_t i = 0; i < n_floats; i++)
        buf[i] = 1.0f;
    static const int counts[] = {1, 2, 4, 8, 16};
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 5; k++) {
            streams = counts[k];
            pthread_t th[2];
            half h[2] = {{0, n_floats / 2, 0}, {n_floats / 2, n_floats, 0}};
            double t0 = now();
            for (int i = 0; i < 2; i++)
                pthread_create(&th[i], NULL, read_half, &h[i]);
            for (int i = 0; i < 2; i++)
                pthread_join(th[i], NULL);
            printf("runs per thread %2d: %5.1f GB/s\n", streams, (double)n_floats * sizeof(float) / (now() - t0) * 1e-9);
        }
    free(buf);
    return 0;
}
