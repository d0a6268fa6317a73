/* admin.c - the admin actor (see admin.h).
 *
 * Invariant: at most one command is being answered (the socket is REP); a stats command is answered
 * when `pending` falls to zero. */
#include "actors/admin.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "net/adminsock.h"
#include "net/proto.h"
#include "util/alloc.h"
#include "util/log.h"

struct mn_admin {
    mn_admin_config cfg;
    mn_adminsock *sock;
    uint32_t max_batch, max_queue;       /* the live values, as last set */
    mn_stats stats;                      /* being gathered */
    mn_stats_part parts[MN_WHO_N];
    unsigned pending;                    /* parts not yet back */
};

static void reply_json(mn_admin *a, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    static const char oom[] = "{\"ok\":false,\"error\":\"out of memory\"}";
    mn_adminsock_reply(a->sock, s ? s : oom, s ? strlen(s) : strlen(oom));
    free(s);
    json_decref(o);
}

/* {"ok":false,"error":...}; what it quotes of the command may be any bytes: sanitized. */
static json_t *fail(const char *fmt, const char *arg)
{
    char buf[200];
    snprintf(buf, sizeof buf, fmt, arg);
    size_t n;
    char *clean = mn_utf8_sanitize(buf, strlen(buf), &n);
    json_t *o = clean ? json_pack("{s:b, s:s%}", "ok", 0, "error", clean, n) : NULL;
    mn_free(clean);
    return o;
}

static json_t *config_json(mn_admin *a)
{
    return json_pack("{s:I, s:I, s:s, s:I, s:I}", "batch.max_sequences", (json_int_t)a->max_batch, "queue.max",
                     (json_int_t)a->max_queue, "log.level", mn_log_level_name(mn_log_get_level()),
                     "batch.max_sequences.limit", (json_int_t)a->cfg.max_batch, "kv.block_size",
                     (json_int_t)a->cfg.kv_block_size);
}

static json_t *stats_json(mn_admin *a)
{
    const mn_stats *s = &a->stats;
    return json_pack("{s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:{s:I, s:I}, s:f, s:I, s:I, s:{s:{s:I, s:I, s:I}},"
                     " s:{s:I, s:I, s:I, s:I}, s:I, s:I, s:I, s:b}",
                     "requests", "running", (json_int_t)s->kvmem.running, "queued", (json_int_t)s->kvmem.queued,
                     "paused", (json_int_t)s->kvmem.paused, "in_flight", (json_int_t)s->client.in_flight, "done",
                     (json_int_t)s->client.done, "failed", (json_int_t)s->client.failed, "tokens", "generated",
                     (json_int_t)s->verifier.tokens_generated, "prompt", (json_int_t)s->intake.prompt_tokens,
                     "tok_per_s", s->verifier.tok_per_s, "steps", (json_int_t)s->verifier.steps, "preemptions",
                     (json_int_t)s->kvmem.preemptions, "kv", "target", "used", (json_int_t)s->kvmem.kv_used, "free",
                     (json_int_t)s->kvmem.kv_free, "total", (json_int_t)s->kvmem.kv_total, "mailboxes", "client",
                     (json_int_t)s->depth[0], "intake", (json_int_t)s->depth[1], "kvmem", (json_int_t)s->depth[2],
                     "verifier", (json_int_t)s->depth[3], "connections",
                     (json_int_t)s->client.connections, "throttled", (json_int_t)s->client.throttled,
                     "accept_pauses", (json_int_t)s->client.accept_pauses, "draining", s->client.draining);
}

static void ask_for_stats(mn_admin *a)
{
    const mn_addr *ab = a->cfg.addr_book;
    mn_mailbox *to[MN_WHO_N] = {ab->client, ab->intake, ab->kvmem, ab->verifier};
    memset(&a->stats, 0, sizeof a->stats);
    a->pending = MN_WHO_N;
    for (int i = 0; i < MN_WHO_N; i++) {
        a->parts[i] = (mn_stats_part){.msg.type = MN_MSG_STATS, .stats = &a->stats, .reply_to = ab->admin};
        mn_mailbox_post(to[i], &a->parts[i].msg);
    }
}

static void send_setting(mn_mailbox *to, mn_setting_key key, uint32_t value)
{
    mn_setting *s = mn_malloc(sizeof *s);
    if (!s) {
        mn_log(MN_LOG_ERROR, "admin: out of memory for a setting");
        return;
    }
    *s = (mn_setting){.msg.type = MN_MSG_SET, .key = key, .value = value};
    mn_mailbox_post(to, &s->msg);
}

