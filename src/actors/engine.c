/* engine.c - wiring (see engine.h): the loop, the model and its backend, the worker, the actors and
 * their mailboxes, signals and the drain. The engine is not an actor: it builds them, starts drains
 * by message, and tears everything down once the loop has ended. */
#include "actors/engine.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/admin.h"
#include "actors/client.h"
#include "actors/drafter.h"
#include "actors/http.h"
#include "actors/intake.h"
#include "actors/kvmem.h"
#include "actors/tuner.h"
#include "actors/verifier.h"
#include "actors/voter.h"
#include "cpu/matmul.h"
#include "model/model.h"
#include "net/adminsock.h"
#include "runtime/pool.h"
#include "runtime/registry.h"
#include "runtime/worker.h"
#include "spec/ngram.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/num.h"

#define MAILBOX_BATCH 64 /* messages an actor handles per wakeup before the others get a turn */
#define WORKER_JOBS 4    /* the worker's job queue: the verifier's step and, per drafter, its job */

struct mn_engine {
    mn_engine_config cfg;
    struct event_base *base;
    struct event *signals[3];    /* SIGTERM, SIGINT, SIGHUP */
    struct event *drain_timer;   /* armed when a drain starts (cfg.drain_timeout_s > 0) */
    mn_model *model;
    mn_backend *be;              /* the target's; owns its KV pool */
    mn_pool *pool;               /* CPU compute threads: the target's, and the drafts' unless split */
    mn_worker *worker;           /* the compute worker: the target's jobs (and the drafts' unless split) */
    int draft_threads;           /* the drafts' share of the threads (0: none of their own) */
    mn_pool *draft_pool;         /* with draft_threads: the model drafters' compute threads */
    mn_worker *draft_worker;     /* with draft_threads: the model drafters' jobs */
    uint32_t n_drafts;
    struct draft {
        char *name;              /* file name without .gguf, or "ngram" */
        mn_model *model;         /* NULL: the n-gram drafter */
        mn_backend *be;
        mn_drafter *actor;
    } drafts[MN_ENGINE_MAX_DRAFTS];
    const char *draft_names[MN_ENGINE_MAX_DRAFTS]; /* the drafts' names, lent to actors */
    mn_voter *voter;
    mn_tuner_actor *tuner;
    mn_pubsock *events;
    FILE *step_trace;            /* --step-trace, lent to the verifier */
    mn_addr addr;                /* the mailboxes and kicks, lent to every actor */
    mn_kick kvmem_kick, verifier_kick;
    mn_client_actor *client;
    mn_http_actor *http;         /* with --http */
    char *model_stem;            /* the model's file name without .gguf: what /v1/models lists */
    int fronts_draining;         /* front ends (client, http) whose drain has not finished */
    mn_intake *intake;
    mn_kvmem *kvmem;
    mn_verifier *verifier;
    mn_admin *admin;
    bool draining;
};

mn_engine_config mn_engine_defaults(void)
{
    return (mn_engine_config){
        .model_path = "models/target.gguf",
        .draft_backend = -1,
        .host = "127.0.0.1",
        .port = 8090,
        .socket_mode = 0600,
        .max_batch = 16,
        .max_queue = 256,
        .max_line = 1 << 20,
        .max_tokens_limit = 4096,
        .out_high = 256 << 10,
        .drain_timeout_s = 30,
        .http_timeout_s = 120,
        .idle_timeout_s = 300,
        .spec_length = 4,
        .weights_mode = MN_WEIGHTS_SEQUENCE,
        .weights = mn_weights_defaults(),
        .skip_below = 0.25f, /* docs/speculation.md: on every prompt set the learning vote ran faster with it */
        .cascade = true,     /* docs/speculation.md: the vote served 1.02-1.12x as fast with it */
        .ngram_cache = MN_NGRAM_CACHE_TOKENS_DEFAULT,
        .prefix_cache = true,
        .tuner_mode = MN_TUNER_ADAPTIVE, /* docs/speculation.md: with 16 clients the fixed vote serves at
                                         0.71-0.86x plain, the adaptive one at 0.93-0.99x */
        .tuner = mn_tuner_defaults(),
        .draft_threads = -1,
    };
}

