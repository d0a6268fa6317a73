/* http.c - the http actor (see http.h).
 *
 * Every HTTP request this actor takes gets an hreq, from its callback until its reply is written
 * (evhttp's on_complete) or its connection is gone. The connection's close callback points at the
 * hreq meanwhile (one request at a time per connection). A generation's hreq also holds its
 * choices' mn_reqs (one per choice: openai.h) until the last is DONE; if the connection goes first,
 * evhttp detaches the request (it no longer has a connection) and frees it when it is answered, so
 * the hreq lives on, `gone`, until then.
 * Invariants: `live` counts the hreqs; a drain ends when it is 0; `running` counts an hreq's choices
 * not DONE yet, and each of them is in the engine.
 */
#include "actors/http.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "actors/request.h"
#include "actors/stats.h"
#include "model/sampler.h"
#include "net/backoff.h"
#include "net/metrics.h"
#include "net/openai.h"
#include "util/alloc.h"
#include "util/log.h"

#define READ_HELD (64u << 10) /* most bytes read from a client while its reply is written */

_Static_assert(MN_LOGPROB_TOP >= MN_PROTO_MAX_TOP_LOGPROBS, "the sampler keeps every alternative a client may ask for");

/* One HTTP request: answered at once (health, models, errors), when its stats query is back
 * (/metrics), or when its generation is DONE (a completion, holding r until then). */
typedef struct hreq {
    mn_http_actor *ha;
    struct evhttp_request *req;
    struct evhttp_connection *evcon; /* NULL once the connection is gone */
    struct event *peer;              /* a generation before its reply starts: the client's end, peeked */
    bool gone;                       /* the connection closed before the reply was complete */
    bool writing;                    /* the reply is queued: on_complete or the close ends the hreq */
    struct hreq *prev, *next;
    /* a completion: its choices, each an engine request, kept after DONE for the answer */
    mn_req **rs;                     /* [n_rs] */
    bool *finished;                  /* [n_rs] DONE */
    size_t *text_offset;             /* [n_rs] bytes of text streamed before a choice's next chunk */
    uint32_t n_rs, running, n;       /* choices, those not DONE, choices per prompt */
    uint32_t opened;                 /* bit i: choice i's first chunk is out (a chat's carries the role) */
    int failed;                      /* the first choice that failed, or -1 */
    mn_oai_kind api;
    char *model;
    char id[40];
    int64_t created;
    bool include_usage;
    bool started;                    /* a stream's headers are out */
    bool throttled;
    /* /metrics */
    mn_stats_query *query;
} hreq;

struct mn_http_actor {
    mn_http_config cfg;
    struct evhttp *http;
    struct evhttp_bound_socket *sock;
    mn_backoff *backoff;             /* pauses the listener while out of descriptors */
    int port;
    hreq *reqs;                      /* every live hreq */
    uint64_t live;
    uint64_t serial;
    uint64_t generations;            /* hreqs holding their mn_req */
    uint64_t done, failed, rejected;
    mn_hist e2e, tpot;               /* the answered choices' latencies (mn_req_observe_latency) */
    uint64_t outcomes[MN_OUTCOMES];
    int64_t created;                 /* when it started: /v1/models says so */
    mn_rng seeds;                    /* the seeds of requests that give none */
    bool draining, drained;
};

int mn_http_actor_port(const mn_http_actor *ha) { return ha->port; }

static void check_drained(mn_http_actor *ha)
{
    if (ha->draining && !ha->drained && ha->live == 0) {
        ha->drained = true;
        ha->cfg.on_drained(ha->cfg.owner);
    }
}

/* What the actor tells every choice still running. */
typedef enum {
    CANCEL,   /* the client is gone, or the answer failed: set cancelled, the engine ends it */
    THROTTLE, /* the connection stopped reading: MN_REQ_EV_THROTTLED */
    RESUME,   /* it reads again: MN_REQ_EV_RESUMED */
} telling;

static void to_running(hreq *h, telling what)
{
    bool changed = false;
    for (uint32_t i = 0; i < h->n_rs; i++) {
        mn_req *r = h->rs[i];
        if (!r || h->finished[i])
            continue;
        if (what == CANCEL) {
            changed |= !r->cancelled;
            r->cancelled = true;
        } else {
            mn_req_event(r, what == THROTTLE ? MN_REQ_EV_THROTTLED : MN_REQ_EV_RESUMED);
            changed = true;
        }
    }
    if (changed) {
        mn_kick_kvmem(h->ha->cfg.addr);
        mn_kick_verifier(h->ha->cfg.addr);
    }
}

