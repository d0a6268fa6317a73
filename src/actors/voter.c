/* voter.c - the voter actor (see voter.h).
 *
 * Invariants: at most one round is out (the verifier's); pending counts its parts still with
 * drafters; a request's spec.unjudged is true from its vote until the voter judges it. */
#include "actors/voter.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/proto.h"
#include "spec/vote.h"
#include "util/alloc.h"
#include "util/log.h"

struct mn_voter {
    mn_voter_config cfg;
    mn_weights global;
    uint32_t enabled;                     /* bit i: drafter i is enabled (drafter.<name>.enabled) */
    mn_drafter_stats st[MN_MAX_DRAFTERS]; /* counters; weight, acr, enabled filled at stats time */
    mn_vote_node nodes[1 + MN_MAX_DRAFTERS * MN_SPEC_MAX_LEN];
    uint32_t until_explore;               /* rounds until the next exploring round (spec/vote.h), */
    uint32_t explore_gap;                 /* the rounds between the last two, */
    uint32_t explorations;                /* exploring rounds so far (whose turn it is), */
    bool models_drafted;                  /* and whether a request drafted with the models since */
    uint32_t clock;                       /* this round's on the exploration clock (mn_vote_*) */
};

static const char *const mode_names[] = {"sequence", "global", "fixed"};

const char *mn_weights_mode_name(mn_weights_mode m) { return mode_names[m]; }

int mn_weights_mode_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, mode_names[i]))
            return i;
    return -1;
}

mn_status mn_voter_new(const mn_voter_config *cfg, mn_voter **out, mn_err *err)
{
    mn_voter *v = mn_calloc(1, sizeof *v);
    if (!v)
        return mn_fail(err, MN_NOMEM, "voter: out of memory");
    v->cfg = *cfg;
    mn_status st = mn_weights_init(&v->global, cfg->n_drafters, &cfg->params, err);
    if (st != MN_OK) {
        mn_free(v);
        return st;
    }
    v->enabled = (1u << cfg->n_drafters) - 1;
    v->until_explore = v->explore_gap = MN_VOTE_EXPLORE_EVERY;
    *out = v;
    return MN_OK;
}

void mn_voter_free(mn_voter *v) { mn_free(v); }

/* The proposals of r's drafters made at length `at` (others count as empty). */
static void proposals_at(const mn_voter *v, const mn_req *r, uint32_t at, const int32_t **drafts, uint32_t *lens)
{
    for (uint32_t i = 0; i < v->cfg.n_drafters; i++) {
        const mn_req_draft *x = &r->spec.d[i];
        bool fresh = x->prop_at == at && x->prop_len > 0;
        drafts[i] = fresh ? x->prop : NULL;
        lens[i] = fresh ? x->prop_len : 0;
    }
}

static void publish_weight(mn_voter *v, uint32_t i, mn_weights_verdict verdict)
{
    mn_log(MN_LOG_DEBUG, "voter: %s %s, weight %.3f", v->cfg.names[i],
           verdict == MN_WEIGHTS_REWARD ? "rewarded" : "punished", v->global.w[i]);
    if (!v->cfg.on_event)
        return;
    json_t *o = json_pack("{s:s, s:s, s:f, s:f, s:s}", "event", "weight", "drafter", v->cfg.names[i], "weight",
                          (double)v->global.w[i], "acr", (double)mn_weights_acr(&v->global, i), "verdict",
                          verdict == MN_WEIGHTS_REWARD ? "reward" : "punish");
    char *line = o ? json_dumps(o, JSON_COMPACT) : NULL; /* escaped: a drafter is named by its file */
    if (line)
        v->cfg.on_event(v->cfg.owner, line);
    free(line);
    json_decref(o);
}