static void post_drain(mn_engine *e, bool force)
{
    mn_drain *d = mn_malloc(sizeof *d);
    if (!d) { /* cannot tell the front ends: end the loop now; requests in flight are not answered, and
              * the process exits (mn_engine_free frees the actors, not the requests they held) */
        mn_log(MN_LOG_ERROR, "drain: out of memory; stopping at once");
        event_base_loopexit(e->base, NULL);
        return;
    }
    *d = (mn_drain){.msg.type = MN_MSG_DRAIN, .force = force};
    mn_mailbox_post(e->addr.client, &d->msg);
    if (!e->addr.http)
        return;
    if (!(d = mn_malloc(sizeof *d))) {
        mn_log(MN_LOG_ERROR, "drain: out of memory; stopping at once");
        event_base_loopexit(e->base, NULL);
        return;
    }
    *d = (mn_drain){.msg.type = MN_MSG_DRAIN, .force = force};
    mn_mailbox_post(e->addr.http, &d->msg);
}

/* A drain was asked for (admin, signal): the first starts it, a second (signal) forces it. */
static void drain(void *engine)
{
    mn_engine *e = engine;
    if (e->draining)
        return;
    e->draining = true;
    if (e->drain_timer &&
        evtimer_add(e->drain_timer, &(struct timeval){.tv_sec = e->cfg.drain_timeout_s}) != 0)
        mn_log(MN_LOG_ERROR, "drain: cannot arm the %u s deadline; a second signal still ends it",
               e->cfg.drain_timeout_s);
    post_drain(e, false);
}

/* A front end has answered and written everything; the loop ends with the last one. */
static void on_drained(void *engine)
{
    mn_engine *e = engine;
    if (--e->fronts_draining == 0)
        event_base_loopexit(e->base, NULL);
}

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    mn_log(MN_LOG_WARN, "drain timeout");
    post_drain(arg, true);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    mn_engine *e = arg;
    (void)what;
    if (e->draining) {
        mn_log(MN_LOG_WARN, "signal %d during the drain: closing every connection", (int)sig);
        post_drain(e, true);
        return;
    }
    mn_log(MN_LOG_INFO, "signal %d: draining", (int)sig);
    drain(e);
}

static uint32_t kv_blocks(const mn_engine_config *cfg, const mn_model *m, uint32_t block_size, mn_err *err)
{
    size_t block_bytes = 2 * mn_kv_elem_bytes(cfg->kv_type) * block_size * m->hp.n_layers * m->hp.n_kv_heads *
                         m->hp.head_dim;
    uint32_t n = cfg->kv_blocks;
    if (!n && cfg->kv_mib) {
        uint64_t fit = ((uint64_t)cfg->kv_mib << 20) / block_bytes;
        if (fit > MN_ENGINE_MAX_KV_BLOCKS) {
            mn_fail(err, MN_INVALID, "a KV budget of %u MiB holds %llu blocks of %zu bytes, more than %u", cfg->kv_mib,
                    (unsigned long long)fit, block_bytes, MN_ENGINE_MAX_KV_BLOCKS);
            return 0;
        }
        n = (uint32_t)fit;
    } else if (!n) {
        /* max-batch full contexts, but at most a quarter of the machine's memory: SmolLM2's 8,192
         * positions x 16 sequences would be 6 GB */
        size_t want = (size_t)cfg->max_batch * ((m->hp.n_ctx + block_size - 1) / block_size);
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        size_t cap = pages > 0 && page > 0 ? (size_t)pages * (size_t)page / 4 / block_bytes : want;
        n = (uint32_t)(want < cap ? want : cap > 0 ? cap : 1);
    }
    if (!n)
        mn_fail(err, MN_INVALID, "a KV budget of %u MiB holds no block (%zu bytes each)", cfg->kv_mib, block_bytes);
    return n > MN_ENGINE_MAX_KV_BLOCKS ? MN_ENGINE_MAX_KV_BLOCKS : n;
}