/* The choices the engine has let go of (DONE, or never posted); a running one is the engine's. */
static void free_choices(hreq *h)
{
    for (uint32_t i = 0; i < h->n_rs; i++)
        if (h->finished[i])
            mn_req_free(h->rs[i]);
    mn_free(h->rs);
    mn_free(h->finished);
    mn_free(h->text_offset);
    h->rs = NULL;
    h->n_rs = 0;
}

/* The client's side of the socket became readable while its generation runs and evhttp reads
 * nothing (it reads again once the reply starts): its end of input, or a reset, is the client
 * gone, and the connection fails as a reset would, deferred (on_close cancels the choices); bytes
 * (the next request, pipelined) stop the watch, as evhttp would not see an end behind them either. */
static void on_peer(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    hreq *h = arg;
    char byte;
    ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        event_add(h->peer, NULL);
    } else if (n <= 0 && h->evcon) {
        mn_log(MN_LOG_DEBUG, "http: the client of %s left before its reply", h->id);
        bufferevent_trigger_event(evhttp_connection_get_bufferevent(h->evcon), BEV_EVENT_EOF,
                                  BEV_TRIG_DEFER_CALLBACKS);
    }
}

/* Watch h's socket for its client's end until the reply starts (a client that leaves is noticed
 * then too, but a whole answer is only written at the end). Without memory for it, the request
 * runs to its end whatever the client does, as it did before this watch. */
static void watch_peer(hreq *h)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(h->evcon);
    if (!(h->peer = event_new(evhttp_connection_get_base(h->evcon), bufferevent_getfd(bev), EV_READ, on_peer, h)) ||
        event_add(h->peer, NULL) != 0)
        mn_log(MN_LOG_WARN, "http: cannot watch a connection for its client's end");
}

static void unwatch_peer(hreq *h)
{
    if (h->peer) {
        event_free(h->peer);
        h->peer = NULL;
    }
}

static void hreq_free(hreq *h)
{
    mn_http_actor *ha = h->ha;
    unwatch_peer(h);
    if (h->evcon) {
        evhttp_connection_set_closecb(h->evcon, NULL, NULL);
        bufferevent_setwatermark(evhttp_connection_get_bufferevent(h->evcon), EV_READ, 0, 0); /* the next request's */
    }
    *(h->prev ? &h->prev->next : &ha->reqs) = h->next;
    if (h->next)
        h->next->prev = h->prev;
    free_choices(h);
    mn_free(h->model);
    mn_free(h->query);
    mn_free(h);
    ha->live--;
    check_drained(ha);
}

/* evhttp wrote the whole reply. */
static void on_complete(struct evhttp_request *req, void *arg)
{
    (void)req;
    hreq_free(arg);
}

/* The connection is going: a reply being written is lost with it, a generation is cancelled. */
static void on_close(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    hreq *h = arg;
    unwatch_peer(h);
    h->evcon = NULL;
    h->gone = true;
    if (h->writing)
        return hreq_free(h); /* evhttp frees the request with the connection */
    to_running(h, CANCEL);
}

static hreq *hreq_new(mn_http_actor *ha, struct evhttp_request *req)
{
    hreq *h = mn_calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->ha = ha;
    h->req = req;
    h->evcon = evhttp_request_get_connection(req);
    h->next = ha->reqs;
    if (ha->reqs)
        ha->reqs->prev = h;
    ha->reqs = h;
    ha->live++;
    evhttp_connection_set_closecb(h->evcon, on_close, h);
    /* While the reply is written evhttp reads on, with no reader, only to see the connection close:
     * a client sending meanwhile would have all it sends held. At most READ_HELD bytes are read. */
    bufferevent_setwatermark(evhttp_connection_get_bufferevent(h->evcon), EV_READ, 0, READ_HELD);
    return h;
}

/* Queue the reply (body may be NULL) and let go of the hreq: it ends when the reply is written, or
 * at once when its connection is already gone (sending frees the detached request). */
static void send_reply(hreq *h, int status, const char *type, const char *body, size_t len)
{
    struct evhttp_request *req = h->req;
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    if (type)
        evhttp_add_header(out, "Content-Type", type);
    if (h->ha->draining)
        evhttp_add_header(out, "Connection", "close");
    unwatch_peer(h);
    /* A HEAD reply has the headers only: evhttp would send the body, which a kept-alive client
     * takes for the start of the next reply. */
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD)
        body = NULL;
    struct evbuffer *buf = body ? evbuffer_new() : NULL;
    if (buf)
        evbuffer_add(buf, body, len);
    if (h->gone) {
        evhttp_send_reply(req, status, NULL, buf);
        if (buf)
            evbuffer_free(buf);
        return hreq_free(h);
    }
    h->writing = true;
    evhttp_request_set_on_complete_cb(req, on_complete, h);
    evhttp_send_reply(req, status, NULL, buf); /* may complete (and free h) before it returns */
    if (buf)
        evbuffer_free(buf);
}

