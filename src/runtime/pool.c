/* pool.c - fork-join compute pool: a generation counter announces work, a pending counter joins. */
#include "runtime/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "util/alloc.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Waiting (a worker for the next run, the caller for the workers): PAUSE_ROUNDS of pause loops
 * (50-80 us here: the gaps inside a pass), then sched_yield until SPIN_ROUNDS, then a worker
 * sleeps. A yield is a system call (0.65 us here), so a worker yields for ~12 ms before it sleeps.
 * The yields cost nothing on idle cores, but where the pool shares its cores with other work, the
 * thread waited for may be queued behind the waiter on the same core, and spinning there could
 * hold the core for a time slice per run (docs/runtime.md, "Sharing the cores"). */
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
    int ith;
    pthread_t th;
} worker;

struct mn_pool {
    int n;                      /* threads, the caller included */
    worker *workers;            /* [n - 1] */
    int started;                /* workers actually created */
    atomic_uint gen;            /* bumped for every run and for stop */
    atomic_int pending;         /* workers still inside the current run */
    atomic_int stop;
    atomic_int sleepers;        /* workers blocked (or about to block) on cv */
    mn_pool_fn fn;              /* published before gen is bumped */
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *arg)
{
    worker *w = arg;
    mn_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && spins < SPIN_ROUNDS)
            wait_round(spins++);
        if (g == seen) {
            /* Announce increments gen and then reads sleepers; we increment sleepers and then read
             * gen (both sequentially consistent), so one of us sees the other: no lost wakeup. */
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen)
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        p->fn(p->ctx, w->ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

/* Start a run (or the stop): spinning workers see gen move; sleeping ones need the condition
 * variable, and only then do we pay for the mutex and the broadcast. */
static void announce(mn_pool *p)
{
    atomic_fetch_add(&p->gen, 1);
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
        w->ith = i;
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
    announce(p);
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
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_release);
    announce(p);
    fn(ctx, 0, p->n);
    for (int round = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; round++)
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
