/* openai.c - the OpenAI-compatible API's bodies with jansson (see openai.h). */
#include "net/openai.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/alloc.h"

void mn_oai_request_free(mn_oai_request *q)
{
    mn_req_params_free(&q->p);
    for (uint32_t i = 0; i + 1 < q->n_prompts; i++) {
        if (q->more)
            mn_free(q->more[i]);
        if (q->more_ids)
            mn_free(q->more_ids[i]);
    }
    mn_free(q->more);
    mn_free(q->more_len);
    mn_free(q->more_ids);
    mn_free(q->more_n_ids);
    mn_free(q->model);
    q->more = NULL;
    q->more_len = NULL;
    q->more_ids = NULL;
    q->more_n_ids = NULL;
    q->n_prompts = 0;
    q->model = NULL;
}

uint32_t mn_oai_choices(const mn_oai_request *q) { return q->n_prompts * q->n; }

mn_status mn_oai_choice_params(const mn_oai_request *q, uint32_t i, mn_req_params *out)
{
    mn_req_params p = q->p;
    uint32_t at = i / q->n;
    if (at > 0 && q->more_ids)
        p.prompt_ids = q->more_ids[at - 1], p.n_prompt_ids = q->more_n_ids[at - 1];
    else if (at > 0)
        p.prompt = q->more[at - 1], p.prompt_len = q->more_len[at - 1];
    p.seed += i % q->n;
    p.id = NULL;
    return mn_req_params_copy(&p, out);
}

