/* test_forward.c - the CPU forward pass: agreement with the independent numpy reference, bitwise
 * batch invariance, rollback of the paged KV cache. */
#include <math.h>
#include <string.h>

#include "cpu/matmul.h"
#include "model/sampler.h"
#include "testutil.h"

#define N_TOK 40

static void read_tokens(int32_t *t, int n)
{
    FILE *f = fopen(fixture("tokens.txt"), "r");
    cr_assert(f);
    for (int i = 0; i < n; i++)
        cr_assert_eq(fscanf(f, "%d", &t[i]), 1);
    fclose(f);
}

/* Logits of one sequence fed in chunks of `chunk` tokens (all logits wanted). */
static float *run_sequence(mn_backend *b, const int32_t *toks, int n, int chunk)
{
    uint32_t V = b->model->hp.n_vocab;
    float *out = malloc((size_t)n * V * sizeof(float));
    mn_kv_seq kv = {0};
    mn_err err = {{0}};
    for (int done = 0; done < n; done += chunk) {
        int step = n - done < chunk ? n - done : chunk;
        cr_assert_eq(mn_kv_reserve(b->kv, &kv, kv.len + (uint32_t)step), MN_OK);
        mn_batch_seq s = {.kv = &kv, .tokens = toks + done, .n_tokens = (uint32_t)step, .want_all_logits = true};
        mn_batch batch = {&s, 1, NULL};
        cr_assert_eq(mn_backend_forward(b, &batch, out + (size_t)done * V, &err), MN_OK, "%s", err.msg);
    }
    mn_kv_seq_release(b->kv, &kv);
    return out;
}

/* Per position: max |logit difference| relative to the reference's max |logit|, with a KV cache of
 * kv_type; in *agree (when not NULL) how many positions' largest logits are the reference's. */
static void relative_errors_kv(const char *model, const char *ref_file, mn_kv_type kv_type, float *err, int *agree)
{
    char gguf[128];
    snprintf(gguf, sizeof gguf, "%s.gguf", model);
    mn_model *m = load_model(gguf);
    mn_backend *b = cpu_backend_kv(m, 2, 64, 64, kv_type);
    int32_t toks[N_TOK];
    read_tokens(toks, N_TOK);
    size_t len;
    float *ref = slurp(fixture(ref_file), &len);
    uint32_t V = m->hp.n_vocab;
    cr_assert_eq(len, (size_t)N_TOK * V * sizeof(float));
    float *got = run_sequence(b, toks, N_TOK, N_TOK);
    for (int t = 0; t < N_TOK; t++) {
        float maxabs = 0, maxdiff = 0;
        for (uint32_t v = 0; v < V; v++) {
            maxabs = fmaxf(maxabs, fabsf(ref[(size_t)t * V + v]));
            maxdiff = fmaxf(maxdiff, fabsf(ref[(size_t)t * V + v] - got[(size_t)t * V + v]));
        }
        err[t] = maxdiff / maxabs;
        if (agree)
            *agree += mn_vec_argmax(ref + (size_t)t * V, (int)V) == mn_vec_argmax(got + (size_t)t * V, (int)V);
    }
    free(got);
    free(ref);
    mn_backend_free(b);
    mn_model_free(m);
}

static void relative_errors(const char *model, const char *ref_file, float *err)
{
    relative_errors_kv(model, ref_file, MN_KV_F32, err, NULL);
}

/* Float weights (F32, F16): within 1e-4 of the float64 reference at every position. */
static void check_reference(const char *model)
{
    char logits[128];
    snprintf(logits, sizeof logits, "%s.logits", model);
    float err[N_TOK];
    relative_errors(model, logits, err);
    for (int t = 0; t < N_TOK; t++)
        cr_assert_leq(err[t], 1e-4f, "%s position %d: max |diff| is %g of the largest logit", model, t, err[t]);
}

/* Quantized weights multiply 16-bit activations. Against the reference that rounds activations the
 * same way (ref_forward.py --q16-activations) most positions agree within 1e-4; a position can
 * differ where an activation lies on a rounding tie that float64 and float32 break differently
 * (and later positions attend to it), but never by more than activation rounding itself can
 * explain, which the exact-activation reference bounds. */
