/* cuda_none.c - the CUDA entry point of a build configured with --disable-cuda. */
#include "gpu/cuda_backend.h"

mn_status mn_cuda_backend_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out, mn_err *err)
{
    (void)m;
    (void)cfg;
    (void)out;
    return mn_fail(err, MN_UNSUPPORTED, "built without CUDA");
}
