/* kvmem.h - the KV-memory actor: admission, and the only code that changes block tables.
 *
 * It keeps the pending queue (FIFO, bounded by queue.max: past it a request ends with `busy`) and
 * the set of requests that hold KV. Admission reserves a request's whole length at once (intake
 * sized it: prompt + max_tokens + the speculation window, within the context), so the verifier never
 * waits for blocks mid-step; at most batch.max_sequences unpaused requests hold KV. A throttled
 * (paused) request keeps its blocks until they are needed: when the head of the queue cannot get
 * blocks, kvmem asks the verifier to give back the newest paused request (preempt_wanted + a kick);
 * the verifier returns it with MN_MSG_RELEASE, kvmem frees its blocks and queues it again, to be
 * recomputed once its client reads. Paused requests are skipped at admission, so clients that stop
 * reading can never hold the pool against those that read. With nothing running and nothing queued,
 * every block is free again.
 *
 * Messages in: ENQUEUE, RELEASE (mn_req), KICK, SET, STATS. Out: START to the verifier, DONE to the
 * client, KICK to the verifier.
 * Thread: the engine's loop.
 */
#ifndef MN_KVMEM_H
#define MN_KVMEM_H

#include "actors/msg.h"
#include "actors/request.h"
#include "mem/kv.h"

typedef struct mn_kvmem_config {
    mn_kv_pool *pool;            /* borrowed: the target's pool (its backend owns the storage) */
    uint32_t max_batch;          /* unpaused requests holding KV (live: batch.max_sequences) */
    uint32_t max_queue;          /* pending requests (live: queue.max) */
    const mn_addr *addr;         /* borrowed */
} mn_kvmem_config;

typedef struct mn_kvmem mn_kvmem;

mn_status mn_kvmem_new(const mn_kvmem_config *cfg, mn_kvmem **out, mn_err *err);
void mn_kvmem_handle(void *kvmem, mn_msg *m);
void mn_kvmem_free(mn_kvmem *k);

#endif
