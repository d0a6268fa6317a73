/* verifier.c - the verifier actor (see verifier.h).
 *
 * Invariants: at most one of {GROW, step job} is outstanding (busy); a request in the running set is
 * in at most one step; a step holds at most batch.max_sequences requests (its buffers are sized once
 * for max_batch_cap); the running set may be larger by the paused requests of clients not reading. */
#include "serve/verifier.h"

#include <string.h>

#include "net/conn.h"
#include "util/alloc.h"
#include "util/log.h"

typedef struct step_job {
    mn_job job;             /* MN_MSG_STEP_DONE back to the verifier */
    mn_backend *be;
    mn_batch_seq *seqs;     /* [n] */
    mn_req **reqs;          /* [n] */
    bool *sample;           /* [n] the pass reaches the end of the request's known tokens */
    int32_t *out;           /* [n] sampled tokens */
    float *logits;          /* [max_batch_cap][n_vocab] */
    uint32_t n;
    mn_status st;
    mn_err err;
} step_job;

struct mn_verifier {
    mn_engine *e;
    mn_req **running;       /* [max_running] in admission order */
    uint32_t n_running;
    bool busy;              /* a GROW or a step is outstanding */
    mn_kv_grow grow;
    step_job step;
};

/* On the worker: one target pass, then each finished sequence's next token. */
static void step_run(mn_job *job)
{
    step_job *s = (step_job *)job;
    mn_batch batch = {s->seqs, s->n};
    s->st = mn_backend_forward(s->be, &batch, s->logits, &s->err);
    if (s->st != MN_OK)
        return;
    uint32_t n_vocab = s->be->model->hp.n_vocab;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->sample[i])
            s->out[i] = mn_sampler_next(s->reqs[i]->smp, s->logits + (size_t)i * n_vocab);
}

mn_status mn_verifier_new(mn_engine *e, mn_verifier **out, mn_err *err)
{
    uint32_t cap = e->max_batch_cap;
    mn_verifier *v = mn_calloc(1, sizeof *v);
    if (!v)
        return mn_fail(err, MN_NOMEM, "verifier: out of memory");
    v->e = e;
    v->running = mn_calloc(e->max_running, sizeof *v->running);
    v->grow.reqs = mn_calloc(cap, sizeof *v->grow.reqs);
    v->grow.need = mn_calloc(cap, sizeof *v->grow.need);
    v->step.seqs = mn_calloc(cap, sizeof *v->step.seqs);
    v->step.reqs = mn_calloc(cap, sizeof *v->step.reqs);
    v->step.sample = mn_calloc(cap, sizeof *v->step.sample);
    v->step.out = mn_calloc(cap, sizeof *v->step.out);
    v->step.logits = mn_calloc((size_t)cap * e->model->hp.n_vocab, sizeof(float));
    if (!v->running || !v->grow.reqs || !v->grow.need || !v->step.seqs || !v->step.reqs || !v->step.sample ||
        !v->step.out || !v->step.logits) {
        mn_verifier_free(v);
        return mn_fail(err, MN_NOMEM, "verifier: out of memory for %u sequences", cap);
    }
    v->step.be = e->be;
    v->step.job.run = step_run;
    v->step.job.msg.type = MN_MSG_STEP_DONE;
    *out = v;
    return MN_OK;
}

void mn_verifier_free(mn_verifier *v)
{
    if (!v)
        return;
    mn_free(v->running);
    mn_free(v->grow.reqs);
    mn_free(v->grow.need);
    mn_free(v->step.seqs);
    mn_free(v->step.reqs);
    mn_free(v->step.sample);
    mn_free(v->step.out);
    mn_free(v->step.logits);
    mn_free(v);
}

/* Remove running[i], keeping the others in admission order (the oldest are served first). */
static void running_remove(mn_verifier *v, uint32_t i)
{
    memmove(v->running + i, v->running + i + 1, (--v->n_running - i) * sizeof *v->running);
}

static void finish(mn_verifier *v, uint32_t i, const char *reason)
{
    mn_req *r = v->running[i];
    if (!r->finish)
        r->finish = reason;
    mn_req_seal(r);
    running_remove(v, i);
    r->msg.type = MN_MSG_FINISH;
    mn_mailbox_post(v->e->kvmem_mb, &r->msg);
}

/* Drop what left the running set (preempted by kvmem) or must stop (cancelled). */
static void prune(mn_verifier *v)
{
    for (uint32_t i = 0; i < v->n_running;) {
        mn_req *r = v->running[i];
        if (r->stage != MN_REQ_RUNNING)
            running_remove(v, i); /* kvmem requeued it */
        else if (r->cancelled)
            finish(v, i, "cancelled");
        else
            i++;
    }
}

