/* admin.c - the admin actor (see admin.h).
 *
 * Invariant: at most one command is being answered (the socket is REP); a stats command is answered
 * when its last part is back. */
#include "actors/admin.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "actors/stats.h"
#include "actors/voter.h"
#include "net/adminsock.h"
#include "net/proto.h"
#include "spec/ngram.h"
#include "util/alloc.h"
#include "util/log.h"

/* "drafter.<name>.enabled": a name is a file's, at most NAME_MAX bytes */
#define DRAFTER_KEY_MAX (sizeof "drafter." + NAME_MAX + sizeof ".enabled")

struct mn_admin {
    mn_admin_config cfg;
    mn_adminsock *sock;
    uint32_t max_batch, max_queue;       /* the live values, as last set */
    bool spec_enabled, pipeline;
    uint32_t spec_length;
    mn_weights_mode weights_mode;
    mn_weights_params weights;
    float skip_below;
    bool cascade;
    mn_tuner_mode tuner_mode;
    mn_tuner_params tuner;
    bool drafter_enabled[MN_ADDR_MAX_DRAFTERS];
    int ngram;                           /* the n-gram drafter's index; -1: none */
    uint32_t ngram_short, ngram_min_n;   /* drafter.ngram.short_len, min_n */
    bool ngram_shared, ngram_learn;      /* drafter.ngram.shared, learn */
    mn_stats_query query;                /* the stats being gathered */
};

static void reply_json(mn_admin *a, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    static const char oom[] = "{\"ok\":false,\"error\":\"out of memory\"}";
    mn_adminsock_reply(a->sock, s ? s : oom, s ? strlen(s) : strlen(oom));
    free(s);
    json_decref(o);
}

