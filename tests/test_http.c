/* test_http.c - minionsd's OpenAI-compatible HTTP API and /metrics, end to end over real sockets:
 * greedy text equal to minions-generate's (whole and streamed, plain and speculative), OpenAI's
 * error shapes, the API key, log-probabilities, a dropped stream freeing its KV, a stream that is
 * not read pausing, a drain, --http-timeout, a full queue's 429, an occupied port, the metrics.
 * (tests/http-clients.sh runs curl, the openai package and
 * prometheus_client against it.) */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h"
#include "serverutil.h"

static const char *const HTTP[] = {"--http", "127.0.0.1:0", NULL};

typedef struct hresp {
    int status;
    char *head;   /* status line and headers */
    char *body;   /* de-chunked */
    size_t len;
} hresp;

static void hresp_free(hresp *r)
{
    free(r->head);
    free(r->body);
}

static int http_connect(int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    if (rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A request in HTTP/version ("1.1", "1.0"); without keep_alive it says "Connection: close". */
static void http_send_as(int fd, const char *version, const char *method, const char *path, const char *headers,
                         const char *body, int keep_alive)
{
    char head[2048];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/%s\r\nHost: 127.0.0.1\r\n%s%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     method, path, version, keep_alive ? "" : "Connection: close\r\n", headers ? headers : "",
                     body ? strlen(body) : 0);
    cr_assert_eq(write(fd, head, (size_t)n), n);
    if (body)
        cr_assert_eq(write(fd, body, strlen(body)), (ssize_t)strlen(body));
}

static void http_send(int fd, const char *method, const char *path, const char *headers, const char *body,
                      int keep_alive)
{
    http_send_as(fd, "1.1", method, path, headers, body, keep_alive);
}

/* Everything until the server closes, split into head and (de-chunked) body. */
static hresp http_read_all(int fd)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (ssize_t n; (n = read(fd, buf + len, cap - len - 1)) > 0;) {
        len += (size_t)n;
        if (len + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    close(fd);
    hresp r = {0};
    char *end = strstr(buf, "\r\n\r\n");
    cr_assert(end, "no HTTP head in: %s", buf);
    *end = 0;
    r.head = strdup(buf);
    sscanf(buf, "HTTP/1.%*d %d", &r.status);
    const char *in = end + 4;
    size_t in_len = len - (size_t)(in - buf);
    r.body = malloc(in_len + 1);
    if (strcasestr(r.head, "Transfer-Encoding: chunked")) {
        while (1) {
            char *next;
            unsigned long k = strtoul(in, &next, 16);
            if (k == 0 || next == in)
                break;
            in = strstr(next, "\r\n") + 2;
            memcpy(r.body + r.len, in, k);
            r.len += k;
            in += k + 2;
        }
    } else {
        memcpy(r.body, in, in_len);
        r.len = in_len;
    }
    r.body[r.len] = 0;
    free(buf);
    return r;
}

static hresp http_call(int port, const char *method, const char *path, const char *headers, const char *body)
{
    int fd = http_connect(port, 0);
    cr_assert(fd >= 0, "cannot connect to the HTTP port %d", port);
    http_send(fd, method, path, headers, body, 0);
    return http_read_all(fd);
}

static json_t *json_of(const hresp *r)
{
    json_error_t e;
    json_t *o = json_loadb(r->body, r->len, 0, &e);
    cr_assert(o, "not JSON (%s): %s", e.text, r->body);
    return o;
}

static const char *str_at(json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = o;
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, "."))
        v = json_is_array(v) ? json_array_get(v, (size_t)atoi(tok)) : json_object_get(v, tok);
    return json_string_value(v);
}

static json_int_t int_at(json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = o;
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, "."))
        v = json_is_array(v) ? json_array_get(v, (size_t)atoi(tok)) : json_object_get(v, tok);
    cr_assert(json_is_integer(v), "no integer at %s", path);
    return json_integer_value(v);
}

/* The events of a server-sent stream: each "data: X" payload in order ("[DONE]" included). */
static json_t *events_of(const char *body)
{
    json_t *a = json_array();
    for (const char *p = body; (p = strstr(p, "data: "));) {
        const char *end = strstr(p, "\n\n");
        cr_assert(end, "an event without its blank line: %s", p);
        json_array_append_new(a, json_stringn(p + 6, (size_t)(end - p - 6)));
        p = end + 2;
    }
    return a;
}

/* The text of a completion stream (chunks' choices[0].text or .delta.content), checking its shape:
 * one finish_reason, on the chunk with usage, then [DONE]. */
static char *stream_text(const hresp *r, int chat, json_t **last_chunk)
{
    cr_assert_eq(r->status, 200);
    cr_assert(strcasestr(r->head, "Content-Type: text/event-stream"), "%s", r->head);
    json_t *ev = events_of(r->body);
    size_t n = json_array_size(ev);
    cr_assert_geq(n, 2);
    cr_assert_str_eq(json_string_value(json_array_get(ev, n - 1)), "[DONE]");
    char *text = calloc(1, r->len + 1);
    for (size_t i = 0; i + 1 < n; i++) {
        json_t *c = json_loads(json_string_value(json_array_get(ev, i)), 0, NULL);
        cr_assert(c, "a chunk is not JSON: %s", json_string_value(json_array_get(ev, i)));
        cr_assert_str_eq(str_at(c, "object"), chat ? "chat.completion.chunk" : "text_completion");
        const char *piece = str_at(c, chat ? "choices.0.delta.content" : "choices.0.text");
        if (piece)
            strcat(text, piece);
        json_t *finish = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "finish_reason");
        cr_assert_eq(!json_is_null(finish), i + 2 == n, "finish_reason only on the last chunk (%zu of %zu)", i, n);
        cr_assert_eq(json_object_get(c, "usage") != NULL, i + 2 == n, "usage only on the last chunk");
        if (chat && i == 0)
            cr_assert_str_eq(str_at(c, "choices.0.delta.role"), "assistant");
        if (i + 2 == n && last_chunk)
            *last_chunk = json_incref(c);
        json_decref(c);
    }
    json_decref(ev);
    return text;
}

