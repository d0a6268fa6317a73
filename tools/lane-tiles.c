/* lane-tiles.c - the experiment behind "lane panels" (tried on 2026-11-26, not kept; see
 * docs/measurements.md, "Speed"): F32 weights repacked so that a tile multiplies one activation by 8
 * outputs' weights in one FMA, each accumulator lane's chain run separately and the eight lanes added
 * vertically at the end, which gives the same bits as the engine's row-major tiles (matmul.h's
 * reduction order) with no horizontal sums. Not part of the build:
 *
 *   gcc -O2 -ffp-contract=off tools/lane-tiles.c -o /tmp/lane-tiles -lm
 *   /tmp/lane-tiles ROWS COLS T REPEAT     # ROWS a multiple of 8; beside:
 *   build/minions-bench-matmul --type f32 --rows ROWS --cols COLS --tokens T --repeat REPEAT
 *
 * Layout: group g of 8 outputs, [lane l][chunk j][output o] = W[8g + o][8j + l], then the tail
 * columns [k][o]. Tiles: 4 rows x 3 groups (weights held), 3 x 3, 2 x 3 x 2 lanes, 1 x 3 x 4 lanes.
 * Prints GFLOP/s of one core, and MISMATCH if any output differs from the scalar reference. */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#define AI static inline __attribute__((always_inline))
