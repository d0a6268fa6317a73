/* verifier.c - the verifier actor (see verifier.h).
 *
 * Invariants: at most one step job and one round are out (stepping, drafting); a request is in at
 * most one of them (r->phase) and leaves the running set only while in neither; a step or a round
 * holds at most batch.max_sequences requests (buffers are sized once for the cap); the running set
 * may be larger by the paused requests of clients not reading. */
#include "actors/verifier.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "spec/accept.h"
#include "util/alloc.h"
#include "util/log.h"

typedef struct step_job {
    mn_job job;             /* MN_MSG_STEP_DONE back to the verifier */
    mn_backend *be;
    mn_batch_seq *seqs;     /* [n] */
    mn_req **reqs;          /* [n] */
    bool *sample;           /* [n] the pass reaches the end of the request's known tokens */
    float *logits;          /* [rows][n_vocab]: a row per sequence, or per token of a verified draft */
    int32_t *pick;          /* [rows]: each row's token from the pass: its argmax, or its draw on a backend
                             * that picks (a GPU; the CPU's rows are drawn as the verdict needs them) */
    mn_draw *draws;         /* [n] how a sampled request's rows are drawn by such a backend */
    double *u;              /* [rows] their uniforms: the next ones of the request's sampler */
    uint32_t n;
    double seconds;         /* the job's duration */
    double t_submit, t_start, t_end; /* handed to the worker; the job ran (the step trace) */
    double round_t0, round_t1; /* the round whose drafts it verifies: planned, voted (0: none) */
    mn_status st;
    mn_err err;
} step_job;

struct mn_verifier {
    mn_verifier_config cfg; /* max_batch, spec_enabled: the live values */
    uint32_t max_batch_cap;
    mn_req **running;       /* [max_held] in admission order */
    uint32_t n_running;
    bool stepping;          /* the step job is out */
    bool drafting;          /* the round is out */
    step_job step;
    mn_round round;         /* requests being drafted */
    uint32_t paired[MN_TUNER_CLASSES];        /* a paired probe's steps so far, by class */
    mn_tuner_advice advice[MN_TUNER_CLASSES]; /* the tuner's, by batch class: the speculation length, and
                                               * (sequence rule) what each sequence's own length takes */
    uint32_t round_s;       /* the length the round out (or the last one) was planned with */
    uint32_t voted_s;       /* the last voted round's: its drafts wait in the pool (with the pipeline
                             * the next round may be out, planned at another length) */
    uint64_t voted_round;   /* and its number (mn_req_spec.round) */
    bool voted_idle;        /* and whether it asked no drafter (mn_round.idle) */
    bool voted_taken;       /* a step has taken drafts of the last voted round: it was charged the
                             * round's drafting time, and a later one taking the rest is not measured */
    uint32_t class_size;    /* the batch size whose class the last schedule went by (step_class) */
    uint32_t round_size, voted_size; /* that of the round out (or the last one), and the last voted */
    uint32_t step_size;     /* that of the length this step went by: the tuner files the step under its
                             * class, which with the pipeline or a budget-bound step is not the class of
                             * the sequences it verified */
    uint32_t step_s;        /* the length this step's drafts were made at */
    bool step_measured;     /* every sequence was drafted: the length shaped the step */
    double t_plan;          /* when the last round was planned */
    double round_seconds;   /* the last round's drafting time: planned to voted */
    double step_draft_seconds; /* that of the round whose drafts this step verifies */
    double round_backlog, step_backlog; /* of those, the drafters' backlog (mn_measure), */
    double round_costly, step_costly;   /* the costly drafters' passes of later positions */
    uint32_t round_positions, step_positions; /* and those positions (mn_tuner_step) */
    uint32_t pool_batch;    /* B: the pool's bound as the last schedule found it */
    bool paused;            /* drafting is paused: the pool holds B */
    uint64_t rounds, overlapped, pauses, resumes;
    mn_measure measure;     /* to the tuner */
    uint64_t steps, tokens;
    double step_seconds;    /* time in target passes (and acceptance) */
    uint64_t verifications, drafted, accepted, accepted_hist[MN_SPEC_HIST];
    mn_hist ttft;           /* latency to the first token (the front ends keep e2e and tpot) */
    uint64_t per_second[MN_STATS_SECONDS]; /* tokens generated in each of the last seconds */
    int64_t second;         /* the second per_second[second % N] counts */
};

typedef struct draw_ctx {
    mn_sampler *smp;
    const float *logits;    /* the request's rows */
    const int32_t *pick;    /* their tokens, when the pass picked them (greedy, or drawn by the backend) */
    uint32_t n_vocab;
} draw_ctx;

