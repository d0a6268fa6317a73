/* bench_serve.c - minions-bench: N concurrent clients replay a prompt set against minionsd over TCP
 * (or a Unix socket) and report throughput, mean normalized latency (request latency / output
 * tokens), time to first token p50/p99; --out writes one JSON record per request. With --http the
 * clients speak the OpenAI API instead (POST /v1/completions, or /v1/chat/completions for a chat
 * prompt, not streamed, over keep-alive connections), so that one client drives minionsd --http and
 * other engines' servers (llama.cpp's llama-server) alike; the time to first token is then the
 * whole latency. --extra JSON adds fields to every request (llama-server's {"cache_prompt": false});
 * OPENAI_API_KEY, when set, goes with every HTTP request as its bearer token.
 * Each client is a thread with one connection and one request in flight at a time; clients take the
 * next prompt from a shared counter until --requests are done, starting at prompt --first (wrapping
 * at the set's end; a benchmark that must not repeat prompts gives each run its own slice). A
 * request answered with an error (busy under overload) counts as failed and the client goes on; a
 * connection that breaks (closed, or silent for --timeout seconds) fails its request and the client
 * connects again, until MAX_LOST connections in a row fail without an answer: then that client
 * ends early, and the summary says how many did. The last stdout line is a JSON summary for
 * scripts. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli/client.h"
#include "cli/prompts.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/num.h"

#define MAX_LOST 5 /* connections lost or refused in a row, without an answer, before a client gives up */

typedef struct record {
    int client;
    int prompt;
    long prompt_tokens, completion_tokens;
    long accepted, verifications;  /* the done line's spec, when the server speculates */
    double start, ttft, latency; /* seconds */
    char finish[16];
    int ok;
    int error;                   /* answered with an error (finish holds its code) */
} record;

typedef struct bench {
    const char *addr;
    mn_prompt *prompts;
    int n_prompts;
    int n_requests;
    int first;           /* --first: the prompt the first request takes */
    int max_tokens;
    double temperature;
    double top_p;             /* sent when below 1 */
    int http;                 /* --http: the OpenAI API */
    const char *api_key;      /* OPENAI_API_KEY, or NULL */
    json_t *extra;            /* --extra: fields every request carries */
    double timeout;           /* --timeout: seconds without a byte before a connection is given up */
    atomic_int next;
    atomic_int ended_early;   /* clients that gave up after MAX_LOST broken connections */
    record *records;
    double t0;
} bench;

typedef struct client_arg {
    bench *b;
    int id;
} client_arg;

/* One request over minionsd's JSON-lines protocol, streamed; r->ok when its done line came. 0 when
 * the connection broke (it cannot carry another request), 1 when it is still usable. */
static int native_request(mn_client *c, json_t *o, record *r)
{
    char *line = json_dumps(o, JSON_COMPACT);
    if (!line) {
        fprintf(stderr, "minions-bench: out of memory\n");
        return 1;
    }
    size_t n = strlen(line);
    line[n] = '\n';
    r->start = mn_now();
    int sent = mn_client_send(c, line, n + 1);
    free(line);
    if (sent < 0) {
        fprintf(stderr, "minions-bench: send failed: %s\n", mn_client_strerror(c));
        return 0;
    }
    for (char *l; (l = mn_client_read_line(c, &n));) {
        json_t *reply = json_loadb(l, n, 0, NULL), *e;
        if (json_object_get(reply, "delta") && !r->ttft)
            r->ttft = mn_now() - r->start;
        if ((e = json_object_get(reply, "error"))) {
            fprintf(stderr, "minions-bench: %s\n", l);
            const char *code = json_string_value(json_object_get(e, "code"));
            snprintf(r->finish, sizeof r->finish, "%s", code ? code : "error");
            r->error = 1;
            json_decref(reply);
            return 1;
        }
        if (json_object_get(reply, "done")) {
            r->latency = mn_now() - r->start;
            json_t *u = json_object_get(reply, "usage");
            r->prompt_tokens = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
            r->completion_tokens = (long)json_integer_value(json_object_get(u, "completion_tokens"));
            json_t *sp = json_object_get(reply, "spec");
            r->accepted = (long)json_integer_value(json_object_get(sp, "accepted"));
            r->verifications = (long)json_integer_value(json_object_get(sp, "verifications"));
            snprintf(r->finish, sizeof r->finish, "%s", json_string_value(json_object_get(reply, "finish_reason")));
            if (!r->ttft)
                r->ttft = r->latency;
            r->ok = 1;
            json_decref(reply);
            return 1;
        }
        json_decref(reply);
    }
    fprintf(stderr, "minions-bench: %s\n", mn_client_strerror(c));
    return 0;
}

