/* test_proto.c - the client protocol (parsing, validation, reply lines, UTF-8 helpers) and a
 * request's text bookkeeping (stop strings, what may be streamed). */
#include <criterion/criterion.h>
#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/proto.h"
#include "actors/request.h"
#include "util/alloc.h"

static mn_status parse(const char *line, mn_line *l, mn_proto_error *err)
{
    return mn_proto_parse(line, strlen(line), 4096, MN_CHAT_CHATML, l, err);
}

Test(proto, full_request)
{
    mn_line l;
    mn_proto_error err;
    cr_assert_eq(parse("{\"id\":\"r1\",\"prompt\":\"In the beginning\",\"max_tokens\":12,\"temperature\":0.5,"
                       "\"top_p\":0.9,\"seed\":7,\"stop\":[\"\\n\",\"God\"],\"stream\":true}",
                       &l, &err),
                 MN_OK, "%s", err.message);
    cr_assert_eq(l.kind, MN_LINE_REQUEST);
    cr_assert_str_eq(l.req.id, "r1");
    cr_assert_str_eq(l.req.prompt, "In the beginning");
    cr_assert_eq(l.req.max_tokens, 12);
    cr_assert_float_eq(l.req.temperature, 0.5f, 1e-6);
    cr_assert_float_eq(l.req.top_p, 0.9f, 1e-6);
    cr_assert_eq(l.req.seed, 7);
    cr_assert_eq(l.req.n_stop, 2);
    cr_assert_str_eq(l.req.stop[1], "God");
    cr_assert(l.req.stream);
    mn_line_free(&l);
}

Test(proto, defaults)
{
    mn_line l;
    mn_proto_error err;
    cr_assert_eq(parse("{\"id\":\"x\",\"prompt\":\"a\"}", &l, &err), MN_OK);
    cr_assert_eq(l.req.max_tokens, 64);
    cr_assert_eq(l.req.temperature, 0);
    cr_assert_eq(l.req.top_p, 1);
    cr_assert(!l.req.stream);
    cr_assert_eq(l.req.n_stop, 0);
    mn_line_free(&l);
}

/* "messages" is rendered in the served model's chat format, whose control tokens the prompt then
 * names (the HTTP chat API's rendering, on the JSON-lines socket). */
Test(proto, messages_render_in_the_chat_format)
{
    mn_line l;
    mn_proto_error err;
    cr_assert_eq(parse("{\"id\":\"c\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":\"What is honey?\"}],\"max_tokens\":9}",
                       &l, &err),
                 MN_OK, "%s", err.message);
    cr_assert_str_eq(l.req.prompt, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is honey?"
                                   "<|im_end|>\n<|im_start|>assistant\n");
    cr_assert_eq(l.req.prompt_len, strlen(l.req.prompt));
    cr_assert(l.req.parse_special);
    cr_assert_str_eq(l.req.end_of_turn, "<|im_end|>");
    cr_assert_eq(l.req.max_tokens, 9);
    mn_line_free(&l);
    /* a plain prompt is never parsed for control tokens */
    cr_assert_eq(parse("{\"id\":\"p\",\"prompt\":\"<|im_start|>user\"}", &l, &err), MN_OK);
    cr_assert(!l.req.parse_special);
    cr_assert_null(l.req.end_of_turn);
    cr_assert_eq(l.req.n_stop, 0, "chatml's turn ends at its token: no stop text");
    mn_line_free(&l);
    /* a model without a template: the plain format, no end-of-turn token; its turn ends where it
     * would write the next one (a stop text after the client's, of which there may be 8) */
    const char *line = "{\"id\":\"q\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}";
    cr_assert_eq(mn_proto_parse(line, strlen(line), 4096, MN_CHAT_PLAIN, &l, &err), MN_OK);
    cr_assert_str_eq(l.req.prompt, "User: Hi\nAssistant:");
    cr_assert_null(l.req.end_of_turn);
    cr_assert_eq(l.req.n_stop, 1);
    cr_assert_str_eq(l.req.stop[0], "\nUser:");
    mn_line_free(&l);
    line = "{\"id\":\"q\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
           "\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\"]}";
    cr_assert_eq(mn_proto_parse(line, strlen(line), 4096, MN_CHAT_PLAIN, &l, &err), MN_OK, "%s", err.message);
    cr_assert_eq(l.req.n_stop, 9);
    cr_assert_str_eq(l.req.stop[8], "\nUser:");
    mn_line_free(&l);
    line = "{\"id\":\"q\",\"prompt\":\"Hi\"}"; /* a prompt is no chat: no turn to end */
    cr_assert_eq(mn_proto_parse(line, strlen(line), 4096, MN_CHAT_PLAIN, &l, &err), MN_OK);
    cr_assert_eq(l.req.n_stop, 0);
    mn_line_free(&l);
}

