/* verifier.c - the verifier actor (see verifier.h).
 *
 * Invariants: at most one step job is outstanding (busy); a request in the running set is in at
 * most one step and leaves the set only between steps; a step holds at most batch.max_sequences
 * requests (its buffers are sized once for the cap); the running set may be larger by the paused
 * requests of clients not reading. */
#include "actors/verifier.h"

#include <string.h>

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
    mn_verifier_config cfg; /* max_batch: the live value */
    uint32_t max_batch_cap;
    mn_req **running;       /* [max_held] in admission order */
    uint32_t n_running;
    bool busy;              /* a step is outstanding */
    step_job step;
    uint64_t steps, tokens;
    uint64_t per_second[MN_STATS_SECONDS]; /* tokens generated in each of the last seconds */
    int64_t second;         /* the second per_second[second % N] counts */
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

mn_status mn_verifier_new(const mn_verifier_config *cfg, mn_verifier **out, mn_err *err)
{
    uint32_t cap = cfg->max_batch;
    mn_verifier *v = mn_calloc(1, sizeof *v);
    if (!v)
        return mn_fail(err, MN_NOMEM, "verifier: out of memory");
    v->cfg = *cfg;
    v->max_batch_cap = cap;
    v->running = mn_calloc(cfg->max_held, sizeof *v->running);
    v->step.seqs = mn_calloc(cap, sizeof *v->step.seqs);
    v->step.reqs = mn_calloc(cap, sizeof *v->step.reqs);
    v->step.sample = mn_calloc(cap, sizeof *v->step.sample);
    v->step.out = mn_calloc(cap, sizeof *v->step.out);
    v->step.logits = mn_calloc((size_t)cap * cfg->be->model->hp.n_vocab, sizeof(float));
    if (!v->running || !v->step.seqs || !v->step.reqs || !v->step.sample || !v->step.out || !v->step.logits) {
        mn_verifier_free(v);
        return mn_fail(err, MN_NOMEM, "verifier: out of memory for %u sequences", cap);
    }
    v->step.be = cfg->be;
    v->step.job.run = step_run;
    v->step.job.msg.type = MN_MSG_STEP_DONE;
    v->step.job.reply_to = cfg->addr->verifier;
    *out = v;
    return MN_OK;
}

void mn_verifier_free(mn_verifier *v)
{
    if (!v)
        return;
    mn_free(v->running);
    mn_free(v->step.seqs);
    mn_free(v->step.reqs);
    mn_free(v->step.sample);
    mn_free(v->step.out);
    mn_free(v->step.logits);
    mn_free(v);
}

/* Move the per-second window up to now, zeroing the seconds that passed without tokens. */
static uint64_t *second_bucket(mn_verifier *v)
{
    int64_t now = (int64_t)mn_now();
    if (now != v->second) {
        int64_t gap = now - v->second;
        for (int64_t i = 1; i <= gap && i <= MN_STATS_SECONDS; i++)
            v->per_second[(v->second + i) % MN_STATS_SECONDS] = 0;
        v->second = now;
    }
    return &v->per_second[now % MN_STATS_SECONDS];
}

/* Hand running[i] back to kvmem (finished, or paused and wanted back), keeping the others in
 * admission order (the oldest are served first). */
static void give_back(mn_verifier *v, uint32_t i)
{
    mn_req *r = v->running[i];
    memmove(v->running + i, v->running + i + 1, (--v->n_running - i) * sizeof *v->running);
    r->msg.type = MN_MSG_RELEASE;
    mn_mailbox_post(v->cfg.addr->kvmem, &r->msg);
}

static void finish(mn_verifier *v, uint32_t i, const char *reason)
{
    mn_req *r = v->running[i];
    if (!r->finish)
        r->finish = reason;
    mn_req_seal(r);
    mn_req_event(r, MN_REQ_EV_FINISHED);
    give_back(v, i);
}

/* Between steps: end what was cancelled, return what kvmem wants back. */
static void prune(mn_verifier *v)
{
    for (uint32_t i = 0; i < v->n_running;) {
        mn_req *r = v->running[i];
        if (r->cancelled)
            finish(v, i, "cancelled");
        else if (r->preempt_wanted)
            give_back(v, i);
        else
            i++;
    }
}

