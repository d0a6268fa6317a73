/* admin.c - the admin control socket (see admin.h). */
#include "net/admin.h"

#include <errno.h>
#include <jansson.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/conn.h"
#include "util/alloc.h"
#include "util/log.h"

struct mn_admin {
    mn_engine *e;
    int sock;
    struct event *ev;
    char *ipc_path;   /* removed at exit */
};

static json_t *config_json(mn_engine *e)
{
    return json_pack("{s:i, s:i, s:s, s:i, s:i}", "batch.max_sequences", (json_int_t)e->max_batch, "queue.max",
                     (json_int_t)e->max_queue, "log.level", mn_log_level_name(mn_log_get_level()),
                     "batch.max_sequences.limit", (json_int_t)e->max_batch_cap, "kv.block_size",
                     (json_int_t)e->be->kv->block_size);
}

static json_t *stats_json(mn_engine *e)
{
    const mn_kv_pool *kv = e->be->kv;
    return json_pack("{s:{s:i, s:i, s:i, s:i, s:i}, s:{s:I, s:I}, s:f, s:I, s:I, s:{s:{s:i, s:i, s:i}},"
                     " s:{s:i, s:i, s:i, s:i}, s:i, s:i, s:b}",
                     "requests", "running", (json_int_t)mn_kvmem_running(e->kvmem), "queued",
                     (json_int_t)mn_kvmem_queued(e->kvmem), "in_flight", (json_int_t)e->live_requests, "done",
                     (json_int_t)e->stats.requests_done, "failed", (json_int_t)e->stats.requests_failed,
                     "tokens", "generated", (json_int_t)e->stats.tokens_generated, "prompt",
                     (json_int_t)e->stats.prompt_tokens, "tok_per_s", mn_engine_tok_per_s(e), "steps",
                     (json_int_t)e->stats.steps, "preemptions", (json_int_t)e->stats.preemptions, "kv", "target",
                     "used", (json_int_t)mn_kv_used(kv), "free", (json_int_t)kv->n_free, "total",
                     (json_int_t)kv->n_blocks, "mailboxes", "intake", (json_int_t)mn_mailbox_depth(e->intake_mb),
                     "kvmem", (json_int_t)mn_mailbox_depth(e->kvmem_mb), "verifier",
                     (json_int_t)mn_mailbox_depth(e->verifier_mb), "net", (json_int_t)mn_mailbox_depth(e->net_mb),
                     "connections", (json_int_t)mn_net_connections(e->net), "throttled",
                     (json_int_t)mn_net_throttled(e->net), "draining", e->draining);
}

static json_t *fail(const char *fmt, const char *arg)
{
    char buf[200];
    snprintf(buf, sizeof buf, fmt, arg);
    return json_pack("{s:b, s:s}", "ok", 0, "error", buf);
}

static json_t *set_key(mn_engine *e, const char *key, json_t *value)
{
    if (!strcmp(key, "batch.max_sequences") || !strcmp(key, "queue.max")) {
        bool batch = key[0] == 'b';
        json_int_t hi = batch ? e->max_batch_cap : e->max_queue_cap;
        if (!json_is_integer(value) || json_integer_value(value) < 1 || json_integer_value(value) > hi) {
            char msg[120];
            snprintf(msg, sizeof msg, "%s must be an integer in [1, %lld]", key, (long long)hi);
            return fail("%s", msg);
        }
        if (batch)
            e->max_batch = (uint32_t)json_integer_value(value);
        else
            e->max_queue = (uint32_t)json_integer_value(value);
        mn_engine_kick_kvmem(e); /* a larger batch admits at once */
    } else if (!strcmp(key, "log.level")) {
        int lvl = json_is_string(value) ? mn_log_parse_level(json_string_value(value)) : -1;
        if (lvl < 0)
            return fail("%s must be one of error, warn, info, debug", key);
        mn_log_set_level((mn_log_level)lvl);
    } else {
        return fail("unknown key '%s'", key);
    }
    return json_pack("{s:b, s:o}", "ok", 1, "config", config_json(e));
}

