/* cuda_none.c - the CUDA entry point of a build configured with --disable-cuda. */
#include "gpu/cuda_backend.h"

mn_status mn_cuda_backend_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out, mn_err *err)
{
    (void)m;
    (void)cfg;
    (void)out;
    return mn_fail(err, MN_NOTFOUND, "built without CUDA");
}

mn_status mn_cuda_draw_rows(const float *rows, uint32_t n_rows, uint32_t n, const float *temperature,
                            const float *top_p, const double *u, int32_t *pick, double *seconds, mn_err *err)
{
    (void)rows, (void)n_rows, (void)n, (void)temperature, (void)top_p, (void)u, (void)pick, (void)seconds;
    return mn_fail(err, MN_NOTFOUND, "built without CUDA");
}
