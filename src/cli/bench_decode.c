/* bench_decode.c - minions-bench-decode: raw model speed on the CPU backend, no server.
 *
 * Prints, for one GGUF file and thread count:
 *   warm-up       tok/s of the process's first prompt pass, which also maps the weights in and
 *                 touches every buffer for the first time (page faults: a cold SmolLM2 F16
 *                 prefill ran at 340 tok/s, the five after it at 514-524), so it measures start-up
 *                 more than the kernels; not in the figures below
 *   prefill       tok/s of one prompt of --prompt-tokens tokens (passes of up to 512 tokens), after
 *                 the warm-up, as llama-bench measures its own after a warm-up run
 *   decode b=B    total tok/s of B sequences decoding together, one token each per pass, after a
 *                 --ctx-tokens prompt each (prefill excluded), for each B in --batches; with the
 *                 weight bytes a pass reads (every matrix once: the layers' seven and the output
 *                 projection; the embedding rows a pass gathers are left out) and what that makes
 *                 in GB/s, against a triad probe of the machine's memory bandwidth measured first
 *                 (a[i] = b[i] + s c[i] over 3 x 128 MiB, one slice per thread, best of 5; 12 bytes
 *                 an element, as STREAM counts it, write-allocate traffic not counted) and a read
 *                 probe (the sum of one 128 MiB array: weights are only read), so the memory-bound
 *                 regime is visible. Each token is the row's argmax, or with --temperature T > 0
 *                 drawn at T and --top-p by the pass (a GPU draws on the device, model/draw.h), or
 *                 with --host-draw by mn_draw_row here from rows the pass brings back: the same
 *                 tokens, the way a GPU backend served sampled requests before it could draw
 * With --verify-curve, instead: the cost of a speculative verification pass. After a --ctx-tokens
 * prompt each, B sequences (each B in --batches) bring k new tokens each (k = 1..8, all logits
 * wanted) in one pass, which is then rolled back (mn_kv_truncate), so every pass sees the same
 * context. --rounds rounds alternate the order of k (1..8, then 8..1) and of B, so drift on a
 * shared machine hits every k alike; the median time per (B, k) is printed with its cost in decode
 * steps, time(B, k) / time(B, 1), and the spread (quartiles) of that time; and in plain steps:
 * before each B's passes of a round, two one-token passes back to back, the second timed, which is
 * what plain decoding runs (a one-token pass that follows a longer one measured slower).
 * Both modes also print the round trip of a cache line between two cores (see core_round_trip_ns):
 * on the shared hosts here it tells which of two kinds of hour a run measured.
 * Tokens are fixed pseudo-random ids, so the figures do not depend on a tokenizer or a text.
 */
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/matmul.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/sampler.h"
#include "runtime/registry.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/num.h"

/* ---- the triad probe ---------------------------------------------------------------------------- */

typedef float v8f __attribute__((vector_size(32)));

typedef struct triad_slice {
    float *a;
    const float *b, *c;
    size_t n;
    bool read_only;  /* the read probe: sum b instead (what streaming weights does) */
    float sink;
} triad_slice;

static void *triad_run(void *arg)
{
    triad_slice *t = arg;
    if (!t->read_only) {
        for (size_t i = 0; i < t->n; i++)
            t->a[i] = t->b[i] + 3.0f * t->c[i];
        return NULL;
    }
    v8f acc[4] = {{0}};
    const v8f *v = (const v8f *)t->b; /* slices start at multiples of 32 floats of an aligned array */
    for (size_t i = 0; i + 4 <= t->n / 8; i += 4)
        for (int j = 0; j < 4; j++)
            acc[j] += v[i + j];
    v8f sum = acc[0] + acc[1] + acc[2] + acc[3];
    t->sink = sum[0];
    return NULL;
}

/* Memory bandwidth in GB/s with n_threads threads over a, b, c (n floats each, 64-byte aligned), by
 * the triad (read_only false: 12 bytes an element) or by summing b (4 bytes an element), best of 5;
 * 0 when threads are short. */
