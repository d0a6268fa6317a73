/* test_kernels.c - every kernel set this CPU runs (generic C, AVX2, AVX-512) against the scalar
 * twins, bit for bit (every type, every tile shape), dequantization and half floats, the KV block
 * pool, the sampler, the pages the CPU backend copies the weights into. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "mem/kv.h"
#include "model/draw.h"
#include "model/dtype.h"
#include "model/quant.h"
#include "model/sampler.h"
#include "testutil.h"
#include "util/alloc.h"

enum { MAX_SETS = 8 };
static const char *kernel_sets[MAX_SETS];

/* How many kernel sets the library has (mn_cpu_kernels_at), listed in kernel_sets with the generic
 * one first: the reference the others are checked against. */
static size_t n_sets(void)
{
    static size_t n;
    if (!n) {
        kernel_sets[n++] = "generic";
        for (size_t i = 0; mn_cpu_kernels_at(i); i++)
            if (strcmp(mn_cpu_kernels_at(i), "generic") != 0 && n < MAX_SETS)
                kernel_sets[n++] = mn_cpu_kernels_at(i);
    }
    return n;
}

/* Put kernel set i in use; false, with a note in the log, where this CPU cannot run it. */
static bool use_set(size_t i)
{
    static bool told[MAX_SETS];
    if (mn_cpu_kernels_use(kernel_sets[i]) == 0)
        return true;
    if (!told[i])
        cr_log_info("kernel set %s not run: this CPU lacks it", kernel_sets[i]);
    told[i] = true;
    return false;
}

/* fn once with each kernel set this CPU runs in use. */
static void on_every_set(void (*fn)(void))
{
    for (size_t ks = 0; ks < n_sets(); ks++)
        if (use_set(ks))
            fn();
}

/* The sets the tests iterate come from the library: it must list every set it has. */
Test(kernels, the_library_lists_its_kernel_sets)
{
    static const char *const want[] = {"generic", "avx2", "avx512", "avx512w", "avx512-emu", "avx512w-emu"};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        bool found = false;
        for (size_t i = 0; i < n_sets(); i++)
            found |= strcmp(kernel_sets[i], want[w]) == 0;
        cr_assert(found, "kernel set %s is not listed", want[w]);
    }
    cr_assert_null(mn_cpu_kernels_at(n_sets()), "a set past the last");
    cr_assert_eq(mn_cpu_kernels_usable("generic"), 1);
    cr_assert_eq(mn_cpu_kernels_usable("sparc"), 0);
}

static void check_matmul_at(const mn_weight *w, int T, const char *gguf, const char *tensor_kind, size_t wi)
{
    float *x = malloc((size_t)T * w->cols * sizeof(float));
    float *y = malloc((size_t)T * w->rows * sizeof(float)), *r = malloc((size_t)T * w->rows * sizeof(float));
    for (size_t i = 0; i < (size_t)T * w->cols; i++)
        x[i] = sinf((float)i * 0.37f) * 2.0f;
    mn_matmul_ref(w, x, w->cols, r, w->rows, T, 0, w->rows);
    for (size_t ks = 0; ks < n_sets(); ks++)
        for (uint32_t cut = 0; cut < 6 && use_set(ks); cut++) {
            uint32_t ob = 1 + cut, oe = w->rows - 2;
            memset(y, 0xff, (size_t)T * w->rows * sizeof(float)); /* NaN: an output left unwritten fails */
            mn_matmul(w, x, w->cols, y, w->rows, T, ob, oe);
            for (int t = 0; t < T; t++) {
                const float *yt = y + (size_t)t * w->rows, *rt = r + (size_t)t * w->rows;
                cr_assert(memcmp(yt + ob, rt + ob, (oe - ob) * sizeof(float)) == 0,
                          "%s: %s %s weight %zu T=%d outputs [%u, %u) differ in row %d", kernel_sets[ks], gguf,
                          tensor_kind, wi, T, ob, oe, t);
                for (uint32_t o = 0; o < w->rows; o = o + 1 == ob ? oe : o + 1) {
                    uint32_t bits;
                    memcpy(&bits, yt + o, sizeof bits);
                    cr_assert(bits == 0xffffffffu, "%s: %s weight %zu T=%d wrote output %u outside [%u, %u)",
                              kernel_sets[ks], gguf, wi, T, o, ob, oe);
                }
            }
        }
    free(x);
    free(y);
    free(r);
}

static void check_matmul(const char *gguf, const char *tensor_kind)
{
    mn_model *m = load_model(gguf);
    const mn_weight *ws[] = {&m->layers[0].wq, &m->layers[0].w_down, &m->output};
    for (size_t wi = 0; wi < 3; wi++) {
        const mn_weight *w = ws[wi];
        /* every tile shape and remainder: T = 1 (1 x 4 over quarters), 3 (3 x 3 over thirds), even
         * (2 x 6 over sixths), odd (1 x 6 + 2 x 6), past 8, and 32, 33, 38, 71; output ranges of
         * every width mod 6 (so mod 4 and 3 too) leave every remainder, which goes one output at
         * a time */
        for (int T = 1; T <= 71; T = T == 17 ? 32 : T == 33 ? 38 : T == 38 ? 71 : T + 1)
            check_matmul_at(w, T, gguf, tensor_kind, wi);
        /* F32 passes whose activations reach the lane panels' size (MN_LANE_MIN_ACT_FLOATS): rows 32
         * at a time, the last 5, 6 or 7 in tiles of 4 + 1, 3 + 3 and 4 + 3 */
        int lanes = (int)((MN_LANE_MIN_ACT_FLOATS + w->cols - 1) / w->cols + 31) / 32 * 32;
        for (int extra = 5; w->type == MN_F32 && extra <= 7; extra++)
            check_matmul_at(w, lanes + extra, gguf, tensor_kind, wi);
    }
    mn_model_free(m);
}

Test(kernels, matmul_f32_equals_scalar_twin) { check_matmul("gqa_f32.gguf", "f32"); }
Test(kernels, matmul_f16_equals_scalar_twin) { check_matmul("f16.gguf", "f16"); }
Test(kernels, matmul_q8_0_equals_scalar_twin) { check_matmul("q8_0.gguf", "q8_0"); }
Test(kernels, matmul_q4_0_equals_scalar_twin) { check_matmul("q4_0.gguf", "q4_0"); }
Test(kernels, matmul_q4_1_equals_scalar_twin) { check_matmul("q4_1.gguf", "q4_1"); }

/* The fixtures' F16 rows are whole chunks of 8. Rows of 100 columns end in a tail of 4, which every
 * tile takes element by element after its chunks: F32 and F16, every tile shape of T = 1..40; rows
 * of 5 columns, a tail and no chunk; and one row of a matrix past ONE_ROW_WIDE_BYTES (kernels_avx2.c:
 * 1 x 4 tiles there, 1 x 8 below). */
