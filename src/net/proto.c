/* proto.c - parsing and formatting the JSON-lines client protocol with jansson. */
#include "net/proto.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/alloc.h"

const char *mn_errcode_name(mn_errcode code)
{
    switch (code) {
    case MN_E_INVALID_JSON: return "invalid_json";
    case MN_E_INVALID_REQUEST: return "invalid_request";
    case MN_E_LINE_TOO_LONG: return "line_too_long";
    case MN_E_BUSY: return "busy";
    case MN_E_UNKNOWN_ID: return "unknown_id";
    case MN_E_INTERNAL: return "internal";
    }
    return "internal";
}

void mn_req_params_free(mn_req_params *p)
{
    mn_free(p->id);
    mn_free(p->prompt);
    mn_free(p->prompt_ids);
    for (uint32_t i = 0; i < p->n_stop; i++)
        mn_free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

mn_status mn_req_params_add_turn_stop(mn_req_params *p, mn_chat_format f)
{
    const char *t = mn_chat_turn_stop(f);
    if (!t || p->n_stop > MN_PROTO_MAX_STOP)
        return MN_OK;
    if (!(p->stop[p->n_stop] = mn_strndup(t, strlen(t))))
        return MN_NOMEM;
    p->n_stop++;
    return MN_OK;
}

mn_status mn_req_params_copy(const mn_req_params *src, mn_req_params *dst)
{
    *dst = *src;
    dst->id = src->id ? mn_strndup(src->id, strlen(src->id)) : NULL;
    dst->prompt = src->prompt ? mn_malloc(src->prompt_len + 1) : NULL;
    if (dst->prompt) {
        memcpy(dst->prompt, src->prompt, src->prompt_len);
        dst->prompt[src->prompt_len] = 0;
    }
    dst->prompt_ids = src->prompt_ids ? mn_malloc((size_t)src->n_prompt_ids * sizeof *src->prompt_ids) : NULL;
    if (dst->prompt_ids)
        memcpy(dst->prompt_ids, src->prompt_ids, (size_t)src->n_prompt_ids * sizeof *src->prompt_ids);
    bool ok = (dst->id || !src->id) && (dst->prompt || !src->prompt) && (dst->prompt_ids || !src->prompt_ids);
    for (uint32_t i = 0; i < src->n_stop; i++)
        ok &= (dst->stop[i] = mn_strndup(src->stop[i], strlen(src->stop[i]))) != NULL;
    if (ok)
        return MN_OK;
    mn_req_params_free(dst);
    return MN_NOMEM;
}

void mn_line_free(mn_line *l)
{
    mn_req_params_free(&l->req);
    mn_free(l->cancel_id);
    l->cancel_id = NULL;
}

static int utf8_seq(const unsigned char *s, size_t avail);

/* Copy s[0..len) into dst[cap] as valid UTF-8, stopping before the first character that does not
 * fit: bytes that are not UTF-8 become U+FFFD, and a character cut short by the end of s is dropped.
 * The fields of mn_proto_error go back to the client in a JSON reply, and what fills them (a client's
 * id, jansson's error text quoting the bad line) may be cut or not be UTF-8 at all. */
static void utf8_copy(char *dst, size_t cap, const char *s, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        int n = utf8_seq((const unsigned char *)s + i, len - i);
        if (n < 0)
            break;
        const char *c = n ? s + i : "\xef\xbf\xbd";
        size_t k = n ? (size_t)n : 3;
        if (o + k >= cap)
            break;
        memcpy(dst + o, c, k);
        o += k;
        i += n ? (size_t)n : 1;
    }
    dst[o] = 0;
}