static double probe_gbs(float *a, float *b, float *c, size_t n, int n_threads, bool read_only)
{
    enum { MAX_THREADS = 64 };
    double best = 0;
    if (n_threads >= 1 && n_threads <= MAX_THREADS) {
        for (int r = 0; r < 5; r++) {
            pthread_t th[MAX_THREADS];
            triad_slice sl[MAX_THREADS];
            double t0 = mn_now();
            int started = 0;
            for (int k = 0; k < n_threads; k++) {
                size_t lo = n * (size_t)k / (size_t)n_threads, hi = n * (size_t)(k + 1) / (size_t)n_threads;
                lo -= lo % 32, hi = k + 1 == n_threads ? n : hi - hi % 32;
                sl[k] = (triad_slice){a + lo, b + lo, c + lo, hi - lo, read_only, 0};
                if (k == 0 || pthread_create(&th[k], NULL, triad_run, &sl[k]) == 0)
                    started = k + 1;
                else
                    break;
            }
            if (started != n_threads) {
                for (int k = 1; k < started; k++)
                    pthread_join(th[k], NULL);
                best = 0;
                break;
            }
            triad_run(&sl[0]);
            for (int k = 1; k < n_threads; k++)
                pthread_join(th[k], NULL);
            double gbs = (read_only ? 1.0 : 3.0) * (double)n * sizeof(float) / (mn_now() - t0) / 1e9;
            best = gbs > best ? gbs : best;
        }
    }
    return best;
}

/* Both probes over one set of arrays (3 x 128 MiB, well past any cache here, every page touched
 * before timing); 0 for both when memory is short. */
static void memory_probes(int n_threads, double *triad, double *read)
{
    const size_t n = (size_t)32 << 20;
    float *a = aligned_alloc(64, n * sizeof *a), *b = aligned_alloc(64, n * sizeof *b);
    float *c = aligned_alloc(64, n * sizeof *c);
    *triad = *read = 0;
    if (a && b && c) {
        for (size_t i = 0; i < n; i++)
            a[i] = 0, b[i] = 1, c[i] = 2;
        *triad = probe_gbs(a, b, c, n, n_threads, false);
        *read = probe_gbs(a, b, c, n, n_threads, true);
    }
    free(a);
    free(b);
    free(c);
}

/* ---- the cores' round trip ----------------------------------------------------------------------
 * A cache line passed back and forth between two threads pinned to the first two CPUs this process
 * may run on: the time of one round trip, in ns (0 with fewer than two CPUs). On the shared Zen 5
 * hosts here it is about 100 ns in some hours and about 400 in others (the hypervisor places the
 * two vCPUs apart), and a pass of 8 tokens of the bundled target then takes 1.4x as long on two
 * threads while one thread's pass does not move (docs/runtime.md, "Two kinds of hours"): a run's
 * figures are read with the round trip printed beside them. */
typedef struct ping {
    _Atomic int ball;
    int cpu, rounds;
} ping;

