/* quant.h - scalar reference (de)quantization of GGUF blocks and half floats.
 *
 * These plain loops are the definition of each format; the SIMD kernels in src/cpu/ must agree
 * with them exactly (tests compare). Pure functions, any thread.
 *
 * Block layouts (32 elements each), as ggml stores them:
 *   Q8_0: f16 d; int8 qs[32];            x[j] = d * qs[j]
 *   Q4_0: f16 d; uint8 qs[16];           x[j] = d * ((qs[j] & 15) - 8), x[j+16] = d * ((qs[j] >> 4) - 8)
 *   Q4_1: f16 d; f16 m; uint8 qs[16];    x[j] = d * (qs[j] & 15) + m,   x[j+16] = d * (qs[j] >> 4) + m
 */
#ifndef MN_QUANT_H
#define MN_QUANT_H

#include <stddef.h>
#include <stdint.h>

float mn_f16_to_f32(uint16_t h);
uint16_t mn_f32_to_f16(float f);

/* Dequantize n elements (n a multiple of the block size) of a row of type t into out. */
void mn_dequant_row(uint32_t type, const void *row, float *out, size_t n);

#endif
