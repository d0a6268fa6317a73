/* engine.c - wiring: the loop, the model and its backend, the worker, the actors, the sockets,
 * signals and the drain. */
#include "serve/engine_impl.h"

#include <event2/thread.h>
#include <signal.h>
#include <string.h>

#include "net/admin.h"
#include "net/conn.h"
#include "util/alloc.h"
#include "util/log.h"

#define MAILBOX_BATCH 64 /* messages an actor handles per wakeup before the others get a turn */

mn_engine_config mn_engine_defaults(void)
{
    return (mn_engine_config){
        .model_path = "models/target.gguf",
        .host = "127.0.0.1",
        .port = 8090,
        .max_batch = 16,
        .max_queue = 256,
        .max_line = 1 << 20,
        .max_tokens_limit = 4096,
        .out_high = 256 << 10,
        .drain_timeout_s = 30,
    };
}

static void kick(mn_kick *k, mn_mailbox *mb)
{
    if (k->queued)
        return;
    k->queued = true;
    k->msg.type = MN_MSG_KICK;
    mn_mailbox_post(mb, &k->msg);
}

void mn_engine_kick_kvmem(mn_engine *e) { kick(&e->kvmem_kick, e->kvmem_mb); }
void mn_engine_kick_verifier(mn_engine *e) { kick(&e->verifier_kick, e->verifier_mb); }

/* Move the per-second window up to now, zeroing the seconds that passed without tokens. */
static uint64_t *stats_bucket(mn_stats *s)
{
    int64_t now = (int64_t)mn_now();
    if (now != s->second) {
        int64_t gap = now - s->second;
        for (int64_t i = 1; i <= gap && i <= MN_STATS_SECONDS; i++)
            s->per_second[(s->second + i) % MN_STATS_SECONDS] = 0;
        s->second = now;
    }
    return &s->per_second[now % MN_STATS_SECONDS];
}

void mn_engine_count_tokens(mn_engine *e, uint32_t n)
{
    e->stats.tokens_generated += n;
    *stats_bucket(&e->stats) += n;
}

double mn_engine_tok_per_s(mn_engine *e)
{
    stats_bucket(&e->stats);
    uint64_t sum = 0;
    for (int i = 0; i < MN_STATS_SECONDS; i++)
        sum += e->stats.per_second[i];
    return (double)sum / MN_STATS_SECONDS;
}

void mn_engine_check_drained(mn_engine *e)
{
    if (e->draining && e->live_requests == 0 && mn_net_flushed(e->net))
        event_base_loopexit(e->base, NULL);
}

void mn_engine_drain(mn_engine *e)
{
    if (!e->draining) {
        mn_log(MN_LOG_INFO, "draining: %llu requests in flight", (unsigned long long)e->live_requests);
        if (e->drain_timer)
            evtimer_add(e->drain_timer, &(struct timeval){.tv_sec = e->cfg.drain_timeout_s});
    }
    e->draining = true;
    mn_net_stop_listening(e->net);
    mn_engine_check_drained(e);
}

/* End a drain that cannot finish by itself (a client that does not read keeps its requests paused):
 * close every connection, which cancels their requests; the loop ends once the actors hand them back. */
static void force_drain(mn_engine *e, const char *why)
{
    mn_log(MN_LOG_WARN, "%s: closing %u connections, cancelling %llu requests", why, mn_net_connections(e->net),
           (unsigned long long)e->live_requests);
    mn_net_close_all(e->net);
    mn_engine_check_drained(e);
}

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    force_drain(arg, "drain timeout");
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    mn_engine *e = arg;
    (void)what;
    if (e->draining) {
        force_drain(e, "second signal during the drain");
        return;
    }
    mn_log(MN_LOG_INFO, "signal %d: draining", (int)sig);
    mn_engine_drain(e);
}

