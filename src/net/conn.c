/* conn.c - line transport (see conn.h): listeners, framing, watermarks, accept back-off.
 *
 * Invariants: a connection is in the net's list from accept until conn_free; on_close is called
 * exactly once, from conn_free; reading is enabled only while the connection is neither throttled,
 * closing nor half-closed, or after an overflow (it reads and discards to the client's end). */
#include "net/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "net/backoff.h"
#include "net/sockpath.h"
#include "util/alloc.h"
#include "util/log.h"

#define LINGER_S 2 /* how long an overflowed connection reads on after its last answer */

struct mn_conn {
    mn_net *net;
    struct bufferevent *bev;
    void *ctx;             /* the owner's state for this connection */
    mn_conn *prev, *next;  /* the net's list */
    bool throttled;        /* output above the high watermark: not reading */
    bool closing;          /* close once the output is written */
    bool input_ended;      /* the client shut down its sending side, or overflowed */
    bool end_told;         /* on_input_end was called */
    bool overflowed;       /* a line passed max_line: whatever comes in now is read and thrown away */
    bool eof;              /* the client's end of input was read */
    bool lingering;        /* written and shut down after an overflow: reading to the client's end */
    struct event *linger;  /* while lingering: ends it after LINGER_S whatever the client sends */
    size_t scanned;        /* bytes at the input's start already searched for a '\n' in vain */
};

struct mn_net {
    struct event_base *base;
    mn_net_config cfg;
    mn_net_callbacks cb;
    struct evconnlistener *tcp, *unix_l;
    mn_sockpath_bound unix_file; /* the Unix socket's file, removed when the listeners close */
    int port;
    mn_conn *conns;
    uint32_t n_conns;
    uint32_t n_throttled;
    mn_backoff *backoff;   /* pauses the listeners while out of descriptors */
    char *line;            /* [max_line + 2] scratch for one line (and a CRLF's '\r') */
};

int mn_net_port(const mn_net *n) { return n->port; }
uint32_t mn_net_connections(const mn_net *n) { return n->n_conns; }
uint32_t mn_net_throttled(const mn_net *n) { return n->n_throttled; }
uint64_t mn_net_accept_pauses(const mn_net *n) { return mn_backoff_pauses(n->backoff); }

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
    n->n_throttled -= c->throttled;
    if (c->prev)
        c->prev->next = c->next;
    else
        n->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    n->n_conns--;
    if (c->linger)
        event_free(c->linger);
    bufferevent_free(c->bev);
    void *ctx = c->ctx;
    mn_free(c);
    n->cb.on_close(ctx); /* last: the owner may look at the net's counters */
}

static void on_linger_end(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    conn_free(arg);
}

/* The output is written and c may go. After an overflow the client may still be sending (the rest
 * of its long line): closing a socket with unread input sends a reset, which can destroy the
 * answers still on their way. So such a connection lingers: its sending side is shut down (the
 * client reads the end of the answers) and it reads on, discarding, until the client's end of
 * input or LINGER_S seconds, then goes (a timer of its own: a read timeout would start over at
 * every byte a client trickles). */
static void conn_written(mn_conn *c)
{
    if (!c->overflowed || c->eof) {
        conn_free(c);
        return;
    }
    c->lingering = true;
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    c->linger = evtimer_new(c->net->base, on_linger_end, c);
    if (!c->linger || evtimer_add(c->linger, &(struct timeval){.tv_sec = LINGER_S}) != 0) {
        conn_free(c); /* out of memory: a reset may cut the answers short, but nothing is held */
        return;
    }
    bufferevent_enable(c->bev, EV_READ);
}

void mn_conn_close_when_written(mn_conn *c)
{
    c->closing = true;
    if (!c->overflowed) /* an overflowed one reads on: what it reads is discarded */
        bufferevent_disable(c->bev, EV_READ);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    if (!evbuffer_get_length(bufferevent_get_output(c->bev)))
        conn_written(c);
}

/* Fail c from the loop rather than inside the caller's stack: the owner is in the middle of using
 * it. The deferred error event lands in on_event, which frees it. */
static void conn_fail_later(mn_conn *c)
{
    bufferevent_disable(c->bev, EV_READ);
    bufferevent_trigger_event(c->bev, BEV_EVENT_ERROR, BEV_TRIG_DEFER_CALLBACKS);
}

void mn_conn_close(mn_conn *c) { conn_fail_later(c); }

mn_status mn_conn_write(mn_conn *c, const char *line, size_t len)
{
    if (bufferevent_write(c->bev, line, len) != 0) {
        mn_log(MN_LOG_ERROR, "net: cannot queue %zu bytes of output; closing the connection", len);
        conn_fail_later(c);
        return MN_NOMEM;
    }
    if (!c->throttled && evbuffer_get_length(bufferevent_get_output(c->bev)) > c->net->cfg.out_high) {
        c->throttled = true;
        c->net->n_throttled++;
        if (!c->overflowed) /* discarding goes on: a client blocked sending could not read the output */
            bufferevent_disable(c->bev, EV_READ);
        c->net->cb.on_throttle(c->ctx, true);
    }
    return MN_OK;
}