/* One line per finished request: what speculation did for it. */
static void publish_summary(mn_voter *v, const mn_req *r)
{
    if (!v->cfg.on_event)
        return;
    json_t *voted = json_object();
    for (uint32_t i = 0; voted && i < v->cfg.n_drafters; i++)
        json_object_set_new(voted, v->cfg.names[i], json_integer(r->spec.voted_n[i]));
    size_t n;
    char *id = mn_utf8_sanitize(r->p.id, strlen(r->p.id), &n);
    json_t *o = json_pack("{s:s, s:s%, s:s, s:i, s:i, s:i, s:i, s:o}", "event", "request", "id", id ? id : "", id ? n : 0,
                          "finish", r->finish ? r->finish : (r->failed ? "error" : "stop"), "tokens", (json_int_t)r->n_gen,
                          "drafted", (json_int_t)r->spec.drafted, "accepted", (json_int_t)r->spec.accepted,
                          "verifications", (json_int_t)r->spec.verifications, "voted", voted);
    char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (line)
        v->cfg.on_event(v->cfg.owner, line);
    free(line);
    json_decref(o);
    mn_free(id);
}

/* The target has verified r's last vote: judge every drafter on its own proposal. */
static void judge(mn_voter *v, mn_req *r)
{
    if (!r->spec.unjudged)
        return;
    r->spec.unjudged = false;
    /* counted here, not at the vote, and only if the verifier counted its verification: a vote is
     * dropped with a cancelled or preempted request, or with a draft a prompt chunk took the pass's
     * budget from, and voted sums to verifications */
    if (r->spec.verifications > r->spec.voted_verifications && r->spec.voted != MN_VOTE_NONE)
        v->st[r->spec.voted].voted++;
    uint32_t at = r->spec.voted_at;
    if (r->toks.n <= at)
        return; /* never verified, or it ended at the first token it kept: nothing to learn */
    const int32_t *drafts[MN_MAX_DRAFTERS];
    uint32_t lens[MN_MAX_DRAFTERS];
    proposals_at(v, r, at, drafts, lens);
    const int32_t *kept = r->toks.ids + at;
    uint32_t n_kept = (uint32_t)r->toks.n - at;
    for (uint32_t i = 0; i < v->cfg.n_drafters; i++) {
        if (!lens[i])
            continue;
        uint32_t agree = 0;
        while (agree < lens[i] && agree < n_kept && drafts[i][agree] == kept[agree])
            agree++;
        v->st[i].proposed += lens[i];
        v->st[i].agreed += agree;
    }
    mn_weights_verdict verdicts[MN_MAX_DRAFTERS];
    mn_weights_learn(&r->spec.w, drafts, lens, kept, n_kept, NULL);
    mn_weights_learn(&v->global, drafts, lens, kept, n_kept, verdicts);
    for (uint32_t i = 0; i < v->cfg.n_drafters; i++)
        if (verdicts[i] == MN_WEIGHTS_REWARD || verdicts[i] == MN_WEIGHTS_PUNISH)
            publish_weight(v, i, verdicts[i]);
}

/* The weights r's vote reads. */
static const float *vote_weights(const mn_voter *v, const mn_req *r)
{
    static const float ones[MN_MAX_DRAFTERS] = {1, 1, 1, 1, 1, 1, 1, 1};
    return v->cfg.mode == MN_WEIGHTS_FIXED ? ones : v->cfg.mode == MN_WEIGHTS_GLOBAL ? v->global.w : r->spec.w.w;
}

static void vote(mn_voter *v, mn_req *r)
{
    uint32_t at = (uint32_t)r->toks.n;
    const int32_t *drafts[MN_MAX_DRAFTERS];
    uint32_t lens[MN_MAX_DRAFTERS];
    proposals_at(v, r, at, drafts, lens);
    const float *w = vote_weights(v, r);
    mn_vote_result res;
    mn_err err;
    if (mn_vote(drafts, lens, w, v->cfg.n_drafters, v->nodes, sizeof v->nodes / sizeof *v->nodes, &res, &err) != MN_OK) {
        mn_log(MN_LOG_ERROR, "voter: %s", err.msg); /* the scratch is sized for the worst case: a bug */
        res.len = 0;
    }
    uint32_t n = res.len < r->spec.cap ? res.len : r->spec.cap;
    if (n)
        memcpy(r->spec.vtoks + 1, res.tokens, n * sizeof *res.tokens);
    r->spec.n_draft = n;
    r->spec.voted = n ? res.drafter : MN_VOTE_NONE;
    r->spec.unjudged = true;
    r->spec.voted_at = at;
    r->spec.voted_verifications = r->spec.verifications;
}