static void check_reference_q8(const char *model)
{
    char q8[128], exact[128];
    snprintf(q8, sizeof q8, "%s.logits", model);
    snprintf(exact, sizeof exact, "%s.f32act.logits", model);
    float err[N_TOK], err_exact[N_TOK];
    relative_errors(model, q8, err);
    relative_errors(model, exact, err_exact);
    int tight = 0;
    for (int t = 0; t < N_TOK; t++) {
        tight += err[t] <= 1e-4f;
        cr_assert_leq(err[t], 5e-2f, "%s position %d: %g off the rounding-aware reference", model, t, err[t]);
        cr_assert_leq(err_exact[t], 6e-2f, "%s position %d: %g off the exact reference", model, t, err_exact[t]);
    }
    cr_assert_geq(tight, N_TOK * 3 / 4, "%s: only %d of %d positions within 1e-4 of the rounding-aware reference",
                  model, tight, N_TOK);
}

Test(forward, matches_reference_gqa_tied_f32) { check_reference("gqa_f32"); }
Test(forward, matches_reference_untied_f32) { check_reference("untied_f32"); }
Test(forward, matches_reference_f16) { check_reference("f16"); }
Test(forward, matches_reference_head_dim_128) { check_reference("hd128_f32"); }
Test(forward, matches_reference_q8_0) { check_reference_q8("q8_0"); }
Test(forward, matches_reference_q4_0) { check_reference_q8("q4_0"); }
Test(forward, matches_reference_q4_1) { check_reference_q8("q4_1"); }
Test(forward, matches_reference_mixed_types) { check_reference_q8("mixed"); } /* float and quantized in one group */

/* A half-float KV cache rounds K and V to 11 significant bits: the logits stay within 2e-3 of the
 * float64 reference's largest (float caches: 1e-4), and the largest logit is the reference's at
 * every position of these fixtures. */
static void check_reference_f16_kv(const char *model)
{
    char logits[128];
    snprintf(logits, sizeof logits, "%s.logits", model);
    float err[N_TOK], worst = 0;
    int agree = 0;
    relative_errors_kv(model, logits, MN_KV_F16, err, &agree);
    for (int t = 0; t < N_TOK; t++) {
        worst = fmaxf(worst, err[t]);
        cr_assert_leq(err[t], 2e-3f, "%s, f16 KV, position %d: max |diff| is %g of the largest logit", model, t,
                      err[t]);
    }
    cr_log_info("%s with a half-float KV cache: at most %g of the largest logit off", model, worst);
    cr_assert_gt(worst, 1e-4f, "%s: no further off than a float cache is allowed: were K and V rounded?", model);
    cr_assert_eq(agree, N_TOK, "%s, f16 KV: the largest logit moved at %d positions", model, N_TOK - agree);
}

Test(forward, half_float_kv_stays_near_the_reference_f32) { check_reference_f16_kv("gqa_f32"); }
Test(forward, half_float_kv_stays_near_the_reference_f16) { check_reference_f16_kv("f16"); }
Test(forward, half_float_kv_stays_near_the_reference_head_dim_128) { check_reference_f16_kv("hd128_f32"); }

/* A sequence's logits are bit-identical alone in one pass, token by token, in uneven chunks, and
 * inside a batch of 8 sequences of different lengths (some prefilling, some decoding). */