/* The target's own token at verified position `row`, drawn exactly as plain decoding draws it: the
 * pass's pick (the argmax, or the draw with the request's next uniform), or the sampler's draw. */
static int32_t draw_row(void *ctx, uint32_t row)
{
    draw_ctx *d = ctx;
    return d->pick ? d->pick[row] : mn_sampler_next(d->smp, d->logits + (size_t)row * d->n_vocab);
}

/* Whether r's verdict draws its tokens from its rows here (sampled, and the backend did not draw
 * them: drawn), rather than taking the pass's picks. */
static bool draws_here(const mn_req *r, bool drawn) { return !drawn && !mn_sampler_greedy(r->smp); }

/* On the worker: the target's verdict on r's draft (rows lg[0..n_draft], their picks pk; drawn:
 * the backend drew them), into spec.kept, by the coupled rule (spec/accept.h: greedy or sampled,
 * the tokens plain decoding would emit); the rejected positions are rolled back from its KV length
 * (their blocks stay reserved), and a sampler whose draws the backend made uses up the uniforms of
 * those the rule took. */
static void verify(step_job *s, mn_req *r, const float *lg, const int32_t *pk, bool drawn)
{
    uint32_t nd = r->spec.n_draft;
    const int32_t *draft = r->spec.vtoks + 1;
    draw_ctx d = {r->smp, lg, draws_here(r, drawn) ? NULL : pk, s->be->model->hp.n_vocab};
    mn_accept_result res = mn_accept_coupled(draft, nd, draw_row, &d);
    if (drawn)
        mn_sampler_skip(r->smp, res.n_accepted + 1);
    memcpy(r->spec.kept, draft, res.n_accepted * sizeof *draft);
    r->spec.kept[res.n_accepted] = res.next;
    r->spec.n_kept = res.n_accepted + 1;
    r->kv.len -= nd - res.n_accepted;
    for (uint32_t j = 0; r->kept_lp && j < r->spec.n_kept; j++)
        mn_logprobs(lg + (size_t)j * d.n_vocab, d.n_vocab, r->spec.kept[j], r->p.top_logprobs, &r->kept_lp[j]);
}

/* On the worker's compute threads: the verdicts of requests i, i + n, ... of the step (each touches
 * only its own request: its sampler, draft and KV length). */
static void verdicts(void *arg, int ith, int nth)
{
    step_job *s = arg;
    uint32_t n_vocab = s->be->model->hp.n_vocab;
    size_t row = 0;
    for (uint32_t i = 0; i < s->n; row += mn_batch_seq_rows(&s->seqs[i]), i++)
        if (i % (uint32_t)nth == (uint32_t)ith && s->sample[i]) /* with no draft: plain decoding's one draw */
            verify(s, s->reqs[i], s->logits + row * n_vocab, s->pick + row, s->seqs[i].draw);
}

/* On the worker: one target pass, then each finished sequence's next tokens. */
static void step_run(mn_job *job)
{
    step_job *s = (step_job *)job;
    double t0 = s->t_start = mn_now();
    mn_batch batch = {s->seqs, s->n, s->pick};
    s->st = mn_backend_forward(s->be, &batch, s->logits, &s->err);
    if (s->st != MN_OK)
        return;
    /* over the compute threads where two or more verdicts draw from their rows or weigh log-
     * probabilities (a row of SmolLM2's takes 0.1-0.3 ms); the others only compare tokens */
    uint32_t heavy = 0;
    for (uint32_t i = 0; i < s->n; i++)
        heavy += s->sample[i] && (draws_here(s->reqs[i], s->seqs[i].draw) || s->reqs[i]->kept_lp);
    if (heavy >= 2)
        mn_backend_run(s->be, verdicts, s);
    else
        verdicts(s, 0, 1);
    s->t_end = mn_now();
    s->seconds = s->t_end - t0;
}