/* {"ok":false,"error":...}; what it quotes of the command may be any bytes: sanitized. */
__attribute__((format(printf, 1, 2))) static json_t *fail(const char *fmt, ...)
{
    char buf[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n;
    char *clean = mn_utf8_sanitize(buf, strlen(buf), &n);
    json_t *o = clean ? json_pack("{s:b, s:s%}", "ok", 0, "error", clean, n) : NULL;
    mn_free(clean);
    return o;
}

static json_t *config_json(mn_admin *a)
{
    json_t *o = json_pack("{s:I, s:I, s:s, s:I, s:I, s:s}", "batch.max_sequences", (json_int_t)a->max_batch,
                          "queue.max", (json_int_t)a->max_queue, "log.level", mn_log_level_name(mn_log_get_level()),
                          "batch.max_sequences.limit", (json_int_t)a->cfg.max_batch, "kv.block_size",
                          (json_int_t)a->cfg.kv_block_size, "kv.type", a->cfg.kv_type);
    if (!o || !a->cfg.n_drafters)
        return o;
    const mn_weights_params *w = &a->weights;
    json_object_set_new(o, "spec.enabled", json_boolean(a->spec_enabled));
    json_object_set_new(o, "pipeline.enabled", json_boolean(a->pipeline));
    json_object_set_new(o, "spec.length", json_integer(a->spec_length));
    json_object_set_new(o, "spec.weights", json_string(mn_weights_mode_name(a->weights_mode)));
    json_object_set_new(o, "spec.reward_threshold", json_real(w->reward_threshold));
    json_object_set_new(o, "spec.punish_threshold", json_real(w->punish_threshold));
    json_object_set_new(o, "spec.reward_factor", json_real(w->reward_factor));
    json_object_set_new(o, "spec.punish_factor", json_real(w->punish_factor));
    json_object_set_new(o, "spec.skip_below", json_real(a->skip_below));
    json_object_set_new(o, "spec.cascade", json_boolean(a->cascade));
    const mn_tuner_params *t = &a->tuner;
    json_object_set_new(o, "tuner.mode", json_string(mn_tuner_mode_name(a->tuner_mode)));
    json_object_set_new(o, "tuner.s_min", json_integer(t->s_min));
    json_object_set_new(o, "tuner.s_max", json_integer(t->s_max));
    json_object_set_new(o, "tuner.decision_threshold", json_integer(t->decision_threshold));
    json_object_set_new(o, "tuner.s_reward", json_integer(t->s_reward));
    json_object_set_new(o, "tuner.s_punish", json_integer(t->s_punish));
    json_object_set_new(o, "tuner.probe_every", json_integer(t->probe_every));
    json_object_set_new(o, "tuner.margin", json_real(t->margin));
    json_object_set_new(o, "tuner.warm_up", json_integer(t->warm_up));
    json_object_set_new(o, "tuner.cost", json_string(mn_tuner_cost_name(t->cost)));
    json_object_set_new(o, "tuner.rule", json_string(mn_tuner_rule_name(t->rule)));
    for (uint32_t i = 0; i < a->cfg.n_drafters; i++) {
        char key[DRAFTER_KEY_MAX];
        snprintf(key, sizeof key, "drafter.%s.enabled", a->cfg.drafter_names[i]);
        json_object_set_new(o, key, json_boolean(a->drafter_enabled[i]));
    }
    if (a->ngram >= 0) {
        json_object_set_new(o, "drafter.ngram.short_len", json_integer(a->ngram_short));
        json_object_set_new(o, "drafter.ngram.min_n", json_integer(a->ngram_min_n));
        json_object_set_new(o, "drafter.ngram.shared", json_boolean(a->ngram_shared));
        json_object_set_new(o, "drafter.ngram.learn", json_boolean(a->ngram_learn));
    }
    return o;
}

/* The tuner's figures: the drafters' backlogs it left out of the steps' cost (seconds); per batch
 * class that has run, the length in effect and the measured curve (microseconds per produced
 * token by length, with its age in decisions), the model rule's estimate by length up to s_max
 * (kept in every mode and rule: `model`, where it has one), and under the sequence rule its
 * threshold theta and the class's acceptance along a draft (`sequence`: first, carry). */
static json_t *tuner_stats_json(const mn_admin *a)
{
    const mn_stats *s = &a->query.stats;
    const mn_tuner *t = &s->tuner.state;
    json_t *classes = json_object();
    for (uint32_t c = 0; c < MN_TUNER_CLASSES; c++) {
        const mn_tuner_class *k = &t->c[c];
        json_t *curve = json_object();
        uint64_t steps = 0;
        for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN; x++) {
            steps += k->at[x].steps;
            if (!k->at[x].known)
                continue;
            char key[8];
            snprintf(key, sizeof key, "%u", x);
            json_object_set_new(curve, key, json_pack("{s:f, s:i, s:I}", "us_per_token", k->at[x].cost * 1e6, "age",
                                                      (int)k->at[x].age, "steps", (json_int_t)k->at[x].steps));
        }
        if (!steps) {
            json_decref(curve);
            continue;
        }
        json_t *model = json_object();
        for (uint32_t x = 0; x <= t->p.s_max; x++) {
            double cost = mn_tuner_model_cost(t, c, x);
            char key[8];
            snprintf(key, sizeof key, "%u", x);
            if (!isnan(cost))
                json_object_set_new(model, key, json_real(cost * 1e6));
        }
        json_t *cls = json_pack("{s:i, s:I, s:I, s:I, s:o, s:o}", "s", (int)s->verifier.spec_lengths[c], "decisions",
                                (json_int_t)k->decisions, "moves", (json_int_t)k->moves, "probes",
                                (json_int_t)k->probes, "curve", curve, "model", model);
        mn_tuner_advice adv = mn_tuner_advise(t, c); /* the sequence rule's figures, once measured */
        static const char *const kinds[MN_TUNER_KINDS] = {"free", "costly"};
        json_t *seq = json_object();
        for (uint32_t kind = 0; kind < MN_TUNER_KINDS; kind++) {
            const mn_tuner_rate *r = &adv.kind[kind];
            if (isnan(r->theta) || isnan(r->first))
                continue;
            json_t *carry = json_array();
            for (uint32_t j = 2; j <= t->p.s_max; j++)
                json_array_append_new(carry, json_real(r->carry[j]));
            json_object_set_new(seq, kinds[kind], json_pack("{s:f, s:f, s:o}", "theta", (double)r->theta, "first",
                                                         (double)r->first, "carry", carry));
        }
        if (json_object_size(seq))
            json_object_set_new(cls, "sequence", seq);
        else
            json_decref(seq);
        json_object_set_new(classes, mn_tuner_class_name(c), cls);
    }
    return json_pack("{s:s, s:I, s:f, s:o}", "mode", mn_tuner_mode_name(s->tuner.mode), "measured",
                     (json_int_t)s->tuner.measured, "backlog_seconds", s->tuner.backlog_seconds, "batch", classes);
}