static void check_invariance_kv(const char *gguf, int threads, mn_kv_type kv_type)
{
    mn_model *m = load_model(gguf);
    mn_backend *b = cpu_backend_kv(m, threads, 256, 512, kv_type);
    uint32_t V = m->hp.n_vocab;
    int32_t toks[N_TOK];
    read_tokens(toks, N_TOK);
    float *alone = run_sequence(b, toks, N_TOK, N_TOK);
    float *by_one = run_sequence(b, toks, N_TOK, 1);
    float *by_seven = run_sequence(b, toks, N_TOK, 7);
    cr_assert(memcmp(alone, by_one, (size_t)N_TOK * V * sizeof(float)) == 0, "token by token differs");
    cr_assert(memcmp(alone, by_seven, (size_t)N_TOK * V * sizeof(float)) == 0, "chunks of 7 differ");

    /* 8 sequences; sequence 3 is ours, the others have other tokens and lengths */
    enum { B = 8 };
    mn_kv_seq kv[B] = {{0}};
    int32_t other[B][N_TOK];
    for (int s = 0; s < B; s++)
        for (int i = 0; i < N_TOK; i++)
            other[s][i] = s == 3 ? toks[i] : (int32_t)((i * 31 + s * 17 + 5) % 300);
    float *batched = malloc((size_t)N_TOK * V * sizeof(float));
    float *out = malloc((size_t)B * N_TOK * V * sizeof(float));
    int fed[B] = {0};
    mn_err err = {{0}};
    for (int round = 0; fed[3] < N_TOK; round++) {
        mn_batch_seq seqs[B];
        int n = 0, ours_row = -1, ours_n = 0;
        uint32_t row = 0;
        for (int s = 0; s < B; s++) {
            int step = 1 + (s * 5 + round * 3) % 9; /* uneven, changing chunk sizes */
            if (fed[s] + step > N_TOK)
                step = N_TOK - fed[s];
            if (step <= 0)
                continue;
            cr_assert_eq(mn_kv_reserve(b->kv, &kv[s], kv[s].len + (uint32_t)step), MN_OK);
            bool all = s == 3 || s % 2 == 0;
            seqs[n++] = (mn_batch_seq){.kv = &kv[s], .tokens = other[s] + fed[s], .n_tokens = (uint32_t)step,
                                       .want_all_logits = all};
            if (s == 3) {
                ours_row = (int)row;
                ours_n = step;
            }
            row += all ? (uint32_t)step : 1;
        }
        mn_batch batch = {seqs, (uint32_t)n, NULL};
        cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_OK, "%s", err.msg);
        memcpy(batched + (size_t)fed[3] * V, out + (size_t)ours_row * V, (size_t)ours_n * V * sizeof(float));
        for (int i = 0; i < n; i++)
            fed[seqs[i].kv - kv] += (int)seqs[i].n_tokens;
    }
    cr_assert(memcmp(alone, batched, (size_t)N_TOK * V * sizeof(float)) == 0, "batched logits differ");
    for (int s = 0; s < B; s++)
        mn_kv_seq_release(b->kv, &kv[s]);
    cr_assert_eq(mn_kv_used(b->kv), 0);
    free(alone);
    free(by_one);
    free(by_seven);
    free(batched);
    free(out);
    mn_backend_free(b);
    mn_model_free(m);
}

static void check_invariance(const char *gguf, int threads) { check_invariance_kv(gguf, threads, MN_KV_F32); }

Test(forward, batch_invariant_f32) { check_invariance("gqa_f32.gguf", 2); }
Test(forward, batch_invariant_with_a_half_float_kv_cache) { check_invariance_kv("gqa_f32.gguf", 2, MN_KV_F16); }
Test(forward, batch_invariant_q4_1) { check_invariance("q4_1.gguf", 2); }
Test(forward, batch_invariant_q8_0_three_threads) { check_invariance("q8_0.gguf", 3); }

Test(forward, thread_count_does_not_change_logits)
{
    mn_model *m = load_model("untied_f32.gguf");
    int32_t toks[N_TOK];
    read_tokens(toks, N_TOK);
    mn_backend *b1 = cpu_backend(m, 1, 64, 64), *b4 = cpu_backend(m, 4, 64, 64);
    float *a = run_sequence(b1, toks, N_TOK, 13), *c = run_sequence(b4, toks, N_TOK, 13);
    cr_assert(memcmp(a, c, (size_t)N_TOK * m->hp.n_vocab * sizeof(float)) == 0);
    free(a);
    free(c);
    mn_backend_free(b1);
    mn_backend_free(b4);
    mn_model_free(m);
}

/* The kernel set (kernels.h) changes speed only: every set this CPU runs gives the generic C set's
 * logits bit for bit, for every weight type, one token at a time and in chunks of 7 (the float
 * tiles for T = 7 and the integer ones for T > 1). */