/* Every part is back: vote for each request and return the round. */
static void voted(mn_voter *v, mn_round *round)
{
    for (uint32_t k = 0; k < round->n; k++)
        vote(v, round->reqs[k]);
    round->msg.type = MN_MSG_VOTED;
    mn_mailbox_post(v->cfg.addr->verifier, &round->msg);
}

/* Which enabled drafters draft for r this round: spec/vote.h's rule over the weights r votes with, on
 * the voter's clock, so that a drafter explored in a round drafts for every request in it: its
 * pass is shared, where one request's turn at a time kept the model drafts running in most rounds
 * with 16 clients. The costly drafters sit out where the tuner found that not even their first
 * token pays for r (spec.len[MN_TUNER_COSTLY] 0), except when r is `explored`: then one of them, in
 * turn, drafts one token for it (r's len raised to 1), so that r's acceptance of them stays
 * measured. */
static uint32_t ask_mask(const mn_voter *v, mn_req *r, bool explored)
{
    uint32_t ask = mn_vote_ask(vote_weights(v, r), v->enabled, v->cfg.costly, v->cfg.skip_below, v->clock,
                               v->cfg.n_drafters);
    if (r->spec.len[MN_TUNER_COSTLY])
        return ask;
    ask &= ~v->cfg.costly;
    if (!explored)
        return ask;
    r->spec.len[MN_TUNER_COSTLY] = 1; /* within its cap: a request in a round has one of at least 1 */
    return ask | mn_vote_turn(v->enabled & v->cfg.costly, v->clock);
}

/* Which of the round's requests whose model drafts do not pay (spec.len[MN_TUNER_COSTLY] 0) an
 * exploring round explores: one, in turn (its index among them), or none (UINT32_MAX). One model
 * drafter for every such request made each catch up on every token since its last turn: at 16
 * sequences those rounds took a tenth of the class's time (docs/speculation.md, "Two kinds of
 * draft"). */
static uint32_t explored_one(const mn_voter *v, const mn_round *round)
{
    if (!mn_vote_exploring(v->clock))
        return UINT32_MAX;
    uint32_t idle = 0;
    for (uint32_t k = 0; k < round->n; k++)
        idle += !round->reqs[k]->spec.len[MN_TUNER_COSTLY];
    return idle ? v->clock / MN_VOTE_EXPLORE_EVERY % idle : UINT32_MAX;
}

/* Post the round's parts to the drafters in `asked`; vote at once when none is. */
static void fan_out(mn_voter *v, mn_round *round, uint32_t asked)
{
    round->pending = 1; /* held until every part is out, so an answer cannot finish the round early */
    for (uint32_t i = 0; i < v->cfg.n_drafters; i++) {
        if (!(asked >> i & 1))
            continue;
        round->pending++;
        v->st[i].rounds++;
        round->part[i] = (mn_round_part){.msg.type = MN_MSG_DRAFT, .round = round, .drafter = i};
        mn_mailbox_post(v->cfg.addr->drafters[i], &round->part[i].msg);
    }
    if (!--round->pending) /* a disabled drafter's old proposals are stale (prop_at): no vote */
        voted(v, round);
}

/* Set this round's place on the exploration clock: an exploring round is every explore_gap-th,
 * and shows to spec/vote.h as the MN_VOTE_EXPLORE_EVERY-th of a count of explorations. */
static void tick(mn_voter *v)
{
    bool exploring = !--v->until_explore;
    v->clock = v->explorations * MN_VOTE_EXPLORE_EVERY + (exploring ? MN_VOTE_EXPLORE_EVERY - 1 : 0);
    if (!exploring)
        return;
    v->explorations++;
    v->until_explore = v->explore_gap = mn_vote_explore_gap(v->explore_gap, v->models_drafted);
    v->models_drafted = false;
}

static void round_in(mn_voter *v, mn_round *round)
{
    tick(v);
    uint32_t asked = 0, explored = explored_one(v, round), idle = 0;
    for (uint32_t k = 0; k < round->n; k++) {
        mn_req *r = round->reqs[k];
        judge(v, r);
        if (!r->spec.w.n_drafters) /* its first round: start from what the pool has learned */
            mn_weights_init_from(&r->spec.w, &v->global);
        else
            mn_weights_follow(&r->spec.w, &v->global);
        v->models_drafted |= r->spec.len[MN_TUNER_COSTLY] > 0;
        bool this_one = !r->spec.len[MN_TUNER_COSTLY] && idle++ == explored;
        asked |= r->spec.ask = ask_mask(v, r, this_one);
    }
    round->backlog_seconds = round->costly_seconds = 0;
    round->costly_positions = 0;
    round->idle = !v->enabled;
    uint32_t cheap = asked & ~v->cfg.costly;
    round->cascade = v->cfg.cascade && cheap && (asked & v->cfg.costly);
    fan_out(v, round, round->cascade ? cheap : asked);
}