static void send_json(hreq *h, int status, char *body, size_t len)
{
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                              "\"code\":null}}";
    send_reply(h, body ? status : 500, "application/json", body ? body : oom, body ? len : strlen(oom));
    mn_free(body);
}

static void send_error(hreq *h, int status, const char *type, const char *msg)
{
    mn_oai_error e = {.status = status, .type = type};
    snprintf(e.message, sizeof e.message, "%s", msg);
    size_t len = 0;
    char *body = mn_oai_error_body(&e, &len);
    h->ha->rejected++;
    send_json(h, status, body, len);
}

/* 405, with the Allow header RFC 9110 asks of it: "GET, HEAD" or "POST". */
static void send_not_allowed(hreq *h, bool get)
{
    evhttp_add_header(evhttp_request_get_output_headers(h->req), "Allow", get ? "GET, HEAD" : "POST");
    send_error(h, 405, "invalid_request_error", get ? "this path takes GET" : "this path takes POST");
}

/* ---- generations ----------------------------------------------------------------------------- */

static const char *finish_reason(const mn_req *r) { return r->finish ? r->finish : "stop"; }

/* r->lp[from, to) as the API's logprobs, with each token's text. */
static mn_oai_logprob *logprobs(const mn_http_actor *ha, const mn_req *r, uint32_t from, uint32_t to)
{
    mn_oai_logprob *out = mn_calloc(to > from ? to - from : 1, sizeof *out);
    for (uint32_t i = from; out && i < to; i++) {
        const mn_logprob *l = &r->lp[i];
        mn_oai_logprob *o = &out[i - from];
        o->text = mn_tok_piece(ha->cfg.tok, l->token, &o->len);
        o->logprob = l->logprob;
        o->n_top = l->n_top < MN_PROTO_MAX_TOP_LOGPROBS ? l->n_top : MN_PROTO_MAX_TOP_LOGPROBS;
        for (uint32_t k = 0; k < o->n_top; k++) {
            o->top[k].text = mn_tok_piece(ha->cfg.tok, l->top[k], &o->top[k].len);
            o->top[k].logprob = l->top_logprob[k];
        }
    }
    return out;
}

static mn_oai_result result_of(const hreq *h)
{
    return (mn_oai_result){.kind = h->api, .id = h->id, .model = h->model, .created = h->created};
}

static uint32_t choice_of(const hreq *h, const mn_req *r)
{
    uint32_t i = 0;
    while (i + 1 < h->n_rs && h->rs[i] != r)
        i++;
    return i;
}

/* A paused stream's output is written: let it run again. */
static void on_written(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    hreq *h = arg;
    if (!h->throttled || !h->running)
        return;
    h->throttled = false;
    to_running(h, RESUME);
}

/* Write one server-sent event (the headers first, once); on_written follows once it is out. */
static void write_event(hreq *h, char *event, size_t len)
{
    if (!event) {
        mn_log(MN_LOG_ERROR, "http: out of memory for a stream chunk");
        return;
    }
    if (!h->started) {
        unwatch_peer(h);
        struct evkeyvalq *out = evhttp_request_get_output_headers(h->req);
        evhttp_add_header(out, "Content-Type", "text/event-stream");
        evhttp_add_header(out, "Cache-Control", "no-cache");
        evhttp_add_header(out, "X-Accel-Buffering", "no"); /* nginx: pass each event on at once */
        if (h->ha->draining) /* as send_reply says it: the connection ends with this reply */
            evhttp_add_header(out, "Connection", "close");
        /* A stream's length is unknown: HTTP/1.1 chunks it, and HTTP/1.0 can only end it by
         * closing. libevent gives an HTTP/1.0 request that asked for keep-alive "Content-Length:
         * 0" and keeps its connection, so the client read an empty reply and then took the events
         * for the next one; without the request's keep-alive the stream ends with the connection
         * (HTTP/1.1 connections persist without it, so theirs are unchanged). */
        struct evkeyvalq *in = evhttp_request_get_input_headers(h->req);
        const char *conn = evhttp_find_header(in, "Connection");
        if (conn && !strcasecmp(conn, "keep-alive"))
            evhttp_remove_header(in, "Connection");
        evhttp_send_reply_start(h->req, 200, "OK");
        h->started = true;
    }
    struct evbuffer *buf = evbuffer_new();
    if (buf && evbuffer_add(buf, event, len) == 0)
        evhttp_send_reply_chunk_with_cb(h->req, buf, on_written, h);
    if (buf)
        evbuffer_free(buf);
    mn_free(event);
}