/* The speculation figures: the verifier's and, per drafter, the voter's. */
static json_t *spec_stats_json(const mn_admin *a)
{
    const mn_stats *s = &a->query.stats;
    json_t *hist = json_array(), *drafters = json_object();
    for (int i = 0; i < MN_SPEC_HIST; i++)
        json_array_append_new(hist, json_integer((json_int_t)s->verifier.accepted_hist[i]));
    for (uint32_t i = 0; i < a->cfg.n_drafters; i++) {
        const mn_drafter_stats *d = &s->voter.drafter[i];
        json_t *o = json_pack("{s:b, s:f, s:f, s:I, s:I, s:I, s:f, s:I, s:f}", "enabled", d->enabled, "weight",
                              (double)d->weight, "acr", (double)d->acr, "rounds", (json_int_t)d->rounds, "proposed",
                              (json_int_t)d->proposed, "agreed", (json_int_t)d->agreed, "acceptance_rate",
                              d->proposed ? (double)d->agreed / d->proposed : 0.0, "voted", (json_int_t)d->voted,
                              "seconds", d->seconds);
        if ((int)i == a->ngram && s->ngram.cache_cap) /* the n-gram drafter's shared cache */
            json_object_set_new(o, "cache", json_pack("{s:I, s:I, s:I}", "capacity", (json_int_t)s->ngram.cache_cap,
                                                      "tokens_added", (json_int_t)s->ngram.cache_added, "proposals",
                                                      (json_int_t)d->cache_proposals));
        json_object_set_new(drafters, a->cfg.drafter_names[i], o);
    }
    const uint64_t ver = s->verifier.verifications;
    const mn_pipeline_stats *p = &s->verifier.pipeline;
    json_t *pipeline = json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:I}", "enabled", p->enabled, "depth",
                                 (json_int_t)p->depth, "batch", (json_int_t)p->batch, "rounds", (json_int_t)p->rounds,
                                 "overlapped", (json_int_t)p->overlapped, "pauses", (json_int_t)p->pauses, "resumes",
                                 (json_int_t)p->resumes);
    return json_pack("{s:b, s:I, s:s, s:I, s:I, s:I, s:f, s:o, s:o, s:o, s:o}", "enabled", s->verifier.spec_enabled,
                     "length", (json_int_t)s->tuner.spec_length, "weights", s->voter.weights_mode, "verifications",
                     (json_int_t)ver, "drafted", (json_int_t)s->verifier.drafted, "accepted",
                     (json_int_t)s->verifier.accepted, "mean_accepted_len",
                     ver ? (double)s->verifier.accepted / ver : 0.0, "accepted_hist", hist, "drafters", drafters,
                     "tuner", tuner_stats_json(a), "pipeline", pipeline);
}

