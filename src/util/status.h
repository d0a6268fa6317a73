/* status.h - the one status enum of the project and the error buffer that carries details.
 *
 * Every fallible function returns an mn_status. MN_AGAIN means backpressure (try later), never a
 * failure. Details go into a caller-provided mn_err, so the hot path formats nothing unless it fails.
 */
#ifndef MN_STATUS_H
#define MN_STATUS_H

#include <stddef.h>

typedef enum mn_status {
    MN_OK = 0,       /* success */
    MN_ERROR,        /* generic failure; see the message */
    MN_AGAIN,        /* backpressure: nothing is wrong, retry later */
    MN_BUSY,         /* a bounded resource is full */
    MN_NOMEM,        /* an allocation failed */
    MN_INVALID,      /* the input (file, request, argument) is malformed */
    MN_NOTFOUND,     /* a named thing does not exist */
    MN_IO,           /* a system call on a file or socket failed */
    MN_UNSUPPORTED,  /* well-formed but not something we implement */
} mn_status;

#define MN_ERR_LEN 256

/* A caller-owned message buffer; msg is always NUL-terminated after mn_fail. */
typedef struct mn_err {
    char msg[MN_ERR_LEN];
} mn_err;

/* A short constant name for a status ("ok", "invalid", ...). */
const char *mn_strstatus(mn_status s);

/* Format a message into err (when err is non-NULL) and return s, so callers write
 * `return mn_fail(err, MN_INVALID, "tensor %s: ...", name);`. Thread-safe (touches only err). */
mn_status mn_fail(mn_err *err, mn_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
