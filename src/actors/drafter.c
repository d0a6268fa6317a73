/* drafter.c - the drafter actors (see drafter.h).
 *
 * Invariants: at most one round is held (the verifier has one out); while a model drafter's job is
 * in flight nobody else touches the round's requests; after a job every request of the round either
 * has a proposal made at its current length (prop_at == toks.n) or none (prop_len == 0). */
#include "actors/drafter.h"

#include <string.h>

#include "model/sampler.h"
#include "spec/ngram.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"

typedef struct draft_job {
    mn_job job;              /* MN_MSG_DRAFT_DONE back to the drafter */
    mn_backend *be;
    mn_round_part *part;     /* the round being drafted */
    mn_req **live;           /* [max_batch] requests this drafter proposes for */
    uint32_t *cap;           /* [max_batch] their draft lengths */
    mn_batch_seq *seqs;      /* [max_batch] one pass */
    uint32_t *who;           /* [max_batch] index into live of each pass entry */
    float *logits;           /* [max_batch][n_vocab]: left unwritten by a GPU backend (the drafts are greedy) */
    int32_t *pick;           /* [max_batch]: each row's argmax, the draft token */
    mn_status st;
    mn_err err;
} draft_job;

struct mn_drafter {
    mn_drafter_config cfg;
    draft_job job;
    uint32_t ngram_short; /* the n-gram drafter: drafter.ngram.short_len */
    uint32_t ngram_min_n; /* and drafter.ngram.min_n */
    bool ngram_shared;    /* and drafter.ngram.shared: look up the cache */
    bool ngram_learn;     /* and drafter.ngram.learn: add finished requests to it */
    mn_ngram_cache cache; /* the n-gram drafter's: finished requests' tokens */
};

mn_status mn_drafter_check_vocab(const mn_model *target, const mn_model *draft, mn_err *err)
{
    const mn_tokenizer *a = target->tok, *b = draft->tok;
    if (target->hp.n_vocab != draft->hp.n_vocab)
        return mn_fail(err, MN_INVALID, "the draft %s has %u tokens, the target %s %u: they must share a vocabulary",
                       draft->name, draft->hp.n_vocab, target->name, target->hp.n_vocab);
    for (uint32_t id = 0; id < target->hp.n_vocab; id++) {
        size_t na, nb;
        const char *pa = mn_tok_text(a, (int32_t)id, &na), *pb = mn_tok_text(b, (int32_t)id, &nb);
        bool ca = mn_tok_is_control(a, (int32_t)id), cb = mn_tok_is_control(b, (int32_t)id);
        if (na != nb || memcmp(pa, pb, na) || ca != cb) /* a control token's text too: it decodes to nothing */
            return mn_fail(err, MN_INVALID,
                           "the draft %s does not share the target %s's vocabulary: token %u is %s'%.*s', not %s'%.*s'",
                           draft->name, target->name, id, cb ? "the control token " : "", (int)(nb > 40 ? 40 : nb), pb,
                           ca ? "the control token " : "", (int)(na > 40 ? 40 : na), pa);
    }
    if (mn_tok_eos(a) != mn_tok_eos(b) || mn_tok_bos(a) != mn_tok_bos(b))
        return mn_fail(err, MN_INVALID, "the draft %s has bos/eos %d/%d, the target %s %d/%d", draft->name,
                       mn_tok_bos(b), mn_tok_eos(b), target->name, mn_tok_bos(a), mn_tok_eos(a));
    return MN_OK;
}

/* Tokens the drafter may propose for r: the round's length for a costly drafter, within its own
 * context (it feeds positions up to toks.n + cap - 2). */
static uint32_t own_cap(const mn_backend *be, const mn_req *r)
{
    uint32_t n = (uint32_t)r->toks.n, ctx = be->model->hp.n_ctx, cap = r->spec.len[MN_TUNER_COSTLY];
    if (n >= ctx)
        return 0;
    return cap < ctx - n ? cap : ctx - n;
}

/* Drop what the drafter fed itself past the prefix the target kept. Always leave the last known
 * token to feed again: its logits give the first draft token. Blocks stay reserved (kvmem reserved
 * the request's whole length), so rollback is a length. */
static void roll_back(mn_req_draft *x, const mn_req *r) { x->kv.len = mn_req_draft_valid(x, r); }

/* Of the catch-up positions [from, from + n) of r, those its latest run of plain decoding steps
 * produced: no drafter drafted while they came. Catching up on them is a one-off after such a run,
 * not what a length costs; the prompt, the tokens of speculating steps and those a drafter missed
 * while the vote left it out are paid at every length and stay. */
static uint32_t backlog_in(const mn_req *r, uint32_t from, uint32_t n)
{
    uint32_t lo = from > r->spec.plain_from ? from : r->spec.plain_from, end = r->spec.plain_end;
    uint32_t hi = from + n < end ? from + n : end;
    return hi > lo ? hi - lo : 0;
}

/* On the worker: catch every request up (its first draft token comes from that pass), then draft
 * the rest of its cap, one pass per position: their time and number to the part. */