/* Past out_high unsent bytes the request pauses until evhttp has written them all (on_written). */
static void watch_output(hreq *h)
{
    struct bufferevent *bev = h->evcon ? evhttp_connection_get_bufferevent(h->evcon) : NULL;
    if (!bev || h->throttled || evbuffer_get_length(bufferevent_get_output(bev)) <= h->ha->cfg.out_high)
        return;
    h->throttled = true;
    to_running(h, THROTTLE);
}

/* Stream r->text[sent, ready) and the log-probabilities of the tokens generated since the last chunk
 * (a token whose text a stop string cut away, or holds back, has its entry all the same: with no
 * new text, in a chunk of its own). A chat's first chunk for each choice opens its message (the
 * role). A choice's text_offset advances by the pieces of the tokens whose entries went out, as
 * the whole response counts it, not by the text sent (part of a token's may still be held back). */
static void stream_text(hreq *h, mn_req *r)
{
    uint32_t i = choice_of(h, r);
    bool first = h->api == MN_OAI_CHAT && !(h->opened >> i & 1);
    if (r->ready <= r->sent && !first && !(r->lp && r->lp_sent < r->n_lp))
        return;
    mn_oai_result res = result_of(h);
    res.index = i;
    res.text = r->text ? r->text + r->sent : "";
    res.text_len = r->ready - r->sent;
    res.first = first;
    h->opened |= 1u << i;
    res.text_offset = h->text_offset[i];
    mn_oai_logprob *lp = NULL;
    if (r->lp) {
        lp = logprobs(h->ha, r, r->lp_sent, r->n_lp);
        res.logprobs = lp;
        res.n_logprobs = lp ? r->n_lp - r->lp_sent : 0;
        r->lp_sent = r->n_lp;
    }
    size_t len = 0;
    char *event = mn_oai_chunk(&res, &len);
    for (size_t k = 0; k < res.n_logprobs; k++)
        h->text_offset[i] += lp[k].len;
    mn_free(lp);
    r->sent = r->ready;
    write_event(h, event, len);
    if (h->running)
        watch_output(h);
}

static mn_proto_spec spec_of(const mn_http_actor *ha, const mn_req *r)
{
    return (mn_proto_spec){r->spec.drafted, r->spec.accepted, r->spec.verifications, ha->cfg.n_drafters,
                           ha->cfg.drafter_names, r->spec.voted_n};
}

/* A full queue is 429 (too many requests: clients retry it, OpenAI's with a backoff), not 503,
 * which stays a draining server's: nginx moves a 503 to another instance and parks the one that
 * gave it (deploy/nginx.conf), and with every instance's queue full that parked them all, leaving
 * no upstream for fail_timeout, /health included. */
static int status_of(mn_errcode code)
{
    return code == MN_E_BUSY ? 429 : code == MN_E_INTERNAL ? 500 : 400;
}

/* A failed request: an error status, or an error event when its stream has begun. */
static void answer_failed(hreq *h, const mn_req *r)
{
    mn_oai_error e = {.status = status_of(r->err_code),
                      .type = r->err_code == MN_E_BUSY       ? "server_busy"
                              : r->err_code == MN_E_INTERNAL ? "server_error"
                                                             : "invalid_request_error"};
    snprintf(e.message, sizeof e.message, "%s", r->err_msg);
    if (r->err_code == MN_E_INVALID_REQUEST) /* what the engine refuses after parsing is the prompt */
        snprintf(e.param, sizeof e.param, "%s", h->api == MN_OAI_CHAT ? "messages" : "prompt");
    size_t len = 0;
    char *body = mn_oai_error_body(&e, &len);
    if (!h->started) {
        if (e.status == 429)
            evhttp_add_header(evhttp_request_get_output_headers(h->req), "Retry-After", "1");
        return send_json(h, e.status, body, len);
    }
    char *event = body ? mn_malloc(len + 9) : NULL;
    if (event)
        snprintf(event, len + 9, "data: %s\n\n", body);
    mn_free(body);
    write_event(h, event, len + 8);
}

/* Usage over the choices: each prompt's tokens once (the first of its n choices), every
 * choice's completion; the drafts' counters summed into *spec (voted: [MN_MAX_DRAFTERS]). */
