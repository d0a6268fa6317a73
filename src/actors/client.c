/* client.c - the client actor (see client.h).
 *
 * Invariants: a request is on its connection's list from its line until its final line (or until
 * the connection goes: then r->conn is NULL and r->cancelled); live counts every request not yet
 * freed, whether or not its client is still there. */
#include "actors/client.h"

#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "actors/request.h"
#include "util/alloc.h"
#include "util/log.h"

typedef struct cconn {
    mn_client_actor *ca;
    mn_conn *c;
    mn_req *reqs;          /* in flight, linked by conn_next */
    struct event *idle;    /* armed while no request is in flight or while throttled (idle_timeout_s > 0) */
    bool throttled;
    bool input_ended;      /* the client half-closed: close once everything is answered */
} cconn;

struct mn_client_actor {
    mn_client_actor_config cfg;
    struct event_base *base;
    mn_net *net;
    uint64_t live;         /* requests accepted and not yet freed */
    uint64_t done, failed;
    uint64_t outcomes[MN_OUTCOMES];
    uint64_t rejected;     /* lines refused before they became requests (bad input, draining) */
    uint64_t idle_closed;  /* connections closed by their idle timer: nothing in flight, no line */
    uint64_t stalled_closed; /* the same timer, throttled: output left unread */
    mn_hist e2e, tpot;     /* the answered requests' latencies (mn_req_observe_latency) */
    bool draining;
    bool drained;          /* on_drained was called */
};

int mn_client_actor_port(const mn_client_actor *ca) { return mn_net_port(ca->net); }

static void check_drained(mn_client_actor *ca)
{
    if (ca->draining && !ca->drained && ca->live == 0 && mn_net_flushed(ca->net)) {
        ca->drained = true;
        ca->cfg.on_drained(ca->cfg.owner);
    }
}

/* Queue a reply line (taking ownership of `line`, of length len). A line we could not build or
 * queue is logged: the connection is failed then, and its client will see the connection close.
 * Callers build the line first: `write_line(cc, build(&len), len)` would read len unset. */
static void write_line(cconn *cc, char *line, size_t len)
{
    if (!line) {
        mn_log(MN_LOG_ERROR, "client: out of memory for a reply line");
        return;
    }
    mn_conn_write(cc->c, line, len);
    mn_free(line);
}

static void send_error(cconn *cc, const char *id, mn_errcode code, const char *msg)
{
    size_t len = 0;
    char *line = mn_proto_error_line(id, code, msg, &len);
    write_line(cc, line, len);
}

static mn_req *find(cconn *cc, const char *id)
{
    for (mn_req *r = cc->reqs; r; r = r->conn_next)
        if (!strcmp(r->p.id, id))
            return r;
    return NULL;
}

/* Run cc's timer while it is idle (no request in flight: it starts over at each call) or stalled
 * (throttled: it runs from the throttle on, whatever is answered meanwhile, until the client reads
 * below the low watermark); stop it while requests run for a client that reads. */
static void watch_idle(cconn *cc)
{
    if (!cc->idle || (cc->throttled && evtimer_pending(cc->idle, NULL)))
        return;
    if (cc->reqs && !cc->throttled) {
        evtimer_del(cc->idle);
    } else if (evtimer_add(cc->idle, &(struct timeval){.tv_sec = cc->ca->cfg.idle_timeout_s}) != 0) {
        mn_log(MN_LOG_ERROR, "client: cannot arm a connection's idle timer; it stays open");
    }
}

/* The timer ran out: an idle client, or one that left its output unread (its requests, paused,
 * would hold their KV and their places in the queue for as long as it stays connected). */
static void on_idle(evutil_socket_t fd, short what, void *arg)
{
    cconn *cc = arg;
    (void)fd, (void)what;
    if (cc->throttled) {
        cc->ca->stalled_closed++;
        mn_log(MN_LOG_INFO, "client: closing a connection that read none of its output for %u s",
               cc->ca->cfg.idle_timeout_s);
    } else {
        cc->ca->idle_closed++;
        mn_log(MN_LOG_DEBUG, "client: closing a connection idle for %u s", cc->ca->cfg.idle_timeout_s);
    }
    mn_conn_close(cc->c); /* on_close follows and cancels what is in flight */
}

static void close_if_answered(cconn *cc)
{
    if (cc->input_ended && !cc->reqs)
        mn_conn_close_when_written(cc->c); /* on_close follows */
}

static void cancel(cconn *cc, const char *id)
{
    mn_req *r = find(cc, id);
    if (!r) {
        send_error(cc, id, MN_E_UNKNOWN_ID, "no request with this id is in flight on this connection");
    } else if (!r->cancelled) {
        r->cancelled = true;
        mn_kick_kvmem(cc->ca->cfg.addr);
        mn_kick_verifier(cc->ca->cfg.addr);
    }
}