static mn_status draft_passes(draft_job *j, uint32_t n_live, uint32_t index)
{
    mn_backend *be = j->be;
    uint32_t max_cap = 0;
    for (uint32_t i = 0; i < n_live; i++)
        max_cap = j->cap[i] > max_cap ? j->cap[i] : max_cap;
    for (;;) { /* catch-up: passes within the backend's token budget, every sequence unpadded */
        uint32_t budget = be->cfg.max_tokens, nb = 0, backlog = 0;
        for (uint32_t i = 0; i < n_live && budget > 0; i++) {
            mn_req *r = j->live[i];
            mn_req_draft *x = &r->spec.d[index];
            uint32_t behind = (uint32_t)r->toks.n - x->kv.len;
            if (!behind)
                continue;
            uint32_t take = behind < budget ? behind : budget;
            budget -= take;
            backlog += backlog_in(r, x->kv.len, take);
            j->seqs[nb] = (mn_batch_seq){.kv = &x->kv, .tokens = r->toks.ids + x->kv.len, .n_tokens = take,
                                         .pick_only = true};
            j->who[nb++] = i;
        }
        if (!nb)
            break;
        double t0 = mn_now();
        mn_status st = mn_backend_forward(be, &(mn_batch){j->seqs, nb, j->pick}, j->logits, &j->err);
        if (st != MN_OK)
            return st;
        j->part->backlog_seconds += (mn_now() - t0) * backlog / (be->cfg.max_tokens - budget);
        for (uint32_t b = 0; b < nb; b++) {
            mn_req *r = j->live[j->who[b]];
            mn_req_draft *x = &r->spec.d[index];
            if (x->kv.len == r->toks.n)
                x->prop[0] = j->pick[b];
        }
    }
    double t0 = mn_now();
    for (uint32_t pos = 1; pos < max_cap; pos++) {
        uint32_t nb = 0;
        for (uint32_t i = 0; i < n_live; i++) {
            mn_req_draft *x = &j->live[i]->spec.d[index];
            if (j->cap[i] > pos) {
                j->seqs[nb] = (mn_batch_seq){.kv = &x->kv, .tokens = &x->prop[pos - 1], .n_tokens = 1,
                                             .pick_only = true};
                j->who[nb++] = i;
            }
        }
        mn_status st = mn_backend_forward(be, &(mn_batch){j->seqs, nb, j->pick}, j->logits, &j->err);
        if (st != MN_OK)
            return st;
        for (uint32_t b = 0; b < nb; b++)
            j->live[j->who[b]]->spec.d[index].prop[pos] = j->pick[b];
        j->part->positions += nb;
    }
    j->part->position_seconds = mn_now() - t0;
    return MN_OK;
}

static void draft_run(mn_job *job)
{
    draft_job *j = (draft_job *)job;
    mn_round *round = j->part->round;
    uint32_t index = j->part->drafter, n_live = 0;
    double t0 = mn_now();
    for (uint32_t k = 0; k < round->n; k++) {
        mn_req *r = round->reqs[k];
        mn_req_draft *x = &r->spec.d[index];
        uint32_t cap = r->spec.ask >> index & 1 ? own_cap(j->be, r) : 0;
        x->prop_len = 0;
        if (!cap)
            continue;
        roll_back(x, r);
        j->cap[n_live] = cap;
        j->live[n_live++] = r;
    }
    j->st = draft_passes(j, n_live, index);
    for (uint32_t i = 0; i < n_live; i++) {
        mn_req_draft *x = &j->live[i]->spec.d[index];
        if (j->st == MN_OK) {
            x->prop_len = j->cap[i];
            x->prop_at = (uint32_t)j->live[i]->toks.n;
        } else { /* no proposal; kv.len counts the passes that succeeded, whose positions hold the
                  * request's tokens and then what it fed itself: mn_req_draft_valid keeps those the
                  * target kept (going back to 0 would write the blocks the pool's prefix cache gave
                  * it again, which other requests may share and read) */
            x->prop_at = (uint32_t)j->live[i]->toks.n;
        }
    }
    j->part->seconds = mn_now() - t0;
    if (j->st != MN_OK)
        j->part->backlog_seconds = 0;
}

/* The n-gram drafter needs no model: propose on the loop thread, from the request's own tokens,
 * else from what finished requests did after the same tokens (the cache). */
static void propose_ngram(mn_drafter *d, mn_round_part *part)
{
    double t0 = mn_now();
    mn_round *round = part->round;
    for (uint32_t k = 0; k < round->n; k++) {
        mn_req *r = round->reqs[k];
        mn_req_draft *x = &r->spec.d[d->cfg.index];
        const int32_t *t = r->toks.ids;
        uint32_t n = (uint32_t)r->toks.n, m = 0, len = r->spec.len[MN_TUNER_FREE];
        if (r->spec.ask >> d->cfg.index & 1) {
            m = mn_ngram_propose(t, n, d->ngram_min_n, MN_NGRAM_MAX_N_DEFAULT, len, d->ngram_short, x->prop);
            if (!m && d->ngram_shared) {
                m = mn_ngram_cache_propose(&d->cache, t, n, d->ngram_min_n, len, d->ngram_short, x->prop);
                part->from_cache += m > 0;
            }
        }
        x->prop_at = n;
        x->prop_len = m;
    }
    part->seconds = mn_now() - t0;
}