static char *completion_body(const char *prompt, int max_tokens, int stream, const char *more)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:b}", "model", "anything", "prompt", prompt, "max_tokens", max_tokens,
                          "temperature", 0, "stream", stream);
    if (more) {
        json_t *m = json_loads(more, 0, NULL);
        cr_assert(m);
        json_object_update(o, m);
        json_decref(m);
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static void check_completions_equal_generate(server *s, const char *prompt, int n)
{
    char *want = generate(prompt, n);
    char *body = completion_body(prompt, n, 0, NULL);
    hresp r = http_call(s->http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *o = json_of(&r);
    cr_assert_str_eq(str_at(o, "object"), "text_completion");
    cr_assert_str_eq(str_at(o, "model"), "anything");
    cr_assert_str_eq(str_at(o, "choices.0.text"), want, "prompt %s", prompt);
    cr_assert_str_eq(str_at(o, "choices.0.finish_reason"), "length");
    cr_assert_eq(int_at(o, "usage.completion_tokens"), n);
    cr_assert_eq(int_at(o, "usage.total_tokens"), int_at(o, "usage.prompt_tokens") + n);
    json_decref(o);
    hresp_free(&r);
    free(body);
    body = completion_body(prompt, n, 1, NULL);
    r = http_call(s->http_port, "POST", "/v1/completions", NULL, body);
    json_t *last = NULL;
    char *text = stream_text(&r, 0, &last);
    cr_assert_str_eq(text, want, "streamed");
    cr_assert_eq(int_at(last, "usage.completion_tokens"), n);
    json_decref(last);
    free(text);
    hresp_free(&r);
    free(body);
    free(want);
}

Test(http, completions_equal_plain_decoding_whole_and_streamed, .timeout = 300)
{
    server s;
    server_start(&s, HTTP);
    cr_assert_gt(s.http_port, 0);
    check_completions_equal_generate(&s, "In the beginning", 24);
    check_completions_equal_generate(&s, "DEVIL, n.", 16);
    /* a chat on a model without a chat template: the documented plain format, streamed the same */
    const char *chat = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":\"Who made the heaven?\"}],\"max_tokens\":12,\"temperature\":0";
    char body[512];
    snprintf(body, sizeof body, "%s}", chat);
    hresp r = http_call(s.http_port, "POST", "/v1/chat/completions", NULL, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *o = json_of(&r);
    cr_assert_str_eq(str_at(o, "object"), "chat.completion");
    cr_assert_str_eq(str_at(o, "choices.0.message.role"), "assistant");
    const char *whole = str_at(o, "choices.0.message.content");
    cr_assert(whole);
    snprintf(body, sizeof body, "%s,\"stream\":true}", chat);
    hresp rs = http_call(s.http_port, "POST", "/v1/chat/completions", NULL, body);
    char *text = stream_text(&rs, 1, NULL);
    cr_assert_str_eq(text, whole, "a streamed chat says what the whole one said");
    free(text);
    json_decref(o);
    hresp_free(&r);
    hresp_free(&rs);
    /* the model list and the health check */
    r = http_call(s.http_port, "GET", "/v1/models", NULL, NULL);
    o = json_of(&r);
    cr_assert_str_eq(str_at(o, "data.0.id"), "target");
    json_decref(o);
    hresp_free(&r);
    r = http_call(s.http_port, "GET", "/health", NULL, NULL);
    cr_assert_eq(r.status, 200);
    hresp_free(&r);
    server_stop(&s);
}

/* An HTTP/1.0 client that asks for keep-alive: a stream, whose length HTTP/1.0 cannot say, ends
 * with the connection. libevent gave it "Content-Length: 0" and kept the connection open: the
 * client read an empty reply, then took the events for the next one (or waited for ever). */
Test(http, an_http_1_0_stream_ends_with_its_connection, .timeout = 120)
{
    server s;
    server_start(&s, HTTP);
    char *body = completion_body("In the beginning", 12, 1, NULL);
    hresp whole = http_call(s.http_port, "POST", "/v1/completions", NULL, body); /* HTTP/1.1, chunked */
    char *want = stream_text(&whole, 0, NULL);
    int fd = http_connect(s.http_port, 0);
    cr_assert(fd >= 0);
    struct timeval patience = {.tv_sec = 20}; /* kept open, the read below ends here */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
    http_send_as(fd, "1.0", "POST", "/v1/completions", "Connection: keep-alive\r\n", body, 1);
    hresp r = http_read_all(fd); /* to the end: the server closes it */
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_assert_null(strcasestr(r.head, "Content-Length"), "a stream with a length: %s", r.head);
    cr_assert_null(strcasestr(r.head, "keep-alive"), "%s", r.head);
    char *got = stream_text(&r, 0, NULL);
    cr_assert_str_eq(got, want);
    free(got);
    free(want);
    hresp_free(&r);
    hresp_free(&whole);
    free(body);
    server_stop(&s);
}

/* stats' requests.key (running: holding KV, paused, queued, in_flight) */
static json_int_t requests_stat(server *s, const char *key)
{
    json_t *st = admin(s, "{\"cmd\":\"stats\"}");
    json_int_t v = stat_of(st, "requests", key);
    json_decref(st);
    return v;
}

/* A streamed completion of max_tokens (more: further fields, as JSON) from a client that does not
 * read (a 4 KB receive buffer), once the server has paused it: stats then count `paused` paused
 * requests in all (its choices and those paused before). The connection's descriptor. With a small
 * --output-buffer such a stream is held, paused, for as long as its client does not read: what a
 * test does meanwhile cannot outlast it, however fast the model runs. */
static int unread_stream_with(server *s, const char *prompt, int max_tokens, const char *more, json_int_t paused)
{
    int fd = http_connect(s->http_port, 4096);
    cr_assert(fd >= 0, "cannot connect to the HTTP port %d", s->http_port);
    char *body = completion_body(prompt, max_tokens, 1, more);
    http_send(fd, "POST", "/v1/completions", NULL, body, 0);
    free(body);
    json_int_t now = 0;
    for (int i = 0; i < 400 && now < paused; i++, usleep(50000))
        now = requests_stat(s, "paused");
    cr_assert_eq(now, paused, "a stream nobody reads pauses");
    return fd;
}

static int unread_stream(server *s, const char *prompt, int max_tokens)
{
    return unread_stream_with(s, prompt, max_tokens, NULL, 1);
}

static double metric(server *s, const char *series);

/* The text of choice `index` of a completion's whole response. */
static char *choice_text(server *s, const char *body, int index)
{
    hresp r = http_call(s->http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *o = json_of(&r);
    char path[32];
    snprintf(path, sizeof path, "choices.%d.text", index);
    char *text = strdup(str_at(o, path));
    json_decref(o);
    hresp_free(&r);
    return text;
}

/* Several choices in one request (a list of prompts, n): each is what a request of its own gives,
 * at its index, whole and streamed, and a seeded request's samples are those of seed, seed + 1, ... */
Test(http, several_choices_each_equal_their_own_request, .timeout = 300)
{
    /* a small output buffer holds the dropped stream below (its readers' streams only wait for them) */
    static const char *const args[] = {"--http", "127.0.0.1:0", "--draft", "ngram", "--output-buffer", "4", NULL};
    server s;
    server_start(&s, args);
    const char *prompts[] = {"In the beginning", "DEVIL, n."};
    char *want[2] = {generate(prompts[0], 12), generate(prompts[1], 12)};
    const char *body = "{\"prompt\":[\"In the beginning\",\"DEVIL, n.\"],\"n\":2,\"max_tokens\":12,"
                       "\"temperature\":0}";
    hresp r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *o = json_of(&r);
    cr_assert_eq(json_array_size(json_object_get(o, "choices")), 4);
    for (int i = 0; i < 4; i++) {
        char path[32];
        snprintf(path, sizeof path, "choices.%d.index", i);
        cr_assert_eq(int_at(o, path), i);
        snprintf(path, sizeof path, "choices.%d.text", i);
        cr_assert_str_eq(str_at(o, path), want[i / 2], "choice %d answers prompt %d", i, i / 2);
    }
    cr_assert_eq(int_at(o, "usage.completion_tokens"), 48);
    json_int_t prompt_tokens = int_at(o, "usage.prompt_tokens");
    json_decref(o);
    hresp_free(&r);
    json_int_t each = 0; /* each prompt's tokens once, not once per choice */
    for (int k = 0; k < 2; k++) {
        char *one = completion_body(prompts[k], 1, 0, NULL);
        r = http_call(s.http_port, "POST", "/v1/completions", NULL, one);
        o = json_of(&r);
        each += int_at(o, "usage.prompt_tokens");
        json_decref(o);
        hresp_free(&r);
        free(one);
    }
    cr_assert_eq(prompt_tokens, each);

    /* streamed: every chunk carries its choice's index; each choice's pieces make its text, and it
     * ends with one finish_reason and its own speculation figures; then the usage (asked for) with
     * the figures summed, and [DONE] */
    body = "{\"prompt\":\"In the beginning\",\"n\":3,\"max_tokens\":12,\"temperature\":0,\"stream\":true,"
           "\"stream_options\":{\"include_usage\":true}}";
    r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *ev = events_of(r.body);
    size_t n = json_array_size(ev);
    cr_assert_str_eq(json_string_value(json_array_get(ev, n - 1)), "[DONE]");
    char text[3][512] = {{0}};
    int finished[3] = {0};
    json_int_t drafted = 0, verifications = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        json_t *c = json_loads(json_string_value(json_array_get(ev, i)), 0, NULL);
        cr_assert(c);
        json_t *choices = json_object_get(c, "choices");
        if (i + 2 == n) {
            cr_assert_eq(json_array_size(choices), 0, "the usage chunk has no choice");
            cr_assert_eq(int_at(c, "usage.completion_tokens"), 36);
            cr_assert_gt(verifications, 0, "the choices speculated");
            cr_assert_eq(int_at(c, "minions.spec.verifications"), verifications, "the usage chunk sums them");
            cr_assert_eq(int_at(c, "minions.spec.drafted"), drafted);
        } else {
            cr_assert_eq(json_array_size(choices), 1);
            json_int_t k = int_at(c, "choices.0.index");
            cr_assert(k >= 0 && k < 3);
            cr_assert(!finished[k], "choice %lld goes on after its finish_reason", (long long)k);
            const char *piece = str_at(c, "choices.0.text");
            strncat(text[k], piece ? piece : "", sizeof text[k] - strlen(text[k]) - 1);
            finished[k] = !json_is_null(json_object_get(json_array_get(choices, 0), "finish_reason"));
            cr_assert_eq(json_object_get(c, "minions") != NULL, finished[k],
                         "choice %lld's figures come with its finish_reason, only there", (long long)k);
            if (finished[k]) {
                verifications += int_at(c, "minions.spec.verifications");
                drafted += int_at(c, "minions.spec.drafted");
            }
        }
        json_decref(c);
    }
    for (int k = 0; k < 3; k++) {
        cr_assert(finished[k], "choice %d has its finish_reason", k);
        cr_assert_str_eq(text[k], want[0], "streamed choice %d", k);
    }
    json_decref(ev);
    hresp_free(&r);

    /* seeded samples: choice j is the request with seed + j alone */
    body = "{\"prompt\":\"In the beginning\",\"n\":3,\"max_tokens\":12,\"temperature\":1,\"seed\":41}";
    char *sampled[3];
    for (int j = 0; j < 3; j++) {
        sampled[j] = choice_text(&s, body, j);
        char one[160];
        snprintf(one, sizeof one, "{\"prompt\":\"In the beginning\",\"max_tokens\":12,\"temperature\":1,\"seed\":%d}",
                 41 + j);
        char *alone = choice_text(&s, one, 0);
        cr_assert_str_eq(sampled[j], alone, "sample %d", j);
        free(alone);
    }
    cr_assert(strcmp(sampled[0], sampled[1]) || strcmp(sampled[1], sampled[2]), "the samples differ");
    for (int j = 0; j < 3; j++)
        free(sampled[j]);

    /* unseeded samples (no seed, or null) are drawn afresh, as OpenAI's are: the same request
     * three times does not give one text three times (seed 0 for all would) */
    const char *unseeded[] = {"{\"prompt\":\"In the beginning\",\"max_tokens\":12,\"temperature\":1}",
                              "{\"prompt\":\"In the beginning\",\"max_tokens\":12,\"temperature\":1,\"seed\":null}"};
    for (int u = 0; u < 2; u++) {
        for (int j = 0; j < 3; j++)
            sampled[j] = choice_text(&s, unseeded[u], 0);
        cr_assert(strcmp(sampled[0], sampled[1]) || strcmp(sampled[1], sampled[2]), "unseeded samples differ: %s",
                  unseeded[u]);
        for (int j = 0; j < 3; j++)
            free(sampled[j]);
    }

    /* a chat's choices each open their message with the role */
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Who made the heaven?\"}],\"n\":2,\"max_tokens\":6,"
           "\"stream\":true}";
    r = http_call(s.http_port, "POST", "/v1/chat/completions", NULL, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    ev = events_of(r.body);
    int roles[2] = {0};
    for (size_t i = 0; i + 1 < json_array_size(ev); i++) {
        json_t *c = json_loads(json_string_value(json_array_get(ev, i)), 0, NULL);
        if (json_array_size(json_object_get(c, "choices")) == 1 && str_at(c, "choices.0.delta.role"))
            roles[int_at(c, "choices.0.index")]++;
        json_decref(c);
    }
    cr_assert(roles[0] == 1 && roles[1] == 1, "one role each: %d, %d", roles[0], roles[1]);
    json_decref(ev);
    hresp_free(&r);
    free(want[0]);
    free(want[1]);

    /* a dropped stream of three choices cancels all three and frees their KV: its client does not
     * read, so all three are held (paused) when it drops, not ended before */
    int fd = unread_stream_with(&s, "In the beginning", 400, "{\"n\":3}", 3);
    cr_assert_eq(metric(&s, "minions_requests_in_flight{frontend=\"http\"}"), 3, "a choice each");
    struct linger hard = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    close(fd);
    wait_idle(&s);
    cr_assert_eq(metric(&s, "minions_requests_total{frontend=\"http\",outcome=\"cancelled\"}"), 3);
    cr_assert_eq(metric(&s, "minions_requests_in_flight{frontend=\"http\"}"), 0);
    server_stop(&s);
}

Test(http, speculative_text_equals_plain, .timeout = 300)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--draft", "ngram", NULL};
    server s;
    server_start(&s, args);
    check_completions_equal_generate(&s, "And God said, Let there be light", 40);
    char *body = completion_body("And God said, Let there be light", 40, 0, NULL);
    hresp r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
    json_t *o = json_of(&r);
    cr_assert_gt(int_at(o, "minions.spec.verifications"), 0, "%s", r.body);
    json_decref(o);
    hresp_free(&r);
    free(body);
    server_stop(&s);
}

static void expect_status(server *s, const char *method, const char *path, const char *headers, const char *body,
                          int status, const char *param)
{
    hresp r = http_call(s->http_port, method, path, headers, body);
    cr_assert_eq(r.status, status, "%s %s %s: got %d %s", method, path, body ? body : "", r.status, r.body);
    if (status != 413) { /* evhttp answers an oversized body itself */
        json_t *o = json_of(&r);
        cr_assert(str_at(o, "error.message"), "OpenAI's error shape: %s", r.body);
        cr_assert(str_at(o, "error.type"), "OpenAI's error shape: %s", r.body);
        if (param)
            cr_assert_str_eq(str_at(o, "error.param"), param, "%s", r.body);
        json_decref(o);
    }
    if (status == 405) { /* RFC 9110: a 405 says which methods the path takes */
        bool post = strstr(path, "/v1/") && strcmp(path, "/v1/models");
        cr_assert(strcasestr(r.head, post ? "Allow: POST" : "Allow: GET, HEAD"), "%s %s: %s", method, path, r.head);
    }
    hresp_free(&r);
}

/* A prompt's token ids as a JSON list, by the bundled target's tokenizer; *n gets their count. */
static char *token_list(const mn_model *m, const char *prompt, size_t *n)
{
    mn_tokens t = {0};
    cr_assert_eq(mn_tok_encode(m->tok, prompt, strlen(prompt), true, &t), MN_OK);
    json_t *a = json_array();
    for (size_t i = 0; i < t.n; i++)
        json_array_append_new(a, json_integer(t.ids[i]));
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    *n = t.n;
    mn_tokens_free(&t);
    return s;
}

/* OpenAI's token prompts: a list of ids gives the text its string gives, a list of such lists a
 * choice each; an id past the vocabulary is a 400 that says so. */
Test(http, token_prompts_give_what_their_text_gives, .timeout = 120)
{
    server s;
    server_start(&s, HTTP);
    mn_model *m;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(model_path(), &m, &err), MN_OK, "%s", err.msg);
    const char *prompts[] = {"In the beginning", "DEVIL, n."};
    char *want[2] = {generate(prompts[0], 12), generate(prompts[1], 12)};
    size_t n[2];
    char *ids[2] = {token_list(m, prompts[0], &n[0]), token_list(m, prompts[1], &n[1])};
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":%s,\"max_tokens\":12,\"temperature\":0}", ids[0]);
    hresp r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *o = json_of(&r);
    cr_assert_str_eq(str_at(o, "choices.0.text"), want[0]);
    cr_assert_eq(int_at(o, "usage.prompt_tokens"), (json_int_t)n[0]);
    json_decref(o);
    hresp_free(&r);
    snprintf(body, sizeof body, "{\"prompt\":[%s,%s],\"max_tokens\":12,\"temperature\":0}", ids[0], ids[1]);
    r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    o = json_of(&r);
    cr_assert_str_eq(str_at(o, "choices.0.text"), want[0]);
    cr_assert_str_eq(str_at(o, "choices.1.text"), want[1]);
    cr_assert_eq(int_at(o, "usage.prompt_tokens"), (json_int_t)(n[0] + n[1]));
    json_decref(o);
    hresp_free(&r);
    snprintf(body, sizeof body, "{\"prompt\":[1,%u],\"max_tokens\":2}", m->hp.n_vocab);
    r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 400, "%s", r.body);
    cr_assert(strstr(r.body, "vocabulary"), "%s", r.body);
    hresp_free(&r);
    for (int k = 0; k < 2; k++)
        free(ids[k]), free(want[k]);
    mn_model_free(m);
    wait_idle(&s);
    server_stop(&s);
}