Test(proto, cancel)
{
    mn_line l;
    mn_proto_error err;
    cr_assert_eq(parse("{\"cancel\":\"r9\"}", &l, &err), MN_OK);
    cr_assert_eq(l.kind, MN_LINE_CANCEL);
    cr_assert_str_eq(l.cancel_id, "r9");
    mn_line_free(&l);
    cr_assert_eq(parse("{\"cancel\":\"r9\",\"prompt\":\"x\"}", &l, &err), MN_INVALID);
    cr_assert_eq(err.code, MN_E_INVALID_REQUEST);
}

/* Each bad line gets its code and a message naming the field. */
Test(proto, errors_name_the_field)
{
    static const struct {
        const char *line;
        mn_errcode code;
        const char *needle;
    } cases[] = {
        {"not json", MN_E_INVALID_JSON, ""},
        {"[1,2]", MN_E_INVALID_JSON, "object"},
        {"{\"id\":\"a\",\"prompt\":\"x\"", MN_E_INVALID_JSON, ""},
        {"{\"prompt\":\"x\"}", MN_E_INVALID_REQUEST, "id"},
        {"{\"id\":7,\"prompt\":\"x\"}", MN_E_INVALID_REQUEST, "id"},
        {"{\"id\":\"\",\"prompt\":\"x\"}", MN_E_INVALID_REQUEST, "id"},
        {"{\"id\":\"a\"}", MN_E_INVALID_REQUEST, "prompt"},
        {"{\"id\":\"a\",\"prompt\":\"\"}", MN_E_INVALID_REQUEST, "prompt"},
        {"{\"id\":\"a\",\"prompt\":3}", MN_E_INVALID_REQUEST, "prompt"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":0}", MN_E_INVALID_REQUEST, "max_tokens"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":5000}", MN_E_INVALID_REQUEST, "max_tokens"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":2.5}", MN_E_INVALID_REQUEST, "max_tokens"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":\"9\"}", MN_E_INVALID_REQUEST, "max_tokens"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"temperature\":-1}", MN_E_INVALID_REQUEST, "temperature"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"top_p\":0}", MN_E_INVALID_REQUEST, "top_p"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"top_p\":1.5}", MN_E_INVALID_REQUEST, "top_p"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"seed\":-3}", MN_E_INVALID_REQUEST, "seed"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"spec\":{\"max_len\":17}}", MN_E_INVALID_REQUEST, "spec.max_len must be"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"seed\":9007199254740993}", MN_E_INVALID_REQUEST, "9007199254740992]"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"seed\":18446744073709551615}", MN_E_INVALID_REQUEST, "seed"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"seed\":1e400}", MN_E_INVALID_JSON, "overflow"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stream\":1}", MN_E_INVALID_REQUEST, "stream"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":\"\\n\"}", MN_E_INVALID_REQUEST, "stop"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"\"]}", MN_E_INVALID_REQUEST, "stop[0]"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"a\",2]}", MN_E_INVALID_REQUEST, "stop[1]"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}",
         MN_E_INVALID_REQUEST, "stop"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"max_token\":5}", MN_E_INVALID_REQUEST, "max_token"},
        {"{\"id\":\"a\",\"id\":\"b\",\"prompt\":\"x\"}", MN_E_INVALID_JSON, "duplicate"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"y\"}]}",
         MN_E_INVALID_REQUEST, "not both"},
        {"{\"id\":\"a\",\"messages\":[]}", MN_E_INVALID_REQUEST, "messages"},
        {"{\"id\":\"a\",\"messages\":{\"role\":\"user\"}}", MN_E_INVALID_REQUEST, "messages"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\"}]}", MN_E_INVALID_REQUEST, "messages[0]"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"y\"},{\"role\":1,\"content\":\"y\"}]}",
         MN_E_INVALID_REQUEST, "messages[1]"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"y\",\"name\":\"z\"}]}",
         MN_E_INVALID_REQUEST, "messages[0]"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"tool\",\"content\":\"y\"}]}", MN_E_INVALID_REQUEST, "tool"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"us\\u0000er\",\"content\":\"y\"}]}", MN_E_INVALID_REQUEST,
         "role"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mn_line l;
        mn_proto_error err;
        cr_assert_eq(parse(cases[i].line, &l, &err), MN_INVALID, "accepted: %s", cases[i].line);
        cr_assert_eq(err.code, cases[i].code, "%s: code %s", cases[i].line, mn_errcode_name(err.code));
        cr_assert(strstr(err.message, cases[i].needle), "%s: message '%s' lacks '%s'", cases[i].line, err.message,
                  cases[i].needle);
    }
}

