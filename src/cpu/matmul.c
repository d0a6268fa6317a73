/* matmul.c - the kernels' public face: picks the table this CPU runs, and the ISA-free parts.
 *
 * The arithmetic lives in the tables of kernels.h (kernels_generic.c defines it, kernels_avx2.c and
 * kernels_avx512.c compute the same bits faster). This file chooses one at first use: MINIONS_CPU
 * if it names a table this CPU runs, else the widest usable one, and forwards every call to it.
 * Activation quantization and weight packing are plain C shared by all tables.
 */
#include "cpu/matmul.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "model/dtype.h"
#include "util/log.h"

/* widest first: the default is the first usable one that its `prefer` does not turn down (the
 * emulations' always does: they run only when named) */
static const mn_cpu_kernels *const tables[] = {&mn_kernels_avx512w,     &mn_kernels_avx512,
                                               &mn_kernels_avx2,        &mn_kernels_generic,
                                               &mn_kernels_avx512w_emu, &mn_kernels_avx512_emu};
enum { N_TABLES = sizeof tables / sizeof tables[0] };

static mn_cpu_kernels composed[N_TABLES]; /* tables[i] with its NULL slots filled from its base */
/* the one in use: set once by pick_default, changed only by mn_cpu_kernels_use */
static _Atomic(const mn_cpu_kernels *) active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void compose(mn_cpu_kernels *k, const mn_cpu_kernels *t)
{
    *k = *t;
#define FILL(slot)                                                                                 \
    if (!k->slot && t->base)                                                                       \
        k->slot = t->base->slot;
    FILL(matmul)
    FILL(matmul_q8)
    FILL(quantize_q8)
    FILL(dot)
    FILL(dots)
    FILL(softmax)
    FILL(scale)
    FILL(scale_mul)
    FILL(rope)
    FILL(swiglu)
    FILL(weighted_sum)
    FILL(axpy)
    FILL(argmax)
    FILL(draw_weights)
    FILL(to_f16)
#undef FILL
}

static const mn_cpu_kernels *find(const char *name)
{
    for (size_t i = 0; i < N_TABLES; i++)
        if (strcmp(tables[i]->name, name) == 0 && tables[i]->usable())
            return &composed[i];
    return NULL;
}

static void pick_default(void)
{
    for (size_t i = 0; i < N_TABLES; i++)
        compose(&composed[i], tables[i]);
    const mn_cpu_kernels *k = NULL;
    const char *want = getenv("MINIONS_CPU");
    if (want && *want && !(k = find(want)))
        mn_log(MN_LOG_WARN,
               "MINIONS_CPU=%s is not a kernel set this CPU runs (avx512w, avx512, avx2, generic); "
               "using the best",
               want);
    for (size_t i = 0; !k && i < N_TABLES; i++)
        if (tables[i]->usable() && (!tables[i]->prefer || tables[i]->prefer()))
            k = &composed[i];
    atomic_store(&active, k);
}

static const mn_cpu_kernels *K(void)
{
    pthread_once(&active_once, pick_default);
    return atomic_load_explicit(&active, memory_order_acquire);
}

const char *mn_cpu_kernels_name(void) { return K()->name; }

int mn_cpu_kernels_use(const char *name)
{
    K(); /* the tables composed and the default set first, so it cannot overwrite this choice */
    const mn_cpu_kernels *k = find(name);
    if (!k)
        return -1;
    atomic_store(&active, k);
    return 0;
}

const char *mn_cpu_kernels_at(size_t i) { return i < N_TABLES ? tables[i]->name : NULL; }

int mn_cpu_kernels_usable(const char *name)
{
    K();
    return find(name) != NULL;
}

void mn_matmul(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T, uint32_t o_begin,
               uint32_t o_end)
{
    K()->matmul(W, x, ldx, y, ldy, T, o_begin, o_end);
}