static void handle_line(cconn *cc, const char *line, size_t len)
{
    mn_client_actor *ca = cc->ca;
    mn_line l;
    mn_proto_error perr;
    if (mn_proto_parse(line, len, ca->cfg.max_tokens_limit, ca->cfg.chat, &l, &perr) != MN_OK) {
        ca->rejected++;
        send_error(cc, perr.id, perr.code, perr.message);
        return;
    }
    if (l.kind == MN_LINE_CANCEL) {
        cancel(cc, l.cancel_id);
        mn_line_free(&l);
        return;
    }
    const char *refusal = find(cc, l.req.id) ? "id is already in flight on this connection"
                          : ca->draining     ? "the server is draining and takes no new requests"
                                             : NULL;
    if (refusal) {
        ca->rejected++;
        send_error(cc, l.req.id, ca->draining ? MN_E_BUSY : MN_E_INVALID_REQUEST, refusal);
        mn_line_free(&l);
        return;
    }
    char id[MN_PROTO_MAX_ID_LEN + 1];
    snprintf(id, sizeof id, "%s", l.req.id);
    mn_req *r = mn_req_new(&l.req, ca->cfg.addr->client, cc);
    if (!r) {
        ca->rejected++;
        send_error(cc, id, MN_E_INTERNAL, "out of memory");
        return;
    }
    if (cc->throttled) /* cannot happen today (a throttled connection is not read); kept for safety */
        mn_req_event(r, MN_REQ_EV_THROTTLED);
    r->conn_next = cc->reqs;
    cc->reqs = r;
    ca->live++;
    r->msg.type = MN_MSG_ADMIT;
    mn_mailbox_post(ca->cfg.addr->intake, &r->msg);
}

/* A complete line: the connection is not idle, whatever the line was (a blank one, which asks for
 * nothing and gets no answer, keeps it alive too). */
static void on_line(void *ctx, const char *line, size_t len)
{
    cconn *cc = ctx;
    if (len)
        handle_line(cc, line, len);
    watch_idle(cc);
}

static void on_overflow(void *ctx)
{
    ((cconn *)ctx)->ca->rejected++;
    send_error(ctx, NULL, MN_E_LINE_TOO_LONG, "a line must be at most max_line bytes; nothing more is read on this connection");
}

static void on_input_end(void *ctx)
{
    cconn *cc = ctx;
    cc->input_ended = true;
    close_if_answered(cc);
}

static void on_throttle(void *ctx, bool throttled)
{
    cconn *cc = ctx;
    cc->throttled = throttled;
    if (cc->idle)
        evtimer_del(cc->idle); /* the stall's time starts now; after it, idle time if nothing runs */
    watch_idle(cc);
    for (mn_req *r = cc->reqs; r; r = r->conn_next)
        mn_req_event(r, throttled ? MN_REQ_EV_THROTTLED : MN_REQ_EV_RESUMED);
    if (cc->reqs) {
        mn_kick_kvmem(cc->ca->cfg.addr); /* paused: their batch slots are free; resumed: admit them */
        mn_kick_verifier(cc->ca->cfg.addr);
    }
}

static void on_flushed(void *ctx)
{
    check_drained(((cconn *)ctx)->ca);
}

static void on_close(void *ctx)
{
    cconn *cc = ctx;
    mn_client_actor *ca = cc->ca;
    for (mn_req *r = cc->reqs; r; r = r->conn_next) {
        r->conn = NULL;
        r->cancelled = true;
    }
    if (cc->reqs) {
        mn_kick_kvmem(ca->cfg.addr);
        mn_kick_verifier(ca->cfg.addr);
    }
    if (cc->idle)
        event_free(cc->idle);
    mn_free(cc);
    check_drained(ca);
}

static void *on_open(void *owner, mn_conn *c)
{
    cconn *cc = mn_calloc(1, sizeof *cc);
    if (!cc) {
        mn_log(MN_LOG_ERROR, "client: out of memory for a connection");
        return NULL;
    }
    mn_client_actor *ca = owner;
    cc->ca = ca;
    cc->c = c;
    if (ca->cfg.idle_timeout_s && !(cc->idle = evtimer_new(ca->base, on_idle, cc))) {
        mn_log(MN_LOG_ERROR, "client: out of memory for a connection");
        mn_free(cc);
        return NULL;
    }
    watch_idle(cc);
    return cc;
}