mn_status mn_verifier_new(const mn_verifier_config *cfg, mn_verifier **out, mn_err *err)
{
    uint32_t cap = cfg->max_batch, n_vocab = cfg->be->model->hp.n_vocab;
    /* rows of logits: one per sequence, or with drafts one per verified token, within the pass */
    size_t rows = cap, budget = cfg->be->cfg.max_tokens;
    if (cfg->addr->voter)
        rows = (size_t)cap * (1 + MN_SPEC_MAX_LEN) < budget ? (size_t)cap * (1 + MN_SPEC_MAX_LEN) : budget;
    rows = rows < cap ? cap : rows;
    mn_verifier *v = mn_calloc(1, sizeof *v);
    if (!v)
        return mn_fail(err, MN_NOMEM, "verifier: out of memory");
    v->cfg = *cfg;
    v->max_batch_cap = cap;
    v->running = mn_calloc(cfg->max_held, sizeof *v->running);
    v->step.seqs = mn_calloc(cap, sizeof *v->step.seqs);
    v->step.reqs = mn_calloc(cap, sizeof *v->step.reqs);
    v->step.sample = mn_calloc(cap, sizeof *v->step.sample);
    v->step.logits = mn_calloc(rows * n_vocab, sizeof(float));
    v->step.pick = mn_calloc(rows, sizeof *v->step.pick);
    v->step.draws = mn_calloc(cap, sizeof *v->step.draws);
    v->step.u = mn_calloc(rows, sizeof *v->step.u);
    v->round.reqs = mn_calloc(cap, sizeof *v->round.reqs);
    if (!v->running || !v->step.seqs || !v->step.reqs || !v->step.sample || !v->step.logits || !v->step.pick ||
        !v->step.draws || !v->step.u ||
        !v->round.reqs) {
        mn_verifier_free(v);
        return mn_fail(err, MN_NOMEM, "verifier: out of memory for %u sequences", cap);
    }
    for (int i = 0; i < MN_TUNER_CLASSES; i++)
        v->advice[i] = mn_tuner_fixed_advice(cfg->spec_length);
    v->measure.msg.type = MN_MSG_MEASURED;
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
    mn_free(v->step.logits);
    mn_free(v->step.pick);
    mn_free(v->step.draws);
    mn_free(v->step.u);
    mn_free(v->round.reqs);
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

/* Hand r back (finished, or paused and wanted back), keeping the others in admission order (the
 * oldest are served first). With drafters it goes through the voter, which judges its last vote. */
static void give_back(mn_verifier *v, mn_req *r)
{
    uint32_t i = 0;
    while (v->running[i] != r)
        i++;
    memmove(v->running + i, v->running + i + 1, (--v->n_running - i) * sizeof *v->running);
    r->msg.type = MN_MSG_RELEASE;
    mn_mailbox_post(v->cfg.addr->voter ? v->cfg.addr->voter : v->cfg.addr->kvmem, &r->msg);
}

/* Drafted requests waiting for a step (the pool), paused ones aside. */
static uint32_t pool_depth(const mn_verifier *v)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < v->n_running; i++)
        n += v->running[i]->phase == MN_PHASE_DRAFTED && v->running[i]->state != MN_REQ_PAUSED;
    return n;
}

static void finish(mn_verifier *v, mn_req *r, const char *reason)
{
    if (!r->finish)
        r->finish = reason;
    mn_req_seal(r);
    mn_req_event(r, MN_REQ_EV_FINISHED);
    give_back(v, r);
}

/* End what was cancelled, return what kvmem wants back: those not out in a step or a round (a
 * drafted one's draft is dropped) and still paused. One whose client read again since is kept: given
 * back, it was queued first, not throttled, and took the blocks again before the reader it was
 * preempted for. */
static void prune(mn_verifier *v)
{
    for (uint32_t i = 0; i < v->n_running;) {
        mn_req *r = v->running[i];
        if (r->phase == MN_PHASE_DRAFTING || r->phase == MN_PHASE_VERIFYING)
            i++;
        else if (r->cancelled)
            finish(v, r, "cancelled");
        else if (r->preempt_wanted && r->state == MN_REQ_PAUSED)
            give_back(v, r);
        else if (r->preempt_wanted) { /* its client reads again: kvmem asks for another */
            r->preempt_wanted = false;
            mn_kick_kvmem(v->cfg.addr);
            i++;
        } else {
            i++;
        }
    }
}

/* Tokens the drafters may propose for r: s, the round's length, within the request's cap, what it
 * may still generate (the step adds the target's own token), its context and the pass's budget. */
static uint32_t draft_cap(const mn_verifier *v, const mn_req *r, uint32_t s, uint32_t budget)
{
    uint32_t cap = s, n = (uint32_t)r->toks.n, n_ctx = v->cfg.be->model->hp.n_ctx;
    uint32_t left = r->p.max_tokens - r->n_gen - 1; /* n_gen < max_tokens while it runs */
    uint32_t room = n < n_ctx ? n_ctx - n : 0;      /* the pass writes positions n - 1 .. n - 1 + cap */
    uint32_t limits[] = {r->spec.max_len, left, room, budget};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++)
        cap = cap < limits[i] ? cap : limits[i];
    return cap;
}

static bool decoding(const mn_req *r)
{
    return r->toks.n == r->kv.len + 1;
}

/* Whether a round is worth planning at all: drafters exist, speculation is on and one of them is
 * enabled (with every drafter disabled a round came back empty, and its steps were measured as
 * speculating ones at its length). */
static bool drafting_on(const mn_verifier *v)
{
    return v->cfg.addr->voter && v->cfg.spec_enabled && v->cfg.drafters_on;
}