/* The reply's status and body (Content-Length framed; *close when the server will close the
 * connection after it): the body, owned by the client, or NULL. */
static char *http_reply(mn_client *c, int *status, int *close_after)
{
    size_t n;
    char *l = mn_client_read_line(c, &n);
    if (!l || sscanf(l, "HTTP/1.%*d %d", status) != 1)
        return NULL;
    long length = -1;
    *close_after = strncmp(l, "HTTP/1.0", 8) == 0;
    while ((l = mn_client_read_line(c, &n)) && n > 0 && l[0] != '\r') {
        if (strncasecmp(l, "content-length:", 15) == 0)
            length = strtol(l + 15, NULL, 10);
        else if (strncasecmp(l, "connection:", 11) == 0)
            *close_after = strcasestr(l + 11, "close") != NULL;
    }
    if (!l)
        return NULL;
    if (length < 0) {
        fprintf(stderr, "minions-bench: the server's reply has no Content-Length (chunked replies are not read)\n");
        return NULL;
    }
    return mn_client_read_bytes(c, (size_t)length);
}

/* One request over the OpenAI API, not streamed; r->ok when a 200 reply with its usage came. 0 when
 * no reply came (the connection is closed then), 1 when one did (a connection the server will
 * close is closed too; the next request connects again). */
static int http_request(mn_client *c, const bench *b, json_t *o, int chat, record *r)
{
    const char *addr = b->addr;
    json_object_del(o, "id");
    json_object_set_new(o, "stream", json_false());
    char *body = json_dumps(o, JSON_COMPACT);
    if (!body) {
        fprintf(stderr, "minions-bench: out of memory\n");
        return 1;
    }
    size_t n = strlen(body);
    char head[1024];
    int h = snprintf(head, sizeof head,
                     "POST /v1/%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n%s%s%s\r\n",
                     chat ? "chat/completions" : "completions", addr, n, b->api_key ? "Authorization: Bearer " : "",
                     b->api_key ? b->api_key : "", b->api_key ? "\r\n" : "");
    if (h < 0 || (size_t)h >= sizeof head) {
        fprintf(stderr, "minions-bench: OPENAI_API_KEY is too long\n");
        free(body);
        return 1;
    }
    r->start = mn_now();
    int status = 0, close_after = 0;
    char *reply = mn_client_send(c, head, (size_t)h) == 0 && mn_client_send(c, body, n) == 0
                      ? http_reply(c, &status, &close_after)
                      : NULL;
    free(body);
    r->latency = r->ttft = mn_now() - r->start;
    json_t *j = reply ? json_loads(reply, 0, NULL) : NULL;
    json_t *u = json_object_get(j, "usage");
    if (status == 200 && json_is_object(u)) {
        r->prompt_tokens = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
        r->completion_tokens = (long)json_integer_value(json_object_get(u, "completion_tokens"));
        json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
        snprintf(r->finish, sizeof r->finish, "%s", json_string_value(json_object_get(choice, "finish_reason")));
        r->ok = 1;
    } else if (reply) {
        fprintf(stderr, "minions-bench: HTTP %d: %s\n", status, reply);
        snprintf(r->finish, sizeof r->finish, "HTTP %d", status);
        r->error = 1;
    } else {
        fprintf(stderr, "minions-bench: no reply: %s\n", mn_client_strerror(c));
    }
    json_decref(j);
    if (close_after || !reply)
        mn_client_close(c);
    return reply != NULL;
}

/* Connect c, with the run's timeout: 0, or -1 with the reason on stderr. */
static int client_connect(const bench *b, int id, mn_client *c)
{
    mn_err err = {{0}};
    if (mn_client_connect(b->addr, c, &err) < 0) {
        fprintf(stderr, "minions-bench: client %d: %s\n", id, err.msg);
        return -1;
    }
    if (mn_client_set_timeout(c, b->timeout) < 0) {
        fprintf(stderr, "minions-bench: client %d: cannot set the timeout: %s\n", id, strerror(errno));
        mn_client_close(c);
        return -1;
    }
    return 0;
}