static void proposed(mn_drafter *d, mn_round_part *part)
{
    part->msg.type = MN_MSG_PROPOSED;
    mn_mailbox_post(d->cfg.addr->voter, &part->msg);
}

mn_status mn_drafter_new(const mn_drafter_config *cfg, mn_drafter **out, mn_err *err)
{
    mn_drafter *d = mn_calloc(1, sizeof *d);
    if (!d)
        return mn_fail(err, MN_NOMEM, "drafter: out of memory");
    d->cfg = *cfg;
    d->ngram_short = MN_NGRAM_SHORT_DEFAULT;
    d->ngram_min_n = MN_NGRAM_MIN_N_DEFAULT;
    d->ngram_shared = cfg->ngram_cache > 0;
    d->ngram_learn = true;
    if (!cfg->be && cfg->ngram_cache) {
        mn_status st = mn_ngram_cache_init(&d->cache, cfg->ngram_cache, MN_NGRAM_MAX_N_DEFAULT, err);
        if (st != MN_OK) {
            mn_free(d);
            return st;
        }
    }
    if (cfg->be) {
        uint32_t n = cfg->max_batch;
        draft_job *j = &d->job;
        j->be = cfg->be;
        j->live = mn_calloc(n, sizeof *j->live);
        j->cap = mn_calloc(n, sizeof *j->cap);
        j->seqs = mn_calloc(n, sizeof *j->seqs);
        j->who = mn_calloc(n, sizeof *j->who);
        j->logits = mn_calloc((size_t)n * cfg->be->model->hp.n_vocab, sizeof *j->logits);
        j->pick = mn_calloc(n, sizeof *j->pick);
        if (!j->live || !j->cap || !j->seqs || !j->who || !j->logits || !j->pick) {
            mn_drafter_free(d);
            return mn_fail(err, MN_NOMEM, "drafter: out of memory for %u sequences", n);
        }
        j->job.run = draft_run;
        j->job.msg.type = MN_MSG_DRAFT_DONE;
        j->job.reply_to = cfg->self;
    }
    *out = d;
    return MN_OK;
}

void mn_drafter_free(mn_drafter *d)
{
    if (!d)
        return;
    mn_free(d->job.live);
    mn_free(d->job.cap);
    mn_free(d->job.seqs);
    mn_free(d->job.who);
    mn_free(d->job.logits);
    mn_free(d->job.pick);
    mn_ngram_cache_free(&d->cache);
    mn_free(d);
}

void mn_drafter_handle(void *drafter, mn_msg *m)
{
    mn_drafter *d = drafter;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_DRAFT: {
        mn_round_part *part = (mn_round_part *)m;
        if (!d->cfg.be) {
            propose_ngram(d, part);
            return proposed(d, part);
        }
        d->job.part = part;
        if (mn_worker_submit(d->cfg.worker, &d->job.job) != MN_OK) { /* sized for every drafter: a bug */
            mn_log(MN_LOG_ERROR, "drafter %u: the compute worker refused the job", d->cfg.index);
            for (uint32_t k = 0; k < part->round->n; k++)
                part->round->reqs[k]->spec.d[d->cfg.index].prop_len = 0;
            proposed(d, part);
        }
        break;
    }
    case MN_MSG_DRAFT_DONE:
        if (d->job.st != MN_OK)
            mn_log(MN_LOG_ERROR, "drafter %u: draft pass failed: %s", d->cfg.index, d->job.err.msg);
        proposed(d, d->job.part);
        break;
    case MN_MSG_RELEASE: { /* the n-gram drafter, on a request's way from the voter to kvmem */
        mn_req *r = (mn_req *)m;
        if (d->ngram_learn && r->state == MN_REQ_FINISHED && !r->failed)
            mn_ngram_cache_add(&d->cache, r->toks.ids, (uint32_t)r->toks.n);
        mn_mailbox_post(d->cfg.addr->kvmem, m);
        break;
    }
    case MN_MSG_STATS: { /* the n-gram drafter's cache, as it is now (the voter has the rest) */
        mn_stats_part *q = (mn_stats_part *)m;
        q->stats->ngram.cache_cap = d->cache.cap;
        q->stats->ngram.cache_added = d->cache.added;
        mn_stats_reply(q);
        break;
    }
    case MN_MSG_SET: {
        mn_setting *s = (mn_setting *)m;
        if (s->key == MN_SET_NGRAM_SHORT)
            d->ngram_short = s->value;
        else if (s->key == MN_SET_NGRAM_MIN_N)
            d->ngram_min_n = s->value;
        else if (s->key == MN_SET_NGRAM_SHARED)
            d->ngram_shared = s->value != 0;
        else if (s->key == MN_SET_NGRAM_LEARN)
            d->ngram_learn = s->value != 0;
        mn_free(s);
        break;
    }
    default:
        mn_log(MN_LOG_ERROR, "drafter: unexpected message %u", m->type);
    }
}