static void usage_of(const mn_http_actor *ha, const hreq *h, mn_oai_result *res, mn_proto_spec *spec,
                     uint32_t *voted)
{
    *spec = spec_of(ha, h->rs[0]);
    memset(voted, 0, MN_MAX_DRAFTERS * sizeof *voted);
    spec->drafted = spec->accepted = spec->verifications = 0;
    spec->voted = voted;
    res->usage = true;
    res->prompt_tokens = res->completion_tokens = 0;
    for (uint32_t i = 0; i < h->n_rs; i++) {
        const mn_req *r = h->rs[i];
        res->prompt_tokens += i % h->n == 0 ? r->n_prompt : 0;
        res->completion_tokens += r->n_gen;
        spec->drafted += r->spec.drafted;
        spec->accepted += r->spec.accepted;
        spec->verifications += r->spec.verifications;
        for (uint32_t d = 0; d < ha->cfg.n_drafters && d < MN_MAX_DRAFTERS; d++)
            voted[d] += r->spec.voted_n[d];
    }
    res->spec = ha->cfg.n_drafters ? spec : NULL;
}

/* A stream's choice is DONE: the rest of its text, then, with several choices, a chunk with its
 * finish_reason and its own speculation figures (a single choice's come with the usage, in
 * end_stream_ok). */
static void end_choice(hreq *h, mn_req *r)
{
    mn_req_seal(r);
    stream_text(h, r);
    if (h->n_rs == 1)
        return; /* its last chunk is the stream's: end_stream_ok */
    mn_oai_result res = result_of(h);
    mn_proto_spec spec = spec_of(h->ha, r);
    res.index = choice_of(h, r);
    res.text = "";
    res.finish_reason = finish_reason(r);
    res.spec = h->ha->cfg.n_drafters ? &spec : NULL;
    size_t len = 0;
    char *event = mn_oai_chunk(&res, &len); /* before write_event reads len */
    write_event(h, event, len);
}

/* Every choice of a stream is DONE: the last chunk with the usage (with one choice, its finish_reason
 * too), usage alone if asked, then [DONE]. */
static void end_stream_ok(hreq *h)
{
    mn_oai_result res = result_of(h);
    mn_proto_spec spec;
    uint32_t voted[MN_MAX_DRAFTERS];
    usage_of(h->ha, h, &res, &spec, voted);
    res.text = "";
    size_t len = 0;
    char *event;
    if (h->n_rs == 1) {
        res.finish_reason = finish_reason(h->rs[0]);
        event = mn_oai_chunk(&res, &len);
        write_event(h, event, len);
    }
    if (h->include_usage) {
        event = mn_oai_usage_chunk(&res, &len);
        write_event(h, event, len);
    }
    static const char done[] = "data: [DONE]\n\n";
    write_event(h, mn_strndup(done, sizeof done - 1), sizeof done - 1);
}

/* Every choice is DONE and none failed: one body with all of them. */
static void answer_whole(hreq *h)
{
    mn_oai_result *res = mn_calloc(h->n_rs, sizeof *res);
    mn_oai_logprob **lps = mn_calloc(h->n_rs, sizeof *lps);
    if (!res || !lps) {
        mn_free(res);
        mn_free(lps);
        return send_error(h, 500, "server_error", "out of memory");
    }
    mn_proto_spec spec;
    uint32_t voted[MN_MAX_DRAFTERS];
    for (uint32_t i = 0; i < h->n_rs; i++) {
        const mn_req *r = h->rs[i];
        res[i] = result_of(h);
        res[i].index = i;
        res[i].text = r->text ? r->text : "";
        res[i].text_len = r->text_len;
        res[i].finish_reason = finish_reason(r);
        lps[i] = r->lp ? logprobs(h->ha, r, 0, r->n_lp) : NULL;
        res[i].logprobs = lps[i];
        res[i].n_logprobs = lps[i] ? r->n_lp : 0;
    }
    usage_of(h->ha, h, &res[0], &spec, voted);
    size_t len = 0;
    char *body = mn_oai_response(res, h->n_rs, &len);
    for (uint32_t i = 0; i < h->n_rs; i++)
        mn_free(lps[i]);
    mn_free(lps);
    mn_free(res);
    send_json(h, 200, body, len);
}

/* The end of a stream: the chunked reply's end, then the hreq waits for it to be written. */
static void end_stream(hreq *h)
{
    if (h->gone) {
        evhttp_send_reply_end(h->req); /* frees the detached request */
        return hreq_free(h);
    }
    h->writing = true;
    evhttp_request_set_on_complete_cb(h->req, on_complete, h);
    evhttp_send_reply_end(h->req); /* may complete (and free h) before it returns */
}

/* DONE for one choice. The first that fails cancels the others, and the answer is its error; once
 * every choice is DONE the answer goes (h may be gone once it is queued, and frees the choices). */