static mn_status bad(mn_proto_error *err, mn_errcode code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static mn_status bad(mn_proto_error *err, mn_errcode code, const char *fmt, ...)
{
    char msg[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    utf8_copy(err->message, sizeof err->message, msg, strlen(msg));
    return MN_INVALID;
}

/* JSON_ALLOW_NUL lets "\u0000" into strings. Only the prompt keeps its length; ids and stop strings
 * are C strings downstream (compared with strcmp, searched by strlen), where a NUL would quietly
 * cut them: "a\u0000b" would cancel "a". */
static bool has_nul(json_t *str)
{
    return strlen(json_string_value(str)) != json_string_length(str);
}

bool mn_json_number_within(const json_t *v, double lo, double hi)
{
    if (json_is_integer(v))
        return json_integer_value(v) >= (json_int_t)ceil(lo) && json_integer_value(v) <= (json_int_t)floor(hi);
    double x = json_number_value(v);
    return x >= lo && x <= hi;
}

/* A number field within [lo, hi]; integral when `integer` (then lo and hi are whole numbers, at
 * most 2^53). Absent: keep *out. key may be a path ("spec.max_len"): obj holds its last part, and
 * messages name it whole. */
static mn_status num_field(json_t *obj, const char *key, double lo, double hi, bool integer, double *out,
                           mn_proto_error *err)
{
    const char *dot = strrchr(key, '.');
    json_t *v = json_object_get(obj, dot ? dot + 1 : key);
    if (!v)
        return MN_OK;
    if (!json_is_number(v))
        return bad(err, MN_E_INVALID_REQUEST, "%s must be a number", key);
    double x = json_number_value(v);
    if (integer && (!json_is_integer(v) && x != floor(x)))
        return bad(err, MN_E_INVALID_REQUEST, "%s must be an integer", key);
    if (!mn_json_number_within(v, lo, hi))
        return bad(err, MN_E_INVALID_REQUEST, "%s must be in [%.16g, %.16g]", key, lo, hi);
    *out = x;
    return MN_OK;
}

/* messages: a non-empty list of {"role": string, "content": string} (mn_chat_render checks the roles). */
static mn_status check_messages(json_t *messages, mn_proto_error *err)
{
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return bad(err, MN_E_INVALID_REQUEST, "messages must be a non-empty list of {\"role\", \"content\"}");
    if (json_array_size(messages) > MN_PROTO_MAX_MESSAGES)
        return bad(err, MN_E_INVALID_REQUEST, "messages takes at most %d messages", MN_PROTO_MAX_MESSAGES);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_object(m) || json_object_size(m) != 2 || !json_is_string(role) || !json_is_string(content))
            return bad(err, MN_E_INVALID_REQUEST, "messages[%zu] must be {\"role\": string, \"content\": string}", i);
        if (has_nul(role))
            return bad(err, MN_E_INVALID_REQUEST, "messages[%zu].role must not contain \\u0000", i);
    }
    return MN_OK;
}

/* messages -> p->prompt in the model's chat format, whose control-token texts are those tokens. */
static mn_status render(json_t *messages, mn_chat_format chat, mn_req_params *p, mn_proto_error *err)
{
    size_t n = json_array_size(messages);
    mn_chat_msg m[MN_PROTO_MAX_MESSAGES];
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(messages, i), *content = json_object_get(msg, "content");
        m[i] = (mn_chat_msg){.role = json_string_value(json_object_get(msg, "role")),
                             .content = json_string_value(content),
                             .content_len = json_string_length(content)};
    }
    mn_err e;
    mn_status st = mn_chat_render(chat, m, n, &p->prompt, &p->prompt_len, &e);
    if (st != MN_OK)
        return bad(err, st == MN_NOMEM ? MN_E_INTERNAL : MN_E_INVALID_REQUEST, "%s", e.msg);
    p->parse_special = true;
    p->end_of_turn = mn_chat_end_of_turn(chat);
    return MN_OK;
}

