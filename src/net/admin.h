/* admin.h - the admin control socket: nanomsg REP on ipc:// (owner-only file) or loopback tcp://.
 *
 * One JSON object per message: {"cmd":"stats"}, {"cmd":"get"[,"key":K]}, {"cmd":"set","key":K,
 * "value":V}, {"cmd":"drain"}. Replies {"ok":true,...} or {"ok":false,"error":"..."}. Settable keys
 * (docs/server.md): batch.max_sequences, queue.max, log.level. The socket's fd sits on the engine's
 * loop, so commands run between actor messages and changes apply to the next step.
 * Thread: the engine's loop.
 */
#ifndef MN_ADMIN_H
#define MN_ADMIN_H

#include "serve/engine_impl.h"

/* Bind addr (ipc://PATH or tcp://127.0.0.1:N / tcp://[::1]:N / tcp://localhost:N). MN_INVALID for
 * another address, MN_IO when nanomsg cannot bind. */
mn_status mn_admin_new(mn_engine *e, const char *addr, mn_admin **out, mn_err *err);
void mn_admin_free(mn_admin *a);

/* Answer one command (exposed for tests): a newly allocated JSON string (free with free()). */
char *mn_admin_command(mn_engine *e, const char *msg, size_t len);

#endif
