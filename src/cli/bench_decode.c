/* bench_decode.c - minions-bench-decode: raw model speed on the CPU backend, no server.
 *
 * Prints, for one GGUF file and thread count:
 *   prefill       tok/s of one prompt of --prompt-tokens tokens (passes of up to 512 tokens)
 *   decode b=B    total tok/s of B sequences decoding together, one token each per pass, after a
 *                 --ctx-tokens prompt each (prefill excluded), for each B in --batches
 * With --verify-curve, instead: the cost of a speculative verification pass. After a --ctx-tokens
 * prompt each, B sequences (each B in --batches) bring k new tokens each (k = 1..8, all logits
 * wanted) in one pass, which is then rolled back (mn_kv_truncate), so every pass sees the same
 * context. --rounds rounds alternate the order of k (1..8, then 8..1) and of B, so drift on a
 * shared machine hits every k alike; the median time per (B, k) is printed with its cost in decode
 * steps, time(B, k) / time(B, 1), and the spread (quartiles) of that time.
 * Tokens are fixed pseudo-random ids, so the figures do not depend on a tokenizer or a text.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/dtype.h"
#include "model/model.h"
#include "model/sampler.h"
#include "runtime/registry.h"
#include "util/alloc.h"
#include "util/clock.h"

static void random_tokens(int32_t *t, uint32_t n, uint32_t vocab, uint64_t seed)
{
    mn_rng r;
    mn_rng_seed(&r, seed);
    for (uint32_t i = 0; i < n; i++)
        t[i] = (int32_t)(mn_rng_uniform(&r) * vocab);
}

#define VERIFY_MAX_K 8

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of n samples, sorted in place. */
static double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[(int)(q * (n - 1) + 0.5)];
}

/* --verify-curve: see the file comment. kv[0..max_b) hold a ctx_tokens prompt each; every pass is
 * rolled back to that length. logits holds max_b * VERIFY_MAX_K rows. Returns 0 or 1 (error). */