static void answer(mn_http_actor *ha, mn_req *r)
{
    hreq *h = r->conn;
    uint32_t i = choice_of(h, r);
    h->finished[i] = true;
    h->running--;
    ha->generations--;
    ha->outcomes[mn_req_outcome(r)]++;
    mn_req_observe_latency(r, &ha->e2e, &ha->tpot);
    if (r->failed)
        ha->failed++;
    else
        ha->done++;
    if (r->failed && h->failed < 0) {
        h->failed = (int)i;
        to_running(h, CANCEL);
    }
    if (h->failed < 0 && r->p.stream && !h->gone)
        end_choice(h, r);
    if (h->running)
        return;
    if (h->failed >= 0 && !h->started) {
        answer_failed(h, h->rs[h->failed]);
    } else if (!r->p.stream) {
        answer_whole(h);
    } else {
        if (!h->gone)
            h->failed >= 0 ? answer_failed(h, h->rs[h->failed]) : end_stream_ok(h);
        end_stream(h);
    }
}

/* The choices' engine requests, posted to intake; false (nothing posted) when memory runs out. */
static bool start_choices(mn_http_actor *ha, hreq *h, const mn_oai_request *q)
{
    uint32_t n = mn_oai_choices(q);
    if (!(h->rs = mn_calloc(n, sizeof *h->rs)) || !(h->finished = mn_calloc(n, sizeof *h->finished)) ||
        !(h->text_offset = mn_calloc(n, sizeof *h->text_offset)))
        return false;
    h->n_rs = n;
    for (uint32_t i = 0; i < n; i++) {
        mn_req_params p;
        h->finished[i] = true; /* not posted: free_choices frees it */
        if (mn_oai_choice_params(q, i, &p) != MN_OK)
            return false;
        p.id = mn_malloc(sizeof h->id + 16);
        if (p.id)
            snprintf(p.id, sizeof h->id + 16, n > 1 ? "%s-%u" : "%s", h->id, i);
        if (!p.id || !(h->rs[i] = mn_req_new(&p, ha->cfg.addr->http, h))) {
            mn_req_params_free(&p);
            return false;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        h->finished[i] = false;
        h->running++;
        ha->generations++;
        h->rs[i]->msg.type = MN_MSG_ADMIT;
        mn_mailbox_post(ha->cfg.addr->intake, &h->rs[i]->msg);
    }
    return true;
}

static void generate(mn_http_actor *ha, hreq *h, mn_oai_kind api)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(h->req);
    size_t n = evbuffer_get_length(in);
    const char *body = (const char *)evbuffer_pullup(in, -1);
    mn_oai_config oc = {.max_tokens_limit = ha->cfg.max_tokens_limit, .chat = ha->cfg.chat};
    mn_oai_request q;
    mn_oai_error e;
    if (mn_oai_parse(api, body ? body : "", body ? n : 0, &oc, &q, &e) != MN_OK) {
        size_t len = 0;
        char *out = mn_oai_error_body(&e, &len);
        ha->rejected++;
        return send_json(h, e.status, out, len);
    }
    if (!q.seeded) /* a seed of JSON's exact integers, as a client could have sent */
        q.p.seed = (uint64_t)(mn_rng_uniform(&ha->seeds) * 0x1p53);
    snprintf(h->id, sizeof h->id, "%s-%llu", api == MN_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)++ha->serial);
    h->api = api;
    h->model = q.model[0] ? q.model : mn_strndup(ha->cfg.model_name, strlen(ha->cfg.model_name));
    if (h->model != q.model)
        mn_free(q.model);
    q.model = NULL;
    h->created = (int64_t)time(NULL);
    h->include_usage = q.include_usage;
    h->n = q.n;
    h->failed = -1;
    bool ok = h->model && start_choices(ha, h, &q);
    mn_oai_request_free(&q);
    if (!ok) {
        free_choices(h);
        return send_error(h, 500, "server_error", "out of memory");
    }
    watch_peer(h);
}

/* ---- the other routes ------------------------------------------------------------------------ */