static void check_kernel_sets(const char *gguf)
{
    mn_model *m = load_model(gguf);
    int32_t toks[N_TOK];
    read_tokens(toks, N_TOK);
    size_t bytes = (size_t)N_TOK * m->hp.n_vocab * sizeof(float);
    cr_assert_eq(mn_cpu_kernels_use("generic"), 0);
    mn_backend *b = cpu_backend(m, 2, 64, 64);
    float *ref1 = run_sequence(b, toks, N_TOK, 1), *ref7 = run_sequence(b, toks, N_TOK, 7);
    int ran = 0;
    for (size_t i = 0; mn_cpu_kernels_at(i); i++) { /* every set the library has, against generic */
        const char *set = mn_cpu_kernels_at(i);
        if (strcmp(set, "generic") == 0)
            continue;
        if (mn_cpu_kernels_use(set) != 0) {
            cr_log_info("%s: kernel set %s not run (this CPU lacks it)", gguf, set);
            continue;
        }
        float *a = run_sequence(b, toks, N_TOK, 1), *c = run_sequence(b, toks, N_TOK, 7);
        cr_assert(memcmp(a, ref1, bytes) == 0, "%s: %s differs from generic, one token a pass", gguf, set);
        cr_assert(memcmp(c, ref7, bytes) == 0, "%s: %s differs from generic, 7 tokens a pass", gguf, set);
        free(a);
        free(c);
        ran++;
    }
#if defined(__x86_64__)
    cr_assert(ran > 0 || !__builtin_cpu_supports("avx2"), "no SIMD kernel set ran on a CPU with AVX2");
#endif
    free(ref1);
    free(ref7);
    mn_backend_free(b);
    mn_model_free(m);
}

Test(forward, kernel_sets_agree_f32) { check_kernel_sets("gqa_f32.gguf"); }
Test(forward, kernel_sets_agree_f16) { check_kernel_sets("f16.gguf"); }
Test(forward, kernel_sets_agree_q8_0) { check_kernel_sets("q8_0.gguf"); }
Test(forward, kernel_sets_agree_q4_1) { check_kernel_sets("q4_1.gguf"); }
Test(forward, kernel_sets_agree_head_dim_128) { check_kernel_sets("hd128_f32.gguf"); }

/* Append k tokens, truncate back to n, append others: the logits equal those of a sequence that
 * never saw the rolled-back tokens, and the pool gets the blocks back. */
Test(forward, rollback_equals_never_seen)
{
    mn_model *m = load_model("gqa_f32.gguf");
    mn_backend *b = cpu_backend(m, 2, 64, 64);
    uint32_t V = m->hp.n_vocab;
    int32_t toks[N_TOK];
    read_tokens(toks, N_TOK);
    float *clean = run_sequence(b, toks, N_TOK, N_TOK);

    mn_kv_seq kv = {0};
    mn_err err = {{0}};
    float *out = malloc((size_t)N_TOK * V * sizeof(float)), *got = malloc((size_t)N_TOK * V * sizeof(float));
    int32_t junk[11];
    for (int i = 0; i < 11; i++)
        junk[i] = (int32_t)(200 + i * 7);
    uint32_t n = 0;
    while (n < N_TOK) {
        uint32_t step = N_TOK - n < 6 ? N_TOK - n : 6;
        /* the real tokens */
        cr_assert_eq(mn_kv_reserve(b->kv, &kv, n + step), MN_OK);
        mn_batch_seq s = {.kv = &kv, .tokens = toks + n, .n_tokens = step, .want_all_logits = true};
        mn_batch batch = {&s, 1, NULL};
        cr_assert_eq(mn_backend_forward(b, &batch, got + (size_t)n * V, &err), MN_OK);
        n += step;
        /* rejected drafts: append 11 junk tokens (crossing block boundaries), then roll back */
        uint32_t blocks_before = kv.n_blocks;
        cr_assert_eq(mn_kv_reserve(b->kv, &kv, n + 11), MN_OK);
        mn_batch_seq j = {.kv = &kv, .tokens = junk, .n_tokens = 11, .want_all_logits = true};
        mn_batch jb = {&j, 1, NULL};
        cr_assert_eq(mn_backend_forward(b, &jb, out, &err), MN_OK);
        cr_assert_eq(kv.len, n + 11);
        mn_kv_truncate(b->kv, &kv, n);
        cr_assert_eq(kv.len, n);
        cr_assert_eq(kv.n_blocks, blocks_before, "truncate returns the blocks past the new length");
    }
    cr_assert(memcmp(clean, got, (size_t)N_TOK * V * sizeof(float)) == 0, "rolled-back tokens leaked into logits");
    mn_kv_seq_release(b->kv, &kv);
    cr_assert_eq(mn_kv_used(b->kv), 0);
    free(clean);
    free(out);
    free(got);
    mn_backend_free(b);
    mn_model_free(m);
}

