/* tuner.c - the tuner actor (see tuner.h).
 *
 * Invariant: the verifier's length of class c equals state.c[c].s in adaptive mode and spec_length
 * in fixed mode, give or take the SET messages on their way. */
#include "actors/tuner.h"

#include <math.h>
#include <stdio.h>

#include "util/alloc.h"
#include "util/log.h"

struct mn_tuner_actor {
    mn_tuner_actor_config cfg;   /* mode, params, spec_length: the live values */
    mn_tuner state;
    uint64_t measured;
    double backlog_seconds; /* the drafters' backlogs left out of the steps' cost */
};

static void restart(mn_tuner_actor *t);

mn_status mn_tuner_actor_new(const mn_tuner_actor_config *cfg, mn_tuner_actor **out, mn_err *err)
{
    mn_status st = mn_tuner_check(&cfg->params, err);
    if (st != MN_OK)
        return st;
    mn_tuner_actor *t = mn_calloc(1, sizeof *t);
    if (!t)
        return mn_fail(err, MN_NOMEM, "tuner: out of memory");
    t->cfg = *cfg;
    mn_tuner_init(&t->state, &cfg->params, cfg->spec_length);
    *out = t;
    return MN_OK;
}

void mn_tuner_actor_start(mn_tuner_actor *t) { restart(t); }

void mn_tuner_actor_free(mn_tuner_actor *t) { mn_free(t); }

/* Whether the tuner chooses the lengths: in adaptive mode, unless spec.length is 0, which turns
 * speculation off in either mode (the tuner would otherwise probe speculating from there). */
static bool adapting(const mn_tuner_actor *t) { return t->cfg.mode == MN_TUNER_ADAPTIVE && t->cfg.spec_length > 0; }

/* Tell the verifier the length of class cls (MN_TUNER_CLASSES: of every class), with the sequence
 * rule's figures while adapting (none otherwise: every sequence drafts the fixed length). */
static void send_length(mn_tuner_actor *t, uint32_t cls, uint32_t s)
{
    mn_setting *m = mn_malloc(sizeof *m);
    if (!m) {
        mn_log(MN_LOG_ERROR, "tuner: out of memory for a setting");
        return;
    }
    mn_tuner_advice a = mn_tuner_fixed_advice(s);
    if (cls < MN_TUNER_CLASSES && adapting(t)) {
        a = mn_tuner_advise(&t->state, cls);
        if (a.s != s) /* a length set from outside: no paired probe */
            a.s = a.other = s;
    }
    *m = (mn_setting){.msg.type = MN_MSG_SET, .key = MN_SET_SPEC_LENGTH, .index = cls, .advice = a};
    mn_mailbox_post(t->cfg.addr->verifier, &m->msg);
}

/* Every class back to spec.length (clamped to the bounds while adapting), curves kept; the
 * verifier follows. */
static void restart(mn_tuner_actor *t)
{
    mn_tuner_restart(&t->state, t->cfg.spec_length, adapting(t));
    if (!adapting(t)) {
        send_length(t, MN_TUNER_CLASSES, t->state.c[0].s);
        return;
    }
    for (uint32_t i = 0; i < MN_TUNER_CLASSES; i++) /* each with the figures it has kept */
        send_length(t, i, t->state.c[i].s);
}

static void publish(mn_tuner_actor *t, const mn_tuner_decision *d)
{
    mn_log(MN_LOG_DEBUG, "tuner: batch %s, s %u -> %u (%s), %.1f us/token, slope %.2f", mn_tuner_class_name(d->cls),
           d->from, d->to, d->why, d->cost * 1e6, d->slope * 1e6);
    if (!t->cfg.on_event)
        return;
    char line[256];
    snprintf(line, sizeof line,
             "{\"event\":\"tuner\",\"batch\":\"%s\",\"from\":%u,\"to\":%u,\"why\":\"%s\",\"us_per_token\":%.3f,"
             "\"slope_us\":%.3f}",
             mn_tuner_class_name(d->cls), d->from, d->to, d->why, d->cost * 1e6, d->slope * 1e6);
    t->cfg.on_event(t->cfg.owner, line);
}

static void measured(mn_tuner_actor *t, mn_measure *m)
{
    mn_tuner_step step = m->step;
    step.seconds = m->verify_seconds;
    if (t->state.p.cost == MN_TUNER_COST_ROUND) {
        /* drafting, and the step's hand-offs (the compute worker's and the loop's wake-ups), which
         * every step pays whatever it carries. Not the loop's own turn after a step (streaming its
         * tokens, scheduling): until 2026-11-29 the whole cycle since the step before came back was
         * counted, which charged that turn to the next step, and in a paired probe a plain step
         * paid for the speculating step before it. Less the drafters' backlog: a round after plain
         * steps catches the model drafters up on their tokens, a cost of having decoded plain (a
         * paired probe's alternation, or a stretch at plain), not of speculating. */
        double backlog = m->backlog_seconds < m->draft_seconds ? m->backlog_seconds : m->draft_seconds;
        step.handoff = m->handoff_seconds > 0 ? m->handoff_seconds : 0;
        step.drafting = m->draft_seconds - backlog;
        step.seconds = m->verify_seconds + step.drafting + step.handoff;
        t->backlog_seconds += backlog;
    }
    m->queued = false;
    t->measured++;
    mn_tuner_decision d;
    if (!mn_tuner_observe(&t->state, &step, adapting(t), &d))
        return;
    publish(t, &d);
    if (d.to != d.from || t->state.p.rule == MN_TUNER_RULE_SEQUENCE) /* its figures move every window */
        send_length(t, d.cls, d.to);
    for (uint32_t i = 0; i < MN_TUNER_CLASSES; i++) /* the classes that follow a leader */
        if (!t->state.c[i].decisions && i != d.cls)
            send_length(t, i, t->state.c[i].s);
}

static void set(mn_tuner_actor *t, mn_setting *s)
{
    if (s->key == MN_SET_SPEC_LENGTH && s->value <= MN_TUNER_MAX_LEN) {
        t->cfg.spec_length = s->value;
        restart(t);
    } else if (s->key == MN_SET_TUNER && mn_tuner_check(&s->tuner, &(mn_err){{0}}) == MN_OK) {
        bool mode_changed = t->cfg.mode != (mn_tuner_mode)s->value;
        t->cfg.mode = (mn_tuner_mode)s->value;
        mn_tuner_reparam(&t->state, &s->tuner);
        if (mode_changed || t->cfg.mode == MN_TUNER_FIXED)
            restart(t);
        else if (adapting(t))
            for (uint32_t i = 0; i < MN_TUNER_CLASSES; i++) /* new bounds may have moved some */
                send_length(t, i, t->state.c[i].s);
    }
    mn_free(s);
}

static void stats(mn_tuner_actor *t, mn_stats_part *q)
{
    q->stats->tuner.mode = t->cfg.mode;
    q->stats->tuner.spec_length = t->cfg.spec_length;
    q->stats->tuner.measured = t->measured;
    q->stats->tuner.backlog_seconds = t->backlog_seconds;
    q->stats->tuner.state = t->state;
    mn_stats_reply(q);
}

void mn_tuner_actor_handle(void *tuner, mn_msg *m)
{
    mn_tuner_actor *t = tuner;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_MEASURED:
        measured(t, (mn_measure *)m);
        break;
    case MN_MSG_SET:
        set(t, (mn_setting *)m);
        break;
    case MN_MSG_STATS:
        stats(t, (mn_stats_part *)m);
        break;
    default:
        mn_log(MN_LOG_ERROR, "tuner: unexpected message %u", m->type);
    }
}