Test(http, bad_requests_get_openai_errors_and_nothing_leaks, .timeout = 120)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--max-line", "4096", NULL};
    server s;
    server_start(&s, args);
    const char *C = "/v1/completions", *CH = "/v1/chat/completions";
    expect_status(&s, "POST", C, NULL, "{not json", 400, NULL);
    expect_status(&s, "POST", C, NULL, "[1,2]", 400, NULL);
    expect_status(&s, "POST", C, NULL, "{}", 400, "prompt");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":\"\"}", 400, "prompt");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":\"x\",\"max_tokens\":\"9\"}", 400, "max_tokens");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":\"x\",\"max_tokens\":0}", 400, "max_tokens");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":\"x\",\"temperature\":3}", 400, "temperature");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":\"x\",\"n\":17}", 400, "n");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"n\":4}", 400, "n");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":\"x\",\"presence_penalty\":0.5}", 400, "presence_penalty");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":\"x\",\"logprobs\":6}", 400, "logprobs");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":\"x\",\"stop\":[1]}", 400, "stop");
    expect_status(&s, "POST", C, NULL, "{\"prompt\":\"x\",\"stream\":\"yes\"}", 400, "stream");
    expect_status(&s, "POST", CH, NULL, "{\"messages\":[]}", 400, "messages");
    expect_status(&s, "POST", CH, NULL, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages");
    expect_status(&s, "POST", CH, NULL, "{\"messages\":[{\"role\":\"user\\u0000junk\",\"content\":\"x\"}]}", 400,
                  "messages");
    expect_status(&s, "POST", CH, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
                  400, "top_logprobs");
    expect_status(&s, "GET", C, NULL, NULL, 405, NULL);
    expect_status(&s, "DELETE", C, NULL, NULL, 405, NULL);
    expect_status(&s, "PUT", "/metrics", NULL, "{}", 405, NULL);
    expect_status(&s, "POST", "/v1/models", NULL, "{}", 405, NULL);
    expect_status(&s, "POST", "/health", NULL, "{}", 405, NULL);
    expect_status(&s, "DELETE", "/health", NULL, NULL, 405, NULL);
    expect_status(&s, "GET", "/v2/nothing", NULL, NULL, 404, NULL);
    char big[6000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    expect_status(&s, "POST", C, NULL, big, 413, NULL);
    /* far over the limit, sent whole (no Expect: 100-continue, as most clients do): the 413 still
     * arrives, not a reset while the client sends */
    char *huge = malloc(16 << 20);
    memset(huge, 'a', (16 << 20) - 1);
    huge[(16 << 20) - 1] = 0;
    expect_status(&s, "POST", C, NULL, huge, 413, NULL);
    free(huge);
    /* neutral values of the fields clients send are accepted, unknown fields ignored */
    hresp r = http_call(s.http_port, "POST", C, NULL,
                        "{\"prompt\":\"In\",\"max_tokens\":2,\"n\":1,\"presence_penalty\":0,\"frequency_penalty\":0,"
                        "\"logprobs\":null,\"user\":\"u\",\"echo\":false,\"best_of\":1,\"seed\":-3,"
                        "\"stop\":\"\\n\\n\",\"metadata\":{\"a\":1}}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    hresp_free(&r);
    /* a prompt longer than the context fails after admission: 400 still */
    char *long_prompt = malloc(3800);
    for (int i = 0; i < 3799; i++)
        long_prompt[i] = i % 2 ? ' ' : 'a';
    long_prompt[3799] = 0;
    char *body = completion_body(long_prompt, 4000, 0, NULL);
    expect_status(&s, "POST", C, NULL, body, 400, "prompt");
    free(body);
    expect_status(&s, "POST", C, NULL, "{\"prompt\":[5000],\"max_tokens\":1}", 400, "prompt");
    free(long_prompt);
    wait_idle(&s);
    server_stop(&s);
}

Test(http, an_api_key_is_required_when_set, .timeout = 120)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--api-key", "s3cret", NULL};
    server s;
    server_start(&s, args);
    const char *body = "{\"prompt\":\"In\",\"max_tokens\":2}";
    expect_status(&s, "POST", "/v1/completions", NULL, body, 401, NULL);
    expect_status(&s, "POST", "/v1/completions", "Authorization: Bearer s3cre\r\n", body, 401, NULL);
    expect_status(&s, "GET", "/metrics", "Authorization: Bearer s3cret0\r\n", NULL, 401, NULL);
    hresp r = http_call(s.http_port, "POST", "/v1/completions", "Authorization: Bearer s3cret\r\n", body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    hresp_free(&r);
    r = http_call(s.http_port, "POST", "/v1/completions", "Authorization: bearer s3cret\r\n", body);
    cr_assert_eq(r.status, 200, "the scheme is case-insensitive: %s", r.body);
    hresp_free(&r);
    r = http_call(s.http_port, "GET", "/health", NULL, NULL);
    cr_assert_eq(r.status, 200, "the health check needs no key");
    hresp_free(&r);
    server_stop(&s);
}

Test(http, logprobs_are_the_models_own, .timeout = 120)
{
    server s;
    server_start(&s, HTTP);
    char *body = completion_body("In the beginning", 12, 0, "{\"logprobs\":3}");
    hresp r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *o = json_of(&r);
    json_t *lp = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    json_t *tokens = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs"),
           *tops = json_object_get(lp, "top_logprobs"), *offs = json_object_get(lp, "text_offset");
    cr_assert_eq(json_array_size(tokens), 12, "%s", r.body);
    char joined[1024] = "";
    for (size_t i = 0; i < 12; i++) {
        strcat(joined, json_string_value(json_array_get(tokens, i)));
        double mine = json_real_value(json_array_get(lps, i));
        json_t *top = json_array_get(tops, i);
        cr_assert_eq(json_object_size(top), 3);
        double best = -INFINITY;
        const char *k;
        json_t *v;
        json_object_foreach(top, k, v) {
            cr_assert_leq(json_real_value(v), 0.0);
            best = fmax(best, json_real_value(v));
        }
        cr_assert_float_eq(mine, best, 1e-5, "greedy takes the most likely token (%zu)", i);
        cr_assert_eq(json_integer_value(json_array_get(offs, i)), (json_int_t)(strlen(joined) -
                                                                               strlen(json_string_value(json_array_get(tokens, i)))));
    }
    cr_assert_str_eq(joined, str_at(o, "choices.0.text"), "the tokens spell the text");
    json_decref(o);
    hresp_free(&r);
    free(body);
    /* streamed, the same entries with the same offsets: also where a stop string holds text back
     * ("thX": every " the" waits a chunk) and where it cuts a token's text away (" the" at the end) */
    static const char *const stops[] = {"{\"logprobs\":0,\"stop\":[\"thX\"]}", "{\"logprobs\":2,\"stop\":[\" the\"]}"};
    for (int k = 0; k < 2; k++) {
        json_t *want = json_array(), *got = json_array(); /* [token, offset] pairs */
        for (int stream = 0; stream < 2; stream++) {
            body = completion_body("In the beginning", 20, stream, stops[k]);
            r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
            cr_assert_eq(r.status, 200, "%s", r.body);
            json_t *ev = stream ? events_of(r.body) : json_pack("[s]", r.body);
            for (size_t e = 0; e < json_array_size(ev) - (size_t)stream; e++) {
                json_t *c = json_loads(json_string_value(json_array_get(ev, e)), 0, NULL);
                lp = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "logprobs");
                for (size_t i = 0; i < json_array_size(json_object_get(lp, "tokens")); i++)
                    json_array_append_new(stream ? got : want,
                                          json_pack("[O, O]", json_array_get(json_object_get(lp, "tokens"), i),
                                                    json_array_get(json_object_get(lp, "text_offset"), i)));
                json_decref(c);
            }
            json_decref(ev);
            hresp_free(&r);
            free(body);
        }
        cr_assert_gt(json_array_size(want), 0);
        char *w = json_dumps(want, JSON_COMPACT), *g = json_dumps(got, JSON_COMPACT);
        cr_assert_str_eq(g, w, "stop %s: the stream's logprobs differ from the whole response's", stops[k]);
        free(w);
        free(g);
        json_decref(want);
        json_decref(got);
    }
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":5,\"temperature\":0,"
                       "\"logprobs\":true,\"top_logprobs\":2}";
    r = http_call(s.http_port, "POST", "/v1/chat/completions", NULL, chat);
    o = json_of(&r);
    json_t *content = json_object_get(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs"),
                                      "content");
    cr_assert_eq((json_int_t)json_array_size(content), int_at(o, "usage.completion_tokens"), "%s", r.body);
    cr_assert_eq(json_array_size(json_object_get(json_array_get(content, 0), "top_logprobs")), 2);
    cr_assert(json_is_array(json_object_get(json_array_get(content, 0), "bytes")));
    json_decref(o);
    hresp_free(&r);
    server_stop(&s);
}

/* One line of /metrics: the value of `series` (name and labels exactly), or -1. */
static double metric(server *s, const char *series)
{
    hresp r = http_call(s->http_port, "GET", "/metrics", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert(strcasestr(r.head, "Content-Type: text/plain; version=0.0.4"), "%s", r.head);
    double v = -1;
    size_t n = strlen(series);
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n"))
        if (!strncmp(line, series, n) && line[n] == ' ')
            v = atof(line + n + 1);
    hresp_free(&r);
    return v;
}

/* The stream is held (its client does not read, past a 4 KiB output buffer) until the reset, so
 * that it cannot end first. */
Test(http, a_dropped_stream_is_cancelled_and_frees_its_kv, .timeout = 120)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--output-buffer", "4", NULL};
    server s;
    server_start(&s, args);
    int fd = unread_stream(&s, "In the beginning", 400);
    struct linger hard = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    close(fd); /* a reset */
    wait_idle(&s);
    cr_assert_eq(metric(&s, "minions_requests_total{frontend=\"http\",outcome=\"cancelled\"}"), 1);
    cr_assert_eq(metric(&s, "minions_requests_in_flight{frontend=\"http\"}"), 0);
    server_stop(&s);
}

/* A chat without max_tokens asks for as many tokens as fit: in a KV pool smaller than the context
 * (16 blocks of 16 positions beside a context of 1,024) that is what the pool holds, not a 400. */
Test(http, a_chat_without_max_tokens_fits_a_small_pool, .timeout = 120)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--kv-blocks", "16", NULL};
    server s;
    server_start(&s, args);
    hresp r = http_call(s.http_port, "POST", "/v1/chat/completions", NULL,
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"In the beginning\"}],\"temperature\":0}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *o = json_of(&r);
    cr_assert_str_eq(str_at(o, "choices.0.finish_reason"), "length", "%s", r.body);
    cr_assert_eq(int_at(o, "usage.total_tokens"), 16 * 16, "%s", r.body);
    json_decref(o);
    hresp_free(&r);
    expect_status(&s, "POST", "/v1/chat/completions", NULL, /* asked for, it must fit */
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"In the beginning\"}],\"max_tokens\":300}", 400,
                  NULL);
    wait_idle(&s);
    server_stop(&s);
}

/* A client that closes its connection while its whole (not streamed) answer is being generated
 * cancels it, as a dropped stream does: nothing is written to it until the end, so only a watch on
 * its socket sees it go (it ran to its end before). */
Test(http, a_client_that_leaves_before_its_answer_cancels_it, .timeout = 120)
{
    server s;
    server_start(&s, HTTP);
    int fd = http_connect(s.http_port, 0);
    char *body = completion_body("In the beginning", 900, 0, "{\"n\":4}");
    http_send(fd, "POST", "/v1/completions", NULL, body, 1);
    free(body);
    json_int_t running = wait_running(&s);
    cr_assert_gt(running, 0, "the generation never started");
    close(fd);
    wait_idle(&s);
    cr_assert_eq(metric(&s, "minions_requests_total{frontend=\"http\",outcome=\"cancelled\"}"), 4,
                 "the four choices of a client that left were not cancelled");
    json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
    cr_assert_lt(stat_of(st, "tokens", "generated"), 4 * 900, "the choices ran to their end");
    json_decref(st);
    server_stop(&s);
}

/* Resident memory of a process, in KiB (VmRSS). */
static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kib = atol(line + 6);
    fclose(f);
    return kib;
}

