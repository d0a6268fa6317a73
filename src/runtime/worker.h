/* worker.h - a compute worker: one thread that runs model jobs off the event loop.
 *
 * An actor submits a job ({run, reply_to}); the worker runs job->run(job) on its own thread (which may
 * drive a backend's fork-join pool) and then posts the job's message to reply_to, so the completion
 * re-enters the submitting actor's loop as an ordinary message. Jobs run one at a time in submission
 * order. The job is owned by the worker from submit until the post, then by the receiving actor.
 * The queue is bounded: at most `capacity` jobs may be submitted and not yet completed; past that
 * mn_worker_submit refuses with MN_BUSY and the job stays the caller's. minionsd runs the target's
 * and the drafts' jobs on one worker (they share the CPU's cores; see docs/architecture.md); a
 * worker per backend lets jobs run side by side where the hardware allows.
 *
 * Thread: mn_worker_submit from any thread (lock-free queue + a semaphore); new/free from the owner.
 */
#ifndef MN_WORKER_H
#define MN_WORKER_H

#include "runtime/mailbox.h"

typedef struct mn_job mn_job;
struct mn_job {
    mn_msg msg;               /* posted to reply_to when run returns; first member */
    void (*run)(mn_job *job); /* on the worker thread */
    mn_mailbox *reply_to;
};

typedef struct mn_worker mn_worker;

/* Start the thread; capacity >= 1 jobs may be outstanding. MN_NOMEM / MN_ERROR with a message. */
mn_status mn_worker_new(const char *name, unsigned capacity, mn_worker **out, mn_err *err);
/* Run the jobs already submitted, then stop and join the thread. */
void mn_worker_free(mn_worker *w);
/* Queue job. MN_BUSY when `capacity` jobs are outstanding (nothing is queued then). */
mn_status mn_worker_submit(mn_worker *w, mn_job *job);

#endif
