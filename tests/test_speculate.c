/* test_speculate.c - collective speculative decoding in minionsd, end to end: the real daemon with
 * the bundled drafts and the n-gram drafter, over real sockets.
 *
 * Lossless greedy: the text equals minions-generate's (plain decoding) for each drafter alone, the
 * n-gram drafter, and the vote of all, at several draft lengths; under 32 concurrent clients; with
 * paused requests preempted and recomputed. Lossless sampling: with a seed, the tokens of plain
 * sampling exactly; chi-square tests of tokens 1-2 against the target's exact distributions, with
 * a deliberately wrong acceptance rule shown to fail the same test.
 * The adaptive length tuner keeps all of that lossless and shows its work (stats, events).
 * Bad drafts are refused at start-up with a clear message. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <nanomsg/nn.h>
#include <nanomsg/pubsub.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/model.h"
#include "model/sampler.h"
#include "runtime/registry.h"
#include "cli/prompts.h"
#include "serverutil.h"
#include "testutil.h"
#include "util/alloc.h"

static const char *model_file(const char *name)
{
    static char path[4][1024];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, 1024, "%s/models/%s", env_or("MINIONS_SRCDIR", "."), name);
    return p;
}

static const char *const drafter_names[] = {"draft-kjv", "draft-web", "draft-devil", "ngram"};

/* The tests below that set a draft length keep it (--tuner fixed): the adaptive tuner, the
 * default, would clamp 16 to its s_max of 8 and may decode plainly under load, and what they check
 * (texts at each length, acceptance, preemption of long outputs) would then run without the drafts
 * they name. The adaptive tuner's own losslessness is adaptive_length_is_lossless_and_visible's. */
static void start_with_drafts(server *s, const char *spec_length)
{
    server_start(s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", model_file("draft-web.gguf"),
                                     "--draft", model_file("draft-devil.gguf"), "--draft", "ngram", "--spec-length",
                                     spec_length, "--tuner", "fixed", "--draft-backend", "cpu", NULL});
}

/* stats.spec.tuner of an admin stats reply (the reply keeps it). */
static json_t *tuner_of(json_t *stats_reply)
{
    return json_object_get(json_object_get(json_object_get(stats_reply, "stats"), "spec"), "tuner");
}

/* A fresh directory for a test's files in dir (TEMP_DIR bytes), and in path the file `name` there
 * behind `scheme` ("ipc://" for an --events address, "" for a file). */
enum { TEMP_DIR = 32 };
static void temp_file(char *dir, char *path, size_t size, const char *scheme, const char *name)
{
    snprintf(dir, TEMP_DIR, "/tmp/minions-spec-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    snprintf(path, size, "%s%s/%s", scheme, dir, name);
}

/* Send the n prompts at once (ids prefix0, prefix1, ..., `tokens` each, every other one streamed);
 * each reply must be plain decoding's text. */
static void send_all_await_plain(tconn *c, const char *prefix, int n, char **prompts, char **want, int tokens)
{
    char id[48];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "%s%d", prefix, i);
        send_request(c, id, prompts[i], tokens, 0, i % 2);
    }
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "%s%d", prefix, i);
        json_t *done = await(c, id);
        cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want[i], "%s: %s", id, prompts[i]);
        json_decref(done);
    }
}

static void enable_only(server *s, int which /* -1: all */)
{
    for (int i = 0; i < 4; i++) {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "{\"cmd\":\"set\",\"key\":\"drafter.%s.enabled\",\"value\":%s}", drafter_names[i],
                 which < 0 || which == i ? "true" : "false");
        admin_ok(s, cmd);
    }
}

/* Each drafter alone, then the vote of all four (also with spec.skip_below), at different draft
 * lengths: every greedy text is minions-generate's, and only enabled drafters are voted. */
Test(speculate, each_drafter_and_the_vote_equal_plain_greedy, .timeout = 600)
{
    enum { TOKENS = 48 };
    char *prompts[6], *want[6];
    int n = load_references(prompts, want, TOKENS);
    server s;
    start_with_drafts(&s, "4");
    tconn c;
    connect_to(s.tcp, &c);
    static const int lengths[] = {1, 3, 5, 8, 16, 4};
    for (int cfg = 0; cfg < 6; cfg++) { /* each alone, all, all with light drafters skipping rounds */
        int only = cfg < 4 ? cfg : -1;
        enable_only(&s, only);
        if (cfg == 5)
            admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"spec.skip_below\",\"value\":0.5}");
        if (cfg == 3) { /* the n-gram drafter alone: one-token matches too, each proposing 3 */
            admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"drafter.ngram.min_n\",\"value\":1}");
            admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"drafter.ngram.short_len\",\"value\":3}");
        }
        char cmd[96];
        snprintf(cmd, sizeof cmd, "{\"cmd\":\"set\",\"key\":\"spec.length\",\"value\":%d}", lengths[cfg]);
        admin_ok(&s, cmd);
        for (int i = 0; i < n; i++) {
            char id[16];
            snprintf(id, sizeof id, "c%dp%d", cfg, i);
            send_request(&c, id, prompts[i], TOKENS, 0, i % 2);
        }
        long drafted = 0, accepted = 0;
        for (int i = 0; i < n; i++) {
            char id[16];
            snprintf(id, sizeof id, "c%dp%d", cfg, i);
            json_t *done = await(&c, id);
            cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want[i], "%s, drafter %s: %s", id,
                             only < 0 ? "all" : drafter_names[only], prompts[i]);
            json_t *spec = json_object_get(done, "spec");
            cr_assert(spec, "a done line with drafters has spec");
            drafted += json_integer_value(json_object_get(spec, "drafted"));
            accepted += json_integer_value(json_object_get(spec, "accepted"));
            for (int d = 0; d < 4; d++)
                if (only >= 0 && d != only)
                    cr_assert_eq(json_integer_value(json_object_get(json_object_get(spec, "voted"), drafter_names[d])),
                                 0, "%s was voted while disabled", drafter_names[d]);
            json_decref(done);
        }
        if (only != 3) /* the n-gram drafter may find no match in a short text */
            cr_assert_gt(drafted, 0, "config %d drafted nothing", cfg);
        cr_assert_leq(accepted, drafted);
    }
    /* the vote of all learned something, and opting out is plain decoding */
    json_t *o = json_pack("{s:s, s:s, s:i, s:b}", "id", "plain", "prompt", prompts[0], "max_tokens", TOKENS, "speculate", 0);
    char *line = json_dumps(o, JSON_COMPACT);
    send_line(&c, line);
    free(line);
    json_decref(o);
    o = await(&c, "plain");
    cr_assert_str_eq(json_string_value(json_object_get(o, "text")), want[0]);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "spec"), "verifications")), 0);
    json_decref(o);
    wait_idle(&s);
    json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
    json_t *spec = json_object_get(json_object_get(st, "stats"), "spec");
    cr_assert_gt(json_integer_value(json_object_get(spec, "verifications")), 0);
    cr_assert_gt(json_real_value(json_object_get(spec, "mean_accepted_len")), 0.0);
    json_t *kjv = json_object_get(json_object_get(spec, "drafters"), "draft-kjv");
    cr_assert_gt(json_integer_value(json_object_get(kjv, "proposed")), 0);
    json_decref(st);
    tconn_close(&c);
    server_stop(&s);
    for (int i = 0; i < n; i++)
        free(prompts[i]), free(want[i]);
}

/* A half-float KV cache (--kv-type f16: the target's and the drafts'): the vote's greedy texts, six
 * requests at once at a draft length of 4, are plain decoding's with the same cache
 * (minions-generate --kv-type f16), the server says which cache it keeps, and a --kv-mib budget
 * holds blocks of half the bytes. */
Test(speculate, a_half_float_kv_cache_keeps_greedy_lossless, .timeout = 300)
{
    enum { TOKENS = 48 };
    char *prompts[6], *want[6];
    int n = load_prompts(prompts, 2);
    for (int i = 0; i < n; i++)
        want[i] = generate_kv(model_path(), prompts[i], TOKENS, "f16");
    mn_model *m;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(model_path(), &m, &err), MN_OK, "%s", err.msg);
    /* a block: K and V of 16 positions in every layer, two bytes an element */
    size_t block = 2 * 2 * 16 * (size_t)m->hp.n_layers * m->hp.n_kv_heads * m->hp.head_dim;
    mn_model_free(m);
    server s;
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", model_file("draft-web.gguf"),
                                      "--draft", model_file("draft-devil.gguf"), "--draft", "ngram", "--spec-length",
                                      "4", "--tuner", "fixed", "--kv-type", "f16", "--kv-mib", "2", NULL});
    json_t *r = admin(&s, "{\"cmd\":\"get\",\"key\":\"kv.type\"}");
    cr_assert_str_eq(json_string_value(json_object_get(r, "value")), "f16", "%s", json_dumps(r, 0));
    json_decref(r);
    r = admin(&s, "{\"cmd\":\"stats\"}");
    cr_assert_eq(kv_of(r, "target", "total"), (json_int_t)((2u << 20) / block), "2 MiB of %zu-byte blocks", block);
    json_decref(r);
    tconn c;
    connect_to(s.tcp, &c);
    send_all_await_plain(&c, "h", n, prompts, want, TOKENS);
    tconn_close(&c);
    wait_idle(&s);
    json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
    json_t *spec = json_object_get(json_object_get(st, "stats"), "spec");
    cr_assert_gt(json_integer_value(json_object_get(spec, "accepted")), 0, "%s", json_dumps(spec, 0));
    json_decref(st);
    server_stop(&s);
    for (int i = 0; i < n; i++)
        free(prompts[i]), free(want[i]);
}

/* 32 clients at once, a third of their requests opting out: every text is plain decoding's. */
Test(speculate, thirty_two_clients_greedy_equals_generate, .timeout = 600)
{
    char *prompts[6], *want[6];
    int n = load_references(prompts, want, 24);
    server s;
    start_with_drafts(&s, "6");
    int failures = run_32_clients(&s, prompts, want, 24, 3);
    cr_assert_eq(failures, 0, "%d of 128 requests failed or differed from minions-generate", failures);
    wait_idle(&s);
    /* the prompts repeat: the target's and the drafts' prefix caches served them (the texts above
     * say the target's held the right K/V; a draft's wrong K/V could only cost acceptance), and now
     * every prompt's blocks are in each cache */
    json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
    cr_assert_gt(kv_of(st, "target", "adopted"), 0);
    cr_assert_gt(kv_of(st, "drafts", "adopted"), 0, "%s", json_dumps(st, 0));
    json_decref(st);
    /* client i's k-th request asks for prompt (i + k) % 6 and speculates when (i + k) % 3 != 0: so
     * prompts 0 and 3 never did, and only the target's pool holds them. A model draft may not have
     * seen a drafted prompt either: with the cascade it drafts only where the n-gram drafter (and its
     * cache of the finished requests) proposed nothing, and one that sits out drafts only in
     * exploring rounds; so each drafted prompt once more with every draft drafting */
    bool drafted[6];
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"spec.cascade\",\"value\":false}");
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"spec.skip_below\",\"value\":0}");
    tconn c;
    connect_to(s.tcp, &c);
    for (int i = 0; i < n; i++) {
        if (!(drafted[i] = i % 3 != 0))
            continue;
        send_request(&c, "all", prompts[i], 4, 0, 0);
        json_decref(await(&c, "all"));
    }
    tconn_close(&c);
    wait_idle(&s);
    check_prompts_cached(&s, prompts, n, 3, drafted);
    server_stop(&s);
    for (int i = 0; i < n; i++)
        free(prompts[i]), free(want[i]);
}