static bool may_draft(const mn_verifier *v, const mn_req *r)
{
    return drafting_on(v) && r->spec.on && decoding(r);
}

/* The batch class of the sequences the next step will verify (with the pipeline, the pool's bound;
 * without, every decoding sequence), and in *size the batch size it is the class of. *bound: the
 * pool's bound B, half the speculating sequences (at least 1, at most batch.max_sequences). */
static uint32_t step_class(const mn_verifier *v, uint32_t *bound, uint32_t *size)
{
    uint32_t dec = 0, spec = 0;
    for (uint32_t i = 0; i < v->n_running; i++) {
        const mn_req *r = v->running[i];
        if (r->state == MN_REQ_PAUSED)
            continue;
        /* decoding, or out in a round or a step (the phase first: a step out writes kv.len) */
        bool decodes = r->phase != MN_PHASE_IDLE || decoding(r);
        dec += decodes;
        spec += decodes && r->spec.on;
    }
    uint32_t cap = v->cfg.max_batch, half = (spec + 1) / 2;
    *bound = half < 1 ? 1 : half < cap ? half : cap;
    uint32_t batch = v->cfg.pipeline ? *bound : dec < cap ? dec : cap;
    *size = batch ? batch : 1;
    return mn_tuner_class_of(*size);
}

/* The length of class cls's next step: its advice's, or in a paired probe the side whose block it
 * is (start_step counts the probe's steps). */
static uint32_t class_length(const mn_verifier *v, uint32_t cls)
{
    return mn_tuner_step_length(&v->advice[cls], v->paired[cls]);
}

/* Whether r waits for drafts before its next step: it decodes, may draft, a round at the length in
 * effect would give it some, and the last round planned found room for them (else it steps plainly:
 * prompt chunks or others' drafts can fill the pass's budget round after round, and a request left
 * out of the round and the step alike got no token until they were done). */
static bool wants_draft(const mn_verifier *v, const mn_req *r, uint32_t s)
{
    return r->phase == MN_PHASE_IDLE && !r->spec.no_room && may_draft(v, r) &&
           draft_cap(v, r, s, v->cfg.be->cfg.max_tokens) > 0;
}

/* Start a round at length s of class cls (schedule's) over the idle requests that may draft, in
 * admission order, as far as the batch and the pass's budget go (prompt chunks and waiting drafts
 * come first in the budget); with the pipeline, at most as many as bring the pool to its bound B
 * (half of the speculating sequences): while the pool holds B, drafting pauses. False when no
 * round started. */
static bool start_round(mn_verifier *v, uint32_t cls, uint32_t s)
{
    if (!drafting_on(v))
        return false;
    const mn_tuner_advice *advice = &v->advice[cls];
    if (!s)
        return false;
    uint32_t budget = v->cfg.be->cfg.max_tokens, n = 0, depth = 0, want = 0;
    mn_req **cand = v->round.reqs;
    v->round.n = 0;
    for (uint32_t i = 0; i < v->n_running && budget > 0 && n < v->cfg.max_batch; i++) {
        mn_req *r = v->running[i];
        if (r->state == MN_REQ_PAUSED || r->phase == MN_PHASE_DRAFTING || r->phase == MN_PHASE_VERIFYING)
            continue;
        uint32_t n_new = (uint32_t)r->toks.n - r->kv.len;
        uint32_t take = n_new < budget ? n_new : budget;
        if (r->phase == MN_PHASE_DRAFTED) {
            depth++;
            take += r->spec.n_draft;
            take = take < budget ? take : budget;
        } else if (wants_draft(v, r, s)) {
            cand[want++] = r;
        }
        budget -= take;
        n++;
    }
    uint32_t room = v->cfg.pipeline ? (depth < v->pool_batch ? v->pool_batch - depth : 0) : want;
    if (want && !room && !v->paused) {
        v->paused = true;
        v->pauses++;
    }
    for (uint32_t k = 0; k < want && v->round.n < room; k++) {
        mn_req *r = cand[k];
        uint32_t cap = draft_cap(v, r, s, budget);
        r->spec.cap = 0;
        for (uint32_t kind = 0; kind < MN_TUNER_KINDS; kind++) {
            uint32_t len = mn_tuner_seq_length(&r->spec.acc[kind], &advice->kind[kind], cap);
            r->spec.len[kind] = len;
            r->spec.cap = len > r->spec.cap ? len : r->spec.cap;
        }
        if (r->spec.cap) {
            budget -= r->spec.cap;
            r->phase = MN_PHASE_DRAFTING;
            cand[v->round.n++] = r; /* k >= round.n: the list compacts in place */
        } else {
            r->spec.no_room = true;
        }
    }
    if (!v->round.n)
        return false;
    if (v->paused) {
        v->paused = false;
        v->resumes++;
    }
    v->drafting = true;
    v->round_s = s;
    v->round_size = v->class_size;
    v->rounds++;
    for (uint32_t k = 0; k < v->round.n; k++)
        v->round.reqs[k]->spec.round = v->rounds;
    v->overlapped += v->stepping;
    v->t_plan = mn_now();
    v->round.msg.type = MN_MSG_DRAFT;
    mn_mailbox_post(v->cfg.addr->voter, &v->round.msg);
    return true;
}