Test(proto, error_line_carries_the_id)
{
    mn_line l;
    mn_proto_error err;
    cr_assert_eq(parse("{\"id\":\"q7\",\"prompt\":\"x\",\"top_p\":2}", &l, &err), MN_INVALID);
    cr_assert_str_eq(err.id, "q7");
    /* a seed past 64 bits is still a JSON object's field: refused with the id (jansson refuses the
     * integer itself; the line is read again with it as a real) */
    cr_assert_eq(parse("{\"id\":\"q8\",\"prompt\":\"x\",\"seed\":99999999999999999999}", &l, &err), MN_INVALID);
    cr_assert_str_eq(err.id, "q8");
    cr_assert_eq(err.code, MN_E_INVALID_REQUEST, "%s", err.message);
    cr_assert_eq(parse("{\"id\":\"q7\",\"prompt\":\"x\",\"top_p\":2}", &l, &err), MN_INVALID);
    size_t len;
    char *line = mn_proto_error_line(err.id, err.code, err.message, &len);
    cr_assert_eq(line[len - 1], '\n');
    json_t *o = json_loadb(line, len, 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(o, "id")), "q7");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "code")), "invalid_request");
    json_decref(o);
    free(line);
}

Test(proto, reply_lines_round_trip)
{
    size_t len;
    char *d = mn_proto_delta("r", "a\"b\n\xc3\xa9", 6, &len);
    json_t *o = json_loadb(d, len, 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(o, "delta")), "a\"b\n\xc3\xa9");
    json_decref(o);
    free(d);
    char *done = mn_proto_done("r", "xy", 2, "length", 3, 9, NULL, NULL, 0, &len);
    o = json_loadb(done, len, 0, NULL);
    cr_assert(json_is_true(json_object_get(o, "done")));
    cr_assert_str_eq(json_string_value(json_object_get(o, "finish_reason")), "length");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")), 9);
    json_decref(o);
    free(done);
}

/* True when s[0..n) is valid UTF-8 as jansson (the encoder of every reply) judges it. */
static bool is_utf8(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    bool ok = j != NULL;
    json_decref(j);
    return ok;
}

/* The string member `key` of reply object o equals s[0..n). */
static bool member_is(json_t *o, const char *key, const char *s, size_t n)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) && json_string_length(v) == n && !memcmp(json_string_value(v), s, n);
}

/* Issue #9: jansson refuses invalid UTF-8, so a reply carrying a client's bad bytes came back NULL
 * and the client never heard of its request again. Bad bytes become U+FFFD instead. */
Test(proto, replies_survive_invalid_utf8)
{
    size_t len;
    char *line = mn_proto_error_line("r\xe2\x82", MN_E_INVALID_REQUEST, "bad value '\xff'", &len);
    cr_assert(line, "an error reply was lost to invalid UTF-8");
    json_t *o = json_loadb(line, len, 0, NULL);
    cr_assert(member_is(o, "id", "r\xef\xbf\xbd", 4)); /* one U+FFFD for a cut character */
    cr_assert(member_is(json_object_get(o, "error"), "message", "bad value '\xef\xbf\xbd'", 15));
    json_decref(o);
    mn_free(line);

    line = mn_proto_delta("r\xc3", "a\xff", 2, &len);
    cr_assert(line, "a delta was lost to invalid UTF-8");
    o = json_loadb(line, len, 0, NULL);
    cr_assert(member_is(o, "delta", "a\xef\xbf\xbd", 4));
    json_decref(o);
    mn_free(line);

    line = mn_proto_done("r", "\xed\xa0\x80", 3, "stop", 1, 1, NULL, NULL, 0, &len);
    cr_assert(line, "a done line was lost to invalid UTF-8");
    mn_free(line);
}

/* What mn_proto_parse copies into the fixed-size fields of mn_proto_error is cut between
 * characters, never inside one, so its error reply stays valid UTF-8. */