/* Forward tokens[from, to) of a sequence whose positions [0, from) are in kv already; all logits. */
static void extend(mn_backend *b, mn_kv_seq *kv, const int32_t *toks, uint32_t from, uint32_t to, float *out)
{
    mn_err err = {{0}};
    cr_assert_eq(kv->len, from);
    cr_assert_eq(mn_kv_reserve(b->kv, kv, to), MN_OK);
    mn_batch_seq s = {.kv = kv, .tokens = toks + from, .n_tokens = to - from, .want_all_logits = true};
    mn_batch batch = {&s, 1, NULL};
    cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_OK, "%s", err.msg);
}

/* The prefix cache: a sequence that adopts the blocks another left behind computes the rest to the
 * same bits as one that computed everything; a different token ends the match at its block; the
 * idle blocks count as free and go when a reservation needs them, deepest first. (Blocks of 4.) */
Test(forward, a_prefix_from_the_cache_gives_the_same_logits)
{
    mn_model *m = load_model("gqa_f32.gguf");
    mn_backend *b = cpu_backend(m, 2, 64, 24);
    cr_assert_eq(mn_kv_prefix_enable(b->kv), MN_OK);
    uint32_t V = m->hp.n_vocab;
    int32_t toks[N_TOK], other[N_TOK];
    read_tokens(toks, N_TOK);
    float *clean = run_sequence(b, toks, N_TOK, N_TOK), *got = malloc((size_t)N_TOK * V * sizeof(float));
    cr_assert_eq(b->kv->n_idle, 0, "a plain release caches nothing");

    mn_kv_seq a = {0}, c = {0}, d = {0};
    extend(b, &a, toks, 0, 22, got); /* 5 full blocks and half of a sixth */
    mn_kv_seq_release_prefix(b->kv, &a, toks);
    cr_assert_eq(b->kv->n_idle, 5, "the full blocks stay, idle");
    cr_assert_eq(mn_kv_used(b->kv), 0, "and count as free");

    cr_assert_eq(mn_kv_adopt(b->kv, &c, toks, N_TOK - 1), 20);
    cr_assert_eq(b->kv->n_idle, 0);
    extend(b, &c, toks, 20, N_TOK, got);
    cr_assert(memcmp(clean + (size_t)20 * V, got, (size_t)(N_TOK - 20) * V * sizeof(float)) == 0,
              "logits after an adopted prefix differ from a full computation");
    mn_kv_seq_release_prefix(b->kv, &c, toks);
    cr_assert_eq(b->kv->n_idle, 10, "c filed its own full blocks after the adopted ones");

    memcpy(other, toks, sizeof other);
    other[9] ^= 1; /* block 2 differs: blocks 0 and 1 match */
    cr_assert_eq(mn_kv_adopt(b->kv, &d, other, N_TOK - 1), 8);
    mn_kv_seq_release(b->kv, &d);
    cr_assert_eq(mn_kv_adopt(b->kv, &d, toks, 7), 4, "whole blocks only, within the tokens given");
    mn_kv_seq_release(b->kv, &d);

    /* a reservation of 17 blocks of the 24 takes the 14 free ones and 3 idle ones, deepest first */
    cr_assert_eq(mn_kv_reserve(b->kv, &d, 17 * 4), MN_OK);
    cr_assert_eq(b->kv->n_idle, 7);
    cr_assert_eq(mn_kv_adopt(b->kv, &c, toks, N_TOK - 1), 7 * 4, "the first 7 blocks are still there");
    cr_assert_eq(mn_kv_reserve(b->kv, &a, 8 * 4), MN_BUSY, "held blocks are not taken");
    mn_kv_seq_release(b->kv, &c);
    mn_kv_seq_release(b->kv, &d);
    cr_assert_eq(mn_kv_used(b->kv), 0);
    cr_assert_eq(b->kv->n_free + b->kv->n_idle, 24);
    free(clean);
    free(got);
    mn_backend_free(b);
    mn_model_free(m);
}