Test(kernels, matmul_float_rows_with_a_tail)
{
    static const uint32_t types[] = {MN_F32, MN_F16};
    for (size_t ti = 0; ti < 6; ti++) {
        const bool large = ti == 2 || ti == 3, narrow = ti >= 4; /* narrow: 5 columns, all tail */
        mn_weight w = {.type = types[ti % 2], .rows = large ? 1400 : 61, .cols = narrow ? 5 : 100};
        w.row_bytes = mn_dtype_row_bytes(mn_dtype_get(w.type), w.cols);
        uint8_t *data = malloc(w.rows * w.row_bytes);
        for (size_t i = 0; i < (size_t)w.rows * w.cols; i++) {
            float v = cosf((float)i * 0.11f);
            uint16_t h = mn_f32_to_f16(v);
            if (w.type == MN_F32)
                memcpy(data + i * sizeof v, &v, sizeof v);
            else
                memcpy(data + i * sizeof h, &h, sizeof h);
        }
        w.data = data;
        const char *what = large ? "a large built matrix" : narrow ? "a narrow built matrix" : "a built matrix";
        for (int T = 1; T <= (large ? 1 : 40); T++)
            check_matmul_at(&w, T, what, w.type == MN_F32 ? "f32" : "f16", 0);
        free(data);
    }
}

/* The attention kernels over keys and value rows of floats and of half floats (a half-float KV
 * cache's), against mn_dot and mn_axpy one key and one row at a time over the same values as floats
 * (the half floats converted: the conversion is exact, so the bits must be the same). */
static void attention_kernels_over(uint32_t type)
{
    enum { KEYS = 19 };
    const int half = type == MN_F16;
    for (int n = 1; n <= 80; n++) {
        float a[80], b[KEYS][80], wts[3][37], out[KEYS];
        uint16_t bh[KEYS][80];
        for (int i = 0; i < n; i++) {
            a[i] = cosf((float)i * 1.3f + (float)n);
            for (int k = 0; k < KEYS; k++) {
                b[k][i] = sinf((float)(i * 7 + k * 3 + n));
                bh[k][i] = mn_f32_to_f16(b[k][i]);
                if (half)
                    b[k][i] = mn_f16_to_f32(bh[k][i]);
            }
        }
        const void *ptr[KEYS];
        for (int k = 0; k < KEYS; k++)
            ptr[k] = half ? (const void *)bh[k] : (const void *)b[k];
        mn_dots(a, 0, 1, ptr, type, KEYS, n, out, 0); /* two groups of eight and a remainder */
        for (int k = 0; k < KEYS; k++) {
            float one = mn_dot(a, b[k], n);
            cr_assert(memcmp(&one, &out[k], sizeof one) == 0, "%s n=%d key %d: dots %a vs dot %a",
                      half ? "f16" : "f32", n, k, out[k], one);
        }
        /* three heads (a pair and a single) over the same keys, each its own dots; every count of
         * keys, so that a last group holds each of 1..8 */
        float qs[3][80], outs[3][KEYS];
        for (int h = 0; h < 3; h++)
            for (int i = 0; i < n; i++)
                qs[h][i] = cosf((float)(i * (h + 2)) * 0.7f + (float)h);
        for (int nk = 1; nk <= KEYS; nk++) {
            mn_dots(qs[0], 80, 3, ptr, type, nk, n, outs[0], KEYS);
            for (int h = 0; h < 3; h++)
                for (int k = 0; k < nk; k++) {
                    float one = mn_dot(qs[h], b[k], n);
                    cr_assert(memcmp(&one, &outs[h][k], sizeof one) == 0, "n=%d, %d keys, head %d key %d: dots %a vs "
                              "dot %a", n, nk, h, k, outs[h][k], one);
                }
        }
        /* weighted sums of three heads (a pair and a single) over 37 rows */
        const void *rows[37];
        for (int j = 0; j < 37; j++) {
            rows[j] = ptr[j % KEYS];
            wts[0][j] = 0.01f * (float)(j + 1);
            wts[1][j] = 0.5f - 0.013f * (float)j;
            wts[2][j] = 0.02f * (float)(j % 5);
        }
        float fast[3][80], pair[2][80], slow[3][80] = {{0}};
        mn_weighted_sum(fast[0], 80, wts[0], 37, 3, rows, type, 37, n);
        mn_weighted_sum(pair[0], 80, wts[0], 37, 2, rows, type, 37, n); /* and two heads alone */
        for (int h = 0; h < 3; h++) {
            for (int j = 0; j < 37; j++)
                mn_axpy(slow[h], wts[h][j], b[j % KEYS], n);
            cr_assert(memcmp(fast[h], slow[h], (size_t)n * sizeof(float)) == 0, "%s: head %d differs at n=%d",
                      half ? "f16" : "f32", h, n);
            cr_assert(h == 2 || memcmp(pair[h], slow[h], (size_t)n * sizeof(float)) == 0,
                      "%s: head %d of two differs at n=%d", half ? "f16" : "f32", h, n);
        }
    }
}

static void check_attention_kernels(void)
{
    attention_kernels_over(MN_F32);
    attention_kernels_over(MN_F16);
}
Test(kernels, attention_kernels_equal_their_one_at_a_time_forms) { on_every_set(check_attention_kernels); }

static void check_softmax(void)
{
    float x[300], y[300], z[300];
    for (int n = 1; n <= 300; n += (n < 20 ? 1 : 37)) {
        for (int i = 0; i < n; i++)
            x[i] = 9.0f * sinf((float)(i * i + n)) - (i == 5 ? 200.0f : 0.0f); /* one far below: e^-x ~ 0 */
        memcpy(y, x, sizeof x);
        float sum = mn_softmax(y, n, 0.25f);
        float mx = -INFINITY;
        for (int i = 0; i < n; i++)
            mx = fmaxf(mx, x[i] * 0.25f);
        double ref_sum = 0.0;
        for (int i = 0; i < n; i++) {
            double e = exp((double)(x[i] * 0.25f - mx)); /* the argument as the kernel rounds it */
            ref_sum += e;
            cr_assert_leq(fabs(y[i] - e), 2e-7 * e + 1e-30, "n=%d i=%d: %g vs %g", n, i, y[i], e);
        }
        cr_assert_leq(fabs(sum - ref_sum), 1e-6 * ref_sum, "n=%d: sum %g vs %g", n, sum, ref_sum);
        memcpy(z, x, sizeof x); /* the same scores, the same bits */
        cr_assert(mn_softmax(z, n, 0.25f) == sum && memcmp(y, z, (size_t)n * sizeof(float)) == 0);
    }
}
Test(kernels, softmax_matches_libm_and_depends_only_on_the_scores) { on_every_set(check_softmax); }

/* A NaN score (a pass that went wrong: an f16 cache's inf times 0) is passed over by the largest
 * score on every set, as in C; the SIMD maximum once kept it in a lane and lost the lane's true
 * largest, so the sets' weights differed. */
