/* test_gpu.c - the CUDA backend's kernels, run on the host by the twin backend (gpu/twin.h), and
 * on a device by the CUDA backend where one exists (gpu_device, skipped elsewhere), against the
 * CPU backend: the same unpadded batches (sequences of different lengths and
 * positions sharing a pass, some returning every row's logits), a rollback of rejected tokens
 * across block boundaries, a 300-position context, and every weight type. Each logits row must
 * match the CPU's within 1e-3 of its largest magnitude (issue #13's bar for the device), and the
 * greedy token must be the same wherever the CPU's top-2 margin is wider than that. And a
 * sequence's logits must be the same bits alone and in any batch (batch invariance). Every pass
 * also asks for each row's token: the first sequence's and the second's are drawn (at top_p 0.9
 * and 1), the third's are its argmax, and each must be mn_draw_row's or mn_argmax's on that side's
 * own row; on a device, the rows of a sequence that wants only its picks must stay where they
 * were. The twin needs no GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_backend.h"
#include "gpu/graph_cache.h"
#include "gpu/twin.h"
#include "model/sampler.h"
#include "testutil.h"

enum { N_SEQ = 3, BLOCK = 4, BLOCKS = 96, MAX_T = 64 };

typedef struct side {
    mn_backend *be;
    mn_kv_seq kv[N_SEQ];
    float *logits;
    int32_t pick[MAX_T];
    uint32_t passes;
} side;

/* How sequence s is picked in every pass: drawn (at two settings) or its argmax (NULL). */
static const mn_draw *draw_of(uint32_t s, double *u)
{
    static mn_draw d[2];
    d[0] = (mn_draw){0.8f, 0.9f, u};
    d[1] = (mn_draw){1.3f, 1.0f, u};
    return s < 2 ? &d[s] : NULL;
}

/* The uniform of row r of pass p of sequence s: spread over [0, 1). */
static double uniform_at(uint32_t p, uint32_t s, uint32_t r) { return fmod(0.6180339887 * (p * 131 + s * 17 + r + 1), 1.0); }

/* The KV cache's elements on both sides of the comparisons (the half-float tests set MN_KV_F16). */
static mn_kv_type kv_type = MN_KV_F32;

static mn_backend_config config(const mn_model *m)
{
    mn_backend_config cfg = mn_backend_defaults(m, 0);
    cfg.kv_type = kv_type;
    cfg.max_tokens = MAX_T;
    cfg.kv_block_size = BLOCK;
    cfg.kv_blocks = BLOCKS;
    return cfg;
}

static mn_backend *twin_backend(const mn_model *m)
{
    mn_backend_config cfg = config(m);
    mn_backend *b = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_gpu_twin_new(m, &cfg, &b, &err), MN_OK, "twin: %s", err.msg);
    return b;
}

/* The CUDA backend itself where a device runs it; NULL (the test is skipped) where none exists. */
static mn_backend *device_backend(const mn_model *m)
{
    mn_backend_config cfg = config(m);
    cfg.kind = MN_BACKEND_CUDA;
    mn_backend *b = NULL;
    mn_err err = {{0}};
    mn_status s = mn_backend_new(m, &cfg, &b, &err);
    if (s != MN_OK) {
        cr_assert_eq(s, MN_NOTFOUND, "a device exists but the CUDA backend failed: %s", err.msg);
        cr_assert(strstr(err.msg, "no CUDA device") || strstr(err.msg, "built without CUDA"), "%s", err.msg);
        cr_assert_null(b);
        return NULL;
    }
    return b;
}

/* One pass on one side: sequence s brings n[s] tokens (0: not in this pass). */
static uint32_t pass(side *sd, const int32_t *const *toks, const uint32_t *n, const bool *all)
{
    mn_batch_seq seqs[N_SEQ];
    double u[N_SEQ][MAX_T];
    uint32_t k = 0, V = sd->be->model->hp.n_vocab;
    mn_err err = {{0}};
    for (uint32_t s = 0; s < N_SEQ; s++) {
        if (!n[s])
            continue;
        cr_assert_eq(mn_kv_reserve(sd->be->kv, &sd->kv[s], sd->kv[s].len + n[s]), MN_OK);
        for (uint32_t r = 0; r < n[s]; r++)
            u[s][r] = uniform_at(sd->passes, s, r);
        seqs[k++] = (mn_batch_seq){.kv = &sd->kv[s], .tokens = toks[s], .n_tokens = n[s], .want_all_logits = all[s],
                                   .draw = draw_of(s, u[s])};
    }
    sd->passes++;
    mn_batch batch = {seqs, k, sd->pick};
    cr_assert_eq(mn_backend_forward(sd->be, &batch, sd->logits, &err), MN_OK, "%s: %s", sd->be->ops->name, err.msg);
    uint32_t rows = 0;
    mn_draw_space *space = mn_draw_space_new(V);
    for (uint32_t i = 0; i < k; i++)
        for (uint32_t j = 0; j < mn_batch_seq_rows(&seqs[i]); j++, rows++) {
            const float *row = sd->logits + (size_t)rows * V;
            const mn_draw *d = seqs[i].draw;
            int32_t want = d ? mn_draw_row(space, row, d->temperature, d->top_p, d->u[j]) : mn_argmax(row, V);
            cr_assert_eq(sd->pick[rows], want, "%s: row %u's %s", sd->be->ops->name, rows, d ? "draw" : "argmax");
        }
    mn_draw_space_free(space);
    cr_assert_eq(rows, mn_batch_n_logits(&batch));
    return rows;
}