/* Whether a line of len bytes (without its '\n'), or the start of one, is longer than max_line: a
 * CRLF line's '\r' is not counted. */
static bool too_long(struct evbuffer *in, size_t len, uint32_t max_line)
{
    if (len <= max_line)
        return false;
    if (len > (size_t)max_line + 1)
        return true;
    struct evbuffer_ptr last;
    char ch = 0;
    evbuffer_ptr_set(in, &last, len - 1, EVBUFFER_PTR_SET);
    evbuffer_copyout_from(in, &last, &ch, 1);
    return ch != '\r';
}

/* Frame and deliver the complete lines waiting in the input, unless throttled or closing. Returns
 * false when c may have been freed. */
static bool read_lines(mn_conn *c)
{
    mn_net *n = c->net;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    if (c->overflowed) {
        evbuffer_drain(in, evbuffer_get_length(in));
        return true;
    }
    while (!c->throttled && !c->closing) {
        size_t eol_len, avail = evbuffer_get_length(in);
        struct evbuffer_ptr from; /* past what earlier reads searched: a long line is searched once */
        bool resume = c->scanned && c->scanned <= avail &&
                      evbuffer_ptr_set(in, &from, c->scanned, EVBUFFER_PTR_SET) == 0;
        struct evbuffer_ptr eol = evbuffer_search_eol(in, resume ? &from : NULL, &eol_len, EVBUFFER_EOL_LF);
        c->scanned = eol.pos < 0 ? avail : 0;
        if (too_long(in, eol.pos >= 0 ? (size_t)eol.pos : avail, n->cfg.max_line)) {
            /* No line is taken any more (the rest is read and discarded: a client blocked sending
             * its long line must get to read its answers); the connection ends as after a
             * half-close, once the lines before this one are answered. */
            evbuffer_drain(in, avail);
            c->overflowed = c->input_ended = c->end_told = true;
            n->cb.on_overflow(c->ctx);
            n->cb.on_input_end(c->ctx); /* may close c */
            return false;
        }
        if (eol.pos < 0 && !(c->input_ended && avail)) {
            if (c->input_ended && !c->end_told) {
                c->end_told = true;
                n->cb.on_input_end(c->ctx); /* may close c */
                return false;
            }
            return true;
        }
        size_t len = eol.pos >= 0 ? (size_t)eol.pos : avail; /* after a half-close: the unterminated last line */
        evbuffer_remove(in, n->line, len);
        c->scanned = 0;
        if (eol.pos >= 0)
            evbuffer_drain(in, eol_len);
        if (len && n->line[len - 1] == '\r')
            len--;
        n->line[len] = 0;
        n->cb.on_line(c->ctx, n->line, len);
    }
    return true;
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
    if (c->closing) {
        if (!c->lingering && !evbuffer_get_length(bufferevent_get_output(bev)))
            conn_written(c);
        return;
    }
    if (c->throttled) {
        c->throttled = false;
        c->net->n_throttled--;
        if (!c->input_ended)
            bufferevent_enable(bev, EV_READ);
        c->net->cb.on_throttle(c->ctx, false);
        if (!read_lines(c)) /* lines that waited while throttled; may free c */
            return;
    }
    if (!evbuffer_get_length(bufferevent_get_output(bev)))
        c->net->cb.on_flushed(c->ctx);
}

/* End of input is a half-close until a write fails: a client may shut down its sending side and
 * still read the answers. A client that is really gone turns the next write into an error. */
static void on_event(struct bufferevent *bev, short what, void *arg)
{
    mn_conn *c = arg;
    (void)bev;
    if (c->lingering || what & BEV_EVENT_ERROR || !(what & BEV_EVENT_EOF)) {
        conn_free(c); /* a lingering one: the client's end, or the linger's timeout */
        return;
    }
    c->input_ended = c->eof = true;
    read_lines(c);
}

/* Options whose failure changes only performance (NODELAY) or only how early a client that does
 * not read is paused (SNDBUF: the output watermark still applies) are logged, not fatal. */
