/* worker.c - the compute worker: an MPSC queue drained by one thread that sleeps on a semaphore.
 * The semaphore counts submitted jobs, so a post never gets lost and an idle worker costs nothing. */
#include "runtime/worker.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>

#include "util/alloc.h"

struct mn_worker {
    mn_mpsc q;
    atomic_uint outstanding; /* submitted and not yet completed */
    unsigned capacity;
    sem_t ready;     /* one count per submitted job (and one for stop) */
    mn_job stop;     /* run == NULL: the thread exits */
    pthread_t th;
};

static void *worker_main(void *arg)
{
    mn_worker *w = arg;
    for (;;) {
        while (sem_wait(&w->ready) != 0)
            ; /* EINTR */
        mn_msg *m;
        while (!(m = mn_mpsc_pop(&w->q)))
            sched_yield(); /* the submitter is between its two steps */
        mn_mpsc_done(&w->q, 1);
        mn_job *job = (mn_job *)m;
        if (!job->run)
            return NULL;
        job->run(job);
        atomic_fetch_sub(&w->outstanding, 1); /* before the post: the receiver may submit again */
        mn_mailbox_post(job->reply_to, &job->msg);
    }
}

mn_status mn_worker_new(const char *name, unsigned capacity, mn_worker **out, mn_err *err)
{
    if (capacity == 0)
        return mn_fail(err, MN_INVALID, "worker %s: capacity must be at least 1", name);
    mn_worker *w = mn_calloc(1, sizeof *w);
    if (!w)
        return mn_fail(err, MN_NOMEM, "worker %s: out of memory", name);
    w->capacity = capacity;
    mn_mpsc_init(&w->q);
    if (sem_init(&w->ready, 0, 0) != 0) {
        mn_free(w);
        return mn_fail(err, MN_ERROR, "worker %s: sem_init failed", name);
    }
    if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
        sem_destroy(&w->ready);
        mn_free(w);
        return mn_fail(err, MN_ERROR, "worker %s: cannot start its thread", name);
    }
    char short_name[16];
    snprintf(short_name, sizeof short_name, "%s", name);
    pthread_setname_np(w->th, short_name);
    *out = w;
    return MN_OK;
}

static void enqueue(mn_worker *w, mn_job *job)
{
    mn_mpsc_push(&w->q, &job->msg);
    sem_post(&w->ready);
}

mn_status mn_worker_submit(mn_worker *w, mn_job *job)
{
    if (atomic_fetch_add(&w->outstanding, 1) >= w->capacity) {
        atomic_fetch_sub(&w->outstanding, 1);
        return MN_BUSY;
    }
    enqueue(w, job);
    return MN_OK;
}

void mn_worker_free(mn_worker *w)
{
    if (!w)
        return;
    w->stop.run = NULL;
    enqueue(w, &w->stop); /* past the bound: stopping must never be refused */
    pthread_join(w->th, NULL);
    sem_destroy(&w->ready);
    mn_free(w);
}