static void metrics_ready(mn_http_actor *ha, mn_stats_query *q)
{
    hreq *h = ha->reqs;
    while (h && h->query != q)
        h = h->next;
    if (!h)
        return;
    mn_metrics_info info = {.model = ha->cfg.model_name, .backend = ha->cfg.backend, .n_drafters = ha->cfg.n_drafters,
                            .drafter_names = ha->cfg.drafter_names};
    size_t len = 0;
    char *text = mn_metrics_render(&q->stats, &info, &len);
    if (!text)
        return send_error(h, 500, "server_error", "out of memory");
    send_reply(h, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    mn_free(text);
}

static void ask_metrics(mn_http_actor *ha, hreq *h)
{
    if (!(h->query = mn_malloc(sizeof *h->query)))
        return send_error(h, 500, "server_error", "out of memory");
    mn_stats_ask(h->query, ha->cfg.addr, ha->cfg.addr->http);
}

/* Constant time in the key's length: a wrong key must not tell how much of it was right. */
static bool authorized(const mn_http_actor *ha, struct evhttp_request *req)
{
    if (!ha->cfg.api_key)
        return true;
    const char *got = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!got || strncasecmp(got, "Bearer ", 7)) /* the scheme is case-insensitive (RFC 9110 11.1) */
        return false;
    got += 7;
    size_t n = strlen(ha->cfg.api_key), m = strlen(got);
    unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)ha->cfg.api_key[i] ^ (unsigned char)(i < m ? got[i] : 0);
    return diff == 0;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    mn_http_actor *ha = arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    bool gen = path && (!strcmp(path, "/v1/completions") || !strcmp(path, "/v1/chat/completions"));
    hreq *h = hreq_new(ha, req);
    if (!h) {
        mn_log(MN_LOG_ERROR, "http: out of memory for a request");
        evhttp_send_error(req, 500, NULL);
        return;
    }
    if (!path)
        return send_error(h, 400, "invalid_request_error", "the request's URI has no path");
    bool get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    if (!strcmp(path, "/health")) {
        static const char ok[] = "{\"status\":\"ok\"}", draining[] = "{\"status\":\"draining\"}";
        if (!get)
            return send_not_allowed(h, true);
        return ha->draining ? send_reply(h, 503, "application/json", draining, strlen(draining))
                            : send_reply(h, 200, "application/json", ok, strlen(ok));
    }
    if (!authorized(ha, req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
        return send_error(h, 401, "invalid_request_error", "a valid API key is required: Authorization: Bearer KEY");
    }
    if (!strcmp(path, "/metrics") || !strcmp(path, "/v1/models")) {
        if (!get)
            return send_not_allowed(h, true);
        if (!strcmp(path, "/metrics"))
            return ask_metrics(ha, h);
        size_t len = 0;
        char *body = mn_oai_models(ha->cfg.model_name, ha->created, &len);
        return send_json(h, 200, body, len);
    }
    if (!gen)
        return send_error(h, 404, "invalid_request_error", "no such path: try /v1/completions, "
                                                           "/v1/chat/completions, /v1/models, /health or /metrics");
    if (cmd != EVHTTP_REQ_POST)
        return send_not_allowed(h, false);
    if (ha->draining)
        return send_error(h, 503, "server_busy", "the server is draining and takes no new requests");
    generate(ha, h, strcmp(path, "/v1/chat/completions") ? MN_OAI_COMPLETION : MN_OAI_CHAT);
}

/* evhttp accepted a connection and asks for its bufferevent: NULL lets it make its own. */
static struct bufferevent *on_accept(struct event_base *base, void *arg)
{
    (void)base;
    mn_http_actor *ha = arg;
    mn_backoff_accepted(ha->backoff);
    return NULL;
}

/* ---- the actor ------------------------------------------------------------------------------- */

mn_status mn_http_actor_new(struct event_base *base, const mn_http_config *cfg, mn_http_actor **out, mn_err *err)
{
    mn_http_actor *ha = mn_calloc(1, sizeof *ha);
    if (!ha)
        return mn_fail(err, MN_NOMEM, "http: out of memory");
    ha->cfg = *cfg;
    ha->created = (int64_t)time(NULL);
    /* Unseeded requests must not repeat across restarts either: the kernel's entropy, or (where
     * getrandom fails) the clock and the process id. */
    uint64_t s;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s)
        s = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)ha;
    mn_rng_seed(&ha->seeds, s);
    if (!(ha->http = evhttp_new(base))) {
        mn_free(ha);
        return mn_fail(err, MN_NOMEM, "http: out of memory");
    }
    evhttp_set_gencb(ha->http, on_request, ha);
    evhttp_set_bevcb(ha->http, on_accept, ha);
    evhttp_set_max_body_size(ha->http, cfg->max_body);
    evhttp_set_max_headers_size(ha->http, 64 << 10);
    evhttp_set_timeout(ha->http, (int)cfg->timeout_s);
    /* every method a client may try reaches on_request, which answers 405 in the API's shape */
    evhttp_set_allowed_methods(ha->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST | EVHTTP_REQ_OPTIONS |
                                             EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH);
    /* a body over the limit is read to its end before the 413: closed while the client still sends,
     * the socket would reset, and the client see a broken pipe instead of the answer */
    evhttp_set_flags(ha->http, EVHTTP_SERVER_LINGERING_CLOSE);
    mn_status st = MN_OK;
    errno = 0; /* what the bind below fails with, if it does (a name that does not resolve sets none) */
    if (!(ha->backoff = mn_backoff_new(base, "http")))
        st = mn_fail(err, MN_NOMEM, "http: out of memory");
    else if (!(ha->sock = evhttp_bind_socket_with_handle(ha->http, cfg->host, (uint16_t)cfg->port)))
        st = mn_fail(err, MN_IO, "http: cannot listen on %s:%d: %s", cfg->host, cfg->port,
                     errno ? strerror(errno) : "no such address");
    else if (!mn_backoff_watch(ha->backoff, evhttp_bound_socket_get_listener(ha->sock)))
        st = mn_fail(err, MN_INVALID, "http: too many listeners in this process to watch for running out of "
                                      "descriptors");
    if (st != MN_OK) {
        evhttp_free(ha->http); /* the bound socket with it */
        mn_backoff_free(ha->backoff);
        mn_free(ha);
        return st;
    }
    struct sockaddr_storage ss;
    ev_socklen_t sl = sizeof ss;
    evutil_socket_t fd = evhttp_bound_socket_get_fd(ha->sock);
    /* Accepted sockets inherit the listener's send buffer: bounded, so that out_high, not a
     * multi-megabyte kernel buffer, decides when a stream that is not read pauses. */
    int sndbuf = (int)cfg->out_high;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    ha->port = getsockname(fd, (struct sockaddr *)&ss, &sl) == 0
                   ? ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                    : ((struct sockaddr_in *)&ss)->sin_port)
                   : cfg->port;
    *out = ha;
    return MN_OK;
}