static void *client_main(void *arg)
{
    client_arg *ca = arg;
    bench *b = ca->b;
    mn_client c = {.fd = -1};
    int lost = 0; /* connections lost or refused in a row without an answer */
    for (int k;;) {
        if (c.fd < 0 && client_connect(b, ca->id, &c) < 0) {
            if (++lost >= MAX_LOST)
                break;
            nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
            continue;
        }
        if ((k = atomic_fetch_add(&b->next, 1)) >= b->n_requests)
            break;
        record *r = &b->records[k];
        r->client = ca->id;
        r->prompt = (b->first + k) % b->n_prompts;
        json_t *o = json_pack("{s:s, s:i, s:f, s:b}", "id", "b", "max_tokens", b->max_tokens, "temperature",
                              b->temperature, "stream", 1);
        if (o && b->top_p < 1.0)
            json_object_set_new(o, "top_p", json_real(b->top_p));
        if (!o || mn_prompt_set(&b->prompts[r->prompt], o) < 0 || (b->extra && json_object_update(o, b->extra) < 0)) {
            fprintf(stderr, "minions-bench: client %d: out of memory; it stops\n", ca->id);
            atomic_fetch_add(&b->ended_early, 1);
            json_decref(o);
            break;
        }
        int answered = b->http ? http_request(&c, b, o, b->prompts[r->prompt].chat, r) : native_request(&c, o, r);
        json_decref(o);
        if (answered) {
            lost = 0;
        } else {
            mn_client_close(&c);
            if (++lost >= MAX_LOST)
                break;
        }
    }
    if (lost >= MAX_LOST) {
        fprintf(stderr, "minions-bench: client %d: %d connections in a row failed; it stops\n", ca->id, lost);
        atomic_fetch_add(&b->ended_early, 1);
    }
    mn_client_close(&c);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The pct-th percentile of n sorted values by nearest rank (the ceil(pct/100 n)-th value); 0 when
 * there are none. */
static double percentile(const double *sorted, int n, int pct)
{
    return n ? sorted[((long)n * pct + 99) / 100 - 1] : 0;
}

int main(int argc, char **argv)
{
    bench b = {.addr = "127.0.0.1:8090", .max_tokens = 64, .top_p = 1.0, .timeout = MN_CLIENT_TIMEOUT_S};
    const char *prompts = "prompts/kjv.jsonl", *out = NULL;
    int clients = 1;
    static const struct option opts[] = {
        {"addr", required_argument, 0, 'a'},     {"clients", required_argument, 0, 'c'},
        {"prompts", required_argument, 0, 'p'},  {"requests", required_argument, 0, 'r'},
        {"max-tokens", required_argument, 0, 'n'}, {"temperature", required_argument, 0, 'T'},
        {"top-p", required_argument, 0, 'P'},    {"http", no_argument, 0, 'H'},
        {"extra", required_argument, 0, 'x'},    {"out", required_argument, 0, 'o'},
        {"first", required_argument, 0, 'f'},    {"help", no_argument, 0, 'h'},
        {"timeout", required_argument, 0, 't'},  {0, 0, 0, 0},
    };
    for (int c; (c = getopt_long(argc, argv, "a:c:p:r:n:o:f:h", opts, NULL)) != -1;) {
        long n = 0;
        double x = 0;
        bool ok = true;
        switch (c) {
        case 'a': b.addr = optarg; break;
        case 'c': ok = mn_parse_long(optarg, 1, 1024, &n), clients = (int)n; break;
        case 'p': prompts = optarg; break;
        case 'r': ok = mn_parse_long(optarg, 0, 1L << 30, &n), b.n_requests = (int)n; break;
        case 'n': ok = mn_parse_long(optarg, 1, 1 << 20, &n), b.max_tokens = (int)n; break;
        case 'T': ok = mn_parse_real(optarg, 0, 100, &x), b.temperature = x; break;
        case 'P': ok = mn_parse_real(optarg, 1e-6, 1, &x), b.top_p = x; break;
        case 'H': b.http = 1; break;
        case 'x':
            json_decref(b.extra);
            b.extra = json_loads(optarg, 0, NULL); /* apart: json_is_object evaluates its argument twice */
            if (!json_is_object(b.extra)) {
                fprintf(stderr, "minions-bench: --extra takes a JSON object, not %s\n", optarg);
                json_decref(b.extra);
                return 2;
            }
            break;
        case 'o': out = optarg; break;
        case 'f': ok = mn_parse_long(optarg, 0, 1L << 30, &n), b.first = (int)n; break;
        case 't': ok = mn_parse_real(optarg, 0, 86400, &b.timeout); break;
        case 'h':
        default:
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: minions-bench [--addr HOST:PORT|PATH] [--clients N] [--prompts FILE.jsonl]\n"
                    "                     [--requests N] [--first K] [--max-tokens N] [--temperature T]\n"
                    "                     [--top-p P] [--out FILE.jsonl] [--http [--extra JSON]]\n"
                    "                     [--timeout S (nothing for S seconds breaks a connection; default\n"
                    "                      300, 0: never)]\n");
            return c == 'h' ? 0 : 2;
        }
        if (!ok) {
            fprintf(stderr, "minions-bench: bad option value '%s'\n", optarg);
            return 2;
        }
    }
    FILE *rf = NULL;
    if (out && !(rf = fopen(out, "w"))) {
        fprintf(stderr, "minions-bench: cannot open %s: %s\n", out, strerror(errno));
        json_decref(b.extra);
        return 2;
    }
    if (mn_prompts_load(prompts, 0, SIZE_MAX, &b.prompts, &b.n_prompts) < 0) {
        fprintf(stderr, "minions-bench: cannot read prompts from %s\n", prompts);
        if (rf)
            fclose(rf);
        json_decref(b.extra);
        return 1;
    }
    if (b.n_requests <= 0)
        b.n_requests = b.n_prompts;
    b.api_key = getenv("OPENAI_API_KEY");
    if (b.api_key && !*b.api_key)
        b.api_key = NULL;
    b.records = mn_calloc((size_t)b.n_requests, sizeof *b.records);
    pthread_t *th = mn_calloc((size_t)clients, sizeof *th);
    client_arg *args = mn_calloc((size_t)clients, sizeof *args);
    double *ttft = mn_calloc((size_t)b.n_requests, sizeof *ttft);
    int started = 0, rc = 1;
    if (!b.records || !th || !args || !ttft) {
        fprintf(stderr, "minions-bench: out of memory\n");
        goto out;
    }
    b.t0 = mn_now();
    for (; started < clients; started++) {
        args[started] = (client_arg){&b, started};
        int e = pthread_create(&th[started], NULL, client_main, &args[started]);
        if (e) {
            fprintf(stderr, "minions-bench: cannot start client %d: %s\n", started, strerror(e));
            atomic_store(&b.next, b.n_requests); /* the started clients take no more requests */
            break;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (started < clients)
        goto out;
    double wall = mn_now() - b.t0;
    long tokens = 0, accepted = 0, verifications = 0;
    int ok = 0, errors = 0;
    double norm = 0;
    for (int k = 0; k < b.n_requests; k++) {
        record *r = &b.records[k];
        errors += r->error;
        if (!r->ok)
            continue;
        tokens += r->completion_tokens;
        accepted += r->accepted;
        verifications += r->verifications;
        norm += r->latency / (r->completion_tokens ? r->completion_tokens : 1);
        ttft[ok++] = r->ttft;
        if (rf)
            fprintf(rf,
                    "{\"client\":%d,\"prompt\":%d,\"prompt_tokens\":%ld,\"completion_tokens\":%ld,"
                    "\"start_s\":%.6f,\"ttft_s\":%.6f,\"latency_s\":%.6f,\"finish_reason\":\"%s\","
                    "\"accepted\":%ld,\"verifications\":%ld}\n",
                    r->client, r->prompt, r->prompt_tokens, r->completion_tokens, r->start - b.t0, r->ttft, r->latency,
                    r->finish, r->accepted, r->verifications);
    }
    if (rf) {
        int bad = ferror(rf), closed = fclose(rf);
        rf = NULL;
        if (bad || closed) {
            fprintf(stderr, "minions-bench: cannot write %s: %s\n", out, strerror(errno));
            goto out;
        }
    }
    qsort(ttft, (size_t)ok, sizeof *ttft, cmp_double);
    double p50 = percentile(ttft, ok, 50), p99 = percentile(ttft, ok, 99);
    int ended = atomic_load(&b.ended_early);
    printf("minions-bench: %d clients", clients);
    if (ended)
        printf(" (%d ended early)", ended);
    printf(", %d/%d requests ok (%d answered with an error), %ld tokens in %.2f s\n", ok, b.n_requests, errors, tokens,
           wall);
    printf("  throughput %.1f tok/s | mean normalized latency %.2f ms/token | TTFT p50 %.1f ms p99 %.1f ms\n",
           tokens / wall, 1e3 * norm / (ok ? ok : 1), 1e3 * p50, 1e3 * p99);
    printf("{\"clients\":%d,\"requests\":%d,\"ok\":%d,\"tokens\":%ld,\"seconds\":%.4f,\"tok_per_s\":%.2f,"
           "\"norm_latency_ms\":%.4f,\"ttft_p50_ms\":%.3f,\"ttft_p99_ms\":%.3f,\"mean_accepted_len\":%.4f,"
           "\"errors\":%d,\"clients_ended_early\":%d}\n",
           clients, b.n_requests, ok, tokens, wall, tokens / wall, 1e3 * norm / (ok ? ok : 1), 1e3 * p50, 1e3 * p99,
           verifications ? (double)accepted / verifications : 0.0, errors, ended);
    rc = ok == b.n_requests ? 0 : 1;
out:
    if (rf)
        fclose(rf);
    mn_prompts_free(b.prompts, b.n_prompts);
    json_decref(b.extra);
    mn_free(b.records);
    mn_free(th);
    mn_free(args);
    mn_free(ttft);
    return rc;
}
