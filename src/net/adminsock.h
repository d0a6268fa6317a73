/* adminsock.h - the nanomsg sockets: the admin control socket (REP) and the events socket (PUB), on
 * ipc:// or loopback tcp://.
 *
 * Transport only: each message received goes to the owner's callback as bytes; the owner answers
 * with mn_adminsock_reply, possibly later (after asking the actors). REP allows one request at a
 * time, so nothing more is received until the reply is sent. A message over MN_ADMINSOCK_MAX_MSG
 * bytes is answered here ({"ok":false,"error":...}) and never reaches the owner.
 *
 * Where it listens: ipc://PATH with a non-empty PATH that is claimed like the Unix socket
 * (net/sockpath.h: a live server there or a file that is not a socket is refused) and made
 * `socket_mode` (0600 by default) - nanomsg's ipc transport aborts the process on some malformed
 * frames from a peer, so only the owner may reach it; or tcp:// on an IPv4 loopback address
 * (127.x), where any local user can connect: use it only on a machine you trust.
 *
 * Thread: the loop thread that owns base. Errors: start-up failures as a status and a message.
 */
#ifndef MN_ADMINSOCK_H
#define MN_ADMINSOCK_H

#include <stddef.h>

#include "util/status.h"

#define MN_ADMINSOCK_MAX_MSG ((size_t)1 << 20)

struct event_base;
typedef struct mn_adminsock mn_adminsock;

/* One received message (not NUL-terminated); the bytes are valid only during the call. */
typedef void (*mn_adminsock_fn)(void *owner, const char *msg, size_t len);

mn_status mn_adminsock_new(struct event_base *base, const char *addr, unsigned socket_mode, mn_adminsock_fn fn,
                           void *owner, mn_adminsock **out, mn_err *err);
/* Answer the message last received (copied), then receive again. */
void mn_adminsock_reply(mn_adminsock *a, const char *reply, size_t len);
void mn_adminsock_free(mn_adminsock *a);

/* The events socket (--events): nanomsg PUB at the same kinds of address. Each publish is one
 * message (a JSON line); subscribers that are slow or absent lose messages, never the server's
 * time (NN_DONTWAIT; the first failure is logged). */
typedef struct mn_pubsock mn_pubsock;
mn_status mn_pubsock_new(const char *addr, unsigned socket_mode, mn_pubsock **out, mn_err *err);
void mn_pubsock_publish(mn_pubsock *p, const char *line, size_t len);
void mn_pubsock_free(mn_pubsock *p);

#endif