static mn_status bad(mn_oai_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static mn_status bad(mn_oai_error *err, const char *param, const char *fmt, ...)
{
    err->status = 400;
    err->type = "invalid_request_error";
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return MN_INVALID;
}

/* null counts as absent: clients send "temperature": null for "the default". */
static json_t *field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static mn_status number(json_t *o, const char *key, double lo, double hi, bool integer, double *out,
                        mn_oai_error *err)
{
    json_t *v = field(o, key);
    if (!v)
        return MN_OK;
    double x = json_number_value(v);
    if (!json_is_number(v) || (integer && x != floor(x)))
        return bad(err, key, "%s must be %s", key, integer ? "an integer" : "a number");
    if (!mn_json_number_within(v, lo, hi))
        return bad(err, key, "%s must be in [%.16g, %.16g]", key, lo, hi);
    *out = x;
    return MN_OK;
}

static mn_status boolean(json_t *o, const char *key, bool *out, mn_oai_error *err)
{
    json_t *v = field(o, key);
    if (v && !json_is_boolean(v))
        return bad(err, key, "%s must be true or false", key);
    if (v)
        *out = json_is_true(v);
    return MN_OK;
}

/* Fields we accept only with the value that asks for nothing. */
static mn_status neutral(json_t *o, mn_oai_error *err)
{
    static const struct {
        const char *key;
        double value;
    } numbers[] = {{"best_of", 1}, {"presence_penalty", 0}, {"frequency_penalty", 0}};
    for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++) {
        json_t *v = field(o, numbers[i].key);
        if (v && (!json_is_number(v) || json_number_value(v) != numbers[i].value))
            return bad(err, numbers[i].key, "%s: only %g is supported", numbers[i].key, numbers[i].value);
    }
    json_t *v;
    if ((v = field(o, "echo")) && !json_is_false(v))
        return bad(err, "echo", "echo: only false is supported");
    if ((v = field(o, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
        return bad(err, "logit_bias", "logit_bias is not supported");
    if ((v = field(o, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
        return bad(err, "suffix", "suffix is not supported");
    if ((v = field(o, "tools")) && !(json_is_array(v) && json_array_size(v) == 0))
        return bad(err, "tools", "tools are not supported");
    if ((v = field(o, "functions")) && !(json_is_array(v) && json_array_size(v) == 0))
        return bad(err, "functions", "functions are not supported");
    if ((v = field(o, "tool_choice")) && !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
        return bad(err, "tool_choice", "tool_choice: only \"none\" is supported");
    json_t *fmt = field(o, "response_format");
    if (fmt && !(json_is_object(fmt) && json_is_string(json_object_get(fmt, "type")) &&
                 !strcmp(json_string_value(json_object_get(fmt, "type")), "text")))
        return bad(err, "response_format", "response_format: only {\"type\": \"text\"} is supported");
    if ((v = field(o, "user")) && !json_is_string(v))
        return bad(err, "user", "user must be a string");
    return MN_OK;
}

static bool has_nul(json_t *s) { return strlen(json_string_value(s)) != json_string_length(s); }

static mn_status stops(json_t *o, mn_req_params *p, mn_oai_error *err)
{
    json_t *stop = field(o, "stop");
    if (!stop)
        return MN_OK;
    json_t *one = json_is_string(stop) ? stop : NULL;
    if (!one && !json_is_array(stop))
        return bad(err, "stop", "stop must be a string or a list of strings");
    size_t n = one ? 1 : json_array_size(stop);
    if (n > MN_PROTO_MAX_STOP)
        return bad(err, "stop", "stop takes at most %d strings", MN_PROTO_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *v = one ? one : json_array_get(stop, i);
        if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > MN_PROTO_MAX_STOP_LEN ||
            has_nul(v))
            return bad(err, "stop", "each stop string must have 1..%d bytes and no \\u0000", MN_PROTO_MAX_STOP_LEN);
        if (!(p->stop[p->n_stop] = mn_strndup(json_string_value(v), json_string_length(v))))
            return bad(err, NULL, "out of memory");
        p->n_stop++;
    }
    return MN_OK;
}

/* A message's content: a string, or a list of {"type": "text", "text": ...} parts (joined). */
static mn_status content(json_t *c, size_t i, char **out, size_t *len, mn_oai_error *err)
{
    if (json_is_string(c) || !c) {
        *len = c ? json_string_length(c) : 0;
        *out = mn_strndup(c ? json_string_value(c) : "", *len);
        return *out ? MN_OK : bad(err, NULL, "out of memory");
    }
    if (!json_is_array(c))
        return bad(err, "messages", "messages[%zu].content must be a string or a list of text parts", i);
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text))
            return bad(err, "messages", "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} parts "
                       "are supported", i, k);
        total += json_string_length(text);
    }
    if (!(*out = mn_malloc(total + 1)))
        return bad(err, NULL, "out of memory");
    *len = 0;
    json_array_foreach(c, k, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(*out + *len, json_string_value(text), json_string_length(text));
        *len += json_string_length(text);
    }
    (*out)[*len] = 0;
    return MN_OK;
}

/* messages -> the prompt, in the model's chat format. */
static mn_status render(json_t *o, const mn_oai_config *cfg, mn_req_params *p, mn_oai_error *err)
{
    json_t *msgs = json_object_get(o, "messages");
    size_t n = json_array_size(msgs);
    if (!json_is_array(msgs) || n == 0)
        return bad(err, "messages", "messages must be a non-empty list");
    mn_chat_msg *m = mn_calloc(n, sizeof *m);
    char **texts = mn_calloc(n, sizeof *texts);
    mn_status st = m && texts ? MN_OK : bad(err, NULL, "out of memory");
    for (size_t i = 0; st == MN_OK && i < n; i++) {
        json_t *msg = json_array_get(msgs, i), *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role)) {
            st = bad(err, "messages", "messages[%zu] must be an object with a string role", i);
            break;
        }
        if (has_nul(role)) {
            st = bad(err, "messages", "messages[%zu].role must not contain \\u0000", i);
            break;
        }
        m[i].role = !strcmp(json_string_value(role), "developer") ? "system" : json_string_value(role);
        st = content(field(msg, "content"), i, &texts[i], &m[i].content_len, err);
        m[i].content = texts[i];
    }
    mn_err e;
    if (st == MN_OK && mn_chat_render(cfg->chat, m, n, &p->prompt, &p->prompt_len, &e) != MN_OK)
        st = bad(err, "messages", "%s", e.msg);
    for (size_t i = 0; texts && i < n; i++)
        mn_free(texts[i]);
    mn_free(texts);
    mn_free(m);
    p->parse_special = true;
    p->end_of_turn = mn_chat_end_of_turn(cfg->chat);
    return st;
}

/* A token prompt: a non-empty list of integers (ids; the engine checks them against its vocabulary)
 * into *ids, *n (owned). */
static mn_status token_prompt(json_t *v, int32_t **ids, uint32_t *n, mn_oai_error *err)
{
    size_t len = json_array_size(v);
    if (len == 0)
        return bad(err, "prompt", "prompt must not be empty");
    if (len > UINT32_MAX || !(*ids = mn_malloc(len * sizeof **ids)))
        return bad(err, NULL, "out of memory");
    *n = (uint32_t)len;
    for (size_t i = 0; i < len; i++) {
        json_t *t = json_array_get(v, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return bad(err, "prompt", "a token prompt is a list of token ids (integers from 0)");
        (*ids)[i] = (int32_t)json_integer_value(t);
    }
    return MN_OK;
}

/* prompt: a string, a list of token ids, or a list of either (each a choice's, or n choices'). */
static mn_status prompt(json_t *o, mn_oai_request *q, mn_oai_error *err)
{
    json_t *v = json_object_get(o, "prompt");
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) /* one token prompt */
        return token_prompt(v, &q->p.prompt_ids, &q->p.n_prompt_ids, err);
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (n == 0 || n > MN_OAI_MAX_CHOICES)
        return bad(err, "prompt", "prompt must be a string, a list of token ids or a list of 1 to %d of either",
                   MN_OAI_MAX_CHOICES);
    bool ids = json_is_array(first);
    if (n > 1 && (ids ? !(q->more_ids = mn_calloc(n - 1, sizeof *q->more_ids)) ||
                            !(q->more_n_ids = mn_calloc(n - 1, sizeof *q->more_n_ids))
                      : !(q->more = mn_calloc(n - 1, sizeof *q->more)) ||
                            !(q->more_len = mn_calloc(n - 1, sizeof *q->more_len))))
        return bad(err, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        mn_status st;
        if (ids) {
            if (!json_is_array(s))
                return bad(err, "prompt", "a list of token prompts holds only lists of token ids");
            st = i == 0 ? token_prompt(s, &q->p.prompt_ids, &q->p.n_prompt_ids, err)
                        : token_prompt(s, &q->more_ids[i - 1], &q->more_n_ids[i - 1], err);
            q->n_prompts = (uint32_t)i + 1; /* what token_prompt allocated is freed with the request */
            if (st != MN_OK)
                return st;
            continue;
        }
        if (!json_is_string(s))
            return bad(err, "prompt", "prompt must be a string, a list of token ids or a list of either");
        if (json_string_length(s) == 0)
            return bad(err, "prompt", "prompt must not be empty");
        size_t len = json_string_length(s);
        char *text = mn_strndup(json_string_value(s), len);
        if (!text)
            return bad(err, NULL, "out of memory");
        if (i == 0)
            q->p.prompt = text, q->p.prompt_len = len;
        else
            q->more[i - 1] = text, q->more_len[i - 1] = len;
        q->n_prompts = (uint32_t)i + 1;
    }
    return MN_OK;
}

/* logprobs: completions take an integer 0..5 (alternatives per token), chat a boolean with
 * top_logprobs beside it. */
static mn_status logprobs(json_t *o, mn_oai_kind kind, mn_req_params *p, mn_oai_error *err)
{
    double top = 0;
    if (kind == MN_OAI_COMPLETION) {
        if (number(o, "logprobs", 0, MN_PROTO_MAX_TOP_LOGPROBS, true, &top, err) != MN_OK)
            return MN_INVALID;
        p->logprobs = field(o, "logprobs") != NULL;
    } else if (boolean(o, "logprobs", &p->logprobs, err) != MN_OK ||
               number(o, "top_logprobs", 0, MN_PROTO_MAX_TOP_LOGPROBS, true, &top, err) != MN_OK) {
        return MN_INVALID;
    } else if (top > 0 && !p->logprobs) {
        return bad(err, "top_logprobs", "top_logprobs needs logprobs: true");
    }
    p->top_logprobs = (uint32_t)top;
    return MN_OK;
}

/* The extension fields, as the JSON-lines protocol has them. */
static mn_status extensions(json_t *o, mn_req_params *p, mn_oai_error *err)
{
    p->speculate = true;
    if (boolean(o, "speculate", &p->speculate, err) != MN_OK)
        return MN_INVALID;
    double max_len = MN_PROTO_MAX_SPEC_LEN;
    json_t *spec = field(o, "spec");
    if (spec && !json_is_object(spec))
        return bad(err, "spec", "spec must be an object such as {\"max_len\": 4}");
    if (spec && number(spec, "max_len", 0, MN_PROTO_MAX_SPEC_LEN, true, &max_len, err) != MN_OK)
        return MN_INVALID;
    p->spec_max_len = (uint32_t)max_len;
    return MN_OK;
}

static mn_status parse_object(json_t *o, mn_oai_kind kind, const mn_oai_config *cfg, mn_oai_request *q,
                              mn_oai_error *err)
{
    mn_req_params *p = &q->p;
    json_t *model = field(o, "model");
    if (model && !json_is_string(model))
        return bad(err, "model", "model must be a string");
    if (!(q->model = mn_strndup(model ? json_string_value(model) : "", model ? json_string_length(model) : 0)))
        return bad(err, NULL, "out of memory");
    /* OpenAI's defaults: 16 tokens for a completion, as many as fit for a chat; temperature 1 */
    double max_tokens = kind == MN_OAI_COMPLETION && cfg->max_tokens_limit > 16 ? 16 : cfg->max_tokens_limit;
    double temperature = 1, top_p = 1, seed = 0;
    const char *max_key = kind == MN_OAI_CHAT && field(o, "max_completion_tokens") ? "max_completion_tokens"
                                                                                    : "max_tokens";
    if (number(o, max_key, 1, cfg->max_tokens_limit, true, &max_tokens, err) != MN_OK ||
        number(o, "temperature", 0, 2, false, &temperature, err) != MN_OK ||
        number(o, "top_p", 1e-6, 1, false, &top_p, err) != MN_OK ||
        number(o, "seed", -9007199254740992.0, 9007199254740992.0, true, &seed, err) != MN_OK ||
        boolean(o, "stream", &p->stream, err) != MN_OK || neutral(o, err) != MN_OK ||
        logprobs(o, kind, p, err) != MN_OK || extensions(o, p, err) != MN_OK)
        return MN_INVALID;
    json_t *opts = field(o, "stream_options");
    if (opts && (!json_is_object(opts) || boolean(opts, "include_usage", &q->include_usage, err) != MN_OK))
        return err->status ? MN_INVALID : bad(err, "stream_options", "stream_options must be an object");
    p->max_tokens = (uint32_t)max_tokens;
    p->max_tokens_fit = kind == MN_OAI_CHAT && !field(o, max_key);
    p->temperature = (float)temperature;
    p->top_p = (float)top_p;
    p->seed = (uint64_t)(int64_t)seed;
    q->seeded = field(o, "seed") != NULL;
    if (stops(o, p, err) != MN_OK)
        return MN_INVALID;
    double n = 1;
    if (number(o, "n", 1, MN_OAI_MAX_CHOICES, true, &n, err) != MN_OK)
        return MN_INVALID;
    q->n = (uint32_t)n;
    q->n_prompts = 1;
    if ((kind == MN_OAI_CHAT ? render(o, cfg, p, err) : prompt(o, q, err)) != MN_OK)
        return MN_INVALID;
    if (kind == MN_OAI_CHAT && mn_req_params_add_turn_stop(p, cfg->chat) != MN_OK)
        return bad(err, NULL, "out of memory");
    if (mn_oai_choices(q) > MN_OAI_MAX_CHOICES)
        return bad(err, "n", "%u prompts x n = %u: at most %d choices", q->n_prompts, mn_oai_choices(q),
                   MN_OAI_MAX_CHOICES);
    return MN_OK;
}

mn_status mn_oai_parse(mn_oai_kind kind, const char *body, size_t len, const mn_oai_config *cfg, mn_oai_request *out,
                       mn_oai_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->kind = kind;
    if (memchr(body, 0, len))
        return bad(err, NULL, "the body contains a NUL byte");
    json_error_t jerr;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!o)
        return bad(err, NULL, "the body is not JSON: line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    mn_status st = json_is_object(o) ? parse_object(o, kind, cfg, out, err) : bad(err, NULL, "the body must be "
                                                                                              "a JSON object");
    json_decref(o);
    if (st != MN_OK)
        mn_oai_request_free(out);
    return st;
}

