/* backend.c - the checks every backend relies on, and the calls shared by all of them. */
#include "runtime/backend.h"

#include <sched.h>
#include <unistd.h>

#include "model/sampler.h"
#include "util/alloc.h"

/* The CPUs this process may run on (taskset, a container's cpuset), or those online. */
static long usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return sysconf(_SC_NPROCESSORS_ONLN);
}

mn_backend_config mn_backend_defaults(const mn_model *m, uint32_t n_ctx_total)
{
    long cpus = usable_cpus();
    mn_backend_config c = {
        .n_threads = cpus > 0 ? (int)(cpus > 64 ? 64 : cpus) : 1,
        .max_tokens = 512,
        .kv_block_size = 16,
    };
    if (n_ctx_total == 0)
        n_ctx_total = m->hp.n_ctx;
    c.kv_blocks = (n_ctx_total + c.kv_block_size - 1) / c.kv_block_size;
    return c;
}

/* The draw spaces' count: one per compute thread. */
static int n_draw_spaces(const mn_backend *b) { return b->cfg.n_threads > 1 ? b->cfg.n_threads : 1; }

void mn_backend_free(mn_backend *b)
{
    if (b) {
        for (int i = 0; b->draws && i < n_draw_spaces(b); i++)
            mn_draw_space_free(b->draws[i]);
        mn_free(b->draws);
        b->ops->free(b);
    }
}

void mn_backend_run(mn_backend *b, mn_pool_fn fn, void *ctx)
{
    if (b->ops->run)
        b->ops->run(b, fn, ctx);
    else
        fn(ctx, 0, 1);
}

uint32_t mn_batch_n_logits(const mn_batch *batch)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < batch->n_seqs; i++)
        n += mn_batch_seq_rows(&batch->seqs[i]);
    return n;
}

/* batch->pick from the rows, for a backend that cannot pick: each row's argmax, or its draw; row by
 * row over the compute threads (rows i, i + n, ...: a draw costs far more than an argmax), each
 * thread with its own draw space. */
typedef struct pick_ctx {
    mn_backend *b;
    const mn_batch *batch;
    const float *logits;
} pick_ctx;

static void pick_rows(void *arg, int ith, int nth)
{
    const pick_ctx *p = arg;
    uint32_t V = p->b->model->hp.n_vocab, row = 0;
    for (uint32_t i = 0; i < p->batch->n_seqs; i++) {
        const mn_batch_seq *s = &p->batch->seqs[i];
        for (uint32_t j = 0, n = mn_batch_seq_rows(s); j < n; j++, row++) {
            if (row % (uint32_t)nth != (uint32_t)ith)
                continue;
            const float *l = p->logits + (size_t)row * V;
            p->batch->pick[row] = s->draw ? mn_draw_row(p->b->draws[ith], l, s->draw->temperature, s->draw->top_p,
                                                        s->draw->u[j])
                                          : mn_argmax(l, V);
        }
    }
}

/* The draw spaces, made on the first draw: false when memory runs out (none is kept then). */
static bool make_draw_spaces(mn_backend *b)
{
    int n = n_draw_spaces(b);
    if (!(b->draws = mn_calloc((size_t)n, sizeof *b->draws)))
        return false;
    for (int i = 0; i < n; i++)
        if (!(b->draws[i] = mn_draw_space_new(b->model->hp.n_vocab))) {
            for (int k = 0; k < i; k++)
                mn_draw_space_free(b->draws[k]);
            mn_free(b->draws);
            b->draws = NULL;
            return false;
        }
    return true;
}