#define IN_REGISTER(v) __asm__("" : "+x"(v))
static float hsum8(const float l[8]) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }
static void ref(const float *W, int rows, int cols, const float *x, int T, float *y) {
  int full = cols / 8 * 8;
  for (int o = 0; o < rows; o++) for (int t = 0; t < T; t++) {
    float lane[8] = {0}; const float *w = W + (size_t)o * cols, *xr = x + (size_t)t * cols;
    for (int k = 0; k < full; k++) lane[k % 8] = fmaf(w[k], xr[k], lane[k % 8]);
    float s = hsum8(lane); for (int k = full; k < cols; k++) s = fmaf(w[k], xr[k], s);
    y[(size_t)t * rows + o] = s; }
}
static void pack(const float *W, int rows, int cols, float *P) {
  int nc = cols / 8; size_t gsz = (size_t)cols * 8;
  for (int g = 0; g < (rows + 7) / 8; g++) for (int o = 0; o < 8; o++) {
    int r = g * 8 + o; float *p = P + g * gsz;
    for (int k = 0; k < cols; k++) {
      float v = r < rows ? W[(size_t)r * cols + k] : 0;
      size_t idx = k < nc * 8 ? ((size_t)(k % 8) * nc + k / 8) * 8 : ((size_t)8 * nc + (k - nc * 8)) * 8;
      p[idx + o] = v; } }
}
/* TT tokens x M groups x LL lanes at once */
AI void tile(const float *P, size_t gsz, int cols, const float *x, size_t ldx, float *y, size_t ldy, int t0, int g0, const int TT, const int M, const int LL) {
  const int nc = cols / 8, tail = cols % 8;
  __m256 part[8][4][3];
  for (int l = 0; l < 8; l += LL) {
    __m256 acc[4][3][8];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
#pragma GCC unroll 8
      for (int m = 0; m < M; m++)
#pragma GCC unroll 8
        for (int ll = 0; ll < LL; ll++) acc[t][m][ll] = _mm256_setzero_ps();
    const float *pw = P + (size_t)g0 * gsz + (size_t)l * nc * 8;
    const float *xl = x + (size_t)t0 * ldx + l;
    for (int j = 0; j < nc; j++, pw += 8, xl += 8) {
      if (TT <= M || LL > 1) { /* x held, weights streamed */
        __m256 xb[4][8];
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
#pragma GCC unroll 8
          for (int ll = 0; ll < LL; ll++) { xb[t][ll] = _mm256_broadcast_ss(xl + t * ldx + ll); }
#pragma GCC unroll 8
        for (int m = 0; m < M; m++)
#pragma GCC unroll 8
          for (int ll = 0; ll < LL; ll++) {
            __m256 w = _mm256_load_ps(pw + m * gsz + ll * nc * 8);
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++) acc[t][m][ll] = _mm256_fmadd_ps(w, xb[t][ll], acc[t][m][ll]);
          }
      } else { /* weights held, x streamed */
        __m256 w[3];
#pragma GCC unroll 8
        for (int m = 0; m < M; m++) { w[m] = _mm256_load_ps(pw + m * gsz); IN_REGISTER(w[m]); }
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
          __m256 xb = _mm256_broadcast_ss(xl + t * ldx);
#pragma GCC unroll 8
          for (int m = 0; m < M; m++) acc[t][m][0] = _mm256_fmadd_ps(w[m], xb, acc[t][m][0]);
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
#pragma GCC unroll 8
      for (int m = 0; m < M; m++)
#pragma GCC unroll 8
        for (int ll = 0; ll < LL; ll++) part[l + ll][t][m] = acc[t][m][ll];
  }
  for (int t = 0; t < TT; t++) for (int m = 0; m < M; m++) {
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(part[0][t][m], part[4][t][m]), _mm256_add_ps(part[2][t][m], part[6][t][m])),
                             _mm256_add_ps(_mm256_add_ps(part[1][t][m], part[5][t][m]), _mm256_add_ps(part[3][t][m], part[7][t][m])));
    const float *pt = P + (size_t)(g0 + m) * gsz + (size_t)8 * nc * 8;
    for (int k = 0; k < tail; k++) s = _mm256_fmadd_ps(_mm256_load_ps(pt + k * 8), _mm256_broadcast_ss(x + (size_t)(t0 + t) * ldx + nc * 8 + k), s);
    _mm256_storeu_ps(y + (size_t)(t0 + t) * ldy + (g0 + m) * 8, s);
  }
}
#define SH(a,b,c) static __attribute__((noinline)) void t##a##b##c(const float *P, size_t gsz, int cols, const float *x, float *y, int rows, int t, int g) { tile(P,gsz,cols,x,cols,y,rows,t,g,a,b,c); }
SH(4,3,1) SH(3,3,1) SH(2,3,2) SH(1,3,4)
SH(4,2,1) SH(3,2,2) SH(2,2,2) SH(1,2,4) SH(4,1,2) SH(3,1,4) SH(2,1,4) SH(1,1,8)
static void tiles(const float *P, size_t gsz, int cols, const float *x, float *y, int rows, int t, int g, int r, int m) {
  if (m == 3) { if (r == 4) t431(P,gsz,cols,x,y,rows,t,g); else if (r == 3) t331(P,gsz,cols,x,y,rows,t,g); else if (r == 2) { t232(P,gsz,cols,x,y,rows,t,g);} else t134(P,gsz,cols,x,y,rows,t,g); }
  else if (m == 2) { if (r == 4) t421(P,gsz,cols,x,y,rows,t,g); else if (r == 3) t322(P,gsz,cols,x,y,rows,t,g); else if (r == 2) t222(P,gsz,cols,x,y,rows,t,g); else t124(P,gsz,cols,x,y,rows,t,g); }
  else { if (r == 4) t412(P,gsz,cols,x,y,rows,t,g); else if (r == 3) t314(P,gsz,cols,x,y,rows,t,g); else if (r == 2) t214(P,gsz,cols,x,y,rows,t,g); else t118(P,gsz,cols,x,y,rows,t,g); }
}
static void mm(const float *P, int rows, int cols, const float *x, int T, float *y) {
  size_t gsz = (size_t)cols * 8; int ng = rows / 8;
  for (int g = 0; g < ng; g += 3) {
    int m = ng - g < 3 ? ng - g : 3, t = 0;
    int n4 = T / 4, r = T % 4;
    if (r == 2 && n4 > 0) { n4--; }
    for (int i = 0; i < n4; i++, t += 4) tiles(P, gsz, cols, x, y, rows, t, g, 4, m);
    while (t < T) { int rr = T - t >= 3 ? 3 : T - t; tiles(P, gsz, cols, x, y, rows, t, g, rr, m); t += rr; }
  }
}
static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: lane-tiles ROWS COLS T REPEAT\n"); return 2; }
  int rows = atoi(argv[1]), cols = atoi(argv[2]), T = atoi(argv[3]), rep = atoi(argv[4]);
  float *W = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * T * cols);
  float *P = aligned_alloc(32, sizeof(float) * ((rows + 7) / 8 * 8) * cols + 64);
  float *y = malloc(sizeof(float) * T * rows), *yr = malloc(sizeof(float) * T * rows);
  srand(1); for (int i = 0; i < rows * cols; i++) W[i] = rand() / (float)RAND_MAX - 0.5f;
  for (int i = 0; i < T * cols; i++) x[i] = rand() / (float)RAND_MAX - 0.5f;
  pack(W, rows, cols, P); ref(W, rows, cols, x, T, yr); mm(P, rows, cols, x, T, y);
  if (memcmp(y, yr, sizeof(float) * T * rows)) { printf("MISMATCH\n"); }
  double t0 = now(); for (int r = 0; r < rep; r++) mm(P, rows, cols, x, T, y); double dt = now() - t0;
  printf("%d x %d T %d: %.1f GFLOP/s\n", rows, cols, T, 2.0 * rows * cols * T * rep / dt / 1e9);
}