static int verify_curve(mn_backend *be, mn_kv_seq *kv, mn_batch_seq *seqs, float *logits, const char *batches,
                        int max_b, uint32_t ctx_tokens, int rounds)
{
    enum { WARMUP = 3 };
    uint32_t V = be->model->hp.n_vocab;
    int n_b = 0, bs[32];
    for (const char *p = batches; *p && n_b < 32;) {
        char *end;
        int b = (int)strtol(p, &end, 10);
        if (end == p)
            break;
        if (b >= 1)
            bs[n_b++] = b;
        p = end + (*end == ',');
    }
    int32_t *toks = mn_malloc((size_t)max_b * VERIFY_MAX_K * sizeof(int32_t));
    double *times = mn_malloc((size_t)n_b * VERIFY_MAX_K * (size_t)rounds * sizeof(double));
    if (!toks || !times) {
        mn_free(toks);
        mn_free(times);
        fprintf(stderr, "minions-bench-decode: out of memory\n");
        return 1;
    }
    random_tokens(toks, (uint32_t)max_b * VERIFY_MAX_K, V, 7);
    mn_err err = {{0}};
    for (int r = -WARMUP; r < rounds; r++) {
        for (int bi0 = 0; bi0 < n_b; bi0++) {
            int bi = (r & 1) ? n_b - 1 - bi0 : bi0, B = bs[bi];
            for (int k0 = 0; k0 < VERIFY_MAX_K; k0++) {
                int k = (r & 1) ? VERIFY_MAX_K - k0 : k0 + 1;
                for (int s = 0; s < B; s++) {
                    if (mn_kv_reserve(be->kv, &kv[s], ctx_tokens + (uint32_t)k) != MN_OK) {
                        fprintf(stderr, "minions-bench-decode: the KV pool is too small\n");
                        return 1;
                    }
                    seqs[s] = (mn_batch_seq){.kv = &kv[s], .tokens = toks + (size_t)s * VERIFY_MAX_K,
                                             .n_tokens = (uint32_t)k, .want_all_logits = true};
                }
                mn_batch batch = {seqs, (uint32_t)B};
                double t0 = mn_now();
                if (mn_backend_forward(be, &batch, logits, &err) != MN_OK) {
                    fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
                    return 1;
                }
                double dt = mn_now() - t0;
                if (r >= 0)
                    times[((size_t)bi * VERIFY_MAX_K + (size_t)(k - 1)) * (size_t)rounds + (size_t)r] = dt;
                for (int s = 0; s < B; s++)
                    mn_kv_truncate(be->kv, &kv[s], ctx_tokens);
            }
        }
    }
    printf("verify curve after %u context tokens, %d rounds (median; q1..q3 of the time)\n", ctx_tokens, rounds);
    for (int bi = 0; bi < n_b; bi++) {
        double *t1 = times + (size_t)bi * VERIFY_MAX_K * (size_t)rounds, base = quantile(t1, rounds, 0.5);
        for (int k = 1; k <= VERIFY_MAX_K; k++) {
            double *t = t1 + (size_t)(k - 1) * (size_t)rounds;
            double med = quantile(t, rounds, 0.5), q1 = quantile(t, rounds, 0.25), q3 = quantile(t, rounds, 0.75);
            printf("verify    seqs %2d k %d  %8.1f us  (%6.1f..%6.1f)  cost %5.2f decode steps  %8.1f tok/s\n", bs[bi],
                   k, med * 1e6, q1 * 1e6, q3 * 1e6, med / base, (double)bs[bi] * k / med);
        }
    }
    fflush(stdout);
    mn_free(times);
    mn_free(toks);
    return 0;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL;
    int threads = 0, prompt_tokens = 512, ctx_tokens = 32, gen_tokens = 64, reps = 1, curve = 0, rounds = 200;
    char batches[128] = "1,4,16";
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},        {"threads", required_argument, 0, 't'},
        {"prompt-tokens", required_argument, 0, 'p'},{"ctx-tokens", required_argument, 0, 'c'},
        {"gen-tokens", required_argument, 0, 'g'},   {"batches", required_argument, 0, 'b'},
        {"repeat", required_argument, 0, 'r'},       {"help", no_argument, 0, 'h'},
        {"verify-curve", no_argument, 0, 'v'},       {"rounds", required_argument, 0, 'n'},
        {0, 0, 0, 0},
    };
    for (int c; (c = getopt_long(argc, argv, "m:t:p:c:g:b:r:hvn:", opts, NULL)) != -1;) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case 't': threads = atoi(optarg); break;
        case 'p': prompt_tokens = atoi(optarg); break;
        case 'c': ctx_tokens = atoi(optarg); break;
        case 'g': gen_tokens = atoi(optarg); break;
        case 'b': snprintf(batches, sizeof batches, "%s", optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'v': curve = 1; break;
        case 'n': rounds = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: minions-bench-decode --model FILE [--threads N] [--prompt-tokens N]\n"
                            "       [--ctx-tokens N] [--gen-tokens N] [--batches 1,4,16] [--repeat N]\n"
                            "       [--verify-curve [--rounds N]]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (!model_path || prompt_tokens < 1 || ctx_tokens < 1 || gen_tokens < 1 || reps < 1 || rounds < 1) {
        fprintf(stderr, "minions-bench-decode: --model is required and counts must be positive\n");
        return 2;
    }
    mn_err err = {{0}};
    mn_model *m;
    if (mn_model_load(model_path, &m, &err) != MN_OK) {
        fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
        return 1;
    }
    int max_b = 1;
    for (char *p = batches; *p;) {
        int b = (int)strtol(p, &p, 10);
        max_b = b > max_b ? b : max_b;
        p += *p == ',';
    }
    uint32_t per_seq = (uint32_t)(ctx_tokens + (gen_tokens > VERIFY_MAX_K ? gen_tokens : VERIFY_MAX_K));
    uint32_t total = (uint32_t)prompt_tokens > per_seq * (uint32_t)max_b ? (uint32_t)prompt_tokens : per_seq * (uint32_t)max_b;
    mn_backend_config cfg = mn_backend_defaults(m, total + 16 * (uint32_t)max_b);
    if (threads > 0)
        cfg.n_threads = threads;
    mn_backend *be;
    if (mn_backend_new(m, &cfg, &be, &err) != MN_OK) {
        fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
        mn_model_free(m);
        return 1;
    }
    uint32_t V = m->hp.n_vocab;
    float *logits = mn_malloc((size_t)V * max_b * VERIFY_MAX_K * sizeof(float));
    int32_t *toks = mn_malloc((size_t)total * sizeof(int32_t));
    mn_kv_seq *kv = mn_calloc((size_t)max_b, sizeof *kv);
    mn_batch_seq *seqs = mn_calloc((size_t)max_b, sizeof *seqs);
    if (!logits || !toks || !kv || !seqs) {
        fprintf(stderr, "minions-bench-decode: out of memory\n");
        return 1;
    }
    printf("model %s: %llu parameters, dim %u, %u layers, %u heads (%u kv), vocab %u, weights %s\n", m->name,
           (unsigned long long)mn_model_n_params(m), m->hp.dim, m->hp.n_layers, m->hp.n_heads, m->hp.n_kv_heads, V,
           mn_dtype_get(m->layers[0].wq.type)->name);
    printf("backend %s, %d threads\n", be->ops->name, cfg.n_threads);

    for (int r = 0; curve && r < reps; r++) {
        for (int s = 0; s < max_b; s++) {
            random_tokens(toks, (uint32_t)ctx_tokens, V, 100 + (uint64_t)s);
            if (mn_backend_prefill(be, &kv[s], toks, (uint32_t)ctx_tokens, logits, &err) != MN_OK) {
                fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
                return 1;
            }
        }
        if (verify_curve(be, kv, seqs, logits, batches, max_b, (uint32_t)ctx_tokens, rounds))
            return 1;
        for (int s = 0; s < max_b; s++)
            mn_kv_seq_release(be->kv, &kv[s]);
    }
    for (int r = 0; !curve && r < reps; r++) {
        random_tokens(toks, (uint32_t)prompt_tokens, V, 1);
        double t0 = mn_now();
        if (mn_backend_prefill(be, &kv[0], toks, (uint32_t)prompt_tokens, logits, &err) != MN_OK) {
            fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
            return 1;
        }
        double dt = mn_now() - t0;
        mn_kv_seq_release(be->kv, &kv[0]);
        printf("prefill   %4d tokens          %9.1f tok/s\n", prompt_tokens, prompt_tokens / dt);
        fflush(stdout);
        for (char *p = batches; *p;) {
            int B = (int)strtol(p, &p, 10);
            p += *p == ',';
            if (B < 1)
                continue;
            for (int s = 0; s < B; s++) {
                random_tokens(toks, (uint32_t)ctx_tokens, V, 100 + (uint64_t)s);
                if (mn_backend_prefill(be, &kv[s], toks, (uint32_t)ctx_tokens, logits, &err) != MN_OK) {
                    fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
                    return 1;
                }
            }
            int32_t *next = toks;
            for (int s = 0; s < B; s++)
                next[s] = (int32_t)((s * 7919u + 13u) % V);
            t0 = mn_now();
            for (int g = 0; g < gen_tokens; g++) {
                for (int s = 0; s < B; s++) {
                    if (mn_kv_reserve(be->kv, &kv[s], kv[s].len + 1) != MN_OK) {
                        fprintf(stderr, "minions-bench-decode: the KV pool is too small\n");
                        return 1;
                    }
                    seqs[s] = (mn_batch_seq){.kv = &kv[s], .tokens = &next[s], .n_tokens = 1};
                }
                mn_batch batch = {seqs, (uint32_t)B};
                if (mn_backend_forward(be, &batch, logits, &err) != MN_OK) {
                    fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
                    return 1;
                }
                for (int s = 0; s < B; s++)
                    next[s] = mn_argmax(logits + (size_t)s * V, V);
            }
            dt = mn_now() - t0;
            printf("decode    batch %2d x %3d tokens %9.1f tok/s total\n", B, gen_tokens, (double)B * gen_tokens / dt);
            fflush(stdout);
            for (int s = 0; s < B; s++)
                mn_kv_seq_release(be->kv, &kv[s]);
        }
    }
    mn_free(seqs);
    mn_free(kv);
    mn_free(toks);
    mn_free(logits);
    mn_backend_free(be);
    mn_model_free(m);
    return 0;
}
