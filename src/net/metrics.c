/* metrics.c - Prometheus text exposition of mn_stats (see metrics.h). */
#include "net/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/alloc.h"

typedef struct text {
    char *s;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !t->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap ? t->cap * 2 : 8192) + (size_t)n;
        char *s = mn_realloc(t->s, cap);
        if (!s)
            t->oom = true;
        else
            t->s = s, t->cap = cap;
    }
}

static void help(text *t, const char *name, const char *type, const char *what)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, what, name, type);
}

/* A label value: backslash, quote and newline escaped. */
static void label(text *t, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            put(t, "\\%c", *v);
        else if (*v == '\n')
            put(t, "\\n");
        else
            put(t, "%c", *v);
    }
}

static void single(text *t, const char *name, const char *type, const char *what, double v)
{
    help(t, name, type, what);
    put(t, "%s %.17g\n", name, v);
}

static void hist(text *t, const char *name, const char *what, const mn_hist *h)
{
    help(t, name, "histogram", what);
    for (int i = 0; i < MN_HIST_BOUNDS; i++)
        put(t, "%s_bucket{le=\"%g\"} %llu\n", name, mn_hist_bounds[i], (unsigned long long)mn_hist_cumulative(h, i));
    put(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", name, (unsigned long long)h->count, name,
        h->sum, name, (unsigned long long)h->count);
}

static void requests(text *t, const mn_stats *s)
{
    static const char *const outcome[MN_OUTCOMES] = {"stop", "length", "cancelled", "error"};
    const struct {
        const char *name;
        const mn_frontend_stats *f;
    } fe[] = {{"lines", &s->client}, {"http", &s->http}};
    help(t, "minions_requests_total", "counter",
         "Requests answered, by front end and by how they ended (rejected: refused before they were requests)");
    for (int i = 0; i < 2; i++) {
        for (int o = 0; o < MN_OUTCOMES; o++)
            put(t, "minions_requests_total{frontend=\"%s\",outcome=\"%s\"} %llu\n", fe[i].name, outcome[o],
                (unsigned long long)fe[i].f->outcomes[o]);
        put(t, "minions_requests_total{frontend=\"%s\",outcome=\"rejected\"} %llu\n", fe[i].name,
            (unsigned long long)fe[i].f->rejected);
    }
    help(t, "minions_requests_in_flight", "gauge", "Requests accepted and not yet answered, by front end");
    for (int i = 0; i < 2; i++)
        put(t, "minions_requests_in_flight{frontend=\"%s\"} %llu\n", fe[i].name, (unsigned long long)fe[i].f->in_flight);
    help(t, "minions_connections", "gauge", "Open line-protocol connections (evhttp does not count its own)");
    put(t, "minions_connections{frontend=\"lines\"} %u\n", s->client.connections);
    help(t, "minions_idle_connections_closed_total", "counter",
         "Line-protocol connections closed after --idle-timeout without a request in flight or a whole line");
    put(t, "minions_idle_connections_closed_total{frontend=\"lines\"} %llu\n", (unsigned long long)s->client.idle_closed);
    help(t, "minions_stalled_connections_closed_total", "counter",
         "Line-protocol connections closed after --idle-timeout with their output unread past --output-buffer");
    put(t, "minions_stalled_connections_closed_total{frontend=\"lines\"} %llu\n",
        (unsigned long long)s->client.stalled_closed);
    help(t, "minions_accept_pauses_total", "counter", "Times a front end stopped accepting for want of file descriptors");
    for (int i = 0; i < 2; i++)
        put(t, "minions_accept_pauses_total{frontend=\"%s\"} %llu\n", fe[i].name, (unsigned long long)fe[i].f->accept_pauses);
    single(t, "minions_requests_running", "gauge", "Requests holding KV (the paused ones among them)",
           s->kvmem.running);
    single(t, "minions_requests_queued", "gauge", "Requests waiting for admission (the queue depth)", s->kvmem.queued);
    single(t, "minions_requests_paused", "gauge", "Requests whose client does not read", s->kvmem.paused);
    single(t, "minions_preemptions_total", "counter", "Requests that gave their KV back to be recomputed later",
           (double)s->kvmem.preemptions);
    single(t, "minions_draining", "gauge", "1 while the server drains", s->client.draining || s->http.draining);
}

