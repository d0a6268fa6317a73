/* client.h - a small blocking client of minionsd's JSON-lines protocol (minions-cli, minions-bench,
 * the integration tests), and the byte reads minions-bench's HTTP requests need.
 * Address: "HOST:PORT" (TCP, numeric host) or a path containing '/' (Unix socket).
 * A read or a send that waits longer than the client's timeout (MN_CLIENT_TIMEOUT_S unless set)
 * fails: a server that goes silent is an error, not a hang. The timeout is between bytes, not for
 * a whole reply, so a long streamed generation is not cut.
 * Thread: one client per thread. Errors: -1 with a message in err; a failed read or send says why
 * through mn_client_strerror. */
#ifndef MN_CLIENT_H
#define MN_CLIENT_H

#include <stddef.h>

#include "util/status.h"

typedef struct mn_client {
    int fd;
    char *buf;          /* bytes read and not yet returned */
    size_t len, cap;
    char *line; /* the line last returned */
    int error;  /* why the last read or send failed: 0 end-of-file, ETIMEDOUT the timeout, else errno */
    double timeout_s;
    char msg[96];  /* mn_client_strerror's text */
} mn_client;

#define MN_CLIENT_TIMEOUT_S 300.0 /* the default timeout of a read or a send, in seconds */

/* Connect, with the timeout MN_CLIENT_TIMEOUT_S. */
int mn_client_connect(const char *addr, mn_client *c, mn_err *err);
/* A read or a send that waits `seconds` (0: for ever) fails from now on: -1 when the socket
 * refuses the setting (errno says why). */
int mn_client_set_timeout(mn_client *c, double seconds);
/* Write all of data (a line must end with '\n'). */
int mn_client_send(mn_client *c, const char *data, size_t len);
/* The next line without its '\n', NUL-terminated, owned by the client until the next call; NULL at
 * EOF or on an error. */
char *mn_client_read_line(mn_client *c, size_t *len);
/* The next n bytes (a NUL after them), owned by the client until the next call; NULL at EOF or on
 * an error. */
char *mn_client_read_bytes(mn_client *c, size_t n);
/* Why the last read returned NULL or the last send -1, as a message ("connection closed before the
 * reply ended", "timed out: nothing from the server for 300 s", strerror's text), owned by the
 * client until the next call. */
const char *mn_client_strerror(mn_client *c);
void mn_client_close(mn_client *c);

#endif
