/* registry.h - the one place that knows every backend: creates a backend by kind.
 *
 * The interface (runtime/backend.h) knows no implementation; this file maps mn_backend_kind to the
 * constructors in src/cpu and src/gpu. MN_BACKEND_AUTO takes CUDA when it is compiled in and a device
 * can run it, else the CPU; the log then says once, at info level, which backend runs, and why CUDA
 * does not only at debug level (a machine without a GPU is normal, not a warning). MN_BACKEND_CUDA
 * is an explicit request: it fails with CUDA's reason instead of falling back.
 *
 * Thread: the thread that creates backends (start-up). Errors: the constructor's status and message.
 */
#ifndef MN_REGISTRY_H
#define MN_REGISTRY_H

#include "runtime/backend.h"

mn_status mn_backend_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out, mn_err *err);

/* "auto", "cpu", "cuda" -> kind; -1 when unknown. */
int mn_backend_parse_kind(const char *name);

#endif
