/* bench_matmul.c - minions-bench-matmul: one matrix product's speed on one core, beside the core's
 * FMA peak, so a kernel change can be judged in isolation from the model around it.
 *
 *   minions-bench-matmul [--type f32|f16|q8_0|q4_0|q4_1] [--rows N] [--cols N] [--tokens T,...]
 *                        [--repeat N]
 *   minions-bench-matmul --probe N
 *
 * For each T: y = x W^T over all rows (mn_matmul, the CPU backend's float kernel, one thread; for
 * the quantized types mn_matmul_q8 over W repacked by mn_q8_pack and x quantized to 16 bits once,
 * outside the timing, as the pass does per projection), W rows x cols of the given type, x T rows;
 * --repeat products after one warm-up, GFLOP/s = 2 rows cols T / time (a multiply-add is two
 * operations whatever the types). The weights and activations are small enough to stay in L2 for the
 * shapes of SmolLM2 (576 x 576, 1536 x 576, 576 x 1536), so this measures compute, not memory.
 * First line: an FMA-only loop (ten independent 8-lane chains) on the same core, the peak the
 * kernel is compared with; with AVX-512, the same in 16-lane registers; with AVX-512 VNNI, the
 * quantized tiles' inner step alone.
 * Values are arbitrary; results are not checked here (test_kernels does that bit for bit).
 *
 * --probe N: N times, 5 ms apart (the clock falls back as it has before a start), ask each kernel
 * set that has a `prefer` probe whether it would be the default here, and count the answers. The
 * default set is chosen once per process by that probe (kernels.h), so it should answer the same
 * every time on one machine, or a server's passes take 1.2x as long at random; a timing probe
 * cannot promise that on a shared machine, so this is a measurement, not a unit test.
 */
#include <getopt.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/quant.h"
#include "util/clock.h"
#include "util/num.h"

#define MAX_T 64 /* token counts in one --tokens list */

#if defined(__x86_64__)
/* GFLOP/s of ten independent 8-lane FMA chains (two pipes x four cycles of latency need eight);
 * called only where the CPU has AVX2 and FMA. */
__attribute__((target("avx2,fma"))) static double fma_peak(void)
{
    __m256 a[10];
    for (int i = 0; i < 10; i++)
        a[i] = _mm256_set1_ps((float)i);
    const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
    const long n = 100000000;
    double t0 = mn_now();
    for (long k = 0; k < n; k++) {
#pragma GCC unroll 10
        for (int i = 0; i < 10; i++)
            a[i] = _mm256_fmadd_ps(a[i], m, c);
    }
    double t = mn_now() - t0;
    volatile float sink = 0.0f;
    for (int i = 0; i < 10; i++)
        sink += a[i][0];
    (void)sink;
    return (double)n * 10 * 16 / t * 1e-9;
}

/* The same in 512-bit registers (16-lane FMAs): about fma_peak's on a core that splits a 512-bit
 * FMA over its 256-bit pipes (Zen 4), twice it on one that runs it whole (Zen 5), where the
 * avx512w tiles pay (kernels_avx512.c). Called only where the CPU has AVX-512 F. */
__attribute__((target("avx512f,avx2,fma"))) static double fma_peak512(void)
{
    __m512 a[10];
    for (int i = 0; i < 10; i++)
        a[i] = _mm512_set1_ps((float)i);
    const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    const long n = 100000000;
    double t0 = mn_now();
    for (long k = 0; k < n; k++) {
#pragma GCC unroll 10
        for (int i = 0; i < 10; i++)
            a[i] = _mm512_fmadd_ps(a[i], m, c);
    }
    double t = mn_now() - t0;
    volatile float sink = 0.0f;
    for (int i = 0; i < 10; i++)
        sink += _mm512_cvtss_f32(a[i]);
    (void)sink;
    return (double)n * 10 * 32 / t * 1e-9;
}

/* Millions a second of the quantized tiles' inner step (kernels_x86.h, tile_q8 with VNNI): one
 * block of 32 weights against one row's 32 activations, as two vpdpwssd from zero, a conversion
 * and an FMA into the row's chain, ten chains apart. With the kernels' loads, weight decoding and
 * everything around them left out, it bounds what the quantized passes can reach: a pass over T
 * rows makes T x (weights / 32) such steps. Called only where the CPU has AVX-512 VNNI and VL. */