/* Start a step over the requests that need no drafts at length s (prompt chunks, plain steps) and
 * the drafted ones, in admission order, as far as the batch and the pass's token budget go: first
 * every request's own tokens, then the drafts within what is left (a draft cut short is still a
 * draft). cls is the class s is of. False when there was nothing to step. */
static bool start_step(mn_verifier *v, uint32_t cls, uint32_t s)
{
    step_job *st = &v->step;
    uint32_t budget = v->cfg.be->cfg.max_tokens, n = 0, drafted = 0, opted_out = 0, older = 0;
    bool decoding_only = true; /* every sequence brings its one next token: no prompt chunk */
    for (uint32_t i = 0; i < v->n_running && budget > 0 && n < v->cfg.max_batch; i++) {
        mn_req *r = v->running[i];
        if (r->state == MN_REQ_PAUSED || r->phase == MN_PHASE_DRAFTING || r->phase == MN_PHASE_VERIFYING ||
            wants_draft(v, r, s))
            continue;
        uint32_t n_new = (uint32_t)r->toks.n - r->kv.len; /* >= 1: a running request knows its next token */
        n_new = n_new < budget ? n_new : budget;
        budget -= n_new;
        bool drafted_now = r->phase == MN_PHASE_DRAFTED;
        if (!drafted_now)
            r->spec.n_draft = 0;
        bool left_out = r->spec.no_room;
        r->spec.no_room = false; /* the next round plans its drafts afresh */
        drafted += drafted_now;
        older += drafted_now && r->spec.round != v->voted_round; /* left in the pool by an earlier step */
        r->phase = MN_PHASE_VERIFYING;
        st->reqs[n] = r;
        st->seqs[n] = (mn_batch_seq){.kv = &r->kv, .tokens = r->toks.ids + r->kv.len, .n_tokens = n_new};
        st->sample[n] = r->kv.len + n_new == r->toks.n;
        decoding_only &= n_new == 1 && st->sample[n];
        /* "speculate": false (or spec.max_len 0), or no room in the round: decoding beside the drafts */
        opted_out += (!r->spec.on || left_out) && !drafted_now && n_new == 1 && st->sample[n];
        if (!drafted_now && n_new == 1 && st->sample[n]) { /* a plain decoding step: its token at toks.n */
            if (r->spec.plain_end != r->toks.n) /* the step before was not one: a new run */
                r->spec.plain_from = (uint32_t)r->toks.n;
            r->spec.plain_end = (uint32_t)r->toks.n + 1;
        }
        n++;
    }
    st->n = n;
    if (!n)
        return false;
    if (v->advice[cls].other != v->advice[cls].s) /* a paired probe: one more of its steps */
        v->paired[cls]++;
    for (uint32_t k = 0; k < n; k++) {
        mn_req *r = st->reqs[k];
        r->spec.n_draft = r->spec.n_draft < budget ? r->spec.n_draft : budget;
        if (!r->spec.n_draft)
            continue;
        budget -= r->spec.n_draft;
        r->spec.vtoks[0] = r->toks.ids[r->kv.len];
        st->seqs[k] = (mn_batch_seq){.kv = &r->kv, .tokens = r->spec.vtoks, .n_tokens = 1 + r->spec.n_draft,
                                     .want_all_logits = true};
    }
    /* a backend that picks (a GPU) draws a sampled request's rows with the request's next uniforms;
     * rows nobody reads (a prompt chunk) or whose tokens the pass picks (greedy or drawn, no log-
     * probabilities asked) need not come down from it */
    double *u = st->u;
    for (uint32_t k = 0; k < n; k++) {
        mn_req *r = st->reqs[k];
        if (st->sample[k] && !mn_sampler_greedy(r->smp) && v->cfg.be->ops->pick) {
            uint32_t rows = mn_batch_seq_rows(&st->seqs[k]);
            mn_sampler_params p = mn_sampler_settings(r->smp);
            mn_sampler_peek(r->smp, rows, u);
            st->draws[k] = (mn_draw){p.temperature, p.top_p, u};
            st->seqs[k].draw = &st->draws[k];
            u += rows;
        }
        st->seqs[k].pick_only = !st->sample[k] || (!r->kept_lp && (mn_sampler_greedy(r->smp) || st->seqs[k].draw));
    }
    /* the length shaped the step when every sequence in it was drafted at it, or, at length 0 (plain
     * decoding, no round), when every one was decoding: without the latter a tuner that tried 0
     * would never see another step at 0, and stay there */
    bool plain = !drafted && s == 0 && decoding_only;
    /* a request that opted out decodes plainly at every length (and one the round had no room for,
     * at this one): beside it the drafted ones still tell the length's cost (unmeasured, a class
     * never saw a step while such a request ran). The last round's drafting time goes with the
     * first step that takes its drafts; a step that takes drafts it left (the pass's budget), or
     * drafts of an older round (made at its length, maybe not the last one's), or of a round that
     * asked no drafter, is not measured */
    bool charged = drafted && !older && !v->voted_taken && !v->voted_idle;
    v->voted_taken |= drafted > 0;
    v->step_measured = v->cfg.addr->tuner && ((charged && drafted + opted_out == n) || plain);
    v->step_s = plain ? 0 : v->voted_s;
    v->step_size = drafted ? v->voted_size : v->class_size;
    v->step_draft_seconds = plain ? 0 : v->round_seconds;
    v->step_backlog = drafted ? v->round_backlog : 0;
    v->step_costly = drafted ? v->round_costly : 0;
    v->step_positions = drafted ? v->round_positions : 0;
    st->round_t0 = drafted ? v->t_plan : 0;
    st->round_t1 = drafted ? v->t_plan + v->round_seconds : 0;
    st->t_submit = mn_now();
    v->stepping = true;
    mn_status rc = mn_worker_submit(v->cfg.worker, &st->job);
    if (rc == MN_OK)
        return true;
    /* the worker takes one job per actor at a time and is sized for all: a bug, not load */
    v->stepping = false;
    for (uint32_t k = 0; k < n; k++) {
        st->reqs[k]->phase = MN_PHASE_IDLE;
        mn_req_fail(st->reqs[k], MN_E_INTERNAL, "the compute worker refused the step (%s)", mn_strstatus(rc));
        finish(v, st->reqs[k], "error");
    }
    return false;
}