/* The actors need each other's addresses, so the mailboxes come first; each learns its actor once
 * that exists (end of new_actors). */
static mn_status new_mailboxes(mn_engine *e, mn_err *err)
{
    struct {
        const char *name;
        mn_actor_fn fn;
        mn_mailbox **mb;
    } boxes[] = {
        {"client", mn_client_actor_handle, &e->addr.client},
        {"intake", mn_intake_handle, &e->addr.intake},
        {"kvmem", mn_kvmem_handle, &e->addr.kvmem},
        {"verifier", mn_verifier_handle, &e->addr.verifier},
        {"admin", mn_admin_handle, &e->addr.admin},
        {"http", mn_http_actor_handle, e->cfg.http_host ? &e->addr.http : NULL},
    };
    for (size_t i = 0; i < sizeof boxes / sizeof *boxes; i++) {
        mn_status s = boxes[i].mb ? mn_mailbox_new(e->base, boxes[i].name, boxes[i].fn, NULL, MAILBOX_BATCH,
                                                   boxes[i].mb, err)
                                  : MN_OK;
        if (s != MN_OK)
            return s;
    }
    static const char *const drafter_names[] = {"drafter0", "drafter1", "drafter2", "drafter3",
                                                "drafter4", "drafter5", "drafter6", "drafter7"};
    _Static_assert(sizeof drafter_names / sizeof *drafter_names == MN_ENGINE_MAX_DRAFTS, "a mailbox name each");
    for (uint32_t i = 0; i < e->n_drafts; i++) {
        mn_status s = mn_mailbox_new(e->base, drafter_names[i], mn_drafter_handle, NULL, MAILBOX_BATCH,
                                     &e->addr.drafters[i], err); /* names are kept, not copied */
        if (s != MN_OK)
            return s;
    }
    e->addr.n_drafters = e->n_drafts;
    if (e->n_drafts) {
        mn_status s = mn_mailbox_new(e->base, "voter", mn_voter_handle, NULL, MAILBOX_BATCH, &e->addr.voter, err);
        if (s != MN_OK ||
            (s = mn_mailbox_new(e->base, "tuner", mn_tuner_actor_handle, NULL, MAILBOX_BATCH, &e->addr.tuner, err)) !=
                MN_OK)
            return s;
    }
    e->addr.kvmem_kick = &e->kvmem_kick;
    e->addr.verifier_kick = &e->verifier_kick;
    return MN_OK;
}

static void on_event(void *engine, const char *line)
{
    mn_engine *e = engine;
    mn_pubsock_publish(e->events, line, strlen(line));
}

/* Bit i: drafter i runs a model (the n-gram drafter does not). */
static uint32_t costly_drafters(const mn_engine *e)
{
    uint32_t mask = 0;
    for (uint32_t i = 0; i < e->n_drafts; i++)
        mask |= e->drafts[i].model ? 1u << i : 0;
    return mask;
}