static json_t *stats_json(mn_admin *a)
{
    const mn_stats *s = &a->query.stats;
    const mn_frontend_stats *c = &s->client, *h = &s->http;
    json_t *o = json_pack("{s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}, s:{s:I, s:I}, s:f, s:I, s:f, s:I,"
                          " s:{s:{s:I, s:I, s:I, s:I, s:I}},"
                          " s:{s:I, s:I, s:I, s:I}, s:I, s:I, s:I, s:I, s:I, s:b}",
                          "requests", "running", (json_int_t)s->kvmem.running, "queued", (json_int_t)s->kvmem.queued,
                          "paused", (json_int_t)s->kvmem.paused, "in_flight", (json_int_t)(c->in_flight + h->in_flight),
                          "done", (json_int_t)(c->done + h->done), "failed", (json_int_t)(c->failed + h->failed),
                          "rejected", (json_int_t)(c->rejected + h->rejected), "tokens", "generated",
                          (json_int_t)s->verifier.tokens_generated, "prompt", (json_int_t)s->intake.prompt_tokens,
                          "tok_per_s", s->verifier.tok_per_s, "steps",
                          (json_int_t)s->verifier.steps, "step_seconds", s->verifier.step_seconds, "preemptions",
                          (json_int_t)s->kvmem.preemptions, "kv", "target", "used", (json_int_t)s->kvmem.kv_used,
                          "free", (json_int_t)s->kvmem.kv_free, "total", (json_int_t)s->kvmem.kv_total, "cached",
                          (json_int_t)s->kvmem.kv_cached, "adopted", (json_int_t)s->kvmem.kv_adopted, "mailboxes",
                          "client", (json_int_t)s->depth[0], "intake", (json_int_t)s->depth[1], "kvmem",
                          (json_int_t)s->depth[2], "verifier", (json_int_t)s->depth[3], "connections",
                          (json_int_t)c->connections, "throttled", (json_int_t)c->throttled, "accept_pauses",
                          (json_int_t)c->accept_pauses, "idle_closed", (json_int_t)c->idle_closed, "stalled_closed",
                          (json_int_t)c->stalled_closed, "draining", c->draining);
    if (o && a->cfg.addr_book->http) /* requests.* count both front ends; this, HTTP's alone */
        json_object_set_new(o, "http", json_pack("{s:I, s:I, s:I, s:I, s:I}", "in_flight", (json_int_t)h->in_flight,
                                                 "done", (json_int_t)h->done, "failed", (json_int_t)h->failed,
                                                 "rejected", (json_int_t)h->rejected, "accept_pauses",
                                                 (json_int_t)h->accept_pauses));
    return o;
}

/* The messages of one setting, allocated before any is posted: a setting reaches every actor that
 * owns it or none, and the admin's view (what `get` says) changes only when it is sent. */
typedef struct outbox {
    mn_setting *s[2];
    mn_mailbox *to[2];
    int n;
} outbox;

/* Add `set` for `to`; false when out of memory, with the outbox emptied (nothing will be sent). */
static bool outbox_add(outbox *o, mn_mailbox *to, mn_setting set)
{
    mn_setting *s = o->n < 2 ? mn_malloc(sizeof *s) : NULL;
    if (!s) {
        while (o->n > 0)
            mn_free(o->s[--o->n]);
        return false;
    }
    set.msg.type = MN_MSG_SET;
    *s = set;
    o->s[o->n] = s;
    o->to[o->n++] = to;
    return true;
}

static void outbox_post(outbox *o)
{
    for (int i = 0; i < o->n; i++)
        mn_mailbox_post(o->to[i], &o->s[i]->msg);
    o->n = 0;
}

/* Post one setting's message; false (nothing sent) when out of memory. */
static bool send_one(mn_mailbox *to, mn_setting set)
{
    outbox o = {0};
    if (!outbox_add(&o, to, set))
        return false;
    outbox_post(&o);
    return true;
}

static bool send_setting(mn_mailbox *to, mn_setting_key key, uint32_t value)
{
    return send_one(to, (mn_setting){.key = key, .value = value});
}

static json_t *no_memory(void) { return fail("%s", "out of memory: nothing was changed"); }