/* While its reply streams, evhttp reads on from a client only to see it close: what the client sends
 * then is held, so that a client pushing 64 MB at a stream made the server hold 64 MB. It reads 64 KiB
 * at most now; the rest waits in the sockets, and the stream ends as any other. The stream is held
 * (its client does not read, past a 4 KiB output buffer) for the whole push, and still is after it. */
Test(http, what_a_client_sends_while_its_reply_streams_is_not_held, .timeout = 120)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--output-buffer", "4", NULL};
    server s;
    server_start(&s, args);
    int fd = unread_stream(&s, "In the beginning", 900);
    long before = rss_kib(s.pid);
    enum { JUNK = 64 << 20 };
    char *junk = calloc(1, 1 << 20);
    size_t sent = 0;
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { /* as much as the sockets take in 2 s */
        ssize_t n = send(fd, junk, 1 << 20, MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        else
            usleep(10000);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (sent < JUNK && (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 2000);
    long grown = rss_kib(s.pid) - before;
    free(junk);
    cr_assert_eq(requests_stat(&s, "paused"), 1, "the stream ended during the push");
    cr_assert_eq(metric(&s, "minions_requests_in_flight{frontend=\"http\"}"), 1, "the stream ended during the push");
    close(fd);
    cr_assert_lt(grown, 16 << 10, "the server grew by %ld KiB while a client sent %zu bytes at its stream", grown,
                 sent);
    wait_idle(&s);
    cr_assert_eq(metric(&s, "minions_requests_total{frontend=\"http\",outcome=\"cancelled\"}"), 1,
                 "the stream was held to the end of the push, then dropped");
    server_stop(&s);
}

Test(http, a_stream_that_is_not_read_pauses_then_completes, .timeout = 300)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--output-buffer", "4", NULL};
    server s;
    server_start(&s, args);
    int fd = unread_stream(&s, "And God said", 300);
    hresp r = http_read_all(fd);
    char *text = stream_text(&r, 0, NULL);
    char *want = generate("And God said", 300);
    cr_assert_str_eq(text, want, "paused and resumed, the text is plain decoding's");
    free(want);
    free(text);
    hresp_free(&r);
    server_stop(&s);
}

Test(http, metrics_count_what_happened, .timeout = 120)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--draft", "ngram", NULL};
    server s;
    server_start(&s, args);
    for (int i = 0; i < 2; i++) {
        char *body = completion_body("And God said, Let there be light", 20, i, NULL);
        hresp r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
        cr_assert_eq(r.status, 200);
        hresp_free(&r);
        free(body);
    }
    expect_status(&s, "POST", "/v1/completions", NULL, "{}", 400, "prompt");
    cr_assert_eq(metric(&s, "minions_requests_total{frontend=\"http\",outcome=\"length\"}"), 2);
    cr_assert_eq(metric(&s, "minions_requests_total{frontend=\"http\",outcome=\"rejected\"}"), 1);
    cr_assert_eq(metric(&s, "minions_generation_tokens_total"), 40);
    cr_assert_eq(metric(&s, "minions_time_to_first_token_seconds_count"), 2);
    cr_assert_eq(metric(&s, "minions_e2e_request_latency_seconds_bucket{le=\"+Inf\"}"), 2);
    cr_assert_gt(metric(&s, "minions_spec_decode_num_drafts_total"), 0);
    /* the only drafter won every verified vote, and only those */
    cr_assert_eq(metric(&s, "minions_drafter_votes_won_total{drafter=\"ngram\"}"),
                 metric(&s, "minions_spec_decode_num_drafts_total"));
    tconn c; /* a line the line protocol refuses counts there */
    connect_to(s.tcp, &c);
    send_line(&c, "{not json");
    json_decref(read_reply(&c));
    tconn_close(&c);
    cr_assert_eq(metric(&s, "minions_requests_total{frontend=\"lines\",outcome=\"rejected\"}"), 1);
    cr_assert_eq(metric(&s, "minions_kv_blocks_used"), 0);
    cr_assert_eq(metric(&s, "minions_idle_connections_closed_total{frontend=\"lines\"}"), 0);
    cr_assert_eq(metric(&s, "minions_accept_pauses_total{frontend=\"http\"}"), 0);
    double accepted = metric(&s, "minions_spec_decode_num_accepted_tokens_total");
    cr_assert_eq(metric(&s, "minions_spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"}") > 0, accepted > 0);
    server_stop(&s);
}

/* Every request that produced a token is in the latency histograms, wherever it ended: here
 * streaming line clients that never read are paused, preempted for the queued ones and then
 * vanish, so some end cancelled while re-queued, in kvmem (their e2e was lost when the verifier
 * alone recorded it: e2e counted 9 of 15 such requests). */
Test(http, latencies_count_every_request_that_produced_a_token, .timeout = 300)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--kv-blocks", "120", "--output-buffer", "4", NULL};
    server s;
    server_start(&s, args);
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = socket(AF_UNIX, SOCK_STREAM, 0);
        int rcvbuf = 2048;
        setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        cr_assert_lt(strlen(s.unix_path), sizeof un.sun_path);
        memcpy(un.sun_path, s.unix_path, strlen(s.unix_path) + 1);
        cr_assert_eq(connect(fds[i], (struct sockaddr *)&un, sizeof un), 0);
        for (int j = 0; j < 2; j++) {
            char line[256];
            int n = snprintf(line, sizeof line,
                             "{\"id\":\"u%d-%d\",\"prompt\":\"In the beginning%.*s\",\"max_tokens\":600,"
                             "\"stream\":true}\n",
                             i, j, 4 * (i + j), " God God God God God God God God");
            cr_assert_eq(write(fds[i], line, (size_t)n), n);
        }
    }
    json_int_t preempted = 0;
    for (int i = 0; i < 400 && preempted < 2; i++, usleep(50000)) {
        json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
        preempted = stat_of(st, "preemptions", NULL);
        json_decref(st);
    }
    cr_assert_geq(preempted, 2, "the paused streams are preempted for the queued ones");
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    wait_idle(&s);
    double ttft = metric(&s, "minions_time_to_first_token_seconds_count");
    cr_assert_gt(ttft, 0);
    cr_assert_eq(metric(&s, "minions_e2e_request_latency_seconds_count"), ttft);
    server_stop(&s);
}