/* The voter, the tuner and one drafter actor per draft. */
static mn_status new_spec_actors(mn_engine *e, mn_err *err)
{
    const mn_engine_config *cfg = &e->cfg;
    mn_status s;
    for (uint32_t i = 0; i < e->n_drafts; i++) {
        mn_drafter_config dc = {.index = i, .be = e->drafts[i].be,
                                .worker = e->draft_worker ? e->draft_worker : e->worker,
                                .self = e->addr.drafters[i], .max_batch = cfg->max_batch, .addr = &e->addr,
                                .ngram_cache = cfg->ngram_cache};
        if ((s = mn_drafter_new(&dc, &e->drafts[i].actor, err)) != MN_OK)
            return s;
        mn_mailbox_set_actor(e->addr.drafters[i], e->drafts[i].actor);
    }
    mn_voter_config vc = {.n_drafters = e->n_drafts, .names = e->draft_names, .params = cfg->weights,
                          .mode = (mn_weights_mode)cfg->weights_mode, .skip_below = cfg->skip_below,
                          .cascade = cfg->cascade,
                          .on_event = e->events ? on_event : NULL, .owner = e, .addr = &e->addr,
                          .release_to = e->addr.kvmem};
    vc.costly = costly_drafters(e);
    for (uint32_t i = 0; i < e->n_drafts; i++) {
        if (!e->drafts[i].model)
            vc.release_to = e->addr.ngram = e->addr.drafters[i];
    }
    if ((s = mn_voter_new(&vc, &e->voter, err)) != MN_OK)
        return s;
    mn_mailbox_set_actor(e->addr.voter, e->voter);
    mn_tuner_actor_config tc = {.mode = cfg->tuner_mode, .params = cfg->tuner, .spec_length = cfg->spec_length,
                                .on_event = e->events ? on_event : NULL, .owner = e, .addr = &e->addr};
    if ((s = mn_tuner_actor_new(&tc, &e->tuner, err)) != MN_OK)
        return s;
    mn_mailbox_set_actor(e->addr.tuner, e->tuner);
    return MN_OK;
}

static mn_status new_actors(mn_engine *e, uint32_t n_blocks, mn_err *err)
{
    const mn_engine_config *cfg = &e->cfg;
    mn_status s;
    mn_client_actor_config cc = {
        .net = {.host = cfg->host, .port = cfg->port, .unix_path = cfg->unix_path, .socket_mode = cfg->socket_mode,
                .max_line = cfg->max_line, .out_high = cfg->out_high},
        .max_tokens_limit = cfg->max_tokens_limit,
        .idle_timeout_s = cfg->idle_timeout_s,
        .chat = mn_chat_format_of(e->model->gguf),
        .addr = &e->addr,
        .on_drained = on_drained,
        .owner = e,
    };
    cc.n_drafters = e->n_drafts;
    cc.drafter_names = e->draft_names;
    mn_intake_config ic = {.model = e->model, .kv_block_size = e->be->kv->block_size, .kv_blocks = n_blocks,
                           .n_drafters = e->n_drafts, .addr = &e->addr};
    for (uint32_t i = 0; cfg->prefix_cache && i <= e->n_drafts; i++) {
        mn_backend *be = i < e->n_drafts ? e->drafts[i].be : e->be; /* NULL: the n-gram drafter */
        if (be && mn_kv_prefix_enable(be->kv) != MN_OK)
            return mn_fail(err, MN_NOMEM, "engine: out of memory for the prefix caches");
    }
    mn_kvmem_config kc = {.pool = e->be->kv, .n_drafters = e->n_drafts, .max_batch = cfg->max_batch,
                          .max_queue = cfg->max_queue, .addr = &e->addr};
    for (uint32_t i = 0; i < e->n_drafts; i++)
        kc.draft_pools[i] = e->drafts[i].be ? e->drafts[i].be->kv : NULL;
    mn_verifier_config vc = {.be = e->be, .worker = e->worker, .max_batch = cfg->max_batch,
                             .max_held = cfg->max_batch + cfg->max_queue, .spec_enabled = true, .drafters_on = true,
                             .pipeline = cfg->pipeline, .spec_length = cfg->spec_length,
                             .costly = costly_drafters(e), .step_trace = e->step_trace, .addr = &e->addr};
    if ((s = mn_intake_new(&ic, &e->intake, err)) != MN_OK || (s = mn_kvmem_new(&kc, &e->kvmem, err)) != MN_OK ||
        (s = mn_verifier_new(&vc, &e->verifier, err)) != MN_OK ||
        (s = mn_client_actor_new(e->base, &cc, &e->client, err)) != MN_OK ||
        (e->n_drafts && (s = new_spec_actors(e, err)) != MN_OK))
        return s;
    if (cfg->admin_addr) {
        mn_admin_config ac = {.addr = cfg->admin_addr, .socket_mode = cfg->socket_mode, .max_batch = cfg->max_batch,
                              .max_queue = cfg->max_queue, .kv_block_size = e->be->kv->block_size,
                              .kv_type = mn_kv_type_name(e->be->kv->type),
                              .n_drafters = e->n_drafts, .drafter_names = e->draft_names,
                              .spec_length = cfg->spec_length, .pipeline = cfg->pipeline,
                              .weights_mode = (mn_weights_mode)cfg->weights_mode,
                              .weights = cfg->weights, .skip_below = cfg->skip_below, .cascade = cfg->cascade,
                              .ngram_cache = cfg->ngram_cache > 0, .tuner_mode = cfg->tuner_mode, .tuner = cfg->tuner,
                              .addr_book = &e->addr, .on_drain = drain, .owner = e};
        if ((s = mn_admin_new(e->base, &ac, &e->admin, err)) != MN_OK)
            return s;
    }
    if (cfg->http_host) {
        mn_http_config hc = {.host = cfg->http_host, .port = cfg->http_port, .api_key = cfg->api_key,
                             .model_name = e->model_stem, .backend = e->be->ops->name, .tok = e->model->tok,
                             .chat = mn_chat_format_of(e->model->gguf), .max_tokens_limit = cfg->max_tokens_limit,
                             .max_body = cfg->max_line, .out_high = cfg->out_high,
                             .timeout_s = cfg->http_timeout_s, .n_drafters = e->n_drafts,
                             .drafter_names = e->draft_names, .addr = &e->addr, .on_drained = on_drained,
                             .owner = e};
        if ((s = mn_http_actor_new(e->base, &hc, &e->http, err)) != MN_OK)
            return s;
        mn_mailbox_set_actor(e->addr.http, e->http);
        mn_log(MN_LOG_INFO, "http: chat format %s", mn_chat_format_name(hc.chat));
    }
    e->fronts_draining = cfg->http_host ? 2 : 1;
    mn_mailbox_set_actor(e->addr.client, e->client);
    mn_mailbox_set_actor(e->addr.intake, e->intake);
    mn_mailbox_set_actor(e->addr.kvmem, e->kvmem);
    mn_mailbox_set_actor(e->addr.verifier, e->verifier);
    mn_mailbox_set_actor(e->addr.admin, e->admin);
    return MN_OK;
}