/* The SmolLM2 family (#11): the target with its three distilled drafts and the n-gram drafter
 * voting, on the fetched Q4_1 file and on its F16 conversion. Every greedy text is plain
 * decoding's: minions-generate's for the text prompts, and the same request with "speculate":
 * false for a chat (minions-generate takes no messages); and the drafts do get tokens accepted. */
static void smollm2_lossless(const char *target)
{
    static const char *sets[] = {"kjv", "web", "devil", "chat"};
    enum { PER_SET = 2, N = 4 * PER_SET, TOKENS = 24 };
    mn_prompt prompt[N];
    for (int k = 0; k < 4; k++) { /* the first PER_SET prompts of each set, read as minions-bench reads them */
        char name[64];
        snprintf(name, sizeof name, "prompts/smollm2-%s.jsonl", sets[k]);
        mn_prompt *set;
        int n;
        cr_assert_eq(mn_prompts_load(source_file(name), 0, SIZE_MAX, &set, &n), 0, "%s", name);
        cr_assert_geq(n, PER_SET);
        for (int i = 0; i < PER_SET; i++)
            prompt[k * PER_SET + i] = (mn_prompt){mn_strndup(set[i].text, strlen(set[i].text)), set[i].tokens,
                                                  set[i].chat};
        mn_prompts_free(set, n);
    }
    server s;
    server_start_model(&s, target,
                       (const char *[]){"--draft", model_file("smollm2-draft.gguf"), "--draft",
                                        model_file("smollm2-draft-bible.gguf"), "--draft",
                                        model_file("smollm2-draft-chat.gguf"), "--draft", "ngram", "--spec-length",
                                        "4", "--tuner", "fixed", "--max-batch", "16", "--kv-blocks", "512", NULL});
    tconn c;
    connect_to(s.tcp, &c);
    for (int i = 0; i < 2 * N; i++) { /* i < N: speculating; then the same requests opting out */
        char id[16];
        snprintf(id, sizeof id, "%s%d", i < N ? "s" : "p", i % N);
        json_t *o = json_pack("{s:s, s:i, s:b}", "id", id, "max_tokens", TOKENS, "speculate", i < N);
        cr_assert_eq(mn_prompt_set(&prompt[i % N], o), 0); /* a chat prompt goes as "messages" */
        char *line = json_dumps(o, JSON_COMPACT);
        send_line(&c, line);
        free(line);
        json_decref(o);
    }
    json_int_t accepted = 0;
    for (int i = 0; i < N; i++) {
        char sid[16], pid[16];
        snprintf(sid, sizeof sid, "s%d", i);
        snprintf(pid, sizeof pid, "p%d", i);
        json_t *sp = await(&c, sid), *pl = await(&c, pid);
        const char *text = json_string_value(json_object_get(sp, "text"));
        cr_assert(text, "%s: %s", prompt[i].text, json_dumps(sp, 0));
        cr_assert_str_eq(text, json_string_value(json_object_get(pl, "text")), "%s: speculative and plain differ",
                         prompt[i].text);
        if (!prompt[i].chat && i % PER_SET == 0) {
            char *want = generate_model(target, prompt[i].text, TOKENS);
            cr_assert_str_eq(text, want, "%s: not minions-generate's text", prompt[i].text);
            free(want);
        }
        accepted += json_integer_value(json_object_get(json_object_get(sp, "spec"), "accepted"));
        json_decref(sp);
        json_decref(pl);
        mn_free(prompt[i].text);
    }
    cr_assert_gt(accepted, N * TOKENS / 8, "the drafts had %lld tokens accepted", (long long)accepted);
    wait_idle(&s);
    tconn_close(&c);
    server_stop(&s);
}

Test(speculate, smollm2_drafts_are_lossless_on_q4_1_and_f16, .timeout = 900)
{
    const char *q41 = smollm2_path();
    if (!q41)
        cr_skip_test("SmolLM2 was not fetched: skipped");
    smollm2_lossless(q41);
    smollm2_lossless(fixture("smollm2.f16.gguf"));
}

/* Paused requests give their target and draft KV back and are recomputed, drafts and all. Drafts
 * of one token: a step then streams at most two tokens, so the clients' buffers fill (and their
 * requests pause) long before 400 tokens, as in plain decoding; longer drafts finish first. */
Test(speculate, paused_requests_are_preempted_and_recomputed_with_drafts, .timeout = 600)
{
    check_paused_preemption((const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", "ngram",
                                             "--spec-length", "1", "--tuner", "fixed", NULL},
                            false);
}

/* ---- sampling -------------------------------------------------------------------------------- */

#define PROMPT "And the LORD spake unto Moses, saying,"
#define TEMPERATURE 1.0
#define TOP_P 0.9
#define N_SAMPLES 1500

/* Chi-square critical value for df degrees of freedom at false-alarm rate 1e-3 (Wilson-Hilferty). */
static double chi2_crit(int df)
{
    double k = df, z = 3.0902; /* the standard normal's 0.999 quantile */
    double t = 1 - 2 / (9 * k) + z * sqrt(2 / (9 * k));
    return k * t * t * t;
}

/* Goodness of fit of counts[0..n) (total N) to probabilities p[0..n): bins expected below 5 are
 * pooled into one. Returns X^2; *df gets the degrees of freedom. */
static double chi2_fit(const int *counts, const double *p, int n, int total, int *df)
{
    double x2 = 0, pooled_e = 0, pooled_o = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * total;
        if (e < 5) {
            pooled_e += e, pooled_o += counts[i];
            continue;
        }
        x2 += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pooled_e >= 5 || pooled_o > 0) { /* an observed token the target gives ~no mass counts hard */
        double e = pooled_e > 1e-9 ? pooled_e : 1e-9;
        x2 += (pooled_o - e) * (pooled_o - e) / e;
        bins++;
    }
    *df = bins - 1;
    return x2;
}

typedef struct exact {
    uint32_t n_vocab;
    int32_t eos;
    double *p1;      /* [n_vocab + 1] the first token's distribution */
    double *p2;      /* [n_vocab + 1] the second position's marginal */
    int32_t *wrong;  /* [n_vocab] per first token: the token a wrong rule would emit second */
} exact;

/* The target's exact distributions of generated tokens 1 and 2 (after temperature and top_p, as the
 * server samples), and for the wrong rule the draft model's greedy second token after each first. */