static void tune_socket(mn_net *n, evutil_socket_t fd, int family)
{
    int one = 1; /* replies are small lines that should leave at once */
    if ((family == AF_INET || family == AF_INET6) &&
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        mn_log(MN_LOG_DEBUG, "net: TCP_NODELAY: %s", strerror(errno));
    int sndbuf = (int)n->cfg.out_high;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf) != 0)
        mn_log(MN_LOG_WARN, "net: SO_SNDBUF %d: %s", sndbuf, strerror(errno));
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    mn_net *n = arg;
    (void)l, (void)salen;
    mn_backoff_accepted(n->backoff);
    tune_socket(n, fd, sa->sa_family);
    mn_conn *c = mn_calloc(1, sizeof *c);
    if (!c || !(c->bev = bufferevent_socket_new(n->base, fd, BEV_OPT_CLOSE_ON_FREE))) {
        mn_log(MN_LOG_ERROR, "net: out of memory for a connection");
        mn_free(c);
        evutil_closesocket(fd);
        return;
    }
    c->net = n;
    if (!(c->ctx = n->cb.on_open(n->cb.owner, c))) {
        bufferevent_free(c->bev);
        mn_free(c);
        return;
    }
    c->next = n->conns;
    if (n->conns)
        n->conns->prev = c;
    n->conns = c;
    n->n_conns++;
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_setwatermark(c->bev, EV_WRITE, n->cfg.out_high / 4, 0); /* resume below a quarter */
    if (bufferevent_enable(c->bev, EV_READ | EV_WRITE) != 0) {
        mn_log(MN_LOG_ERROR, "net: cannot watch a new connection");
        conn_free(c);
    }
}

static struct evconnlistener *listen_on(mn_net *n, const struct sockaddr *sa, socklen_t len)
{
    struct evconnlistener *l =
        evconnlistener_new_bind(n->base, on_accept, n, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
                                128, sa, (int)len);
    if (l && !mn_backoff_watch(n->backoff, l)) {
        evconnlistener_free(l);
        errno = EMFILE; /* no more listeners can be watched for running out of descriptors */
        return NULL;
    }
    return l;
}

static mn_status listen_tcp(mn_net *n, mn_err *err)
{
    const mn_net_config *cfg = &n->cfg;
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
        return mn_fail(err, MN_INVALID, "--host %s: not a numeric IPv4 or IPv6 address", cfg->host);
    }
    if (!(n->tcp = listen_on(n, (struct sockaddr *)&ss, len)))
        return mn_fail(err, MN_IO, "cannot listen on %s:%d: %s", cfg->host, cfg->port, strerror(errno));
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    if (getsockname(evconnlistener_get_fd(n->tcp), (struct sockaddr *)&bound, &blen) != 0)
        return mn_fail(err, MN_IO, "getsockname: %s", strerror(errno));
    n->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                               : ((struct sockaddr_in6 *)&bound)->sin6_port);
    return MN_OK;
}

static mn_status listen_unix(mn_net *n, mn_err *err)
{
    const char *path = n->cfg.unix_path;
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    mn_status s = mn_sockpath_claim(path, err);
    if (s != MN_OK)
        return s;
    snprintf(un.sun_path, sizeof un.sun_path, "%s", path); /* claim checked the length */
    mode_t old = umask(077); /* never more open than asked, not even between bind and chmod */
    n->unix_l = listen_on(n, (struct sockaddr *)&un, sizeof un);
    int en = errno;
    umask(old);
    if (!n->unix_l)
        return mn_fail(err, MN_IO, "cannot listen on %s: %s", path, strerror(en));
    if ((s = mn_sockpath_bound_take(&n->unix_file, path, err)) != MN_OK)
        return s;
    return mn_sockpath_set_mode(path, n->cfg.socket_mode, err);
}

mn_status mn_net_new(struct event_base *base, const mn_net_config *cfg, const mn_net_callbacks *cb, mn_net **out,
                     mn_err *err)
{
    mn_net *n = mn_calloc(1, sizeof *n);
    if (!n || !(n->line = mn_malloc((size_t)cfg->max_line + 2)) || !(n->backoff = mn_backoff_new(base, "net"))) {
        if (n)
            mn_free(n->line);
        mn_free(n);
        return mn_fail(err, MN_NOMEM, "net: out of memory");
    }
    n->base = base;
    n->cfg = *cfg;
    n->cb = *cb;
    n->port = -1;
    mn_status s = MN_OK;
    if (cfg->port >= 0)
        s = listen_tcp(n, err);
    if (s == MN_OK && cfg->unix_path)
        s = listen_unix(n, err);
    if (s != MN_OK) {
        mn_net_free(n);
        return s;
    }
    *out = n;
    return MN_OK;
}

/* The listeners close (disabled, they kept their sockets: the kernel went on completing connects
 * into the backlog, and those clients waited out the drain for a reset), and the Unix socket file
 * goes now, so that a new instance may claim the path while this one drains (and only if it is
 * still this one's: mn_sockpath_bound). */
void mn_net_stop_listening(mn_net *n)
{
    mn_backoff_stop(n->backoff); /* it forgets the listeners before they go */
    if (n->tcp)
        evconnlistener_free(n->tcp);
    if (n->unix_l)
        evconnlistener_free(n->unix_l);
    n->tcp = n->unix_l = NULL;
    mn_sockpath_bound_release(&n->unix_file);
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
    mn_net_stop_listening(n);
    mn_backoff_free(n->backoff);
    mn_free(n->line);
    mn_free(n);
}