/* Start what may start. Without the pipeline the verifier alternates: a round over every request
 * that may draft, then one step over everything (so prompt chunks and plain steps join the drafted
 * ones). With it, the step and the round each start as soon as their last one is back: the step
 * takes the pool, the round refills it. Both go by the class and length of the state before
 * either: the requests a step leaves out for wanting drafts at that length are the round's (taken
 * after the step, a prompt it took counted as decoding and could move the class to a length of
 * 0, and those requests got neither until the step came back). */
static void schedule(mn_verifier *v)
{
    prune(v);
    uint32_t cls = step_class(v, &v->pool_batch, &v->class_size), s = class_length(v, cls);
    if (v->cfg.pipeline) {
        if (!v->stepping)
            start_step(v, cls, s);
        if (!v->drafting)
            start_round(v, cls, s);
    } else if (!v->stepping && !v->drafting && (pool_depth(v) || !start_round(v, cls, s))) {
        start_step(v, cls, s);
    }
}

/* The voter wrote each drafted request's draft: they wait in the pool for a step. */
static void voted(mn_verifier *v)
{
    v->drafting = false;
    v->voted_s = v->round_s;
    v->voted_size = v->round_size;
    v->voted_round = v->rounds; /* one round is out at a time: the last one planned */
    v->voted_idle = v->round.idle;
    v->voted_taken = false;
    v->round_seconds = mn_now() - v->t_plan;
    v->round_backlog = v->round.backlog_seconds;
    v->round_costly = v->round.costly_seconds;
    v->round_positions = v->round.costly_positions;
    for (uint32_t k = 0; k < v->round.n; k++)
        v->round.reqs[k]->phase = MN_PHASE_DRAFTED;
    schedule(v);
}

/* The j-th kept token: append and stream it. Returns why r is done with it ("stop", "length",
 * "error"), or NULL when r goes on; the caller finishes r. */
static const char *take_token(mn_verifier *v, mn_req *r, uint32_t j)
{
    int32_t tok = r->spec.kept[j];
    const mn_model *m = v->cfg.be->model;
    r->n_gen++;
    mn_req_event(r, MN_REQ_EV_PRODUCED);
    if (r->n_gen == 1) {
        r->t_first = mn_now();
        mn_hist_observe(&v->ttft, r->t_first - r->t_arrive);
    }
    if (mn_tok_is_eog(m->tok, tok) || tok == r->end_of_turn)
        return "stop";
    if (r->lp)
        r->lp[r->n_lp++] = r->kept_lp[j];
    size_t len;
    const char *piece = mn_tok_piece(m->tok, tok, &len);
    bool stopped = false;
    if (mn_tokens_push(&r->toks, tok) != MN_OK || mn_req_append(r, piece, len, &stopped) != MN_OK) {
        mn_req_fail(r, MN_E_INTERNAL, "out of memory for the output");
        return "error";
    }
    if (stopped)
        return "stop";
    if (r->n_gen >= r->p.max_tokens || r->toks.n > m->hp.n_ctx)
        return "length";
    return NULL;
}