static void engine(text *t, const mn_stats *s)
{
    single(t, "minions_prompt_tokens_total", "counter", "Prompt tokens admitted", (double)s->intake.prompt_tokens);
    single(t, "minions_generation_tokens_total", "counter", "Tokens generated",
           (double)s->verifier.tokens_generated);
    single(t, "minions_steps_total", "counter", "Target passes", (double)s->verifier.steps);
    single(t, "minions_step_seconds_total", "counter", "Time spent in target passes", s->verifier.step_seconds);
    single(t, "minions_kv_blocks_used", "gauge", "The target's KV blocks in use", s->kvmem.kv_used);
    single(t, "minions_kv_blocks_free", "gauge", "The target's free KV blocks", s->kvmem.kv_free);
    single(t, "minions_kv_blocks_cached", "gauge", "The target's prefix cache: blocks no request holds",
           s->kvmem.kv_cached);
    single(t, "minions_prefix_cache_tokens_total", "counter", "Prompt positions taken from the prefix cache",
           (double)s->kvmem.kv_adopted);
    single(t, "minions_draft_kv_blocks_used", "gauge", "KV blocks in use in every draft model's pool",
           s->kvmem.draft_kv_used);
    hist(t, "minions_time_to_first_token_seconds", "From a request's arrival to its first token", &s->verifier.ttft);
    mn_hist tpot = mn_hist_sum(&s->client.tpot, &s->http.tpot), e2e = mn_hist_sum(&s->client.e2e, &s->http.e2e);
    hist(t, "minions_time_per_output_token_seconds", "Per request, the time per token after its first", &tpot);
    hist(t, "minions_e2e_request_latency_seconds", "From a request's arrival to its last token", &e2e);
}

static void spec(text *t, const mn_stats *s, const mn_metrics_info *info)
{
    const uint64_t *h = s->verifier.accepted_hist;
    single(t, "minions_spec_enabled", "gauge", "1 while speculation is on", s->verifier.spec_enabled);
    single(t, "minions_spec_decode_num_drafts_total", "counter", "Verifications of a draft",
           (double)s->verifier.verifications);
    single(t, "minions_spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified",
           (double)s->verifier.drafted);
    single(t, "minions_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens the target kept",
           (double)s->verifier.accepted);
    help(t, "minions_spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Verifications that kept the draft token at this position (0: the first)");
    for (int pos = 0; pos + 1 < MN_SPEC_HIST; pos++) {
        uint64_t n = 0;
        for (int k = pos + 1; k < MN_SPEC_HIST; k++)
            n += h[k];
        put(t, "minions_spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %llu\n", pos,
            (unsigned long long)n);
    }
    static const struct {
        const char *name, *type, *what;
    } per[] = {
        {"minions_drafter_enabled", "gauge", "1 while the drafter drafts"},
        {"minions_drafter_weight", "gauge", "The drafter's global weight in the vote"},
        {"minions_drafter_rounds_total", "counter", "Rounds the drafter was asked to draft in"},
        {"minions_drafter_proposed_tokens_total", "counter", "Judged tokens the drafter proposed"},
        {"minions_drafter_accepted_tokens_total", "counter", "Of them, tokens on the path the target kept"},
        {"minions_drafter_votes_won_total", "counter", "Verifications whose draft was this drafter's"},
        {"minions_drafter_seconds_total", "counter", "Time the drafter spent proposing"},
    };
    for (size_t m = 0; m < sizeof per / sizeof *per; m++) {
        help(t, per[m].name, per[m].type, per[m].what);
        for (uint32_t i = 0; i < info->n_drafters; i++) {
            const mn_drafter_stats *d = &s->voter.drafter[i];
            double v[] = {d->enabled, d->weight, (double)d->rounds, (double)d->proposed, (double)d->agreed,
                          (double)d->voted, d->seconds};
            put(t, "%s{drafter=\"", per[m].name);
            label(t, info->drafter_names[i]);
            put(t, "\"} %.17g\n", v[m]);
        }
    }
    help(t, "minions_spec_length", "gauge", "The speculation length in effect, by batch size");
    for (uint32_t c = 0; c < MN_TUNER_CLASSES; c++)
        put(t, "minions_spec_length{batch=\"%s\"} %u\n", mn_tuner_class_name(c), s->verifier.spec_lengths[c]);
    const mn_pipeline_stats *p = &s->verifier.pipeline;
    single(t, "minions_pipeline_depth", "gauge", "Drafted sequences waiting for verification", p->depth);
    single(t, "minions_pipeline_pauses_total", "counter", "Times drafting paused on a full pool", (double)p->pauses);
    single(t, "minions_pipeline_resumes_total", "counter", "Rounds started after a pause", (double)p->resumes);
}

char *mn_metrics_render(const mn_stats *s, const mn_metrics_info *info, size_t *len)
{
    text t = {0};
    help(&t, "minions_info", "gauge", "The served model and backend");
    put(&t, "minions_info{model=\"");
    label(&t, info->model);
    put(&t, "\",backend=\"");
    label(&t, info->backend);
    put(&t, "\",drafters=\"%u\"} 1\n", info->n_drafters);
    requests(&t, s);
    engine(&t, s);
    if (info->n_drafters)
        spec(&t, s, info);
    if (t.oom) {
        mn_free(t.s);
        return NULL;
    }
    *len = t.len;
    return t.s;
}
