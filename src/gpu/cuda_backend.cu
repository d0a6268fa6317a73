/* cuda_backend.cu - CUDA device probe behind the backend interface.
 *
 * The probe proves the toolchain end to end on a real device: our own kernel (compiled for sm_80 and
 * sm_90) runs and cuBLAS initialises. Every CUDA and cuBLAS call goes through CUDA_TRY, which turns a
 * failure into an mn_status with the expression, file and line in the message.
 */
#include "gpu/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define MN_GPU_KERNELS /* the forward pass's kernels, compiled for the device here (not launched yet) */
#include "gpu/kernels.cuh"

#define CUDA_TRY(expr)                                                                              \
    do {                                                                                            \
        cudaError_t e_ = (expr);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return mn_fail(err, MN_UNSUPPORTED, "%s failed: %s (%s:%d)", #expr, cudaGetErrorString(e_), \
                           __FILE__, __LINE__);                                                     \
    } while (0)

/* out[i] = i * 2 + 1: a result the host can check. */
__global__ static void probe_kernel(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = i * 2 + 1;
}

static mn_status probe(mn_err *err)
{
    int n_dev = 0;
    CUDA_TRY(cudaGetDeviceCount(&n_dev));
    if (n_dev == 0)
        return mn_fail(err, MN_UNSUPPORTED, "no CUDA device");
    enum { N = 256 };
    int *d = NULL, h[N];
    CUDA_TRY(cudaMalloc((void **)&d, N * sizeof(int)));
    probe_kernel<<<1, N>>>(d, N);
    cudaError_t e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (e != cudaSuccess)
        return mn_fail(err, MN_UNSUPPORTED, "probe kernel failed: %s", cudaGetErrorString(e));
    for (int i = 0; i < N; i++)
        if (h[i] != i * 2 + 1)
            return mn_fail(err, MN_UNSUPPORTED, "probe kernel computed a wrong result");
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
        return mn_fail(err, MN_UNSUPPORTED, "cublasCreate failed");
    cublasDestroy(handle);
    return MN_OK;
}

extern "C" mn_status mn_cuda_backend_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out,
                                         mn_err *err)
{
    (void)m;
    (void)cfg;
    (void)out;
    mn_status s = probe(err);
    if (s != MN_OK)
        return s;
    return mn_fail(err, MN_UNSUPPORTED, "a CUDA device works, but the CUDA forward pass is not implemented yet");
}
