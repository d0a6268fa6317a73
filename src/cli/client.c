/* client.c - blocking JSON-lines client (see client.h). */
#include "cli/client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/alloc.h"

int mn_client_connect(const char *addr, mn_client *c, mn_err *err)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (strchr(addr, '/')) {
        struct sockaddr_un *un = (struct sockaddr_un *)&ss;
        if (strlen(addr) >= sizeof un->sun_path)
            return mn_fail(err, MN_INVALID, "%s: path too long", addr), -1;
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, addr);
        len = sizeof *un;
    } else {
        const char *colon = strrchr(addr, ':');
        char host[64];
        if (!colon || (size_t)(colon - addr) >= sizeof host)
            return mn_fail(err, MN_INVALID, "%s: expected HOST:PORT or a socket path", addr), -1;
        snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
        char *end;
        long port = strtol(colon + 1, &end, 10);
        struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
        if (inet_pton(AF_INET, host, &in4->sin_addr) != 1 || end == colon + 1 || *end || port <= 0 || port > 65535)
            return mn_fail(err, MN_INVALID, "%s: expected a numeric IPv4 HOST:PORT", addr), -1;
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        len = sizeof *in4;
    }
    if ((c->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        connect(c->fd, (struct sockaddr *)&ss, len) < 0) {
        int en = errno;
        mn_client_close(c);
        return mn_fail(err, MN_IO, "cannot connect to %s: %s", addr, strerror(en)), -1;
    }
    if (ss.ss_family == AF_INET) {
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    if (mn_client_set_timeout(c, MN_CLIENT_TIMEOUT_S) < 0) {
        int en = errno;
        mn_client_close(c);
        return mn_fail(err, MN_IO, "%s: cannot set a timeout: %s", addr, strerror(en)), -1;
    }
    return 0;
}

int mn_client_set_timeout(mn_client *c, double seconds)
{
    time_t whole = (time_t)seconds;
    struct timeval tv = {.tv_sec = whole, .tv_usec = (suseconds_t)((seconds - (double)whole) * 1e6)};
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
        setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
        return -1;
    c->timeout_s = seconds;
    return 0;
}

/* Record why a read or a send failed: n from recv or send, errno with it. */
static int failed(mn_client *c, ssize_t n)
{
    c->error = n == 0 ? 0 : errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
    return -1;
}

const char *mn_client_strerror(mn_client *c)
{
    if (c->error == 0)
        return "connection closed before the reply ended";
    if (c->error == ETIMEDOUT)
        snprintf(c->msg, sizeof c->msg, "timed out: nothing from the server for %g s", c->timeout_s);
    else
        snprintf(c->msg, sizeof c->msg, "%s", strerror(c->error));
    return c->msg;
}

int mn_client_send(mn_client *c, const char *data, size_t len)
{
    while (len) {
        ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return failed(c, -1); /* send returns 0 only for 0 bytes */
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read more bytes into the buffer, growing it when full: -1 at EOF or on an error. */
static int fill(mn_client *c)
{
    if (c->len == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4096;
        char *b = mn_realloc(c->buf, cap);
        if (!b) {
            c->error = ENOMEM;
            return -1;
        }
        c->buf = b;
        c->cap = cap;
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return failed(c, n);
        c->len += (size_t)n;
        return 0;
    }
}

/* The first n buffered bytes as the client's string (c->line), taken out of the buffer with `skip`
 * more (a line's '\n'). */
static char *take(mn_client *c, size_t n, size_t skip)
{
    char *out = mn_malloc(n + 1);
    if (!out) {
        c->error = ENOMEM;
        return NULL;
    }
    memcpy(out, c->buf, n);
    out[n] = 0;
    memmove(c->buf, c->buf + n + skip, c->len - n - skip);
    c->len -= n + skip;
    mn_free(c->line);
    c->line = out;
    return out;
}

char *mn_client_read_line(mn_client *c, size_t *out_len)
{
    for (;;) {
        char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - c->buf);
            if (out_len)
                *out_len = n;
            return take(c, n, 1);
        }
        if (fill(c) < 0)
            return NULL;
    }
}

char *mn_client_read_bytes(mn_client *c, size_t n)
{
    while (c->len < n)
        if (fill(c) < 0)
            return NULL;
    return take(c, n, 0);
}

void mn_client_close(mn_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    mn_free(c->buf);
    mn_free(c->line);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}