static void exact_distribution(exact *x)
{
    mn_err err = {{0}};
    mn_model *m, *dm;
    cr_assert_eq(mn_model_load(model_file("target.gguf"), &m, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(mn_model_load(model_file("draft-kjv.gguf"), &dm, &err), MN_OK, "%s", err.msg);
    mn_backend *be, *dbe;
    mn_backend_config bc = mn_backend_defaults(m, 256), dc = mn_backend_defaults(dm, 256);
    bc.kind = dc.kind = MN_BACKEND_CPU;
    bc.n_threads = dc.n_threads = 2;
    cr_assert_eq(mn_backend_new(m, &bc, &be, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(mn_backend_new(dm, &dc, &dbe, &err), MN_OK, "%s", err.msg);
    uint32_t nv = m->hp.n_vocab;
    mn_tokens toks = {0};
    cr_assert_eq(mn_tok_encode(m->tok, PROMPT, strlen(PROMPT), true, &toks), MN_OK);
    mn_sampler *smp;
    mn_sampler_params sp = {TEMPERATURE, TOP_P, 0};
    cr_assert_eq(mn_sampler_new(nv, &sp, &smp), MN_OK);
    float *logits = malloc(nv * sizeof *logits), *p = malloc(nv * sizeof *p);
    x->n_vocab = nv;
    x->eos = mn_tok_eos(m->tok);
    x->p1 = calloc(nv + 1, sizeof *x->p1);
    x->p2 = calloc(nv + 1, sizeof *x->p2);
    x->wrong = calloc(nv, sizeof *x->wrong);
    mn_kv_seq kv = {0};
    cr_assert_eq(mn_backend_prefill(be, &kv, toks.ids, (uint32_t)toks.n, logits, &err), MN_OK, "%s", err.msg);
    mn_sampler_probs(smp, logits, p);
    for (uint32_t i = 0; i < nv; i++)
        x->p1[i] = p[i];
    mn_tokens_push(&toks, 0);
    if (x->eos >= 0)
        x->p2[nv] = x->p1[x->eos]; /* an eos first: no second token */
    for (uint32_t t1 = 0; t1 < nv; t1++) {
        if (x->p1[t1] == 0 || (int32_t)t1 == x->eos)
            continue;
        toks.ids[toks.n - 1] = (int32_t)t1;
        mn_kv_truncate(be->kv, &kv, (uint32_t)toks.n - 1);
        cr_assert_eq(mn_backend_prefill(be, &kv, &toks.ids[toks.n - 1], 1, logits, &err), MN_OK, "%s", err.msg);
        mn_sampler_probs(smp, logits, p);
        for (uint32_t i = 0; i < nv; i++)
            x->p2[i] += x->p1[t1] * p[i];
        mn_kv_seq dkv = {0};
        cr_assert_eq(mn_backend_prefill(dbe, &dkv, toks.ids, (uint32_t)toks.n, logits, &err), MN_OK, "%s", err.msg);
        x->wrong[t1] = mn_argmax(logits, nv);
        mn_kv_seq_release(dbe->kv, &dkv);
    }
    mn_kv_seq_release(be->kv, &kv);
    free(logits);
    free(p);
    mn_tokens_free(&toks);
    mn_sampler_free(smp);
    mn_backend_free(be);
    mn_backend_free(dbe);
    mn_model_free(m);
    mn_model_free(dm);
}

/* The categories of positions 1..5 of n requests with seeds 1..n, speculating or not, in batches
 * over one connection: the token, eos where the text ended, n_vocab after that. */
static void sample_tokens(server *s, const exact *x, int speculate, int n, int32_t (*out)[5])
{
    tconn c;
    connect_to(s->tcp, &c);
    for (int base = 0; base < n; base += 64) {
        int m = n - base < 64 ? n - base : 64;
        for (int i = 0; i < m; i++) {
            char id[16];
            snprintf(id, sizeof id, "%d", base + i);
            json_t *o = json_pack("{s:s, s:s, s:i, s:f, s:f, s:i, s:b, s:b}", "id", id, "prompt", PROMPT, "max_tokens",
                                  5, "temperature", TEMPERATURE, "top_p", TOP_P, "seed", base + i + 1, "speculate",
                                  speculate, "return_tokens", 1);
            char *line = json_dumps(o, JSON_COMPACT);
            send_line(&c, line);
            free(line);
            json_decref(o);
        }
        for (int i = 0; i < m; i++) {
            char id[16];
            snprintf(id, sizeof id, "%d", base + i);
            json_t *o = await(&c, id);
            json_t *ids = json_object_get(o, "tokens");
            int len = (int)json_array_size(ids); /* the eos that ends a text is not listed */
            for (int k = 0; k < 5; k++)
                out[base + i][k] = k < len    ? (int32_t)json_integer_value(json_array_get(ids, k))
                                   : k == len ? x->eos
                                              : (int32_t)x->n_vocab;
            json_decref(o);
        }
    }
    tconn_close(&c);
}

/* Speculative sampling, with two model drafters and the n-gram drafter voting, draws from the
 * target's distribution: for every seed it emits exactly the tokens plain sampling emits (the
 * coupled rule: so tokens 3..5 are plain sampling's too), and tokens 1 and 2 pass chi-square tests
 * against the target's exact distributions. False-alarm rate: 1e-3 per test, two tests (~0.2% per
 * run, though the seeds are fixed, so a run is reproducible).
 * Power: the same test on samples from a wrong rule (accept the voted draft whenever the target
 * allows it, p(x) > 0) must fail. */
Test(speculate, sampling_draws_from_the_target_distribution, .timeout = 900)
{
    exact x;
    exact_distribution(&x);
    uint32_t nv = x.n_vocab;
    server s;
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", model_file("draft-web.gguf"),
                                      "--draft", "ngram", "--spec-length", "4", "--tuner", "fixed", "--max-batch", "32",
                                      NULL});
    int32_t(*spec)[5] = calloc(N_SAMPLES, sizeof *spec), (*plain)[5] = calloc(N_SAMPLES, sizeof *plain);
    sample_tokens(&s, &x, 1, N_SAMPLES, spec);
    sample_tokens(&s, &x, 0, N_SAMPLES, plain);
    json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
    json_t *sp = json_object_get(json_object_get(st, "stats"), "spec");
    json_int_t drafted = json_integer_value(json_object_get(sp, "drafted")),
               accepted = json_integer_value(json_object_get(sp, "accepted"));
    cr_assert(accepted > 0 && accepted < drafted, "the rule must both accept and reject (%lld of %lld)",
              (long long)accepted, (long long)drafted);
    json_decref(st);
    server_stop(&s);
    /* the coupled rule draws what plain decoding draws: the same seed gives the same tokens */
    for (int i = 0; i < N_SAMPLES; i++)
        cr_assert(!memcmp(spec[i], plain[i], sizeof spec[i]), "seed %d: speculative sampling differs from plain", i + 1);
    int *c = calloc(nv + 1, sizeof *c), df;
    double *p = calloc(nv + 1, sizeof *p);
    /* 1: token 1 (the prompt pass) and token 2 (verified) against the exact marginals */
    for (int k = 0; k < 2; k++) {
        memset(c, 0, (nv + 1) * sizeof *c);
        for (int i = 0; i < N_SAMPLES; i++)
            c[spec[i][k]]++;
        for (uint32_t i = 0; i <= nv; i++)
            p[i] = k ? x.p2[i] : x.p1[i];
        double x2 = chi2_fit(c, p, nv + 1, N_SAMPLES, &df);
        cr_log_info("token %d: X^2 = %.1f, df %d, critical %.1f", k + 1, x2, df, chi2_crit(df));
        cr_assert_lt(x2, chi2_crit(df), "token %d of speculative sampling is not the target's", k + 1);
    }
    /* 2: power - a wrong rule's second tokens fail the same test */
    memset(c, 0, (nv + 1) * sizeof *c);
    mn_rng rng;
    mn_rng_seed(&rng, 1);
    for (int i = 0; i < N_SAMPLES; i++) {
        double u = mn_rng_uniform(&rng), acc = 0;
        uint32_t t1 = 0;
        while (t1 + 1 < nv && (acc += x.p1[t1]) <= u)
            t1++;
        c[(int32_t)t1 == x.eos ? nv : (uint32_t)x.wrong[t1]]++;
    }
    for (uint32_t i = 0; i <= nv; i++)
        p[i] = x.p2[i];
    double x2 = chi2_fit(c, p, nv + 1, N_SAMPLES, &df);
    cr_log_info("wrong rule: X^2 = %.1f, df %d, critical %.1f", x2, df, chi2_crit(df));
    cr_assert_gt(x2, chi2_crit(df), "the test cannot tell a wrong acceptance rule");
    free(c), free(p), free(spec), free(plain);
    free(x.p1), free(x.p2), free(x.wrong);
}

/* ---- start-up errors ------------------------------------------------------------------------- */

/* Whether the CUDA backend runs here (a device and a build with CUDA). */
static bool cuda_runs(void)
{
    mn_model *m = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(model_file("draft-kjv.gguf"), &m, &err), MN_OK, "%s", err.msg);
    mn_backend_config cfg = mn_backend_defaults(m, 64);
    cfg.kind = MN_BACKEND_CUDA;
    mn_backend *b = NULL;
    bool ok = mn_backend_new(m, &cfg, &b, &err) == MN_OK;
    mn_backend_free(b);
    mn_model_free(m);
    return ok;
}

Test(speculate, bad_drafts_are_refused_at_start_up, .timeout = 120)
{
    char dir[] = "/tmp/minions-draft-XXXXXX", bad[1100], other[1100];
    cr_assert(mkdtemp(dir));
    snprintf(bad, sizeof bad, "%s/corrupt.gguf", dir);
    FILE *f = fopen(bad, "w");
    fputs("GGUF but not really", f);
    fclose(f);
    start_refused((const char *[]){"--draft", "/nonexistent/draft.gguf", NULL}, "/nonexistent/draft.gguf");
    start_refused((const char *[]){"--draft", bad, NULL}, "corrupt.gguf");
    start_refused((const char *[]){"--draft", NULL}, "draft");
    start_refused((const char *[]){"--draft", "ngram", "--draft", "ngram", NULL}, "already loaded");
    snprintf(other, sizeof other, "%s/ngram.gguf", dir); /* a model file named like the n-gram drafter */
    cr_assert_eq(link(model_file("draft-kjv.gguf"), other) == 0 || symlink(model_file("draft-kjv.gguf"), other) == 0,
                 1);
    start_refused((const char *[]){"--draft", other, NULL}, "may not be named 'ngram'");
    unlink(other);
    start_refused((const char *[]){"--spec-length", "17", NULL}, "bad value '17' for --spec-length");
    start_refused((const char *[]){"--spec-weights", "loud", NULL}, "bad value 'loud' for --spec-weights");
    start_refused((const char *[]){"--draft", "ngram", "--tuner", "sometimes", NULL}, "fixed or adaptive");
    start_refused((const char *[]){"--draft", "ngram", "--tuner", "adaptive,s_max=17", NULL}, "s_max");
    start_refused((const char *[]){"--draft", "ngram", "--ngram-cache", "10", NULL},
                  "bad value '10' for --ngram-cache");
    start_refused((const char *[]){"--draft", "ngram", "--ngram-cache", "-1", NULL},
                  "bad value '-1' for --ngram-cache");
    start_refused((const char *[]){"--draft", "ngram", "--draft-backend", "gpu", NULL},
                  "bad value 'gpu' for --draft-backend");
    start_refused((const char *[]){"--kv-type", "f8", NULL}, "bad value 'f8' for --kv-type");
    if (!cuda_runs()) /* a draft asked onto CUDA where it cannot run: refused, naming the draft */
        start_refused((const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft-backend", "cuda", NULL},
                "draft-kjv.gguf");
    /* another vocabulary: a test fixture model with 512 tokens */
    snprintf(other, sizeof other, "%s/gqa_f32.gguf", env_or("MINIONS_TEST_DATA", "tests/data"));
    start_refused((const char *[]){"--draft", other, NULL}, "vocabulary");
    /* the same but for one control token's text (a control token decodes to nothing, so only its
     * text tells): draft-kjv with "<|endoftext|>" spelt "<|endoftexT|>", the same length */
    snprintf(other, sizeof other, "%s/control.gguf", dir);
    size_t len = 0;
    char *bytes = slurp(model_file("draft-kjv.gguf"), &len);
    char *at = memmem(bytes, len, "<|endoftext|>", 13);
    cr_assert(at, "draft-kjv.gguf spells its end of text <|endoftext|>");
    at[10] = 'T';
    f = fopen(other, "wb");
    cr_assert(f && fwrite(bytes, 1, len, f) == len && fclose(f) == 0);
    free(bytes);
    start_refused((const char *[]){"--draft", other, NULL}, "token 0 is the control token '<|endoftexT|>', not the control token '<|endoftext|>'");
    unlink(other);
    unlink(bad);
    rmdir(dir);
}

/* A draft with the target's vocabulary but another end or beginning of text (draft-kjv with eos,
 * then bos, token 1; both are token 0 in the target and the drafts) would propose ends the target
 * does not take: refused at start-up, saying which. */
Test(speculate, a_draft_with_another_bos_or_eos_is_refused, .timeout = 120)
{
    char dir[TEMP_DIR], path[1100];
    temp_file(dir, path, sizeof path, "", "draft-kjv.gguf");
    copy_with_u32(model_file("draft-kjv.gguf"), path, "tokenizer.ggml.eos_token_id", 1);
    start_refused((const char *[]){"--draft", path, NULL}, "has bos/eos 0/1, the target");
    copy_with_u32(model_file("draft-kjv.gguf"), path, "tokenizer.ggml.bos_token_id", 1);
    start_refused((const char *[]){"--draft", path, NULL}, "has bos/eos 1/0, the target");
    unlink(path);
    rmdir(dir);
}

/* ---- admin and events -------------------------------------------------------------------------- */

/* The summary of a request whose id starts with "hello" (subscribe's). */
#define HELLO "{\"event\":\"request\",\"id\":\"hello"

static bool is_hello(const char *buf, int n)
{
    return n >= (int)strlen(HELLO) && !memcmp(buf, HELLO, strlen(HELLO));
}

/* A nanomsg SUB socket on s's --events address for the lines starting with topic, with a receive
 * timeout of 20 s, once it is seen to receive: nn_connect returns before the connection is made,
 * and PUB drops what no connected subscriber takes. One-token requests "hello0", "hello1", ... go
 * to s, each given 100 ms for its summary to come, until one comes. Summaries of those ids may
 * still come later where topic takes them (is_hello tells them). */
static int subscribe(server *s, const char *events, const char *topic)
{
    int sub = nn_socket(AF_SP, NN_SUB);
    cr_assert(sub >= 0);
    cr_assert_eq(nn_setsockopt(sub, NN_SUB, NN_SUB_SUBSCRIBE, HELLO, strlen(HELLO)), 0);
    cr_assert_eq(nn_setsockopt(sub, NN_SUB, NN_SUB_SUBSCRIBE, topic, strlen(topic)), 0);
    int tmo = 100;
    nn_setsockopt(sub, NN_SOL_SOCKET, NN_RCVTIMEO, &tmo, sizeof tmo);
    cr_assert(nn_connect(sub, events) >= 0);
    tconn c;
    connect_to(s->tcp, &c);
    bool up = false;
    for (int k = 0; k < 200 && !up; k++) {
        char id[16], *buf = NULL;
        snprintf(id, sizeof id, "hello%d", k);
        send_request(&c, id, "Hello", 1, 0, 0);
        json_decref(await(&c, id));
        for (int n; !up && (n = nn_recv(sub, &buf, NN_MSG, 0)) >= 0; nn_freemsg(buf))
            up = is_hello(buf, n);
    }
    cr_assert(up, "no event reached a subscriber of %s in 200 requests", events);
    tconn_close(&c);
    cr_assert_eq(nn_setsockopt(sub, NN_SUB, NN_SUB_UNSUBSCRIBE, HELLO, strlen(HELLO)), 0);
    tmo = 20000;
    nn_setsockopt(sub, NN_SOL_SOCKET, NN_RCVTIMEO, &tmo, sizeof tmo);
    return sub;
}

/* The spec keys: get shows them, set checks them, stats shows per-drafter figures; the events socket
 * publishes weight changes and one summary per finished request. */
/* A figure of drafter `name` from the admin's stats: spec.drafters.<name>.<key>, or with a `group`
 * (the n-gram drafter's "cache") spec.drafters.<name>.<group>.<key>. */
static json_int_t drafter_stat(server *s, const char *name, const char *group, const char *key)
{
    json_t *r = admin(s, "{\"cmd\":\"stats\"}");
    json_t *d = json_object_get(json_object_get(json_object_get(json_object_get(r, "stats"), "spec"), "drafters"), name);
    json_t *v = json_object_get(group ? json_object_get(d, group) : d, key);
    cr_assert(json_is_integer(v), "stats: no spec.drafters.%s.%s%s%s", name, group ? group : "", group ? "." : "", key);
    json_int_t n = json_integer_value(v);
    json_decref(r);
    return n;
}

/* A figure of the n-gram drafter's shared cache (spec.drafters.ngram.cache). */
static json_int_t ngram_cache_stat(server *s, const char *key) { return drafter_stat(s, "ngram", "cache", key); }

Test(speculate, admin_keys_stats_and_events, .timeout = 300)
{
    server s;
    char events[200], dir[TEMP_DIR];
    temp_file(dir, events, sizeof events, "ipc://", "events");
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", "ngram", "--events", events,
                                      "--spec-weights", "global", NULL});
    int sub = subscribe(&s, events, "");

    json_t *r = admin(&s, "{\"cmd\":\"get\"}");
    json_t *cfg = json_object_get(r, "config");
    cr_assert_eq(json_integer_value(json_object_get(cfg, "spec.length")), 4);
    cr_assert_str_eq(json_string_value(json_object_get(cfg, "spec.weights")), "global");
    cr_assert(json_is_true(json_object_get(cfg, "drafter.draft-kjv.enabled")));
    cr_assert_eq(json_integer_value(json_object_get(cfg, "drafter.ngram.short_len")), 2);
    cr_assert_eq(json_integer_value(json_object_get(cfg, "drafter.ngram.min_n")), 2);
    cr_assert(json_is_true(json_object_get(cfg, "drafter.ngram.shared")));
    json_decref(r);
    static const char *const bad[] = {
        "{\"cmd\":\"set\",\"key\":\"spec.length\",\"value\":17}",
        "{\"cmd\":\"set\",\"key\":\"spec.length\",\"value\":-1}",
        "{\"cmd\":\"set\",\"key\":\"spec.enabled\",\"value\":1}",
        "{\"cmd\":\"set\",\"key\":\"spec.cascade\",\"value\":\"on\"}",
        "{\"cmd\":\"set\",\"key\":\"spec.weights\",\"value\":\"loudest\"}",
        "{\"cmd\":\"set\",\"key\":\"spec.punish_factor\",\"value\":2}",
        "{\"cmd\":\"set\",\"key\":\"spec.reward_threshold\",\"value\":0.1}", /* below punish_threshold */
        "{\"cmd\":\"set\",\"key\":\"drafter.nobody.enabled\",\"value\":true}",
        "{\"cmd\":\"set\",\"key\":\"drafter.ngram.short_len\",\"value\":17}",
        "{\"cmd\":\"set\",\"key\":\"drafter.ngram.short_len\",\"value\":\"2\"}",
        "{\"cmd\":\"set\",\"key\":\"drafter.ngram.min_n\",\"value\":0}",
        "{\"cmd\":\"set\",\"key\":\"drafter.ngram.min_n\",\"value\":5}",
        "{\"cmd\":\"set\",\"key\":\"drafter.draft-kjv.short_len\",\"value\":2}",
        "{\"cmd\":\"set\",\"key\":\"drafter.ngram.shared\",\"value\":1}",
    };
    admin_refuses(&s, bad, sizeof bad / sizeof *bad);
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"spec.reward_factor\",\"value\":1.5}");
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"spec.length\",\"value\":6}");

    tconn c;
    connect_to(s.tcp, &c);
    json_t *o = json_pack("{s:s, s:s, s:i, s:{s:i}}", "id", "capped", "prompt", "And God said", "max_tokens", 40, "spec",
                          "max_len", 2);
    char *line = json_dumps(o, JSON_COMPACT);
    send_line(&c, line);
    free(line);
    json_decref(o);
    o = await(&c, "capped");
    json_t *spec = json_object_get(o, "spec");
    json_int_t ver = json_integer_value(json_object_get(spec, "verifications"));
    cr_assert_gt(ver, 0);
    cr_assert_leq(json_integer_value(json_object_get(spec, "drafted")), 2 * ver, "spec.max_len 2 was not kept");
    json_decref(o);
    send_request(&c, "long", "And God said", 60, 0, 0);
    json_decref(await(&c, "long"));

    /* The n-gram drafter's shared cache: a prompt served before, asked again with the cache off
     * and then on, gives the same text, and with the cache its earlier continuation is proposed
     * and kept (the n-gram drafter alone: the model draft would be voted too). */
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"drafter.draft-kjv.enabled\",\"value\":false}");
    static const char cached_prompt[] = "Blessed are the meek, for they shall";
    json_int_t kept[2], from_cache[3];
    char *texts[2];
    send_request(&c, "cache-warm", cached_prompt, 40, 0, 0);
    json_decref(await(&c, "cache-warm"));
    from_cache[0] = ngram_cache_stat(&s, "proposals");
    cr_assert_geq(ngram_cache_stat(&s, "tokens_added"), 40, "stats: the finished requests are in the cache");
    cr_assert_eq(ngram_cache_stat(&s, "capacity"), 262144, "stats: the default --ngram-cache");
    for (int on = 0; on < 2; on++) {
        admin_ok(&s, on ? "{\"cmd\":\"set\",\"key\":\"drafter.ngram.shared\",\"value\":true}"
                        : "{\"cmd\":\"set\",\"key\":\"drafter.ngram.shared\",\"value\":false}");
        send_request(&c, on ? "cache-on" : "cache-off", cached_prompt, 40, 0, 0);
        o = await(&c, on ? "cache-on" : "cache-off");
        kept[on] = json_integer_value(json_object_get(json_object_get(o, "spec"), "accepted"));
        texts[on] = strdup(json_string_value(json_object_get(o, "text")));
        json_decref(o);
        from_cache[on + 1] = ngram_cache_stat(&s, "proposals");
    }
    cr_assert_eq(from_cache[1], from_cache[0], "stats: proposals from the cache while it was off");
    cr_assert_gt(from_cache[2], from_cache[1], "stats: no proposal counted from the cache while it was on");
    cr_assert_str_eq(texts[1], texts[0], "the shared cache changed the text");
    cr_assert_geq(kept[1], kept[0] + 5, "the cache was not used: %lld accepted with it, %lld without",
                 (long long)kept[1], (long long)kept[0]);
    free(texts[0]);
    free(texts[1]);
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"drafter.draft-kjv.enabled\",\"value\":true}");
    wait_idle(&s);

    r = admin(&s, "{\"cmd\":\"stats\"}");
    json_t *st = json_object_get(json_object_get(r, "stats"), "spec");
    cr_assert_eq(json_integer_value(json_object_get(st, "length")), 6);
    json_t *hist = json_object_get(st, "accepted_hist");
    json_int_t sum = 0;
    for (size_t i = 0; i < json_array_size(hist); i++)
        sum += json_integer_value(json_array_get(hist, i));
    cr_assert_eq(sum, json_integer_value(json_object_get(st, "verifications")), "the histogram counts verifications");
    json_t *kjv = json_object_get(json_object_get(st, "drafters"), "draft-kjv");
    cr_assert_gt(json_integer_value(json_object_get(kjv, "proposed")), 0);
    cr_assert_geq(json_integer_value(json_object_get(kjv, "proposed")),
                  json_integer_value(json_object_get(kjv, "agreed")));
    json_decref(r);

    /* one summary per finished request: each went out before its blocks came free (wait_idle);
     * once every one has come, whatever else comes within half a second (a second summary) */
    static const char *const finished[] = {"capped", "long", "cache-warm", "cache-off", "cache-on"};
    enum { N_FINISHED = sizeof finished / sizeof *finished };
    int summaries[N_FINISHED] = {0}, seen = 0, weights = 0;
    for (;;) {
        char *buf = NULL;
        int n = nn_recv(sub, &buf, NN_MSG, 0);
        if (n < 0 && seen == N_FINISHED)
            break;
        cr_assert(n > 0, "no event: %s; %d of the %d summaries came", nn_strerror(nn_errno()), seen, N_FINISHED);
        json_t *ev = json_loadb(buf, (size_t)n, 0, NULL);
        cr_assert(ev, "an event is a JSON object: %.*s", n, buf);
        const char *kind = json_string_value(json_object_get(ev, "event"));
        weights += kind && !strcmp(kind, "weight");
        if (kind && !strcmp(kind, "request") && !is_hello(buf, n)) {
            const char *id = json_string_value(json_object_get(ev, "id"));
            int k = 0;
            while (k < N_FINISHED && (!id || strcmp(id, finished[k])))
                k++;
            cr_assert_lt(k, N_FINISHED, "a summary of a request never sent: %.*s", n, buf);
            cr_assert_eq(++summaries[k], 1, "a second summary of %s: %.*s", id, n, buf);
            if (++seen == N_FINISHED) {
                int tmo = 500;
                nn_setsockopt(sub, NN_SOL_SOCKET, NN_RCVTIMEO, &tmo, sizeof tmo);
            }
        }
        json_decref(ev);
        nn_freemsg(buf);
    }
    cr_assert_gt(weights, 0, "weight changes are published");
    nn_close(sub);
    tconn_close(&c);
    server_stop(&s);
    rmdir(dir);
}

