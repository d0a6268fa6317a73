/* conn.h - line transport: TCP and Unix listeners, connections that read and write lines.
 *
 * Transport only: this module frames bytes into lines and writes lines back; it knows nothing of
 * the protocol or the engine. Its owner (the client actor) registers callbacks at mn_net_new.
 *
 * Reading: lines end at '\n' (a trailing '\r' is dropped and not counted); each complete line goes
 * to on_line, a blank one too. End of input is a half-close: the lines already received (the last may lack its
 * newline) are delivered, then on_input_end tells the owner, who calls mn_conn_close_when_written
 * once it has answered them. A line longer than max_line ends the input the same way: no line is
 * taken after it (what follows is read and discarded, so that a client blocked sending it can read
 * its answers), on_overflow lets the owner write its error, and on_input_end follows, so the lines
 * before it are still answered. Such a connection then shuts down its sending side and reads on to
 * the client's end of input (2 s at most) before it closes: closing with input unread would send a
 * reset, which can destroy the answers on their way.
 * Accepting: when the process runs out of file descriptors the listeners pause (net/backoff.h);
 * open connections are served meanwhile.
 * Writing: mn_conn_write queues a line. Backpressure: past out_high bytes of unsent output the
 * connection is throttled - it stops reading - and on_throttle(true) tells the owner (who stops
 * producing for it); below out_high / 4 it resumes and on_throttle(false) follows. Each socket's
 * send buffer is bounded to out_high, so the watermark, not a multi-megabyte kernel buffer, decides.
 * Failure: a reset, a failed read or write calls on_close once; the connection is freed right after
 * on_close returns, and the owner must not touch it again.
 *
 * Thread: the loop thread that owns base; callbacks run there. Errors: start-up failures come back
 * as a status and a message.
 */
#ifndef MN_CONN_H
#define MN_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

struct event_base;
typedef struct mn_net mn_net;
typedef struct mn_conn mn_conn;

typedef struct mn_net_callbacks {
    void *owner;
    /* A new connection; returns the owner's state for it (NULL refuses the connection). */
    void *(*on_open)(void *owner, mn_conn *c);
    /* One line without its '\n' (NUL-terminated, but it may contain NUL bytes: use len; 0 for a
     * blank one). */
    void (*on_line)(void *ctx, const char *line, size_t len);
    /* A line passed max_line: write the error; on_input_end follows. */
    void (*on_overflow)(void *ctx);
    /* The client half-closed and every line it sent has been delivered. */
    void (*on_input_end)(void *ctx);
    /* Output crossed the high (true) or low (false) watermark. */
    void (*on_throttle)(void *ctx, bool throttled);
    /* Every queued byte has been written to the socket. */
    void (*on_flushed)(void *ctx);
    /* The connection is gone; ctx may be freed. */
    void (*on_close)(void *ctx);
} mn_net_callbacks;

typedef struct mn_net_config {
    const char *host;         /* TCP listen address, numeric (default 127.0.0.1) */
    int port;                 /* 0: ephemeral; < 0: no TCP listener */
    const char *unix_path;    /* Unix socket path, or NULL */
    unsigned socket_mode;     /* permissions of the Unix socket file (e.g. 0600) */
    uint32_t max_line;        /* longest line in bytes */
    uint32_t out_high;        /* bytes of unsent output that throttle a connection */
} mn_net_config;

/* Listen. The Unix path is claimed first (net/sockpath.h: a live server there is refused, a stale
 * socket replaced, anything else refused). MN_INVALID / MN_BUSY / MN_IO / MN_NOMEM with a message. */
mn_status mn_net_new(struct event_base *base, const mn_net_config *cfg, const mn_net_callbacks *cb, mn_net **out,
                     mn_err *err);
/* Close every connection (on_close for each) and the listeners; remove the Unix socket file. */
void mn_net_free(mn_net *n);
/* The bound TCP port, or -1. */
int mn_net_port(const mn_net *n);
/* Stop accepting connections (drain): close the listeners, remove the Unix socket file; open
 * connections go on. */
void mn_net_stop_listening(mn_net *n);
/* Close every connection now (on_close for each). */
void mn_net_close_all(mn_net *n);
/* True when no connection has output waiting. */
bool mn_net_flushed(const mn_net *n);
uint32_t mn_net_connections(const mn_net *n);
/* Connections above the high watermark now. */
uint32_t mn_net_throttled(const mn_net *n);
/* Times accept() ran out of descriptors (episodes, not calls). */
uint64_t mn_net_accept_pauses(const mn_net *n);

/* Queue len bytes (a whole line, '\n' included). MN_NOMEM when the buffer cannot take them: the
 * connection is then failed (on_close follows from the loop, not from inside this call). */
mn_status mn_conn_write(mn_conn *c, const char *line, size_t len);
/* Close once the queued output is written (at once when none is). on_close follows. */
void mn_conn_close_when_written(mn_conn *c);
/* Close now, dropping what output is still queued: on_close follows from the loop, not from inside
 * this call. */
void mn_conn_close(mn_conn *c);

#endif
