/* kvmem.c - the KV-memory actor (see kvmem.h).
 *
 * Invariants: every request in held[] is ADMITTED, RUNNING or PAUSED and owns exactly the blocks of
 * its kv table; the queue holds QUEUED and PREEMPTED requests, which own none; at most one
 * preemption is asked for at a time (a held request with preempt_wanted), so a dry pool gives back
 * one paused request per admission that needs it. */
#include "actors/kvmem.h"

#include "util/alloc.h"
#include "util/log.h"

struct mn_kvmem {
    mn_kvmem_config cfg;      /* max_batch, max_queue: the live values */
    uint32_t max_batch_cap, max_queue_cap;
    mn_req **queue;           /* ring of pending requests */
    uint32_t q_cap, q_head, q_len;
    mn_req **held;            /* [max_held] requests holding KV */
    uint32_t n_held, max_held;
    uint64_t serial, preemptions;
    uint64_t adopted;         /* prompt positions admitted requests took from the prefix cache */
    uint64_t draft_adopted;   /* the same, summed over the draft pools */
};

mn_status mn_kvmem_new(const mn_kvmem_config *cfg, mn_kvmem **out, mn_err *err)
{
    mn_kvmem *k = mn_calloc(1, sizeof *k);
    if (!k)
        return mn_fail(err, MN_NOMEM, "kvmem: out of memory");
    k->cfg = *cfg;
    k->max_batch_cap = cfg->max_batch;
    k->max_queue_cap = cfg->max_queue;
    k->max_held = cfg->max_batch + cfg->max_queue; /* paused requests hold KV beside a full batch */
    k->q_cap = cfg->max_queue + k->max_held;       /* preempted requests come back on top */
    k->queue = mn_calloc(k->q_cap, sizeof *k->queue);
    k->held = mn_calloc(k->max_held, sizeof *k->held);
    if (!k->queue || !k->held) {
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
    mn_free(k->held);
    mn_free(k);
}

static void to_client(mn_kvmem *k, mn_req *r)
{
    if (r->state != MN_REQ_FINISHED) /* the verifier already ended the ones it hands back */
        mn_req_event(r, MN_REQ_EV_FINISHED);
    r->msg.type = MN_MSG_DONE;
    mn_mailbox_post(r->owner, &r->msg);
}

/* Every pool's blocks back, nothing filed in a prefix cache. */
static void drop_kv(mn_kvmem *k, mn_req *r)
{
    mn_kv_seq_release(k->cfg.pool, &r->kv);
    for (uint32_t i = 0; i < k->cfg.n_drafters; i++)
        if (k->cfg.draft_pools[i])
            mn_kv_seq_release(k->cfg.draft_pools[i], &r->spec.d[i].kv);
}

/* Reserve r's whole length in the target's pool and every draft pool: all or nothing, and a pool
 * evicts cached blocks only when every pool can give its share (asked first). Each table starts with
 * what its pool's prefix cache holds of r's tokens (all but the last: the target's first pass must
 * give its logits, and a drafter feeds it to draft). */
static mn_status reserve(mn_kvmem *k, mn_req *r)
{
    uint32_t last = (uint32_t)r->toks.n - 1, adopted = mn_kv_adopt(k->cfg.pool, &r->kv, r->toks.ids, last);
    uint64_t draft_adopted = 0;
    bool fits = mn_kv_fits(k->cfg.pool, &r->kv, r->kv_need);
    for (uint32_t i = 0; i < k->cfg.n_drafters; i++) {
        mn_kv_pool *pool = k->cfg.draft_pools[i];
        mn_req_draft *x = &r->spec.d[i];
        x->prop_len = 0; /* a proposal from before a preemption is no round's now (not even the n-gram's) */
        if (!pool)
            continue;
        x->prop_at = mn_kv_adopt(pool, &x->kv, r->toks.ids, last); /* [0, prop_at): r's tokens, no proposal */
        draft_adopted += x->prop_at;
        fits = fits && mn_kv_fits(pool, &x->kv, r->kv_need);
    }
    mn_status st = fits ? mn_kv_reserve(k->cfg.pool, &r->kv, r->kv_need) : MN_BUSY;
    for (uint32_t i = 0; st == MN_OK && i < k->cfg.n_drafters; i++)
        if (k->cfg.draft_pools[i])
            st = mn_kv_reserve(k->cfg.draft_pools[i], &r->spec.d[i].kv, r->kv_need);
    if (st != MN_OK) {
        drop_kv(k, r); /* adopted blocks go back to their caches, idle */
        return st;
    }
    k->adopted += adopted;
    k->draft_adopted += draft_adopted;
    return MN_OK;
}

/* Full blocks go to the prefix caches under r's tokens: the target's as far as its KV holds them
 * (the verifier hands r back between steps; a request that finished inside an accepted draft, at a
 * stop string or the end of text, has KV past its last token, of draft tokens it never took), a
 * draft pool's only as far as the drafter's positions hold r's tokens (past them it fed itself
 * proposals the target did not keep). */
static void release_kv(mn_kvmem *k, mn_req *r)
{
    if (r->kv.len > r->toks.n)
        r->kv.len = (uint32_t)r->toks.n;
    mn_kv_seq_release_prefix(k->cfg.pool, &r->kv, r->toks.ids);
    for (uint32_t i = 0; i < k->cfg.n_drafters; i++)
        if (k->cfg.draft_pools[i]) {
            mn_req_draft *x = &r->spec.d[i];
            x->kv.len = mn_req_draft_valid(x, r);
            mn_kv_seq_release_prefix(k->cfg.draft_pools[i], &x->kv, r->toks.ids);
        }
}

static mn_req **queue_slot(mn_kvmem *k, uint32_t i) { return &k->queue[(k->q_head + i) % k->q_cap]; }

static void queue_remove(mn_kvmem *k, uint32_t i)
{
    for (; i + 1 < k->q_len; i++)
        *queue_slot(k, i) = *queue_slot(k, i + 1);
    k->q_len--;
}

static void queue_push_front(mn_kvmem *k, mn_req *r)
{
    k->q_head = (k->q_head + k->q_cap - 1) % k->q_cap;
    k->queue[k->q_head] = r;
    k->q_len++;
}

static void held_remove(mn_kvmem *k, mn_req *r)
{
    for (uint32_t i = 0; i < k->n_held; i++)
        if (k->held[i] == r) {
            k->held[i] = k->held[--k->n_held];
            return;
        }
}

static void answer_cancelled(mn_kvmem *k, mn_req *r)
{
    r->finish = "cancelled";
    to_client(k, r);
}

/* Answer cancelled requests that are still waiting. */
static void drop_cancelled(mn_kvmem *k)
{
    for (uint32_t i = 0; i < k->q_len;) {
        mn_req *r = *queue_slot(k, i);
        if (r->cancelled) {
            queue_remove(k, i);
            answer_cancelled(k, r);
        } else {
            i++;
        }
    }
}

/* Ask the verifier for the blocks of the newest paused request. Returns false when there is none
 * (the head then waits for a running request to finish). One asked for and not yet returned is
 * enough: admission resumes when it lands, or, when its client read again before the verifier
 * looked (the verifier then keeps it, clears preempt_wanted and kicks kvmem), with another. */
static bool preempt_a_paused_one(mn_kvmem *k)
{
    mn_req *victim = NULL;
    for (uint32_t i = 0; i < k->n_held; i++) {
        mn_req *r = k->held[i];
        if (r->preempt_wanted)
            return true;
        if (r->state == MN_REQ_PAUSED && (!victim || r->serial > victim->serial))
            victim = r;
    }
    if (!victim)
        return false;
    victim->preempt_wanted = true;
    mn_kick_verifier(k->cfg.addr);
    return true;
}

/* Start queued requests whose clients read, oldest first, while the batch has room and the pool has
 * blocks (preempting paused requests for them, as when paused requests fill every place held[] has:
 * max_queue of them beside a full batch). A throttled one waits in place for its client. */
static void try_admit(mn_kvmem *k)
{
    drop_cancelled(k); /* not worth a START (the verifier would only end it), nor a wait for a slot */
    uint32_t n_active = 0;
    for (uint32_t i = 0; i < k->n_held; i++)
        n_active += k->held[i]->state != MN_REQ_PAUSED;
    for (uint32_t i = 0; i < k->q_len && n_active < k->cfg.max_batch;) {
        mn_req *r = *queue_slot(k, i);
        if (r->throttled) {
            i++;
            continue;
        }
        mn_status st = k->n_held < k->max_held ? reserve(k, r) : MN_BUSY;
        if (st == MN_BUSY) {
            preempt_a_paused_one(k);
            return; /* head-of-line waits for blocks: admission stays FIFO among readers */
        }
        queue_remove(k, i);
        if (st != MN_OK) {
            mn_req_fail(r, MN_E_INTERNAL, "out of memory for the KV block table");
            to_client(k, r);
            continue;
        }
        r->serial = ++k->serial;
        mn_req_event(r, MN_REQ_EV_ADMITTED);
        k->held[k->n_held++] = r;
        n_active++;
        r->msg.type = MN_MSG_START;
        mn_mailbox_post(k->cfg.addr->verifier, &r->msg);
    }
}

static void enqueue(mn_kvmem *k, mn_req *r)
{
    if (r->cancelled) {
        answer_cancelled(k, r);
    } else if (k->q_len >= k->cfg.max_queue) {
        mn_req_fail(r, MN_E_BUSY, "the queue is full (%u requests waiting); retry later", k->q_len);
        to_client(k, r);
    } else {
        *queue_slot(k, k->q_len++) = r;
    }
}

/* The verifier handed r back: it finished, or it was paused and asked for (preempt_wanted). A
 * preempted request whose client went while it was on its way back (the KICK of its cancellation
 * may have come first) is queued like any other and answered by the try_admit that follows. */
static void release(mn_kvmem *k, mn_req *r)
{
    held_remove(k, r);
    release_kv(k, r);
    if (r->preempt_wanted) {
        r->preempt_wanted = false;
        if (r->state != MN_REQ_FINISHED) {
            mn_req_event(r, MN_REQ_EV_PREEMPTED);
            queue_push_front(k, r);
            k->preemptions++;
            mn_log(MN_LOG_DEBUG, "kvmem: preempted paused request %s (%zu tokens to recompute)", r->p.id, r->toks.n);
            return;
        }
    }
    to_client(k, r);
}

static void stats(mn_kvmem *k, mn_stats_part *q)
{
    uint32_t paused = 0;
    for (uint32_t i = 0; i < k->n_held; i++)
        paused += k->held[i]->state == MN_REQ_PAUSED;
    q->stats->kvmem.running = k->n_held;
    q->stats->kvmem.paused = paused;
    q->stats->kvmem.queued = k->q_len;
    q->stats->kvmem.preemptions = k->preemptions;
    q->stats->kvmem.kv_used = mn_kv_used(k->cfg.pool);
    q->stats->kvmem.kv_free = k->cfg.pool->n_free;
    q->stats->kvmem.kv_total = k->cfg.pool->n_blocks;
    q->stats->kvmem.kv_cached = k->cfg.pool->n_idle;
    q->stats->kvmem.kv_adopted = k->adopted;
    q->stats->kvmem.draft_kv_adopted = k->draft_adopted;
    for (uint32_t i = 0; i < k->cfg.n_drafters; i++)
        if (k->cfg.draft_pools[i])
            q->stats->kvmem.draft_kv_used += mn_kv_used(k->cfg.draft_pools[i]);
    mn_stats_reply(q);
}

void mn_kvmem_handle(void *kvmem, mn_msg *m)
{
    mn_kvmem *k = kvmem;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_ENQUEUE:
        enqueue(k, (mn_req *)m);
        break;
    case MN_MSG_RELEASE:
        release(k, (mn_req *)m);
        break;
    case MN_MSG_KICK:
        mn_kick_taken(k->cfg.addr->kvmem_kick); /* try_admit answers the cancelled ones */
        break;
    case MN_MSG_SET: {
        mn_setting *s = (mn_setting *)m;
        if (s->key == MN_SET_MAX_BATCH && s->value >= 1 && s->value <= k->max_batch_cap)
            k->cfg.max_batch = s->value;
        else if (s->key == MN_SET_MAX_QUEUE && s->value >= 1 && s->value <= k->max_queue_cap)
            k->cfg.max_queue = s->value;
        mn_free(s);
        break;
    }
    case MN_MSG_STATS:
        stats(k, (mn_stats_part *)m);
        return;
    default:
        mn_log(MN_LOG_ERROR, "kvmem: unexpected message %u", m->type);
        return;
    }
    try_admit(k);
}