/* Rounds drafter `name` was asked to draft in (stats). */
static json_int_t drafter_rounds(server *s, const char *name) { return drafter_stat(s, name, NULL, "rounds"); }

/* spec.cascade: the model drafter drafts only for requests the n-gram drafter proposed nothing for.
 * A text that repeats itself gives the n-gram drafter a match in most rounds: with the cascade (the
 * default) the model drafter sits those out, without it it drafts in every round. The texts are
 * plain decoding's either way. */
Test(speculate, cascade_asks_the_model_drafter_where_ngram_has_nothing, .timeout = 300)
{
    enum { TOKENS = 48 };
    static const char prompt[] = "And God said, Let there be light: and there was light. "
                                 "And God said, Let there be light:";
    char *want = generate(prompt, TOKENS);
    server s;
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", "ngram", "--tuner", "fixed",
                                      "--spec-skip-below", "0", "--ngram-cache", "0", NULL});
    json_t *r = admin(&s, "{\"cmd\":\"get\"}");
    cr_assert(json_is_true(json_object_get(json_object_get(r, "config"), "spec.cascade")),
              "the cascade is the default");
    json_decref(r);
    tconn c;
    connect_to(s.tcp, &c);
    json_int_t model[2], ngram[2];
    for (int on = 1; on >= 0; on--) {
        if (!on)
            admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"spec.cascade\",\"value\":false}");
        json_int_t m0 = drafter_rounds(&s, "draft-kjv"), n0 = drafter_rounds(&s, "ngram");
        send_request(&c, on ? "on" : "off", prompt, TOKENS, 0, 0);
        json_t *done = await(&c, on ? "on" : "off");
        cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want, "cascade %s", on ? "on" : "off");
        json_decref(done);
        model[on] = drafter_rounds(&s, "draft-kjv") - m0;
        ngram[on] = drafter_rounds(&s, "ngram") - n0;
    }
    cr_assert_gt(ngram[0], 0);
    cr_assert_eq(model[0], ngram[0], "without the cascade the model drafts in every round");
    cr_assert_lt(model[1], ngram[1], "with the cascade the model drafted in all %lld rounds", (long long)ngram[1]);
    cr_assert_gt(model[1], 0, "the n-gram drafter matched every time: the test shows nothing");
    tconn_close(&c);
    server_stop(&s);
    free(want);
}

/* ---- the length tuner -------------------------------------------------------------------------- */

/* Adaptive length, deciding every 2 steps and re-probing often so that it moves a lot: every greedy
 * text is still plain decoding's, alone and six at a time; stats show the lengths and the measured
 * curves; decisions are published; tuner keys are checked; fixed mode puts every class back at
 * spec.length. */
