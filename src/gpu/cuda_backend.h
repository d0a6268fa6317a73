/* cuda_backend.h - the CUDA backend's entry point (see runtime/backend.h for the contract).
 *
 * It probes first: a device must exist (else MN_NOTFOUND: no driver, no device, or a build with
 * --disable-cuda), run a self-test kernel built for sm_80/sm_90 and create a cuBLAS handle (else
 * MN_UNSUPPORTED says why); either way `auto` (runtime/registry.h) takes the CPU. MN_INVALID for
 * max_tokens over 65535, MN_UNSUPPORTED for an odd head dimension or one over 256, MN_NOMEM /
 * MN_UNSUPPORTED with the failing CUDA call when device memory runs out. The first backend built logs the device at info level.
 * The backend's forward pass blocks its calling thread until the device is done.
 * Called from the thread that creates backends.
 */
#ifndef MN_CUDA_BACKEND_H
#define MN_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

#include "runtime/backend.h"

mn_status mn_cuda_backend_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out, mn_err *err);

/* For tests and timing: the token the device draws (its draw kernel, after its argmax) from each of
 * n_rows host rows of n logits, row r at temperature[r] > 0, top_p[r] and uniform u[r], into
 * pick[r]; *seconds: the draw kernel's time on the device, for all the rows at once. 1..64 rows.
 * MN_NOTFOUND / MN_UNSUPPORTED as mn_cuda_backend_new's probe, or MN_UNSUPPORTED with the failing
 * CUDA call; MN_INVALID for a row count out of range. Allocates and frees its own buffers. */
mn_status mn_cuda_draw_rows(const float *rows, uint32_t n_rows, uint32_t n, const float *temperature,
                            const float *top_p, const double *u, int32_t *pick, double *seconds, mn_err *err);

#ifdef __cplusplus
}
#endif

#endif