/* ---- responses ------------------------------------------------------------------------------- */

static char *dump(json_t *o, const char *prefix, const char *suffix, size_t *len)
{
    char *s = NULL;
    char *j = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(7)) : NULL;
    json_decref(o);
    if (j) {
        size_t a = strlen(prefix), n = strlen(j), b = strlen(suffix);
        if ((s = mn_malloc(a + n + b + 1))) {
            memcpy(s, prefix, a);
            memcpy(s + a, j, n);
            memcpy(s + a + n, suffix, b + 1);
            *len = a + n + b;
        }
        free(j); /* jansson allocates with the system allocator */
    }
    return s;
}

static json_t *bytes_json(const char *s, size_t len)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < len; i++)
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

/* Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. */
static json_t *completion_logprobs(const mn_oai_result *res)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offsets = json_array();
    size_t offset = res->text_offset;
    for (size_t i = 0; i < res->n_logprobs; i++) {
        const mn_oai_logprob *l = &res->logprobs[i];
        json_array_append_new(tokens, mn_json_utf8(l->text, l->len));
        json_array_append_new(lps, json_real(l->logprob));
        json_array_append_new(offsets, json_integer((json_int_t)offset));
        offset += l->len;
        json_t *top = json_object();
        for (uint32_t k = 0; top && k < l->n_top; k++) { /* most likely first */
            json_t *key = mn_json_utf8(l->top[k].text, l->top[k].len);
            /* tokens that are parts of one UTF-8 character all show as U+FFFD: the first keeps it */
            if (key && !json_object_get(top, json_string_value(key)))
                json_object_set_new(top, json_string_value(key), json_real(l->top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offsets);
}

/* Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}. */
static json_t *chat_logprobs(const mn_oai_result *res)
{
    json_t *content = json_array();
    for (size_t i = 0; i < res->n_logprobs; i++) {
        const mn_oai_logprob *l = &res->logprobs[i];
        json_t *top = json_array();
        for (uint32_t k = 0; k < l->n_top; k++)
            json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", mn_json_utf8(l->top[k].text, l->top[k].len),
                                                 "logprob", (double)l->top[k].logprob, "bytes",
                                                 bytes_json(l->top[k].text, l->top[k].len)));
        json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token", mn_json_utf8(l->text, l->len),
                                                 "logprob", (double)l->logprob, "bytes", bytes_json(l->text, l->len),
                                                 "top_logprobs", top));
    }
    return json_pack("{s:o}", "content", content);
}

