/* twin.h - the CUDA backend's kernels run on the host: a backend for testing without a GPU.
 *
 * mn_gpu_twin_new builds a backend (runtime/backend.h's contract) whose forward pass launches
 * nothing: it runs every kernel body of gpu/kernels.cuh in host loops over the grid the device
 * would use, in the order the device pass runs them, on host buffers shaped as the device ones.
 * So the CUDA pass's indexing, layouts (unpadded tokens, paged KV through flattened block
 * tables, rollback by truncation) and formulas are tested against the CPU backend here
 * (tests/test_gpu.c); launches, streams, graphs and cuBLAS are not (they need a device).
 *
 * It is slow (one serial loop per output) and not batch-invariant bit for bit beyond what its
 * serial sums give; it is never selected by mn_backend_new. Weights: every type the engine reads.
 * Errors: MN_NOMEM, MN_INVALID (max_tokens out of 1..65535, as on the device), MN_UNSUPPORTED
 * (head_dim over MN_G_MAX_HEAD_DIM): mn_gpu_check_config's limits.
 * Thread: as any backend, one driving thread.
 */
#ifndef MN_GPU_TWIN_H
#define MN_GPU_TWIN_H

#ifdef __cplusplus
extern "C" {
#endif

#include "model/draw.h"
#include "runtime/backend.h"

mn_status mn_gpu_twin_new(const mn_model *m, const mn_backend_config *cfg, mn_backend **out, mn_err *err);

/* The CUDA backend's argmax of one row (kernels.cuh's mn_k_argmax), its block run thread by
 * thread: what the twin fills batch.pick with (its draws start from it), and what tests hold against mn_argmax. */
int32_t mn_gpu_twin_argmax(const float *row, uint32_t n);

/* The nucleus mn_gpu_twin_draw walks (mn_k_draw's search for theta, run the same way; mass 0: no token
 * weighs anything), and in *passes how many passes over the row's weights the search made. */
mn_draw_nucleus mn_gpu_twin_nucleus(const float *row, uint32_t n, int32_t argmax, float temperature, float top_p,
                                    uint64_t *w, uint32_t *passes);

/* The CUDA backend's draw from one row (kernels.cuh's mn_k_draw) at temperature and top_p with the
 * uniform u, given the row's argmax, its block run thread by thread, w a scratch of n weights: what
 * the twin fills a drawn row's pick with, and what tests hold against mn_draw_row. */
int32_t mn_gpu_twin_draw(const float *row, uint32_t n, int32_t argmax, float temperature, float top_p, double u,
                         uint64_t *w);

#ifdef __cplusplus
}
#endif

#endif
