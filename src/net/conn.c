/* conn.c - the net actor (see conn.h): listeners, line framing, replies, watermarks. */
#include "net/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/alloc.h"
#include "util/log.h"

struct mn_conn {
    mn_net *net;
    struct bufferevent *bev;
    mn_req *reqs;          /* in flight, linked by conn_next */
    mn_conn *prev, *next;  /* the net's list */
    bool throttled;        /* output above the high watermark: not reading, not producing */
    bool closing;          /* close once the output is written */
    bool input_ended;      /* the client shut down its sending side: answer what it sent, then close */
};

struct mn_net {
    mn_engine *e;
    struct evconnlistener *tcp, *unix_l;
    int port;
    mn_conn *conns;
    uint32_t n_conns;
    uint32_t n_throttled;  /* connections now throttled */
    char *line;            /* [max_line + 1] scratch for one line */
};

bool mn_req_paused(const mn_req *r) { return r->conn && r->conn->throttled; }
int mn_net_port(const mn_net *n) { return n->port; }
uint32_t mn_net_connections(const mn_net *n) { return n->n_conns; }
uint32_t mn_net_throttled(const mn_net *n) { return n->n_throttled; }

bool mn_net_flushed(const mn_net *n)
{
    for (const mn_conn *c = n->conns; c; c = c->next)
        if (evbuffer_get_length(bufferevent_get_output(c->bev)))
            return false;
    return true;
}

static void conn_free(mn_conn *c)
{
    mn_net *n = c->net;
    for (mn_req *r = c->reqs; r; r = r->conn_next) {
        r->conn = NULL;
        r->cancelled = true;
    }
    if (c->reqs) {
        mn_engine_kick_kvmem(n->e);
        mn_engine_kick_verifier(n->e);
    }
    n->n_throttled -= c->throttled;
    if (c->prev)
        c->prev->next = c->next;
    else
        n->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    n->n_conns--;
    bufferevent_free(c->bev);
    mn_free(c);
    mn_engine_check_drained(n->e);
}

/* Close c once its output is written (at once if nothing is waiting). */
static void close_when_written(mn_conn *c)
{
    c->closing = true;
    bufferevent_disable(c->bev, EV_READ);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    if (!evbuffer_get_length(bufferevent_get_output(c->bev)))
        conn_free(c);
}

/* After a half-close: close once every line the client sent is handled and answered. */
static void finish_if_answered(mn_conn *c)
{
    if (c->input_ended && !c->closing && !c->reqs && !evbuffer_get_length(bufferevent_get_input(c->bev)))
        close_when_written(c);
}

/* Queue a reply line (taking ownership of `line`); throttle past the high watermark. */
static void conn_write(mn_conn *c, char *line, size_t len)
{
    if (!line) {
        mn_log(MN_LOG_ERROR, "net: out of memory for a reply line");
        return;
    }
    bufferevent_write(c->bev, line, len);
    mn_free(line);
    if (!c->throttled && evbuffer_get_length(bufferevent_get_output(c->bev)) > c->net->e->cfg.out_high) {
        c->throttled = true;
        c->net->n_throttled++;
        bufferevent_disable(c->bev, EV_READ);
        mn_engine_kick_kvmem(c->net->e); /* its batch slots are free now */
    }
}

static void send_error(mn_conn *c, const char *id, mn_errcode code, const char *msg)
{
    size_t len = 0;
    char *line = mn_proto_error_line(id, code, msg, &len);
    conn_write(c, line, len);
}

static mn_req *conn_find(mn_conn *c, const char *id)
{
    for (mn_req *r = c->reqs; r; r = r->conn_next)
        if (!strcmp(r->p.id, id))
            return r;
    return NULL;
}

static void handle_line(mn_conn *c, const char *line, size_t len)
{
    mn_engine *e = c->net->e;
    mn_line l;
    mn_proto_error perr;
    if (mn_proto_parse(line, len, e->cfg.max_tokens_limit, &l, &perr) != MN_OK) {
        send_error(c, perr.id, perr.code, perr.message);
        return;
    }
    if (l.kind == MN_LINE_CANCEL) {
        mn_req *r = conn_find(c, l.cancel_id);
        if (!r) {
            send_error(c, l.cancel_id, MN_E_UNKNOWN_ID, "no request with this id is in flight on this connection");
        } else if (!r->cancelled) {
            r->cancelled = true;
            mn_engine_kick_kvmem(e);
            mn_engine_kick_verifier(e);
        }
        mn_line_free(&l);
        return;
    }
    if (conn_find(c, l.req.id)) {
        send_error(c, l.req.id, MN_E_INVALID_REQUEST, "id is already in flight on this connection");
        mn_line_free(&l);
        return;
    }
    if (e->draining) {
        send_error(c, l.req.id, MN_E_BUSY, "the server is draining and takes no new requests");
        mn_line_free(&l);
        return;
    }
    mn_req *r = mn_req_new(&l.req, c);
    if (!r) {
        send_error(c, perr.id, MN_E_INTERNAL, "out of memory");
        return;
    }
    r->conn_next = c->reqs;
    c->reqs = r;
    e->live_requests++;
    r->stage = MN_REQ_INTAKE;
    r->msg.type = MN_MSG_ADMIT;
    mn_mailbox_post(e->intake_mb, &r->msg);
}

