/* cuda_backend.h - the CUDA backend's entry point (see runtime/backend.h for the contract).
 *
 * Today it probes: it finds a device, runs a self-test kernel built for sm_80/sm_90 and creates a
 * cuBLAS handle, then reports MN_UNSUPPORTED because the CUDA forward pass is not written yet, so
 * mn_backend_new falls back to the CPU. Without a device (or built with --disable-cuda) it reports
 * why. Called from the thread that creates backends.
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