static json_t *set_key(mn_admin *a, const char *key, json_t *value)
{
    if (!strcmp(key, "batch.max_sequences") || !strcmp(key, "queue.max")) {
        bool batch = key[0] == 'b';
        json_int_t hi = batch ? a->cfg.max_batch : a->cfg.max_queue;
        if (!json_is_integer(value) || json_integer_value(value) < 1 || json_integer_value(value) > hi) {
            char msg[120];
            snprintf(msg, sizeof msg, "%s must be an integer in [1, %lld]", key, (long long)hi);
            return fail("%s", msg);
        }
        uint32_t v = (uint32_t)json_integer_value(value);
        if (batch) {
            a->max_batch = v;
            send_setting(a->cfg.addr_book->kvmem, MN_SET_MAX_BATCH, v);
            send_setting(a->cfg.addr_book->verifier, MN_SET_MAX_BATCH, v);
        } else {
            a->max_queue = v;
            send_setting(a->cfg.addr_book->kvmem, MN_SET_MAX_QUEUE, v);
        }
    } else if (!strcmp(key, "log.level")) {
        int lvl = json_is_string(value) ? mn_log_parse_level(json_string_value(value)) : -1;
        if (lvl < 0)
            return fail("%s must be one of error, warn, info, debug", key);
        mn_log_set_level((mn_log_level)lvl);
    } else {
        return fail("unknown key '%s'", key);
    }
    return json_pack("{s:b, s:o}", "ok", 1, "config", config_json(a));
}

static json_t *get_key(mn_admin *a, json_t *in)
{
    json_t *cfg = config_json(a), *out;
    json_t *key = json_object_get(in, "key");
    if (!key)
        return json_pack("{s:b, s:o}", "ok", 1, "config", cfg);
    const char *k = json_string_value(key);
    if (!k)
        out = fail("%s", "key must be a string");
    else if (json_object_get(cfg, k))
        out = json_pack("{s:b, s:s, s:O}", "ok", 1, "key", k, "value", json_object_get(cfg, k));
    else
        out = fail("unknown key '%s'", k);
    json_decref(cfg);
    return out;
}

/* One command from the socket. Every path ends in exactly one reply: now, or (stats) once the
 * actors have answered. */
static void on_command(void *owner, const char *msg, size_t len)
{
    mn_admin *a = owner;
    if (memchr(msg, 0, len))
        return reply_json(a, fail("%s", "a command is a JSON object; this one contains a NUL byte"));
    json_error_t jerr;
    json_t *in = json_loadb(msg, len, 0, &jerr), *out;
    const char *cmd = json_string_value(json_object_get(in, "cmd"));
    if (!in || !json_is_object(in))
        out = fail("a command is a JSON object: %s", in ? "not an object" : jerr.text);
    else if (!cmd)
        out = fail("%s", "cmd must be a string");
    else if (!strcmp(cmd, "stats")) {
        json_decref(in);
        return ask_for_stats(a);
    } else if (!strcmp(cmd, "get"))
        out = get_key(a, in);
    else if (!strcmp(cmd, "set")) {
        const char *key = json_string_value(json_object_get(in, "key"));
        json_t *value = json_object_get(in, "value");
        out = !key || !value ? fail("%s", "set needs a string key and a value") : set_key(a, key, value);
    } else if (!strcmp(cmd, "drain")) {
        a->cfg.on_drain(a->cfg.owner);
        out = json_pack("{s:b, s:b}", "ok", 1, "draining", 1);
    } else {
        out = fail("unknown cmd '%s' (stats, get, set, drain)", cmd);
    }
    json_decref(in);
    reply_json(a, out);
}

mn_status mn_admin_new(struct event_base *base, const mn_admin_config *cfg, mn_admin **out, mn_err *err)
{
    mn_admin *a = mn_calloc(1, sizeof *a);
    if (!a)
        return mn_fail(err, MN_NOMEM, "admin: out of memory");
    a->cfg = *cfg;
    a->max_batch = cfg->max_batch;
    a->max_queue = cfg->max_queue;
    mn_status s = mn_adminsock_new(base, cfg->addr, cfg->socket_mode, on_command, a, &a->sock, err);
    if (s != MN_OK) {
        mn_free(a);
        return s;
    }
    *out = a;
    return MN_OK;
}

void mn_admin_free(mn_admin *a)
{
    if (!a)
        return;
    mn_adminsock_free(a->sock);
    mn_free(a);
}

void mn_admin_handle(void *admin, mn_msg *m)
{
    mn_admin *a = admin;
    if (m->type != MN_MSG_STATS) {
        mn_log(MN_LOG_ERROR, "admin: unexpected message %u", m->type);
        return;
    }
    if (--a->pending)
        return;
    const mn_addr *ab = a->cfg.addr_book;
    mn_mailbox *mbs[4] = {ab->client, ab->intake, ab->kvmem, ab->verifier};
    for (int i = 0; i < 4; i++)
        a->stats.depth[i] = mn_mailbox_depth(mbs[i]);
    reply_json(a, json_pack("{s:b, s:o}", "ok", 1, "stats", stats_json(a)));
}
