/* registry.c - backend selection (see registry.h). */
#include "runtime/registry.h"

#include <string.h>

#include "cpu/cpu_backend.h"
#include "gpu/cuda_backend.h"
#include "util/log.h"

int mn_backend_parse_kind(const char *name)
{
    static const char *const names[] = {"auto", "cpu", "cuda"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

mn_status mn_backend_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out, mn_err *err)
{
    if (cfg->kind == MN_BACKEND_CUDA)
        return mn_cuda_backend_new(m, cfg, out, err);
    if (cfg->kind == MN_BACKEND_AUTO) {
        mn_err why = {{0}};
        mn_status s = mn_cuda_backend_new(m, cfg, out, &why);
        if (s == MN_OK)
            return MN_OK;
        /* no device is the CPU's ordinary case; a device whose backend failed (its memory, a kernel
         * built for another architecture) is one an operator should hear of */
        mn_log(s == MN_NOTFOUND ? MN_LOG_DEBUG : MN_LOG_WARN, "backend: not CUDA: %s%s", why.msg,
               s == MN_NOTFOUND ? "" : "; the CPU serves");
    }
    mn_status s = mn_cpu_backend_new(m, cfg, out, err);
    if (s == MN_OK) {
        static int said; /* tools build several backends; one line is enough */
        if (!said++)
            mn_log(MN_LOG_INFO, "backend: cpu, %d threads", cfg->n_threads);
    }
    return s;
}