static mn_status parse_request(json_t *o, uint32_t limit, mn_chat_format chat, mn_req_params *p,
                               mn_proto_error *err)
{
    static const char *known[] = {"id",   "prompt", "messages", "max_tokens", "temperature", "top_p",
                                  "seed", "stop",   "stream",   "speculate",  "spec",        "return_tokens"};
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        size_t i = 0;
        while (i < sizeof known / sizeof *known && strcmp(key, known[i]))
            i++;
        if (i == sizeof known / sizeof *known)
            return bad(err, MN_E_INVALID_REQUEST, "unknown field '%.*s'",
                       (int)mn_utf8_complete_len(key, strnlen(key, 60)), key); /* 60 bytes, whole characters */
    }
    json_t *prompt = json_object_get(o, "prompt"), *messages = json_object_get(o, "messages");
    if (prompt && messages)
        return bad(err, MN_E_INVALID_REQUEST, "a request has a prompt or messages, not both");
    if (!messages && !json_is_string(prompt))
        return bad(err, MN_E_INVALID_REQUEST, "prompt must be a string");
    if (!messages && json_string_length(prompt) == 0)
        return bad(err, MN_E_INVALID_REQUEST, "prompt must not be empty");
    if (messages && check_messages(messages, err) != MN_OK)
        return MN_INVALID;
    double max_tokens = 64, temperature = 0, top_p = 1, seed = 0;
    if (num_field(o, "max_tokens", 1, limit, true, &max_tokens, err) ||
        num_field(o, "temperature", 0, 100, false, &temperature, err) ||
        num_field(o, "top_p", 1e-6, 1, false, &top_p, err) ||
        num_field(o, "seed", 0, 9007199254740992.0, true, &seed, err))
        return MN_INVALID;
    json_t *stream = json_object_get(o, "stream");
    if (stream && !json_is_boolean(stream))
        return bad(err, MN_E_INVALID_REQUEST, "stream must be true or false");
    json_t *return_tokens = json_object_get(o, "return_tokens");
    if (return_tokens && !json_is_boolean(return_tokens))
        return bad(err, MN_E_INVALID_REQUEST, "return_tokens must be true or false");
    json_t *speculate = json_object_get(o, "speculate");
    if (speculate && !json_is_boolean(speculate))
        return bad(err, MN_E_INVALID_REQUEST, "speculate must be true or false");
    double spec_max_len = 0;
    json_t *spec = json_object_get(o, "spec");
    if (spec) {
        if (!json_is_object(spec))
            return bad(err, MN_E_INVALID_REQUEST, "spec must be an object such as {\"max_len\": 4}");
        json_object_foreach(spec, key, v)
            if (strcmp(key, "max_len"))
                return bad(err, MN_E_INVALID_REQUEST, "unknown field 'spec.%.*s'",
                           (int)mn_utf8_complete_len(key, strnlen(key, 60)), key);
        if (num_field(spec, "spec.max_len", 0, MN_PROTO_MAX_SPEC_LEN, true, &spec_max_len, err))
            return MN_INVALID;
    }
    json_t *stop = json_object_get(o, "stop");
    if (stop && !json_is_array(stop))
        return bad(err, MN_E_INVALID_REQUEST, "stop must be a list of strings");
    if (stop && json_array_size(stop) > MN_PROTO_MAX_STOP)
        return bad(err, MN_E_INVALID_REQUEST, "stop takes at most %d strings", MN_PROTO_MAX_STOP);
    size_t i;
    json_array_foreach(stop, i, v) {
        if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > MN_PROTO_MAX_STOP_LEN)
            return bad(err, MN_E_INVALID_REQUEST, "stop[%zu] must be a string of 1..%d bytes", i,
                       MN_PROTO_MAX_STOP_LEN);
        if (has_nul(v))
            return bad(err, MN_E_INVALID_REQUEST, "stop[%zu] must not contain \\u0000", i);
    }
    p->id = mn_strndup(json_string_value(json_object_get(o, "id")), json_string_length(json_object_get(o, "id")));
    if (messages) {
        if (render(messages, chat, p, err) != MN_OK) {
            mn_req_params_free(p);
            return MN_INVALID;
        }
    } else {
        p->prompt_len = json_string_length(prompt);
        if ((p->prompt = mn_malloc(p->prompt_len + 1)))
            memcpy(p->prompt, json_string_value(prompt), p->prompt_len + 1);
    }
    p->max_tokens = (uint32_t)max_tokens;
    p->temperature = (float)temperature;
    p->top_p = (float)top_p;
    p->seed = (uint64_t)seed;
    p->stream = stream && json_is_true(stream);
    p->speculate = !speculate || json_is_true(speculate);
    p->return_tokens = return_tokens && json_is_true(return_tokens);
    p->spec_max_len = spec && json_object_get(spec, "max_len") ? (uint32_t)spec_max_len : MN_PROTO_MAX_SPEC_LEN;
    json_array_foreach(stop, i, v) {
        p->stop[i] = mn_strndup(json_string_value(v), json_string_length(v));
        p->n_stop = (uint32_t)i + 1;
        if (!p->stop[i])
            break;
    }
    if (!p->id || !p->prompt || p->n_stop != (stop ? json_array_size(stop) : 0) ||
        (messages && mn_req_params_add_turn_stop(p, chat) != MN_OK)) {
        mn_req_params_free(p);
        return bad(err, MN_E_INTERNAL, "out of memory");
    }
    return MN_OK;
}

