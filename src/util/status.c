/* status.c - status names and error formatting. */
#include "util/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *mn_strstatus(mn_status s)
{
    switch (s) {
    case MN_OK: return "ok";
    case MN_ERROR: return "error";
    case MN_AGAIN: return "again";
    case MN_BUSY: return "busy";
    case MN_NOMEM: return "out of memory";
    case MN_INVALID: return "invalid";
    case MN_NOTFOUND: return "not found";
    case MN_IO: return "i/o error";
    case MN_UNSUPPORTED: return "unsupported";
    }
    return "unknown status";
}

mn_status mn_fail(mn_err *err, mn_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}