static uint32_t argmax(const float *r, uint32_t V, float *margin)
{
    uint32_t best = 0, second = 1;
    if (r[1] > r[0])
        best = 1, second = 0;
    for (uint32_t i = 2; i < V; i++) {
        if (r[i] > r[best])
            second = best, best = i;
        else if (r[i] > r[second])
            second = i;
    }
    *margin = r[best] - r[second];
    return best;
}

/* The same pass on both sides, rows compared. */
static void both(side *cpu, side *tw, const int32_t *const *toks, const uint32_t *n, const bool *all, uint32_t V,
                 const char *what)
{
    uint32_t rows = pass(cpu, toks, n, all);
    cr_assert_eq(pass(tw, toks, n, all), rows);
    for (uint32_t r = 0; r < rows; r++) {
        const float *a = cpu->logits + (size_t)r * V, *b = tw->logits + (size_t)r * V;
        float big = 0.0f, worst = 0.0f;
        for (uint32_t i = 0; i < V; i++) {
            big = fmaxf(big, fabsf(a[i]));
            worst = fmaxf(worst, fabsf(a[i] - b[i]));
        }
        cr_assert(worst <= 1e-3f * big, "%s: row %u differs by %g (largest logit %g)", what, r, worst, big);
        float margin, unused;
        uint32_t ta = argmax(a, V, &margin), tb = argmax(b, V, &unused);
        cr_assert(ta == tb || margin <= 1e-3f * big, "%s: row %u greedy %u on the CPU, %u on the twin", what, r,
                  ta, tb);
    }
}

/* n_seq rows of len pseudo-random token ids (row s, token i: (c + cs s + ci i + i^2) mod V), flat. */
static void pseudo_tokens(int32_t *buf, uint32_t n_seq, uint32_t len, uint32_t V, uint32_t c, uint32_t cs,
                          uint32_t ci)
{
    for (uint32_t s = 0; s < n_seq; s++)
        for (uint32_t i = 0; i < len; i++)
            buf[(size_t)s * len + i] = (int32_t)((c + cs * s + ci * i + i * i) % V);
}

static mn_backend *cpu_side(const mn_model *m) { return cpu_backend_kv(m, 2, MAX_T, BLOCKS, kv_type); }

/* The model at path on two backends, a's and b's (the test is skipped where b has none; a is the
 * CPU or the same kind as b). */
static mn_model *open_sides(const char *path, mn_backend *(*a)(const mn_model *),
                            mn_backend *(*b)(const mn_model *), side *sa, side *sb)
{
    mn_model *m = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(path, &m, &err), MN_OK, "loading %s: %s", path, err.msg);
    *sb = (side){.be = b(m)};
    if (!sb->be) {
        mn_model_free(m);
        cr_skip_test("no CUDA device here: the twin tests stand in for it");
    }
    *sa = (side){.be = a(m)};
    cr_assert(sa->be->kv->type == kv_type && sb->be->kv->type == kv_type, "both sides keep a %s KV cache",
              mn_kv_type_name(kv_type));
    sa->logits = malloc((size_t)MAX_T * m->hp.n_vocab * sizeof(float));
    sb->logits = malloc((size_t)MAX_T * m->hp.n_vocab * sizeof(float));
    return m;
}

/* Every sequence released (the second side's pool must then be empty), all freed. */
static void close_sides(mn_model *m, side *sa, side *sb)
{
    for (uint32_t s = 0; s < N_SEQ; s++) {
        mn_kv_seq_release(sa->be->kv, &sa->kv[s]);
        mn_kv_seq_release(sb->be->kv, &sb->kv[s]);
    }
    cr_assert_eq(mn_kv_used(sb->be->kv), 0);
    free(sa->logits);
    free(sb->logits);
    mn_backend_free(sa->be);
    mn_backend_free(sb->be);
    mn_model_free(m);
}