mn_status mn_client_actor_new(struct event_base *base, const mn_client_actor_config *cfg, mn_client_actor **out,
                              mn_err *err)
{
    mn_client_actor *ca = mn_calloc(1, sizeof *ca);
    if (!ca)
        return mn_fail(err, MN_NOMEM, "client: out of memory");
    ca->cfg = *cfg;
    ca->base = base;
    mn_net_callbacks cb = {
        .owner = ca,
        .on_open = on_open,
        .on_line = on_line,
        .on_overflow = on_overflow,
        .on_input_end = on_input_end,
        .on_throttle = on_throttle,
        .on_flushed = on_flushed,
        .on_close = on_close,
    };
    mn_status s = mn_net_new(base, &cfg->net, &cb, &ca->net, err);
    if (s != MN_OK) {
        mn_free(ca);
        return s;
    }
    *out = ca;
    return MN_OK;
}

void mn_client_actor_free(mn_client_actor *ca)
{
    if (!ca)
        return;
    mn_net_free(ca->net);
    mn_free(ca);
}

/* Stream r->text[sent, ready) as one delta line. */
static void flush_text(cconn *cc, mn_req *r)
{
    if (r->ready <= r->sent)
        return;
    size_t len = 0;
    char *line = mn_proto_delta(r->p.id, r->text + r->sent, r->ready - r->sent, &len);
    write_line(cc, line, len);
    r->sent = r->ready;
}

/* The request's one final line: done, or error. Then it is freed. */
static void answer(mn_client_actor *ca, mn_req *r)
{
    cconn *cc = r->conn;
    if (r->failed)
        ca->failed++;
    else
        ca->done++;
    ca->outcomes[mn_req_outcome(r)]++;
    mn_req_observe_latency(r, &ca->e2e, &ca->tpot);
    if (cc) {
        size_t len = 0;
        char *line;
        if (r->failed) {
            line = mn_proto_error_line(r->p.id, r->err_code, r->err_msg, &len);
        } else {
            if (r->p.stream)
                flush_text(cc, r);
            static const int32_t none[1];
            const int32_t *ids = r->toks.ids ? r->toks.ids + r->n_prompt : none;
            mn_proto_spec spec = {r->spec.drafted, r->spec.accepted, r->spec.verifications, ca->cfg.n_drafters,
                                  ca->cfg.drafter_names, r->spec.voted_n};
            line = mn_proto_done(r->p.id, r->text ? r->text : "", r->text_len, r->finish ? r->finish : "stop",
                                 r->n_prompt, r->n_gen, ca->cfg.n_drafters ? &spec : NULL,
                                 r->p.return_tokens ? ids : NULL, r->toks.n - r->n_prompt, &len);
        }
        write_line(cc, line, len);
        for (mn_req **p = &cc->reqs; *p; p = &(*p)->conn_next)
            if (*p == r) {
                *p = r->conn_next;
                break;
            }
        watch_idle(cc);
        close_if_answered(cc); /* may free cc */
    }
    ca->live--;
    mn_req_free(r);
    check_drained(ca);
}

static void drain(mn_client_actor *ca, mn_drain *d)
{
    if (!ca->draining)
        mn_log(MN_LOG_INFO, "draining: %llu requests in flight", (unsigned long long)ca->live);
    ca->draining = true;
    mn_net_stop_listening(ca->net);
    if (d->force) {
        mn_log(MN_LOG_WARN, "drain: closing %u connections, cancelling %llu requests", mn_net_connections(ca->net),
               (unsigned long long)ca->live);
        mn_net_close_all(ca->net);
    }
    mn_free(d);
    check_drained(ca);
}

static void stats(mn_client_actor *ca, mn_stats_part *q)
{
    q->stats->client.in_flight = ca->live;
    q->stats->client.done = ca->done;
    q->stats->client.failed = ca->failed;
    q->stats->client.rejected = ca->rejected;
    q->stats->client.e2e = ca->e2e;
    q->stats->client.tpot = ca->tpot;
    q->stats->client.connections = mn_net_connections(ca->net);
    q->stats->client.throttled = mn_net_throttled(ca->net);
    q->stats->client.accept_pauses = mn_net_accept_pauses(ca->net);
    q->stats->client.idle_closed = ca->idle_closed;
    q->stats->client.stalled_closed = ca->stalled_closed;
    q->stats->client.draining = ca->draining;
    memcpy(q->stats->client.outcomes, ca->outcomes, sizeof ca->outcomes);
    mn_stats_reply(q);
}

void mn_client_actor_handle(void *client, mn_msg *m)
{
    mn_client_actor *ca = client;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_FLUSH: {
        mn_req *r = (mn_req *)((char *)m - offsetof(mn_req, flush));
        r->flush_queued = false;
        if (r->conn && r->state != MN_REQ_FINISHED)
            flush_text(r->conn, r);
        break;
    }
    case MN_MSG_DONE:
        answer(ca, (mn_req *)m);
        break;
    case MN_MSG_DRAIN:
        drain(ca, (mn_drain *)m);
        break;
    case MN_MSG_STATS:
        stats(ca, (mn_stats_part *)m);
        break;
    default:
        mn_log(MN_LOG_ERROR, "client: unexpected message %u", m->type);
    }
}