void mn_http_actor_free(mn_http_actor *ha)
{
    if (!ha)
        return;
    ha->drained = true;    /* what follows is no drain */
    mn_backoff_stop(ha->backoff); /* it forgets the listener before it goes */
    evhttp_free(ha->http); /* closes the connections: their close callbacks free the hreqs */
    while (ha->reqs)
        hreq_free(ha->reqs);
    mn_backoff_free(ha->backoff);
    mn_free(ha);
}

/* A forced drain fails every connection that still has a request, as a reset would: a client that
 * stopped reading would otherwise hold its reply, and the drain, until --http-timeout. evhttp then
 * detaches a reply not yet complete and calls the close callback, which ends the hreq (a reply
 * being written) or cancels its choices (a generation, ended when they are DONE). Deferred, so that
 * this walk frees nothing under it. */
static void drain(mn_http_actor *ha, mn_drain *d)
{
    if (!ha->draining && ha->sock) {
        mn_backoff_stop(ha->backoff);
        evhttp_del_accept_socket(ha->http, ha->sock);
        ha->sock = NULL;
    }
    ha->draining = true;
    if (d->force) {
        uint32_t closed = 0;
        for (hreq *h = ha->reqs; h; h = h->next) {
            if (h->evcon) {
                bufferevent_trigger_event(evhttp_connection_get_bufferevent(h->evcon), BEV_EVENT_ERROR,
                                          BEV_TRIG_DEFER_CALLBACKS);
                closed++;
            }
            to_running(h, CANCEL);
        }
        if (closed)
            mn_log(MN_LOG_WARN, "drain: closing %u HTTP connections", closed);
    }
    mn_free(d);
    check_drained(ha);
}

static void stats(mn_http_actor *ha, mn_stats_part *q)
{
    mn_frontend_stats *s = &q->stats->http;
    s->in_flight = ha->generations;
    s->done = ha->done;
    s->failed = ha->failed;
    s->rejected = ha->rejected;
    s->accept_pauses = mn_backoff_pauses(ha->backoff);
    s->e2e = ha->e2e;
    s->tpot = ha->tpot;
    memcpy(s->outcomes, ha->outcomes, sizeof ha->outcomes);
    s->draining = ha->draining;
    mn_stats_reply(q);
}

void mn_http_actor_handle(void *http, mn_msg *m)
{
    mn_http_actor *ha = http;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_FLUSH: {
        mn_req *r = (mn_req *)((char *)m - offsetof(mn_req, flush));
        r->flush_queued = false;
        hreq *h = r->conn;
        if (!h->gone && r->state != MN_REQ_FINISHED && h->failed < 0) /* a failed one's answer is its error */
            stream_text(h, r);
        break;
    }
    case MN_MSG_DONE:
        answer(ha, (mn_req *)m);
        break;
    case MN_MSG_DRAIN:
        drain(ha, (mn_drain *)m);
        break;
    case MN_MSG_STATS:
        stats(ha, (mn_stats_part *)m);
        break;
    case MN_MSG_STATS_BACK: {
        mn_stats_query *q = mn_stats_back(m);
        if (q)
            metrics_ready(ha, q);
        break;
    }
    default:
        mn_log(MN_LOG_ERROR, "http: unexpected message %u", m->type);
    }
}
