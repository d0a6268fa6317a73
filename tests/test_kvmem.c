/* test_kvmem.c - the KV-memory actor on its own: admission, preemption of paused requests and the
 * answers to cancelled ones, in the orders the other actors' messages can arrive in. The verifier and
 * the client are real mailboxes on a libevent loop whose handlers only record what kvmem sent them;
 * the test plays their part (hands requests back, cancels, throttles) by calling kvmem's handler. */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <string.h>

#include "actors/kvmem.h"
#include "actors/request.h"
#include "runtime/mailbox.h"

#define MAX_SEEN 16

/* What kvmem sent, in order: DONE lines to the client, STARTs and KICKs to the verifier. */
static struct {
    struct event_base *base;
    mn_mailbox *client, *verifier, *kvmem_mb;
    mn_kick kvmem_kick, verifier_kick;
    mn_addr addr;
    mn_kv_pool *pool, *draft_pool;
    mn_kvmem *kvmem;
    mn_req *done[MAX_SEEN], *started[MAX_SEEN];
    int n_done, n_started, n_kicks;
    mn_req *reqs[MAX_SEEN]; /* every request the test made, freed at the end */
    int n_reqs;
} t;

static void client_handler(void *actor, mn_msg *m)
{
    (void)actor;
    cr_assert_eq(m->type, MN_MSG_DONE, "the client got message %u", m->type);
    cr_assert_lt(t.n_done, MAX_SEEN);
    t.done[t.n_done++] = (mn_req *)m;
}

static void verifier_handler(void *actor, mn_msg *m)
{
    (void)actor;
    if (m->type == MN_MSG_KICK) {
        mn_kick_taken(&t.verifier_kick);
        t.n_kicks++;
        return;
    }
    cr_assert_eq(m->type, MN_MSG_START, "the verifier got message %u", m->type);
    cr_assert_lt(t.n_started, MAX_SEEN);
    t.started[t.n_started++] = (mn_req *)m;
}

static void unused_handler(void *actor, mn_msg *m)
{
    (void)actor;
    cr_assert_fail("kvmem's own mailbox is not used here (message %u)", m->type);
}