/* The voter's settings, all of them in one message: sent, then the view's; or the error reply. */
static json_t *set_voter(mn_admin *a, mn_weights_mode mode, mn_weights_params params, float skip_below, bool cascade)
{
    if (!send_one(a->cfg.addr_book->voter, (mn_setting){.key = MN_SET_VOTER, .value = mode, .params = params,
                                                        .fvalue = skip_below, .flag = cascade}))
        return no_memory();
    a->weights_mode = mode;
    a->weights = params;
    a->skip_below = skip_below;
    a->cascade = cascade;
    return NULL;
}

/* tuner.*: NULL when set, else the error reply. */
static json_t *set_tuner_key(mn_admin *a, const char *key, json_t *value)
{
    mn_tuner_mode mode = a->tuner_mode;
    mn_tuner_params p = a->tuner;
    if (!strcmp(key, "tuner.mode")) {
        int m = json_is_string(value) ? mn_tuner_mode_parse(json_string_value(value)) : -1;
        if (m < 0)
            return fail("%s must be fixed or adaptive", key);
        mode = (mn_tuner_mode)m;
    } else {
        mn_err err;
        if (mn_tuner_set_param(&p, key + strlen("tuner."), json_is_number(value) ? json_number_value(value) : NAN,
                               json_string_value(value), &err) != MN_OK)
            return fail("%s", err.msg);
    }
    if (!send_one(a->cfg.addr_book->tuner, (mn_setting){.key = MN_SET_TUNER, .value = mode, .tuner = p}))
        return no_memory();
    a->tuner_mode = mode;
    a->tuner = p;
    return NULL;
}

/* Whether a drafter other than drafter i is enabled. */
static bool others_enabled(const mn_admin *a, uint32_t i)
{
    for (uint32_t j = 0; j < a->cfg.n_drafters; j++)
        if (j != i && a->drafter_enabled[j])
            return true;
    return false;
}