/* "models/draft-kjv.gguf" -> "draft-kjv" */
static char *file_stem(const char *path)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    return mn_strndup(base, n);
}

/* Load every --draft: a model (vocabulary checked, a backend whose KV pool holds as many positions
 * as the target's, on the drafts' threads) or the n-gram drafter. */
static mn_status load_drafts(mn_engine *e, const mn_backend_config *target_bc, mn_err *err)
{
    const mn_engine_config *cfg = &e->cfg;
    if (cfg->n_drafts > MN_ENGINE_MAX_DRAFTS)
        return mn_fail(err, MN_INVALID, "at most %d drafts", MN_ENGINE_MAX_DRAFTS);
    if (cfg->spec_length > MN_SPEC_MAX_LEN)
        return mn_fail(err, MN_INVALID, "--spec-length %u: at most %d", cfg->spec_length, MN_SPEC_MAX_LEN);
    mn_status s;
    for (uint32_t i = 0; i < cfg->n_drafts; i++) {
        struct draft *d = &e->drafts[i];
        bool ngram = !strcmp(cfg->drafts[i], "ngram");
        if (!(d->name = ngram ? mn_strndup("ngram", 5) : file_stem(cfg->drafts[i])))
            return mn_fail(err, MN_NOMEM, "out of memory");
        e->draft_names[i] = d->name;
        e->n_drafts = i + 1;
        if (!ngram && !strcmp(d->name, "ngram")) /* the admin's drafter.ngram.* keys are the n-gram drafter's */
            return mn_fail(err, MN_INVALID, "--draft %s: a model drafter may not be named 'ngram' (rename the file)",
                           cfg->drafts[i]);
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(e->drafts[j].name, d->name))
                return mn_fail(err, MN_INVALID, "--draft %s: a drafter named '%s' is already loaded (%s)",
                               cfg->drafts[i], d->name, cfg->drafts[j]);
        if (ngram)
            continue;
        if ((s = mn_model_load(cfg->drafts[i], &d->model, err)) != MN_OK) {
            mn_err why = *err;
            return mn_fail(err, s, "--draft %s: %s", cfg->drafts[i], why.msg);
        }
        if ((s = mn_drafter_check_vocab(e->model, d->model, err)) != MN_OK)
            return s;
        mn_backend_config bc = mn_backend_defaults(d->model, d->model->hp.n_ctx);
        bc.kind = e->cfg.draft_backend >= 0 ? (mn_backend_kind)e->cfg.draft_backend : target_bc->kind;
        bc.pool = e->draft_pool ? e->draft_pool : e->pool;
        bc.n_threads = mn_pool_size(bc.pool);
        bc.kv_block_size = target_bc->kv_block_size;
        bc.kv_blocks = target_bc->kv_blocks;
        bc.kv_type = target_bc->kv_type;
        if ((s = mn_backend_new(d->model, &bc, &d->be, err)) != MN_OK) {
            mn_err why = *err;
            return mn_fail(err, s, "--draft %s: %s", cfg->drafts[i], why.msg);
        }
    }
    return MN_OK;
}