Test(forward, rejects_malformed_batches)
{
    mn_model *m = load_model("gqa_f32.gguf");
    mn_backend *b = cpu_backend(m, 2, 16, 8); /* two threads: the rows it draws are spread over both */
    float *out = malloc(32 * (size_t)m->hp.n_vocab * sizeof(float));
    mn_err err = {{0}};
    mn_kv_seq kv = {0};
    int32_t toks[20] = {1, 2, 3};
    mn_batch_seq s = {.kv = &kv, .tokens = toks, .n_tokens = 3};
    mn_batch batch = {&s, 1, NULL};
    cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_INVALID, "unreserved positions must be refused");
    cr_assert_eq(mn_kv_reserve(b->kv, &kv, 20), MN_OK);
    s.n_tokens = 20;
    cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_INVALID, "more tokens than the pass limit");
    s.n_tokens = 3;
    toks[1] = 99999;
    cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_INVALID, "token outside the vocabulary");
    toks[1] = 2;
    mn_batch_seq twice[2] = {s, s};
    mn_batch tb = {twice, 2, NULL};
    cr_assert_eq(mn_backend_forward(b, &tb, out, &err), MN_INVALID, "a sequence twice in one batch");
    s.pick_only = true;
    cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_INVALID, "pick_only and no room for the tokens");
    s.pick_only = false;
    double u[3] = {0.1, 0.5, 0.999};
    mn_draw bad[] = {{0.0f, 1.0f, u}, {1.0f, 0.0f, u}, {1.0f, 1.5f, u}, {NAN, 1.0f, u}, {1.0f, 1.0f, NULL}};
    int32_t am[3];
    batch.pick = am;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        s.draw = &bad[i];
        cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_INVALID, "draw %zu must be refused", i);
        cr_assert(strstr(err.msg, "draw"), "%s", err.msg);
    }
    batch.pick = NULL;
    s.draw = &(mn_draw){0.8f, 0.9f, u};
    cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_INVALID, "a draw and no room for the tokens");
    batch.pick = am;
    s.want_all_logits = true;
    cr_assert_eq(kv.len, 0, "a refused batch changes nothing");
    cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_OK, "%s", err.msg);
    mn_draw_space *space = mn_draw_space_new(m->hp.n_vocab);
    for (uint32_t r = 0; r < 3; r++) /* drawn from the logits on the CPU */
        cr_assert_eq(am[r], mn_draw_row(space, out + (size_t)r * m->hp.n_vocab, 0.8f, 0.9f, u[r]));
    mn_draw_space_free(space);
    mn_kv_truncate(b->kv, &kv, 0);
    cr_assert_eq(mn_kv_reserve(b->kv, &kv, 3), MN_OK);
    s.draw = NULL;
    s.pick_only = true;
    cr_assert_eq(mn_backend_forward(b, &batch, out, &err), MN_OK, "%s", err.msg);
    for (uint32_t r = 0; r < 3; r++) /* filled from the logits on the CPU */
        cr_assert_eq(am[r], mn_argmax(out + (size_t)r * m->hp.n_vocab, m->hp.n_vocab));
    cr_assert_eq(mn_kv_reserve(b->kv, &kv, 1000), MN_BUSY, "the pool holds only 8 blocks of 4");
    mn_kv_seq_release(b->kv, &kv);
    free(out);
    mn_backend_free(b);
    mn_model_free(m);
}