static void check_model(const char *path, mn_backend *(*other)(const mn_model *))
{
    side cpu, tw;
    mn_model *m = open_sides(path, cpu_side, other, &cpu, &tw);
    uint32_t V = m->hp.n_vocab;
    int32_t buf[N_SEQ][MAX_T];
    pseudo_tokens(&buf[0][0], N_SEQ, MAX_T, V, 7, 131, 17);
    const int32_t *toks[N_SEQ] = {buf[0], buf[1], buf[2]};

    /* prompts of 5, 9 and 1 tokens in one pass; the first returns every row */
    uint32_t n1[N_SEQ] = {5, 9, 1};
    bool all1[N_SEQ] = {true, false, false};
    both(&cpu, &tw, toks, n1, all1, V, "prompts");
    /* a decode step of two, the third sits out */
    const int32_t *t2[N_SEQ] = {buf[0] + 5, buf[1] + 9, buf[2] + 1};
    uint32_t n2[N_SEQ] = {1, 1, 0};
    bool all2[N_SEQ] = {false, false, false};
    both(&cpu, &tw, t2, n2, all2, V, "decode");
    /* verification-shaped: 4, 1 and 7 new tokens, every row of the first and last */
    const int32_t *t3[N_SEQ] = {buf[0] + 6, buf[1] + 10, buf[2] + 1};
    uint32_t n3[N_SEQ] = {4, 1, 7};
    bool all3[N_SEQ] = {true, false, true};
    both(&cpu, &tw, t3, n3, all3, V, "verify");
    /* reject all but one token of sequence 2 (crossing a block boundary back), then go on */
    for (side *sd = &cpu; sd; sd = sd == &cpu ? &tw : NULL)
        mn_kv_truncate(sd->be->kv, &sd->kv[2], 2);
    cr_assert_eq(cpu.kv[2].n_blocks, tw.kv[2].n_blocks);
    const int32_t *t4[N_SEQ] = {buf[0] + 10, buf[1] + 11, buf[2] + 40};
    uint32_t n4[N_SEQ] = {2, 3, 6};
    bool all4[N_SEQ] = {true, true, true};
    both(&cpu, &tw, t4, n4, all4, V, "after rollback");
    close_sides(m, &cpu, &tw);
}

Test(gpu_twin, matches_cpu_gqa_tied_f32) { check_model(fixture("gqa_f32.gguf"), twin_backend); }
Test(gpu_twin, matches_cpu_untied_f32) { check_model(fixture("untied_f32.gguf"), twin_backend); }
Test(gpu_twin, matches_cpu_f16) { check_model(fixture("f16.gguf"), twin_backend); }
Test(gpu_twin, matches_cpu_q8_0) { check_model(fixture("q8_0.gguf"), twin_backend); }
Test(gpu_twin, matches_cpu_q4_0) { check_model(fixture("q4_0.gguf"), twin_backend); }
Test(gpu_twin, matches_cpu_q4_1) { check_model(fixture("q4_1.gguf"), twin_backend); }
Test(gpu_twin, matches_cpu_head_dim_128) { check_model(fixture("hd128_f32.gguf"), twin_backend); }

Test(gpu_twin, matches_cpu_bundled_target) { check_model(source_file("models/target.gguf"), twin_backend); }

/* SmolLM2's shapes (head_dim 64: two dimensions per lane; 9 query heads on 3 KV heads; a 49,152
 * vocabulary) on the fetched Q4_1 file, when it is there; normal build only (the twin's serial loops
 * take ~10 s over 135M parameters, several times that under ASan). */
Test(gpu_twin, matches_cpu_smollm2_q4_1)
{
    if (SANITIZED)
        cr_skip_test("normal build only");
    const char *path = smollm2_path();
    if (!path)
        cr_skip_test("SmolLM2 not fetched (tools/fetch-smollm2.sh)");
    check_model(path, twin_backend);
}

/* A long context: sequence 1 grows to 300 positions in passes of 60 tokens while sequence 0
 * decodes a token a pass, so attention's chunks of 32 positions spread over every warp of a block
 * and warp 0 takes a second chunk (past 256 positions); the last rows are compared. */
static void check_long(const char *path, mn_backend *(*other)(const mn_model *))
{
    enum { LONG = 300, STEP = 60 };
    side cpu, tw;
    mn_model *m = open_sides(path, cpu_side, other, &cpu, &tw);
    uint32_t V = m->hp.n_vocab;
    static int32_t buf[2][LONG + 1];
    pseudo_tokens(&buf[0][0], 2, LONG + 1, V, 7, 97, 13);
    bool all[N_SEQ] = {false, false, false};
    for (uint32_t at = 0, k = 0; at <= LONG; k++) {
        uint32_t n1 = at == LONG ? 1 : STEP < LONG - at ? STEP : LONG - at;
        const int32_t *t[N_SEQ] = {buf[0] + k, buf[1] + at, NULL};
        uint32_t n[N_SEQ] = {1, n1, 0};
        char what[64];
        snprintf(what, sizeof what, "long context, positions %u..%u", at, at + n1 - 1);
        both(&cpu, &tw, t, n, all, V, what);
        at += n1;
    }
    close_sides(m, &cpu, &tw);
}

Test(gpu_twin, long_context_gqa_f32) { check_long(fixture("gqa_f32.gguf"), twin_backend); }
Test(gpu_twin, long_context_q4_1) { check_long(fixture("q4_1.gguf"), twin_backend); }

