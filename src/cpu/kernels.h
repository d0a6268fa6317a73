/* kernels.h - the CPU kernel table: one implementation of matmul.h's arithmetic per instruction set.
 *
 * The library itself is compiled for the x86-64 baseline (or whatever the host's compiler targets
 * by default); only the kernel files are built for wider instruction sets, each with its own
 * `#pragma GCC target`, and matmul.c picks at run time the widest table this CPU and OS run and
 * whose `prefer` finds it worth running (mn_cpu_kernels_use to choose another). So one binary runs
 * on an AVX2 laptop, an AVX-512 server, and a machine with neither.
 *
 * The contract every table keeps: the same bits. Each slot computes exactly what the generic table
 * (plain C, the reference) computes, operation for operation in the orders matmul.h and
 * kernels_generic.c define, so which table runs changes speed and nothing else: a sequence's
 * logits, and therefore greedy text, are the same on every machine whose float arithmetic is
 * IEEE. tests/test_kernels.c checks every table this CPU runs against the generic one, bit for bit.
 *
 * Tables are immutable and live for the whole program. A table may leave slots NULL and name a
 * base table that fills them (matmul.c composes the two once); after that every slot of a usable
 * table is set. Any thread may call the slots (the functions are pure over their arguments).
 */
#ifndef MN_KERNELS_H
#define MN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* exp(x) as every set computes it, lane by lane (the generic set's exp_lane, kernels_x86.h's exp_ps,
 * the 512-bit set's f_exp): x clamped to [MN_EXP_LO, MN_EXP_HI] (below MN_EXP_LO the result is 0),
 * k = x log2(e) rounded to nearest, r = x - k ln2 in two parts, exp(r) by Cephes' degree-7
 * polynomial, times 2^k built in the exponent bits. One list of constants for the three widths,
 * which must agree bit for bit. */
#define MN_EXP_LO (-87.0f)
#define MN_EXP_HI 88.0f
#define MN_EXP_LOG2E 1.44269504088896341f
#define MN_EXP_LN2_HI 0.693359375f
#define MN_EXP_LN2_LO (-2.12194440e-4f)
#define MN_EXP_P0 1.9875691500e-4f
#define MN_EXP_P1 1.3981999507e-3f
#define MN_EXP_P2 8.3334519073e-3f
#define MN_EXP_P3 4.1665795894e-2f
#define MN_EXP_P4 1.6666665459e-1f
#define MN_EXP_P5 5.0000001201e-1f

/* The pass size from which the AVX2 set takes F32 weights through its lane panels: activations
 * (rows x columns of the pass) of at least this many floats, 256 KB (kernels_x86.h's lane_pass,
 * kernels_avx2.c says why). Here so that tests/test_kernels.c sizes its passes by it and keeps
 * reaching the panels if it moves. */
#define MN_LANE_MIN_ACT_FLOATS (64 * 1024)

/* 16-bit activations of quantized weights' products (matmul.h), 8 blocks of 32. */
typedef struct mn_q8 {
    float d[8];           /* block j's scale: x ~ d[j] * qs[j] */
    float s[8];           /* d[j] * sum(qs[j]): the Q4_1 min term; past a row's last block d = s = 0 */
    int16_t qs[8][32];
} mn_q8;                  /* 8 blocks of 32 activations */

typedef struct mn_cpu_kernels {
    const char *name;     /* "generic", "avx2", "avx512", "avx512w": what MINIONS_CPU and mn_cpu_kernels_use name */
    int (*usable)(void);  /* whether this CPU and OS execute the table's instructions */
    int (*prefer)(void);  /* whether a usable table is also worth picking by default here; NULL: yes */
    const struct mn_cpu_kernels *base; /* where the NULL slots come from; NULL if none is */
    void (*matmul)(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T, uint32_t o_begin,
                   uint32_t o_end);
    void (*matmul_q8)(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy, int T,
                      uint32_t o_begin, uint32_t o_end);
    void (*quantize_q8)(const float *x, size_t n, mn_q8 *out);
    float (*dot)(const float *a, const float *b, int n);
    void (*dots)(const float *q, size_t ldq, int n_heads, const void *const *b, uint32_t type, int n_b, int n,
                 float *out, size_t ldo);
    float (*softmax)(float *x, int n, float scale);
    void (*swiglu)(float *gate, const float *up, int n);
    void (*weighted_sum)(float *out, size_t ldo, const float *w, size_t ldw, int n_heads, const void *const *rows,
                         uint32_t type, int n_rows, int n);
    void (*axpy)(float *y, float a, const float *x, int n);
    void (*scale)(float *x, float s, int n);
    void (*scale_mul)(float *out, const float *x, float s, const float *w, int n);
    void (*rope)(float *x, const float *cs, int n_pairs);
    int32_t (*argmax)(const float *x, int n);
    uint64_t (*draw_weights)(const float *x, int n, float mx, float scale, uint64_t *w);
    void (*to_f16)(const float *x, uint16_t *h, int n);
} mn_cpu_kernels;

extern const mn_cpu_kernels mn_kernels_generic; /* plain C: every CPU; the reference of the others */
extern const mn_cpu_kernels mn_kernels_avx2;    /* AVX2 + FMA + F16C (x86-64-v3) */
extern const mn_cpu_kernels mn_kernels_avx512;  /* AVX-512 F/BW/DQ/VL + VNNI: the products; the rest AVX2's */
/* kernels_avx512.c with every 512-bit operation done as two AVX2 ones: the AVX-512 tiles' logic,
 * runnable (and tested) where the CPU has AVX2 only. Never picked unless named. */
extern const mn_cpu_kernels mn_kernels_avx512_emu;
/* The AVX-512 table with its float products in 512-bit tiles: picked by default only where 512-bit
 * FMAs run at full rate (Zen 5; not Zen 4), and its emulation, never picked unless named. */
extern const mn_cpu_kernels mn_kernels_avx512w;
extern const mn_cpu_kernels mn_kernels_avx512w_emu;

#endif