__attribute__((target("avx512f,avx512vl,avx512vnni,avx2,fma"))) static double q8_step_peak(void)
{
    __m256 a[10];
    for (int i = 0; i < 10; i++)
        a[i] = _mm256_set1_ps((float)i);
    const __m256i w = _mm256_set1_epi16(3), x = _mm256_set1_epi16(5);
    const __m256 sc = _mm256_set1_ps(1e-6f);
    const long n = 30000000;
    double t0 = mn_now();
    for (long k = 0; k < n; k++) {
#pragma GCC unroll 10
        for (int i = 0; i < 10; i++) {
            __m256i z = _mm256_setzero_si256();
            __asm__ volatile("" : "+v"(z)); /* a fresh dot each time, as in the tile, not hoisted */
            __m256i d = _mm256_dpwssd_epi32(_mm256_dpwssd_epi32(z, w, x), x, w);
            a[i] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(d), a[i]);
        }
    }
    double t = mn_now() - t0;
    volatile float sink = 0.0f;
    for (int i = 0; i < 10; i++)
        sink += a[i][0];
    (void)sink;
    return (double)n * 10 / t * 1e-6;
}
#endif

/* n bytes (and 64 to spare) on a 64-byte boundary: aligned_alloc wants a multiple of the alignment */
static void *alloc64(size_t n) { return aligned_alloc(64, (n + 127) / 64 * 64); }

/* --probe: each kernel set's `prefer` answers, n times. */
static int probe(long n)
{
    printf("kernels %s\n", mn_cpu_kernels_name());
    const mn_cpu_kernels *const tables[] = {&mn_kernels_avx512w, &mn_kernels_avx512, &mn_kernels_avx2};
    for (size_t t = 0; t < sizeof tables / sizeof *tables; t++) {
        if (!tables[t]->prefer || !tables[t]->usable()) {
            printf("%-8s no probe here\n", tables[t]->name);
            continue;
        }
        long yes = 0;
        for (long r = 0; r < n; r++) {
            nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
            yes += tables[t]->prefer() != 0;
        }
        printf("%-8s preferred in %ld of %ld probes\n", tables[t]->name, yes, n);
    }
    return 0;
}

static void usage(FILE *to)
{
    fprintf(to, "usage: minions-bench-matmul [--type f32|f16|q8_0|q4_0|q4_1] [--rows N] [--cols N] [--tokens T,...]\n"
                "                            [--repeat N]\n"
                "       minions-bench-matmul --probe N\n"
                "  one product of a ROWS x COLS weight (default f16, 576 x 576) with T tokens on one core, per\n"
                "  kernel set, beside the core's FMA peaks (default tokens 1,2,4,8,16,32,128; repeat 20);\n"
                "  --probe N asks the default kernel set's probe N times and counts its answers\n");
}

