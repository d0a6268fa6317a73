/* bench_mailbox.c - minions-bench-mailbox: messages/s through the lock-free MPSC queue that actor
 * mailboxes use, against a mutex + linked-list queue, same producers and consumer, in one run.
 *   minions-bench-mailbox [PRODUCERS] [MESSAGES_PER_PRODUCER] [ROUNDS]
 * Each round runs both queues (alternating which goes first); the median rate of each is printed. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/mailbox.h"
#include "util/alloc.h"
#include "util/clock.h"

typedef struct item {
    mn_msg msg;              /* for the MPSC queue */
    struct item *next;       /* for the mutex queue */
} item;

typedef struct mutex_q {
    pthread_mutex_t mu;
    item *head, *tail;
} mutex_q;

typedef struct run {
    int use_mpsc;
    mn_mpsc q;
    mutex_q mq;
    item *items;             /* [producers][per] */
    long per;
    atomic_int go;
} run;

typedef struct prod_arg {
    run *r;
    int id;
} prod_arg;

static void *producer(void *arg)
{
    prod_arg *pa = arg;
    run *r = pa->r;
    item *mine = r->items + (size_t)pa->id * r->per;
    while (!atomic_load(&r->go))
        ;
    for (long i = 0; i < r->per; i++) {
        if (r->use_mpsc) {
            mn_mpsc_push(&r->q, &mine[i].msg);
        } else {
            mine[i].next = NULL;
            pthread_mutex_lock(&r->mq.mu);
            if (r->mq.tail)
                r->mq.tail->next = &mine[i];
            else
                r->mq.head = &mine[i];
            r->mq.tail = &mine[i];
            pthread_mutex_unlock(&r->mq.mu);
        }
    }
    return NULL;
}

static double one_run(int use_mpsc, int producers, long per)
{
    run r = {.use_mpsc = use_mpsc, .per = per};
    mn_mpsc_init(&r.q);
    pthread_mutex_init(&r.mq.mu, NULL);
    r.items = mn_calloc((size_t)producers * per, sizeof *r.items);
    pthread_t th[64];
    prod_arg args[64];
    for (int i = 0; i < producers; i++) {
        args[i] = (prod_arg){&r, i};
        pthread_create(&th[i], NULL, producer, &args[i]);
    }
    long total = producers * per, got = 0;
    double t0 = mn_now();
    atomic_store(&r.go, 1);
    while (got < total) {
        if (use_mpsc) { /* as a mailbox drains: a batch of pops, then one depth update */
            size_t n = 0;
            while (n < 64 && mn_mpsc_pop(&r.q))
                n++;
            if (n)
                mn_mpsc_done(&r.q, n);
            got += (long)n;
        } else {
            pthread_mutex_lock(&r.mq.mu);
            item *it = r.mq.head;
            if (it) {
                r.mq.head = it->next;
                if (!r.mq.head)
                    r.mq.tail = NULL;
                got++;
            }
            pthread_mutex_unlock(&r.mq.mu);
        }
    }
    double dt = mn_now() - t0;
    for (int i = 0; i < producers; i++)
        pthread_join(th[i], NULL);
    mn_free(r.items);
    pthread_mutex_destroy(&r.mq.mu);
    return total / dt;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int producers = argc > 1 ? atoi(argv[1]) : 4;
    long per = argc > 2 ? atol(argv[2]) : 1000000;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (producers < 1 || producers > 64 || per < 1 || rounds < 1 || rounds > 99) {
        fprintf(stderr, "usage: minions-bench-mailbox [PRODUCERS<=64] [MESSAGES_PER_PRODUCER] [ROUNDS]\n");
        return 2;
    }
    double mpsc[99], mutex[99];
    for (int k = 0; k < rounds; k++) {
        if (k % 2) {
            mutex[k] = one_run(0, producers, per);
            mpsc[k] = one_run(1, producers, per);
        } else {
            mpsc[k] = one_run(1, producers, per);
            mutex[k] = one_run(0, producers, per);
        }
    }
    qsort(mpsc, (size_t)rounds, sizeof *mpsc, cmp);
    qsort(mutex, (size_t)rounds, sizeof *mutex, cmp);
    double a = mpsc[rounds / 2], b = mutex[rounds / 2];
    printf("mailbox: %d producers x %ld messages, median of %d rounds\n", producers, per, rounds);
    printf("  lock-free MPSC   %.2f M msg/s\n  mutex + list     %.2f M msg/s\n  ratio            %.2fx\n", a / 1e6,
           b / 1e6, a / b);
    return 0;
}