Test(speculate, adaptive_length_is_lossless_and_visible, .timeout = 600)
{
    enum { TOKENS = 48 };
    char *prompts[6], *want[6];
    int n = load_references(prompts, want, TOKENS);
    server s;
    char events[200], dir[TEMP_DIR];
    temp_file(dir, events, sizeof events, "ipc://", "events");
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", "ngram", "--events", events,
                                      "--tuner", "adaptive,decision_threshold=2,probe_every=2,s_max=6", NULL});
    int sub = subscribe(&s, events, "{\"event\":\"tuner\"");

    tconn c;
    connect_to(s.tcp, &c);
    for (int round = 0; round < 2; round++) { /* one at a time (batch 1), then all at once */
        for (int i = 0; i < n; i++) {
            char id[16];
            snprintf(id, sizeof id, "r%dp%d", round, i);
            send_request(&c, id, prompts[i], TOKENS, 0, i % 2);
            if (round == 1)
                continue;
            json_t *done = await(&c, id);
            cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want[i], "%s: %s", id, prompts[i]);
            json_decref(done);
        }
        for (int i = 0; round == 1 && i < n; i++) {
            char id[16];
            snprintf(id, sizeof id, "r%dp%d", round, i);
            json_t *done = await(&c, id);
            cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want[i], "%s: %s", id, prompts[i]);
            json_decref(done);
        }
    }
    wait_idle(&s);

    json_t *r = admin(&s, "{\"cmd\":\"stats\"}");
    json_t *tuner = tuner_of(r);
    cr_assert_str_eq(json_string_value(json_object_get(tuner, "mode")), "adaptive");
    cr_assert_gt(json_integer_value(json_object_get(tuner, "measured")), 0);
    json_t *one = json_object_get(json_object_get(tuner, "batch"), "1");
    cr_assert(one, "batch 1 ran: %s", json_dumps(tuner, 0));
    cr_assert_gt(json_integer_value(json_object_get(one, "moves")), 0, "it moved: %s", json_dumps(one, 0));
    json_int_t s1 = json_integer_value(json_object_get(one, "s"));
    cr_assert(s1 >= 0 && s1 <= 6, "s %lld within [s_min, s_max]", (long long)s1);
    cr_assert_geq(json_object_size(json_object_get(one, "curve")), 2, "points at two lengths at least");
    json_decref(r);

    char *buf = NULL;
    int got = nn_recv(sub, &buf, NN_MSG, 0);
    cr_assert(got > 0, "no tuner event: %s", nn_strerror(nn_errno()));
    json_t *ev = json_loadb(buf, (size_t)got, 0, NULL);
    cr_assert(ev && json_object_get(ev, "from") && json_object_get(ev, "to") && json_object_get(ev, "why"), "%.*s",
              got, buf);
    json_decref(ev);
    nn_freemsg(buf);

    static const char *const bad[] = {
        "{\"cmd\":\"set\",\"key\":\"tuner.mode\",\"value\":\"sometimes\"}",
        "{\"cmd\":\"set\",\"key\":\"tuner.s_max\",\"value\":17}",
        "{\"cmd\":\"set\",\"key\":\"tuner.s_min\",\"value\":7}", /* above s_max 6 */
        "{\"cmd\":\"set\",\"key\":\"tuner.margin\",\"value\":1}",
        "{\"cmd\":\"set\",\"key\":\"tuner.decision_threshold\",\"value\":\"often\"}",
        "{\"cmd\":\"set\",\"key\":\"tuner.cost\",\"value\":\"free\"}",
        "{\"cmd\":\"set\",\"key\":\"tuner.rule\",\"value\":\"guess\"}",
        "{\"cmd\":\"set\",\"key\":\"tuner.nothing\",\"value\":1}",
    };
    admin_refuses(&s, bad, sizeof bad / sizeof *bad);
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"tuner.rule\",\"value\":\"model\"}");
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"tuner.mode\",\"value\":\"fixed\"}");
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"spec.length\",\"value\":3}");
    r = admin(&s, "{\"cmd\":\"get\"}");
    json_t *cfg = json_object_get(r, "config");
    cr_assert_str_eq(json_string_value(json_object_get(cfg, "tuner.mode")), "fixed");
    cr_assert_str_eq(json_string_value(json_object_get(cfg, "tuner.rule")), "model");
    cr_assert_eq(json_integer_value(json_object_get(cfg, "tuner.s_max")), 6);
    json_decref(r);
    send_request(&c, "fixed", prompts[0], TOKENS, 0, 0);
    json_t *done = await(&c, "fixed");
    cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want[0]);
    json_decref(done);
    r = admin(&s, "{\"cmd\":\"stats\"}");
    tuner = tuner_of(r);
    cr_assert_str_eq(json_string_value(json_object_get(tuner, "mode")), "fixed");
    const char *cls;
    json_t *k;
    json_object_foreach(json_object_get(tuner, "batch"), cls, k)
        cr_assert_eq(json_integer_value(json_object_get(k, "s")), 3, "batch %s runs at spec.length", cls);
    /* the model rule's estimates fill in any mode: batch 1 ran at two lengths at least (a line) */
    json_t *model = json_object_get(json_object_get(json_object_get(tuner, "batch"), "1"), "model");
    cr_assert(json_is_real(json_object_get(model, "3")) && json_is_real(json_object_get(model, "5")),
              "model estimates at 3 and 5: %s", json_dumps(model, 0));
    json_decref(r);
    /* what a step's time counts, live (the times measured as the other quantity are forgotten) */
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"tuner.cost\",\"value\":\"verify\"}");
    r = admin(&s, "{\"cmd\":\"get\"}");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "config"), "tuner.cost")), "verify");
    json_decref(r);

    /* the sequence rule: every sequence drafts a length of its own; the texts stay plain decoding's */
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"tuner.rule\",\"value\":\"sequence\"}");
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"tuner.mode\",\"value\":\"adaptive\"}");
    send_all_await_plain(&c, "seq", n, prompts, want, TOKENS);
    wait_idle(&s);
    r = admin(&s, "{\"cmd\":\"stats\"}");
    tuner = tuner_of(r);
    int with_figures = 0;
    json_object_foreach(json_object_get(tuner, "batch"), cls, k) {
        json_t *seq = json_object_get(k, "sequence");
        if (!seq)
            continue;
        /* a figure per kind of draft: the n-gram's (free) and the model's (costly, dearer) */
        double theta[2];
        for (int kind = 0; kind < 2; kind++) {
            json_t *q = json_object_get(seq, kind ? "costly" : "free");
            cr_assert(q, "batch %s: %s", cls, json_dumps(seq, 0));
            theta[kind] = json_real_value(json_object_get(q, "theta"));
            double first = json_real_value(json_object_get(q, "first"));
            json_t *carry = json_object_get(q, "carry");
            cr_assert(theta[kind] > 0 && theta[kind] <= 1 && first >= 0 && first <= 1, "batch %s: %s", cls,
                      json_dumps(q, 0));
            cr_assert(json_array_size(carry) == 5, "carry for tokens 2..s_max (6): %s", json_dumps(q, 0));
            for (size_t j = 0; j < json_array_size(carry); j++) {
                double x = json_real_value(json_array_get(carry, j));
                cr_assert(x >= 0 && x <= 1, "batch %s: %s", cls, json_dumps(q, 0));
            }
        }
        cr_assert(theta[1] >= theta[0], "batch %s: a model's draft token costs its passes too: %s", cls,
                  json_dumps(seq, 0));
        with_figures++;
    }
    cr_assert_gt(with_figures, 0, "a class shows its theta and acceptance: %s", json_dumps(tuner, 0));
    json_decref(r);

    /* length 0 is plain decoding, with no round: its steps are measured too (a tuner that moved to
     * 0 saw no step there again, and stayed for good) */
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"tuner.s_max\",\"value\":0}");
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"tuner.mode\",\"value\":\"adaptive\"}");
    send_request(&c, "zero", prompts[1], TOKENS, 0, 0);
    done = await(&c, "zero");
    cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want[1]);
    json_decref(done);
    r = admin(&s, "{\"cmd\":\"stats\"}");
    one = json_object_get(json_object_get(tuner_of(r), "batch"), "1");
    cr_assert_eq(json_integer_value(json_object_get(one, "s")), 0);
    json_t *zero = json_object_get(json_object_get(one, "curve"), "0");
    cr_assert(zero && json_integer_value(json_object_get(zero, "steps")) > 0, "no step measured at 0: %s",
              json_dumps(one, 0));
    json_decref(r);

    nn_close(sub);
    tconn_close(&c);
    server_stop(&s);
    rmdir(dir);
    for (int i = 0; i < n; i++)
        free(prompts[i]), free(want[i]);
}

/* spec.length 0 is plain decoding in either mode. The adaptive tuner (the default), deciding every
 * 2 steps with no warm-up, would otherwise probe speculating from there within a request; set live
 * to 4 it speculates, and set back to 0 it stops. */
Test(speculate, length_zero_turns_speculation_off_in_either_mode, .timeout = 300)
{
    enum { TOKENS = 40 };
    char *prompts[6];
    int n = load_prompts(prompts, 2); /* two of each set */
    server s;
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", "ngram", "--spec-length", "0",
                                      "--tuner", "adaptive,decision_threshold=2,probe_every=2,warm_up=0", NULL});
    tconn c;
    connect_to(s.tcp, &c);
    static const char *const lengths[] = {NULL, "{\"cmd\":\"set\",\"key\":\"spec.length\",\"value\":4}",
                                          "{\"cmd\":\"set\",\"key\":\"spec.length\",\"value\":0}"};
    for (int phase = 0; phase < 3; phase++) {
        if (lengths[phase])
            admin_ok(&s, lengths[phase]);
        json_int_t drafted = 0;
        for (int i = 0; i < n; i++) {
            char id[16];
            snprintf(id, sizeof id, "p%dr%d", phase, i);
            send_request(&c, id, prompts[i], TOKENS, 0, 0);
            json_t *done = await(&c, id);
            drafted += json_integer_value(json_object_get(json_object_get(done, "spec"), "drafted"));
            json_decref(done);
        }
        if (phase == 1)
            cr_assert_gt(drafted, 0, "spec.length 4 did not speculate");
        else
            cr_assert_eq(drafted, 0, "phase %d: %lld tokens drafted at spec.length 0", phase, (long long)drafted);
    }
    tconn_close(&c);
    server_stop(&s);
    for (int i = 0; i < n; i++)
        free(prompts[i]);
}

/* One greedy request over c: its done line (the caller decrefs). `more` is JSON to add, or "". */
static json_t *ask(tconn *c, const char *id, const char *prompt, int max_tokens, const char *more)
{
    json_t *req = json_pack("{s:s, s:s, s:i}", "id", id, "prompt", prompt, "max_tokens", max_tokens);
    json_t *extra = *more ? json_loads(more, 0, NULL) : json_object();
    cr_assert(req && extra, "bad JSON: %s", more);
    json_object_update(req, extra);
    char *line = json_dumps(req, JSON_COMPACT);
    send_line(c, line);
    free(line);
    json_decref(req);
    json_decref(extra);
    json_t *done = await(c, id);
    cr_assert(json_object_get(done, "done"), "%s: %s", id, json_dumps(done, 0));
    return done;
}

static json_int_t usage_of(json_t *done, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(done, "usage"), key));
}

