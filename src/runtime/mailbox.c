/* mailbox.c - Vyukov's intrusive MPSC queue plus a libevent wakeup.
 *
 * Invariants: depth counts messages whose producer has begun its push and that the consumer has not
 * yet accounted for with mn_mpsc_done. A producer that moves depth from 0 wakes the consumer; the
 * consumer, after a batch, re-activates itself while depth stays above 0 (after the loop's next poll
 * when the batch was empty: a push in flight). Together: a queued message is always followed by a
 * wakeup that will take it, and an idle mailbox costs no wakeups.
 */
#include "runtime/mailbox.h"

#include <event2/event.h>

#include "util/alloc.h"
#include "util/log.h"

void mn_mpsc_init(mn_mpsc *q)
{
    atomic_store_explicit(&q->stub.next, NULL, memory_order_relaxed);
    atomic_store_explicit(&q->head, &q->stub, memory_order_relaxed);
    q->tail = &q->stub;
    atomic_store_explicit(&q->depth, 0, memory_order_relaxed);
}

static void link_node(mn_mpsc *q, mn_msg *m)
{
    atomic_store_explicit(&m->next, NULL, memory_order_relaxed);
    mn_msg *prev = atomic_exchange_explicit(&q->head, m, memory_order_acq_rel);
    atomic_store_explicit(&prev->next, m, memory_order_release);
}

bool mn_mpsc_push(mn_mpsc *q, mn_msg *m)
{
    bool was_empty = atomic_fetch_add_explicit(&q->depth, 1, memory_order_acq_rel) == 0;
    link_node(q, m);
    return was_empty;
}

mn_msg *mn_mpsc_pop(mn_mpsc *q)
{
    mn_msg *tail = q->tail;
    mn_msg *next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &q->stub) {
        if (!next)
            return NULL;
        q->tail = tail = next;
        next = atomic_load_explicit(&next->next, memory_order_acquire);
    }
    if (next) {
        q->tail = next;
        return tail;
    }
    if (tail != atomic_load_explicit(&q->head, memory_order_acquire))
        return NULL; /* a producer has swapped head but not linked yet */
    link_node(q, &q->stub); /* tail is the last message: put the stub behind it to detach it */
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (next) {
        q->tail = next;
        return tail;
    }
    return NULL;
}

size_t mn_mpsc_done(mn_mpsc *q, size_t n)
{
    return atomic_fetch_sub_explicit(&q->depth, n, memory_order_acq_rel) - n;
}

struct mn_mailbox {
    mn_mpsc q;
    struct event *ev;      /* active-only event on the owner's loop */
    mn_actor_fn handler;
    void *actor;
    unsigned batch;        /* most messages per wakeup */
    const char *name;      /* static string, for stats and logs */
};

static void mailbox_cb(evutil_socket_t fd, short what, void *arg)
{
    mn_mailbox *mb = arg;
    (void)fd, (void)what;
    size_t taken = 0;
    mn_msg *m;
    while (taken < mb->batch && (m = mn_mpsc_pop(&mb->q))) {
        taken++;
        mb->handler(mb->actor, m);
    }
    if (mn_mpsc_done(&mb->q, taken) == 0)
        return;
    if (taken) {
        event_active(mb->ev, EV_READ, 0); /* more: come back after the others */
    } else {
        /* a producer counted its message but has not linked it yet (it may have lost its core
         * between the two): come back after the loop has polled, as a timer of 0, so that the loop
         * neither spins on this event nor starves its sockets and timers meanwhile */
        static const struct timeval now = {0, 0};
        event_add(mb->ev, &now);
    }
}

mn_status mn_mailbox_new(struct event_base *base, const char *name, mn_actor_fn handler, void *actor, unsigned batch,
                         mn_mailbox **out, mn_err *err)
{
    mn_mailbox *mb = mn_calloc(1, sizeof *mb);
    if (!mb)
        return mn_fail(err, MN_NOMEM, "mailbox %s: out of memory", name);
    mn_mpsc_init(&mb->q);
    mb->handler = handler;
    mb->actor = actor;
    mb->batch = batch ? batch : 1;
    mb->name = name;
    if (!(mb->ev = event_new(base, -1, 0, mailbox_cb, mb))) {
        mn_free(mb);
        return mn_fail(err, MN_ERROR, "mailbox %s: event_new failed", name);
    }
    *out = mb;
    return MN_OK;
}

void mn_mailbox_set_actor(mn_mailbox *mb, void *actor)
{
    mb->actor = actor;
}

void mn_mailbox_free(mn_mailbox *mb)
{
    if (!mb)
        return;
    event_free(mb->ev);
    mn_free(mb);
}

void mn_mailbox_post(mn_mailbox *mb, mn_msg *m)
{
    if (mn_mpsc_push(&mb->q, m))
        event_active(mb->ev, EV_READ, 0);
}

size_t mn_mailbox_depth(const mn_mailbox *mb)
{
    return atomic_load_explicit(&mb->q.depth, memory_order_relaxed);
}

const char *mn_mailbox_name(const mn_mailbox *mb)
{
    return mb->name;
}