/* The kind of r's voted draft: a costly drafter's, or a free one's (also when it had none). */
static mn_tuner_kind draft_kind(const mn_verifier *v, const mn_req *r)
{
    return r->spec.n_draft && (v->cfg.costly >> r->spec.voted & 1) ? MN_TUNER_COSTLY : MN_TUNER_FREE;
}

/* r kept every draft token it was allowed: a longer draft might have kept more (the tuner's
 * censored case), where any other verification says where its draft stopped. */
static bool kept_all(const mn_verifier *v, const mn_req *r)
{
    return r->spec.n_kept - 1 == r->spec.n_draft && r->spec.n_draft == r->spec.len[draft_kind(v, r)];
}

/* A verification's figures. The tuner learns what the target kept of the draft; the counters a
 * client and stats see count the draft tokens the request took: `taken` of the kept tokens, the
 * target's own last, before it finished (a stop string or an end of text may end it inside the
 * draft; a taken end of text counts, as completion_tokens counts it). */
static void count_verification(mn_verifier *v, mn_req *r, uint32_t taken)
{
    uint32_t kept = r->spec.n_kept - 1, acc = taken < kept ? taken : kept;
    mn_tuner_seq_observe(&r->spec.acc[draft_kind(v, r)], kept);
    r->spec.verifications++;
    r->spec.drafted += r->spec.n_draft;
    r->spec.accepted += acc;
    r->spec.voted_n[r->spec.voted]++;
    v->verifications++;
    v->drafted += r->spec.n_draft;
    v->accepted += acc;
    v->accepted_hist[acc]++;
}

/* A step the length shaped: its cost and yield to the tuner (unless the last report is still on its
 * way, which the loop's turn between steps makes all but impossible). */
static void report(mn_verifier *v, double back)
{
    step_job *s = &v->step;
    if (!v->step_measured || s->st != MN_OK || v->measure.queued)
        return;
    mn_measure *m = &v->measure;
    mn_tuner_step *t = &m->step;
    *t = (mn_tuner_step){.batch = s->n, .s = v->step_s, .planned = v->step_size,
                         .costly_drafting = v->step_costly, .costly_positions = v->step_positions};
    for (uint32_t k = 0; k < s->n; k++) {
        const mn_req *r = s->reqs[k];
        uint32_t a = r->spec.n_kept - 1;
        t->tokens += r->spec.n_kept;
        t->drafted += r->spec.n_draft;
        if (a > t->s) /* cannot happen: a draft is at most s long */
            continue;
        bool full = t->s && kept_all(v, r), costly = draft_kind(v, r) == MN_TUNER_COSTLY;
        (full ? t->full : t->ended)[a]++;
        (full ? t->costly_full : t->costly_ended)[a] += costly;
        t->undrafted += !r->spec.n_draft;
    }
    m->queued = true;
    m->draft_seconds = v->step_draft_seconds;
    m->backlog_seconds = v->step_backlog;
    m->verify_seconds = s->seconds;
    m->handoff_seconds = (s->t_start - s->t_submit) + (back - s->t_end);
    mn_mailbox_post(v->cfg.addr->tuner, &m->msg);
}

