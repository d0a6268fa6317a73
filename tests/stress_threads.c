/* stress_threads.c - the concurrency checks, as a plain program so ThreadSanitizer can run them
 * (Criterion cannot start under TSan: Snaipe/Criterion#274). Runs in every build; in the TSan build
 * it is the suite that matters.
 *   1. the fork-join pool: 4 threads x 20,000 runs, each index called once per run, joins complete;
 *   2. the multi-threaded batched forward pass equals the single-threaded one bit for bit.
 * Prints "stress_threads: N passed, N failed" and exits non-zero on any failure. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/pool.h"

static int passed, failed;
#define CHECK(cond, ...)                                                                            \
    do {                                                                                            \
        if (cond) {                                                                                 \
            passed++;                                                                               \
        } else {                                                                                    \
            failed++;                                                                               \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                    \
            fprintf(stderr, __VA_ARGS__);                                                           \
            fputc('\n', stderr);                                                                    \
        }                                                                                           \
    } while (0)

typedef struct counters {
    atomic_long hits[4];
    long own[4]; /* plain writes, one slot per thread: TSan checks the join orders them */
} counters;

static void count_fn(void *arg, int ith, int nth)
{
    counters *c = arg;
    (void)nth;
    atomic_fetch_add(&c->hits[ith], 1);
    c->own[ith]++;
}

static void pool_stress(void)
{
    mn_pool *p;
    CHECK(mn_pool_new(4, &p, NULL) == MN_OK, "pool_new");
    counters c = {0};
    for (int run = 0; run < 20000; run++) {
        mn_pool_run(p, count_fn, &c);
        long sum = c.own[0] + c.own[1] + c.own[2] + c.own[3]; /* read after the join */
        if (sum != 4L * (run + 1)) {
            CHECK(0, "run %d: %ld calls seen after join", run, sum);
            break;
        }
    }
    for (int i = 0; i < 4; i++)
        CHECK(atomic_load(&c.hits[i]) == 20000, "thread %d ran %ld times", i, atomic_load(&c.hits[i]));
    mn_pool_free(p);
}

static float *batched_logits(const mn_model *m, int threads)
{
    mn_backend_config cfg = mn_backend_defaults(m, 0);
    cfg.n_threads = threads;
    cfg.max_tokens = 128;
    cfg.kv_block_size = 4;
    cfg.kv_blocks = 128;
    cfg.try_gpu = false;
    mn_backend *b;
    mn_err err = {{0}};
    if (mn_backend_new(m, &cfg, &b, &err) != MN_OK) {
        CHECK(0, "backend: %s", err.msg);
        return NULL;
    }
    enum { B = 6, STEPS = 5 };
    uint32_t V = m->hp.n_vocab;
    float *all = calloc((size_t)STEPS * B * 4 * V, sizeof(float));
    mn_kv_seq kv[B] = {{0}};
    int32_t toks[B][4];
    for (int step = 0; step < STEPS; step++) {
        mn_batch_seq seqs[B];
        uint32_t rows = 0;
        for (int s = 0; s < B; s++) {
            uint32_t n = 1 + (uint32_t)((s + step) % 4);
            for (uint32_t i = 0; i < n; i++)
                toks[s][i] = (int32_t)((s * 37 + step * 11 + (int)i * 5) % 300);
            mn_kv_reserve(b->kv, &kv[s], kv[s].len + n);
            seqs[s] = (mn_batch_seq){.kv = &kv[s], .tokens = toks[s], .n_tokens = n, .want_all_logits = true};
            rows += n;
        }
        mn_batch batch = {seqs, B};
        CHECK(mn_backend_forward(b, &batch, all + (size_t)step * B * 4 * V, &err) == MN_OK, "forward: %s", err.msg);
        (void)rows;
    }
    for (int s = 0; s < B; s++)
        mn_kv_seq_release(b->kv, &kv[s]);
    CHECK(mn_kv_used(b->kv) == 0, "KV accounting back to zero");
    mn_backend_free(b);
    return all;
}

static void forward_threads(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mn_model *m;
    mn_err err = {{0}};
    if (mn_model_load(path, &m, &err) != MN_OK) {
        CHECK(0, "load %s: %s", path, err.msg);
        return;
    }
    float *one = batched_logits(m, 1), *three = batched_logits(m, 3);
    CHECK(one && three && memcmp(one, three, (size_t)5 * 6 * 4 * m->hp.n_vocab * sizeof(float)) == 0,
          "%s: 3 threads and 1 thread disagree", name);
    free(one);
    free(three);
    mn_model_free(m);
}

int main(void)
{
    const char *dir = getenv("MINIONS_TEST_DATA");
    if (!dir)
        dir = "tests/data";
    pool_stress();
    forward_threads(dir, "gqa_f32.gguf");
    forward_threads(dir, "q4_1.gguf");
    printf("stress_threads: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