mn_status mn_engine_new(const mn_engine_config *cfg, mn_engine **out, mn_err *err)
{
    mn_status st = MN_NOMEM;
    mn_engine *e = mn_calloc(1, sizeof *e);
    if (!e)
        return mn_fail(err, MN_NOMEM, "engine: out of memory");
    e->cfg = *cfg;
    e->max_batch = e->max_batch_cap = cfg->max_batch ? cfg->max_batch : 1;
    e->max_queue = e->max_queue_cap = cfg->max_queue ? cfg->max_queue : 1;
    e->max_running = e->max_batch_cap + e->max_queue_cap;
    if (evthread_use_pthreads() != 0 || !(e->base = event_base_new())) {
        st = mn_fail(err, MN_ERROR, "cannot create the event loop");
        goto fail;
    }
    if ((st = mn_model_load(cfg->model_path, &e->model, err)) != MN_OK)
        goto fail;
    uint32_t n_ctx = e->model->hp.n_ctx;
    mn_backend_config bc = mn_backend_defaults(e->model, n_ctx);
    if (cfg->n_threads > 0)
        bc.n_threads = cfg->n_threads;
    size_t block_bytes = 2 * sizeof(float) * bc.kv_block_size * e->model->hp.n_layers * e->model->hp.n_kv_heads *
                         e->model->hp.head_dim;
    if (cfg->kv_blocks)
        bc.kv_blocks = cfg->kv_blocks;
    else if (cfg->kv_mib)
        bc.kv_blocks = (uint32_t)(((size_t)cfg->kv_mib << 20) / block_bytes);
    else
        bc.kv_blocks = e->max_batch_cap * ((n_ctx + bc.kv_block_size - 1) / bc.kv_block_size);
    if (bc.kv_blocks == 0) {
        st = mn_fail(err, MN_INVALID, "a KV budget of %u MiB holds no block (%zu bytes each)", cfg->kv_mib,
                     block_bytes);
        goto fail;
    }
    if ((st = mn_backend_new(e->model, &bc, &e->be, err)) != MN_OK ||
        (st = mn_worker_new("mn-compute", &e->worker, err)) != MN_OK ||
        (st = mn_mailbox_new(e->base, "intake", mn_intake_handle, e, MAILBOX_BATCH, &e->intake_mb, err)) != MN_OK ||
        (st = mn_kvmem_new(e, &e->kvmem, err)) != MN_OK ||
        (st = mn_mailbox_new(e->base, "kvmem", mn_kvmem_handle, e->kvmem, MAILBOX_BATCH, &e->kvmem_mb, err)) != MN_OK)
        goto fail;
    if ((st = mn_verifier_new(e, &e->verifier, err)) != MN_OK ||
        (st = mn_mailbox_new(e->base, "verifier", mn_verifier_handle, e->verifier, MAILBOX_BATCH, &e->verifier_mb,
                             err)) != MN_OK ||
        (st = mn_net_new(e, &e->net, err)) != MN_OK ||
        (st = mn_mailbox_new(e->base, "net", mn_net_handle, e->net, MAILBOX_BATCH, &e->net_mb, err)) != MN_OK)
        goto fail;
    if (cfg->admin_addr && (st = mn_admin_new(e, cfg->admin_addr, &e->admin, err)) != MN_OK)
        goto fail;
    e->sigterm = evsignal_new(e->base, SIGTERM, on_signal, e);
    e->sigint = evsignal_new(e->base, SIGINT, on_signal, e);
    if (cfg->drain_timeout_s && !(e->drain_timer = evtimer_new(e->base, on_drain_timeout, e))) {
        st = mn_fail(err, MN_NOMEM, "engine: out of memory for the drain timer");
        goto fail;
    }
    if (!e->sigterm || !e->sigint || evsignal_add(e->sigterm, NULL) < 0 || evsignal_add(e->sigint, NULL) < 0) {
        st = mn_fail(err, MN_ERROR, "cannot watch SIGTERM/SIGINT");
        goto fail;
    }
    signal(SIGPIPE, SIG_IGN); /* a client that vanishes mid-write is an EPIPE, not a death */
    mn_log(MN_LOG_INFO, "engine: model %s, backend %s, %d threads, batch %u, %u KV blocks of %u", e->model->name,
           e->be->ops->name, bc.n_threads, e->max_batch_cap, bc.kv_blocks, bc.kv_block_size);
    *out = e;
    return MN_OK;
fail:
    if (st == MN_NOMEM && !err->msg[0])
        mn_fail(err, MN_NOMEM, "engine: out of memory");
    mn_engine_free(e);
    return st;
}

int mn_engine_port(const mn_engine *e)
{
    return mn_net_port(e->net);
}

mn_status mn_engine_run(mn_engine *e, mn_err *err)
{
    if (event_base_loop(e->base, EVLOOP_NO_EXIT_ON_EMPTY) < 0) /* actors live on active-only events */
        return mn_fail(err, MN_ERROR, "the event loop failed");
    return MN_OK;
}

void mn_engine_free(mn_engine *e)
{
    if (!e)
        return;
    if (e->drain_timer)
        event_free(e->drain_timer);
    if (e->sigterm)
        event_free(e->sigterm);
    if (e->sigint)
        event_free(e->sigint);
    mn_admin_free(e->admin);
    mn_net_free(e->net);
    mn_worker_free(e->worker); /* joins: no completion can arrive after this */
    mn_verifier_free(e->verifier);
    mn_kvmem_free(e->kvmem);
    mn_mailbox_free(e->intake_mb);
    mn_mailbox_free(e->kvmem_mb);
    mn_mailbox_free(e->verifier_mb);
    mn_mailbox_free(e->net_mb);
    mn_backend_free(e->be);
    mn_model_free(e->model);
    if (e->base)
        event_base_free(e->base);
    mn_free(e);
}