/* Batch invariance, exact: a sequence's logits are the same bits alone and in passes shared with
 * other sequences of other lengths (its prompt, then a verification-shaped pass, then a decode
 * step), so speculative greedy decoding gives plain greedy's text on this backend too. */
static void check_invariance(const char *path, mn_backend *(*make)(const mn_model *))
{
    side alone, mixed;
    mn_model *m = open_sides(path, make, make, &alone, &mixed);
    uint32_t V = m->hp.n_vocab;
    int32_t buf[N_SEQ][MAX_T];
    pseudo_tokens(&buf[0][0], N_SEQ, MAX_T, V, 3, 101, 13);
    const int32_t *toks[N_SEQ] = {buf[0], buf[1], buf[2]};
    bool all[N_SEQ] = {false, true, false};
    uint32_t steps[3][N_SEQ] = {{9, 7, 20}, {1, 5, 3}, {2, 1, 11}}; /* sequence 1 is the one watched */
    uint32_t at[N_SEQ] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        const int32_t *t[N_SEQ] = {toks[0] + at[0], toks[1] + at[1], toks[2] + at[2]};
        uint32_t only[N_SEQ] = {0, steps[k][1], 0};
        uint32_t rows = pass(&alone, t, only, all);
        cr_assert_eq(pass(&mixed, t, steps[k], all), rows + 2, "a row each of sequences 0 and 2 around them");
        cr_assert(memcmp(alone.logits, mixed.logits + V, (size_t)rows * V * sizeof(float)) == 0,
                  "%s: pass %d: sequence 1's logits differ alone and in a batch", alone.be->ops->name, k);
        for (uint32_t s = 0; s < N_SEQ; s++)
            at[s] += steps[k][s];
    }
    close_sides(m, &alone, &mixed);
}

Test(gpu_twin, batch_invariant_q4_1) { check_invariance(fixture("q4_1.gguf"), twin_backend); }
Test(gpu_twin, batch_invariant_f16) { check_invariance(fixture("f16.gguf"), twin_backend); }

/* A half-float KV cache (--kv-type f16) on both sides: the kernels round K and V as the CPU's pass
 * does and read them back exactly, so the twin stays within the float cache's tolerance of the CPU,
 * over short passes, rollback and a long context, and is batch-invariant. */
static void with_half_kv(void (*check)(const char *, mn_backend *(*)(const mn_model *)), const char *path,
                         mn_backend *(*make)(const mn_model *))
{
    kv_type = MN_KV_F16;
    check(path, make);
    kv_type = MN_KV_F32;
}

Test(gpu_twin, half_float_kv_matches_cpu_gqa_tied_f32)
{
    with_half_kv(check_model, fixture("gqa_f32.gguf"), twin_backend);
}
Test(gpu_twin, half_float_kv_matches_cpu_bundled_target)
{
    with_half_kv(check_model, source_file("models/target.gguf"), twin_backend);
}
Test(gpu_twin, half_float_kv_long_context_q4_1) { with_half_kv(check_long, fixture("q4_1.gguf"), twin_backend); }
Test(gpu_twin, half_float_kv_matches_cpu_head_dim_128)
{
    with_half_kv(check_model, fixture("hd128_f32.gguf"), twin_backend);
}
Test(gpu_twin, half_float_kv_batch_invariant_f16) { with_half_kv(check_invariance, fixture("f16.gguf"), twin_backend); }

/* The argmax block's logic (mn_k_argmax, run thread by thread) against mn_argmax on rows that
 * make it work: ties in different threads' strides and in one thread's, signed zeros, NaNs first,
 * inside and everywhere, and rows shorter than the block. */
Test(gpu_twin, argmax_is_the_first_largest_logit)
{
    enum { V = 1000 };
    static float x[V];
    for (uint32_t n = 1; n <= V; n += n < 300 ? 1 : 233)
        for (int kind = 0; kind < 6; kind++) {
            for (uint32_t i = 0; i < n; i++)
                x[i] = sinf((float)(i * 7 + n)) - (kind == 3 ? 10.0f : 0.0f);
            uint32_t a = (7 * n / 3 + 11) % n, b = (n / 2 + 3) % n; /* two places, apart */
            if (kind == 1) /* a tie of the largest, usually in two threads' strides */
                x[a] = x[b] = 5.0f;
            if (kind == 2) /* a tie in one thread's stride, after a NaN */
                x[a] = NAN, x[(a + 256) % n] = x[(a + 512) % n] = 5.0f;
            if (kind == 3) /* every element negative but two zeros of either sign */
                x[a] = 0.0f, x[b] = -0.0f;
            if (kind == 4)
                x[0] = NAN;
            if (kind == 5)
                for (uint32_t i = 0; i < n; i++)
                    x[i] = NAN;
            cr_assert_eq(mn_gpu_twin_argmax(x, n), mn_argmax(x, n), "n=%u kind=%d", n, kind);
        }
}