/* After a pass: take each request's kept tokens, stream, and finish what is done. */
static void step_done(mn_verifier *v)
{
    step_job *s = &v->step;
    double back = mn_now();
    uint32_t drafted = 0, sampled = 0, tokens = 0; /* the trace's, counted before requests leave */
    for (uint32_t k = 0; k < s->n; k++) {
        drafted += s->reqs[k]->spec.n_draft;
        sampled += s->sample[k];
        tokens += s->seqs[k].n_tokens;
    }
    v->stepping = false;
    v->steps++;
    for (uint32_t k = 0; k < s->n; k++)
        s->reqs[k]->phase = MN_PHASE_IDLE;
    v->step_seconds += s->st == MN_OK ? s->seconds : 0;
    report(v, back);
    uint32_t produced = 0;
    for (uint32_t k = 0; k < s->n; k++) {
        mn_req *r = s->reqs[k];
        if (s->st != MN_OK) {
            mn_req_fail(r, MN_E_INTERNAL, "model pass failed: %s", s->err.msg);
            finish(v, r, "error");
            continue;
        }
        if (!s->sample[k])
            continue; /* a prompt chunk; the rest comes next step */
        const char *done = NULL;
        uint32_t taken = 0;
        while (taken < r->spec.n_kept && !done)
            done = take_token(v, r, taken++);
        r->t_last = back; /* the step's tokens came back together */
        produced += taken;
        if (r->spec.n_draft)
            count_verification(v, r, taken);
        if (done)
            finish(v, r, done); /* r is the next actor's from here */
        else if (r->p.stream && r->ready > r->sent && !r->flush_queued) {
            r->flush_queued = true;
            r->flush.type = MN_MSG_FLUSH;
            mn_mailbox_post(r->owner, &r->flush);
        }
    }
    v->tokens += produced;
    *second_bucket(v) += produced;
    if (v->cfg.step_trace && s->st == MN_OK) {
        char round[64] = "null";
        if (s->round_t0 > 0)
            snprintf(round, sizeof round, "[%.6f,%.6f]", s->round_t0, s->round_t1);
        fprintf(v->cfg.step_trace,
                "{\"step\":%" PRIu64 ",\"submit\":%.6f,\"start\":%.6f,\"end\":%.6f,\"back\":%.6f,\"round\":%s,"
                "\"backlog\":%.6f,\"seqs\":%u,\"tokens\":%u,\"prompt\":%u,\"drafted\":%u,\"produced\":%u,\"s\":%u,"
                "\"measured\":%s}\n",
                v->steps, s->t_submit, s->t_start, s->t_end, back, round, v->step_backlog, s->n,
                tokens, tokens - sampled - drafted,
                drafted, produced, v->step_s, v->step_measured ? "true" : "false");
    }
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
    q->stats->verifier.step_seconds = v->step_seconds;
    q->stats->verifier.tok_per_s = (double)sum / MN_STATS_SECONDS;
    q->stats->verifier.spec_enabled = v->cfg.spec_enabled && v->cfg.addr->voter;
    for (uint32_t i = 0; i < MN_TUNER_CLASSES; i++)
        q->stats->verifier.spec_lengths[i] = v->advice[i].s;
    q->stats->verifier.verifications = v->verifications;
    q->stats->verifier.drafted = v->drafted;
    q->stats->verifier.accepted = v->accepted;
    memcpy(q->stats->verifier.accepted_hist, v->accepted_hist, sizeof v->accepted_hist);
    q->stats->verifier.ttft = v->ttft;
    q->stats->verifier.pipeline.enabled = v->cfg.pipeline;
    q->stats->verifier.pipeline.depth = pool_depth(v);
    q->stats->verifier.pipeline.batch = v->pool_batch;
    q->stats->verifier.pipeline.rounds = v->rounds;
    q->stats->verifier.pipeline.overlapped = v->overlapped;
    q->stats->verifier.pipeline.pauses = v->pauses;
    q->stats->verifier.pipeline.resumes = v->resumes;
    mn_stats_reply(q);
}

void mn_verifier_handle(void *verifier, mn_msg *m)
{
    mn_verifier *v = verifier;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_START:
        ((mn_req *)m)->phase = MN_PHASE_IDLE;
        v->running[v->n_running++] = (mn_req *)m; /* kvmem admits at most max_held */
        schedule(v);
        break;
    case MN_MSG_STEP_DONE:
        step_done(v);
        break;
    case MN_MSG_VOTED:
        voted(v);
        break;
    case MN_MSG_KICK:
        mn_kick_taken(v->cfg.addr->verifier_kick);
        schedule(v);
        break;
    case MN_MSG_SET: {
        mn_setting *s = (mn_setting *)m;
        if (s->key == MN_SET_MAX_BATCH && s->value >= 1 && s->value <= v->max_batch_cap)
            v->cfg.max_batch = s->value;
        else if (s->key == MN_SET_SPEC_ENABLED)
            v->cfg.spec_enabled = s->value != 0;
        else if (s->key == MN_SET_DRAFTERS_ON)
            v->cfg.drafters_on = s->value != 0;
        else if (s->key == MN_SET_PIPELINE)
            v->cfg.pipeline = s->value != 0;
        else if (s->key == MN_SET_SPEC_LENGTH && s->advice.s <= MN_SPEC_MAX_LEN && s->advice.other <= MN_SPEC_MAX_LEN)
            for (uint32_t i = 0; i < MN_TUNER_CLASSES; i++) {
                if (s->index != i && s->index < MN_TUNER_CLASSES)
                    continue;
                if (s->advice.other == s->advice.s || v->advice[i].other != s->advice.other)
                    v->paired[i] = 0; /* no probe, or a new one: it starts at home */
                v->advice[i] = s->advice;
            }
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