int main(int argc, char **argv)
{
    const char *type_name = "f16", *tokens = "1,2,4,8,16,32,128";
    long rows = 576, cols = 576, repeat = 20, probes = 0;
    bool ok = true;
    static const struct option opts[] = {{"type", required_argument, 0, 'y'},   {"rows", required_argument, 0, 'r'},
                                         {"cols", required_argument, 0, 'c'},   {"tokens", required_argument, 0, 't'},
                                         {"repeat", required_argument, 0, 'n'}, {"probe", required_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'y': type_name = optarg; break;
        case 'r': ok &= mn_parse_long(optarg, 1, 65536, &rows); break;
        case 'c': ok &= mn_parse_long(optarg, 8, 65536, &cols); break;
        case 't': tokens = optarg; break;
        case 'n': ok &= mn_parse_long(optarg, 1, 1000000, &repeat); break;
        case 'p': ok &= mn_parse_long(optarg, 1, 100000, &probes); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    long T_list[MAX_T];
    int n_t = mn_parse_long_list(tokens, 1, 4096, T_list, MAX_T);
    ok &= n_t > 0;
    static const struct {
        const char *name;
        mn_dtype type;
    } types[] = {{"f32", MN_F32}, {"f16", MN_F16}, {"q8_0", MN_Q8_0}, {"q4_0", MN_Q4_0}, {"q4_1", MN_Q4_1}};
    int ti = -1;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        ti = strcmp(type_name, types[i].name) ? ti : (int)i;
    if (!ok || ti < 0 || (mn_dtype_quantized(types[ti].type) && cols % 32)) { /* blocks of 32 */
        usage(stderr);
        return 2;
    }
    if (probes)
        return probe(probes);
    mn_dtype type = types[ti].type;
    int q8 = mn_dtype_quantized(type);
    const mn_dtype_info *info = mn_dtype_get(type);
    size_t row_bytes = mn_dtype_row_bytes(info, (uint64_t)cols);
    uint8_t *w = alloc64((size_t)rows * row_bytes);
    uint8_t *packed = q8 ? alloc64((size_t)rows * row_bytes) : NULL;
    if (!w || (q8 && !packed))
        return 1;
    if (q8) { /* arbitrary bytes, with a small finite f16 scale (and minimum) in every block */
        for (size_t i = 0; i < (size_t)rows * row_bytes; i++)
            w[i] = (uint8_t)(i * 131 + 7);
        for (size_t b = 0; b < (size_t)rows * row_bytes / info->bytes; b++) {
            uint16_t *h = (uint16_t *)(w + b * info->bytes);
            h[0] = mn_f32_to_f16(0.001f * (float)(b % 7 + 1));
            if (type == MN_Q4_1)
                h[1] = mn_f32_to_f16(-0.004f * (float)(b % 5));
        }
    } else {
        for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++) {
            float v = (float)((i * 7) % 61) * 0.01f - 0.3f;
            if (type == MN_F16)
                ((uint16_t *)w)[i] = mn_f32_to_f16(v);
            else
                ((float *)w)[i] = v;
        }
    }
    mn_weight W = {.type = type, .rows = (uint32_t)rows, .cols = (uint32_t)cols, .row_bytes = row_bytes, .data = w};
    if (q8) {
        mn_weight raw = W;
        mn_q8_pack(&raw, packed, &W);
    }
    printf("kernels %s\n", mn_cpu_kernels_name());
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        printf("FMA peak (one core)                 %6.1f GFLOP/s\n", fma_peak());
    if (__builtin_cpu_supports("avx512f"))
        printf("FMA peak, 512-bit (one core)        %6.1f GFLOP/s\n", fma_peak512());
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"))
        printf("Q8 block step peak (one core)       %6.0f M/s (2 vpdpwssd + cvt + FMA)\n", q8_step_peak());
#endif
    for (int k = 0; k < n_t; k++) {
        long T = T_list[k];
        float *x = alloc64((size_t)T * (size_t)cols * sizeof(float));
        float *y = alloc64((size_t)T * (size_t)rows * sizeof(float));
        if (!x || !y)
            return 1;
        for (size_t i = 0; i < (size_t)T * (size_t)cols; i++)
            x[i] = (float)(i % 37) * 0.1f - 1.8f;
        size_t groups = mn_q8_groups((size_t)cols);
        mn_q8 *xq = q8 ? alloc64((size_t)T * groups * sizeof *xq) : NULL;
        if (q8 && !xq)
            return 1;
        for (long t = 0; q8 && t < T; t++)
            mn_quantize_q8(x + (size_t)t * (size_t)cols, (size_t)cols, xq + (size_t)t * groups);
        double t0 = 0;
        for (long r = -1; r < repeat; r++) { /* r = -1: the warm-up */
            if (r == 0)
                t0 = mn_now();
            if (q8)
                mn_matmul_q8(&W, xq, groups, y, (size_t)rows, (int)T, 0, (uint32_t)rows);
            else
                mn_matmul(&W, x, (size_t)cols, y, (size_t)rows, (int)T, 0, (uint32_t)rows);
        }
        double t = mn_now() - t0;
        free(xq);
        printf("%s %5ld x %5ld  T %4ld            %6.1f GFLOP/s\n", type_name, rows, cols, T,
               2.0 * (double)rows * (double)cols * (double)T * (double)repeat / t * 1e-9);
        free(x);
        free(y);
    }
    free(w);
    free(packed);
    return 0;
}
