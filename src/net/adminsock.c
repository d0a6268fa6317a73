/* adminsock.c - the admin socket's transport (see adminsock.h). */
#include "net/adminsock.h"

#include <errno.h>
#include <event2/event.h>
#include <nanomsg/nn.h>
#include <nanomsg/pubsub.h>
#include <nanomsg/reqrep.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/sockpath.h"
#include "util/alloc.h"
#include "util/log.h"

struct mn_adminsock {
    int sock;
    struct event *ev;      /* readable; removed while a reply is owed */
    mn_adminsock_fn fn;
    void *owner;
    mn_sockpath_bound ipc;  /* the ipc socket's file, removed at free */
    bool owed;             /* a message was handed to the owner and not yet answered */
};

static void receive(mn_adminsock *a)
{
    while (!a->owed) {
        char *buf = NULL;
        int n = nn_recv(a->sock, &buf, NN_MSG, NN_DONTWAIT);
        if (n < 0) {
            if (nn_errno() != EAGAIN && nn_errno() != EINTR)
                mn_log(MN_LOG_WARN, "admin: receive failed: %s", nn_strerror(nn_errno()));
            return;
        }
        a->owed = true;
        event_del(a->ev); /* the fd stays readable while another peer's message waits: it would spin */
        if ((size_t)n > MN_ADMINSOCK_MAX_MSG) { /* answered, not parsed (nanomsg would drop it unanswered) */
            static const char big[] = "{\"ok\":false,\"error\":\"an admin message is at most 1 MiB\"}";
            mn_adminsock_reply(a, big, sizeof big - 1);
        } else {
            a->fn(a->owner, buf, (size_t)n); /* may reply at once, clearing owed */
        }
        nn_freemsg(buf);
    }
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    receive(arg);
}

void mn_adminsock_reply(mn_adminsock *a, const char *reply, size_t len)
{
    if (nn_send(a->sock, reply, len, NN_DONTWAIT) < 0)
        mn_log(MN_LOG_WARN, "admin: reply failed: %s", nn_strerror(nn_errno()));
    a->owed = false;
    if (event_add(a->ev, NULL) < 0)
        mn_log(MN_LOG_ERROR, "admin: cannot watch the socket again; later commands go unanswered");
    /* nanomsg's fd is edge-like: what arrived while a reply was owed must be read now. Deferred to
     * the loop, because the owner may be replying from inside fn. */
    event_active(a->ev, EV_READ, 0);
}

/* IPv4 loopback only: nanomsg binds IPv4 unless told otherwise, and takes "localhost" for the
 * name of an interface, so tcp://[::1]:N and tcp://localhost:N never bound. */
static bool loopback_tcp(const char *addr) { return !strncmp(addr, "tcp://127.", 10); }

/* A nanomsg socket of protocol proto bound to addr (ipc://PATH claimed and made socket_mode, or
 * loopback tcp://); *ipc gets the socket file to remove at close (none for tcp). */
static mn_status nn_listen(int proto, const char *what, const char *addr, unsigned socket_mode, int *sock,
                           mn_sockpath_bound *ipc_file, mn_err *err)
{
    bool ipc = !strncmp(addr, "ipc://", 6);
    *sock = -1;
    *ipc_file = (mn_sockpath_bound){0};
    if (!ipc && !loopback_tcp(addr))
        return mn_fail(err, MN_INVALID, "--%s %s: use ipc://PATH or tcp://127.0.0.1:PORT (loopback only)", what, addr);
    mn_status s;
    if (ipc && (s = mn_sockpath_claim(addr + 6, err)) != MN_OK)
        return s;
    if ((*sock = nn_socket(AF_SP, proto)) < 0)
        return mn_fail(err, MN_IO, "%s: nn_socket: %s", what, nn_strerror(nn_errno()));
    mode_t old = umask(077); /* the ipc socket file is the owner's only, from its first moment */
    int ep = nn_bind(*sock, addr);
    int en = nn_errno();
    umask(old);
    if (ep < 0)
        return mn_fail(err, MN_IO, "%s: cannot bind %s: %s", what, addr, nn_strerror(en));
    if (ipc) {
        if ((s = mn_sockpath_bound_take(ipc_file, addr + 6, err)) != MN_OK ||
            (s = mn_sockpath_set_mode(addr + 6, socket_mode, err)) != MN_OK)
            return s;
    }
    return MN_OK;
}

static void nn_unlisten(int sock, mn_sockpath_bound *ipc_file)
{
    if (sock >= 0)
        nn_close(sock);
    mn_sockpath_bound_release(ipc_file);
}

mn_status mn_adminsock_new(struct event_base *base, const char *addr, unsigned socket_mode, mn_adminsock_fn fn,
                           void *owner, mn_adminsock **out, mn_err *err)
{
    mn_adminsock *a = mn_calloc(1, sizeof *a);
    if (!a)
        return mn_fail(err, MN_NOMEM, "admin: out of memory");
    a->fn = fn;
    a->owner = owner;
    int rcvfd;
    size_t sz = sizeof rcvfd;
    mn_status s = nn_listen(NN_REP, "admin", addr, socket_mode, &a->sock, &a->ipc, err);
    if (s != MN_OK)
        goto fail;
    int unlimited = -1; /* nanomsg's 1 MiB limit drops a longer message, and its REQ peer waits for ever */
    if (nn_setsockopt(a->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &unlimited, sizeof unlimited) < 0) {
        s = mn_fail(err, MN_IO, "admin: NN_RCVMAXSIZE: %s", nn_strerror(nn_errno()));
        goto fail;
    }
    if (nn_getsockopt(a->sock, NN_SOL_SOCKET, NN_RCVFD, &rcvfd, &sz) < 0 ||
        !(a->ev = event_new(base, rcvfd, EV_READ | EV_PERSIST, on_readable, a)) || event_add(a->ev, NULL) < 0) {
        s = mn_fail(err, MN_IO, "admin: cannot watch the socket");
        goto fail;
    }
    *out = a;
    return MN_OK;
fail:
    mn_adminsock_free(a);
    return s;
}

void mn_adminsock_free(mn_adminsock *a)
{
    if (!a)
        return;
    if (a->ev)
        event_free(a->ev);
    nn_unlisten(a->sock, &a->ipc);
    mn_free(a);
}

struct mn_pubsock {
    int sock;
    mn_sockpath_bound ipc;
    uint64_t dropped;
};

mn_status mn_pubsock_new(const char *addr, unsigned socket_mode, mn_pubsock **out, mn_err *err)
{
    mn_pubsock *p = mn_calloc(1, sizeof *p);
    if (!p)
        return mn_fail(err, MN_NOMEM, "events: out of memory");
    mn_status s = nn_listen(NN_PUB, "events", addr, socket_mode, &p->sock, &p->ipc, err);
    if (s != MN_OK) {
        mn_pubsock_free(p);
        return s;
    }
    *out = p;
    return MN_OK;
}

void mn_pubsock_publish(mn_pubsock *p, const char *line, size_t len)
{
    if (p && nn_send(p->sock, line, len, NN_DONTWAIT) < 0 && p->dropped++ == 0)
        mn_log(MN_LOG_WARN, "events: cannot publish (%s); dropping events", nn_strerror(nn_errno()));
}

void mn_pubsock_free(mn_pubsock *p)
{
    if (!p)
        return;
    nn_unlisten(p->sock, &p->ipc);
    mn_free(p);
}