/* spec.*, pipeline.enabled and drafter.<name>.enabled: NULL when set, else the error reply. */
static json_t *set_spec_key(mn_admin *a, const char *key, json_t *value)
{
    const mn_addr *ab = a->cfg.addr_book;
    if (!strcmp(key, "spec.enabled") || !strcmp(key, "pipeline.enabled")) {
        if (!json_is_boolean(value))
            return fail("%s must be true or false", key);
        bool pipeline = key[0] == 'p';
        if (!send_setting(ab->verifier, pipeline ? MN_SET_PIPELINE : MN_SET_SPEC_ENABLED, json_is_true(value)))
            return no_memory();
        *(pipeline ? &a->pipeline : &a->spec_enabled) = json_is_true(value);
        return NULL;
    }
    if (!strcmp(key, "spec.length")) {
        json_int_t n = json_integer_value(value);
        if (!json_is_integer(value) || n < 0 || n > MN_SPEC_MAX_LEN)
            return fail("%s must be an integer in [0, 16]", key);
        if (!send_setting(ab->tuner, MN_SET_SPEC_LENGTH, (uint32_t)n))
            return no_memory();
        a->spec_length = (uint32_t)n;
        return NULL;
    }
    if (!strcmp(key, "spec.weights")) {
        int mode = json_is_string(value) ? mn_weights_mode_parse(json_string_value(value)) : -1;
        if (mode < 0)
            return fail("%s must be one of sequence, global, fixed", key);
        return set_voter(a, (mn_weights_mode)mode, a->weights, a->skip_below, a->cascade);
    }
    if (!strcmp(key, "spec.cascade")) {
        if (!json_is_boolean(value))
            return fail("%s must be true or false", key);
        return set_voter(a, a->weights_mode, a->weights, a->skip_below, json_is_true(value));
    }
    if (!strcmp(key, "spec.skip_below")) {
        double x = json_number_value(value);
        if (!json_is_number(value) || !(x >= 0 && x <= 1))
            return fail("%s must be a number in [0, 1]", key);
        return set_voter(a, a->weights_mode, a->weights, (float)x, a->cascade);
    }
    static const char *const rule[] = {"spec.reward_threshold", "spec.punish_threshold", "spec.reward_factor",
                                       "spec.punish_factor"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(key, rule[i]))
            continue;
        if (!json_is_number(value))
            return fail("%s must be a number", key);
        mn_weights_params p = a->weights;
        float *field[] = {&p.reward_threshold, &p.punish_threshold, &p.reward_factor, &p.punish_factor};
        *field[i] = (float)json_number_value(value);
        mn_err err;
        if (mn_weights_check(&p, &err) != MN_OK)
            return fail("%s", err.msg);
        return set_voter(a, a->weights_mode, p, a->skip_below, a->cascade);
    }
    if (a->ngram >= 0 && !strcmp(key, "drafter.ngram.short_len")) {
        json_int_t n = json_integer_value(value);
        if (!json_is_integer(value) || n < 0 || n > MN_SPEC_MAX_LEN)
            return fail("%s must be an integer in [0, 16]", key);
        if (!send_setting(ab->drafters[a->ngram], MN_SET_NGRAM_SHORT, (uint32_t)n))
            return no_memory();
        a->ngram_short = (uint32_t)n;
        return NULL;
    }
    if (a->ngram >= 0 && (!strcmp(key, "drafter.ngram.shared") || !strcmp(key, "drafter.ngram.learn"))) {
        bool learn = !strcmp(key, "drafter.ngram.learn");
        if (!json_is_boolean(value))
            return fail("%s must be true or false", key);
        if (json_is_true(value) && !a->cfg.ngram_cache)
            return fail("%s: minionsd runs with --ngram-cache 0 (no cache)", key);
        if (!send_setting(ab->drafters[a->ngram], learn ? MN_SET_NGRAM_LEARN : MN_SET_NGRAM_SHARED,
                          json_is_true(value)))
            return no_memory();
        *(learn ? &a->ngram_learn : &a->ngram_shared) = json_is_true(value);
        return NULL;
    }
    if (a->ngram >= 0 && !strcmp(key, "drafter.ngram.min_n")) {
        json_int_t n = json_integer_value(value);
        if (!json_is_integer(value) || n < 1 || n > MN_NGRAM_MAX_N_DEFAULT) {
            char msg[120];
            snprintf(msg, sizeof msg, "%s must be an integer in [1, %d]", key, MN_NGRAM_MAX_N_DEFAULT);
            return fail("%s", msg);
        }
        if (!send_setting(ab->drafters[a->ngram], MN_SET_NGRAM_MIN_N, (uint32_t)n))
            return no_memory();
        a->ngram_min_n = (uint32_t)n;
        return NULL;
    }
    for (uint32_t i = 0; i < a->cfg.n_drafters; i++) {
        char name[DRAFTER_KEY_MAX];
        snprintf(name, sizeof name, "drafter.%s.enabled", a->cfg.drafter_names[i]);
        if (strcmp(key, name))
            continue;
        if (!json_is_boolean(value))
            return fail("%s must be true or false", key);
        bool on = json_is_true(value), others = others_enabled(a, i);
        bool turns = !others && on != a->drafter_enabled[i]; /* the first one on or the last one off */
        outbox o = {0};
        if (!outbox_add(&o, ab->voter, (mn_setting){.key = MN_SET_DRAFTER, .index = i, .value = on}) ||
            (turns && !outbox_add(&o, ab->verifier, (mn_setting){.key = MN_SET_DRAFTERS_ON, .value = on})))
            return no_memory();
        a->drafter_enabled[i] = on;
        outbox_post(&o);
        return NULL;
    }
    return fail("unknown key '%s'", key);
}