Test(kernels, softmax_passes_a_nan_over_on_every_set)
{
    enum { N = 40 };
    float x[N] = {0}, ref[N], got[N], ref_sum = 0;
    x[3] = 10.0f, x[11] = NAN, x[19] = x[27] = x[35] = -50.0f; /* 11 shares 3's lane, after it */
    for (size_t ks = 0; ks < n_sets(); ks++) {
        if (!use_set(ks))
            continue;
        float *o = ks == 0 ? ref : got;
        memcpy(o, x, sizeof x);
        float sum = mn_softmax(o, N, 1.0f);
        if (ks == 0) {
            ref_sum = sum;
            cr_assert_lt(fabsf(sum - 1.0f), 0.01f, "the largest score, 10, was lost: sum %a", sum);
            continue;
        }
        cr_assert(memcmp(&sum, &ref_sum, sizeof sum) == 0, "%s: sum %a vs %a", kernel_sets[ks], sum, ref_sum);
        cr_assert(memcmp(got, ref, sizeof got) == 0, "%s: the weights differ", kernel_sets[ks]);
    }
}

/* The plain loop mn_vec_argmax replaces: the first largest element, NaNs passed over. */
static int32_t argmax_ref(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Rows of every length up to 100 and a vocabulary's, with the maximum tied at two places (either
 * side of a vector's edge), signed zeros as the largest, and NaNs: first, in the middle, last in
 * every lane, and all. */
static void check_argmax(void)
{
    enum { V = 49152 };
    static float x[V];
    uint64_t r = 7;
    for (int n = 1; n <= V; n = n < 100 ? n + 1 : (n == 100 ? V : V + 1)) {
        for (int kind = 0; kind < 7; kind++) {
            for (int i = 0; i < n; i++) {
                r = r * 6364136223846793005u + 1442695040888963407u;
                x[i] = (float)(int32_t)(r >> 33) / 1e8f - (kind == 3 ? 100.0f : 0.0f);
            }
            int a = (int)(r % (uint64_t)n), b = (int)((r >> 20) % (uint64_t)n);
            if (kind == 1 || kind == 2) /* a tie of the largest value */
                x[a] = x[b] = 1e9f;
            if (kind == 3) /* every element negative but two zeros of either sign */
                x[a] = -0.0f, x[b] = 0.0f;
            if (kind == 2) /* and a NaN before both */
                x[a < b ? a / 2 : b / 2] = NAN;
            if (kind == 4)
                x[0] = NAN;
            if (kind == 5)
                for (int i = 0; i < n; i++)
                    x[i] = NAN;
            if (kind == 6 && n > 32) { /* the largest early, every lane's last elements NaN */
                x[a % (n - 32)] = 1e9f;
                for (int i = n - 32; i < n; i++)
                    x[i] = NAN;
            }
            cr_assert_eq(mn_vec_argmax(x, n), argmax_ref(x, n), "n=%d kind=%d", n, kind);
        }
    }
    cr_assert_eq(mn_vec_argmax(x, 0), 0);
}
Test(kernels, argmax_is_the_first_largest_element) { on_every_set(check_argmax); }

/* The draw weights of every set against model/draw.h's scalar mn_draw_weight, bit for bit and their
 * sum: rows of every length to 40 and a vocabulary's, logits spread over the whole range of
 * exponents (down past 2^-40 of the first), at several temperatures, with NaN, -inf and +inf among
 * them, and exponents at the half-way points of the rounding (t = k + 1/2 exactly). */
static void check_draw_weights(void)
{
    enum { V = 49152 };
    static float x[V];
    static uint64_t w[V];
    uint64_t r = 3;
    const float temps[] = {0.05f, 0.7f, 1.0f, 2.5f};
    for (int n = 1; n <= V; n = n < 40 ? n + 1 : (n == 40 ? V : V + 1))
        for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++) {
            float mx = 4.0f, scale = mn_draw_scale(temps[ti]);
            for (int i = 0; i < n; i++) {
                r = r * 6364136223846793005u + 1442695040888963407u;
                x[i] = mx - (float)(r >> 40) / (float)(1u << 24) * 40.0f * temps[ti];
            }
            x[r % (uint64_t)n] = mx;
            if (n > 10)
                x[1] = NAN, x[3] = -INFINITY, x[5] = INFINITY, x[7] = mx - 0.5f / scale, x[9] = mx - 20.5f / scale;
            uint64_t sum = 0;
            for (int i = 0; i < n; i++)
                sum += mn_draw_weight(x[i], mx, scale);
            cr_assert_eq(mn_draw_weights(x, n, mx, scale, w), sum, "n=%d T=%g: the sum", n, (double)temps[ti]);
            for (int i = 0; i < n; i++)
                cr_assert_eq(w[i], mn_draw_weight(x[i], mx, scale), "n=%d T=%g i=%d (x=%a)", n, (double)temps[ti], i,
                             (double)x[i]);
        }
}
Test(kernels, draw_weights_are_the_scalar_rules) { on_every_set(check_draw_weights); }

static void check_swiglu(void)
{
    float g[100], u[100], y[100], z[100];
    for (int i = 0; i < 100; i++) {
        g[i] = 12.0f * sinf((float)i * 0.7f) + (i == 3 ? 95.0f : i == 4 ? -95.0f : 0.0f); /* past exp's range */
        u[i] = cosf((float)i);
    }
    memcpy(y, g, sizeof g);
    mn_swiglu(y, u, 100);
    for (int i = 0; i < 100; i++) {
        double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        cr_assert_leq(fabs(y[i] - ref), 3e-7 * fabs(ref) + 1e-30, "i=%d: %g vs %g", i, y[i], ref);
    }
    for (int off = 1; off < 9; off++) { /* other splits (threads own row ranges): the same bits */
        memcpy(z, g, sizeof g);
        mn_swiglu(z, u, off);
        mn_swiglu(z + off, u + off, 100 - off);
        cr_assert(memcmp(y, z, sizeof y) == 0, "split at %d changes the result", off);
    }
}
Test(kernels, swiglu_matches_libm_wherever_an_element_sits) { on_every_set(check_swiglu); }

/* RMSNorm's scaling, the residual add, RoPE and attention's normalization (the CPU pass's
 * mn_scale_mul, mn_axpy by 1, mn_rope and mn_scale) against the scalar expressions they replaced,
 * at every length mod 8, signed zeros and infinities included. */
static void check_pass_helpers(void)
{
    enum { N = 41 };
    float x[N], w[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = i % 11 == 3 ? -0.0f : 7.0f * sinf((float)i * 1.3f);
        w[i] = i % 13 == 5 ? INFINITY : 1.0f + cosf((float)i);
        y[i] = i % 7 == 2 ? 0.0f : 3.0f * cosf((float)i * 0.7f);
    }
    for (int n = 0; n <= N; n++) {
        float got[N], sum[N];
        const float s = 0.8125f / 3.0f;
        mn_scale_mul(got, x, s, w, n);
        memcpy(sum, y, sizeof y);
        mn_axpy(sum, 1.0f, x, n);
        for (int i = 0; i < n; i++) {
            float want = x[i] * s * w[i], add = y[i] + x[i];
            cr_assert(memcmp(&got[i], &want, sizeof want) == 0, "n=%d i=%d: %a * %a * %a gave %a", n, i, x[i], s,
                      w[i], got[i]);
            cr_assert(memcmp(&sum[i], &add, sizeof add) == 0, "n=%d i=%d: %a + %a gave %a", n, i, y[i], x[i], sum[i]);
        }
        for (int i = n; i < N; i++)
            cr_assert(sum[i] == y[i], "axpy wrote past n");
        float scaled[N];
        memcpy(scaled, x, sizeof x);
        mn_scale(scaled, s, n);
        for (int i = 0; i < N; i++) {
            float want = i < n ? x[i] * s : x[i];
            cr_assert(memcmp(&scaled[i], &want, sizeof want) == 0, "scale n=%d i=%d", n, i);
        }
        float rot[N];
        memcpy(rot, y, sizeof y);
        mn_rope(rot, x, n / 2);
        for (int i = 0; i < N; i++) {
            float want = y[i]; /* past the pairs: untouched */
            if (i < n / 2 * 2) {
                float a = y[i & ~1], b = y[i | 1], c = x[i & ~1], sn = x[i | 1];
                want = i % 2 ? a * sn + b * c : a * c - b * sn;
            }
            cr_assert(memcmp(&rot[i], &want, sizeof want) == 0, "rope n=%d i=%d: %a, want %a", n, i, rot[i], want);
        }
    }
}
Test(kernels, the_pass_vector_helpers_are_the_scalar_operations) { on_every_set(check_pass_helpers); }