/* The draw block's logic (mn_k_draw, run thread by thread) against mn_draw_row on rows that make
 * it work: shorter and longer than the block, peaked, flat, tied (the nucleus ending inside a tie
 * spread over many threads' ids), NaNs and -inf, and a row whose maximum is +inf (no weight: the
 * argmax); nuclei of one token up to all; uniforms from 0 to the largest below 1. */
Test(gpu_twin, draw_is_the_cpus_draw)
{
    enum { V = 3000 };
    static float x[V];
    static uint64_t w[V];
    const float tops[] = {1.0f, 0.999f, 0.9f, 0.5f, 1e-6f}, temps[] = {0.25f, 1.0f, 1.44269504f, 2.5f};
    const double us[] = {0.0, 0.013, 0.25, 0.5, 0.77, 0.999, 1.0 - 0x1.0p-53};
    mn_draw_space *space = mn_draw_space_new(V);
    uint32_t lengths[] = {1, 2, 255, 256, 257, 1000, V};
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
        for (int kind = 0; kind < 6; kind++) {
            uint32_t n = lengths[li];
            for (uint32_t i = 0; i < n; i++) {
                float sn = sinf((float)(i * 7 + n));
                x[i] = kind == 0 ? 8.0f * sn * sn * sn                       /* peaked */
                       : kind == 1 ? 0.5f * sn                               /* flat */
                       : kind == 2 ? roundf(sn * 3.0f)                        /* ties aplenty */
                       : kind == 3 ? (i % 3 == 1 ? NAN : i % 3 == 2 ? -INFINITY : sn)
                       : kind == 4 ? 1.0f                                      /* one tie of all */
                                   : (i == n / 2 ? INFINITY : sn);
            }
            mn_draw_space_free(space);
            space = mn_draw_space_new(n);
            int32_t am = mn_argmax(x, n);
            for (size_t t = 0; t < sizeof tops / sizeof *tops; t++)
                for (size_t T = 0; T < sizeof temps / sizeof *temps; T++)
                    for (size_t k = 0; k < sizeof us / sizeof *us; k++) {
                        int32_t want = mn_draw_row(space, x, temps[T], tops[t], us[k]);
                        int32_t got = mn_gpu_twin_draw(x, n, am, temps[T], tops[t], us[k], w);
                        cr_assert_eq(got, want, "n=%u kind=%d top_p=%g T=%g u=%g: %d, the CPU %d", n, kind,
                                     (double)tops[t], (double)temps[T], us[k], got, want);
                    }
        }
    mn_draw_space_free(space);
}

/* Rows of SmolLM2's vocabulary: Gaussian logits from flat (sigma 0.5, as in the random-weight
 * models) to peaked (4), and rounded to integers (kind 4), which at temperature log2(e) weigh powers
 * of two (the thresholds of an interval spanning many octaves: theta is then often an interval's
 * lower end). */
enum { VOCAB = 49152, VOCAB_KINDS = 5 };
static const float vocab_temps[] = {0.7f, 1.0f, 1.44269504f}, vocab_tops[] = {0.5f, 0.9f, 0.95f, 0.99f};

static void vocab_row(float *x, int kind, uint64_t *state)
{
    const float sigmas[VOCAB_KINDS] = {0.5f, 1.0f, 2.0f, 4.0f, 3.0f};
    for (uint32_t i = 0; i < VOCAB; i += 2) { /* Box-Muller over xorshift64 */
        double u[2];
        for (int k = 0; k < 2; k++) {
            *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;
            u[k] = ((double)(*state >> 11) + 0.5) * 0x1.0p-53;
        }
        double r = sqrt(-2.0 * log(u[0]));
        x[i] = sigmas[kind] * (float)(r * cos(6.283185307179586 * u[1]));
        x[i + 1] = sigmas[kind] * (float)(r * sin(6.283185307179586 * u[1]));
    }
    if (kind == 4)
        for (uint32_t i = 0; i < VOCAB; i++)
            x[i] = roundf(x[i]);
}

/* The search for theta on those rows against the definition; it prints how many passes over the
 * row it made (each a wait on the row's 384 KB in L2 on the device). */
Test(gpu_twin, nucleus_search_on_vocabulary_rows)
{
    static float x[VOCAB];
    static uint64_t w[VOCAB];
    uint64_t state = 0x9e3779b97f4a7c15u;
    uint32_t passes_all = 0, searches = 0, passes_most = 0;
    for (int kind = 0; kind < VOCAB_KINDS; kind++) {
        vocab_row(x, kind, &state);
        int32_t am = mn_argmax(x, VOCAB);
        for (size_t t = 0; t < sizeof vocab_tops / sizeof *vocab_tops; t++)
            for (size_t T = 0; T < sizeof vocab_temps / sizeof *vocab_temps; T++) {
                float top_p = vocab_tops[t], temp = vocab_temps[T];
                uint32_t passes;
                mn_draw_nucleus got = mn_gpu_twin_nucleus(x, VOCAB, am, temp, top_p, w, &passes);
                mn_draw_nucleus want = nucleus_by_sorting(x, VOCAB, temp, top_p, w);
                cr_assert(got.theta == want.theta && got.ties == want.ties && got.mass == want.mass,
                          "kind %d top_p=%g T=%g: theta %llu ties %llu mass %llu, by sorting %llu %llu %llu", kind,
                          (double)top_p, (double)temp, (unsigned long long)got.theta, (unsigned long long)got.ties,
                          (unsigned long long)got.mass, (unsigned long long)want.theta,
                          (unsigned long long)want.ties, (unsigned long long)want.mass);
                passes_all += passes, searches++;
                passes_most = passes > passes_most ? passes : passes_most;
            }
    }
    cr_log_info("nucleus search: %.1f passes a row on average, %u at most (%u rows of %u)",
                (double)passes_all / searches, passes_most, searches, (unsigned)VOCAB);
}

