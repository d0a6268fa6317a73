/* kvmem.h - the KV-memory actor: admission, and the only code that changes block tables.
 *
 * It keeps the pending queue (FIFO, bounded by queue.max: past it a request ends with `busy`) and
 * the set of requests that hold KV. Admission reserves a request's whole length at once (intake
 * sized it: prompt + max_tokens, within the context; drafts are capped inside it), so the verifier never
 * waits for blocks mid-step; admission stops at batch.max_sequences unpaused requests holding KV
 * (a paused one's place goes to the next reader, and when it reads again both hold KV: the
 * verifier steps the older ones first, batch.max_sequences a step, until one ends). A throttled
 * (paused) request keeps its blocks until they are needed: when the head of the queue cannot get
 * blocks, or paused requests fill every place kvmem holds requests in (queue.max of them beside a
 * full batch), kvmem asks the verifier to give back the newest paused request (preempt_wanted + a kick);
 * the verifier returns it with MN_MSG_RELEASE (or, when its client reads again first, keeps it,
 * clears preempt_wanted and kicks kvmem, which asks for the next), kvmem frees its blocks and queues it again, to be
 * recomputed once its client reads. Paused requests are skipped at admission, so clients that stop
 * reading can never hold the pool against those that read. A cancelled request in the queue is
 * answered at the next message kvmem handles (a KICK, an ENQUEUE, a RELEASE), throttled or not,
 * and whether the batch has room or not (so too one handed back preempted after its client went).
 * With nothing running and nothing queued, every block is free again.
 *
 * Drafts: each model drafter has its own pool, as large as the target's in positions; admission
 * reserves the request's whole length in every one of them too (spec.d[i].kv), all or nothing,
 * and release returns them all. Rolling back rejected draft tokens never changes a table: the
 * blocks of the whole length stay reserved, so the verifier and the drafters roll back by lowering
 * a sequence's KV length, between passes of their own (see the design note in docs/architecture.md).
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
    mn_kv_pool *draft_pools[MN_MAX_DRAFTERS]; /* borrowed: each model drafter's pool, NULL for n-gram */
    uint32_t n_drafters;
    uint32_t max_batch;          /* unpaused requests holding KV (live: batch.max_sequences) */
    uint32_t max_queue;          /* pending requests (live: queue.max) */
    const mn_addr *addr;         /* borrowed */
} mn_kvmem_config;

typedef struct mn_kvmem mn_kvmem;

mn_status mn_kvmem_new(const mn_kvmem_config *cfg, mn_kvmem **out, mn_err *err);
void mn_kvmem_handle(void *kvmem, mn_msg *m);
void mn_kvmem_free(mn_kvmem *k);

#endif
