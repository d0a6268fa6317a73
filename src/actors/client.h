/* client.h - the client actor: owns the client connections' request state, and writes every
 * request's final line.
 *
 * It creates the line transport (net/conn.h) and registers its callbacks: each line is parsed and
 * validated here (net/proto.h); a request becomes an mn_req posted to intake (MN_MSG_ADMIT), a
 * cancel marks the request and kicks kvmem and the verifier, bad input is answered at once on the
 * same connection. It streams text (MN_MSG_FLUSH) and, on MN_MSG_DONE, writes the request's one
 * final line - done or error - and frees it: this is the only place that does. When a connection's
 * output is throttled its requests are paused (and resumed after), through the request's state
 * machine. A connection that goes away cancels its requests; they are freed when their actors hand
 * them back, so their KV returns to the pool.
 *
 * Idle connections: one without a request in flight is closed once idle_timeout_s pass without a
 * complete line from it (bytes of a line that never ends do not count: a client cannot hold a
 * descriptor by sending a line a byte at a time). Its answers written by then stay readable: the
 * close drops only output the socket has not taken (a client that does not read them). Stalled
 * connections: one whose output stays throttled for idle_timeout_s is closed too, and its requests
 * cancelled: paused, they would hold their KV and their places in the queue for as long as a client
 * that stopped reading stays connected.
 *
 * Drain (MN_MSG_DRAIN): stop accepting, refuse new requests with `busy`, and once no request is in
 * flight and every reply is written, call on_drained. A forced drain closes every connection first.
 *
 * Messages in: FLUSH, DONE (mn_req), DRAIN, STATS. Out: ADMIT to intake, kicks.
 * Thread: the engine's loop.
 */
#ifndef MN_CLIENT_ACTOR_H
#define MN_CLIENT_ACTOR_H

#include "actors/msg.h"
#include "model/chat.h"
#include "net/conn.h"

typedef struct mn_client_actor_config {
    mn_net_config net;           /* listeners and per-connection limits */
    uint32_t max_tokens_limit;   /* largest max_tokens a request may ask for */
    uint32_t idle_timeout_s;     /* a connection without a request in flight that completes no line
                                  * for this long is closed, and one throttled for this long (0: never) */
    mn_chat_format chat;         /* the served model's chat format, for requests with "messages" */
    uint32_t n_drafters;         /* > 0: done lines carry "spec" */
    const char *const *drafter_names; /* borrowed: [n_drafters] */
    const mn_addr *addr;         /* borrowed */
    void (*on_drained)(void *owner); /* the drain has finished: every request answered and written */
    void *owner;
} mn_client_actor_config;

typedef struct mn_client_actor mn_client_actor;

mn_status mn_client_actor_new(struct event_base *base, const mn_client_actor_config *cfg, mn_client_actor **out,
                              mn_err *err);
void mn_client_actor_handle(void *client, mn_msg *m);
/* Close every connection and listener. The other actors must have handed back every request. */
void mn_client_actor_free(mn_client_actor *ca);
/* The bound TCP port, or -1 (start-up: the daemon prints it). */
int mn_client_actor_port(const mn_client_actor *ca);

#endif