/* A nucleus that ends at the lower end of the search's interval with tokens inside it: at
 * temperature log2(e) integer logits weigh powers of two, so the first pass's thresholds (powers of
 * two: the weights span 14 octaves) fall on the 2^30 and 2^32 tokens, the 50 tokens of 2^31 lie
 * between, and top_p 0.95 needs the 2^30 ones too: theta is the interval's end, and every gathered
 * token is heavier. */
Test(gpu_twin, nucleus_at_the_interval_end)
{
    enum { V = 6151 };
    static float x[V];
    static uint64_t w[V];
    for (uint32_t i = 0; i < V; i++) /* 2^40 once, 2^36 x 100, 2^31 x 50, 2^30 x 1000, 2^20 x 5000 */
        x[i] = i == 0 ? 0.0f : i <= 100 ? -4.0f : i <= 150 ? -9.0f : i <= 1150 ? -10.0f : -20.0f;
    uint32_t passes;
    mn_draw_nucleus got = mn_gpu_twin_nucleus(x, V, 0, 1.44269504f, 0.95f, w, &passes);
    mn_draw_nucleus want = nucleus_by_sorting(x, V, 1.44269504f, 0.95f, w);
    cr_assert_eq(want.theta, (uint64_t)1 << 30);
    cr_assert(got.theta == want.theta && got.ties == want.ties && got.mass == want.mass,
              "theta %llu ties %llu mass %llu, by sorting %llu %llu %llu", (unsigned long long)got.theta,
              (unsigned long long)got.ties, (unsigned long long)got.mass, (unsigned long long)want.theta,
              (unsigned long long)want.ties, (unsigned long long)want.mass);
}

/* The same checks on the device (skipped without one): what a GPU session runs first. */
Test(gpu_device, matches_cpu_gqa_tied_f32) { check_model(fixture("gqa_f32.gguf"), device_backend); }
Test(gpu_device, matches_cpu_f16) { check_model(fixture("f16.gguf"), device_backend); }
Test(gpu_device, matches_cpu_q4_1) { check_model(fixture("q4_1.gguf"), device_backend); }
Test(gpu_device, matches_cpu_head_dim_128) { check_model(fixture("hd128_f32.gguf"), device_backend); }
Test(gpu_device, matches_cpu_bundled_target) { check_model(source_file("models/target.gguf"), device_backend); }

/* SmolLM2-shaped files on the device (576 wide, 30 layers, 9 query heads on 3 KV heads, a 49,152
 * vocabulary; random weights), when MINIONS_TEST_SMOL names them, ':'-separated: the real file is
 * too big to carry to a lent GPU machine, so tools/gpu-bundle.sh writes these there. */
Test(gpu_device, matches_cpu_smollm2_shaped, .timeout = 600)
{
    const char *list = getenv("MINIONS_TEST_SMOL");
    if (!list || !*list)
        cr_skip_test("MINIONS_TEST_SMOL names no SmolLM2-shaped files");
    char paths[4096];
    snprintf(paths, sizeof paths, "%s", list);
    int n = 0;
    for (char *save = NULL, *p = strtok_r(paths, ":", &save); p; p = strtok_r(NULL, ":", &save), n++) {
        check_model(p, device_backend);
        check_invariance(p, device_backend);
    }
    if (n == 0)
        cr_skip_test("MINIONS_TEST_SMOL names no SmolLM2-shaped files");
}

Test(gpu_device, long_context_gqa_f32) { check_long(fixture("gqa_f32.gguf"), device_backend); }

/* A sequence that wants only its argmax gets it, and its rows are not copied down: the buffer keeps
 * what it held there, while the other sequence's rows arrive. */