mn_status mn_proto_parse(const char *line, size_t len, uint32_t limit, mn_chat_format chat, mn_line *out,
                         mn_proto_error *err)
{
    memset(out, 0, sizeof *out);
    err->id[0] = 0;
    /* A raw NUL is never JSON, yet jansson skips one that follows a number or a literal (its stream
     * takes a NUL in its unget buffer for "empty"), so "5\0}" would load as 5. An escaped "\u0000"
     * inside a string is another matter: JSON_ALLOW_NUL keeps it. */
    const char *nul = memchr(line, 0, len);
    if (nul)
        return bad(err, MN_E_INVALID_JSON, "the line contains a NUL byte at offset %zu", (size_t)(nul - line));
    json_error_t jerr;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!o && json_error_code(&jerr) == json_error_numeric_overflow) /* an integer past 64 bits (a */
        o = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &jerr);
    if (!o)                                                          /* seed): refused with the id */
        return bad(err, MN_E_INVALID_JSON, "column %d: %s", jerr.column, jerr.text);
    mn_status st = MN_INVALID;
    if (!json_is_object(o)) {
        bad(err, MN_E_INVALID_JSON, "a line must be a JSON object");
        goto out;
    }
    json_t *cancel = json_object_get(o, "cancel");
    if (cancel) {
        if (!json_is_string(cancel) || json_object_size(o) != 1) {
            bad(err, MN_E_INVALID_REQUEST, "a cancel line is {\"cancel\": \"<id>\"} and nothing else");
            goto out;
        }
        if (has_nul(cancel)) {
            bad(err, MN_E_INVALID_REQUEST, "cancel must not contain \\u0000");
            goto out;
        }
        utf8_copy(err->id, sizeof err->id, json_string_value(cancel), json_string_length(cancel));
        out->kind = MN_LINE_CANCEL;
        if (!(out->cancel_id = mn_strndup(json_string_value(cancel), json_string_length(cancel)))) {
            bad(err, MN_E_INTERNAL, "out of memory");
            goto out;
        }
        st = MN_OK;
        goto out;
    }
    json_t *id = json_object_get(o, "id");
    if (!json_is_string(id) || json_string_length(id) == 0 || json_string_length(id) > MN_PROTO_MAX_ID_LEN ||
        has_nul(id)) {
        bad(err, MN_E_INVALID_REQUEST, "id must be a string of 1..%d bytes", MN_PROTO_MAX_ID_LEN);
        goto out;
    }
    utf8_copy(err->id, sizeof err->id, json_string_value(id), json_string_length(id));
    out->kind = MN_LINE_REQUEST;
    st = parse_request(o, limit, chat, &out->req, err);
out:
    json_decref(o);
    return st;
}

static char *dump_line(json_t *o, size_t *len)
{
    char *s = NULL;
    if (o) {
        char *j = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        json_decref(o);
        if (j) {
            size_t n = strlen(j);
            if ((s = mn_malloc(n + 2))) {
                memcpy(s, j, n);
                s[n] = '\n';
                s[n + 1] = 0;
                *len = n + 1;
            }
            free(j); /* jansson allocates with the system allocator */
        }
    }
    return s;
}

/* Jansson refuses invalid UTF-8, and a reply must not be lost because a client's field or a
 * byte-level model put some in an id, a message or a text. */
json_t *mn_json_utf8(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (j)
        return j; /* already valid: the usual case, no copy */
    size_t n;
    char *clean = mn_utf8_sanitize(s, len, &n);
    if (clean) {
        j = json_stringn(clean, n);
        mn_free(clean);
    }
    return j;
}

/* The strings go in with "o": since jansson 2.11 json_pack releases what "o" was given even when it
 * fails, so a NULL from OOM fails the pack without a leak. */
char *mn_proto_delta(const char *id, const char *text, size_t text_len, size_t *len)
{
    return dump_line(json_pack("{s:o, s:o}", "id", mn_json_utf8(id, strlen(id)), "delta", mn_json_utf8(text, text_len)),
                     len);
}

json_t *mn_proto_spec_json(const mn_proto_spec *sp)
{
    json_t *voted = json_object();
    for (uint32_t i = 0; voted && i < sp->n_drafters; i++)
        json_object_set_new(voted, sp->names[i], json_integer(sp->voted[i]));
    double mean = sp->verifications ? (double)sp->accepted / sp->verifications : 0.0;
    return json_pack("{s:i, s:i, s:i, s:f, s:o}", "drafted", (json_int_t)sp->drafted, "accepted",
                     (json_int_t)sp->accepted, "verifications", (json_int_t)sp->verifications, "mean_accepted_len",
                     mean, "voted", voted);
}