/* The stream in flight is held through the drain's checks (its client does not read, past a 4 KiB
 * output buffer, so that it cannot end, and the daemon exit, before them), then read to its end. */
Test(http, a_drain_finishes_streams_and_refuses_new_work, .timeout = 300)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--output-buffer", "4", "--drain-timeout", "0", NULL};
    server s;
    server_start(&s, args);
    int idle = http_connect(s.http_port, 0);
    http_send(idle, "GET", "/health", NULL, NULL, 1); /* a keep-alive connection, idle after this */
    char buf[512];
    cr_assert_gt(read(idle, buf, sizeof buf), 0);
    int stream = unread_stream(&s, "In the beginning", 200);
    kill(s.pid, SIGTERM);
    int refused = 0;
    for (int i = 0; i < 500 && !refused; i++, usleep(20000)) {
        int fd = http_connect(s.http_port, 0);
        refused = fd < 0;
        if (fd >= 0)
            close(fd);
    }
    cr_assert(refused, "new connections are refused once the drain has begun");
    http_send(idle, "GET", "/health", NULL, NULL, 1);
    hresp h = http_read_all(idle);
    cr_assert_eq(h.status, 503, "a request on an open connection during the drain: %s", h.head);
    cr_assert(strcasestr(h.head, "Connection: close"));
    hresp_free(&h);
    json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
    cr_assert(json_is_true(json_object_get(json_object_get(st, "stats"), "draining")));
    /* held, unfinished: paused, or running a while where the kernel took a little more of the
     * unread stream (a window probe, it seems: 3 runs of 80 with this build; 0 of 45 with the
     * session's first build, though no change on this path between them was found) */
    cr_assert_eq(stat_of(st, "requests", "running"), 1, "the stream is still held: %s", json_dumps(st, 0));
    cr_assert_eq(stat_of(st, "requests", "done"), 0, "and unfinished");
    cr_assert_eq(stat_of(st, "http", "in_flight"), 1);
    json_decref(st);
    hresp r = http_read_all(stream); /* its client reads at last: it runs to its end */
    json_t *last = NULL;
    free(stream_text(&r, 0, &last));
    cr_assert_str_eq(str_at(last, "choices.0.finish_reason"), "length", "the stream in flight ran to its end");
    cr_assert_eq(int_at(last, "usage.completion_tokens"), 200);
    json_decref(last);
    hresp_free(&r);
    cr_assert_eq(server_wait(&s, 60), 0, "minionsd exits 0 after the drain");
}

