/* tile-prefetch.c - docs/runtime.md's "Token lanes" paragraph, its second half (2026-12-01): the
 * engine's AVX2 2 x 6 float tiles at T = 8 over every matrix of the bundled target on one core,
 * each matrix's share of a pass (GFLOP/s in the pass, against the matrix alone in L2: token-lanes
 * ONLY=i), then the pass with the next group's rows prefetched `dist` groups ahead (dist -1: 4 x 3
 * tiles instead). Not part of the build; from the repository root, after a build:
 *
 *   gcc -O2 -std=gnu11 -ffp-contract=off -Isrc -Ibuild tools/tile-prefetch.c build/libminions_kernels.a \
 *       build/libminions.a -lm -o /tmp/tile-prefetch
 *   /tmp/tile-prefetch ROUNDS            # e.g. 60
 */
#include "../src/cpu/kernels_avx2.c"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
static int DIST = 1;
static void my_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T, uint32_t ob, uint32_t oe)
{
    const uint32_t type = MN_F32;
#define TILE(t, o, stride, RT, OT) tile(type, W, x, ldx, y, ldy, t, o, stride, RT, OT, 0, NULL, 0)
    uint32_t o = ob;
    if (DIST < 0) {
        const uint32_t q3 = (oe - ob) / 3;
        for (; o < ob + q3; o++)
            for (int t = 0; t < T; t += 4)
                TILE(t, o, q3, 4, 3);
        for (o = ob + 3 * q3; o < oe; o++)
            for (int t = 0; t < T; t += 2)
                TILE(t, o, 1, 2, 1);
        return;
    }
    const uint32_t b = o, q = (oe - b) / 6;
    const size_t step = (size_t)q * W->row_bytes, pf_step = W->row_bytes / (W->cols / 8);
    for (; o < b + q; o++) {
        const uint8_t *next = W->data + (size_t)(o + DIST) * W->row_bytes;
        const size_t last = o + DIST < b + q ? 6 : 0;
        int t = 0;
        TILE(0, o, q, 2, 6), t = 2;
        for (size_t k = 0; t < T; t += 2, k += 2) {
            if (k < last)
                tile(type, W, x, ldx, y, ldy, t, o, q, 2, 6, 2, next + k * step, pf_step);
            else
                TILE(t, o, q, 2, 6);
        }
    }
    for (o = b + 6 * q; o < oe; o++)
        for (int t = 0; t < T; t += 2)
            TILE(t, o, 1, 2, 1);
#undef TILE
}
int main(int argc, char **argv)
{
    int T = 8, rounds = argc > 1 ? atoi(argv[1]) : 40;
    int shapes[][2] = {{256, 256}, {128, 256}, {128, 256}, {256, 256}, {688, 256}, {688, 256}, {256, 688}};
    enum { NL = 6, NS = 7 };
    mn_weight Ws[NL * NS + 1];
    int nw = 0;
    for (int l = 0; l <= NL; l++)
        for (int s = 0; s < (l < NL ? NS : 1); s++) {
            mn_weight *w = &Ws[nw++];
            w->type = MN_F32, w->rows = l < NL ? shapes[s][0] : 2048, w->cols = l < NL ? shapes[s][1] : 256, w->row_bytes = 4 * w->cols;
            float *d = aligned_alloc(64, (size_t)w->rows * w->row_bytes);
            for (size_t i = 0; i < (size_t)w->rows * w->cols; i++) d[i] = (float)rand() / RAND_MAX - 0.5f;
            w->data = (const uint8_t *)d;
        }
    float *x = aligned_alloc(64, 8 * 688 * 4), *y0 = calloc(8 * 2048, 4), *y1 = calloc(8 * 2048, 4);
    for (int i = 0; i < 8 * 688; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    int dists[] = {0, 1, 2, 3, 4, -1};
    enum { ND = 6 };
    static double m[ND + 1][4000];
    for (int r = 0; r < rounds; r++)
        for (int v = -1; v < ND; v++) {
            DIST = v < 0 ? 1 : dists[v];
            double t0 = now();
            for (int i = 0; i < nw; i++) {
                if (v < 0) matmul_f32(&Ws[i], x, 688, y0, 2048, T, 0, Ws[i].rows);
                else my_matmul(&Ws[i], x, 688, y1, 2048, T, 0, Ws[i].rows);
            }
            m[v + 1][r] = now() - t0;
        }
    {
        static double per[8]; static const char *nm[8] = {"q","k","v","o","gate","up","down","out"};
        for (int r = 0; r < rounds; r++)
            for (int i = 0; i < nw; i++) {
                double t0 = now();
                matmul_f32(&Ws[i], x, 688, y0, 2048, T, 0, Ws[i].rows);
                per[i < NL * NS ? i % NS : 7] += now() - t0;
            }
        for (int s = 0; s < 8; s++) {
            double fl = 2.0 * (s < 7 ? shapes[s][0] * shapes[s][1] * NL : 2048 * 256) * T;
            printf("%-5s %7.1f us/pass  %5.1f GFLOP/s\n", nm[s], per[s] / rounds * 1e6, fl / (per[s] / rounds) * 1e-9);
        }
    }
    for (int v = -1; v < ND; v++) {
        double *a = m[v + 1];
        for (int i = 0; i < rounds; i++) for (int j = i + 1; j < rounds; j++) if (a[j] < a[i]) { double tt = a[i]; a[i] = a[j]; a[j] = tt; }
        printf("%s dist %d: %.1f us\n", v < 0 ? "engine" : "mine  ", v < 0 ? 1 : dists[v], a[rounds / 2] * 1e6);
    }
}
