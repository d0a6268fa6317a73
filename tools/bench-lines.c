/* bench-lines.c - what moving cache lines between two cores costs: the measurements behind
 * docs/runtime.md, "Two kinds of hours". Two threads, pinned to the first two CPUs the process may
 * run on, take turns (a spin barrier between turns) and time, in TSC cycles:
 *
 *   round trip   one line passed back and forth (ns, as minions-bench-decode prints it)
 *   read         8 KB (128 lines) the other core has just written, summed in 512-bit loads (two
 *                256-bit loads a line where the CPU has no AVX-512)
 *   write+read   128 lines the other core has read, each stored (16 scalar stores, or one 512-bit
 *                store; two 256-bit ones without AVX-512) and loaded back at once (two 256-bit
 *                loads): the pattern of a kernel that reads back what it has just stored into rows
 *                the other thread reads too
 *
 * Not part of the build (it needs AVX2 at least, and is built for the CPU it runs on):
 *
 *   gcc -O2 -march=native -pthread tools/bench-lines.c -o /tmp/bench-lines && /tmp/bench-lines
 *
 * On the shared Zen 5 host (2026-11-30, three runs in each kind of hour): with the vCPUs near each
 * other, round trip 79-82 ns, read 191-214 cycles, write+read 2,620-3,019 (scalar) and 398-483
 * (512-bit); apart, 350-362 ns, 889-914, 8,432-8,481 and 2,200-2,289. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

#define LINES 128
#define ROUNDS 20000

static float buf[2][LINES * 16] __attribute__((aligned(64)));
static _Atomic int turn __attribute__((aligned(64)));
static int cpus[2];
static volatile float sink;

typedef enum test { ROUND_TRIP, READ, WRITE_READ_SCALAR, WRITE_READ_WIDE } test;
static test current;
static double cycles[2]; /* per thread, summed over the rounds it timed */

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Both threads arrive, then both go on: the n-th barrier of a test. */
static void barrier(int *n)
{
    int goal = 2 * ++*n;
    atomic_fetch_add(&turn, 1);
    while (atomic_load_explicit(&turn, memory_order_acquire) < goal)
        ;
}

#ifdef __AVX512F__
#define WIDE "512-bit"
static void store_line(float *p, float v) { _mm512_store_ps(p, _mm512_set1_ps(v)); }

static float sum_lines(const float *p)
{
    __m512 a = _mm512_setzero_ps(), b = a;
    for (int i = 0; i < LINES * 16; i += 32) {
        a = _mm512_add_ps(a, _mm512_load_ps(p + i));
        b = _mm512_add_ps(b, _mm512_load_ps(p + i + 16));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}
#else
#define WIDE "256-bit"
static void store_line(float *p, float v)
{
    _mm256_store_ps(p, _mm256_set1_ps(v));
    _mm256_store_ps(p + 8, _mm256_set1_ps(v));
}

static float sum_lines(const float *p)
{
    __m256 a = _mm256_setzero_ps(), b = a;
    for (int i = 0; i < LINES * 16; i += 16) {
        a = _mm256_add_ps(a, _mm256_load_ps(p + i));
        b = _mm256_add_ps(b, _mm256_load_ps(p + i + 8));
    }
    a = _mm256_add_ps(a, b);
    float s = 0;
    for (int i = 0; i < 8; i++)
        s += a[i];
    return s;
}
#endif

/* Thread `me` of a test: READ, each round one thread writes buf[0] and the other reads it (roles
 * swap every round); WRITE_READ_*, each thread writes and reads back its own half, then reads the
 * other's (so that the next round's stores find the lines held by the other core). */
static void run(int me)
{
    int n = 0;
    for (int r = 0; r < ROUNDS; r++) {
        if (current == READ) {
            if ((r & 1) == me)
                for (int i = 0; i < LINES * 16; i += 16)
                    store_line(&buf[0][i], (float)(r + i));
            barrier(&n);
            if ((r & 1) != me) {
                uint64_t t0 = __rdtsc();
                sink = sum_lines(buf[0]);
                cycles[me] += (double)(__rdtsc() - t0);
            }
            barrier(&n);
            continue;
        }
        float *mine = buf[me];
        uint64_t t0 = __rdtsc();
        __m256 acc = _mm256_setzero_ps();
        for (int l = 0; l < LINES; l++) {
            float *p = mine + l * 16;
            if (current == WRITE_READ_SCALAR)
                for (int j = 0; j < 16; j++)
                    ((volatile float *)p)[j] = (float)(r + j);
            else
                store_line(p, (float)r);
            acc = _mm256_add_ps(acc, _mm256_add_ps(_mm256_load_ps(p), _mm256_load_ps(p + 8)));
        }
        sink = acc[0];
        cycles[me] += (double)(__rdtsc() - t0);
        barrier(&n);
        sink = sum_lines(buf[1 - me]);
        barrier(&n);
    }
}

static void *other(void *arg)
{
    (void)arg;
    pin(cpus[1]);
    if (current == ROUND_TRIP)
        for (int i = 0; i < ROUNDS; i++) {
            while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * i + 1)
                ;
            atomic_store_explicit(&turn, 2 * i + 2, memory_order_release);
        }
    else
        run(1);
    return NULL;
}

/* One test on both threads; its figure: ns per round trip, or TSC cycles per round of a thread. */
static double measure(test t)
{
    pthread_t th;
    current = t;
    atomic_store(&turn, 0);
    cycles[0] = cycles[1] = 0;
    pthread_create(&th, NULL, other, NULL);
    double figure;
    if (t == ROUND_TRIP) { /* the fastest of 5 stretches: the first waits for the thread to start */
        figure = 0;
        for (int i = 0; i < ROUNDS; i += ROUNDS / 5) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            for (int j = i; j < i + ROUNDS / 5; j++) {
                atomic_store_explicit(&turn, 2 * j + 1, memory_order_release);
                while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * j + 2)
                    ;
            }
            clock_gettime(CLOCK_MONOTONIC, &b);
            double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (ROUNDS / 5);
            figure = i == 0 || ns < figure ? ns : figure;
        }
    } else {
        run(0);
        figure = (cycles[0] + cycles[1]) / (t == READ ? ROUNDS : 2.0 * ROUNDS);
    }
    pthread_join(th, NULL);
    return figure;
}

int main(void)
{
    cpu_set_t mine;
    int n = 0;
    pthread_getaffinity_np(pthread_self(), sizeof mine, &mine);
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &mine))
            cpus[n++] = c;
    if (n < 2) {
        fprintf(stderr, "bench-lines: needs two CPUs\n");
        return 1;
    }
    pin(cpus[0]);
    printf("round trip %.0f ns (CPUs %d and %d)\n", measure(ROUND_TRIP), cpus[0], cpus[1]);
    printf("read       %.0f cycles for %d lines the other core wrote\n", measure(READ), LINES);
    printf("write+read %.0f cycles (scalar stores), %.0f (" WIDE " stores) for %d lines the other core held\n",
           measure(WRITE_READ_SCALAR), measure(WRITE_READ_WIDE), LINES);
    return 0;
}