/* Choose this step's requests and token counts within the pass's token budget. */
static uint32_t plan(mn_verifier *v)
{
    uint32_t budget = v->cfg.be->cfg.max_tokens, n = 0;
    for (uint32_t i = 0; i < v->n_running && budget > 0 && n < v->cfg.max_batch; i++) {
        mn_req *r = v->running[i];
        if (r->state == MN_REQ_PAUSED)
            continue; /* its client is not reading: let it catch up */
        uint32_t n_new = (uint32_t)r->toks.n - r->kv.len;
        if (n_new == 0)
            continue; /* cannot happen: a running request always has its next token */
        if (n_new > budget)
            n_new = budget;
        budget -= n_new;
        v->step.reqs[n] = r;
        v->step.seqs[n] = (mn_batch_seq){.kv = &r->kv, .tokens = r->toks.ids + r->kv.len, .n_tokens = n_new};
        v->step.sample[n] = r->kv.len + n_new == r->toks.n;
        n++;
    }
    v->step.n = n;
    return n;
}

static void schedule(mn_verifier *v)
{
    if (v->busy)
        return;
    prune(v);
    if (!plan(v))
        return;
    mn_status st = mn_worker_submit(v->cfg.worker, &v->step.job);
    if (st != MN_OK) { /* the worker is ours alone and takes one job at a time: a bug, not load */
        for (uint32_t k = 0; k < v->step.n; k++)
            mn_req_fail(v->step.reqs[k], MN_E_INTERNAL, "the compute worker refused the step (%s)",
                        mn_strstatus(st));
        for (uint32_t k = 0; k < v->step.n; k++) {
            uint32_t i = 0;
            while (v->running[i] != v->step.reqs[k])
                i++;
            finish(v, i, "error");
        }
        return;
    }
    v->busy = true;
}

/* A sampled token: append, stream, and decide whether running[i] is done. */
static void take_token(mn_verifier *v, uint32_t i, int32_t tok)
{
    const mn_model *m = v->cfg.be->model;
    mn_req *r = v->running[i];
    r->n_gen++;
    mn_req_event(r, MN_REQ_EV_PRODUCED);
    if (r->n_gen == 1)
        r->t_first = mn_now();
    if (tok == mn_tok_eos(m->tok))
        return finish(v, i, "stop");
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
    } else if (r->p.stream && r->ready > r->sent && !r->flush_queued) {
        r->flush_queued = true;
        r->flush.type = MN_MSG_FLUSH;
        mn_mailbox_post(v->cfg.addr->client, &r->flush);
    }
}

/* After a pass: take each sampled token, stream, and finish what is done. */
static void step_done(mn_verifier *v)
{
    step_job *s = &v->step;
    v->busy = false;
    v->steps++;
    uint32_t produced = 0;
    for (uint32_t k = 0; k < s->n; k++) {
        mn_req *r = s->reqs[k];
        uint32_t i = 0;
        while (v->running[i] != r)
            i++;
        if (s->st != MN_OK) {
            mn_req_fail(r, MN_E_INTERNAL, "model pass failed: %s", s->err.msg);
            finish(v, i, "error");
        } else if (s->sample[k]) { /* else a prompt chunk; the rest comes next step */
            produced++;
            take_token(v, i, s->out[k]);
        }
    }
    v->tokens += produced;
    *second_bucket(v) += produced;
    schedule(v);
}

static void stats(mn_verifier *v, mn_stats_part *q)
{
    second_bucket(v);
    uint64_t sum = 0;
    for (int i = 0; i < MN_STATS_SECONDS; i++)
        sum += v->per_second[i];
    q->stats->verifier.steps = v->steps;
    q->stats->verifier.tokens_generated = v->tokens;
    q->stats->verifier.tok_per_s = (double)sum / MN_STATS_SECONDS;
    mn_mailbox_post(q->reply_to, &q->msg);
}

void mn_verifier_handle(void *verifier, mn_msg *m)
{
    mn_verifier *v = verifier;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_START:
        v->running[v->n_running++] = (mn_req *)m; /* kvmem admits at most max_held */
        schedule(v);
        break;
    case MN_MSG_STEP_DONE:
        step_done(v);
        break;
    case MN_MSG_KICK:
        mn_kick_taken(v->cfg.addr->verifier_kick);
        schedule(v);
        break;
    case MN_MSG_SET: {
        mn_setting *s = (mn_setting *)m;
        if (s->key == MN_SET_MAX_BATCH && s->value >= 1 && s->value <= v->max_batch_cap)
            v->cfg.max_batch = s->value;
        mn_free(s);
        schedule(v);
        break;
    }
    case MN_MSG_STATS:
        stats(v, (mn_stats_part *)m);
        break;
    default:
        mn_log(MN_LOG_ERROR, "verifier: unexpected message %u", m->type);
    }
}