/* One short pass through a new backend before the engine serves. A backend's first pass maps the
 * weights in and touches its buffers for the first time: the bundled target's first prompt took
 * 129 ms against 2.3 ms for the next, the first round of its three drafts 243 ms against 1-2 ms. The
 * first request paid for it, and the adaptive tuner took it for the cost of speculating (with one
 * client its first window, the drafts' first round in it, came to 2.3 ms a token against 0.24 for
 * plain decoding, and the class went plain). The pass leaves the KV pool as it found it. */
static mn_status warm_up(mn_backend *be, mn_err *err)
{
    enum { TOKENS = 8 };
    const int32_t tokens[TOKENS] = {0};
    const uint32_t n = be->model->hp.n_ctx < TOKENS ? be->model->hp.n_ctx : TOKENS; /* a context may be shorter */
    float *logits = mn_calloc(be->model->hp.n_vocab, sizeof *logits);
    if (!logits)
        return mn_fail(err, MN_NOMEM, "engine: out of memory");
    mn_kv_seq kv = {0};
    mn_status st = mn_backend_prefill(be, &kv, tokens, n, logits, err);
    mn_kv_seq_release(be->kv, &kv);
    mn_free(logits);
    return st;
}

static mn_status warm_up_all(mn_engine *e, mn_err *err)
{
    double t0 = mn_now();
    mn_status st = warm_up(e->be, err);
    for (uint32_t i = 0; st == MN_OK && i < e->n_drafts; i++)
        if (e->drafts[i].be)
            st = warm_up(e->drafts[i].be, err);
    mn_log(MN_LOG_INFO, "engine: warm-up passes took %.1f ms", 1e3 * (mn_now() - t0));
    return st;
}

/* MINIONS_FAIL_PASS=N (MINIONS_FAIL_DRAFT_PASS=N): the target's (every draft model's) N-th pass
 * after the warm-up fails, for tests of what a failed pass does to the requests in it. */
static mn_status arm_failures(mn_engine *e, mn_err *err)
{
    static const char *const names[] = {"MINIONS_FAIL_PASS", "MINIONS_FAIL_DRAFT_PASS"};
    for (int k = 0; k < 2; k++) {
        const char *v = getenv(names[k]);
        long n;
        if (!v)
            continue;
        if (!mn_parse_long(v, 1, LONG_MAX, &n))
            return mn_fail(err, MN_INVALID, "%s=%s: not a pass number (1, 2, ...)", names[k], v);
        if (k == 0)
            e->be->fail_pass = (uint64_t)n;
        for (uint32_t i = 0; k == 1 && i < e->n_drafts; i++)
            if (e->drafts[i].be)
                e->drafts[i].be->fail_pass = (uint64_t)n;
        mn_log(MN_LOG_WARN, "engine: %s=%ld: that pass will fail on purpose", names[k], n);
    }
    return MN_OK;
}

