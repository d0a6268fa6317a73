/* cuda_backend.h - the CUDA backend's entry point (see runtime/backend.h for the contract).
 *
 * It probes first: a device must exist, run a self-test kernel built for sm_80/sm_90 and create a
 * cuBLAS handle; else MN_UNSUPPORTED says why (and a build with --disable-cuda says so). It then
 * builds the backend only when cfg->kind is MN_BACKEND_CUDA: the pass has not yet run on a GPU,
 * so `auto` gets MN_UNSUPPORTED and mn_backend_new takes the CPU. MN_INVALID for max_tokens over
 * 65535, MN_NOMEM / MN_UNSUPPORTED with the failing CUDA call when device memory runs out.
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

#ifdef __cplusplus
}
#endif

#endif