Test(proto, error_fields_are_cut_between_characters)
{
    /* an unknown field is quoted up to 60 bytes: 59 x then an 'é' that straddles byte 60 */
    char line[200];
    snprintf(line, sizeof line, "{\"id\":\"a\",\"prompt\":\"x\",\"%.59s\xc3\xa9\":1}",
             "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    mn_line l;
    mn_proto_error err;
    cr_assert_eq(parse(line, &l, &err), MN_INVALID);
    cr_assert(is_utf8(err.message, strlen(err.message)), "message cut inside a character: %s", err.message);
    cr_assert(strstr(err.message, "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'"),
              "not cut before the 'é': %s", err.message);
    size_t len;
    char *reply = mn_proto_error_line(err.id, err.code, err.message, &len);
    cr_assert(reply, "the error reply was lost");
    mn_free(reply);

    /* a cancel id of 50 euro signs (150 bytes) keeps 42 of them (126 bytes) in err.id, not 128 */
    char cancel[200] = "{\"cancel\":\"";
    for (int i = 0; i < 50; i++)
        strcat(cancel, "\xe2\x82\xac");
    strcat(cancel, "\"}");
    cr_assert_eq(parse(cancel, &l, &err), MN_OK);
    cr_assert_eq(strlen(err.id), 126);
    cr_assert(is_utf8(err.id, strlen(err.id)));
    mn_line_free(&l);
}

/* Issue #9: jansson skips a raw NUL that follows a number or a literal, so these lines were taken
 * as max_tokens 5 and stream true. A raw NUL is never JSON: the line is refused and the NUL named. */
Test(proto, raw_nul_byte_is_refused)
{
    static const char num[] = "{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":5\0}";
    static const char lit[] = "{\"id\":\"a\",\"prompt\":\"x\",\"stream\":true\0}";
    static const char str[] = "{\"id\":\"a\",\"prompt\":\"x\0y\"}";
    const struct {
        const char *line;
        size_t len;
    } cases[] = {{num, sizeof num - 1}, {lit, sizeof lit - 1}, {str, sizeof str - 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mn_line l;
        mn_proto_error err;
        cr_assert_eq(mn_proto_parse(cases[i].line, cases[i].len, 4096, MN_CHAT_CHATML, &l, &err), MN_INVALID,
                     "case %zu: a raw NUL byte was skipped", i);
        cr_assert_eq(err.code, MN_E_INVALID_JSON);
        char needle[64];
        snprintf(needle, sizeof needle, "NUL byte at offset %zu", strlen(cases[i].line));
        cr_assert(strstr(err.message, needle), "case %zu: message '%s' lacks '%s'", i, err.message, needle);
    }
}

/* An escaped NUL is a character like any other in a prompt (kept with prompt_len), but not in an
 * id, a cancel id or a stop string: those are C strings downstream, where it would cut them short. */
Test(proto, escaped_nul_only_in_the_prompt)
{
    mn_line l;
    mn_proto_error err;
    cr_assert_eq(parse("{\"id\":\"a\",\"prompt\":\"x\\u0000y\"}", &l, &err), MN_OK, "%s", err.message);
    cr_assert_eq(l.req.prompt_len, 3);
    cr_assert(!memcmp(l.req.prompt, "x\0y", 3));
    mn_line_free(&l);
    cr_assert_eq(parse("{\"id\":\"a\\u0000b\",\"prompt\":\"x\"}", &l, &err), MN_INVALID);
    cr_assert_eq(err.code, MN_E_INVALID_REQUEST);
    cr_assert_eq(parse("{\"cancel\":\"a\\u0000b\"}", &l, &err), MN_INVALID);
    cr_assert_eq(err.code, MN_E_INVALID_REQUEST);
    cr_assert_str_eq(err.id, "", "a cut cancel id could name another request");
    cr_assert_eq(parse("{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"\\u0000\"]}", &l, &err), MN_INVALID);
    cr_assert(strstr(err.message, "stop[0]"), "%s", err.message);
}

Test(utf8, complete_len_holds_back_a_cut_character)
{
    cr_assert_eq(mn_utf8_complete_len("ab", 2), 2);
    cr_assert_eq(mn_utf8_complete_len("a\xc3", 2), 1);          /* é cut after its first byte */
    cr_assert_eq(mn_utf8_complete_len("a\xe2\x82", 3), 1);      /* € cut after two bytes */
    cr_assert_eq(mn_utf8_complete_len("a\xe2\x82\xac", 4), 4);
    cr_assert_eq(mn_utf8_complete_len("a\xff", 2), 2);          /* invalid: complete, replaced later */
    cr_assert_eq(mn_utf8_complete_len("\xc3(", 2), 2);          /* a lead byte with no continuation */
}

Test(utf8, sanitize_replaces_invalid_bytes)
{
    size_t n;
    char *s = mn_utf8_sanitize("a\xff" "b\xc3", 4, &n);
    cr_assert_str_eq(s, "a\xef\xbf\xbd" "b\xef\xbf\xbd");
    free(s);
    s = mn_utf8_sanitize("\xed\xa0\x80", 3, &n); /* a surrogate is not UTF-8 */
    cr_assert_eq(n, 9);
    free(s);
    /* a character cut short is one U+FFFD (Unicode's maximal subpart), a byte that could not
     * continue it another: an emoji's first three bytes; then followed by a letter; e0 80 (an
     * overlong's start: e0 takes a0..bf), two; a continuation byte alone, one */
    static const struct {
        const char *in, *out;
    } cut[] = {{"\xf0\x9f\x8e", "\xef\xbf\xbd"},
               {"\xf0\x9f\x8e" "A", "\xef\xbf\xbd" "A"},
               {"\xe0\x80", "\xef\xbf\xbd\xef\xbf\xbd"},
               {"\xc3\xc3\xa9", "\xef\xbf\xbd\xc3\xa9"},
               {"\x80" "a", "\xef\xbf\xbd" "a"}};
    for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
        s = mn_utf8_sanitize(cut[i].in, strlen(cut[i].in), &n);
        cr_assert_str_eq(s, cut[i].out, "case %zu", i);
        free(s);
    }
    s = mn_utf8_sanitize("ok \xe2\x82\xac", 6, &n);
    cr_assert_str_eq(s, "ok \xe2\x82\xac");
    free(s);
}

