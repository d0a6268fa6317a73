/* kernels_avx512_emu.c - kernels_avx512.c with each 512-bit primitive done as two AVX2 operations
 * on its halves: the table "avx512-emu", so that the AVX-512 tiles (their shapes, index arithmetic
 * and lane layout) run and are tested bit for bit on CPUs without AVX-512. Never the default. */
#define MN_X16_EMULATE 1
#include "kernels_avx512.c"