/* The drafts' share of the compute threads: --draft-threads, or by default, with the pipeline on
 * and a model draft to run, a quarter of them (at least one; a draft model is small, and its pass
 * gains little from more: docs/speculation.md measures it). n_threads becomes the target's share. */
static mn_status split_threads(mn_engine *e, int *n_threads, mn_err *err)
{
    const mn_engine_config *cfg = &e->cfg;
    bool models = false;
    for (uint32_t i = 0; i < cfg->n_drafts; i++)
        models |= strcmp(cfg->drafts[i], "ngram") != 0;
    int n = cfg->draft_threads;
    if (n < 0)
        n = cfg->pipeline && models && *n_threads > 1 ? (*n_threads / 4 > 1 ? *n_threads / 4 : 1) : 0;
    if (n && !models)
        return mn_fail(err, MN_INVALID, "--draft-threads %d: there is no draft model to run on them", n);
    if (n >= *n_threads)
        return mn_fail(err, MN_INVALID, "--draft-threads %d leaves the target none of the %d compute threads (-t)", n,
                       *n_threads);
    e->draft_threads = n;
    *n_threads -= n;
    return MN_OK;
}

static mn_status watch_signals(mn_engine *e, mn_err *err)
{
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++)
        if (!(e->signals[i] = evsignal_new(e->base, sigs[i], on_signal, e)) || evsignal_add(e->signals[i], NULL) < 0)
            return mn_fail(err, MN_ERROR, "cannot watch signal %d", sigs[i]);
    if (e->cfg.drain_timeout_s && !(e->drain_timer = evtimer_new(e->base, on_drain_timeout, e)))
        return mn_fail(err, MN_NOMEM, "engine: out of memory for the drain timer");
    signal(SIGPIPE, SIG_IGN); /* a client that vanishes mid-write is an EPIPE, not a death */
    return MN_OK;
}