/* Where a request ends inside the target's pass: at the context's end (the last token comes from
 * the logits of the context's last position, as minions-generate takes it, whether the pass
 * verified a draft or not), and at a stop string reached inside an accepted draft, whose KV then
 * runs past the request's last token: the prefix cache must file no block of draft tokens the
 * request never took, and the done line counts only accepted tokens that reached the output. */
Test(speculate, the_context_end_and_a_stop_inside_a_draft, .timeout = 300)
{
    server s;
    server_start(&s, (const char *[]){"--draft", "ngram", "--spec-length", "16", "--tuner", "fixed", NULL});
    tconn c;
    connect_to(s.tcp, &c);
    const char *repetitive = "The earth is the earth. The earth is the earth. The earth is the earth. "
                             "The earth is the earth. The earth is the earth. ";
    char *plain = generate(repetitive, 64);
    const char *stop = "venge the earth.\nThe earth is the earth.\nThe";
    char *cut = strstr(plain, stop);
    cr_assert(cut, "the bundled target's text no longer holds the stop string: %s", plain);
    *cut = 0;
    json_t *done = ask(&c, "stop", repetitive, 64, "{\"stop\":[\"venge the earth.\\nThe earth is the earth.\\nThe\"]}");
    cr_assert_str_eq(json_string_value(json_object_get(done, "text")), plain);
    cr_assert_str_eq(json_string_value(json_object_get(done, "finish_reason")), "stop");
    json_int_t taken = usage_of(done, "prompt_tokens") + usage_of(done, "completion_tokens");
    json_int_t accepted = json_integer_value(json_object_get(json_object_get(done, "spec"), "accepted"));
    cr_assert_leq(accepted, usage_of(done, "completion_tokens"), "accepted %lld of %lld tokens out",
                  (long long)accepted, (long long)usage_of(done, "completion_tokens"));
    json_decref(done);
    free(plain);
    wait_idle(&s);
    json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
    json_int_t cached = kv_of(st, "target", "cached");
    json_decref(st);
    /* with this prompt and stop the draft's KV runs past a block boundary (before the fix: 3 blocks
     * filed for 45 tokens) */
    cr_assert_leq(cached * 16, taken, "%lld cached blocks for %lld tokens", (long long)cached, (long long)taken);
    tconn_close(&c);
    server_stop(&s);

    /* the context's end, with a model drafter and the n-gram drafter voting and without them */
    mn_model *m = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(model_path(), &m, &err), MN_OK, "%s", err.msg);
    const uint32_t n_ctx = m->hp.n_ctx;
    mn_model_free(m);
    size_t len = 0;
    char *kjv = slurp(source_file("prompts/kjv.jsonl"), &len), *text = calloc(1, len + 1);
    for (char *line = strtok(kjv, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *o = json_loads(line, 0, NULL);
        strcat(text, json_string_value(json_object_get(o, "prompt")));
        json_decref(o);
    }
    free(kjv);
    start_with_drafts(&s, "4");
    connect_to(s.tcp, &c);
    size_t lo = 0, hi = strlen(text); /* the longest start of the text of at most n_ctx - 10 tokens */
    for (int i = 0; lo < hi; i++) {
        size_t mid = (lo + hi + 1) / 2;
        char id[16], save = text[mid];
        snprintf(id, sizeof id, "probe%d", i);
        text[mid] = 0;
        json_t *req = json_pack("{s:s, s:s, s:i, s:b}", "id", id, "prompt", text, "max_tokens", 1, "speculate", 0);
        char *line = json_dumps(req, JSON_COMPACT);
        send_line(&c, line);
        free(line);
        json_decref(req);
        text[mid] = save;
        json_t *o = await(&c, id);
        if (json_object_get(o, "done") && usage_of(o, "prompt_tokens") <= n_ctx - 10)
            lo = mid;
        else
            hi = mid - 1;
        json_decref(o);
    }
    text[lo] = 0;
    char *want = generate(text, 100);
    for (int spec = 0; spec < 2; spec++) {
        done = ask(&c, spec ? "spec" : "plain", text, 100, spec ? "{\"speculate\":true}" : "{\"speculate\":false}");
        cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want, "speculate %d", spec);
        cr_assert_str_eq(json_string_value(json_object_get(done, "finish_reason")), "length");
        cr_assert_eq(usage_of(done, "prompt_tokens") + usage_of(done, "completion_tokens"), n_ctx + 1,
                     "speculate %d: the last token comes from the context's last position", spec);
        if (spec)
            cr_assert_gt(json_integer_value(json_object_get(json_object_get(done, "spec"), "drafted")), 0);
        json_decref(done);
    }
    free(want);
    free(text);
    tconn_close(&c);
    wait_idle(&s);
    server_stop(&s);
}

/* A request that decoded plain and then speculates: the model drafter's first round catches up on
 * every token generated meanwhile, a one-off that the tuner leaves out of the step's cost (stats
 * backlog_seconds, the trace's backlog), where a request that speculated from its first token has
 * none (its prompt and the last step's tokens are every round's work); the text is plain
 * decoding's. The length is fixed, so that the plain stretch is the admin's alone. */
Test(speculate, catching_up_after_plain_steps_is_a_backlog, .timeout = 300)
{
    enum { STEADY = 48, LONG = 600 };
    char *prompts[6];
    int n = load_prompts(prompts, 2);
    cr_assert_geq(n, 2);
    char *want_steady = generate(prompts[0], STEADY), *want_long = generate(prompts[1], LONG);
    char dir[TEMP_DIR], path[1100];
    temp_file(dir, path, sizeof path, "", "steps.jsonl");
    server s;
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--spec-length", "4", "--tuner", "fixed",
                                      "--step-trace", path, "--output-buffer", "4", NULL});
    tconn c;
    connect_to(s.tcp, &c);
    send_request(&c, "steady", prompts[0], STEADY, 0, 0);
    json_t *done = await(&c, "steady");
    cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want_steady);
    cr_assert_gt(json_integer_value(json_object_get(json_object_get(done, "spec"), "drafted")), 0);
    json_decref(done);
    json_t *r = admin(&s, "{\"cmd\":\"stats\"}");
    json_t *tuner = tuner_of(r);
    cr_assert(json_is_real(json_object_get(tuner, "backlog_seconds")), "%s", json_dumps(tuner, 0));
    cr_assert_eq(json_real_value(json_object_get(tuner, "backlog_seconds")), 0.0, "no backlog while speculating: %s",
                 json_dumps(tuner, 0));
    json_decref(r);

    /* plain for a stretch (spec.length 0), then speculating again, within one request: streamed
     * to a client that does not read it yet, it is paused past the 4 KiB --output-buffer (some 140
     * tokens in, over the Unix socket, here) and held there while the length changes, however fast
     * the model runs */
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"spec.length\",\"value\":0}");
    tconn held;
    connect_to(s.unix_path, &held);
    send_request(&held, "switch", prompts[1], LONG, 0, 1);
    wait_stat(&s, "requests.paused", "==", 1);
    admin_ok(&s, "{\"cmd\":\"set\",\"key\":\"spec.length\",\"value\":4}");
    done = await(&held, "switch");
    cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want_long);
    cr_assert_gt(json_integer_value(json_object_get(json_object_get(done, "spec"), "drafted")), 0, "%s",
                 json_dumps(done, 0));
    json_decref(done);
    r = admin(&s, "{\"cmd\":\"stats\"}");
    tuner = tuner_of(r);
    double backlog = json_real_value(json_object_get(tuner, "backlog_seconds"));
    cr_assert_gt(backlog, 0, "the drafter caught up on the plain stretch: %s", json_dumps(tuner, 0));
    json_decref(r);
    tconn_close(&held);
    tconn_close(&c);
    server_stop(&s); /* the trace is complete */

    FILE *f = fopen(path, "r");
    cr_assert(f, "no trace at %s", path);
    char buf[1024];
    double traced = 0;
    int with_backlog = 0;
    while (fgets(buf, sizeof buf, f)) {
        json_t *o = json_loads(buf, 0, NULL);
        cr_assert(o, "%s", buf);
        double b = json_real_value(json_object_get(o, "backlog"));
        cr_assert(b == 0 || !json_is_null(json_object_get(o, "round")), "a backlog without a round: %s", buf);
        traced += b;
        with_backlog += b > 0;
        json_decref(o);
    }
    fclose(f);
    cr_assert_eq(with_backlog, 1, "one round caught up after the plain stretch, not %d", with_backlog);
    cr_assert(traced >= backlog - 1e-5, "stats %.6f s, the trace %.6f s", backlog, traced);
    unlink(path);
    rmdir(dir);
    free(want_steady), free(want_long);
    for (int i = 0; i < n; i++)
        free(prompts[i]);
}

/* ---- the pipeline ------------------------------------------------------------------------------ */

static void start_pipelined(server *s)
{
    server_start(s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", model_file("draft-web.gguf"),
                                     "--draft", "ngram", "--spec-length", "4", "--tuner", "fixed", "--pipeline", "-t",
                                     "2", "--draft-threads", "1", NULL});
}

static json_t *pipeline_stats(server *s)
{
    json_t *r = admin(s, "{\"cmd\":\"stats\"}");
    json_t *p = json_incref(json_object_get(json_object_get(json_object_get(r, "stats"), "spec"), "pipeline"));
    json_decref(r);
    cr_assert(json_is_object(p), "stats.spec.pipeline");
    return p;
}