mn_status mn_backend_forward(mn_backend *b, const mn_batch *batch, float *logits, mn_err *err)
{
    uint64_t total = 0;
    if (batch->n_seqs == 0)
        return mn_fail(err, MN_INVALID, "forward: empty batch");
    for (uint32_t i = 0; i < batch->n_seqs; i++) {
        const mn_batch_seq *s = &batch->seqs[i];
        if (!s->kv || !s->tokens || s->n_tokens == 0)
            return mn_fail(err, MN_INVALID, "forward: sequence %u has no tokens or no cache", i);
        if ((s->pick_only || s->draw) && !batch->pick)
            return mn_fail(err, MN_INVALID, "forward: sequence %u wants its rows picked, and the batch has no "
                           "room for the tokens", i);
        if (s->draw && (!(s->draw->temperature > 0.0f) || !(s->draw->top_p > 0.0f && s->draw->top_p <= 1.0f) ||
                        !s->draw->u))
            return mn_fail(err, MN_INVALID, "forward: sequence %u's draw has temperature %g, top_p %g%s", i,
                           (double)s->draw->temperature, (double)s->draw->top_p, s->draw->u ? "" : " and no uniforms");
        uint64_t end = (uint64_t)s->kv->len + s->n_tokens;
        if (end > b->model->hp.n_ctx)
            return mn_fail(err, MN_INVALID, "forward: sequence %u would reach position %llu past the context of %u",
                           i, (unsigned long long)end, b->model->hp.n_ctx);
        if (end > (uint64_t)s->kv->n_blocks * b->kv->block_size)
            return mn_fail(err, MN_INVALID, "forward: sequence %u has not reserved KV up to position %llu", i,
                           (unsigned long long)end);
        for (uint32_t t = 0; t < s->n_tokens; t++)
            if (s->tokens[t] < 0 || (uint32_t)s->tokens[t] >= b->model->hp.n_vocab)
                return mn_fail(err, MN_INVALID, "forward: token %d is outside the vocabulary", s->tokens[t]);
        for (uint32_t j = 0; j < i; j++)
            if (batch->seqs[j].kv == s->kv)
                return mn_fail(err, MN_INVALID, "forward: sequence %u appears twice in the batch", i);
        total += s->n_tokens;
    }
    if (total > b->cfg.max_tokens)
        return mn_fail(err, MN_INVALID, "forward: %llu tokens exceed the pass limit of %u",
                       (unsigned long long)total, b->cfg.max_tokens);
    if (batch->pick && !b->ops->pick && !b->draws)
        for (uint32_t i = 0; i < batch->n_seqs && !b->draws; i++)
            if (batch->seqs[i].draw && !make_draw_spaces(b))
                return mn_fail(err, MN_NOMEM, "forward: no memory to draw from %u logits", b->model->hp.n_vocab);
    if (b->fail_pass && ++b->passes == b->fail_pass)
        return mn_fail(err, MN_ERROR, "forward: pass %llu failed on purpose (MINIONS_FAIL_PASS or "
                       "MINIONS_FAIL_DRAFT_PASS)", (unsigned long long)b->passes);
    mn_status st = b->ops->forward(b, batch, logits, err);
    if (st != MN_OK)
        return st;
    /* the pass wrote K/V for the new positions: they are the sequence's now */
    for (uint32_t i = 0; i < batch->n_seqs; i++)
        batch->seqs[i].kv->len += batch->seqs[i].n_tokens;
    if (batch->pick && !b->ops->pick) {
        uint32_t drawn = 0; /* rows drawn: over the threads from two on (an argmax takes 10-20 us) */
        for (uint32_t i = 0; i < batch->n_seqs; i++)
            drawn += batch->seqs[i].draw ? mn_batch_seq_rows(&batch->seqs[i]) : 0;
        pick_ctx p = {b, batch, logits};
        if (drawn >= 2)
            mn_backend_run(b, pick_rows, &p);
        else
            pick_rows(&p, 0, 1);
    }
    return MN_OK;
}

mn_status mn_backend_prefill(mn_backend *b, mn_kv_seq *kv, const int32_t *tokens, uint32_t n, float *logits,
                             mn_err *err)
{
    if (n == 0)
        return mn_fail(err, MN_INVALID, "prefill: no tokens");
    if ((uint64_t)kv->len + n > b->model->hp.n_ctx)
        return mn_fail(err, MN_INVALID, "prefill: %u tokens do not fit the context of %u", kv->len + n,
                       b->model->hp.n_ctx);
    if (mn_kv_reserve(b->kv, kv, kv->len + n) != MN_OK)
        return mn_fail(err, MN_BUSY, "prefill: the KV pool has no room for %u more tokens", n);
    for (uint32_t done = 0; done < n;) {
        uint32_t step = n - done < b->cfg.max_tokens ? n - done : b->cfg.max_tokens;
        mn_batch_seq seq = {.kv = kv, .tokens = tokens + done, .n_tokens = step};
        mn_batch batch = {&seq, 1, NULL};
        mn_status s = mn_backend_forward(b, &batch, logits, err);
        if (s != MN_OK)
            return s;
        done += step;
    }
    return MN_OK;
}