mn_status mn_engine_new(const mn_engine_config *cfg, mn_engine **out, mn_err *err)
{
    mn_status st;
    mn_engine *e = mn_calloc(1, sizeof *e);
    if (!e)
        return mn_fail(err, MN_NOMEM, "engine: out of memory");
    e->cfg = *cfg;
    if (!e->cfg.max_batch)
        e->cfg.max_batch = 1;
    if (!e->cfg.max_queue)
        e->cfg.max_queue = 1;
    if (evthread_use_pthreads() != 0 || !(e->base = event_base_new())) {
        st = mn_fail(err, MN_ERROR, "cannot create the event loop");
        goto fail;
    }
    if ((st = mn_model_load(cfg->model_path, &e->model, err)) != MN_OK)
        goto fail;
    if (!(e->model_stem = file_stem(cfg->model_path))) {
        st = mn_fail(err, MN_NOMEM, "engine: out of memory");
        goto fail;
    }
    mn_backend_config bc = mn_backend_defaults(e->model, e->model->hp.n_ctx);
    bc.kind = cfg->backend;
    bc.kv_type = cfg->kv_type;
    if (cfg->n_threads > 0)
        bc.n_threads = cfg->n_threads;
    if (!(bc.kv_blocks = kv_blocks(&e->cfg, e->model, bc.kv_block_size, err))) {
        st = MN_INVALID;
        goto fail;
    }
    if ((st = split_threads(e, &bc.n_threads, err)) != MN_OK ||
        (st = mn_pool_new(bc.n_threads, &e->pool, err)) != MN_OK ||
        (e->draft_threads && (st = mn_pool_new(e->draft_threads, &e->draft_pool, err)) != MN_OK))
        goto fail;
    bc.pool = e->pool;
    if (cfg->events_addr && (st = mn_pubsock_new(cfg->events_addr, cfg->socket_mode, &e->events, err)) != MN_OK)
        goto fail;
    /* appended to, and emptied only once the sockets are ours: a second server started by mistake
     * must not empty the first one's trace before it fails on the port */
    if (cfg->step_trace && !(e->step_trace = fopen(cfg->step_trace, "a"))) {
        st = mn_fail(err, MN_IO, "engine: cannot write the step trace %s: %s", cfg->step_trace, strerror(errno));
        goto fail;
    }
    if ((st = mn_backend_new(e->model, &bc, &e->be, err)) != MN_OK || (st = load_drafts(e, &bc, err)) != MN_OK ||
        (st = warm_up_all(e, err)) != MN_OK || (st = arm_failures(e, err)) != MN_OK ||
        (st = mn_worker_new("mn-compute", WORKER_JOBS + e->n_drafts, &e->worker, err)) != MN_OK ||
        (e->draft_threads && (st = mn_worker_new("mn-draft", e->n_drafts, &e->draft_worker, err)) != MN_OK) ||
        (st = new_mailboxes(e, err)) != MN_OK || (st = new_actors(e, bc.kv_blocks, err)) != MN_OK ||
        (st = watch_signals(e, err)) != MN_OK)
        goto fail;
    struct stat trace;
    if (e->step_trace && fstat(fileno(e->step_trace), &trace) == 0 && S_ISREG(trace.st_mode) && /* a FIFO is not */
        ftruncate(fileno(e->step_trace), 0) != 0) {
        st = mn_fail(err, MN_IO, "engine: cannot empty the step trace %s: %s", cfg->step_trace, strerror(errno));
        goto fail;
    }
    if (e->tuner)
        mn_tuner_actor_start(e->tuner); /* the verifier starts at spec.length: adaptive bounds may move it */
    mn_log(MN_LOG_INFO, "engine: model %s, backend %s (CPU kernels %s), %d threads (+%d for drafts), batch %u, %u KV "
           "blocks of %u (%s), %u drafters, pipeline %s", e->model->name, e->be->ops->name, mn_cpu_kernels_name(),
           bc.n_threads, e->draft_threads, e->cfg.max_batch, bc.kv_blocks, bc.kv_block_size,
           mn_kv_type_name(bc.kv_type), e->n_drafts, e->cfg.pipeline ? "on" : "off");
    *out = e;
    return MN_OK;
fail:
    mn_engine_free(e);
    return st;
}

int mn_engine_port(const mn_engine *e)
{
    return mn_client_actor_port(e->client);
}

int mn_engine_http_port(const mn_engine *e)
{
    return e->http ? mn_http_actor_port(e->http) : -1;
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
    for (int i = 0; i < 3; i++)
        if (e->signals[i])
            event_free(e->signals[i]);
    mn_admin_free(e->admin);
    mn_http_actor_free(e->http);
    mn_client_actor_free(e->client);
    mn_worker_free(e->worker); /* joins: no completion can arrive after this */
    mn_worker_free(e->draft_worker);
    mn_verifier_free(e->verifier);
    if (e->step_trace)
        fclose(e->step_trace);
    mn_voter_free(e->voter);
    mn_tuner_actor_free(e->tuner);
    mn_kvmem_free(e->kvmem);
    mn_intake_free(e->intake);
    mn_mailbox *mbs[] = {e->addr.client, e->addr.intake, e->addr.kvmem, e->addr.verifier,
                         e->addr.admin,  e->addr.voter,  e->addr.tuner, e->addr.http};
    for (size_t i = 0; i < sizeof mbs / sizeof *mbs; i++)
        mn_mailbox_free(mbs[i]);
    for (uint32_t i = 0; i < e->n_drafts; i++) {
        mn_drafter_free(e->drafts[i].actor);
        mn_mailbox_free(e->addr.drafters[i]);
        mn_backend_free(e->drafts[i].be);
        mn_model_free(e->drafts[i].model);
        mn_free(e->drafts[i].name);
    }
    mn_pubsock_free(e->events);
    mn_backend_free(e->be);
    mn_pool_free(e->pool);
    mn_pool_free(e->draft_pool);
    mn_model_free(e->model);
    mn_free(e->model_stem);
    if (e->base)
        event_base_free(e->base);
    mn_free(e);
}