/* The small kernels of each set against the generic set's bits, on values that reach every branch
 * of the exp (far below its range, past it, exact zeros) and every length mod 8. */
Test(kernels, every_set_gives_the_generic_bits)
{
    enum { N = 77, KEYS = 11 };
    float a[N], b[KEYS][N], g[N], u[N];
    uint16_t bh[KEYS][N];
    const void *ptr[KEYS], *ptr_h[KEYS];
    for (int i = 0; i < N; i++) {
        a[i] = 30.0f * sinf((float)i * 1.7f) + (i % 13 == 0 ? -300.0f : i % 17 == 0 ? 300.0f : 0.0f);
        g[i] = i % 19 == 0 ? 0.0f : 40.0f * cosf((float)i * 0.9f);
        u[i] = sinf((float)i);
        for (int k = 0; k < KEYS; k++)
            b[k][i] = cosf((float)(i * 5 + k));
    }
    for (int k = 0; k < KEYS; k++) {
        ptr[k] = b[k];
        ptr_h[k] = bh[k];
        for (int i = 0; i < N; i++)
            bh[k][i] = mn_f32_to_f16(b[k][i] * 3.0f);
    }
    for (int n = 1; n <= N; n++) {
        float ref[10][N], got[10][N], ref_sum = 0.0f;
        for (size_t ks = 0; ks < n_sets(); ks++) {
            if (!use_set(ks))
                continue;
            float(*o)[N] = ks == 0 ? ref : got;
            memcpy(o[0], a, sizeof a);
            float sum = mn_softmax(o[0], n, 0.3f);
            memcpy(o[1], g, sizeof g);
            mn_swiglu(o[1], u, n);
            mn_dots(a, 0, 1, ptr, MN_F32, KEYS, n, o[2], 0);
            o[2][KEYS] = mn_dot(a, b[0], n);
            mn_weighted_sum(o[3], N, u, 1, 1, ptr, MN_F32, KEYS, n);
            memcpy(o[4], u, sizeof u);
            mn_axpy(o[4], 0.37f, a, n);
            mn_dots(a, 0, 1, ptr_h, MN_F16, KEYS, n, o[5], 0);
            mn_weighted_sum(o[6], N, u, 1, 1, ptr_h, MN_F16, KEYS, n);
            mn_scale_mul(o[7], a, 0.37f, g, n);
            memcpy(o[8], u, sizeof u);
            mn_rope(o[8], a, n / 2);
            memcpy(o[9], a, sizeof a);
            mn_scale(o[9], 0.37f, n);
            if (ks == 0) {
                ref_sum = sum;
                continue;
            }
            cr_assert(memcmp(&sum, &ref_sum, sizeof sum) == 0, "%s n=%d: softmax sum %a vs %a", kernel_sets[ks], n,
                      sum, ref_sum);
            static const char *const what[] = {"softmax", "swiglu", "dots", "weighted_sum", "axpy", "dots f16",
                                               "weighted_sum f16", "scale_mul", "rope", "scale"};
            for (int f = 0; f < 10; f++) {
                int len = f == 2 ? KEYS + 1 : f == 5 ? KEYS : n;
                cr_assert(memcmp(got[f], ref[f], (size_t)len * sizeof(float)) == 0, "%s n=%d: %s differs",
                          kernel_sets[ks], n, what[f]);
            }
        }
    }
}

/* The 16-bit quantization of each set against the generic set's bytes: whole and partial groups,
 * a block of zeros, one of values too small to scale (quantized to 0), rounding ties, the clamp,
 * a NaN and an inf (a pass that went wrong still gives the same bits on every set). */
Test(kernels, every_set_quantizes_as_generic)
{
    enum { MAXB = 18 };
    float x[MAXB * 32];
    for (int i = 0; i < MAXB * 32; i++)
        x[i] = 3.0f * sinf((float)i * 0.61f) * (float)(1 + i % 7);
    for (int i = 32; i < 64; i++)
        x[i] = 0.0f;
    for (int i = 64; i < 96; i++)
        x[i] = (float)(i - 80) * 1e-39f; /* subnormal: the block's scale underflows */
    for (int i = 96; i < 128; i++)
        x[i] = (float)(i - 112) * 0.5f * 32767.0f / 15.5f; /* x * id near half-integers */
    x[133] = NAN;      /* a NaN is passed over by the block's scale and clamped, on every set */
    x[170] = INFINITY; /* an inf: the scale is inf, every value's product NaN */
    for (int nb = 1; nb <= MAXB; nb++) {
        mn_q8 ref[3], got[3];
        size_t bytes = mn_q8_groups((size_t)nb * 32) * sizeof(mn_q8);
        for (size_t ks = 0; ks < n_sets(); ks++) {
            if (!use_set(ks))
                continue;
            mn_q8 *o = ks == 0 ? ref : got;
            memset(o, 0xa5, sizeof ref);
            mn_quantize_q8(x, (size_t)nb * 32, o);
            if (ks > 0)
                cr_assert(memcmp(got, ref, bytes) == 0, "%s: %d blocks quantize differently", kernel_sets[ks], nb);
        }
    }
}

/* mn_matmul_q8 on orig (repacked here) against its scalar twin, bit for bit, for T = 1..13 and
 * every tile shape, and against the float product within the activations' rounding. */
