/* token-lanes.c - the experiment behind docs/runtime.md's "Token lanes" (2026-12-01, not kept):
 * the pass's activations transposed into [column][8 tokens], so that one FMA multiplies a broadcast
 * weight by eight tokens and each weight is read once a pass, against the engine's AVX2 float
 * tiles, over every matrix of the bundled target (6 layers: q 256x256, k and v 128x256, o 256x256,
 * gate and up 688x256, down 256x688; output 2048x256) on one core. Checks every output equal to
 * the engine's bit for bit (MISMATCH otherwise), then prints the median pass time of each tile
 * shape (rows x column classes). Not part of the build; from the repository root, after a build:
 *
 *   gcc -O2 -std=gnu11 -ffp-contract=off -Isrc -Ibuild tools/token-lanes.c build/libminions_kernels.a \
 *       build/libminions.a -lm -o /tmp/token-lanes
 *   /tmp/token-lanes T ROUNDS            # e.g. 8 60; ONLY=i times matrix i alone (0: q, 4: gate, 6: down)
 */
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include "cpu/kernels.h"
#include "model/model.h"
#include "model/dtype.h"

extern const mn_cpu_kernels mn_kernels_avx2;
#define AI static inline __attribute__((always_inline))
static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

/* x [T][ldx] -> xt [cols][8] */
static void transpose_x(const float *x, size_t ldx, int T, int cols, float *xt)
{
    for (int k = 0; k < cols; k++)
        for (int t = 0; t < 8; t++)
            xt[k * 8 + t] = t < T ? x[(size_t)t * ldx + k] : 0.f;
}

/* R rows (o + r*stride), CG classes at a time */
AI void xtile(const mn_weight *W, const float *xt, float *y, size_t ldy, int T, uint32_t o, uint32_t stride, const int R,
              const int CG)
{
    const int nc = W->cols / 8, tail = W->cols % 8;
    const float *w[12];
    for (int r = 0; r < R; r++)
        w[r] = (const float *)(W->data + (size_t)(o + r * stride) * W->row_bytes);
    __m256 part[12][8];
    for (int cg = 0; cg < 8; cg += CG) {
        __m256 acc[12][8];
#pragma GCC unroll 12
        for (int r = 0; r < R; r++)
#pragma GCC unroll 8
            for (int c = 0; c < CG; c++)
                acc[r][c] = _mm256_setzero_ps();
        for (int j = 0; j < nc; j++) {
#pragma GCC unroll 8
            for (int c = 0; c < CG; c++) {
                const int k = 8 * j + cg + c;
                __m256 xv = _mm256_load_ps(xt + k * 8);
#pragma GCC unroll 12
                for (int r = 0; r < R; r++)
                    acc[r][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(w[r] + k), xv, acc[r][c]);
            }
        }
#pragma GCC unroll 12
        for (int r = 0; r < R; r++)
#pragma GCC unroll 8
            for (int c = 0; c < CG; c++)
                part[r][cg + c] = acc[r][c];
    }
    for (int r = 0; r < R; r++) {
        __m256 *p = part[r];
        __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(p[0], p[4]), _mm256_add_ps(p[2], p[6])),
                                 _mm256_add_ps(_mm256_add_ps(p[1], p[5]), _mm256_add_ps(p[3], p[7])));
        for (int k = nc * 8; k < nc * 8 + tail; k++)
            s = _mm256_fmadd_ps(_mm256_broadcast_ss(w[r] + k), _mm256_load_ps(xt + k * 8), s);
        float out[8];
        _mm256_storeu_ps(out, s);
        for (int t = 0; t < T; t++)
            y[(size_t)t * ldy + o + r * stride] = out[t];
    }
}

#define XT(R, CG)                                                                                         \
    static __attribute__((noinline)) void xt_##R##_##CG(const mn_weight *W, const float *xt, float *y, size_t ldy, int T, \
                                                        uint32_t ob, uint32_t oe)                       \
    {                                                                                                     \
        uint32_t q = (oe - ob) / R, o = ob;                                                               \
        for (; o < ob + q; o++)                                                                           \
            xtile(W, xt, y, ldy, T, o, q, R, CG);                                                         \
        for (o = ob + R * q; o < oe; o++)                                                                 \
            xtile(W, xt, y, ldy, T, o, 1, 1, CG);                                                         \
    }