Test(gpu_device, pick_only_rows_stay_on_the_device)
{
    side cpu, dev;
    mn_model *m = open_sides(fixture("q4_1.gguf"), cpu_side, device_backend, &cpu, &dev);
    uint32_t V = m->hp.n_vocab;
    int32_t buf[N_SEQ][MAX_T];
    pseudo_tokens(&buf[0][0], N_SEQ, MAX_T, V, 5, 29, 3);
    mn_batch_seq seqs[2];
    mn_err err = {{0}};
    float held; /* what the buffer holds before the pass: 0x7f7f7f7f, 3.4e38 */
    memset(&held, 0x7f, sizeof held);
    for (side *sd = &cpu; sd; sd = sd == &cpu ? &dev : NULL) {
        for (uint32_t s = 0; s < 2; s++) {
            cr_assert_eq(mn_kv_reserve(sd->be->kv, &sd->kv[s], 6), MN_OK);
            seqs[s] = (mn_batch_seq){.kv = &sd->kv[s], .tokens = buf[s], .n_tokens = 6, .want_all_logits = true,
                                     .pick_only = s == 0};
        }
        memset(sd->logits, 0x7f, (size_t)12 * V * sizeof(float));
        mn_batch batch = {seqs, 2, sd->pick};
        cr_assert_eq(mn_backend_forward(sd->be, &batch, sd->logits, &err), MN_OK, "%s", err.msg);
    }
    for (uint32_t r = 0; r < 12; r++) {
        float margin;
        const float *c = cpu.logits + (size_t)r * V, *d = dev.logits + (size_t)r * V;
        uint32_t want = argmax(c, V, &margin);
        cr_assert(dev.pick[r] == (int32_t)want || margin <= 1e-3f * fabsf(c[want]), "row %u: argmax %d, cpu %u", r,
                  dev.pick[r], want);
        for (uint32_t i = 0; r < 6 && i < V; i++)
            cr_assert(memcmp(&d[i], &held, sizeof held) == 0, "row %u came down", r);
        if (r >= 6)
            cr_assert(fabsf(d[want] - c[want]) <= 1e-3f * fabsf(c[want]) + 1e-3f, "row %u did not come down", r);
    }
    cr_assert_eq(mn_kv_reserve(dev.be->kv, &dev.kv[0], 7), MN_OK);
    seqs[0].n_tokens = 1;
    cr_assert_eq(mn_backend_forward(dev.be, &(mn_batch){seqs, 1, NULL}, dev.logits, &err), MN_INVALID,
                 "pick_only with no room for the tokens");
    cr_assert(strstr(err.msg, "picked"), "%s", err.msg);
    close_sides(m, &cpu, &dev);
}
Test(gpu_device, long_context_q4_1) { check_long(fixture("q4_1.gguf"), device_backend); }
Test(gpu_device, batch_invariant_q4_1) { check_invariance(fixture("q4_1.gguf"), device_backend); }
Test(gpu_device, batch_invariant_f16) { check_invariance(fixture("f16.gguf"), device_backend); }
Test(gpu_device, half_float_kv_matches_cpu_bundled_target)
{
    with_half_kv(check_model, source_file("models/target.gguf"), device_backend);
}
Test(gpu_device, half_float_kv_long_context_q4_1) { with_half_kv(check_long, fixture("q4_1.gguf"), device_backend); }
Test(gpu_device, half_float_kv_matches_cpu_head_dim_128)
{
    with_half_kv(check_model, fixture("hd128_f32.gguf"), device_backend);
}
Test(gpu_device, half_float_kv_batch_invariant_f16)
{
    with_half_kv(check_invariance, fixture("f16.gguf"), device_backend);
}
Test(gpu_device, batch_invariant_bundled_target)
{
    check_invariance(source_file("models/target.gguf"), device_backend);
}

Test(gpu_twin, refuses_a_bad_configuration)
{
    mn_model *m = load_model("gqa_f32.gguf");
    mn_backend_config cfg = mn_backend_defaults(m, 0);
    cfg.max_tokens = 0;
    mn_backend *b = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_gpu_twin_new(m, &cfg, &b, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "max_tokens"), "%s", err.msg);
    cr_assert_null(b);
    mn_model_free(m);
}

/* The device's draw kernel on the vocabulary rows above, 16 rows a launch (each kind at every
 * setting, four uniforms), against mn_draw_row; prints what a launch of 16 rows took on the device
 * at each top_p (the medians over kinds and temperatures). */