static void check_q8_weight(const mn_weight *orig, const char *what)
{
    mn_weight packed;
    uint8_t *bytes = malloc((size_t)orig->rows * orig->row_bytes);
    mn_q8_pack(orig, bytes, &packed);
    const mn_weight *w = &packed;
    size_t ld = mn_q8_groups(w->cols);
    for (int T = 1; T <= 13; T++) { /* every tile shape and remainder: 1, 2, 3, 5, 4+3, 4+2+1, ... */
        float *x = malloc((size_t)T * w->cols * sizeof(float));
        mn_q8 *xq = malloc((size_t)T * ld * sizeof(mn_q8));
        float *y = calloc((size_t)T * w->rows, sizeof(float)), *r = calloc((size_t)T * w->rows, sizeof(float));
        for (size_t i = 0; i < (size_t)T * w->cols; i++)
            x[i] = sinf((float)i * 0.37f) * 2.0f;
        for (int t = 0; t < T; t++)
            mn_quantize_q8(x + (size_t)t * w->cols, w->cols, xq + (size_t)t * ld);
        /* output ranges of every length mod 4 (decode's quarters) and mod 2 */
        for (uint32_t ob = 4; ob >= 1; ob--) {
            memset(r, 0, (size_t)T * w->rows * sizeof(float));
            mn_matmul_q8_ref(w, xq, ld, r, w->rows, T, ob, w->rows - 2);
            for (size_t ks = 0; ks < n_sets(); ks++) {
                if (!use_set(ks))
                    continue;
                memset(y, 0, (size_t)T * w->rows * sizeof(float));
                mn_matmul_q8(w, xq, ld, y, w->rows, T, ob, w->rows - 2);
                cr_assert(memcmp(y, r, (size_t)T * w->rows * sizeof(float)) == 0, "%s: %s T=%d outputs [%u, %u) differ",
                          kernel_sets[ks], what, T, ob, w->rows - 2);
            }
        }
        /* and it differs from the float product by no more than the activations' rounding allows:
         * each x is off by at most d_b / 2, so |y - y_float| <= sum_b d_b / 2 * sum_{k in b} |w_k| */
        mn_matmul_ref(orig, x, w->cols, r, w->rows, T, 1, w->rows - 2);
        float *wrow = malloc(w->cols * sizeof(float));
        for (uint32_t o = 1; o < w->rows - 2; o++) {
            mn_dequant_row(orig->type, orig->data + (size_t)o * orig->row_bytes, wrow, w->cols);
            for (int t = 0; t < T; t++) {
                double bound = 0, mass = 0;
                for (size_t bk = 0; bk < w->cols / 32; bk++)
                    for (int k = 0; k < 32; k++) {
                        bound += xq[(size_t)t * ld + bk / 8].d[bk % 8] / 2 * fabs(wrow[bk * 32 + k]);
                        mass += fabs(wrow[bk * 32 + k] * x[(size_t)t * w->cols + bk * 32 + k]);
                    }
                float diff = fabsf(y[(size_t)t * w->rows + o] - r[(size_t)t * w->rows + o]);
                cr_assert(diff <= bound + 1e-5 * mass, "%s o=%u t=%d: |%g| exceeds the rounding bound %g", what, o, t,
                          diff, bound);
            }
        }
        free(wrow);
        free(x);
        free(xq);
        free(y);
        free(r);
    }
    free(bytes);
}

static void check_matmul_q8(const char *gguf)
{
    mn_model *m = load_model(gguf);
    const mn_weight *ws[] = {&m->layers[0].wq, &m->layers[0].w_down, &m->output};
    for (size_t wi = 0; wi < 3; wi++) {
        char what[64];
        snprintf(what, sizeof what, "%s weight %zu", gguf, wi);
        check_q8_weight(ws[wi], what);
    }
    mn_model_free(m);
}

Test(kernels, matmul_int_activations_q8_0) { check_matmul_q8("q8_0.gguf"); }
Test(kernels, matmul_int_activations_q4_0) { check_matmul_q8("q4_0.gguf"); }
Test(kernels, matmul_int_activations_q4_1) { check_matmul_q8("q4_1.gguf"); }

/* The fixtures' rows are 2 and 4 blocks, a part of one group of 8: rows of random blocks with
 * whole groups (8, 16 blocks), whole groups and a part (9, 18 = SmolLM2's 576 columns) too. */
Test(kernels, matmul_int_activations_whole_and_partial_groups)
{
    static const uint32_t types[] = {MN_Q8_0, MN_Q4_0, MN_Q4_1};
    static const uint32_t blocks[] = {8, 9, 16, 18};
    uint64_t seed = 88172645463325252ull;
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t bi = 0; bi < 4; bi++) {
            const mn_dtype_info *info = mn_dtype_get(types[ti]);
            mn_weight w = {.type = types[ti], .rows = 11, .cols = blocks[bi] * 32};
            w.row_bytes = mn_dtype_row_bytes(info, w.cols);
            uint8_t *data = malloc(w.rows * w.row_bytes);
            for (size_t i = 0; i < w.rows * w.row_bytes; i++) {
                seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                data[i] = (uint8_t)seed;
            }
            size_t bb = w.row_bytes / blocks[bi];
            for (size_t b = 0; b < w.rows * blocks[bi]; b++) { /* finite scales: d in [1/64, 1/32), m < 0 */
                uint16_t d = (uint16_t)(0x2000 | (data[b * bb] & 0x3ff)), m = (uint16_t)(0xa000 | (data[b * bb + 2] & 0x3ff));
                memcpy(data + b * bb, &d, 2);
                if (types[ti] == MN_Q4_1)
                    memcpy(data + b * bb + 2, &m, 2);
            }
            w.data = data;
            char what[64];
            snprintf(what, sizeof what, "%s, %u blocks a row", info->name, blocks[bi]);
            check_q8_weight(&w, what);
            free(data);
        }
}

Test(kernels, half_float_conversions)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mn_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        cr_assert_eq(mn_f32_to_f16(f), h, "f16 0x%04x does not round-trip", h);
    }
    cr_assert_eq(mn_f32_to_f16(1.0f), 0x3c00);
    cr_assert_eq(mn_f32_to_f16(65520.0f), 0x7c00, "overflow rounds to infinity");
    cr_assert_eq(mn_f32_to_f16(1.0f + 1.0f / 4096), 0x3c00, "ties go to even");
}

/* mn_to_f16 of the set in use against the scalar conversion: floats around every rounding case
 * (ties to even, subnormal halves, overflow to infinity), at every offset of the vector body and
 * its tail. NaNs are left out: a CPU's conversion may keep more of a NaN's payload than the scalar
 * one. (The way back, F16C's vcvtph2ps in the attention kernels' loads, is exact; those kernels are
 * checked on half rows against the float ones.) */
static void check_f16_rows(void)
{
    enum { N = 4096 + 13 };
    static float x[N];
    static uint16_t h[N];
    uint64_t seed = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        uint32_t bits = (uint32_t)seed & 0x807fffffu; /* a sign and a mantissa */
        int e = (int)(seed >> 40) % 44 - 27 + 127;    /* 2^-27 (past subnormal halves) .. 2^16 (overflow) */
        bits |= (uint32_t)e << 23;
        if (i % 5 == 0)
            bits = (bits & ~0x1fffu) | 0x1000u; /* an exact tie */
        memcpy(&x[i], &bits, 4);
    }
    for (int off = 0; off < 9; off++) {
        int n = N - off;
        mn_to_f16(x + off, h, n);
        for (int i = 0; i < n; i++)
            cr_assert_eq(h[i], mn_f32_to_f16(x[off + i]), "%s: %a at %d of %d", mn_cpu_kernels_name(), x[off + i], i, n);
    }
}

Test(kernels, half_float_rows_round_as_the_scalar_conversion) { on_every_set(check_f16_rows); }