char *mn_proto_done(const char *id, const char *text, size_t text_len, const char *finish_reason,
                    uint32_t prompt_tokens, uint32_t completion_tokens, const mn_proto_spec *spec,
                    const int32_t *tokens, size_t n_tokens, size_t *len)
{
    json_t *o = json_pack("{s:o, s:b, s:o, s:s, s:{s:i, s:i}}", "id", mn_json_utf8(id, strlen(id)), "done", 1, "text",
                          mn_json_utf8(text, text_len), "finish_reason", finish_reason, "usage", "prompt_tokens",
                          (json_int_t)prompt_tokens, "completion_tokens", (json_int_t)completion_tokens);
    if (o && spec && json_object_set_new(o, "spec", mn_proto_spec_json(spec)) != 0) {
        json_decref(o);
        o = NULL;
    }
    if (o && tokens) {
        json_t *ids = json_array();
        for (size_t i = 0; ids && i < n_tokens; i++)
            json_array_append_new(ids, json_integer(tokens[i]));
        if (json_object_set_new(o, "tokens", ids) != 0) {
            json_decref(o);
            o = NULL;
        }
    }
    return dump_line(o, len);
}

char *mn_proto_error_line(const char *id, mn_errcode code, const char *message, size_t *len)
{
    json_t *e = json_pack("{s:s, s:o}", "code", mn_errcode_name(code), "message", mn_json_utf8(message, strlen(message)));
    if (!e)
        return NULL;
    json_t *o = id && *id ? json_pack("{s:o, s:o}", "id", mn_json_utf8(id, strlen(id)), "error", e)
                          : json_pack("{s:o}", "error", e);
    return dump_line(o, len);
}

/* Whether b may follow lead byte c: overlongs, surrogates and code points past U+10FFFF are
 * refused as early as the second byte allows. */
static bool second_byte_ok(unsigned c, unsigned b)
{
    return !((c == 0xe0 && b < 0xa0) || (c == 0xed && b >= 0xa0) || (c == 0xf0 && b < 0x90) ||
             (c == 0xf4 && b >= 0x90));
}

/* The bytes of the character lead byte c starts (1..4), 0 when c starts none (a continuation
 * byte, or a lead byte of an overlong or out-of-range form: c0, c1, f5..ff). */
static int lead_len(unsigned c)
{
    return c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
}

/* Length of the valid UTF-8 sequence starting at s[0] (1..4), 0 if invalid, -1 if it may be
 * valid but is cut short by the end of the buffer. */
static int utf8_seq(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    int n = lead_len(c);
    if (n <= 1)
        return n;
    unsigned min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    unsigned cp = c & (0x3f >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((size_t)i >= avail)
            return -1;
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
        if (i == 1 && !second_byte_ok(c, s[1]))
            return 0;
    }
    return cp >= min ? n : 0;
}

/* The bytes one U+FFFD stands for where no character starts at s: a lead byte with the continuation
 * bytes that could still have completed it (Unicode's "maximal subpart": an emoji cut after three
 * of its four bytes is one U+FFFD, as Python and browsers decode it), else the one byte. */
static size_t utf8_subpart(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    size_t n = (size_t)lead_len(c), i = 1;
    while (i < n && i < avail && (s[i] & 0xc0) == 0x80 && (i > 1 || second_byte_ok(c, s[1])))
        i++;
    return i;
}

size_t mn_utf8_complete_len(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        int n = utf8_seq(u + i, len - i);
        if (n < 0)
            return i;
        i += n ? (size_t)n : 1;
    }
    return len;
}

char *mn_utf8_sanitize(const char *s, size_t len, size_t *out_len)
{
    size_t cap = len * 3 + 1, o = 0; /* each bad byte becomes at most 3 bytes */
    char *d = mn_malloc(cap);
    if (!d)
        return NULL;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        int n = utf8_seq(u + i, len - i);
        if (n > 0) {
            memcpy(d + o, s + i, (size_t)n);
            o += (size_t)n;
            i += (size_t)n;
        } else {
            memcpy(d + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += utf8_subpart(u + i, len - i);
        }
    }
    d[o] = 0;
    *out_len = o;
    return d;
}