/* ---- fuzzing: mn_proto_parse and the reply lines under mutated and random input ----
 *
 * Each run follows from a seed: a fixed one, and one from the clock (or MINIONS_FUZZ_SEED) so that
 * make check keeps looking in new places. Both are printed, and every failure names its seed,
 * iteration and input. The budget is about 2 s or 20,000 iterations; a replay with
 * MINIONS_FUZZ_SEED runs its 10,000 iterations whatever the time, so a slower machine gets as far. */

#define FUZZ_CAP 65536          /* bytes per fuzzed line */
#define FUZZ_ITERS 10000        /* per seed */
#define FUZZ_SECONDS 1.0        /* per seed */

typedef struct fuzz {
    uint64_t seed, s;           /* the run's seed and the generator's state */
    long it;                    /* iteration */
    char b[FUZZ_CAP];           /* the line under test */
    size_t n;
    char tmp[8192];             /* a mutation's bytes, inserted at once */
} fuzz;

/* splitmix64: small, and the whole run follows from the seed */
static uint64_t rnd(fuzz *f)
{
    uint64_t z = (f->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static size_t below(fuzz *f, size_t n)
{
    return n ? (size_t)(rnd(f) % n) : 0;
}

/* Where a failure happened, for the assertion messages: seed, iteration and the input in hex. */
static const char *fuzz_where(const fuzz *f)
{
    static char w[2 * 512 + 128];
    int k = snprintf(w, sizeof w, "seed %" PRIu64 " iteration %ld, %zu bytes:", f->seed, f->it, f->n);
    for (size_t i = 0; i < f->n && i < 512; i++)
        k += snprintf(w + k, sizeof w - (size_t)k, "%02x", (unsigned char)f->b[i]);
    return w;
}

static void put(fuzz *f, size_t at, const char *s, size_t n)
{
    if (n > FUZZ_CAP - f->n)
        n = FUZZ_CAP - f->n;
    memmove(f->b + at + n, f->b + at, f->n - at);
    memcpy(f->b + at, s, n);
    f->n += n;
}

static void put_str(fuzz *f, const char *s)
{
    put(f, f->n, s, strlen(s));
}

/* A byte that tends to matter: NUL and controls, non-ASCII, JSON punctuation, or any byte. */
static char nasty_byte(fuzz *f)
{
    static const char punct[] = "{}[]:,\"\\ -.0123456789eEtfnu";
    switch (below(f, 4)) {
    case 0: return (char)below(f, 0x20);
    case 1: return (char)(0x80 + below(f, 0x80));
    case 2: return punct[below(f, sizeof punct - 1)];
    default: return (char)below(f, 256);
    }
}

/* A JSON string of up to `max` characters mixing ASCII, 2-, 3- and 4-byte UTF-8 and escapes, so
 * that lengths land on both sides of the limits (id 128 bytes, stop 64 bytes) and inside characters.
 * An escaped NUL is rare: it makes any id refused, and most lines would go no further. */
static void put_json_string(fuzz *f, size_t max)
{
    static const char *const chars[] = {"a", "Z", "7", " ", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                        "\\n", "\\\"", "\\ud83d\\ude00", "\\u00e9"};
    put_str(f, "\"");
    for (size_t i = 0, k = below(f, max + 1); i < k; i++)
        put_str(f, below(f, 200) ? chars[below(f, sizeof chars / sizeof *chars)] : "\\u0000");
    put_str(f, "\"");
}

/* Values that sit on or past the edges of the numeric fields and of jansson's number parsing. */
static const char *const edge_values[] = {
    "0", "1", "-1", "-0", "64", "4096", "4097", "0.5", "1.0", "2.5", "1e-7", "1e-400", "1e999", "-1e999",
    "100", "100.0001", "9007199254740992", "9007199254740993", "99999999999999999999999", "1E2", "true",
    "false", "null", "[]", "{}", "\"9\"", "[\"a\"]", "[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]",
};

static const char *const field_names[] = {"id", "prompt", "max_tokens", "temperature", "top_p", "seed",
                                          "stop", "stream", "cancel", "max_token", ""};

/* A line that is valid or nearly so: a request with random fields, or a cancel. */
static void gen_line(fuzz *f)
{
    /* the optional fields, each with values it accepts: used 3 times in 4, so that many lines get
     * through to the checks of an accepted request */
    static const struct {
        const char *name, *ok[4];
    } fields[] = {
        {"max_tokens", {"1", "64", "4096", "12.0"}},
        {"temperature", {"0", "0.7", "100", "1e-3"}},
        {"top_p", {"1", "0.5", "1e-6", "0.999"}},
        {"seed", {"0", "7", "9007199254740992", "123456789"}},
        {"stream", {"true", "false", "true", "false"}},
        {"stop", {NULL}},
    };
    f->n = 0;
    if (below(f, 8) == 0) {
        put_str(f, "{\"cancel\":");
        put_json_string(f, 150); /* often past the 128 bytes of err.id */
        put_str(f, "}");
        return;
    }
    put_str(f, "{\"id\":");
    put_json_string(f, 70);
    put_str(f, ",\"prompt\":");
    put_json_string(f, 40);
    unsigned used = 0;
    for (size_t i = 0, k = below(f, 5); i < k; i++) {
        size_t which = below(f, sizeof fields / sizeof *fields);
        if (used & 1u << which)
            continue; /* duplicates come from mutate() */
        used |= 1u << which;
        bool ok = below(f, 4);
        put_str(f, ",\"");
        put_str(f, fields[which].name);
        put_str(f, "\":");
        if (!fields[which].ok[0]) {
            put_str(f, "[");
            for (size_t j = 0, m = below(f, ok ? MN_PROTO_MAX_STOP + 1 : 12); j < m; j++) {
                if (j)
                    put_str(f, ",");
                put_json_string(f, ok ? 16 : 40);
            }
            put_str(f, "]");
        } else if (ok) {
            put_str(f, fields[which].ok[below(f, 4)]);
        } else {
            put_str(f, edge_values[below(f, sizeof edge_values / sizeof *edge_values)]);
        }
    }
    put_str(f, "}");
}

/* Whether a number or a literal (true, false, null) ends at f->b[i]. */
static bool token_ends_at(const fuzz *f, size_t i)
{
    return isalnum((unsigned char)f->b[i]) && (i + 1 == f->n || !isalnum((unsigned char)f->b[i + 1]));
}

/* One random change to the line. */
static void mutate(fuzz *f)
{
    size_t at = below(f, f->n + 1);
    switch (below(f, 10)) {
    case 0: /* flip bits of a byte */
        if (f->n)
            f->b[below(f, f->n)] ^= (char)(1u << below(f, 8));
        break;
    case 1: { /* insert bytes: NUL, 0x80-0xFF, punctuation */
        for (size_t i = 0, k = 1 + below(f, 4); i < k; i++) {
            char c = nasty_byte(f);
            put(f, at, &c, 1);
        }
        break;
    }
    case 2: /* truncate */
        f->n = at;
        break;
    case 3: { /* duplicate a slice (a field, a key, half a character) somewhere else */
        size_t from = below(f, f->n + 1), k = below(f, f->n - from + 1);
        k = k < 256 ? k : 256;
        memcpy(f->tmp, f->b + from, k);
        put(f, at, f->tmp, k);
        break;
    }
    case 4: /* a field, maybe a duplicate or a long unknown name, with an edge value */
        if (f->n && f->b[f->n - 1] == '}') {
            f->n--;
            put_str(f, ",");
            if (below(f, 4)) {
                put_str(f, "\"");
                put_str(f, field_names[below(f, sizeof field_names / sizeof *field_names)]);
                put_str(f, "\"");
            } else {
                put_json_string(f, 70);
            }
            put_str(f, ":");
            put_str(f, edge_values[below(f, sizeof edge_values / sizeof *edge_values)]);
            put_str(f, "}");
        }
        break;
    case 5: { /* a huge or odd number */
        const char *v = edge_values[below(f, sizeof edge_values / sizeof *edge_values)];
        put(f, at, v, strlen(v));
        break;
    }
    case 6: { /* deep nesting, past jansson's depth limit (2048) at times */
        size_t depth = 1 + below(f, 3000);
        memset(f->tmp, below(f, 2) ? '[' : '{', depth);
        put(f, at, f->tmp, depth);
        break;
    }
    case 7: { /* a very long string, sometimes of raw bytes */
        size_t k = below(f, sizeof f->tmp - 2);
        f->tmp[0] = f->tmp[k + 1] = '"';
        for (size_t i = 1; i <= k; i++)
            f->tmp[i] = below(f, 4) ? (char)('a' + below(f, 26)) : nasty_byte(f);
        put(f, at, f->tmp, k + 2);
        break;
    }
    case 8: { /* a byte right after a number or a literal, where jansson once skipped a NUL */
        size_t end = at;
        while (end < f->n && !token_ends_at(f, end))
            end++;
        char c = below(f, 2) ? 0 : nasty_byte(f);
        if (end < f->n)
            put(f, end + 1, &c, 1);
        break;
    }
    default: /* remove a slice */
        if (f->n) {
            size_t k = below(f, f->n - at + 1);
            memmove(f->b + at, f->b + at + k, f->n - at - k);
            f->n -= k;
        }
        break;
    }
}

/* The error reply for err: one line, a JSON object with error.code and error.message, valid UTF-8. */
static void check_error_reply(const fuzz *f, const mn_proto_error *err)
{
    size_t idn = strlen(err->id), mn = strlen(err->message);
    cr_assert(err->code >= MN_E_INVALID_JSON && err->code <= MN_E_INTERNAL, "%s: code %d", fuzz_where(f),
              (int)err->code);
    cr_assert(idn <= MN_PROTO_MAX_ID_LEN && is_utf8(err->id, idn), "%s: err.id", fuzz_where(f));
    cr_assert(mn > 0 && is_utf8(err->message, mn), "%s: err.message '%s'", fuzz_where(f), err->message);
    size_t len = 0;
    char *line = mn_proto_error_line(err->id, err->code, err->message, &len);
    cr_assert(line, "%s: no error reply for '%s'", fuzz_where(f), err->message);
    cr_assert(len > 0 && line[len - 1] == '\n' && memchr(line, '\n', len) == line + len - 1,
              "%s: reply '%s' is not one line", fuzz_where(f), line);
    json_error_t jerr;
    json_t *o = json_loadb(line, len, 0, &jerr); /* jansson checks the UTF-8 as it loads */
    cr_assert(json_is_object(o), "%s: reply '%s': %s", fuzz_where(f), line, jerr.text);
    json_t *e = json_object_get(o, "error");
    const char *code = mn_errcode_name(err->code);
    cr_assert(member_is(e, "code", code, strlen(code)) && member_is(e, "message", err->message, mn),
              "%s: reply '%s'", fuzz_where(f), line);
    cr_assert(idn ? member_is(o, "id", err->id, idn) : !json_object_get(o, "id"), "%s: reply '%s'", fuzz_where(f),
              line);
    json_decref(o);
    mn_free(line);
}

/* An accepted line obeys the limits of docs/server.md. */
static void check_line(const fuzz *f, const mn_line *l, const mn_proto_error *err)
{
    if (l->kind == MN_LINE_CANCEL) {
        size_t n = strlen(l->cancel_id), k = strlen(err->id);
        cr_assert(is_utf8(l->cancel_id, n), "%s: cancel id", fuzz_where(f));
        cr_assert(k <= n && k <= MN_PROTO_MAX_ID_LEN && !memcmp(err->id, l->cancel_id, k) && is_utf8(err->id, k),
                  "%s: err.id '%s'", fuzz_where(f), err->id);
        return;
    }
    const mn_req_params *p = &l->req;
    size_t idn = strlen(p->id);
    cr_assert(idn >= 1 && idn <= MN_PROTO_MAX_ID_LEN && is_utf8(p->id, idn) && !strcmp(p->id, err->id),
              "%s: id '%s'", fuzz_where(f), p->id);
    cr_assert(p->prompt_len >= 1 && is_utf8(p->prompt, p->prompt_len), "%s: prompt", fuzz_where(f));
    cr_assert(p->max_tokens >= 1 && p->max_tokens <= 4096, "%s: max_tokens %u", fuzz_where(f), p->max_tokens);
    cr_assert(p->temperature >= 0 && p->temperature <= 100, "%s: temperature %g", fuzz_where(f), p->temperature);
    cr_assert(p->top_p > 0 && p->top_p <= 1, "%s: top_p %g", fuzz_where(f), p->top_p);
    cr_assert(p->seed <= 9007199254740992u, "%s: seed %" PRIu64, fuzz_where(f), p->seed);
    cr_assert(p->n_stop <= MN_PROTO_MAX_STOP, "%s: %u stop strings", fuzz_where(f), p->n_stop);
    for (uint32_t i = 0; i < p->n_stop; i++) {
        size_t n = strlen(p->stop[i]);
        cr_assert(n >= 1 && n <= MN_PROTO_MAX_STOP_LEN && is_utf8(p->stop[i], n), "%s: stop[%u]", fuzz_where(f), i);
    }
}

/* Random bytes for a reply: mostly ASCII, with bad bytes and whole characters mixed in. */
static void rand_text(fuzz *f, char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (below(f, 8) == 0 && n - i >= 3) {
            memcpy(s + i, "\xe2\x82\xac", 3);
            i += 3;
        } else {
            s[i++] = below(f, 2) ? (char)(' ' + below(f, 95)) : nasty_byte(f);
        }
    }
}

/* A delta or done line from random id and text bytes is valid JSON with the text as
 * mn_utf8_sanitize makes it. */
static void fuzz_reply(fuzz *f)
{
    char id[MN_PROTO_MAX_ID_LEN + 1], text[300];
    size_t idn = 1 + below(f, MN_PROTO_MAX_ID_LEN), tn = below(f, sizeof text);
    rand_text(f, id, idn);
    for (size_t i = 0; i < idn; i++)
        id[i] = id[i] ? id[i] : '0'; /* an id is a C string */
    id[idn] = 0;
    rand_text(f, text, tn);
    bool done = below(f, 2);
    size_t len = 0;
    char *line = done ? mn_proto_done(id, text, tn, "stop", 3, 9, NULL, NULL, 0, &len) : mn_proto_delta(id, text, tn, &len);
    cr_assert(line, "seed %" PRIu64 " iteration %ld: no %s line", f->seed, f->it, done ? "done" : "delta");
    cr_assert(line[len - 1] == '\n', "seed %" PRIu64 " iteration %ld", f->seed, f->it);
    json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
    size_t cn, ci;
    char *clean = mn_utf8_sanitize(text, tn, &cn), *clean_id = mn_utf8_sanitize(id, idn, &ci);
    cr_assert(clean && clean_id);
    cr_assert(json_is_object(o) && member_is(o, done ? "text" : "delta", clean, cn) && member_is(o, "id", clean_id, ci),
              "seed %" PRIu64 " iteration %ld: %s", f->seed, f->it, line);
    json_decref(o);
    mn_free(clean);
    mn_free(clean_id);
    mn_free(line);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One seed's run: FUZZ_ITERS iterations or `seconds`, whichever ends first. */
static void fuzz_run(fuzz *f, uint64_t seed, double seconds)
{
    f->seed = f->s = seed;
    double t0 = now_s();
    long accepted = 0;
    for (f->it = 0; f->it < FUZZ_ITERS && now_s() - t0 < seconds; f->it++) {
        if (below(f, 16) == 0) { /* plain random bytes */
            f->n = below(f, 300);
            for (size_t i = 0; i < f->n; i++)
                f->b[i] = (char)below(f, 256);
        } else {
            gen_line(f);
            for (size_t i = 0, k = below(f, 4); i < k; i++)
                mutate(f);
        }
        mn_line l;
        mn_proto_error err;
        mn_status st = mn_proto_parse(f->b, f->n, 4096, MN_CHAT_CHATML, &l, &err);
        cr_assert(st == MN_OK || st == MN_INVALID, "%s: status %d", fuzz_where(f), (int)st);
        if (st == MN_OK) {
            cr_assert(!memchr(f->b, 0, f->n), "%s: a line with a raw NUL was accepted", fuzz_where(f));
            check_line(f, &l, &err);
            mn_line_free(&l);
            accepted++;
        } else {
            check_error_reply(f, &err);
        }
        fuzz_reply(f);
    }
    fprintf(stderr, "fuzz: seed %" PRIu64 ": %ld iterations (%ld lines accepted) in %.2f s\n", seed, f->it, accepted,
            now_s() - t0);
    /* most generated lines are valid requests (a few mutations each): a parser refusing valid input
     * would leave the checks above unrun */
    cr_assert_gt(f->it, 0);
    cr_assert_geq(accepted, f->it / 10, "seed %" PRIu64 ": only %ld of %ld lines accepted", seed, accepted, f->it);
}

Test(proto, fuzz)
{
    fuzz *f = malloc(sizeof *f);
    cr_assert(f);
    const char *env = getenv("MINIONS_FUZZ_SEED");
    uint64_t fresh = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
    fprintf(stderr, "fuzz: seeds 9 and %" PRIu64 " (MINIONS_FUZZ_SEED=%" PRIu64 " repeats the second)\n", fresh,
            fresh);
    fuzz_run(f, 9, FUZZ_SECONDS);
    fuzz_run(f, fresh, env ? 1e9 : FUZZ_SECONDS);
    free(f);
}

static mn_req *request_with_stops(const char *a, const char *b)
{
    mn_req_params p = {0};
    p.id = strdup("r");
    p.prompt = strdup("x");
    if (a)
        p.stop[p.n_stop++] = strdup(a);
    if (b)
        p.stop[p.n_stop++] = strdup(b);
    mn_req *r = mn_req_new(&p, NULL, NULL);
    cr_assert(r);
    return r;
}

Test(request, stop_string_across_pieces)
{
    mn_req *r = request_with_stops("END", NULL);
    bool stopped;
    cr_assert_eq(mn_req_append(r, "hello E", 7, &stopped), MN_OK);
    cr_assert(!stopped);
    cr_assert_eq(r->ready, 6, "'E' may start the stop string: held back (ready %zu)", r->ready);
    cr_assert_eq(mn_req_append(r, "N", 1, &stopped), MN_OK);
    cr_assert(!stopped);
    cr_assert_eq(r->ready, 6);
    cr_assert_eq(mn_req_append(r, "Dless", 5, &stopped), MN_OK);
    cr_assert(stopped);
    cr_assert_eq(r->text_len, 6);
    cr_assert_str_eq(r->text, "hello ");
    mn_req_free(r);
}

Test(request, false_start_is_released)
{
    mn_req *r = request_with_stops("END", NULL);
    bool stopped;
    mn_req_append(r, "a EN", 4, &stopped);
    cr_assert_eq(r->ready, 2);
    mn_req_append(r, "x", 1, &stopped);
    cr_assert(!stopped);
    cr_assert_eq(r->ready, 5);
    mn_req_free(r);
}

Test(request, earliest_of_two_stops_wins)
{
    mn_req *r = request_with_stops("cd", "b");
    bool stopped;
    mn_req_append(r, "abcd", 4, &stopped);
    cr_assert(stopped);
    cr_assert_str_eq(r->text, "a");
    mn_req_free(r);
}

Test(request, utf8_held_back_until_complete)
{
    mn_req *r = request_with_stops(NULL, NULL);
    bool stopped;
    mn_req_append(r, "caf\xc3", 4, &stopped);
    cr_assert_eq(r->ready, 3);
    mn_req_append(r, "\xa9!", 2, &stopped);
    cr_assert_eq(r->ready, 6);
    mn_req_free(r);
}