Test(kernels, q4_1_block_layout)
{
    /* one block: d = 0.5, m = -1, element j = j % 16 in the low nibbles, 15 - j%16 in the high */
    unsigned char blk[20];
    uint16_t d = mn_f32_to_f16(0.5f), mn = mn_f32_to_f16(-1.0f);
    memcpy(blk, &d, 2);
    memcpy(blk + 2, &mn, 2);
    for (int j = 0; j < 16; j++)
        blk[4 + j] = (unsigned char)(j | ((15 - j) << 4));
    float out[32];
    mn_dequant_row(MN_Q4_1, blk, out, 32);
    for (int j = 0; j < 16; j++) {
        cr_assert_float_eq(out[j], 0.5f * j - 1.0f, 0);
        cr_assert_float_eq(out[j + 16], 0.5f * (15 - j) - 1.0f, 0);
    }
}

Test(kv, accounting_returns_to_zero)
{
    mn_kv_pool *p;
    mn_err err = {{0}};
    cr_assert_eq(mn_kv_pool_new(2, 8, 16, 10, MN_KV_F32, &p, &err), MN_OK);
    mn_kv_seq a = {0}, b = {0};
    cr_assert_eq(mn_kv_reserve(p, &a, 33), MN_OK);
    cr_assert_eq(a.n_blocks, 3);
    cr_assert_eq(mn_kv_used(p), 3);
    a.len = 33;
    cr_assert_eq(mn_kv_reserve(p, &b, 16 * 7), MN_OK);
    cr_assert_eq(mn_kv_used(p), 10);
    cr_assert_eq(mn_kv_reserve(p, &a, 49), MN_BUSY, "the pool is full");
    cr_assert_eq(a.n_blocks, 3, "a refused reserve takes nothing");
    mn_kv_truncate(p, &a, 16);
    cr_assert_eq(a.len, 16);
    cr_assert_eq(a.n_blocks, 1);
    cr_assert_eq(mn_kv_used(p), 8);
    mn_kv_truncate(p, &a, 0);
    cr_assert_eq(a.n_blocks, 0);
    /* K rows of different positions never alias */
    cr_assert_eq(mn_kv_reserve(p, &a, 20), MN_OK);
    cr_assert_neq(mn_kv_k(p, &a, 1, 15), mn_kv_k(p, &a, 1, 16));
    cr_assert_eq((float *)mn_kv_k(p, &a, 1, 16) + 8, mn_kv_k(p, &a, 1, 17));
    mn_kv_seq_release(p, &a);
    mn_kv_seq_release(p, &b);
    cr_assert_eq(mn_kv_used(p), 0);
    cr_assert_null(a.blocks);
    mn_kv_pool_free(p);
}

/* Every layer's K and V share one mapping: each array whole, apart from the others, on a cache line
 * of its own (ASan's builds allocate exactly the mapping's bytes, so a row past it fails there). */
/* Every block's rows of every layer's K and V: on a cache line, inside the mapping, apart from every
 * other's, and where mn_kv_k / mn_kv_v put a sequence's positions. */
Test(kv, every_blocks_layers_k_and_v_are_whole_and_apart)
{
    const uint32_t layers = 3, kv_dim = 12, block = 4, blocks = 5; /* 96 bytes of half-float rows */
    for (int type = MN_KV_F32; type <= MN_KV_F16; type++) {
        mn_kv_pool *p;
        mn_err err = {{0}};
        cr_assert_eq(mn_kv_pool_new(layers, kv_dim, block, blocks, (mn_kv_type)type, &p, &err), MN_OK);
        const size_t bytes = block * p->row_bytes;
        unsigned char *lo = p->store, *hi = lo + p->store_bytes;
        for (uint32_t b = 0; b < blocks; b++)
            for (uint32_t l = 0; l < layers; l++) {
                unsigned char *k = (unsigned char *)p->k[l] + b * p->block_stride;
                unsigned char *v = (unsigned char *)p->v[l] + b * p->block_stride;
                cr_assert_eq((uintptr_t)k % 64, 0);
                cr_assert_eq((uintptr_t)v % 64, 0);
                cr_assert(k >= lo && k + bytes <= hi && v >= lo && v + bytes <= hi, "block %u layer %u", b, l);
                memset(k, (int)(1 + (b * layers + l) * 2), bytes);
                memset(v, (int)(2 + (b * layers + l) * 2), bytes);
            }
        for (uint32_t b = 0; b < blocks; b++)
            for (uint32_t l = 0; l < layers; l++)
                for (size_t i = 0; i < bytes; i++) {
                    unsigned char k = ((unsigned char *)p->k[l] + b * p->block_stride)[i];
                    unsigned char v = ((unsigned char *)p->v[l] + b * p->block_stride)[i];
                    cr_assert_eq(k, 1 + (b * layers + l) * 2, "block %u layer %u's K byte %zu", b, l, i);
                    cr_assert_eq(v, 2 + (b * layers + l) * 2, "block %u layer %u's V byte %zu", b, l, i);
                }
        mn_kv_seq s = {0};
        cr_assert_eq(mn_kv_reserve(p, &s, 2 * block), MN_OK);
        for (uint32_t pos = 0; pos < 2 * block; pos++)
            for (uint32_t l = 0; l < layers; l++) {
                size_t at = s.blocks[pos / block] * p->block_stride + (pos % block) * p->row_bytes;
                cr_assert_eq(mn_kv_k(p, &s, l, pos), (char *)p->k[l] + at);
                cr_assert_eq(mn_kv_v(p, &s, l, pos), (char *)p->v[l] + at);
            }
        mn_kv_seq_release(p, &s);
        mn_kv_pool_free(p);
    }
}

/* A block holds every layer's rows, so a sequence's first block commits a page or two of a fresh
 * pool, not a page per layer and K/V (with 2 MiB pages, as the pool asks for: 60 of them, 120 MB,
 * for SmolLM2's shape below when each array lay apart). Where pages are 4 KiB both layouts commit
 * about the block's own bytes, and this holds either way. */
Test(kv, a_sequences_first_block_commits_a_page_or_two)
{
#ifndef MN_HAVE_JEMALLOC
    cr_skip_test("sanitizer builds: their pools come zeroed, every page committed (util/alloc.c)");
#endif
    const uint32_t layers = 30, kv_dim = 192, block = 16, blocks = 2048; /* SmolLM2-135M's K/V */
    mn_kv_pool *p;
    mn_err err = {{0}};
    cr_assert_eq(mn_kv_pool_new(layers, kv_dim, block, blocks, MN_KV_F32, &p, &err), MN_OK);
    mn_kv_seq s = {0};
    cr_assert_eq(mn_kv_reserve(p, &s, block), MN_OK);
    for (uint32_t pos = 0; pos < block; pos++)
        for (uint32_t l = 0; l < layers; l++) {
            memset(mn_kv_k(p, &s, l, pos), 1, p->row_bytes);
            memset(mn_kv_v(p, &s, l, pos), 2, p->row_bytes);
        }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), n_pages = (p->store_bytes + page - 1) / page;
    unsigned char *in = malloc(n_pages);
    cr_assert(in && mincore(p->store, p->store_bytes, in) == 0);
    size_t resident = 0;
    for (size_t i = 0; i < n_pages; i++)
        resident += (in[i] & 1) * page;
    free(in);
    cr_assert_leq(resident, 2 * ((size_t)2 << 20), "one block (%zu bytes) committed %zu bytes", p->block_stride,
                  resident);
    mn_kv_seq_release(p, &s);
    mn_kv_pool_free(p);
}