void mn_matmul_ref(const mn_weight *W, const float *x, size_t ldx, float *y, size_t ldy, int T, uint32_t o_begin,
                   uint32_t o_end)
{
    mn_kernels_generic.matmul(W, x, ldx, y, ldy, T, o_begin, o_end);
}

void mn_matmul_q8(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy, int T, uint32_t o_begin,
                  uint32_t o_end)
{
    K()->matmul_q8(W, xq, ldxq, y, ldy, T, o_begin, o_end);
}

void mn_matmul_q8_ref(const mn_weight *W, const mn_q8 *xq, size_t ldxq, float *y, size_t ldy, int T,
                      uint32_t o_begin, uint32_t o_end)
{
    mn_kernels_generic.matmul_q8(W, xq, ldxq, y, ldy, T, o_begin, o_end);
}

float mn_dot(const float *a, const float *b, int n) { return K()->dot(a, b, n); }

void mn_dots(const float *q, size_t ldq, int n_heads, const void *const *b, uint32_t type, int n_b, int n, float *out,
             size_t ldo)
{
    K()->dots(q, ldq, n_heads, b, type, n_b, n, out, ldo);
}

float mn_softmax(float *x, int n, float scale) { return K()->softmax(x, n, scale); }
int32_t mn_vec_argmax(const float *x, int n) { return n > 0 ? K()->argmax(x, n) : 0; }
uint64_t mn_draw_weights(const float *x, int n, float mx, float scale, uint64_t *w)
{
    return K()->draw_weights(x, n, mx, scale, w);
}

void mn_swiglu(float *gate, const float *up, int n) { K()->swiglu(gate, up, n); }

void mn_weighted_sum(float *out, size_t ldo, const float *w, size_t ldw, int n_heads, const void *const *rows,
                     uint32_t type, int n_rows, int n)
{
    K()->weighted_sum(out, ldo, w, ldw, n_heads, rows, type, n_rows, n);
}

void mn_axpy(float *y, float a, const float *x, int n) { K()->axpy(y, a, x, n); }
void mn_scale(float *x, float s, int n) { K()->scale(x, s, n); }
void mn_scale_mul(float *out, const float *x, float s, const float *w, int n) { K()->scale_mul(out, x, s, w, n); }
void mn_rope(float *x, const float *cs, int n_pairs) { K()->rope(x, cs, n_pairs); }
void mn_to_f16(const float *x, uint16_t *h, int n) { K()->to_f16(x, h, n); }

/* ---- 16-bit activations: quantization and packing (layouts in kernels_generic.c) ------------- */

int mn_weight_uses_q8(const mn_weight *W) { return mn_dtype_quantized(W->type); }

size_t mn_q8_groups(size_t n) { return (n / 32 + 7) / 8; }

void mn_quantize_q8(const float *x, size_t n, mn_q8 *out) { K()->quantize_q8(x, n, out); }

static size_t q_quant_bytes(uint32_t type) { return type == MN_Q8_0 ? 32 : 16; }
static size_t q_block_bytes(uint32_t type) { return q_quant_bytes(type) + (type == MN_Q4_1 ? 4 : 2); }

void mn_q8_pack(const mn_weight *W, uint8_t *dst, mn_weight *out)
{
    const size_t nb = W->cols / 32, qb = q_quant_bytes(W->type), bb = q_block_bytes(W->type);
    const int q41 = W->type == MN_Q4_1;
    for (uint32_t o = 0; o < W->rows; o++) {
        const uint8_t *src = W->data + (size_t)o * W->row_bytes;
        uint8_t *d = dst + (size_t)o * W->row_bytes, *m = d + 2 * nb, *q = d + 2 * nb * (1 + q41);
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = src + b * bb;
            memcpy(d + 2 * b, blk, 2);
            if (q41)
                memcpy(m + 2 * b, blk + 2, 2);
            memcpy(q + b * qb, blk + bb - qb, qb);
        }
    }
    *out = *W;
    out->data = dst;
}
