/* stress_threads.c - the concurrency checks, as a plain program so ThreadSanitizer can run them
 * (Criterion cannot start under TSan: Snaipe/Criterion#274). Runs in every build; in the TSan build
 * it is the suite that matters.
 *   1. the fork-join pool: 4 threads x 20,000 runs, each index called once per run, joins complete;
 *   2. the multi-threaded batched forward pass equals the single-threaded one bit for bit;
 *   3. an actor mailbox on a real libevent loop: 4 producer threads x 1M messages, none lost, none
 *      duplicated, each producer's order kept; and compute-worker jobs posting completions back.
 * Prints "stress_threads: N passed, N failed" and exits non-zero on any failure. */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>

#include "runtime/registry.h"
#include "runtime/mailbox.h"
#include "runtime/pool.h"
#include "runtime/worker.h"

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
    cfg.kind = MN_BACKEND_CPU;
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
        mn_batch batch = {seqs, B, NULL};
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

/* ---- mailbox: 4 producers x 1M messages into one actor on a loop ---------------------------- */
enum { PRODUCERS = 4, PER_PRODUCER = 1000000 };

typedef struct tmsg {
    mn_msg msg;
    uint32_t producer, seq;
} tmsg;

typedef struct mb_test {
    struct event_base *base;
    mn_mailbox *mb;
    tmsg *msgs;                     /* [PRODUCERS][PER_PRODUCER] */
    uint32_t next_seq[PRODUCERS];   /* consumer: the seq expected next from each producer */
    long received, out_of_order, handled_jobs;
    uint8_t *seen;                  /* [PRODUCERS * PER_PRODUCER] */
    bool timed_out;
} mb_test;

enum { WATCHDOG_S = 300 }; /* far beyond the TSan build's whole run: only a lost message gets here */

static void watchdog_fired(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    mb_test *t = arg;
    t->timed_out = true;
    event_base_loopbreak(t->base);
}

/* The loop until a handler breaks it, or a failed check when the messages it waits for never come
 * (without the watchdog a lost message left the program waiting until the harness killed it, which
 * reported no summary at all). */
static void run_loop(mb_test *t, const char *stage)
{
    struct event *dog = evtimer_new(t->base, watchdog_fired, t);
    struct timeval limit = {WATCHDOG_S, 0};
    CHECK(dog && evtimer_add(dog, &limit) == 0, "%s: watchdog", stage);
    t->timed_out = false;
    event_base_loop(t->base, EVLOOP_NO_EXIT_ON_EMPTY);
    if (dog)
        event_free(dog);
    CHECK(!t->timed_out, "%s: the loop waited %d s for messages that never came", stage, (int)WATCHDOG_S);
}

static void mb_handler(void *actor, mn_msg *m)
{
    mb_test *t = actor;
    if (m->type == 1) { /* a completed worker job */
        t->handled_jobs++;
        if (t->handled_jobs == 1000 || t->handled_jobs == 1001)
            event_base_loopbreak(t->base);
        return;
    }
    tmsg *x = (tmsg *)m;
    size_t idx = (size_t)x->producer * PER_PRODUCER + x->seq;
    t->seen[idx]++;
    if (x->seq != t->next_seq[x->producer])
        t->out_of_order++;
    t->next_seq[x->producer] = x->seq + 1;
    if (++t->received == (long)PRODUCERS * PER_PRODUCER)
        event_base_loopbreak(t->base);
}

typedef struct prod_arg {
    mb_test *t;
    uint32_t id;
} prod_arg;

static void *mb_producer(void *arg)
{
    prod_arg *pa = arg;
    tmsg *mine = pa->t->msgs + (size_t)pa->id * PER_PRODUCER;
    for (uint32_t i = 0; i < PER_PRODUCER; i++) {
        mine[i].producer = pa->id;
        mine[i].seq = i;
        mine[i].msg.type = 0;
        mn_mailbox_post(pa->t->mb, &mine[i].msg);
    }
    return NULL;
}

typedef struct count_job {
    mn_job job;
    long *counter; /* written on the worker, read on the loop after the completion message */
} count_job;

static void count_run(mn_job *job)
{
    (*((count_job *)job)->counter)++;
}