static bool pin_to(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

static void *pong(void *arg)
{
    ping *pg = arg;
    pin_to(pg->cpu);
    for (int i = 0; i < pg->rounds; i++) {
        while (atomic_load_explicit(&pg->ball, memory_order_acquire) != 2 * i + 1)
            ;
        atomic_store_explicit(&pg->ball, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

static double core_round_trip_ns(void)
{
    cpu_set_t mine;
    int cpus[2], n = 0;
    if (pthread_getaffinity_np(pthread_self(), sizeof mine, &mine) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &mine))
            cpus[n++] = c;
    if (n < 2)
        return 0;
    /* the compute pool's threads spin for a while after a pass: let them go to sleep first */
    nanosleep(&(struct timespec){0, 30 * 1000 * 1000}, NULL);
    static ping pg __attribute__((aligned(64)));
    pg = (ping){.cpu = cpus[1], .rounds = 5 * 4000};
    pthread_t th;
    if (!pin_to(cpus[0]) || pthread_create(&th, NULL, pong, &pg) != 0) {
        pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
        return 0;
    }
    double ns = 0; /* the fastest of 5 stretches of 4,000 round trips: one another thread did not slow */
    for (int i = 0; i < pg.rounds; i += 4000) {
        double t0 = mn_now();
        for (int j = i; j < i + 4000; j++) {
            atomic_store_explicit(&pg.ball, 2 * j + 1, memory_order_release);
            while (atomic_load_explicit(&pg.ball, memory_order_acquire) != 2 * j + 2)
                ;
        }
        double t = (mn_now() - t0) / 4000 * 1e9;
        ns = i == 0 || t < ns ? t : ns;
    }
    pthread_join(th, NULL);
    pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
    return ns;
}

/* Bytes of weights one decode pass reads: every matrix once. */
static double weight_bytes(const mn_model *m)
{
    double total = (double)m->output.rows * (double)m->output.row_bytes;
    for (uint32_t l = 0; l < m->hp.n_layers; l++) {
        const mn_layer *L = &m->layers[l];
        const mn_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof w / sizeof *w; i++)
            total += (double)w[i]->rows * (double)w[i]->row_bytes;
    }
    return total;
}

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

/* The q-quantile (0..1) of n samples, sorted in place, between the two nearest ranks (the median
 * of an even count is the mean of the middle two; rounding to a rank made a quartile of three
 * samples their median). */
static double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double at = q * (n - 1);
    int lo = (int)at;
    return lo + 1 < n ? v[lo] + (at - lo) * (v[lo + 1] - v[lo]) : v[lo];
}

/* One pass of k new tokens (all logits) for B sequences after their ctx_tokens, rolled back after;
 * its time into *dt. Returns 0 or 1 (error, printed). */
static int timed_pass(mn_backend *be, mn_kv_seq *kv, mn_batch_seq *seqs, const int32_t *toks, float *logits, int B,
                      int k, uint32_t ctx_tokens, double *dt)
{
    mn_err err = {{0}};
    for (int s = 0; s < B; s++) {
        if (mn_kv_reserve(be->kv, &kv[s], ctx_tokens + (uint32_t)k) != MN_OK) {
            fprintf(stderr, "minions-bench-decode: the KV pool is too small\n");
            return 1;
        }
        seqs[s] = (mn_batch_seq){.kv = &kv[s], .tokens = toks + (size_t)s * VERIFY_MAX_K, .n_tokens = (uint32_t)k,
                                 .want_all_logits = true};
    }
    mn_batch batch = {seqs, (uint32_t)B, NULL};
    double t0 = mn_now();
    if (mn_backend_forward(be, &batch, logits, &err) != MN_OK) {
        fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
        return 1;
    }
    *dt = mn_now() - t0;
    for (int s = 0; s < B; s++)
        mn_kv_truncate(be->kv, &kv[s], ctx_tokens);
    return 0;
}

/* --verify-curve: see the file comment. kv[0..max_b) hold a ctx_tokens prompt each; every pass is
 * rolled back to that length. logits holds max_b * VERIFY_MAX_K rows; bs[0..n_b) are the batch
 * sizes. Returns 0 or 1 (error). */
static int verify_curve(mn_backend *be, mn_kv_seq *kv, mn_batch_seq *seqs, float *logits, const int *bs, int n_b,
                        int max_b, uint32_t ctx_tokens, int rounds)
{
    enum { WARMUP = 3 };
    uint32_t V = be->model->hp.n_vocab;
    int32_t *toks = mn_malloc((size_t)max_b * VERIFY_MAX_K * sizeof(int32_t));
    /* [n_b][VERIFY_MAX_K][rounds], then [n_b][rounds] of plain steps */
    double *times = mn_malloc((size_t)n_b * (VERIFY_MAX_K + 1) * (size_t)rounds * sizeof(double));
    if (!toks || !times) {
        mn_free(toks);
        mn_free(times);
        fprintf(stderr, "minions-bench-decode: out of memory\n");
        return 1;
    }
    double *plain = times + (size_t)n_b * VERIFY_MAX_K * (size_t)rounds;
    random_tokens(toks, (uint32_t)max_b * VERIFY_MAX_K, V, 7);
    double rtt_before = core_round_trip_ns();
    for (int r = -WARMUP; r < rounds; r++) {
        for (int bi0 = 0; bi0 < n_b; bi0++) {
            int bi = (r & 1) ? n_b - 1 - bi0 : bi0, B = bs[bi];
            double dt;
            /* a plain decoding step: a one-token pass right after another one, as decoding runs
             * them (the curve's k = 1 follows passes of other lengths, which leave it slower) */
            for (int rep = 0; rep < 2; rep++)
                if (timed_pass(be, kv, seqs, toks, logits, B, 1, ctx_tokens, &dt))
                    return 1;
            if (r >= 0)
                plain[(size_t)bi * (size_t)rounds + (size_t)r] = dt;
            for (int k0 = 0; k0 < VERIFY_MAX_K; k0++) {
                int k = (r & 1) ? VERIFY_MAX_K - k0 : k0 + 1;
                if (timed_pass(be, kv, seqs, toks, logits, B, k, ctx_tokens, &dt))
                    return 1;
                if (r >= 0)
                    times[((size_t)bi * VERIFY_MAX_K + (size_t)(k - 1)) * (size_t)rounds + (size_t)r] = dt;
            }
        }
    }
    printf("verify curve after %u context tokens, %d rounds (median; q1..q3 of the time); cost in decode steps\n"
           "(the curve's own k = 1) and in plain steps (a one-token pass right after another)\n",
           ctx_tokens, rounds);
    printf("cores: a cache line's round trip %.0f ns before the rounds, %.0f after\n", rtt_before,
           core_round_trip_ns());
    for (int bi = 0; bi < n_b; bi++) {
        double *t1 = times + (size_t)bi * VERIFY_MAX_K * (size_t)rounds, base = quantile(t1, rounds, 0.5);
        double step = quantile(plain + (size_t)bi * (size_t)rounds, rounds, 0.5);
        printf("plain     seqs %2d      %8.1f us\n", bs[bi], step * 1e6);
        for (int k = 1; k <= VERIFY_MAX_K; k++) {
            double *t = t1 + (size_t)(k - 1) * (size_t)rounds;
            double med = quantile(t, rounds, 0.5), q1 = quantile(t, rounds, 0.25), q3 = quantile(t, rounds, 0.75);
            printf("verify    seqs %2d k %d  %8.1f us  (%6.1f..%6.1f)  cost %5.2f decode steps (%5.2f plain)  %8.1f "
                   "tok/s\n",
                   bs[bi], k, med * 1e6, q1 * 1e6, q3 * 1e6, med / base, med / step, (double)bs[bi] * k / med);
        }
    }
    fflush(stdout);
    mn_free(times);
    mn_free(toks);
    return 0;
}

#define MAX_BATCHES 32 /* sizes in a --batches list */
#define MAX_BATCH 1024 /* the largest size */

int main(int argc, char **argv)
{
    const char *model_path = NULL;
    int threads = 0, prompt_tokens = 512, ctx_tokens = 32, gen_tokens = 64, reps = 1, curve = 0, rounds = 200;
    int host_draw = 0;
    float temperature = 0.0f, top_p = 1.0f;
    const char *batches = "1,4,16";
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},        {"threads", required_argument, 0, 't'},
        {"prompt-tokens", required_argument, 0, 'p'},{"ctx-tokens", required_argument, 0, 'c'},
        {"gen-tokens", required_argument, 0, 'g'},   {"batches", required_argument, 0, 'b'},
        {"repeat", required_argument, 0, 'r'},       {"help", no_argument, 0, 'h'},
        {"verify-curve", no_argument, 0, 'v'},       {"rounds", required_argument, 0, 'n'},
        {"backend", required_argument, 0, 'B'},      {"temperature", required_argument, 0, 'T'},
        {"top-p", required_argument, 0, 'P'},        {"host-draw", no_argument, 0, 'H'},
        {"kv-type", required_argument, 0, 'K'},      {0, 0, 0, 0},
    };
    int kind = MN_BACKEND_AUTO, kv_type = MN_KV_F32;
    for (int c; (c = getopt_long(argc, argv, "m:t:p:c:g:b:r:hvn:", opts, NULL)) != -1;) {
        long n = 0;
        double x = 0;
        bool ok = true;
        switch (c) {
        case 'B':
            if ((kind = mn_backend_parse_kind(optarg)) < 0) {
                fprintf(stderr, "minions-bench-decode: --backend is auto, cpu or cuda\n");
                return 2;
            }
            break;
        case 'K':
            if ((kv_type = mn_kv_type_parse(optarg)) < 0) {
                fprintf(stderr, "minions-bench-decode: --kv-type is f32 or f16\n");
                return 2;
            }
            break;
        case 'm': model_path = optarg; break;
        case 't': ok = mn_parse_long(optarg, 1, 256, &n), threads = (int)n; break;
        case 'p': ok = mn_parse_long(optarg, 1, 1 << 20, &n), prompt_tokens = (int)n; break;
        case 'c': ok = mn_parse_long(optarg, 1, 1 << 20, &n), ctx_tokens = (int)n; break;
        case 'g': ok = mn_parse_long(optarg, 1, 1 << 20, &n), gen_tokens = (int)n; break;
        case 'b': batches = optarg; break;
        case 'r': ok = mn_parse_long(optarg, 1, 1 << 20, &n), reps = (int)n; break;
        case 'v': curve = 1; break;
        case 'n': ok = mn_parse_long(optarg, 1, 1 << 20, &n), rounds = (int)n; break;
        case 'T': ok = mn_parse_real(optarg, 0, 100, &x), temperature = (float)x; break;
        case 'P': ok = mn_parse_real(optarg, 1e-6, 1, &x), top_p = (float)x; break;
        case 'H': host_draw = 1; break;
        default:
            fprintf(stderr, "usage: minions-bench-decode --model FILE [--threads N] [--prompt-tokens N]\n"
                            "       [--ctx-tokens N] [--gen-tokens N] [--batches 1,4,16] [--repeat N]\n"
                            "       [--verify-curve [--rounds N]] [--backend auto|cpu|cuda] [--kv-type f32|f16]\n"
                            "       [--temperature T [--top-p P] [--host-draw]]\n");
            return c == 'h' ? 0 : 2;
        }
        if (!ok) {
            fprintf(stderr, "minions-bench-decode: bad option value '%s'\n", optarg);
            return 2;
        }
    }
    if (!model_path) {
        fprintf(stderr, "minions-bench-decode: --model is required\n");
        return 2;
    }
    long sizes[MAX_BATCHES];
    int bs[MAX_BATCHES], n_b = mn_parse_long_list(batches, 1, MAX_BATCH, sizes, MAX_BATCHES), max_b = 1;
    if (n_b < 0) {
        fprintf(stderr,
                "minions-bench-decode: --batches takes sizes in 1..%d separated by commas (at most %d), not '%s'\n",
                MAX_BATCH, MAX_BATCHES, batches);
        return 2;
    }
    for (int i = 0; i < n_b; i++) {
        bs[i] = (int)sizes[i];
        max_b = bs[i] > max_b ? bs[i] : max_b;
    }
    mn_err err = {{0}};
    mn_model *m;
    if (mn_model_load(model_path, &m, &err) != MN_OK) {
        fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
        return 1;
    }
    uint32_t per_seq = (uint32_t)(ctx_tokens + (gen_tokens > VERIFY_MAX_K ? gen_tokens : VERIFY_MAX_K));
    uint32_t total = (uint32_t)prompt_tokens > per_seq * (uint32_t)max_b ? (uint32_t)prompt_tokens : per_seq * (uint32_t)max_b;
    mn_backend_config cfg = mn_backend_defaults(m, total + 16 * (uint32_t)max_b);
    if (threads > 0)
        cfg.n_threads = threads;
    cfg.kind = (mn_backend_kind)kind;
    cfg.kv_type = (mn_kv_type)kv_type;
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
    int32_t *picked = mn_calloc((size_t)max_b, sizeof *picked); /* each sequence's next token */
    double *u = mn_calloc((size_t)max_b, sizeof *u);           /* its draw's uniform */
    mn_draw *draws = mn_calloc((size_t)max_b, sizeof *draws);
    mn_draw_space *space = mn_draw_space_new(V);
    mn_rng rng;
    mn_rng_seed(&rng, 7);
    if (!logits || !toks || !kv || !seqs || !picked || !u || !draws || !space) {
        fprintf(stderr, "minions-bench-decode: out of memory\n");
        return 1;
    }
    printf("model %s: %llu parameters, dim %u, %u layers, %u heads (%u kv), vocab %u, weights %s\n", m->name,
           (unsigned long long)mn_model_n_params(m), m->hp.dim, m->hp.n_layers, m->hp.n_heads, m->hp.n_kv_heads, V,
           mn_dtype_get(m->layers[0].wq.type)->name);
    printf("backend %s, %d threads, CPU kernels %s\n", be->ops->name, cfg.n_threads, mn_cpu_kernels_name());
    if (temperature > 0.0f)
        printf("tokens drawn at temperature %g, top_p %g, %s\n", (double)temperature, (double)top_p,
               host_draw ? "on the host from the rows (--host-draw)" : "by the pass");
    bool draw = temperature > 0.0f && !host_draw, greedy = temperature <= 0.0f;
    double wbytes = weight_bytes(m), triad = 0, readbw = 0;
    if (!curve) {
        memory_probes(cfg.n_threads, &triad, &readbw);
        printf("weights   %.1f MB read per pass; memory (%d threads): triad %.1f GB/s, read %.1f GB/s; cores: a cache "
               "line's round trip %.0f ns\n",
               wbytes / 1e6, cfg.n_threads, triad, readbw, core_round_trip_ns());
    }

    for (int r = 0; curve && r < reps; r++) {
        for (int s = 0; s < max_b; s++) {
            random_tokens(toks, (uint32_t)ctx_tokens, V, 100 + (uint64_t)s);
            if (mn_backend_prefill(be, &kv[s], toks, (uint32_t)ctx_tokens, logits, &err) != MN_OK) {
                fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
                return 1;
            }
        }
        if (verify_curve(be, kv, seqs, logits, bs, n_b, max_b, (uint32_t)ctx_tokens, rounds))
            return 1;
        for (int s = 0; s < max_b; s++)
            mn_kv_seq_release(be->kv, &kv[s]);
    }
    /* r = -1: the warm-up pass */
    for (int r = -1; !curve && r < reps; r++) {
        random_tokens(toks, (uint32_t)prompt_tokens, V, 1);
        double t0 = mn_now();
        if (mn_backend_prefill(be, &kv[0], toks, (uint32_t)prompt_tokens, logits, &err) != MN_OK) {
            fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
            return 1;
        }
        double dt = mn_now() - t0;
        mn_kv_seq_release(be->kv, &kv[0]);
        printf("%s   %4d tokens          %9.1f tok/s%s\n", r < 0 ? "warm-up" : "prefill", prompt_tokens,
               prompt_tokens / dt, r < 0 ? " (the first pass: weights mapped in, buffers touched)" : "");
        fflush(stdout);
        if (r < 0)
            continue;
        for (int bi = 0; bi < n_b; bi++) {
            int B = bs[bi];
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
            double t_fwd = 0.0; /* in mn_backend_forward (the argmax included); the rest is bookkeeping */
            t0 = mn_now();
            for (int g = 0; g < gen_tokens; g++) {
                for (int s = 0; s < B; s++) {
                    if (mn_kv_reserve(be->kv, &kv[s], kv[s].len + 1) != MN_OK) {
                        fprintf(stderr, "minions-bench-decode: the KV pool is too small\n");
                        return 1;
                    }
                    u[s] = mn_rng_uniform(&rng);
                    draws[s] = (mn_draw){temperature, top_p, &u[s]};
                    seqs[s] = (mn_batch_seq){.kv = &kv[s], .tokens = &next[s], .n_tokens = 1,
                                             .pick_only = greedy || draw, .draw = draw ? &draws[s] : NULL};
                }
                mn_batch batch = {seqs, (uint32_t)B, picked}; /* the rows come down only to be drawn here */
                double tf = mn_now();
                if (mn_backend_forward(be, &batch, logits, &err) != MN_OK) {
                    fprintf(stderr, "minions-bench-decode: %s\n", err.msg);
                    return 1;
                }
                t_fwd += mn_now() - tf;
                for (int s = 0; !greedy && !draw && s < B; s++)
                    picked[s] = mn_draw_row(space, logits + (size_t)s * V, temperature, top_p, u[s]);
                memcpy(next, picked, (size_t)B * sizeof *next);
            }
            dt = mn_now() - t0;
            double gbs = wbytes * gen_tokens / dt / 1e9;
            printf("decode    batch %2d x %3d tokens %9.1f tok/s total   weights %6.1f GB/s (%3.0f%% of triad, %3.0f%% "
                   "of read)   step %.0f us, forward %.0f\n",
                   B, gen_tokens, (double)B * gen_tokens / dt, gbs, triad > 0 ? 100 * gbs / triad : 0.0,
                   readbw > 0 ? 100 * gbs / readbw : 0.0, dt / gen_tokens * 1e6, t_fwd / gen_tokens * 1e6);
            fflush(stdout);
            for (int s = 0; s < B; s++)
                mn_kv_seq_release(be->kv, &kv[s]);
        }
    }
    mn_free(picked);
    mn_free(u);
    mn_free(draws);
    mn_draw_space_free(space);
    mn_free(seqs);
    mn_free(kv);
    mn_free(toks);
    mn_free(logits);
    mn_backend_free(be);
    mn_model_free(m);
    return 0;
}