/* Frame and handle the complete lines waiting in the input, unless throttled or closing. */
static void read_lines(mn_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    uint32_t max_line = c->net->e->cfg.max_line;
    while (!c->throttled && !c->closing) {
        size_t eol_len;
        struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        size_t avail = evbuffer_get_length(in);
        if ((eol.pos < 0 && avail > max_line) || (eol.pos >= 0 && (size_t)eol.pos > max_line)) {
            send_error(c, NULL, MN_E_LINE_TOO_LONG, "a line must be at most max_line bytes; closing");
            close_when_written(c);
            return;
        }
        if (eol.pos < 0 && !(c->input_ended && avail)) {
            finish_if_answered(c); /* after a half-close, the last answer may already be out */
            return;
        }
        size_t len = eol.pos >= 0 ? (size_t)eol.pos : avail; /* after a half-close: the unterminated last line */
        evbuffer_remove(in, c->net->line, len);
        if (eol.pos >= 0)
            evbuffer_drain(in, eol_len);
        if (len && c->net->line[len - 1] == '\r')
            len--;
        c->net->line[len] = 0;
        if (len)
            handle_line(c, c->net->line, len);
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    (void)bev;
    read_lines(arg);
}

/* The output fell below the low watermark (or, when closing, emptied). */
static void on_write(struct bufferevent *bev, void *arg)
{
    mn_conn *c = arg;
    mn_engine *e = c->net->e;
    if (c->closing) {
        if (!evbuffer_get_length(bufferevent_get_output(bev)))
            conn_free(c);
        return;
    }
    if (c->throttled) {
        c->throttled = false;
        c->net->n_throttled--;
        if (!c->input_ended)
            bufferevent_enable(bev, EV_READ);
        mn_engine_kick_verifier(e);
        read_lines(c); /* may close c after a half-close */
    }
    mn_engine_check_drained(e);
}

/* End of input is a half-close until a write fails: a client may shut down its sending side
 * (`nc -N`, a script) and still read the answers. A client that is really gone turns the next
 * write into an error, which cancels its requests. */
static void on_event(struct bufferevent *bev, short what, void *arg)
{
    mn_conn *c = arg;
    if (what & BEV_EVENT_ERROR || !(what & BEV_EVENT_EOF)) {
        conn_free(c); /* the client is gone: its requests are cancelled */
        return;
    }
    c->input_ended = true;
    read_lines(c); /* may close c */
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    mn_net *n = arg;
    (void)l, (void)salen;
    if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) {
        int one = 1; /* replies are small lines that should leave at once */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    /* Bound what the kernel holds for a client, so the output watermark - not a multi-megabyte
     * auto-tuned socket buffer - decides when a client that does not read is paused. */
    int sndbuf = (int)n->e->cfg.out_high;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    mn_conn *c = mn_calloc(1, sizeof *c);
    if (!c || !(c->bev = bufferevent_socket_new(n->e->base, fd, BEV_OPT_CLOSE_ON_FREE))) {
        mn_log(MN_LOG_ERROR, "net: out of memory for a connection");
        mn_free(c);
        evutil_closesocket(fd);
        return;
    }
    c->net = n;
    c->next = n->conns;
    if (n->conns)
        n->conns->prev = c;
    n->conns = c;
    n->n_conns++;
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_setwatermark(c->bev, EV_WRITE, n->e->cfg.out_high / 4, 0); /* resume below a quarter */
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

static void on_listen_error(struct evconnlistener *l, void *arg)
{
    (void)arg;
    int err = EVUTIL_SOCKET_ERROR();
    mn_log(MN_LOG_WARN, "net: accept failed: %s", evutil_socket_error_to_string(err));
    (void)l; /* EMFILE and friends: the listener keeps going, the client retries */
}

static struct evconnlistener *listen_on(mn_net *n, const struct sockaddr *sa, socklen_t len)
{
    struct evconnlistener *l = evconnlistener_new_bind(n->e->base, on_accept, n,
                                                       LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
                                                           LEV_OPT_CLOSE_ON_EXEC,
                                                       128, sa, (int)len);
    if (l)
        evconnlistener_set_error_cb(l, on_listen_error);
    return l;
}

mn_status mn_net_new(mn_engine *e, mn_net **out, mn_err *err)
{
    const mn_engine_config *cfg = &e->cfg;
    mn_net *n = mn_calloc(1, sizeof *n);
    if (!n || !(n->line = mn_malloc((size_t)cfg->max_line + 1))) {
        mn_free(n);
        return mn_fail(err, MN_NOMEM, "net: out of memory");
    }
    n->e = e;
    n->port = -1;
    if (cfg->port >= 0) {
        struct sockaddr_storage ss = {0};
        socklen_t len;
        struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, cfg->host, &in4->sin_addr) == 1) {
            in4->sin_family = AF_INET;
            in4->sin_port = htons((uint16_t)cfg->port);
            len = sizeof *in4;
        } else if (inet_pton(AF_INET6, cfg->host, &in6->sin6_addr) == 1) {
            in6->sin6_family = AF_INET6;
            in6->sin6_port = htons((uint16_t)cfg->port);
            len = sizeof *in6;
        } else {
            mn_net_free(n);
            return mn_fail(err, MN_INVALID, "--host %s: not a numeric IPv4 or IPv6 address", cfg->host);
        }
        if (!(n->tcp = listen_on(n, (struct sockaddr *)&ss, len))) {
            int en = errno;
            mn_net_free(n);
            return mn_fail(err, MN_IO, "cannot listen on %s:%d: %s", cfg->host, cfg->port, strerror(en));
        }
        struct sockaddr_storage bound;
        socklen_t blen = sizeof bound;
        if (getsockname(evconnlistener_get_fd(n->tcp), (struct sockaddr *)&bound, &blen) == 0)
            n->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                                       : ((struct sockaddr_in6 *)&bound)->sin6_port);
    }
    if (cfg->unix_path) {
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        if (strlen(cfg->unix_path) >= sizeof un.sun_path) {
            mn_net_free(n);
            return mn_fail(err, MN_INVALID, "--unix %s: path too long", cfg->unix_path);
        }
        strcpy(un.sun_path, cfg->unix_path);
        struct stat st;
        if (stat(cfg->unix_path, &st) == 0 && S_ISSOCK(st.st_mode))
            unlink(cfg->unix_path); /* a stale socket from an earlier run */
        if (!(n->unix_l = listen_on(n, (struct sockaddr *)&un, sizeof un))) {
            int en = errno;
            mn_net_free(n);
            return mn_fail(err, MN_IO, "cannot listen on %s: %s", cfg->unix_path, strerror(en));
        }
    }
    *out = n;
    return MN_OK;
}

