/* cpu_backend.h - the CPU backend: F32 activations, weights in their stored type, AVX2 kernels,
 * a fork-join thread pool. It is the reference the CUDA backend is tested against.
 * See runtime/backend.h for the contract. */
#ifndef MN_CPU_BACKEND_H
#define MN_CPU_BACKEND_H

#include "runtime/backend.h"

mn_status mn_cpu_backend_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out, mn_err *err);

#endif
