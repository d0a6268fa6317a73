/* pool.c - fork-join compute pool: a run's calls are claimed from one atomic word, a counter joins. */
#include "runtime/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "util/alloc.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Waiting (a worker for the next run, the caller for calls under way): PAUSE_ROUNDS of pause
 * loops (50-80 us here: the gaps inside a pass), then sched_yield until SPIN_ROUNDS, then a worker
 * sleeps. A yield is a system call (0.65 us here), so a worker yields for ~12 ms before it sleeps.
 * The yields cost nothing on idle cores; where the pool shares its cores with other work, the
 * thread waited for may be queued behind the waiter on the same core. Claiming (below) keeps the
 * caller from waiting for a worker that has not started; these yields are for one that has
 * (docs/runtime.md, "Sharing the cores"). */
#define PAUSE_ROUNDS 2000
#define SPIN_ROUNDS 20000

/* One round of waiting: a pause, or past PAUSE_ROUNDS a yield. */
static void wait_round(int round)
{
    if (round < PAUSE_ROUNDS)
        CPU_RELAX();
    else
        sched_yield();
}

typedef struct worker {
    mn_pool *pool;
    pthread_t th;
} worker;

/* A run's calls are claimed, not assigned: `work` holds the run's number (high half) and the next
 * index to hand out (low half), and whichever thread is on a core takes the next one. So a worker
 * that is asleep, or queued behind other processes on a shared core, is simply not waited for:
 * the caller runs the indices nobody took, and the join waits only for calls already under way. */
struct mn_pool {
    int n;                      /* calls per run: the pool's threads, the caller included */
    worker *workers;            /* [n - 1] */
    int started;                /* workers actually created */
    uint32_t run;               /* the caller's count of runs */
    _Atomic uint64_t work;      /* run << 32 | next index to claim; a new run is announced here */
    atomic_int done;            /* calls of the current run that have returned */
    atomic_int stop;
    atomic_int sleepers;        /* workers blocked (or about to block) on cv */
    mn_pool_fn fn;              /* published before work moves to the run */
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static uint32_t run_of(uint64_t w) { return (uint32_t)(w >> 32); }

/* The next index of run `run`, or -1 when all are taken or that run is over. */
static int claim(mn_pool *p, uint32_t run)
{
    uint64_t w = atomic_load_explicit(&p->work, memory_order_acquire);
    while (run_of(w) == run && (uint32_t)w < (uint32_t)p->n)
        if (atomic_compare_exchange_weak_explicit(&p->work, &w, w + 1, memory_order_acq_rel, memory_order_acquire))
            return (int)(uint32_t)w;
    return -1;
}

/* Call fn for every index of `run` this thread can still claim. A claim keeps the run from ending
 * (the caller waits for every index to be done), so fn and ctx are still the run's when read. */
static void take_calls(mn_pool *p, uint32_t run)
{
    for (int i; (i = claim(p, run)) >= 0;) {
        p->fn(p->ctx, i, p->n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    mn_pool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t r;
        int spins = 0;
        while ((r = run_of(atomic_load_explicit(&p->work, memory_order_acquire))) == seen && spins < SPIN_ROUNDS)
            wait_round(spins++);
        if (r == seen) {
            /* Announce stores work and then reads sleepers; we increment sleepers and then read
             * work (all sequentially consistent), so one of us sees the other: no lost wakeup. */
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((r = run_of(atomic_load(&p->work))) == seen)
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        seen = r;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        take_calls(p, r);
    }
}

/* Start run `run` with `first` as its next index (n for the stop, which has nothing to claim):
 * spinning workers see work move; sleeping ones need the condition variable, and only then do we
 * pay for the mutex and the broadcast. */
static void announce(mn_pool *p, uint32_t run, uint32_t first)
{
    atomic_store(&p->work, (uint64_t)run << 32 | first);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

mn_status mn_pool_new(int n_threads, mn_pool **out, mn_err *err)
{
    if (n_threads < 1 || n_threads > 256)
        return mn_fail(err, MN_INVALID, "pool: thread count %d is out of range 1..256", n_threads);
    mn_pool *p = mn_calloc(1, sizeof *p);
    if (!p || !(p->workers = mn_calloc((size_t)n_threads, sizeof *p->workers))) {
        mn_free(p);
        return mn_fail(err, MN_NOMEM, "pool: out of memory");
    }
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int i = 1; i < n_threads; i++) {
        worker *w = &p->workers[i - 1];
        w->pool = p;
        if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
            mn_pool_free(p);
            return mn_fail(err, MN_ERROR, "pool: cannot start compute thread %d", i);
        }
        p->started++;
    }
    *out = p;
    return MN_OK;
}

void mn_pool_free(mn_pool *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    announce(p, ++p->run, (uint32_t)p->n);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->workers[i].th, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    mn_free(p->workers);
    mn_free(p);
}

int mn_pool_size(const mn_pool *p) { return p->n; }

void mn_pool_run(mn_pool *p, mn_pool_fn fn, void *ctx)
{
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed); /* published by announce's store */
    announce(p, ++p->run, 0);
    take_calls(p, p->run);
    for (int round = 0; atomic_load_explicit(&p->done, memory_order_acquire) < p->n; round++)
        wait_round(round);
}

void mn_pool_split(int ith, int nth, unsigned n, unsigned align, unsigned *begin, unsigned *end)
{
    unsigned units = (n + align - 1) / align;
    unsigned per = units / (unsigned)nth, extra = units % (unsigned)nth;
    unsigned b = (unsigned)ith * per + ((unsigned)ith < extra ? (unsigned)ith : extra);
    unsigned e = b + per + ((unsigned)ith < extra ? 1 : 0);
    *begin = b * align < n ? b * align : n;
    *end = e * align < n ? e * align : n;
}