/* A HEAD request gets its GET's status and headers and no body, so that the next reply on the kept-alive
 * connection starts where the client expects it. */
Test(http, head_has_no_body, .timeout = 120)
{
    server s;
    server_start(&s, HTTP);
    static const char *const paths[] = {"/health", "/v1/models", "/metrics", "/nowhere"};
    static const int want[] = {200, 200, 200, 404};
    for (int i = 0; i < 4; i++) {
        int fd = http_connect(s.http_port, 0);
        http_send(fd, "HEAD", paths[i], NULL, NULL, 1);
        http_send(fd, "GET", "/health", NULL, NULL, 0);
        hresp r = http_read_all(fd); /* the HEAD's head, then what follows it: the GET's reply */
        cr_assert_eq(r.status, want[i], "HEAD %s: %s", paths[i], r.head);
        cr_assert(!strncmp(r.body, "HTTP/1.1 200", 12), "HEAD %s: after its head came %.60s", paths[i], r.body);
        hresp_free(&r);
    }
    server_stop(&s);
}

/* A forced drain (a second signal) closes an HTTP stream whose client stopped reading at once, not
 * after --http-timeout, and the daemon exits with every block back. */
Test(http, a_forced_drain_closes_a_stream_that_is_not_read, .timeout = 120)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--output-buffer", "4", "--http-timeout", "600", NULL};
    server s;
    server_start(&s, args);
    int fd = unread_stream(&s, "And God said", 1000);
    kill(s.pid, SIGTERM);
    bool draining = false; /* before the second signal, or the two could arrive as one */
    for (int i = 0; i < 200 && !draining; i++, usleep(50000)) {
        json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
        draining = json_is_true(json_object_get(json_object_get(st, "stats"), "draining"));
        json_decref(st);
    }
    cr_assert(draining, "the first SIGTERM starts a drain");
    kill(s.pid, SIGTERM); /* the second signal forces the drain */
    cr_assert_eq(server_wait(&s, 30), 0, "minionsd exits 0 once the forced drain closed the stream");
    close(fd);
}