static json_t *set_key(mn_admin *a, const char *key, json_t *value)
{
    if (!strcmp(key, "batch.max_sequences") || !strcmp(key, "queue.max")) {
        bool batch = key[0] == 'b';
        json_int_t hi = batch ? a->cfg.max_batch : a->cfg.max_queue;
        if (!json_is_integer(value) || json_integer_value(value) < 1 || json_integer_value(value) > hi) {
            char msg[120];
            snprintf(msg, sizeof msg, "%s must be an integer in [1, %lld]", key, (long long)hi);
            return fail("%s", msg);
        }
        uint32_t v = (uint32_t)json_integer_value(value);
        outbox o = {0};
        if (!outbox_add(&o, a->cfg.addr_book->kvmem, (mn_setting){.key = batch ? MN_SET_MAX_BATCH : MN_SET_MAX_QUEUE,
                                                                  .value = v}) ||
            (batch && !outbox_add(&o, a->cfg.addr_book->verifier, (mn_setting){.key = MN_SET_MAX_BATCH, .value = v})))
            return no_memory();
        *(batch ? &a->max_batch : &a->max_queue) = v;
        outbox_post(&o);
    } else if (a->cfg.n_drafters &&
               (!strncmp(key, "spec.", 5) || !strncmp(key, "drafter.", 8) || !strcmp(key, "pipeline.enabled"))) {
        json_t *err = set_spec_key(a, key, value);
        if (err)
            return err;
    } else if (a->cfg.n_drafters && !strncmp(key, "tuner.", 6)) {
        json_t *err = set_tuner_key(a, key, value);
        if (err)
            return err;
    } else if (!strcmp(key, "log.level")) {
        int lvl = json_is_string(value) ? mn_log_parse_level(json_string_value(value)) : -1;
        if (lvl < 0)
            return fail("%s must be one of error, warn, info, debug", key);
        mn_log_set_level((mn_log_level)lvl);
    } else {
        return fail("unknown key '%s'", key);
    }
    return json_pack("{s:b, s:o}", "ok", 1, "config", config_json(a));
}

static json_t *get_key(mn_admin *a, json_t *in)
{
    json_t *cfg = config_json(a), *out;
    json_t *key = json_object_get(in, "key");
    if (!key)
        return json_pack("{s:b, s:o}", "ok", 1, "config", cfg);
    const char *k = json_string_value(key);
    if (!k)
        out = fail("%s", "key must be a string");
    else if (json_object_get(cfg, k))
        out = json_pack("{s:b, s:s, s:O}", "ok", 1, "key", k, "value", json_object_get(cfg, k));
    else
        out = fail("unknown key '%s'", k);
    json_decref(cfg);
    return out;
}

/* The first field of a command that its cmd does not take, or NULL (an unknown cmd: its own
 * message). A typo ("kye") must not fall back to a default, get's whole configuration: the line
 * protocol refuses one too. */
static const char *unknown_field(json_t *in, const char *cmd)
{
    static const char *const bare[] = {"cmd", NULL}, *const get[] = {"cmd", "key", NULL},
                             *const set[] = {"cmd", "key", "value", NULL};
    const char *const *takes = !strcmp(cmd, "get")                              ? get
                               : !strcmp(cmd, "set")                            ? set
                               : !strcmp(cmd, "stats") || !strcmp(cmd, "drain") ? bare
                                                                                : NULL;
    const char *k;
    json_t *v;
    json_object_foreach(in, k, v) {
        const char *const *f = takes;
        while (f && *f && strcmp(*f, k))
            f++;
        if (f && !*f)
            return k;
    }
    return NULL;
}

/* One command from the socket. Every path ends in exactly one reply: now, or (stats) once the
 * actors have answered. */