static json_t *usage_json(const mn_oai_result *res)
{
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)res->prompt_tokens, "completion_tokens",
                     (json_int_t)res->completion_tokens, "total_tokens",
                     (json_int_t)res->prompt_tokens + res->completion_tokens);
}

/* The object every body starts with: id, object, created, model. */
static json_t *head(const mn_oai_result *res, const char *object)
{
    return json_pack("{s:o, s:s, s:I, s:o}", "id", mn_json_utf8(res->id, strlen(res->id)), "object", object,
                     "created", (json_int_t)res->created, "model", mn_json_utf8(res->model, strlen(res->model)));
}

/* choices[0]: a response's (message / text) or a chunk's (delta / text). */
static json_t *choice(const mn_oai_result *res, bool chunk)
{
    json_t *text = mn_json_utf8(res->text, res->text_len);
    json_t *c = json_pack("{s:I, s:o, s:o}", "index", (json_int_t)res->index, "logprobs",
                          !res->logprobs ? json_null()
                          : res->kind == MN_OAI_CHAT ? chat_logprobs(res)
                                                     : completion_logprobs(res),
                          "finish_reason", res->finish_reason ? json_string(res->finish_reason) : json_null());
    if (!c) {
        json_decref(text);
        return NULL;
    }
    if (res->kind == MN_OAI_COMPLETION) {
        json_object_set_new(c, "text", text);
    } else if (!chunk) {
        json_object_set_new(c, "message", json_pack("{s:s, s:o}", "role", "assistant", "content", text));
    } else {
        json_t *delta = json_object();
        if (res->first)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (res->text_len || res->first)
            json_object_set_new(delta, "content", text);
        else
            json_decref(text);
        json_object_set_new(c, "delta", delta);
    }
    return c;
}