/* Seconds since t0 (CLOCK_MONOTONIC). */
static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* What a connection still gives until it ends, into buf (NUL-terminated, cut at cap); fails the
 * test when it has not ended within 60 s (SO_RCVTIMEO). Returns the errno it ended with: 0 for an
 * orderly close. */
static int read_to_end(int fd, char *buf, size_t cap)
{
    struct timeval tv = {60, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t len = 0;
    char scratch[4096];
    ssize_t n;
    while ((n = read(fd, scratch, sizeof scratch)) > 0) {
        size_t k = (size_t)n < cap - 1 - len ? (size_t)n : cap - 1 - len;
        memcpy(buf + len, scratch, k);
        len += k;
    }
    buf[len] = 0;
    int e = n < 0 ? errno : 0;
    cr_assert(e != EAGAIN && e != EWOULDBLOCK, "the server did not close the connection within 60 s");
    return e;
}

/* --http-timeout closes a connection idle that long (a keep-alive one between requests) and one whose
 * output is stuck that long (a stream its client does not read, paused past --output-buffer): that
 * stream's request is cancelled and its KV freed, and the server serves on. */
Test(http, the_http_timeout_closes_idle_and_stuck_connections, .timeout = 120)
{
    static const char *const args[] = {"--http", "127.0.0.1:0", "--output-buffer", "4", "--http-timeout", "1", NULL};
    server s;
    server_start(&s, args);
    int stuck = http_connect(s.http_port, 4096);
    char *body = completion_body("In the beginning", 900, 1, NULL);
    http_send(stuck, "POST", "/v1/completions", NULL, body, 1);
    free(body);
    char buf[1 << 16];
    int idle = http_connect(s.http_port, 0);
    struct timespec t0;
    for (int i = 0; i < 2; i++) { /* kept alive: a second request on it is answered */
        clock_gettime(CLOCK_MONOTONIC, &t0); /* before the server's last read on it */
        http_send(idle, "GET", "/health", NULL, NULL, 1);
        ssize_t n = read(idle, buf, sizeof buf - 1);
        cr_assert_gt(n, 0, "request %d on a keep-alive connection", i);
        buf[n] = 0;
        cr_assert(strstr(buf, "HTTP/1.1 200") && !strcasestr(buf, "Connection: close"), "%s", buf);
    }
    int e = read_to_end(idle, buf, sizeof buf);
    double idle_for = since(&t0);
    cr_assert(e == 0 && !*buf, "the idle connection ends with a close, nothing else: %s %s", strerror(e), buf);
    cr_assert_geq(idle_for, 0.9, "closed %.2f s after its last request, before its timeout", idle_for);
    close(idle);
    /* only the timeout can end the stream: its client neither reads nor leaves (polled for 30 s) */
    double cancelled = 0;
    for (int i = 0; i < 600 && cancelled < 1; i++, usleep(50000))
        cancelled = metric(&s, "minions_requests_total{frontend=\"http\",outcome=\"cancelled\"}");
    cr_assert_eq(cancelled, 1, "the stuck stream was not cancelled");
    wait_idle(&s);
    json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
    cr_assert_lt(stat_of(st, "tokens", "generated"), 900, "the stuck stream ran to its end");
    json_decref(st);
    e = read_to_end(stuck, buf, sizeof buf);
    cr_assert(e == 0 || e == ECONNRESET, "%s", strerror(e));
    cr_assert(!strstr(buf, "[DONE]"), "the stream was cut short: %.200s", buf);
    close(stuck);
    hresp r = http_call(s.http_port, "GET", "/health", NULL, NULL);
    cr_assert_eq(r.status, 200);
    hresp_free(&r);
    server_stop(&s);
}

/* A full queue answers 429 server_busy in OpenAI's error shape, with Retry-After (docs/server.md;
 * a 503, which nginx retries elsewhere and counts against the instance, is a drain's). With a batch
 * of one and a queue of one, two paused streams (clients that do not read) hold KV, beside the
 * batch (paused requests hold max_queue places beside it); a third is admitted by preempting the
 * newer back into the queue, where it waits for its client to read, and fills it: a fourth request
 * is refused. Once they leave, the server takes requests again. */
Test(http, a_full_queue_answers_429_server_busy, .timeout = 120)
{
    static const char *const args[] = {"--http",      "127.0.0.1:0", "--max-batch",     "1", "--max-queue", "1",
                                       "--kv-blocks", "256",         "--output-buffer", "4", NULL};
    server s;
    server_start(&s, args);
    int held[3];
    held[0] = unread_stream_with(&s, "In the beginning", 300, NULL, 1);
    held[1] = unread_stream_with(&s, "And God said", 300, NULL, 2);
    held[2] = http_connect(s.http_port, 4096);
    cr_assert(held[2] >= 0);
    char *body = completion_body("DEVIL, n.", 300, 1, NULL);
    http_send(held[2], "POST", "/v1/completions", NULL, body, 0);
    free(body);
    json_int_t queued = 0, paused = 0, preempted = 0; /* settled: the second queued, the third paused */
    for (int i = 0; i < 400 && !(queued == 1 && paused == 2 && preempted == 1); i++, usleep(50000)) {
        json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
        queued = stat_of(st, "requests", "queued");
        paused = stat_of(st, "requests", "paused");
        preempted = stat_of(st, "preemptions", NULL);
        json_decref(st);
    }
    cr_assert(queued == 1 && paused == 2 && preempted == 1,
              "a paused stream is preempted into the queue for the third: %lld queued, %lld paused, %lld preempted",
              (long long)queued, (long long)paused, (long long)preempted);
    body = completion_body("In the beginning", 4, 0, NULL);
    hresp r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 429, "a request past a full queue: %d %s", r.status, r.body);
    cr_assert(strcasestr(r.head, "Retry-After: 1"), "%s", r.head);
    json_t *o = json_of(&r);
    cr_assert_str_eq(str_at(o, "error.type"), "server_busy", "%s", r.body);
    cr_assert(str_at(o, "error.message") && strstr(str_at(o, "error.message"), "queue is full"), "%s", r.body);
    json_t *err = json_object_get(o, "error");
    cr_assert(json_is_null(json_object_get(err, "param")) && json_is_null(json_object_get(err, "code")), "%s", r.body);
    json_decref(o);
    hresp_free(&r);
    for (int i = 0; i < 3; i++)
        close(held[i]);
    wait_idle(&s);
    r = http_call(s.http_port, "POST", "/v1/completions", NULL, body);
    cr_assert_eq(r.status, 200, "once the queue empties: %s", r.body);
    hresp_free(&r);
    free(body);
    server_stop(&s);
}