/* The free drafters have answered (spec.cascade): the costly ones draft for the requests they
 * proposed nothing for. */
static void cascade(mn_voter *v, mn_round *round)
{
    round->cascade = false;
    uint32_t asked = 0;
    for (uint32_t k = 0; k < round->n; k++) {
        mn_req *r = round->reqs[k];
        const int32_t *drafts[MN_MAX_DRAFTERS];
        uint32_t lens[MN_MAX_DRAFTERS];
        proposals_at(v, r, (uint32_t)r->toks.n, drafts, lens);
        uint32_t cheap = r->spec.ask & ~v->cfg.costly;
        bool proposed = false;
        for (uint32_t i = 0; i < v->cfg.n_drafters; i++)
            proposed |= lens[i] && (cheap >> i & 1);
        if (proposed)
            r->spec.ask = cheap;
        asked |= r->spec.ask;
    }
    fan_out(v, round, asked & v->enabled & v->cfg.costly); /* not one disabled since the round began */
}

static void part_in(mn_voter *v, mn_round_part *part)
{
    mn_round *round = part->round;
    mn_drafter_stats *st = &v->st[part->drafter];
    st->seconds += part->seconds;
    round->backlog_seconds += part->backlog_seconds; /* the drafters' jobs run one after another */
    if (v->cfg.costly >> part->drafter & 1) {
        round->costly_seconds += part->position_seconds;
        if (part->positions > round->costly_positions)
            round->costly_positions = part->positions;
    }
    st->cache_proposals += part->from_cache;
    if (!--round->pending)
        (round->cascade ? cascade : voted)(v, round);
}

static void set(mn_voter *v, mn_setting *s)
{
    mn_err err;
    if (s->key == MN_SET_VOTER) {
        if (mn_weights_set_params(&v->global, &s->params, &err) == MN_OK) {
            v->cfg.params = s->params;
            v->cfg.mode = (mn_weights_mode)s->value;
            v->cfg.skip_below = s->fvalue;
            v->cfg.cascade = s->flag;
        } else {
            mn_log(MN_LOG_ERROR, "voter: %s", err.msg); /* the admin checked: a bug */
        }
    } else if (s->key == MN_SET_DRAFTER && s->index < v->cfg.n_drafters) {
        v->enabled = s->value ? v->enabled | 1u << s->index : v->enabled & ~(1u << s->index);
    }
    mn_free(s);
}

static void stats(mn_voter *v, mn_stats_part *q)
{
    q->stats->voter.weights_mode = mn_weights_mode_name(v->cfg.mode);
    for (uint32_t i = 0; i < v->cfg.n_drafters; i++) {
        mn_drafter_stats *d = &q->stats->voter.drafter[i];
        *d = v->st[i];
        d->enabled = v->enabled >> i & 1;
        d->weight = v->global.w[i];
        d->acr = mn_weights_acr(&v->global, i);
    }
    mn_stats_reply(q);
}

void mn_voter_handle(void *voter, mn_msg *m)
{
    mn_voter *v = voter;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_DRAFT:
        round_in(v, (mn_round *)m);
        break;
    case MN_MSG_PROPOSED:
        part_in(v, (mn_round_part *)m);
        break;
    case MN_MSG_RELEASE: /* on its way from the verifier to kvmem: judge its last vote first */
        judge(v, (mn_req *)m);
        if (((mn_req *)m)->state == MN_REQ_FINISHED)
            publish_summary(v, (mn_req *)m);
        mn_mailbox_post(v->cfg.release_to, m);
        break;
    case MN_MSG_SET:
        set(v, (mn_setting *)m);
        break;
    case MN_MSG_STATS:
        stats(v, (mn_stats_part *)m);
        break;
    default:
        mn_log(MN_LOG_ERROR, "voter: unexpected message %u", m->type);
    }
}