/* "minions": {"spec": ...}, where res carries speculation figures. */
static void extension(json_t *o, const mn_oai_result *res)
{
    if (o && res->spec)
        json_object_set_new(o, "minions", json_pack("{s:o}", "spec", mn_proto_spec_json(res->spec)));
}

/* A body with the choices res[0..n) (a chunk has one). */
static json_t *body(const mn_oai_result *res, size_t n, bool chunk)
{
    const char *object = res->kind == MN_OAI_COMPLETION ? "text_completion"
                         : chunk                        ? "chat.completion.chunk"
                                                        : "chat.completion";
    json_t *o = head(res, object), *choices = json_array();
    for (size_t i = 0; choices && i < n; i++)
        json_array_append_new(choices, choice(&res[i], chunk));
    if (!o || !choices) {
        json_decref(o);
        json_decref(choices);
        return NULL;
    }
    json_object_set_new(o, "choices", choices);
    if (res->usage)
        json_object_set_new(o, "usage", usage_json(res));
    extension(o, res);
    return o;
}

char *mn_oai_response(const mn_oai_result *res, size_t n, size_t *len)
{
    return dump(body(res, n, false), "", "", len);
}

char *mn_oai_chunk(const mn_oai_result *res, size_t *len) { return dump(body(res, 1, true), "data: ", "\n\n", len); }

char *mn_oai_usage_chunk(const mn_oai_result *res, size_t *len)
{
    json_t *o = head(res, res->kind == MN_OAI_COMPLETION ? "text_completion" : "chat.completion.chunk");
    if (o) {
        json_object_set_new(o, "choices", json_array());
        json_object_set_new(o, "usage", usage_json(res));
    }
    extension(o, res);
    return dump(o, "data: ", "\n\n", len);
}

char *mn_oai_error_body(const mn_oai_error *err, size_t *len)
{
    json_t *param = err->param[0] ? mn_json_utf8(err->param, strlen(err->param)) : json_null();
    return dump(json_pack("{s:{s:o, s:s, s:o, s:n}}", "error", "message",
                          mn_json_utf8(err->message, strlen(err->message)), "type", err->type ? err->type : "error",
                          "param", param, "code"),
                "", "", len);
}

char *mn_oai_models(const char *name, int64_t created, size_t *len)
{
    return dump(json_pack("{s:s, s:[{s:o, s:s, s:I, s:s}]}", "object", "list", "data", "id",
                          mn_json_utf8(name, strlen(name)), "object", "model", "created", (json_int_t)created,
                          "owned_by", "minions"),
                "", "", len);
}
