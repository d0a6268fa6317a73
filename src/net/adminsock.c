/* adminsock.c - the admin socket's transport (see adminsock.h). */
#include "net/adminsock.h"

#include <errno.h>
#include <event2/event.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdbool.h>
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
    char *ipc_path;        /* removed at free */
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
        a->fn(a->owner, buf, (size_t)n); /* may reply at once, clearing owed */
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
    /* nanomsg's fd is edge-like: what arrived while a reply was owed must be read now. Deferred to
     * the loop, because the owner may be replying from inside fn. */
    event_active(a->ev, EV_READ, 0);
}

static bool loopback_tcp(const char *addr)
{
    static const char *ok[] = {"tcp://127.", "tcp://localhost:", "tcp://[::1]:"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!strncmp(addr, ok[i], strlen(ok[i])))
            return true;
    return false;
}

mn_status mn_adminsock_new(struct event_base *base, const char *addr, unsigned socket_mode, mn_adminsock_fn fn,
                           void *owner, mn_adminsock **out, mn_err *err)
{
    bool ipc = !strncmp(addr, "ipc://", 6);
    if (!ipc && !loopback_tcp(addr))
        return mn_fail(err, MN_INVALID, "--admin %s: use ipc://PATH or tcp://127.0.0.1:PORT (loopback only)", addr);
    mn_status s;
    if (ipc && (s = mn_sockpath_claim(addr + 6, err)) != MN_OK)
        return s;
    mn_adminsock *a = mn_calloc(1, sizeof *a);
    if (!a)
        return mn_fail(err, MN_NOMEM, "admin: out of memory");
    a->fn = fn;
    a->owner = owner;
    if ((a->sock = nn_socket(AF_SP, NN_REP)) < 0) {
        mn_free(a);
        return mn_fail(err, MN_IO, "admin: nn_socket: %s", nn_strerror(nn_errno()));
    }
    mode_t old = umask(077); /* the ipc socket file is the owner's only, from its first moment */
    int ep = nn_bind(a->sock, addr);
    int en = nn_errno();
    umask(old);
    int rcvfd;
    size_t sz = sizeof rcvfd;
    if (ep < 0) {
        s = mn_fail(err, MN_IO, "admin: cannot bind %s: %s", addr, nn_strerror(en));
        goto fail;
    }
    if (ipc) {
        if (!(a->ipc_path = mn_strndup(addr + 6, strlen(addr + 6)))) {
            s = mn_fail(err, MN_NOMEM, "admin: out of memory");
            goto fail;
        }
        if ((s = mn_sockpath_set_mode(a->ipc_path, socket_mode, err)) != MN_OK)
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
    nn_close(a->sock);
    if (a->ipc_path)
        unlink(a->ipc_path);
    mn_free(a->ipc_path);
    mn_free(a);
}