/* A target pool of 4 blocks of 16 positions, and a model drafter's pool of draft_blocks (none: 0). */
static void start_pools(uint32_t max_batch, uint32_t max_queue, uint32_t draft_blocks)
{
    memset(&t, 0, sizeof t);
    mn_err err;
    t.base = event_base_new();
    cr_assert(t.base);
    cr_assert_eq(mn_mailbox_new(t.base, "client", client_handler, NULL, 64, &t.client, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(mn_mailbox_new(t.base, "verifier", verifier_handler, NULL, 64, &t.verifier, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(mn_mailbox_new(t.base, "kvmem", unused_handler, NULL, 64, &t.kvmem_mb, &err), MN_OK, "%s", err.msg);
    t.addr = (mn_addr){.client = t.client, .kvmem = t.kvmem_mb, .verifier = t.verifier,
                       .kvmem_kick = &t.kvmem_kick, .verifier_kick = &t.verifier_kick};
    cr_assert_eq(mn_kv_pool_new_tables(1, 8, 16, 4, MN_KV_F32, &t.pool, &err), MN_OK, "%s", err.msg);
    mn_kvmem_config cfg = {.pool = t.pool, .max_batch = max_batch, .max_queue = max_queue, .addr = &t.addr};
    if (draft_blocks) {
        cr_assert_eq(mn_kv_pool_new_tables(1, 8, 16, draft_blocks, MN_KV_F32, &t.draft_pool, &err), MN_OK, "%s",
                     err.msg);
        cfg.draft_pools[0] = t.draft_pool;
        cfg.n_drafters = 1;
    }
    cr_assert_eq(mn_kvmem_new(&cfg, &t.kvmem, &err), MN_OK, "%s", err.msg);
}

static void start_queue(uint32_t max_batch, uint32_t max_queue) { start_pools(max_batch, max_queue, 0); }
static void start(uint32_t max_batch) { start_queue(max_batch, 8); }

static void stop(void)
{
    mn_kvmem_free(t.kvmem);
    for (int i = 0; i < t.n_reqs; i++)
        mn_req_free(t.reqs[i]);
    mn_kv_pool_free(t.pool);
    mn_kv_pool_free(t.draft_pool);
    mn_mailbox_free(t.client);
    mn_mailbox_free(t.verifier);
    mn_mailbox_free(t.kvmem_mb);
    event_base_free(t.base);
}

/* Deliver what kvmem posted. */
static void settle(void)
{
    for (int i = 0; i < 4; i++)
        event_base_loop(t.base, EVLOOP_NONBLOCK);
}

static void to_kvmem(mn_req *r, mn_msg_type type)
{
    r->msg.type = type;
    mn_kvmem_handle(t.kvmem, &r->msg);
    settle();
}

/* The client went away: it marks the request and kicks kvmem, whose KICK the test delivers when the
 * case wants it. */
static void cancel(mn_req *r)
{
    r->cancelled = true;
    r->conn = NULL;
}

static void deliver_kvmem_kick(void)
{
    t.kvmem_kick.queued = true;
    t.kvmem_kick.msg.type = MN_MSG_KICK;
    mn_kvmem_handle(t.kvmem, &t.kvmem_kick.msg);
    settle();
}

/* A queued request of n_prompt prompt tokens (first, first + 1, ...) that needs `need` positions of
 * KV, with a table per drafter when kvmem has a draft pool. */
static mn_req *request_of(const char *id, int32_t first, uint32_t n_prompt, uint32_t need)
{
    mn_req_params p = {0};
    p.id = strdup(id);
    p.max_tokens = need - n_prompt;
    mn_req *r = mn_req_new(&p, t.client, (void *)1);
    cr_assert(r);
    for (uint32_t i = 0; i < n_prompt; i++)
        cr_assert_eq(mn_tokens_push(&r->toks, first + (int32_t)i), MN_OK);
    r->n_prompt = n_prompt;
    r->kv_need = need;
    if (t.draft_pool)
        cr_assert(r->spec.d = calloc(1, sizeof *r->spec.d));
    cr_assert(mn_req_event(r, MN_REQ_EV_QUEUED));
    t.reqs[t.n_reqs++] = r;
    return r;
}

static mn_req *request(const char *id, uint32_t need) { return request_of(id, 10, 3, need); }

/* The verifier hands r back finished. */
static void finish(mn_req *r)
{
    cr_assert(mn_req_event(r, MN_REQ_EV_FINISHED));
    r->finish = "length";
    to_kvmem(r, MN_MSG_RELEASE);
}

/* A paused request holding the whole pool, and a reader queued behind it that made kvmem ask the
 * verifier for the paused one's blocks. */
static void paused_victim_and_reader(mn_req **victim, mn_req **reader)
{
    *victim = request("victim", 64);
    to_kvmem(*victim, MN_MSG_ENQUEUE);
    cr_assert_eq(t.n_started, 1);
    cr_assert_eq((*victim)->state, MN_REQ_ADMITTED);
    cr_assert(mn_req_event(*victim, MN_REQ_EV_THROTTLED));
    cr_assert_eq((*victim)->state, MN_REQ_PAUSED);

    *reader = request("reader", 16);
    to_kvmem(*reader, MN_MSG_ENQUEUE);
    cr_assert((*victim)->preempt_wanted, "kvmem did not ask for the paused request's blocks");
    cr_assert_eq(t.n_kicks, 1, "the verifier was not kicked to give the paused request back");
    cr_assert_eq(t.n_started, 1, "the reader started without blocks");
}

Test(kvmem, preempted_paused_request_is_recomputed_when_its_client_reads)
{
    start(4);
    mn_req *victim, *reader;
    paused_victim_and_reader(&victim, &reader);

    to_kvmem(victim, MN_MSG_RELEASE);
    cr_assert_eq(victim->state, MN_REQ_PREEMPTED);
    cr_assert_eq(t.n_started, 2);
    cr_assert_eq(t.started[1], reader, "the reader did not get the freed blocks");

    finish(reader);
    cr_assert_eq(t.n_done, 1);
    cr_assert_eq(t.done[0], reader);
    cr_assert_eq(t.n_started, 2, "a throttled request was admitted");

    cr_assert(mn_req_event(victim, MN_REQ_EV_RESUMED)); /* its client reads again and kicks kvmem */
    deliver_kvmem_kick();
    cr_assert_eq(t.n_started, 3);
    cr_assert_eq(t.started[2], victim);
    cr_assert_eq(victim->state, MN_REQ_ADMITTED);
    cr_assert_eq(mn_kv_used(t.pool), 4);

    finish(victim);
    cr_assert_eq(mn_kv_used(t.pool), 0, "blocks leaked");
    stop();
}

/* The order a forced drain produces: the client's close kicks kvmem before the verifier's RELEASE of
 * the preempted request (which goes through the voter and the drafters) lands. The KICK finds
 * nothing queued to drop; the request must be answered when it comes back, not queued throttled for
 * ever (it was, once: the drain then waited on it until its deadline). */
Test(kvmem, cancelled_request_on_its_way_back_from_preemption_is_answered)
{
    start(4);
    mn_req *victim, *reader;
    paused_victim_and_reader(&victim, &reader);

    cancel(victim);
    deliver_kvmem_kick();
    cr_assert_eq(t.n_done, 0);
    to_kvmem(victim, MN_MSG_RELEASE);
    cr_assert_eq(t.n_done, 1, "the cancelled request was not answered");
    cr_assert_eq(t.done[0], victim);
    cr_assert_str_eq(victim->finish, "cancelled");
    cr_assert_eq(victim->state, MN_REQ_FINISHED);
    cr_assert_eq(t.n_started, 2);
    cr_assert_eq(t.started[1], reader);

    finish(reader);
    cr_assert_eq(t.n_done, 2);
    cr_assert_eq(mn_kv_used(t.pool), 0, "blocks leaked");
    stop();
}

/* A queued request whose client went, its KICK not yet delivered when a slot frees: it is answered
 * there and never started (the verifier would only end it). */
Test(kvmem, cancelled_queued_request_is_answered_not_started)
{
    start(1);
    mn_req *running = request("running", 16), *waiting = request("waiting", 16);
    to_kvmem(running, MN_MSG_ENQUEUE);
    to_kvmem(waiting, MN_MSG_ENQUEUE);
    cr_assert_eq(t.n_started, 1, "max_batch 1 started two");

    cancel(waiting);
    finish(running);
    cr_assert_eq(t.n_started, 1, "the cancelled request was started");
    cr_assert_eq(t.n_done, 2);
    cr_assert_eq(t.done[0], running);
    cr_assert_eq(t.done[1], waiting);
    cr_assert_str_eq(waiting->finish, "cancelled");
    cr_assert_eq(mn_kv_used(t.pool), 0, "blocks leaked");
    stop();
}

/* Paused requests that fill every place kvmem holds (max_batch + max_queue of them) while the pool
 * still has blocks: a reader must not wait behind them for ever (it did: admission stopped at the
 * bound without asking for any back); the newest paused one is preempted for it. */
Test(kvmem, paused_requests_filling_every_place_are_preempted_for_a_reader)
{
    start_queue(1, 1);
    mn_req *paused[2];
    for (int i = 0; i < 2; i++) {
        paused[i] = request(i ? "paused1" : "paused0", 16);
        to_kvmem(paused[i], MN_MSG_ENQUEUE);
        cr_assert_eq(t.n_started, i + 1);
        cr_assert(mn_req_event(paused[i], MN_REQ_EV_THROTTLED));
        deliver_kvmem_kick(); /* its client stopped reading: the batch slot is free */
    }
    cr_assert_eq(mn_kv_used(t.pool), 2, "the pool still has room");

    mn_req *reader = request("reader", 16);
    to_kvmem(reader, MN_MSG_ENQUEUE);
    cr_assert_eq(t.n_started, 2, "a third request held KV beside two paused ones in two places");
    cr_assert(paused[1]->preempt_wanted, "kvmem did not ask for the newest paused request back");
    cr_assert_not(paused[0]->preempt_wanted);

    to_kvmem(paused[1], MN_MSG_RELEASE);
    cr_assert_eq(paused[1]->state, MN_REQ_PREEMPTED);
    cr_assert_eq(t.n_started, 3);
    cr_assert_eq(t.started[2], reader, "the reader did not take the freed place");

    finish(reader);
    cr_assert(mn_req_event(paused[1], MN_REQ_EV_RESUMED));
    deliver_kvmem_kick();
    cr_assert_eq(t.n_started, 4);
    cr_assert_eq(t.started[3], paused[1], "the preempted request was not recomputed once its client read");
    finish(paused[1]);
    cr_assert(mn_req_event(paused[0], MN_REQ_EV_RESUMED));
    deliver_kvmem_kick();
    finish(paused[0]);
    cr_assert_eq(t.n_done, 3);
    cr_assert_eq(mn_kv_used(t.pool), 0, "blocks leaked");
    stop();
}

/* The victim's client reads again before the verifier looks: the verifier keeps it (given back, it
 * was queued first and, no longer throttled, took its blocks back before the reader it was preempted
 * for: its KV recomputed for nothing), clears preempt_wanted and kicks kvmem, which asks for the
 * next paused request instead. kvmem had counted the first ask as on its way for ever, and the
 * reader waited for a running request to finish. */
Test(kvmem, a_victim_that_resumes_is_kept_and_another_is_asked_for)
{
    start(4);
    mn_req *older = request("older", 32), *newer = request("newer", 32);
    to_kvmem(older, MN_MSG_ENQUEUE);
    to_kvmem(newer, MN_MSG_ENQUEUE);
    cr_assert_eq(t.n_started, 2);
    cr_assert(mn_req_event(older, MN_REQ_EV_THROTTLED) && mn_req_event(newer, MN_REQ_EV_THROTTLED));
    mn_req *reader = request("reader", 16);
    to_kvmem(reader, MN_MSG_ENQUEUE);
    cr_assert(newer->preempt_wanted && !older->preempt_wanted, "the newest paused one is asked for");

    cr_assert(mn_req_event(newer, MN_REQ_EV_RESUMED)); /* its client reads again */
    deliver_kvmem_kick();
    cr_assert_not(older->preempt_wanted, "one ask at a time");
    newer->preempt_wanted = false; /* the verifier, finding it running, keeps it and kicks kvmem */
    deliver_kvmem_kick();
    cr_assert(older->preempt_wanted, "kvmem did not ask for the other paused request");

    to_kvmem(older, MN_MSG_RELEASE);
    cr_assert_eq(older->state, MN_REQ_PREEMPTED);
    cr_assert_eq(t.n_started, 3);
    cr_assert_eq(t.started[2], reader, "the reader got the freed blocks");
    finish(reader);
    finish(newer);
    cr_assert(mn_req_event(older, MN_REQ_EV_RESUMED));
    deliver_kvmem_kick();
    cr_assert_eq(t.started[3], older);
    finish(older);
    cr_assert_eq(mn_kv_used(t.pool), 0, "blocks leaked");
    stop();
}

/* A preempted request whose client went while it came back, the batch full by then (a paused
 * request's client read again): answered at once, not once a slot frees. */
Test(kvmem, cancelled_request_back_from_preemption_does_not_wait_for_a_slot)
{
    start_queue(1, 8);
    mn_req *other = request("other", 16), *victim = request("victim", 32);
    to_kvmem(other, MN_MSG_ENQUEUE);
    cr_assert(mn_req_event(other, MN_REQ_EV_THROTTLED));
    deliver_kvmem_kick();
    to_kvmem(victim, MN_MSG_ENQUEUE);
    cr_assert(mn_req_event(victim, MN_REQ_EV_THROTTLED));
    deliver_kvmem_kick();
    cr_assert_eq(t.n_started, 2);

    mn_req *reader = request("reader", 32);
    to_kvmem(reader, MN_MSG_ENQUEUE);
    cr_assert(victim->preempt_wanted, "kvmem did not ask for the newest paused request's blocks");
    cancel(victim);
    cr_assert(mn_req_event(other, MN_REQ_EV_RESUMED)); /* the batch of one is full again */
    to_kvmem(victim, MN_MSG_RELEASE);
    cr_assert_eq(t.n_done, 1, "the cancelled request waited for a batch slot");
    cr_assert_eq(t.done[0], victim);
    cr_assert_str_eq(victim->finish, "cancelled");

    finish(other);
    cr_assert_eq(t.n_started, 3);
    cr_assert_eq(t.started[2], reader);
    finish(reader);
    cr_assert_eq(mn_kv_used(t.pool), 0, "blocks leaked");
    stop();
}

/* A request that fits the target's pool only by evicting cached blocks, beside a draft pool without
 * room: it waits, and the target's prefix cache keeps its blocks (the target's reservation evicted
 * them before the draft pool refused, once). */
Test(kvmem, a_draft_pool_without_room_evicts_no_cached_target_blocks)
{
    start_pools(4, 8, 2);
    cr_assert_eq(mn_kv_prefix_enable(t.pool), MN_OK);
    mn_req *cached = request_of("cached", 100, 17, 32);
    to_kvmem(cached, MN_MSG_ENQUEUE);
    cached->kv.len = 17; /* the verifier wrote the prompt: its first block goes to the cache */
    finish(cached);
    cr_assert_eq(t.pool->n_idle, 1);

    mn_req *holder = request_of("holder", 200, 3, 32), *waiter = request_of("waiter", 300, 3, 32);
    to_kvmem(holder, MN_MSG_ENQUEUE);
    cr_assert_eq(t.n_started, 2);
    cr_assert_eq(t.draft_pool->n_free, 0, "the draft pool should be full");
    to_kvmem(waiter, MN_MSG_ENQUEUE);
    cr_assert_eq(t.n_started, 2, "the waiter started without draft blocks");
    cr_assert_eq(t.pool->n_idle, 1, "the target's cached block was evicted for a reservation that failed");
    cr_assert_eq(mn_kv_used(t.pool), 2);

    finish(holder);
    cr_assert_eq(t.n_started, 3);
    cr_assert_eq(t.started[2], waiter);
    finish(waiter);
    cr_assert_eq(mn_kv_used(t.pool), 0, "target blocks leaked");
    cr_assert_eq(mn_kv_used(t.draft_pool), 0, "draft blocks leaked");
    stop();
}