char *mn_admin_command(mn_engine *e, const char *msg, size_t len)
{
    json_error_t jerr;
    json_t *in = json_loadb(msg, len, 0, &jerr), *out;
    const char *cmd = json_string_value(json_object_get(in, "cmd"));
    if (!in || !json_is_object(in))
        out = fail("a command is a JSON object: %s", in ? "not an object" : jerr.text);
    else if (!cmd)
        out = fail("%s", "cmd must be a string");
    else if (!strcmp(cmd, "stats"))
        out = json_pack("{s:b, s:o}", "ok", 1, "stats", stats_json(e));
    else if (!strcmp(cmd, "get")) {
        json_t *cfg = config_json(e);
        const char *key = json_string_value(json_object_get(in, "key"));
        if (!key)
            out = json_pack("{s:b, s:o}", "ok", 1, "config", cfg);
        else if (json_object_get(cfg, key))
            out = json_pack("{s:b, s:s, s:O}", "ok", 1, "key", key, "value", json_object_get(cfg, key));
        else
            out = fail("unknown key '%s'", key);
        if (key)
            json_decref(cfg);
    } else if (!strcmp(cmd, "set")) {
        const char *key = json_string_value(json_object_get(in, "key"));
        json_t *value = json_object_get(in, "value");
        out = !key || !value ? fail("%s", "set needs a string key and a value") : set_key(e, key, value);
    } else if (!strcmp(cmd, "drain")) {
        mn_engine_drain(e);
        out = json_pack("{s:b, s:b, s:I}", "ok", 1, "draining", 1, "in_flight", (json_int_t)e->live_requests);
    } else {
        out = fail("unknown cmd '%s' (stats, get, set, drain)", cmd);
    }
    json_decref(in);
    char *s = out ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    return s;
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    mn_admin *a = arg;
    (void)fd, (void)what;
    for (;;) {
        char *buf = NULL;
        int n = nn_recv(a->sock, &buf, NN_MSG, NN_DONTWAIT);
        if (n < 0) {
            if (nn_errno() != EAGAIN && nn_errno() != EINTR)
                mn_log(MN_LOG_WARN, "admin: receive failed: %s", nn_strerror(nn_errno()));
            return;
        }
        char *reply = mn_admin_command(a->e, buf, (size_t)n);
        nn_freemsg(buf);
        static const char oom[] = "{\"ok\":false,\"error\":\"out of memory\"}";
        const char *r = reply ? reply : oom;
        if (nn_send(a->sock, r, strlen(r), NN_DONTWAIT) < 0)
            mn_log(MN_LOG_WARN, "admin: reply failed: %s", nn_strerror(nn_errno()));
        free(reply);
    }
}

static bool loopback_tcp(const char *addr)
{
    static const char *ok[] = {"tcp://127.", "tcp://localhost:", "tcp://[::1]:"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!strncmp(addr, ok[i], strlen(ok[i])))
            return true;
    return false;
}

mn_status mn_admin_new(mn_engine *e, const char *addr, mn_admin **out, mn_err *err)
{
    bool ipc = !strncmp(addr, "ipc://", 6);
    if (!ipc && !loopback_tcp(addr))
        return mn_fail(err, MN_INVALID, "--admin %s: use ipc://PATH or tcp://127.0.0.1:PORT (loopback only)", addr);
    mn_admin *a = mn_calloc(1, sizeof *a);
    if (!a)
        return mn_fail(err, MN_NOMEM, "admin: out of memory");
    a->e = e;
    if ((a->sock = nn_socket(AF_SP, NN_REP)) < 0) {
        mn_free(a);
        return mn_fail(err, MN_IO, "admin: nn_socket: %s", nn_strerror(nn_errno()));
    }
    mode_t old = umask(077); /* the ipc socket file is the owner's only, from its first moment */
    int ep = nn_bind(a->sock, addr);
    umask(old);
    int rcvfd;
    size_t sz = sizeof rcvfd;
    if (ep < 0) {
        mn_fail(err, MN_IO, "admin: cannot bind %s: %s", addr, nn_strerror(nn_errno()));
        goto fail;
    }
    if (ipc) {
        a->ipc_path = mn_strndup(addr + 6, strlen(addr + 6));
        chmod(a->ipc_path ? a->ipc_path : addr + 6, 0600);
    }
    if (nn_getsockopt(a->sock, NN_SOL_SOCKET, NN_RCVFD, &rcvfd, &sz) < 0 ||
        !(a->ev = event_new(e->base, rcvfd, EV_READ | EV_PERSIST, on_readable, a)) || event_add(a->ev, NULL) < 0) {
        mn_fail(err, MN_IO, "admin: cannot watch the socket");
        goto fail;
    }
    *out = a;
    return MN_OK;
fail:
    mn_admin_free(a);
    return MN_IO;
}

void mn_admin_free(mn_admin *a)
{
    if (!a)
        return;
    if (a->ev)
        event_free(a->ev);
    nn_close(a->sock);
    if (a->ipc_path)
        unlink(a->ipc_path);
    mn_free(a->ipc_path);
    mn_free(a);
}