static json_int_t field(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

/* Drafting one group while the target verifies another (draft models on their own thread): 32
 * clients get plain decoding's texts; rounds overlapped steps and the pool's bound paused drafting;
 * a client dropped mid-stream and a cancelled request free everything; switched off live, then on,
 * it is still plain decoding. Under TSan too (scripts/test.sh). */
Test(speculate, pipeline_is_lossless_under_load_cancels_and_disconnects, .timeout = 900)
{
    enum { TOKENS = 20 };
    char *prompts[6], *want[6];
    int n = load_references(prompts, want, TOKENS);
    server s;
    start_pipelined(&s);
    json_t *r = admin(&s, "{\"cmd\":\"get\",\"key\":\"pipeline.enabled\"}");
    cr_assert(json_is_true(json_object_get(r, "value")), "%s", json_dumps(r, 0));
    json_decref(r);

    int failures = run_32_clients(&s, prompts, want, TOKENS, 3);
    cr_assert_eq(failures, 0, "%d of 128 requests failed or differed from minions-generate", failures);
    wait_idle(&s);
    json_t *p = pipeline_stats(&s);
    cr_assert(json_is_true(json_object_get(p, "enabled")));
    cr_assert_gt(field(p, "overlapped"), 0, "no round overlapped a step: %s", json_dumps(p, 0));
    cr_assert_gt(field(p, "pauses"), 0, "the pool never held its bound: %s", json_dumps(p, 0));
    cr_assert_leq(field(p, "resumes"), field(p, "pauses"));
    cr_assert_eq(field(p, "depth"), 0, "drafts left in the pool when idle");
    json_decref(p);

    tconn c, d;
    connect_to(s.tcp, &c);
    connect_to(s.unix_path, &d);
    for (int i = 0; i < 4; i++) {
        char id[32];
        snprintf(id, sizeof id, "drop%d", i);
        send_request(&c, id, prompts[i], 400, 0, 1);
        snprintf(id, sizeof id, "stay%d", i);
        send_request(&d, id, prompts[i], TOKENS, 0, i % 2);
    }
    send_request(&d, "cancel", prompts[4], 400, 0, 1);
    json_decref(next_for(&c, "drop0")); /* streaming has begun */
    json_decref(next_for(&d, "cancel"));
    tconn_close(&c); /* dropped mid-stream */
    send_line(&d, "{\"cancel\":\"cancel\"}");
    json_t *o = await(&d, "cancel");
    cr_assert_str_eq(json_string_value(json_object_get(o, "finish_reason")), "cancelled");
    json_decref(o);
    for (int i = 0; i < 4; i++) {
        char id[32];
        snprintf(id, sizeof id, "stay%d", i);
        o = await(&d, id);
        cr_assert_str_eq(json_string_value(json_object_get(o, "text")), want[i], "%s: %s", id, prompts[i]);
        json_decref(o);
    }
    wait_idle(&s);

    for (int on = 0; on < 2; on++) { /* off, then on again: live */
        admin_ok(&s, on ? "{\"cmd\":\"set\",\"key\":\"pipeline.enabled\",\"value\":true}"
                        : "{\"cmd\":\"set\",\"key\":\"pipeline.enabled\",\"value\":false}");
        send_all_await_plain(&d, on ? "live1." : "live0.", n, prompts, want, TOKENS);
        p = pipeline_stats(&s);
        cr_assert_eq(json_is_true(json_object_get(p, "enabled")), on);
        json_decref(p);
    }
    static const char *const bad[] = {"{\"cmd\":\"set\",\"key\":\"pipeline.enabled\",\"value\":1}"};
    admin_refuses(&s, bad, 1);
    wait_idle(&s);
    tconn_close(&d);
    server_stop(&s);
    for (int i = 0; i < n; i++)
        free(prompts[i]), free(want[i]);
}

/* Once idle: the drafters' `voted` add up to the verifications, and there were some. */
static void assert_votes_sum_to_verifications(server *s)
{
    json_t *r = admin(s, "{\"cmd\":\"stats\"}");
    json_t *st = json_object_get(json_object_get(r, "stats"), "spec");
    json_int_t voted = 0;
    const char *name;
    json_t *d;
    json_object_foreach(json_object_get(st, "drafters"), name, d)
        voted += json_integer_value(json_object_get(d, "voted"));
    json_int_t ver = json_integer_value(json_object_get(st, "verifications"));
    cr_assert_gt(ver, 0);
    cr_assert_eq(voted, ver, "%lld votes counted for %lld verifications", (long long)voted, (long long)ver);
    json_decref(r);
}

/* A drafted request whose draft a later prompt's chunk took the pass's token budget from steps
 * plainly: its vote was never verified and is not counted (the drafters' `voted` sum to the
 * verifications; before, 277-303 votes for 230-246 verifications). */
Test(speculate, a_draft_cut_by_a_prompt_is_not_counted_as_voted, .timeout = 300)
{
    server s;
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", "ngram", "--spec-length", "8",
                                      "--tuner", "fixed", "--pipeline", "--spec-cascade", "off", "--spec-skip-below", "0",
                                      "--prefix-cache", "off", "-t", "2", NULL});
    char long_prompt[4096] = "";
    for (int i = 0; i < 220; i++) {
        char w[24];
        snprintf(w, sizeof w, "word%d ", i);
        strcat(long_prompt, w);
    }
    tconn gen[4], pre[3];
    for (int i = 0; i < 4; i++) {
        connect_to(s.tcp, &gen[i]);
        char id[16];
        snprintf(id, sizeof id, "gen%d", i);
        send_request(&gen[i], id, "And the LORD said unto Moses, and the LORD said unto Moses,", 400, 0, 0);
    }
    for (int k = 0; k < 10; k++)
        for (int j = 0; j < 3; j++) {
            if (!k)
                connect_to(s.tcp, &pre[j]);
            char id[16], prompt[4200];
            snprintf(id, sizeof id, "pre%d.%d", j, k);
            snprintf(prompt, sizeof prompt, "%s%d", long_prompt, k);
            send_request(&pre[j], id, prompt, 1, 0, 0);
            json_decref(await(&pre[j], id));
        }
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "gen%d", i);
        json_decref(await(&gen[i], id));
        tconn_close(&gen[i]);
    }
    for (int j = 0; j < 3; j++)
        tconn_close(&pre[j]);
    assert_votes_sum_to_verifications(&s);
    server_stop(&s);
}

/* A verification followed by a plain step (a request's last token, which max_tokens leaves no
 * draft room for) is counted as voted: the voter judges a vote lazily, at the request's next round
 * or its release, and the plain step had cleared the voted drafter before (6 of 10 such requests
 * lost their vote). */
Test(speculate, a_verification_before_a_plain_step_is_counted_as_voted, .timeout = 120)
{
    server s;
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", "ngram", "--spec-length", "4",
                                      "--tuner", "fixed", NULL});
    char *prompts[30];
    int n = load_prompts(prompts, 10);
    tconn c;
    connect_to(s.tcp, &c);
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        send_request(&c, id, prompts[i], 3, 0, 0);
        json_decref(await(&c, id));
        free(prompts[i]);
    }
    tconn_close(&c);
    wait_idle(&s);
    assert_votes_sum_to_verifications(&s);
    server_stop(&s);
}

/* Preemption with the pipeline: paused requests give back their KV, drafted or not, and are
 * recomputed. */
Test(speculate, pipeline_preempts_and_recomputes, .timeout = 600)
{
    check_paused_preemption((const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", "ngram",
                                             "--spec-length", "1", "--tuner", "fixed", "--pipeline", "-t", "2",
                                             "--draft-threads", "1", NULL},
                            false);
}

/* --draft-threads must leave the target a thread and needs a draft model to run. */
Test(speculate, draft_threads_are_checked_at_start_up, .timeout = 120)
{
    start_refused((const char *[]){"--draft", model_file("draft-kjv.gguf"), "-t", "2", "--draft-threads", "2", NULL},
            "leaves the target none");
    start_refused((const char *[]){"--draft", "ngram", "--draft-threads", "1", NULL}, "no draft model");
    start_refused((const char *[]){"--draft-threads", "x", NULL}, "bad value 'x' for --draft-threads");
}

/* --step-trace: a line per step, whose figures add up to what the requests got (their done lines),
 * in time order; a path that cannot be written is refused at start-up. */
Test(speculate, step_trace_accounts_for_every_step, .timeout = 300)
{
    char dir[TEMP_DIR], path[1100];
    temp_file(dir, path, sizeof path, "", "steps.jsonl");
    server s;
    server_start(&s, (const char *[]){"--draft", "ngram", "--step-trace", path, NULL});
    tconn c;
    connect_to(s.tcp, &c);
    json_int_t prompt = 0, completion = 0, drafted = 0;
    static const char *const lines[] = {
        "{\"id\":\"a\",\"prompt\":\"one two three four one two three four one two three four\",\"max_tokens\":40}",
        "{\"id\":\"b\",\"prompt\":\"And God said\",\"max_tokens\":12,\"speculate\":false}",
    };
    for (int i = 0; i < 2; i++) {
        send_line(&c, lines[i]);
        json_t *o = await(&c, i ? "b" : "a");
        json_t *usage = json_object_get(o, "usage");
        prompt += json_integer_value(json_object_get(usage, "prompt_tokens")) - 1; /* the last one is sampled */
        completion += json_integer_value(json_object_get(usage, "completion_tokens"));
        drafted += json_integer_value(json_object_get(json_object_get(o, "spec"), "drafted"));
        json_decref(o);
    }
    cr_assert_gt(drafted, 0, "the n-gram drafter proposed nothing on a repeating prompt");
    tconn_close(&c);
    server_stop(&s); /* frees the engine: the trace is complete */

    FILE *f = fopen(path, "r");
    cr_assert(f, "no trace at %s", path);
    char buf[1024];
    json_int_t sum_prompt = 0, sum_produced = 0, sum_drafted = 0, n = 0;
    double last_back = 0;
    while (fgets(buf, sizeof buf, f)) {
        json_error_t e;
        json_t *o = json_loads(buf, 0, &e);
        cr_assert(o, "trace line %lld is not JSON: %s", (long long)n + 1, e.text);
        json_int_t step, seqs, tokens, p, d, produced, len;
        double submit, start, end, back;
        json_t *round;
        int measured;
        double backlog;
        cr_assert_eq(json_unpack_ex(o, &e, JSON_STRICT,
                                    "{s:I, s:f, s:f, s:f, s:f, s:o, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "step",
                                    &step, "submit", &submit, "start", &start, "end", &end, "back", &back, "round",
                                    &round, "backlog", &backlog, "seqs", &seqs, "tokens", &tokens, "prompt", &p, "drafted", &d,
                                    "produced", &produced, "s", &len, "measured", &measured),
                     0, "trace line %lld: %s", (long long)n + 1, e.text);
        cr_assert_eq(step, ++n);
        cr_assert(last_back <= submit && submit <= start && start <= end && end <= back, "step %lld: times out of order",
                  (long long)step);
        if (!json_is_null(round)) {
            double t0 = json_real_value(json_array_get(round, 0)), t1 = json_real_value(json_array_get(round, 1));
            cr_assert(last_back <= t0 && t0 <= t1 && t1 <= submit, "step %lld: its round is not before it", (long long)step);
        }
        json_int_t sampled = tokens - p - d; /* the sequences that reached their newest token */
        cr_assert(seqs >= 1 && sampled >= 0 && sampled <= seqs, "step %lld: tokens %lld of %lld sequences", (long long)step,
                  (long long)tokens, (long long)seqs);
        cr_assert(produced >= sampled && produced <= sampled + d, "step %lld: produced %lld", (long long)step,
                  (long long)produced);
        cr_assert(d == 0 || len > 0, "step %lld: drafts at length 0", (long long)step);
        cr_assert_eq(backlog, 0.0, "step %lld: the n-gram drafter has no KV to catch up", (long long)step);
        sum_prompt += p, sum_produced += produced, sum_drafted += d;
        last_back = back;
        json_decref(o);
    }
    fclose(f);
    cr_assert_gt(n, 0);
    cr_assert_eq(sum_prompt, prompt, "prompt tokens: the trace %lld, the requests %lld", (long long)sum_prompt,
                 (long long)prompt);
    cr_assert_eq(sum_produced, completion, "produced: the trace %lld, the requests %lld", (long long)sum_produced,
                 (long long)completion);
    cr_assert_eq(sum_drafted, drafted, "drafted: the trace %lld, the requests %lld", (long long)sum_drafted,
                 (long long)drafted);
    unlink(path);
    rmdir(dir);
    start_refused((const char *[]){"--step-trace", "/nonexistent/steps.jsonl", NULL}, "step trace");
}

/* A failed draft pass (MINIONS_FAIL_DRAFT_PASS: the first, a catch-up over the prompt; the second,
 * the first drafted position after it) costs its round's proposals, nothing else: the request
 * goes on, drafts again in later rounds, and its greedy text is plain decoding's; the draft's KV
 * comes back to zero. */
Test(speculate, a_failed_draft_pass_costs_only_its_proposals, .timeout = 120)
{
    const char *prompt = "And God said unto Noah";
    char *want = generate(prompt, 40);
    for (int pass = 1; pass <= 2; pass++) {
        char n[4];
        snprintf(n, sizeof n, "%d", pass);
        cr_assert_eq(setenv("MINIONS_FAIL_DRAFT_PASS", n, 1), 0);
        server s;
        server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--tuner", "fixed", "--spec-length",
                                          "4", NULL});
        tconn c;
        connect_to(s.tcp, &c);
        send_request(&c, "r", prompt, 40, 0, 0);
        json_t *o = await(&c, "r");
        cr_assert_str_eq(json_string_value(json_object_get(o, "text")), want, "draft pass %d failed", pass);
        cr_assert_gt(json_integer_value(json_object_get(json_object_get(o, "spec"), "drafted")), 0,
                     "no drafts after the failed pass %d", pass);
        json_decref(o);
        tconn_close(&c);
        wait_idle(&s);
        server_stop(&s);
    }
    free(want);
}