Test(gpu_device, draws_on_vocabulary_rows, .timeout = 600)
{
    enum { ROWS = 16 };
    static float x[ROWS * VOCAB];
    uint64_t state = 0x9e3779b97f4a7c15u;
    mn_draw_space *space = mn_draw_space_new(VOCAB);
    enum { N_TOPS = sizeof vocab_tops / sizeof *vocab_tops, N_TEMPS = sizeof vocab_temps / sizeof *vocab_temps };
    double us[N_TOPS][VOCAB_KINDS * N_TEMPS];
    for (int kind = 0; kind < VOCAB_KINDS; kind++) {
        vocab_row(x, kind, &state);
        for (uint32_t r = 1; r < ROWS; r++)
            memcpy(x + (size_t)r * VOCAB, x, VOCAB * sizeof *x);
        for (int t = 0; t < N_TOPS; t++)
            for (int T = 0; T < N_TEMPS; T++) {
                float temp[ROWS], top[ROWS];
                double u[ROWS], seconds;
                int32_t pick[ROWS];
                for (uint32_t r = 0; r < ROWS; r++)
                    temp[r] = vocab_temps[T], top[r] = vocab_tops[t], u[r] = (r + 0.5) / ROWS;
                mn_err err = {{0}};
                mn_status s = mn_cuda_draw_rows(x, ROWS, VOCAB, temp, top, u, pick, &seconds, &err);
                if (s == MN_NOTFOUND) {
                    mn_draw_space_free(space);
                    cr_skip_test("no CUDA device");
                }
                cr_assert_eq(s, MN_OK, "%s", err.msg);
                for (uint32_t r = 0; r < ROWS; r++)
                    cr_assert_eq(pick[r], mn_draw_row(space, x, temp[r], top[r], u[r]),
                                 "kind %d top_p %g T %g u %g", kind, (double)top[r], (double)temp[r], u[r]);
                us[t][kind * N_TEMPS + T] = seconds * 1e6;
            }
    }
    mn_draw_space_free(space);
    for (int t = 0; t < N_TOPS; t++) {
        double *v = us[t];
        int n = VOCAB_KINDS * N_TEMPS;
        for (int i = 1; i < n; i++) /* insertion sort for the median */
            for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
                double tmp = v[j];
                v[j] = v[j - 1], v[j - 1] = tmp;
            }
        cr_log_info("device draw, %d rows of %d at top_p %g: %.0f us a launch (median; %.0f..%.0f)", ROWS, VOCAB,
                    (double)vocab_tops[t], v[n / 2], v[0], v[n - 1]);
    }
}

/* ---- which shapes keep a graph (gpu/graph_cache.h: the policy, no device needed) ---- */

static mn_graph_verdict pass_of(mn_graph_cache *c, uint32_t T, int *slot, bool *evict)
{
    *evict = false;
    return mn_graph_cache_pass(c, T, T, slot, evict);
}

/* A shape is captured at its second pass and replayed after; a full cache gives the least recently
 * used graph's slot to a shape that recurs, while shapes that come once take nothing (before, the
 * first 64 shapes held the cache for good, one-off prompt lengths among them). */
Test(gpu_graphs, a_recurring_shape_is_captured_and_the_least_recent_makes_room)
{
    mn_graph_cache c = {0};
    int slot, first;
    bool evict;
    cr_assert_eq(pass_of(&c, 1, &slot, &evict), MN_GRAPH_PLAIN, "a shape's first pass");
    cr_assert_eq(pass_of(&c, 1, &first, &evict), MN_GRAPH_CAPTURE);
    cr_assert_not(evict);
    cr_assert_eq(pass_of(&c, 1, &slot, &evict), MN_GRAPH_REPLAY);
    cr_assert_eq(slot, first);
    for (uint32_t T = 2; T <= MN_GRAPH_SLOTS; T++) { /* fill the cache */
        cr_assert_eq(pass_of(&c, T, &slot, &evict), MN_GRAPH_PLAIN);
        cr_assert_eq(pass_of(&c, T, &slot, &evict), MN_GRAPH_CAPTURE, "shape %u", T);
        cr_assert_not(evict, "shape %u: the cache had room", T);
    }
    cr_assert_eq(mn_graph_cache_count(&c), MN_GRAPH_SLOTS);
    for (uint32_t T = 1000; T < 1300; T++) /* shapes that never come back take nothing */
        cr_assert_eq(pass_of(&c, T, &slot, &evict), MN_GRAPH_PLAIN);
    cr_assert_eq(pass_of(&c, 1, &slot, &evict), MN_GRAPH_REPLAY, "the oldest, used again");
    int taken;
    cr_assert_eq(pass_of(&c, 5000, &slot, &evict), MN_GRAPH_PLAIN);
    cr_assert_eq(pass_of(&c, 5000, &taken, &evict), MN_GRAPH_CAPTURE);
    cr_assert(evict, "the cache was full");
    cr_assert_eq(pass_of(&c, 2, &slot, &evict), MN_GRAPH_PLAIN, "shape 2, the least recently used, gave its slot");
    cr_assert_eq(pass_of(&c, 1, &slot, &evict), MN_GRAPH_REPLAY);
    cr_assert_eq(pass_of(&c, 5000, &slot, &evict), MN_GRAPH_REPLAY);
    cr_assert_eq(slot, taken);
    cr_assert_eq(mn_graph_cache_count(&c), MN_GRAPH_SLOTS);

    /* a failed capture empties its slot; the buffers moving empties every slot, and a shape that
     * had a graph is captured again at its next pass */
    mn_graph_cache_drop(&c, taken);
    cr_assert_eq(mn_graph_cache_count(&c), MN_GRAPH_SLOTS - 1);
    mn_graph_cache_clear(&c);
    cr_assert_eq(mn_graph_cache_count(&c), 0);
    cr_assert_eq(pass_of(&c, 1, &slot, &evict), MN_GRAPH_CAPTURE);
    cr_assert_not(evict, "its graph was destroyed with the others");
}
