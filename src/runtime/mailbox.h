/* mailbox.h - lock-free multi-producer single-consumer mailboxes: how actors receive messages.
 *
 * mn_mpsc is the queue itself (Vyukov's intrusive MPSC list): any thread pushes with one atomic
 * exchange; one consumer pops. Messages are intrusive: embed an mn_msg as the first member of the
 * payload struct, so posting allocates nothing and a message can live inside the object it is about.
 * A message is in at most one queue at a time; its owner may reuse it once the consumer has taken it.
 *
 * mn_mailbox couples a queue with an actor on a libevent loop: a post that makes the mailbox
 * non-empty (depth 0 -> 1) activates the loop's event, and the loop calls the actor's handler for
 * at most `batch` messages per wakeup, re-activating itself when more remain, so one busy actor
 * cannot starve the others on the same loop.
 *
 * Thread: mn_mpsc_push / mn_mailbox_post from any thread; mn_mpsc_pop and the handler only on the
 * consumer (the loop thread that owns the mailbox's event_base). The event_base must have been
 * created after evthread_use_pthreads() so event_active is safe from other threads.
 */
#ifndef MN_MAILBOX_H
#define MN_MAILBOX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

struct event_base;

typedef struct mn_msg {
    _Atomic(struct mn_msg *) next;  /* queue link; owned by the queue while queued */
    uint32_t type;                  /* meaning is the receiving actor's */
} mn_msg;

typedef struct mn_mpsc {
    _Atomic(mn_msg *) head;   /* last pushed (producers) */
    mn_msg *tail;             /* next to pop (consumer only) */
    mn_msg stub;              /* keeps the list non-empty */
    atomic_size_t depth;      /* messages pushed and not yet popped, counted before the push */
} mn_mpsc;

void mn_mpsc_init(mn_mpsc *q);
/* Push m; returns true when the queue was empty (the depth went 0 -> 1): wake the consumer. */
bool mn_mpsc_push(mn_mpsc *q, mn_msg *m);
/* Pop the oldest message, or NULL when none is ready. NULL with depth > 0 is transient: a producer
 * is between its two steps; try again. Each producer's messages come out in its push order. */
mn_msg *mn_mpsc_pop(mn_mpsc *q);
/* Account for n popped messages; returns the depth left (> 0: more to take). */
size_t mn_mpsc_done(mn_mpsc *q, size_t n);

typedef struct mn_mailbox mn_mailbox;
/* The actor's handler: it owns msg from here on (frees it, reuses it or posts it on). */
typedef void (*mn_actor_fn)(void *actor, mn_msg *msg);

/* A mailbox for `actor` on `base`; handler runs on the loop for up to `batch` messages per wakeup.
 * MN_NOMEM / MN_ERROR with a message. */
mn_status mn_mailbox_new(struct event_base *base, const char *name, mn_actor_fn handler, void *actor, unsigned batch,
                         mn_mailbox **out, mn_err *err);
/* Set the actor handed to the handler: actors that address each other are created after their
 * mailboxes. Loop thread, before the first message is handled. */
void mn_mailbox_set_actor(mn_mailbox *mb, void *actor);
/* Free the mailbox. Loop thread, with the loop stopped; messages still queued are not touched (their
 * owners free them). */
void mn_mailbox_free(mn_mailbox *mb);
/* Post m (any thread, lock-free); wakes the loop only on empty -> non-empty. */
void mn_mailbox_post(mn_mailbox *mb, mn_msg *m);
/* Messages waiting (approximate while producers run). */
size_t mn_mailbox_depth(const mn_mailbox *mb);
const char *mn_mailbox_name(const mn_mailbox *mb);

#endif