Test(kv, a_pool_of_tables_only_has_no_storage_and_the_same_accounting)
{
    mn_kv_pool *p;
    mn_err err = {{0}};
    cr_assert_eq(mn_kv_pool_new_tables(2, 8, 16, 4, MN_KV_F16, &p, &err), MN_OK);
    cr_assert_eq(p->type, MN_KV_F16);
    cr_assert_eq(p->row_bytes, 16, "8 halves a row");
    cr_assert_null(p->k);
    cr_assert_null(p->v);
    mn_kv_seq a = {0};
    cr_assert_eq(mn_kv_reserve(p, &a, 40), MN_OK);
    cr_assert_eq(mn_kv_used(p), 3);
    cr_assert_eq(mn_kv_reserve(p, &a, 80), MN_BUSY);
    mn_kv_truncate(p, &a, 0);
    cr_assert_eq(mn_kv_used(p), 0);
    mn_kv_seq_release(p, &a);
    mn_kv_pool_free(p);
}

Test(sampler, greedy_takes_first_max_and_sampling_is_seeded)
{
    float logits[6] = {0.5f, 3.0f, 1.0f, 3.0f, -2.0f, 0.0f};
    cr_assert_eq(mn_argmax(logits, 6), 1);
    mn_sampler_params p = {.temperature = 1.0f, .top_p = 1.0f, .seed = 42};
    mn_sampler *a, *b;
    cr_assert_eq(mn_sampler_new(6, &p, &a), MN_OK);
    cr_assert_eq(mn_sampler_new(6, &p, &b), MN_OK);
    int counts[6] = {0};
    for (int i = 0; i < 20000; i++) {
        int32_t x = mn_sampler_next(a, logits);
        cr_assert_eq(x, mn_sampler_next(b, logits), "same seed, same draws");
        counts[x]++;
    }
    /* p(1) = p(3) = e^3 / Z ~ 0.45: both near 9000 */
    cr_assert(counts[1] > 8000 && counts[1] < 10000 && counts[3] > 8000 && counts[3] < 10000, "%d %d", counts[1],
              counts[3]);
    mn_sampler_free(a);
    mn_sampler_free(b);
    /* top_p = 0.4 keeps only the first of the two tied best (p ~ 0.45 each; ties broken by id) */
    p.top_p = 0.4f;
    cr_assert_eq(mn_sampler_new(6, &p, &a), MN_OK);
    for (int i = 0; i < 2000; i++) {
        int32_t x = mn_sampler_next(a, logits);
        cr_assert(x == 1, "top-p 0.4 keeps only the first of the tied best (%d)", x);
    }
    mn_sampler_free(a);
}

/* The nucleus's distribution the plain way (testutil.h's nucleus_by_sorting): each token's weight
 * over the nucleus's, the tokens heavier than theta and the first `ties` (by id) weighing theta. */
static void ref_nucleus(const float *l, uint32_t n, float T, float top_p, float *out)
{
    uint64_t *w = malloc(n * sizeof *w), seen = 0;
    mn_draw_nucleus nu = nucleus_by_sorting(l, n, T, top_p, w);
    float mx = l[mn_argmax(l, n)];
    for (uint32_t i = 0; i < n; i++) {
        uint64_t wi = mn_draw_weight(l[i], mx, mn_draw_scale(T));
        bool held = wi > nu.theta || (wi == nu.theta && wi && seen++ < nu.ties);
        out[i] = held ? (float)((double)wi / (double)nu.mass) : 0.0f;
    }
    free(w);
}

/* The sampler finds the nucleus by radix steps over the weights instead of sorting the whole
 * vocabulary: the same distribution, bit for bit, over a vocabulary of 49,152 with many tied
 * logits, peaked, flat, all equal and smooth (near-Gaussian, no ties: the radix steps go down to
 * the last bits), nuclei small and whole. */
Test(sampler, nucleus_is_the_full_sorts_bit_for_bit)
{
    enum { V = 49152 };
    float *l = malloc(V * sizeof *l), *got = malloc(V * sizeof *got), *want = malloc(V * sizeof *want);
    uint64_t r = 11;
    const float tops[] = {0.3f, 0.9f, 0.99f, 0.99999f};
    for (int shape = 0; shape < 4; shape++) {
        for (uint32_t i = 0; i < V; i++) {
            float u[4];
            for (int k = 0; k < 4; k++) {
                r = r * 6364136223846793005u + 1442695040888963407u;
                u[k] = (float)(r >> 40) / (float)(1u << 24);
            }
            l[i] = shape == 3   ? 3.0f * (u[0] + u[1] + u[2] + u[3] - 2.0f) /* smooth */
                   : shape == 2 ? 1.5f /* one tie: the nucleus is the lowest ids */
                   : shape      ? roundf(u[0] * 64.0f) / 16.0f
                                : roundf(u[0] * u[0] * u[0] * u[0] * 400.0f) / 8.0f; /* ties aplenty */
        }
        for (size_t t = 0; t < sizeof tops / sizeof *tops; t++) {
            mn_sampler_params p = {.temperature = 0.7f, .top_p = tops[t], .seed = 3};
            mn_sampler *s;
            cr_assert_eq(mn_sampler_new(V, &p, &s), MN_OK);
            mn_sampler_probs(s, l, got);
            ref_nucleus(l, V, 0.7f, tops[t], want);
            cr_assert(memcmp(got, want, V * sizeof *got) == 0, "shape %d top_p %g: another nucleus", shape, tops[t]);
            mn_sampler_free(s);
        }
    }
    free(l);
    free(got);
    free(want);
}

/* A token's weight (model/draw.h): the largest logit weighs 2^40 exactly, the others 2^40 times
 * 2^((l - max) / T log2 e) within 2e-6 down to 2^-20 of it (the float rounding of the exponent,
 * |t| <= 41; integer truncation below), never more for a lower logit, and nothing for NaN, -inf
 * and what is 2^-40 below the first. */
