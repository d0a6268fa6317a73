/* test_proto.c - the client protocol (parsing, validation, reply lines, UTF-8 helpers) and a
 * request's text bookkeeping (stop strings, what may be streamed). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "net/proto.h"
#include "serve/request.h"

static mn_status parse(const char *line, mn_line *l, mn_proto_error *err)
{
    return mn_proto_parse(line, strlen(line), 4096, l, err);
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
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stream\":1}", MN_E_INVALID_REQUEST, "stream"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":\"\\n\"}", MN_E_INVALID_REQUEST, "stop"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"\"]}", MN_E_INVALID_REQUEST, "stop[0]"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"a\",2]}", MN_E_INVALID_REQUEST, "stop[1]"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}",
         MN_E_INVALID_REQUEST, "stop"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"max_token\":5}", MN_E_INVALID_REQUEST, "max_token"},
        {"{\"id\":\"a\",\"id\":\"b\",\"prompt\":\"x\"}", MN_E_INVALID_JSON, "duplicate"},
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
    char *done = mn_proto_done("r", "xy", 2, "length", 3, 9, &len);
    o = json_loadb(done, len, 0, NULL);
    cr_assert(json_is_true(json_object_get(o, "done")));
    cr_assert_str_eq(json_string_value(json_object_get(o, "finish_reason")), "length");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")), 9);
    json_decref(o);
    free(done);
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
    s = mn_utf8_sanitize("ok \xe2\x82\xac", 6, &n);
    cr_assert_str_eq(s, "ok \xe2\x82\xac");
    free(s);
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
    mn_req *r = mn_req_new(&p, NULL);
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
