/* kvmem.c - the KV-memory actor (see kvmem.h). */
#include "serve/kvmem.h"

#include "util/alloc.h"
#include "util/log.h"

struct mn_kvmem {
    mn_engine *e;
    mn_kv_pool *pool;     /* the target's, owned by the backend */
    mn_req **queue;       /* ring of pending requests */
    uint32_t q_cap, q_head, q_len;
    mn_req **running;     /* [max_running] */
    uint32_t n_running;
    uint64_t serial;
};

mn_status mn_kvmem_new(mn_engine *e, mn_kvmem **out, mn_err *err)
{
    mn_kvmem *k = mn_calloc(1, sizeof *k);
    if (!k)
        return mn_fail(err, MN_NOMEM, "kvmem: out of memory");
    k->e = e;
    k->pool = e->be->kv;
    k->q_cap = e->max_queue_cap + e->max_running; /* preempted requests come back on top */
    k->queue = mn_calloc(k->q_cap, sizeof *k->queue);
    k->running = mn_calloc(e->max_running, sizeof *k->running);
    if (!k->queue || !k->running) {
        mn_kvmem_free(k);
        return mn_fail(err, MN_NOMEM, "kvmem: out of memory");
    }
    *out = k;
    return MN_OK;
}

void mn_kvmem_free(mn_kvmem *k)
{
    if (!k)
        return;
    mn_free(k->queue);
    mn_free(k->running);
    mn_free(k);
}

uint32_t mn_kvmem_queued(const mn_kvmem *k) { return k->q_len; }
uint32_t mn_kvmem_running(const mn_kvmem *k) { return k->n_running; }

static void to_net(mn_kvmem *k, mn_req *r)
{
    r->stage = MN_REQ_FINISHED;
    r->msg.type = MN_MSG_DONE;
    mn_mailbox_post(k->e->net_mb, &r->msg);
}

static mn_req *queue_at(mn_kvmem *k, uint32_t i) { return k->queue[(k->q_head + i) % k->q_cap]; }

static mn_req *queue_pop(mn_kvmem *k)
{
    mn_req *r = k->queue[k->q_head];
    k->q_head = (k->q_head + 1) % k->q_cap;
    k->q_len--;
    return r;
}

static void queue_push_front(mn_kvmem *k, mn_req *r)
{
    k->q_head = (k->q_head + k->q_cap - 1) % k->q_cap;
    k->queue[k->q_head] = r;
    k->q_len++;
}

static void running_remove(mn_kvmem *k, mn_req *r)
{
    for (uint32_t i = 0; i < k->n_running; i++)
        if (k->running[i] == r) {
            k->running[i] = k->running[--k->n_running];
            return;
        }
}

/* Answer cancelled requests that are still waiting. */
static void drop_cancelled(mn_kvmem *k)
{
    uint32_t kept = 0, n = k->q_len;
    for (uint32_t i = 0; i < n; i++) {
        mn_req *r = queue_at(k, i);
        if (r->cancelled) {
            r->finish = "cancelled";
            to_net(k, r);
        } else {
            k->queue[(k->q_head + kept++) % k->q_cap] = r;
        }
    }
    k->q_len = kept;
}

/* Running requests that can run (their client reads); paused ones do not hold a batch slot. */
static uint32_t active(const mn_kvmem *k)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < k->n_running; i++)
        n += !mn_req_paused(k->running[i]);
    return n;
}

/* Start queued requests, oldest first, while the batch has room and the pool has blocks. */
static void try_admit(mn_kvmem *k)
{
    uint32_t n_active = active(k);
    while (k->q_len && k->n_running < k->e->max_running && n_active < k->e->max_batch) {
        mn_req *r = queue_at(k, 0);
        if (mn_kv_reserve(k->pool, &r->kv, (uint32_t)r->toks.n) != MN_OK)
            return; /* head-of-line waits for blocks: admission stays FIFO */
        queue_pop(k);
        r->serial = ++k->serial;
        r->stage = MN_REQ_RUNNING;
        r->preempted = false;
        k->running[k->n_running++] = r;
        n_active += !mn_req_paused(r);
        r->msg.type = MN_MSG_START;
        mn_mailbox_post(k->e->verifier_mb, &r->msg);
    }
}

/* Take the blocks of the newest paused request, else of the newest running one; it goes back to
 * the head of the queue. */
static mn_req *preempt_newest(mn_kvmem *k)
{
    mn_req *victim = NULL;
    for (uint32_t i = 0; i < k->n_running; i++) {
        mn_req *r = k->running[i];
        bool better = !victim || mn_req_paused(r) > mn_req_paused(victim) ||
                      (mn_req_paused(r) == mn_req_paused(victim) && r->serial > victim->serial);
        if (better)
            victim = r;
    }
    if (!victim)
        return NULL;
    running_remove(k, victim);
    mn_kv_seq_release(k->pool, &victim->kv);
    victim->preempted = true;
    victim->stage = MN_REQ_QUEUED;
    queue_push_front(k, victim);
    k->e->stats.preemptions++;
    mn_log(MN_LOG_DEBUG, "kvmem: pool dry, preempted request %s (%zu tokens to recompute)", victim->p.id,
           victim->toks.n);
    return victim;
}

static void grow(mn_kvmem *k, mn_kv_grow *g)
{
    for (uint32_t i = 0; i < g->n; i++) {
        mn_req *r = g->reqs[i];
        while (r->stage == MN_REQ_RUNNING) {
            mn_status st = mn_kv_reserve(k->pool, &r->kv, g->need[i]);
            if (st == MN_OK)
                break;
            if (st != MN_BUSY) {
                mn_req_fail(r, MN_E_INTERNAL, "out of memory for the KV block table");
                r->cancelled = true;
                break;
            }
            if (!preempt_newest(k))
                break; /* cannot happen: intake checked that one request fits the pool */
        }
    }
    g->msg.type = MN_MSG_GROWN;
    mn_mailbox_post(k->e->verifier_mb, &g->msg);
}

void mn_kvmem_handle(void *kvmem, mn_msg *m)
{
    mn_kvmem *k = kvmem;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_ENQUEUE: {
        mn_req *r = (mn_req *)m;
        if (r->cancelled) {
            r->finish = "cancelled";
            to_net(k, r);
        } else if (k->q_len >= k->e->max_queue) {
            mn_req_fail(r, MN_E_BUSY, "the queue is full (%u requests waiting); retry later", k->q_len);
            to_net(k, r);
        } else {
            k->queue[(k->q_head + k->q_len++) % k->q_cap] = r;
        }
        try_admit(k);
        break;
    }
    case MN_MSG_FINISH: {
        mn_req *r = (mn_req *)m;
        running_remove(k, r);
        mn_kv_seq_release(k->pool, &r->kv);
        to_net(k, r);
        try_admit(k);
        break;
    }
    case MN_MSG_GROW:
        grow(k, (mn_kv_grow *)m);
        break;
    case MN_MSG_KICK:
        mn_kick_taken(&k->e->kvmem_kick);
        drop_cancelled(k);
        try_admit(k);
        break;
    default:
        mn_log(MN_LOG_ERROR, "kvmem: unexpected message %u", m->type);
    }
}
