/* conn.h - the net actor: client listeners (TCP, Unix) and connections speaking the JSON-lines
 * protocol (net/proto.h).
 *
 * Reading: lines are framed by '\n' (a trailing '\r' is dropped); a line longer than max_line gets
 * `line_too_long` and the connection closes once that error is written. Each request line becomes an
 * mn_req posted to intake; a cancel marks the request and kicks kvmem and the verifier.
 * Writing: the net actor's messages (MN_MSG_FLUSH: stream new text; MN_MSG_DONE: the done or error
 * line, then free the request). Backpressure: when a connection's output passes the high watermark
 * it is throttled - it stops reading and the verifier skips its requests - until the output drains
 * below the low watermark. End of input is a half-close: the lines already sent (the last may lack
 * its newline) are answered, then the server closes. A connection that fails (reset, a write error)
 * cancels all its requests; they are freed when their actors hand them back, so their KV returns to
 * the pool.
 * Thread: the engine's loop. Handler: mn_net_handle.
 */
#ifndef MN_CONN_H
#define MN_CONN_H

#include <stdbool.h>

#include "serve/engine_impl.h"

typedef struct mn_conn mn_conn;

mn_status mn_net_new(mn_engine *e, mn_net **out, mn_err *err);
/* Close every connection and listener (their requests must already be answered). */
void mn_net_free(mn_net *n);
void mn_net_handle(void *net, mn_msg *m);
/* The bound TCP port, or -1. */
int mn_net_port(const mn_net *n);
/* Close every client connection now: their requests are cancelled (a drain that cannot finish). */
void mn_net_close_all(mn_net *n);
/* Stop accepting connections (drain). */
void mn_net_stop_listening(mn_net *n);
/* True when no connection has output waiting. */
bool mn_net_flushed(const mn_net *n);
uint32_t mn_net_connections(const mn_net *n);
/* Connections whose output is above the high watermark right now. */
uint32_t mn_net_throttled(const mn_net *n);

#endif