static atomic_int gate; /* a gated job runs once this is set */

static void gated_run(mn_job *job)
{
    while (!atomic_load(&gate))
        sched_yield();
    count_run(job);
}

static void mailbox_stress(void)
{
    mb_test t = {0};
    mn_err err = {{0}};
    CHECK(evthread_use_pthreads() == 0, "evthread_use_pthreads");
    t.base = event_base_new();
    t.msgs = calloc((size_t)PRODUCERS * PER_PRODUCER, sizeof *t.msgs);
    t.seen = calloc((size_t)PRODUCERS * PER_PRODUCER, 1);
    if (!t.base || !t.msgs || !t.seen || mn_mailbox_new(t.base, "test", mb_handler, &t, 64, &t.mb, &err) != MN_OK) {
        CHECK(0, "setup: %s", err.msg);
        return;
    }
    pthread_t th[PRODUCERS];
    prod_arg args[PRODUCERS];
    for (uint32_t i = 0; i < PRODUCERS; i++) {
        args[i] = (prod_arg){&t, i};
        pthread_create(&th[i], NULL, mb_producer, &args[i]);
    }
    run_loop(&t, "mailbox");
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(th[i], NULL);
    long dup = 0, lost = 0;
    for (size_t i = 0; i < (size_t)PRODUCERS * PER_PRODUCER; i++)
        dup += t.seen[i] > 1, lost += t.seen[i] == 0;
    CHECK(t.received == (long)PRODUCERS * PER_PRODUCER, "received %ld of %d", t.received, PRODUCERS * PER_PRODUCER);
    CHECK(lost == 0 && dup == 0, "%ld lost, %ld duplicated", lost, dup);
    CHECK(t.out_of_order == 0, "%ld messages out of their producer's order", t.out_of_order);
    CHECK(mn_mailbox_depth(t.mb) == 0, "depth %zu after draining", mn_mailbox_depth(t.mb));

    /* the compute worker: 1000 jobs, each completion re-enters the loop through the mailbox */
    mn_worker *w;
    CHECK(mn_worker_new("test", 1000, &w, &err) == MN_OK, "worker: %s", err.msg);
    static count_job jobs[1000];
    long counter = 0;
    int refused = 0;
    for (int i = 0; i < 1000; i++) {
        jobs[i] = (count_job){.job = {.run = count_run, .reply_to = t.mb}, .counter = &counter};
        jobs[i].job.msg.type = 1;
        refused += mn_worker_submit(w, &jobs[i].job) != MN_OK;
    }
    CHECK(refused == 0, "%d jobs refused within the bound", refused);
    run_loop(&t, "worker");
    CHECK(t.handled_jobs == 1000 && counter == 1000, "jobs: %ld completions, %ld runs", t.handled_jobs, counter);
    mn_worker_free(w);

    /* the bound: a worker of capacity 1 refuses a second job while the first is outstanding */
    CHECK(mn_worker_new("bounded", 1, &w, &err) == MN_OK, "worker: %s", err.msg);
    count_job held = {.job = {.run = gated_run, .reply_to = t.mb}, .counter = &counter};
    count_job extra = {.job = {.run = count_run, .reply_to = t.mb}, .counter = &counter};
    held.job.msg.type = extra.job.msg.type = 1;
    CHECK(mn_worker_submit(w, &held.job) == MN_OK, "the first job was refused");
    CHECK(mn_worker_submit(w, &extra.job) == MN_BUSY, "a job past the bound was accepted");
    atomic_store(&gate, 1);
    run_loop(&t, "bounded worker");
    CHECK(t.handled_jobs == 1001 && counter == 1001, "bounded: %ld completions", t.handled_jobs);
    mn_worker_free(w);
    mn_mailbox_free(t.mb);
    event_base_free(t.base);
    free(t.msgs);
    free(t.seen);
}

int main(void)
{
    const char *dir = getenv("MINIONS_TEST_DATA");
    if (!dir)
        dir = "tests/data";
    pool_stress();
    mailbox_stress();
    forward_threads(dir, "gqa_f32.gguf");
    forward_threads(dir, "q4_1.gguf");
    printf("stress_threads: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
