/* client.h - a small blocking client of minionsd's JSON-lines protocol (minions-cli, minions-bench,
 * the integration tests), and the byte reads minions-bench's HTTP requests need.
 * Address: "HOST:PORT" (TCP, numeric host) or a path containing '/' (Unix socket).
 * Thread: one client per thread. Errors: -1 with a message in err. */
#ifndef MN_CLIENT_H
#define MN_CLIENT_H

#include <stddef.h>

#include "util/status.h"

typedef struct mn_client {
    int fd;
    char *buf;          /* bytes read and not yet returned */
    size_t len, cap;
    char *line; /* the line last returned */
} mn_client;

int mn_client_connect(const char *addr, mn_client *c, mn_err *err);
/* Write all of data (a line must end with '\n'). */
int mn_client_send(mn_client *c, const char *data, size_t len);
/* The next line without its '\n', NUL-terminated, owned by the client until the next call; NULL at
 * EOF or on an error. */
char *mn_client_read_line(mn_client *c, size_t *len);
/* The next n bytes (a NUL after them), owned by the client until the next call; NULL at EOF or on
 * an error. */
char *mn_client_read_bytes(mn_client *c, size_t n);
void mn_client_close(mn_client *c);

#endif