static void on_command(void *owner, const char *msg, size_t len)
{
    mn_admin *a = owner;
    if (memchr(msg, 0, len))
        return reply_json(a, fail("%s", "a command is a JSON object; this one contains a NUL byte"));
    json_error_t jerr;
    json_t *in = json_loadb(msg, len, JSON_REJECT_DUPLICATES, &jerr), *out;
    const char *cmd = json_string_value(json_object_get(in, "cmd")), *extra;
    if (!in || !json_is_object(in))
        out = fail("a command is a JSON object: %s", in ? "not an object" : jerr.text);
    else if (!cmd)
        out = fail("%s", "cmd must be a string");
    else if ((extra = unknown_field(in, cmd)))
        out = fail("%s takes no field '%.64s'", cmd, extra);
    else if (!strcmp(cmd, "stats")) {
        json_decref(in);
        return mn_stats_ask(&a->query, a->cfg.addr_book, a->cfg.addr_book->admin);
    } else if (!strcmp(cmd, "get"))
        out = get_key(a, in);
    else if (!strcmp(cmd, "set")) {
        const char *key = json_string_value(json_object_get(in, "key"));
        json_t *value = json_object_get(in, "value");
        out = !key || !value ? fail("%s", "set needs a string key and a value") : set_key(a, key, value);
    } else if (!strcmp(cmd, "drain")) {
        a->cfg.on_drain(a->cfg.owner);
        out = json_pack("{s:b, s:b}", "ok", 1, "draining", 1);
    } else {
        out = fail("unknown cmd '%s' (stats, get, set, drain)", cmd);
    }
    json_decref(in);
    reply_json(a, out);
}

mn_status mn_admin_new(struct event_base *base, const mn_admin_config *cfg, mn_admin **out, mn_err *err)
{
    mn_admin *a = mn_calloc(1, sizeof *a);
    if (!a)
        return mn_fail(err, MN_NOMEM, "admin: out of memory");
    a->cfg = *cfg;
    a->max_batch = cfg->max_batch;
    a->max_queue = cfg->max_queue;
    a->spec_enabled = true;
    a->pipeline = cfg->pipeline;
    a->spec_length = cfg->spec_length;
    a->weights_mode = cfg->weights_mode;
    a->weights = cfg->weights;
    a->skip_below = cfg->skip_below;
    a->cascade = cfg->cascade;
    a->tuner_mode = cfg->tuner_mode;
    a->tuner = cfg->tuner;
    a->ngram = -1;
    a->ngram_short = MN_NGRAM_SHORT_DEFAULT;
    a->ngram_min_n = MN_NGRAM_MIN_N_DEFAULT;
    a->ngram_shared = a->ngram_learn = cfg->ngram_cache;
    for (uint32_t i = 0; i < cfg->n_drafters; i++) {
        a->drafter_enabled[i] = true;
        if (!strcmp(cfg->drafter_names[i], "ngram"))
            a->ngram = (int)i;
    }
    mn_status s = mn_adminsock_new(base, cfg->addr, cfg->socket_mode, on_command, a, &a->sock, err);
    if (s != MN_OK) {
        mn_free(a);
        return s;
    }
    *out = a;
    return MN_OK;
}

void mn_admin_free(mn_admin *a)
{
    if (!a)
        return;
    mn_adminsock_free(a->sock);
    mn_free(a);
}

void mn_admin_handle(void *admin, mn_msg *m)
{
    mn_admin *a = admin;
    if (m->type != MN_MSG_STATS_BACK) {
        mn_log(MN_LOG_ERROR, "admin: unexpected message %u", m->type);
        return;
    }
    if (!mn_stats_back(m))
        return;
    json_t *st = stats_json(a);
    if (st && a->cfg.n_drafters) {
        json_object_set_new(st, "spec", spec_stats_json(a));
        json_object_set_new(json_object_get(st, "kv"), "drafts",
                            json_pack("{s:I, s:I}", "used", (json_int_t)a->query.stats.kvmem.draft_kv_used,
                                      "adopted", (json_int_t)a->query.stats.kvmem.draft_kv_adopted));
    }
    reply_json(a, json_pack("{s:b, s:o}", "ok", 1, "stats", st));
}