/* A decoding request keeps its token a step while long prompts are prefilled beside it. A round
 * planned over a pass full of prompt chunks has no room for its drafts, and the step used to leave it
 * out for wanting drafts: it got no token until every prompt was in (on the line protocol as on
 * HTTP; 10-15 s with 40 streams at length 16, whose drafts alone overfill a pass). Now the round's
 * leftovers step plainly. Four prompts of ~700 tokens, each finishing at its first token, arrive
 * with it; every step over their chunks (prompt tokens >= 64 in the step trace) must give it one
 * token: what those steps produced, less the prompts' four. */
Test(speculate, a_decoding_request_keeps_its_token_beside_prompt_chunks, .timeout = 120)
{
    char dir[TEMP_DIR], path[1100];
    temp_file(dir, path, sizeof path, "", "steps.jsonl");
    server s;
    server_start(&s, (const char *[]){"--draft", "ngram", "--tuner", "fixed", "--spec-length", "4", "--step-trace",
                                      path, NULL});
    char text[8192] = "", *lines = NULL;
    for (int i = 0; i < 100; i++)
        strcat(text, "and the lord spake unto moses saying ");
    size_t n_lines = 0;
    FILE *out = open_memstream(&lines, &n_lines);
    cr_assert(out);
    fprintf(out, "{\"id\":\"decoding\",\"prompt\":\"And God said\",\"max_tokens\":200}\n");
    for (int i = 0; i < 4; i++)
        fprintf(out, "{\"id\":\"p%d\",\"prompt\":\"%d %s\",\"max_tokens\":1}\n", i, i, text);
    cr_assert_eq(fclose(out), 0);
    tconn c;
    connect_to(s.tcp, &c);
    send_line(&c, lines); /* one write: the decoding request first, admitted before the prompts */
    free(lines);
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, i < 4 ? "p%d" : "decoding", i);
        json_t *o = await(&c, id);
        cr_assert_str_eq(json_string_value(json_object_get(o, "finish_reason")), "length", "%s", id);
        json_decref(o);
    }
    tconn_close(&c);
    server_stop(&s); /* the trace is complete */

    FILE *f = fopen(path, "r");
    cr_assert(f, "no trace at %s", path);
    char buf[1024];
    json_int_t chunk_steps = 0, produced_there = 0;
    while (fgets(buf, sizeof buf, f)) {
        json_t *o = json_loads(buf, 0, NULL);
        cr_assert(o, "%s", buf);
        json_int_t prompt = json_integer_value(json_object_get(o, "prompt"));
        chunk_steps += prompt >= 64;
        produced_there += prompt >= 64 ? json_integer_value(json_object_get(o, "produced")) : 0;
        json_decref(o);
    }
    fclose(f);
    unlink(path);
    rmdir(dir);
    cr_assert_geq(chunk_steps, 4, "the prompts took %lld steps", (long long)chunk_steps);
    json_int_t got = produced_there - 4;
    cr_assert_geq(got, chunk_steps - 1, "the decoding request got %lld tokens in %lld steps over prompt chunks",
                  (long long)got, (long long)chunk_steps);
}

/* A request that opts out ("speculate": false, or "spec": {"max_len": 0}) decodes plainly in every
 * step beside the drafted ones: those steps still tell the tuner what the length costs. A step was
 * measured only when every sequence in it was drafted, so while such a request ran the tuner saw
 * nothing and its classes never decided (max_len 0 did so still after "speculate": false was
 * fixed). The request that opts out cannot be held by a client that does not read: a paused
 * request sits out the steps. It runs to the context's end instead (1000 tokens, some 40 KB of
 * stream: never paused within the default 256 KiB --output-buffer), requests that speculate go
 * beside it one at a time until a step was measured, and then it is cancelled: it ran throughout. */
Test(speculate, the_tuner_measures_beside_a_request_that_opts_out, .timeout = 300)
{
    static const char *const opt_out[] = {"\"speculate\":false", "\"spec\":{\"max_len\":0}"};
    for (int form = 0; form < 2; form++) {
        server s;
        server_start(&s, (const char *[]){"--draft", "ngram", NULL});
        tconn plain, spec;
        connect_to(s.tcp, &plain);
        char line[256];
        snprintf(line, sizeof line,
                 "{\"id\":\"out\",\"prompt\":\"And God said\",\"max_tokens\":1000,%s,\"stream\":true}",
                 opt_out[form]);
        send_line(&plain, line);
        json_int_t running = wait_running(&s);
        cr_assert_eq(running, 1, "the request that opts out (%s) never started", opt_out[form]);
        connect_to(s.tcp, &spec);
        json_int_t measured = 0;
        int sent = 0;
        while (sent < 8 && !measured) { /* 64-token requests one after another, beside it */
            char id[16];
            snprintf(id, sizeof id, "in%d", sent++);
            send_request(&spec, id, "In the beginning God created the heaven and the earth.", 64, 0, 0);
            json_t *o = await(&spec, id);
            cr_assert(json_object_get(o, "done"), "%s", id);
            json_decref(o);
            json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
            measured = json_integer_value(json_object_get(tuner_of(st), "measured"));
            json_decref(st);
        }
        send_line(&plain, "{\"cancel\":\"out\"}");
        json_t *o = await(&plain, "out");
        cr_assert_str_eq(json_string_value(json_object_get(o, "finish_reason")), "cancelled",
                         "the request that opts out (%s) ended before the %d requests beside it did: %s",
                         opt_out[form], sent, json_dumps(o, 0));
        json_decref(o);
        cr_assert_gt(measured, 0, "no step was measured beside the request that opts out (%s; %d requests)",
                     opt_out[form], sent);
        tconn_close(&plain);
        tconn_close(&spec);
        wait_idle(&s);
        server_stop(&s);
    }
}

/* ---- live switches ----------------------------------------------------------------------------- */

/* spec.enabled, set live: off, requests decode plainly (no verification in their done lines or the
 * stats) with plain decoding's text; on again, they speculate again. Then every drafter disabled
 * (drafter.<name>.enabled): the same, and no round is planned (they came back empty, and their
 * steps were measured as speculating ones); one enabled again, they speculate again. */
Test(speculate, spec_enabled_switches_speculation_live, .timeout = 120)
{
    enum { TOKENS = 32 };
    static const char prompt[] = "And God said, Let there be light: and there was light.";
    char *want = generate(prompt, TOKENS);
    server s;
    server_start(&s, (const char *[]){"--draft", model_file("draft-kjv.gguf"), "--draft", "ngram", "--spec-length", "4",
                                      "--tuner", "fixed", NULL});
    tconn c;
    connect_to(s.tcp, &c);
    static const char *const set[][2] = {
        {NULL},
        {"{\"cmd\":\"set\",\"key\":\"spec.enabled\",\"value\":false}"},
        {"{\"cmd\":\"set\",\"key\":\"spec.enabled\",\"value\":true}"},
        {"{\"cmd\":\"set\",\"key\":\"drafter.draft-kjv.enabled\",\"value\":false}",
         "{\"cmd\":\"set\",\"key\":\"drafter.ngram.enabled\",\"value\":false}"},
        {"{\"cmd\":\"set\",\"key\":\"drafter.ngram.enabled\",\"value\":true}"},
    };
    for (int phase = 0; phase < 5; phase++) { /* on (the default), off, on, no drafter, one drafter */
        bool on = phase != 1 && phase != 3;
        for (int k = 0; k < 2 && set[phase][k]; k++)
            admin_ok(&s, set[phase][k]);
        json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
        cr_assert_eq(stat_at(st, "spec.enabled"), phase != 1, "stats: spec.enabled in phase %d", phase);
        json_int_t before = stat_at(st, "spec.verifications"), rounds = stat_at(st, "spec.pipeline.rounds");
        json_decref(st);
        char id[8];
        snprintf(id, sizeof id, "p%d", phase);
        json_t *done = ask(&c, id, prompt, TOKENS, "");
        cr_assert_str_eq(json_string_value(json_object_get(done, "text")), want, "phase %d", phase);
        json_t *spec = json_object_get(done, "spec");
        json_int_t ver = json_integer_value(json_object_get(spec, "verifications"));
        json_int_t drafted = json_integer_value(json_object_get(spec, "drafted"));
        if (on)
            cr_assert(ver > 0 && drafted > 0, "phase %d did not speculate: %s", phase, json_dumps(done, 0));
        else
            cr_assert(ver == 0 && drafted == 0, "phase %d speculated: %s", phase, json_dumps(done, 0));
        json_decref(done);
        st = admin(&s, "{\"cmd\":\"stats\"}");
        cr_assert_eq(stat_at(st, "spec.verifications") - before, ver, "stats: phase %d's verifications", phase);
        json_int_t planned = stat_at(st, "spec.pipeline.rounds") - rounds;
        if (on)
            cr_assert_gt(planned, 0, "phase %d planned no round", phase);
        else
            cr_assert_eq(planned, 0, "phase %d planned %lld rounds", phase, (long long)planned);
        json_decref(st);
    }
    tconn_close(&c);
    server_stop(&s);
    free(want);
}

/* drafter.ngram.learn, set live: off, finished requests stop going into the n-gram drafter's shared
 * cache (stats: its tokens_added stands still); on again, they go in again. A finished request has
 * gone past the drafter once its blocks are free (wait_idle), and stats asks the drafter itself, so
 * the figure counts it at once (it was once the drafter's figure at its latest round, which left out
 * the requests that finished since). */
Test(speculate, ngram_learn_switches_the_cache_filling_live, .timeout = 120)
{
    enum { TOKENS = 24 };
    server s;
    server_start(&s, (const char *[]){"--draft", "ngram", "--spec-length", "4", "--tuner", "fixed", NULL});
    json_t *r = admin(&s, "{\"cmd\":\"get\",\"key\":\"drafter.ngram.learn\"}");
    cr_assert(json_is_true(json_object_get(r, "value")), "learning is the default: %s", json_dumps(r, 0));
    json_decref(r);
    cr_assert_eq(ngram_cache_stat(&s, "tokens_added"), 0, "the cache starts empty");
    tconn c;
    connect_to(s.tcp, &c);
    /* learning: on0 | off: off0, off1 | on: on1, on2. added[i]: the figure once request i is done */
    static const char *const ids[] = {"on0", "off0", "off1", "on1", "on2"};
    json_int_t added[5], tokens[5];
    for (int i = 0; i < 5; i++) {
        if (i == 1 || i == 3)
            admin_ok(&s, i == 1 ? "{\"cmd\":\"set\",\"key\":\"drafter.ngram.learn\",\"value\":false}"
                                : "{\"cmd\":\"set\",\"key\":\"drafter.ngram.learn\",\"value\":true}");
        json_t *done = ask(&c, ids[i], "And God said", TOKENS, "");
        tokens[i] = usage_of(done, "prompt_tokens") + usage_of(done, "completion_tokens");
        json_decref(done);
        wait_idle(&s);
        added[i] = ngram_cache_stat(&s, "tokens_added");
    }
    cr_assert_eq(added[0], tokens[0], "on0 did not go into the cache while learning");
    cr_assert_eq(added[1], added[0], "off0 went into the cache with drafter.ngram.learn false");
    cr_assert_eq(added[2], added[1], "off1 went into the cache with drafter.ngram.learn false");
    cr_assert_eq(added[3], added[2] + tokens[3], "on1 did not go into the cache once learning again");
    cr_assert_eq(added[4], added[3] + tokens[4], "on2 did not go into the cache");
    tconn_close(&c);
    server_stop(&s);
}