void mn_net_stop_listening(mn_net *n)
{
    if (n->tcp)
        evconnlistener_disable(n->tcp);
    if (n->unix_l)
        evconnlistener_disable(n->unix_l);
}

void mn_net_close_all(mn_net *n)
{
    while (n->conns)
        conn_free(n->conns);
}

void mn_net_free(mn_net *n)
{
    if (!n)
        return;
    mn_net_close_all(n);
    if (n->tcp)
        evconnlistener_free(n->tcp);
    if (n->unix_l) {
        evconnlistener_free(n->unix_l);
        unlink(n->e->cfg.unix_path);
    }
    mn_free(n->line);
    mn_free(n);
}

/* Stream r->text[sent, ready) as one delta line. */
static void flush_text(mn_conn *c, mn_req *r)
{
    if (r->ready <= r->sent)
        return;
    size_t n, len = 0;
    char *clean = mn_utf8_sanitize(r->text + r->sent, r->ready - r->sent, &n);
    if (clean) {
        char *line = mn_proto_delta(r->p.id, clean, n, &len);
        conn_write(c, line, len);
        mn_free(clean);
    }
    r->sent = r->ready;
}

static void answer(mn_net *n, mn_req *r)
{
    mn_engine *e = n->e;
    mn_conn *c = r->conn;
    if (r->failed)
        e->stats.requests_failed++;
    else
        e->stats.requests_done++;
    if (c) {
        size_t len = 0;
        if (r->failed) {
            char *line = mn_proto_error_line(r->p.id, r->err_code, r->err_msg, &len);
            conn_write(c, line, len);
        } else {
            if (r->p.stream)
                flush_text(c, r);
            size_t n_text;
            char *text = mn_utf8_sanitize(r->text ? r->text : "", r->text_len, &n_text);
            char *line = text ? mn_proto_done(r->p.id, text, n_text, r->finish ? r->finish : "stop", r->n_prompt,
                                              r->n_gen, &len)
                              : NULL;
            if (line)
                conn_write(c, line, len);
            else
                send_error(c, r->p.id, MN_E_INTERNAL, "out of memory for the done line");
            mn_free(text);
        }
        for (mn_req **p = &c->reqs; *p; p = &(*p)->conn_next)
            if (*p == r) {
                *p = r->conn_next;
                break;
            }
        r->conn = NULL;
        finish_if_answered(c); /* may free c */
    }
    e->live_requests--;
    mn_req_free(r);
    mn_engine_check_drained(e);
}

void mn_net_handle(void *net, mn_msg *m)
{
    mn_net *n = net;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_FLUSH: {
        mn_req *r = (mn_req *)((char *)m - offsetof(mn_req, flush));
        r->flush_queued = false;
        if (r->conn && r->stage != MN_REQ_FINISHED)
            flush_text(r->conn, r);
        break;
    }
    case MN_MSG_DONE:
        answer(n, (mn_req *)m);
        break;
    default:
        mn_log(MN_LOG_ERROR, "net: unexpected message %u", m->type);
    }
}