XT(1, 8)
XT(3, 4)
XT(6, 2)
XT(12, 1)
XT(8, 1)
XT(4, 2)
XT(2, 4)
typedef void (*xtfn)(const mn_weight *, const float *, float *, size_t, int, uint32_t, uint32_t);
static const struct { const char *name; xtfn f; } V[] = {{"1x8", xt_1_8}, {"3x4", xt_3_4}, {"6x2", xt_6_2},
                                                         {"12x1", xt_12_1}, {"8x1", xt_8_1}, {"4x2", xt_4_2}, {"2x4", xt_2_4}};
enum { NV = sizeof V / sizeof V[0] };

int main(int argc, char **argv)
{
    int T = argc > 1 ? atoi(argv[1]) : 8, rounds = argc > 2 ? atoi(argv[2]) : 50;
    /* the bundled target: 6 layers of q 256x256, k 128x256, v 128x256, o 256x256, gate/up 688x256, down 256x688; out 2048x256 */
    int shapes[][2] = {{256, 256}, {128, 256}, {128, 256}, {256, 256}, {688, 256}, {688, 256}, {256, 688}};
    enum { NL = 6, NS = 7 };
    mn_weight Ws[NL * NS + 1];
    int nw = 0;
    for (int l = 0; l < NL; l++)
        for (int s = 0; s < NS; s++) {
            mn_weight *w = &Ws[nw++];
            w->type = MN_F32, w->rows = shapes[s][0], w->cols = shapes[s][1], w->row_bytes = 4 * w->cols;
            float *d = aligned_alloc(64, (size_t)w->rows * w->row_bytes);
            for (size_t i = 0; i < (size_t)w->rows * w->cols; i++)
                d[i] = (float)rand() / RAND_MAX - 0.5f;
            w->data = (const uint8_t *)d;
        }
    {
        mn_weight *w = &Ws[nw++];
        w->type = MN_F32, w->rows = 2048, w->cols = 256, w->row_bytes = 1024;
        float *d = aligned_alloc(64, (size_t)w->rows * w->row_bytes);
        for (size_t i = 0; i < (size_t)w->rows * w->cols; i++)
            d[i] = (float)rand() / RAND_MAX - 0.5f;
        w->data = (const uint8_t *)d;
    }
    float *x = aligned_alloc(64, 8 * 688 * 4), *xt = aligned_alloc(64, 8 * 688 * 4);
    float *y0 = calloc(8 * 2048, 4), *y1 = calloc(8 * 2048, 4);
    for (int i = 0; i < 8 * 688; i++)
        x[i] = (float)rand() / RAND_MAX - 0.5f;
    /* correctness */
    for (int v = 0; v < NV; v++)
        for (int i = 0; i < nw; i++) {
            mn_weight *w = &Ws[i];
            mn_kernels_avx2.matmul(w, x, 688, y0, 2048, T, 0, w->rows);
            transpose_x(x, 688, T, w->cols, xt);
            memset(y1, 0, 8 * 2048 * 4);
            V[v].f(w, xt, y1, 2048, T, 0, w->rows);
            for (int t = 0; t < T; t++)
                if (memcmp(y0 + t * 2048, y1 + t * 2048, 4 * w->rows)) {
                    printf("MISMATCH %s w %d t %d\n", V[v].name, i, t);
                    break;
                }
        }
    int only = getenv("ONLY") ? atoi(getenv("ONLY")) : -1;
    if (only >= 0) { Ws[0] = Ws[only]; nw = 1; }
    double flops = 0;
    for (int i = 0; i < nw; i++)
        flops += 2.0 * Ws[i].rows * Ws[i].cols * T;
    double best[NV + 1];
    static double med[NV + 1][5000];
    for (int r = 0; r < rounds; r++) {
        for (int v = -1; v < NV; v++) {
            double t0 = now();
            for (int i = 0; i < nw; i++) {
                mn_weight *w = &Ws[i];
                if (v < 0)
                    mn_kernels_avx2.matmul(w, x, 688, y0, 2048, T, 0, w->rows);
                else {
                    transpose_x(x, 688, T, w->cols, xt);
                    V[v].f(w, xt, y1, 2048, T, 0, w->rows);
                }
            }
            med[v + 1][r] = now() - t0;
        }
    }
    for (int v = -1; v < NV; v++) {
        double *m = med[v + 1];
        for (int i = 0; i < rounds; i++)
            for (int j = i + 1; j < rounds; j++)
                if (m[j] < m[i]) { double tmp = m[i]; m[i] = m[j]; m[j] = tmp; }
        best[v + 1] = m[rounds / 2];
        printf("%-6s T %d  pass %7.1f us  %5.1f GFLOP/s\n", v < 0 ? "engine" : V[v].name, T, best[v + 1] * 1e6,
               flops / best[v + 1] * 1e-9);
    }
    return 0;
}
