/* pool.h - a fork-join pool of compute threads for the CPU backend.
 *
 * mn_pool_run(p, fn, ctx) calls fn(ctx, i, n) once for every i in [0, n) where n is the pool size,
 * and returns when all calls have returned. The calls are claimed, not assigned: the caller and
 * the workers each take the next unclaimed i until none is left, so which thread runs which i
 * varies (fn may index per-i scratch, never per-thread state), and a worker that is not on a core
 * when a run starts (asleep, or queued behind other processes) leaves its share to the threads
 * that are. Workers spin briefly between runs (a decode step issues a few dozen runs) and then
 * sleep on a condition variable, so an idle pool costs no CPU; past ~100 us a waiting thread (a
 * worker, or the caller joining calls under way) yields its core at every round instead of
 * pausing, so a pool that shares its cores with other work does not hold a core the thread it
 * waits for needs.
 *
 * Thread: one thread at a time may call mn_pool_run (the backend's owner). fn must not call
 * mn_pool_run. Errors: mn_pool_new fails with MN_INVALID (a thread count outside 1..256), MN_NOMEM or
 * MN_ERROR (thread creation).
 */
#ifndef MN_POOL_H
#define MN_POOL_H

#include "util/status.h"

typedef struct mn_pool mn_pool;
typedef void (*mn_pool_fn)(void *ctx, int ith, int nth);

mn_status mn_pool_new(int n_threads, mn_pool **out, mn_err *err);
void mn_pool_free(mn_pool *p);
int mn_pool_size(const mn_pool *p);
void mn_pool_run(mn_pool *p, mn_pool_fn fn, void *ctx);

/* The [begin, end) share of thread ith out of nth for n items, in multiples of `align`. */
void mn_pool_split(int ith, int nth, unsigned n, unsigned align, unsigned *begin, unsigned *end);

#endif