Test(sampler, weights_are_softmax_in_integers)
{
    const uint64_t one = (uint64_t)1 << MN_DRAW_ONE_BITS;
    float s = mn_draw_scale(0.7f), s1 = mn_draw_scale(1.0f);
    cr_assert_eq(mn_draw_weight(3.5f, 3.5f, s), one);
    cr_assert_eq(mn_draw_weight(NAN, 3.5f, s), 0);
    cr_assert_eq(mn_draw_weight(-INFINITY, 3.5f, s), 0);
    cr_assert_eq(mn_draw_weight(3.5f - 40.0f, 3.5f, s1), 0, "e^-40 is below 2^-40");
    uint64_t last = one;
    for (float d = 0.0f; d < 28.0f; d += 0.001f) { /* e^-28 ~ 2^-40.4 */
        float x = 1.0f - d;
        uint64_t w = mn_draw_weight(x, 1.0f, s1);
        double want = ldexp(exp2(((double)x - 1.0) * 1.4426950408889634), MN_DRAW_ONE_BITS);
        cr_assert(w <= last, "d=%g: %llu after %llu", (double)d, (unsigned long long)w, (unsigned long long)last);
        if (want >= ldexp(1.0, 20))
            cr_assert(fabs((double)w - want) <= 2e-6 * want, "d=%g: %llu, want %.1f", (double)d, (unsigned long long)w,
                      want);
        last = w;
    }
    cr_assert_eq(mn_draw_need(1.0f, 12345), 12345);
    cr_assert_eq(mn_draw_need(0.5f, 12345), 6173);
    cr_assert_eq(mn_draw_need(1e-9f, 12345), 1);
    cr_assert_eq(mn_draw_point(0.0, 10), 0);
    const uint64_t masses[] = {1, 3, ((uint64_t)1 << 55) + 1};
    for (int i = 0; i < 3; i++)
        cr_assert_lt(mn_draw_point(1.0 - 0x1.0p-53, masses[i]), masses[i]);
}

/* A draw walks the nucleus in id order: uniforms spread evenly over [0, 1) pick each token as often
 * as mn_sampler_probs says, to within one in K; and a sampler's draws are mn_draw_row's with its
 * next uniforms (mn_sampler_peek), which mn_sampler_skip then uses up. */
Test(sampler, draws_follow_the_probabilities_and_the_uniforms)
{
    enum { V = 500, K = 20000 };
    static float l[V], p[V];
    static int counts[V];
    for (uint32_t i = 0; i < V; i++)
        l[i] = 4.0f * sinf((float)i * 0.37f) + (i % 7 == 0 ? 2.0f : 0.0f);
    const float tops[] = {1.0f, 0.9f, 0.3f};
    mn_draw_space *space = mn_draw_space_new(V);
    for (size_t t = 0; t < 3; t++) {
        mn_sampler_params sp = {.temperature = 0.8f, .top_p = tops[t], .seed = 5};
        mn_sampler *a, *b;
        cr_assert_eq(mn_sampler_new(V, &sp, &a), MN_OK);
        cr_assert_eq(mn_sampler_new(V, &sp, &b), MN_OK);
        mn_sampler_probs(a, l, p);
        memset(counts, 0, sizeof counts);
        for (int k = 0; k < K; k++)
            counts[mn_draw_row(space, l, 0.8f, tops[t], (k + 0.5) / K)]++;
        for (uint32_t i = 0; i < V; i++)
            cr_assert(fabs(counts[i] - (double)p[i] * K) <= 1.0 + 1e-6 * K, "top_p %g token %u: %d of %d, p %g",
                      (double)tops[t], i, counts[i], K, (double)p[i]);
        double u[6];
        mn_sampler_peek(a, 6, u);
        for (int i = 0; i < 6; i++)
            cr_assert_eq(mn_sampler_next(b, l), mn_draw_row(space, l, 0.8f, tops[t], u[i]));
        mn_sampler_skip(a, 6);
        for (int i = 0; i < 20; i++)
            cr_assert_eq(mn_sampler_next(a, l), mn_sampler_next(b, l), "skip leaves the generator where draws would");
        mn_sampler_free(a);
        mn_sampler_free(b);
    }
    mn_draw_space_free(space);
}

/* ---- the fork-join pool: every run calls each thread index exactly once, runs never overlap ---- */
#include <stdatomic.h>

#include "runtime/pool.h"

typedef struct pool_probe {
    atomic_int calls[8];
    atomic_int inside;
    int overlap;      /* written only by thread 0, read after the run */
    long sum[8];      /* each index writes only its own slot */
} pool_probe;

static void probe_fn(void *arg, int ith, int nth)
{
    pool_probe *p = arg;
    atomic_fetch_add(&p->calls[ith], 1);
    atomic_fetch_add(&p->inside, 1);
    unsigned b, e;
    mn_pool_split(ith, nth, 1000, 8, &b, &e);
    for (unsigned i = b; i < e; i++)
        p->sum[ith] += i;
    atomic_fetch_sub(&p->inside, 1);
}

Test(pool, every_index_once_per_run)
{
    for (int n = 1; n <= 4; n++) {
        mn_pool *pool;
        cr_assert_eq(mn_pool_new(n, &pool, NULL), MN_OK);
        pool_probe p = {0};
        for (int run = 0; run < 2000; run++) {
            memset(p.sum, 0, sizeof p.sum);
            mn_pool_run(pool, probe_fn, &p);
            cr_assert_eq(atomic_load(&p.inside), 0, "a run returned while a thread was still inside");
            long total = 0;
            for (int i = 0; i < n; i++)
                total += p.sum[i];
            cr_assert_eq(total, 999L * 1000 / 2, "the split covers [0, 1000) exactly once");
        }
        for (int i = 0; i < n; i++)
            cr_assert_eq(atomic_load(&p.calls[i]), 2000);
        mn_pool_free(pool);
    }
}

Test(pool, split_is_a_partition)
{
    for (unsigned n = 0; n < 300; n += 7)
        for (int nth = 1; nth <= 5; nth++) {
            unsigned next = 0;
            for (int i = 0; i < nth; i++) {
                unsigned b, e;
                mn_pool_split(i, nth, n, 4, &b, &e);
                cr_assert_eq(b, next);
                cr_assert(e >= b && (e == n || e % 4 == 0));
                next = e;
            }
            cr_assert_eq(next, n);
        }
}

/* ---- the weights' pages (util/alloc.h) ---- */

/* 2 MiB-aligned, zero-filled, writable to the last byte, and marked for huge pages wherever the
 * kernel has them (smaps' "hg" flag: MADV_HUGEPAGE; whether the kernel found a free huge page is its
 * business, the advice is ours). */
Test(kernels, weight_pages_are_aligned_zeroed_and_advised)
{
    cr_assert_null(mn_alloc_pages(0));
    const size_t sizes[] = {1, 4096, ((size_t)2 << 20) - 1, (size_t)2 << 20, ((size_t)5 << 20) + 123};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        uint8_t *p = mn_alloc_pages(n);
        cr_assert_not_null(p, "%zu bytes", n);
        cr_assert_eq((uintptr_t)p % ((uintptr_t)2 << 20), 0, "%zu bytes at %p", n, (void *)p);
        for (size_t j = 0; j < n; j += 4093)
            cr_assert_eq(p[j], 0);
        cr_assert_eq(p[n - 1], 0);
        memset(p, 0xab, n);
        cr_assert_eq(p[n - 1], 0xab);
        char flags[512];
        cr_assert(smaps_field(p, "VmFlags:", flags, sizeof flags), "no smaps entry for %p", (void *)p);
        FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
        if (thp) {
            cr_assert(strstr(flags, " hg") != NULL, "%zu bytes: VmFlags%s", n, flags);
            fclose(thp);
        }
        mn_free_pages(p, n);
    }
}