/* An HTTP address another socket listens on is a start-up error that names it: minionsd exits
 * non-zero (under `timeout`, so that a daemon that started anyway fails the test, not hangs it). */
Test(http, an_occupied_http_port_is_a_start_up_error, .timeout = 120)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t alen = sizeof a;
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(l, 4), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
    start_refused((const char *[]){"--http", addr, NULL}, addr);
    close(l);
}

/* One greedy chat on a model; returns the response object (the caller decrefs it). */
static json_t *chat_on(const char *model, char *log_check, size_t log_check_len)
{
    const char *const args[] = {"--http", "127.0.0.1:0", "--model", model, "--log-level", "info", NULL};
    server s;
    server_start(&s, args);
    hresp r = http_call(s.http_port, "POST", "/v1/chat/completions", NULL,
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the capital of France?\"}],"
                        "\"max_tokens\":40,\"temperature\":0}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *o = json_of(&r);
    hresp_free(&r);
    snprintf(log_check, log_check_len, "grep -q 'chat format chatml' %s/log", s.dir);
    cr_assert_eq(system(log_check), 0, "the template was recognised as ChatML");
    server_stop(&s);
    return o;
}

/* SmolLM2's chat template is ChatML: its markers must reach the model as its control tokens, or it
 * would not answer. The assistant's turn ends at <|im_end|>, which is also SmolLM2's end of text;
 * with the end of text moved to <|endoftext|>, a chat must still end there, with the same answer. */
Test(http, a_chatml_model_answers_a_chat_and_ends_its_turn, .timeout = 300)
{
    char path[1024], moved[1024], cmd[1200];
    snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", env_or("MINIONS_MODELS_DIR", "models/cache"));
    if (access(path, R_OK) != 0)
        cr_skip_test("no %s (tools/fetch-smollm2.sh)", path);
    json_t *o = chat_on(path, cmd, sizeof cmd);
    const char *answer = str_at(o, "choices.0.message.content");
    cr_assert(strstr(answer, "Paris"), "%s", answer);
    cr_assert_str_eq(str_at(o, "choices.0.finish_reason"), "stop", "the model ended its turn: %s", answer);
    cr_assert_lt(int_at(o, "usage.prompt_tokens"), 24, "the markers are single tokens");

    char dir[] = "/tmp/minions-eot-XXXXXX";
    cr_assert(mkdtemp(dir));
    snprintf(moved, sizeof moved, "%s/smollm2-eos0.gguf", dir);
    copy_with_u32(path, moved, "tokenizer.ggml.eos_token_id", 0); /* <|endoftext|> */
    json_t *m = chat_on(moved, cmd, sizeof cmd);
    cr_assert_str_eq(str_at(m, "choices.0.message.content"), answer);
    cr_assert_str_eq(str_at(m, "choices.0.finish_reason"), "stop");
    cr_assert_eq(int_at(m, "usage.completion_tokens"), int_at(o, "usage.completion_tokens"),
                 "generation stopped at <|im_end|>, not past it");
    json_decref(m);
    json_decref(o);
    unlink(moved);
    rmdir(dir);
}