/* Choose this step's requests and token counts within the pass's token budget. With `fit`, skip
 * requests whose blocks do not cover the step (kvmem could not grow them); otherwise list in the
 * GROW message the lengths to reserve. Returns the number planned. */
static uint32_t plan(mn_verifier *v, bool fit)
{
    mn_kv_pool *pool = v->e->be->kv;
    uint32_t budget = v->e->be->cfg.max_tokens, n = 0;
    v->grow.n = 0;
    for (uint32_t i = 0; i < v->n_running && budget > 0 && n < v->e->max_batch; i++) {
        mn_req *r = v->running[i];
        if (mn_req_paused(r))
            continue; /* its client is not reading: let it catch up */
        uint32_t n_new = (uint32_t)r->toks.n - r->kv.len;
        if (n_new == 0)
            continue;
        if (n_new > budget)
            n_new = budget;
        uint32_t need = r->kv.len + n_new;
        if (need > r->kv.n_blocks * pool->block_size) {
            if (fit)
                continue;
            v->grow.reqs[v->grow.n] = r;
            v->grow.need[v->grow.n++] = need;
        }
        budget -= n_new;
        v->step.reqs[n] = r;
        v->step.seqs[n] = (mn_batch_seq){.kv = &r->kv, .tokens = r->toks.ids + r->kv.len, .n_tokens = n_new};
        v->step.sample[n] = need == r->toks.n;
        n++;
    }
    v->step.n = n;
    return n;
}

static void submit(mn_verifier *v)
{
    v->busy = true;
    v->step.job.reply_to = v->e->verifier_mb;
    mn_worker_submit(v->e->worker, &v->step.job);
}

static void schedule(mn_verifier *v)
{
    if (v->busy)
        return;
    prune(v);
    if (!plan(v, false))
        return;
    if (v->grow.n) {
        v->busy = true;
        v->grow.msg.type = MN_MSG_GROW;
        mn_mailbox_post(v->e->kvmem_mb, &v->grow.msg);
        return;
    }
    submit(v);
}

static void grown(mn_verifier *v)
{
    v->busy = false;
    prune(v);
    if (plan(v, true))
        submit(v);
    else
        schedule(v);
}

/* After a pass: take each sampled token, stream, and finish what is done. */
static void step_done(mn_verifier *v)
{
    mn_engine *e = v->e;
    step_job *s = &v->step;
    const mn_model *m = e->model;
    v->busy = false;
    e->stats.steps++;
    uint32_t produced = 0;
    for (uint32_t k = 0; k < s->n; k++) {
        mn_req *r = s->reqs[k];
        uint32_t i = 0;
        while (v->running[i] != r)
            i++;
        if (s->st != MN_OK) {
            mn_req_fail(r, MN_E_INTERNAL, "model pass failed: %s", s->err.msg);
            finish(v, i, "error");
            continue;
        }
        if (!s->sample[k])
            continue; /* a prompt chunk; the rest comes next step */
        int32_t tok = s->out[k];
        produced++;
        r->n_gen++;
        if (r->n_gen == 1)
            r->t_first = mn_now();
        if (tok == mn_tok_eos(m->tok)) {
            finish(v, i, "stop");
            continue;
        }
        size_t len;
        const char *piece = mn_tok_piece(m->tok, tok, &len);
        bool stopped = false;
        if (mn_tokens_push(&r->toks, tok) != MN_OK || mn_req_append(r, piece, len, &stopped) != MN_OK) {
            mn_req_fail(r, MN_E_INTERNAL, "out of memory for the output");
            finish(v, i, "error");
        } else if (stopped) {
            finish(v, i, "stop");
        } else if (r->n_gen >= r->p.max_tokens || r->kv.len + 1 > m->hp.n_ctx) {
            finish(v, i, "length");
        } else if (r->p.stream && r->ready > r->sent && !r->flush_queued && r->conn) {
            r->flush_queued = true;
            r->flush.type = MN_MSG_FLUSH;
            mn_mailbox_post(e->net_mb, &r->flush);
        }
    }
    mn_engine_count_tokens(e, produced);
    schedule(v);
}

void mn_verifier_handle(void *verifier, mn_msg *m)
{
    mn_verifier *v = verifier;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_START: {
        mn_req *r = (mn_req *)m;
        uint32_t i = 0;
        while (i < v->n_running && v->running[i] != r)
            i++;
        if (i == v->n_running) /* not already here (kvmem may requeue and restart during a GROW) */
            v->running[v->n_running++] = r;
        schedule(v);
        break;
    }
    case MN_MSG_GROWN:
        grown(v);
        break;
    case MN_MSG_STEP_DONE:
        step_done(v);
        break;
    case MN_MSG_KICK:
        mn_kick_taken(&v->e->verifier_kick);
        schedule(v);
        break;
    default:
        mn_log(MN_LOG_ERROR, "verifier: unexpected message %u", m->type);
    }
}
