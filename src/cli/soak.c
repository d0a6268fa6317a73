/* soak.c - minions-soak: a soak tester for minionsd whose end state is checked (issue #9).
 *
 * --clients threads each run connections ("sessions") one after another until the thread's share
 * of --requests is sent, or until MAX_STALLS sessions in a row stalled (a frozen server ends the
 * run with its summary). A chat set's prompts (prompts.h) go as a user's message. A session's plan
 * comes from the thread's seeded RNG, so a seed replays the same plans (what is in flight when a
 * cancel or a close lands still depends on timing):
 *   - pipelined requests with unique ids (up to 6 in flight), stream or not, greedy or sampled,
 *     stop strings sometimes, ids with quotes, backslashes, non-ASCII or 128 bytes;
 *   - cancels (at send time, after some deltas, or after a delay), duplicate in-flight ids, bad
 *     lines (invalid JSON, unknown or out-of-range fields, NUL bytes, invalid UTF-8, cancels of
 *     unknown ids), blank lines, a reader that stops reading for a while;
 *   - an ending: SYNC (a cancel of a never-used id; its unknown_id answer proves every earlier line
 *     was handled, so nothing can still be on its way), HALF-CLOSE (shutdown(SHUT_WR), read to
 *     end-of-file), ABRUPT (close, optionally with SO_LINGER 0, requests in flight) or TOO-LONG (a
 *     line past --max-line: one line_too_long error, then end-of-file).
 *
 * Every reply line is checked against the session's record of what it sent. On a session that was
 * not cut (SYNC, HALF-CLOSE): every request gets exactly one final line (done or error), every bad
 * line its error, no line names an unknown id, no delta follows a final line, the deltas of a
 * stream add up to its done text. On every session: replies are well formed, a cancel's unknown_id
 * comes only after the request's final line, finish_reason "cancelled" only after a cancel, usage
 * agrees with max_tokens and the prompt file's token counts, a speculating server's `spec` figures
 * agree with each other, stop strings are honoured, and repeated greedy (and seeded sampled)
 * requests give the same text (a shorter one a prefix), speculation or not.
 * A duplicate id races with its original: when the original's final line comes first, the server
 * took the duplicate as a new request, and it must be answered as one.
 *
 * A monitor thread reads the admin stats while the soak runs (KV used + free + cached == total) and moves
 * batch.max_sequences and queue.max (busy answers) unless --no-churn. At the end: the server must
 * become idle (running, queued, in_flight 0) with KV used 0 (the target's and the draft models') and
 * no connection left, and answer a greedy request with the text it gave at the start.
 *
 * Output: detail lines on stderr; on stdout one JSON summary line, then `soak: N passed, M failed`
 * (one count per check). Exit 0 only when every check passed. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/prompts.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/num.h"

#define MAX_ID 128             /* the protocol's longest id */
#define MAX_SESSION_REQS 12    /* requests per connection */
#define MAX_DEPTH 6            /* most requests in flight on one connection */
#define IDLE_WAIT_S 30.0       /* how long the end waits for the server to become idle */
#define SHOW_VIOLATIONS 5      /* violations printed in detail, per check */
#define BASE_TOKENS 32         /* the greedy request of the start and the end */
#define MAX_STALLS 3           /* stalled sessions in a row before a thread gives up */

/* ---- checks and violations --------------------------------------------------------------------- */

typedef enum check_id {
    C_ANSWERED_ONCE,  /* every request of an uncut session answered exactly once */
    C_KNOWN_IDS,      /* no line for an unknown id, no unexpected id-less error, replies parse */
    C_DELTA_ORDER,    /* no delta after a final line, none for a non-stream request */
    C_DELTA_TEXT,     /* the deltas of a stream add up to its done text */
    C_BAD_LINES,      /* every bad line gets its error (and blank lines nothing) */
    C_CANCEL,         /* cancel semantics: unknown_id only after the final, "cancelled" only after a cancel */
    C_DONE_FIELDS,    /* finish_reason, usage, max_tokens, prompt tokens, stop strings */
    C_GREEDY_REPEAT,  /* greedy requests of the same prompt agree */
    C_SEEDED_REPEAT,  /* seeded sampled requests of the same prompt and parameters agree */
    C_CLOSE,          /* half-close: every answer then end-of-file; too-long: its error then end-of-file */
    C_PROGRESS,       /* no session stalled, every connect worked, every request was sent */
    C_LIVE_STATS,     /* during the run: KV used + free + cached == total, used <= total */
    C_IDLE,           /* at the end: running, queued, in_flight all 0 */
    C_KV_ZERO,        /* at the end: KV used == 0, the target's and the draft models' */
    C_CONNS_ZERO,     /* at the end: no connection left */
    C_COUNTERS,       /* stats done + failed within what was sent and what was answered */
    C_FINAL_GREEDY,   /* the server still answers, and the same greedy text as at the start */
    C_COUNT
} check_id;

static const char *const check_names[C_COUNT] = {
    "every request answered exactly once",
    "no line for an unknown id",
    "no delta after a final line",
    "deltas add up to the done text",
    "bad lines get their error",
    "cancel semantics",
    "done lines well formed",
    "greedy repeatable",
    "seeded sampling repeatable",
    "half-close and too-long endings",
    "progress",
    "stats consistent during the run",
    "server idle at the end",
    "KV used back to 0",
    "connections back to 0",
    "request counters",
    "final greedy request",
};

/* ---- the run ------------------------------------------------------------------------------------ */

typedef struct result {  /* one finished request, kept to compare repeats */
    struct result *next;
    int max_tokens, completion;
    bool stop;           /* finish_reason "stop" */
    char *text;
    size_t len;
} result;

#define N_STOPSETS 6
static const char *const stopsets[N_STOPSETS][3] = {
    {NULL}, {"\n", NULL}, {" the", NULL}, {",", NULL}, {"LORD", ";", NULL}, {" and", ".", NULL},
};
#define N_TEMPS 2
#define N_TOPPS 2
#define N_SEEDS 3
static const double temps[N_TEMPS] = {0.7, 1.1};
static const double topps[N_TOPPS] = {1.0, 0.9};
#define N_SCLASS (1 + N_TEMPS * N_TOPPS * N_SEEDS) /* 0: greedy; then temperature x top_p x seed */

typedef struct soak {
    const char *tcp, *unix_path, *admin;
    int n_requests, n_clients, max_tokens, max_line;
    double stall_s;  /* a session with no progress for this long has stalled */
    uint64_t seed;
    bool churn, verbose;
    mn_prompt *prompts;        /* of 1..999 bytes */
    int n_prompts;
    double t0;

    atomic_int viol[C_COUNT];  /* violations of each check */
    pthread_mutex_t print_mu;

    pthread_mutex_t table_mu;  /* guards table */
    result **table;            /* [n_prompts][N_STOPSETS][N_SCLASS] */

    atomic_long sent, answered, done, errors, busy, internal, cancels, cancelled, bad_lines, blank_lines,
        dups, dups_raced, unknown_after_cancel, sessions, sync_ends, half_closes, abrupt, abrupt_rst,
        abandoned, too_long, slow_readers, greedy_compared, seeded_compared, tokens;
    atomic_bool stop_monitor;
    long max_used, max_throttled, samples, throttled_samples;
} soak;

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static uint32_t rng_below(uint64_t *s, uint32_t n) { return n ? (uint32_t)(rng_next(s) % n) : 0; }
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }
static bool rng_chance(uint64_t *s, double p) { return rng_unit(s) < p; }

static void violation(soak *k, check_id c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void violation(soak *k, check_id c, const char *fmt, ...)
{
    if (atomic_fetch_add(&k->viol[c], 1) >= SHOW_VIOLATIONS)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&k->print_mu);
    fprintf(stderr, "soak: violation (%s) at %.2f s: %s\n", check_names[c], mn_now() - k->t0, msg);
    pthread_mutex_unlock(&k->print_mu);
}

/* ---- one connection ----------------------------------------------------------------------------- */

typedef enum end_mode {
    END_SYNC,       /* all answered, then a cancel of an unused id as a barrier, then close */
    END_HALFCLOSE,  /* shutdown(SHUT_WR) after the last line, read to end-of-file */
    END_ABRUPT,     /* close with requests in flight (RST with SO_LINGER 0 on TCP) */
    END_TOOLONG,    /* a line past --max-line: its error, then end-of-file */
} end_mode;

typedef struct sreq {
    char id[MAX_ID + 1];
    char *line;           /* the request line, '\n' (or "\r\n") included */
    size_t line_len;
    int prompt;           /* index, -1 for a made-up prompt (not compared) */
    int max_tokens, stopset, sclass; /* sclass -1: unseeded sampling (not compared) */
    bool stream;
    int cancel_after;     /* stream: cancel after this many deltas; -1 none */
    double cancel_delay;  /* no stream: cancel this long after sending; < 0 none */
    double dup_delay;     /* send a duplicate this long after the request (0: in the same write); < 0 none */

    bool sent;
    double t_sent;
    bool cancel_sent;
    int unknown_errs;     /* unknown_id answers to its cancel */
    bool dup_sent, dup_answered;
    int phase;            /* 0 running; 1 the original answered, its raced duplicate running; 2 answered */
    char *deltas;
    size_t dlen, dcap;
    int n_deltas;
} sreq;

struct bad_line;

typedef struct probe {
    char id[48];
    const struct bad_line *b;  /* the line sent; b->code is the expected error */
    bool answered;
} probe;

typedef enum item_kind { IT_REQ, IT_BAD, IT_BLANK } item_kind;

typedef struct session {
    soak *k;
    int thread, serial;
    char tag[32];
    end_mode mode;
    bool linger0, tcp;
    int depth;
    sreq reqs[MAX_SESSION_REQS];
    int n_reqs;
    struct { item_kind kind; int arg; } items[3 * MAX_SESSION_REQS + 2];
    int n_items, next_item;
    probe probes[2 * MAX_SESSION_REQS + 2];
    int n_probes;
    const struct bad_line *noid[2 * MAX_SESSION_REQS + 2]; /* bad lines whose error has no id, in order */
    int noid_head, noid_tail;
    int abrupt_after;     /* close after this many requests are sent ... */
    double abrupt_delay;  /* ... and this long */
    double abrupt_at;
    int pause_after;      /* stop reading after this many requests are sent ... */
    double pause_len;     /* ... for this long */
    double pause_until;

    mn_client c;
    char *out;            /* unsent bytes */
    size_t out_len, out_cap;
    bool shut, eof, sync_sent, sync_answered, toolong_sent, toolong_answered;
    char sync_id[48];
    int n_sent;
    double last_progress;
    bool stalled;         /* it ended for want of progress (stall_s) */
} session;

static bool grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    char *b = mn_realloc(*buf, c);
    if (!b)
        return false;
    *buf = b;
    *cap = c;
    return true;
}

/* s[0, n) for a message on one line: control bytes escaped, cut after `cap` / 4 bytes; the result
 * lives in buf. */
static const char *show(char *buf, size_t cap, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= cap / 4) {
            o += (size_t)snprintf(buf + o, cap - o, "...");
            break;
        }
        if (c == '\n')
            o += (size_t)snprintf(buf + o, cap - o, "\\n");
        else if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = 0;
    return buf;
}

static void emit(session *s, const char *data, size_t len)
{
    if (!grow(&s->out, &s->out_cap, s->out_len + len)) {
        fprintf(stderr, "minions-soak: out of memory\n");
        exit(1);
    }
    memcpy(s->out + s->out_len, data, len);
    s->out_len += len;
}

static sreq *find_req(session *s, const char *id)
{
    for (int i = 0; i < s->n_reqs; i++)
        if (s->reqs[i].sent && !strcmp(s->reqs[i].id, id))
            return &s->reqs[i];
    return NULL;
}

static probe *find_probe(session *s, const char *id)
{
    for (int i = 0; i < s->n_probes; i++)
        if (!strcmp(s->probes[i].id, id))
            return &s->probes[i];
    return NULL;
}

static bool req_complete(const sreq *r) { return r->phase == 2 && (!r->dup_sent || r->dup_answered); }

static int in_flight(const session *s)
{
    int n = 0;
    for (int i = 0; i < s->n_reqs; i++)
        n += s->reqs[i].sent && !req_complete(&s->reqs[i]);
    return n;
}

/* ---- planning ------------------------------------------------------------------------------------ */

/* A prompt's text: the set's prompt *index, or one made from the set's prompt *base (*index -1). */
static char *make_prompt(soak *k, uint64_t *rng, int *index, int *base)
{
    int p = (int)rng_below(rng, (uint32_t)k->n_prompts);
    *index = *base = p;
    if (rng_chance(rng, 0.9))
        return mn_strndup(k->prompts[p].text, strlen(k->prompts[p].text));
    /* made up: a few prompts joined, or one with non-ASCII text */
    *index = -1;
    char buf[4096];
    size_t n = 0;
    if (rng_chance(rng, 0.5)) {
        n = (size_t)snprintf(buf, sizeof buf, "%s \xe2\x80\x94 \xc2\xab" "caf\xc3\xa9\xc2\xbb \xe2\x98\x83 ",
                             k->prompts[p].text);
    } else {
        int parts = 2 + (int)rng_below(rng, 3);
        for (int i = 0; i < parts && n < sizeof buf - 1; i++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i ? " " : "",
                                  k->prompts[rng_below(rng, (uint32_t)k->n_prompts)].text);
    }
    return mn_strndup(buf, n < sizeof buf ? n : sizeof buf - 1);
}

static void plan_request(session *s, uint64_t *rng, int i)
{
    soak *k = s->k;
    sreq *r = &s->reqs[i];
    memset(r, 0, sizeof *r);
    int n = snprintf(r->id, sizeof r->id, "t%ds%dr%d", s->thread, s->serial, i);
    uint32_t style = rng_below(rng, 100);
    if (style < 6)
        snprintf(r->id, sizeof r->id, "\xc3\xa9\xe2\x9c\x93-t%ds%dr%d", s->thread, s->serial, i);
    else if (style < 10)
        snprintf(r->id, sizeof r->id, "q\"\\/ t%ds%dr%d", s->thread, s->serial, i);
    else if (style < 14 || s->pause_after >= 0) { /* 128 bytes: longer reply lines fill buffers */
        memset(r->id + n, 'x', MAX_ID - (size_t)n);
        r->id[MAX_ID] = 0;
    }
    int base = 0;
    char *text = make_prompt(k, rng, &r->prompt, &base);
    /* a reader that pauses gets longer answers, so that its output passes the server's watermark */
    r->max_tokens = 1 + (int)rng_below(rng, (uint32_t)k->max_tokens * (s->pause_after >= 0 ? 3 : 1));
    r->stream = rng_chance(rng, s->pause_after >= 0 ? 0.9 : 0.6);
    r->stopset = rng_chance(rng, 0.7) ? 0 : 1 + (int)rng_below(rng, N_STOPSETS - 1);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    /* a chat set's prompt is a user's message, made-up ones too */
    mn_prompt_set(&(mn_prompt){.text = text, .chat = k->prompts[base].chat}, o);
    mn_free(text);
    if (r->max_tokens != 64 || rng_chance(rng, 0.9))
        json_object_set_new(o, "max_tokens", json_integer(r->max_tokens));
    uint32_t kind = rng_below(rng, 10);
    if (kind < 5) { /* greedy: temperature 0, given or by default; a seed changes nothing */
        r->sclass = 0;
        if (rng_chance(rng, 0.7))
            json_object_set_new(o, "temperature", json_integer(0));
        if (rng_chance(rng, 0.2))
            json_object_set_new(o, "seed", json_integer(rng_below(rng, 1000)));
    } else if (kind < 8) { /* seeded sampling from a small set, so that repeats happen */
        int t = (int)rng_below(rng, N_TEMPS), p = (int)rng_below(rng, N_TOPPS), sd = (int)rng_below(rng, N_SEEDS);
        r->sclass = 1 + (t * N_TOPPS + p) * N_SEEDS + sd;
        json_object_set_new(o, "temperature", json_real(temps[t]));
        json_object_set_new(o, "top_p", json_real(topps[p]));
        json_object_set_new(o, "seed", json_integer(sd + 1));
    } else {
        r->sclass = -1;
        json_object_set_new(o, "temperature", json_real(0.05 + 1.5 * rng_unit(rng)));
        json_object_set_new(o, "seed", json_integer((json_int_t)(rng_next(rng) >> 12)));
    }
    if (r->stream || rng_chance(rng, 0.5))
        json_object_set_new(o, "stream", json_boolean(r->stream));
    if (r->stopset) {
        json_t *a = json_array();
        for (int j = 0; stopsets[r->stopset][j]; j++)
            json_array_append_new(a, json_string(stopsets[r->stopset][j]));
        json_object_set_new(o, "stop", a);
    }
    char *j = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    size_t len = j ? strlen(j) : 0;
    r->line = mn_malloc(len + 2);
    if (!j || !r->line) {
        fprintf(stderr, "minions-soak: out of memory\n");
        exit(1);
    }
    memcpy(r->line, j, len);
    free(j); /* jansson allocates with the system allocator */
    if (rng_chance(rng, 0.1))
        r->line[len++] = '\r';
    r->line[len++] = '\n';
    r->line_len = len;

    r->cancel_after = -1;
    r->cancel_delay = -1;
    r->dup_delay = -1;
    uint32_t act = rng_below(rng, 100);
    if (act < 15) {
        if (r->stream)
            r->cancel_after = (int)rng_below(rng, 4);
        else
            r->cancel_delay = rng_chance(rng, 0.3) ? 0 : 0.05 * rng_unit(rng);
    } else if (act < 19) {
        r->dup_delay = rng_chance(rng, 0.5) ? 0 : 0.03 * rng_unit(rng);
    }
}

static void plan_session(session *s, uint64_t *rng, int quota)
{
    soak *k = s->k;
    s->tcp = k->tcp && (!k->unix_path || rng_chance(rng, 0.5));
    uint32_t m = rng_below(rng, 100);
    s->mode = m < 50 ? END_SYNC : m < 75 ? END_HALFCLOSE : m < 98 || !k->max_line ? END_ABRUPT : END_TOOLONG;
    s->linger0 = rng_chance(rng, 0.5);
    s->depth = 1 + (int)rng_below(rng, MAX_DEPTH);
    s->n_reqs = 1 + (int)rng_below(rng, MAX_SESSION_REQS);
    if (s->n_reqs > quota)
        s->n_reqs = quota;
    s->pause_after = -1;
    s->pause_len = 0.3 + 1.7 * rng_unit(rng);
    if (rng_chance(rng, 0.1)) { /* a reader that pauses with most of its requests in flight */
        if (s->n_reqs < MAX_DEPTH)
            s->n_reqs = quota < MAX_DEPTH ? quota : MAX_DEPTH;
        s->pause_after = MAX_DEPTH - 2 + (int)rng_below(rng, 3);
        if (s->pause_after > s->n_reqs)
            s->pause_after = s->n_reqs;
        /* on a Unix socket only the server's send buffer holds what is not read, so the output
         * reaches the server's watermark sooner than over TCP (two buffers and a window) */
        s->depth = MAX_DEPTH;
        s->tcp = !k->unix_path;
    }
    s->abrupt_after = 1 + (int)rng_below(rng, (uint32_t)s->n_reqs);
    s->abrupt_delay = rng_chance(rng, 0.3) ? 0 : 0.04 * rng_unit(rng);
    snprintf(s->tag, sizeof s->tag, "t%ds%d", s->thread, s->serial);
    s->n_items = 0;
    if (rng_chance(rng, 0.1))
        s->items[s->n_items++].kind = IT_BAD;
    for (int i = 0; i < s->n_reqs; i++) {
        plan_request(s, rng, i);
        s->items[s->n_items].kind = IT_REQ;
        s->items[s->n_items++].arg = i;
        if (rng_chance(rng, 0.08))
            s->items[s->n_items++].kind = IT_BAD;
        if (rng_chance(rng, 0.03))
            s->items[s->n_items++].kind = IT_BLANK;
    }
    for (int i = 0; i < s->n_items; i++)
        if (s->items[i].kind == IT_BAD)
            s->items[i].arg = (int)rng_below(rng, 1000);
}

/* ---- bad lines ----------------------------------------------------------------------------------- */

typedef struct bad_line {
    const char *fmt;   /* one %s: a unique tag; \x01 stands for a NUL byte; NULL: an id of 129 bytes */
    const char *code;  /* the expected error code, or codes separated by '|' */
    bool with_id;      /* the error names the tag as its id */
} bad_line;

static const bad_line bad_lines[] = {
    {"{\"id\":\"%s\",\"prompt\":", "invalid_json", false},
    {"not json %s", "invalid_json", false},
    {"[\"%s\"]", "invalid_json", false},
    {"{\"id\":\"%s\",\"prompt\":\"hi\",\"max_token\":5}", "invalid_request", true},
    {"{\"id\":\"%s\",\"prompt\":\"hi\",\"max_tokens\":0}", "invalid_request", true},
    {"{\"id\":\"%s\",\"prompt\":\"hi\",\"max_tokens\":1.5}", "invalid_request", true},
    {"{\"id\":\"%s\",\"prompt\":\"\"}", "invalid_request", true},
    {"{\"id\":\"%s\",\"prompt\":\"hi\",\"stream\":1}", "invalid_request", true},
    {"{\"id\":\"%s\",\"prompt\":\"hi\",\"temperature\":-1}", "invalid_request", true},
    {"{\"id\":\"%s\",\"prompt\":\"hi\",\"top_p\":0}", "invalid_request", true},
    {"{\"id\":\"%s\",\"prompt\":\"hi\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}",
     "invalid_request", true},
    {"{\"id\":\"%s\",\"prompt\":\"hi\",\"stop\":[\"\"]}", "invalid_request", true},
    {"{\"id\":\"%s\",\"prompt\":\"a\x01z\"}", "invalid_json", false},
    {"\x01{\"id\":\"%s\",\"prompt\":\"hi\"}", "invalid_json", false},
    {"{\"id\":\"\xff\xfe%s\",\"prompt\":\"hi\"}", "invalid_json", false},
    {"{\"id\":\"%s\xc3\",\"prompt\":\"hi\"}", "invalid_json", false},
    /* valid JSON whose id holds a NUL: not a usable id (jansson without JSON_ALLOW_NUL calls it
     * invalid JSON; with it, the id is refused) */
    {"{\"id\":\"%s\\u0000\",\"prompt\":\"hi\"}", "invalid_json|invalid_request", false},
    {"{\"id\":\"%s\",\"id\":\"y\",\"prompt\":\"hi\"}", "invalid_json", false},
    {"{\"cancel\":\"%s\"}", "unknown_id", true},
    {"{\"cancel\":\"%s\",\"id\":\"x\"}", "invalid_request", false},
    {"{\"prompt\":\"%s\"}", "invalid_request", false},
    {"{\"id\":\"\",\"prompt\":\"%s\"}", "invalid_request", false},
    {NULL, "invalid_request", false}, /* an id of 129 bytes */
};
#define N_BAD_LINES (int)(sizeof bad_lines / sizeof *bad_lines)

/* Whether `got` is one of the '|'-separated codes of `expected`. */
static bool code_in(const char *expected, const char *got)
{
    size_t n = strlen(got);
    for (const char *p = expected; p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !memcmp(p, got, n))
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

static void send_bad_line(session *s, int which)
{
    const bad_line *b = &bad_lines[which % N_BAD_LINES];
    probe *p = &s->probes[s->n_probes];
    snprintf(p->id, sizeof p->id, "b%s-%d", s->tag, s->n_probes);
    char line[512];
    int n;
    if (!b->fmt) /* an id one byte too long */
        n = snprintf(line, sizeof line, "{\"id\":\"%s-%0*d\",\"prompt\":\"hi\"}", p->id,
                     (int)(MAX_ID - strlen(p->id)), 0);
    else
        n = snprintf(line, sizeof line, b->fmt, p->id);
    for (int i = 0; i < n; i++)
        if (line[i] == '\x01')
            line[i] = 0;
    line[n++] = '\n';
    emit(s, line, (size_t)n);
    if (b->with_id) {
        p->b = b;
        s->n_probes++;
    } else {
        s->noid[s->noid_tail++] = b;
    }
    atomic_fetch_add(&s->k->bad_lines, 1);
}

static void send_cancel(session *s, sreq *r)
{
    json_t *cj = json_pack("{s:s}", "cancel", r->id);
    char *cs = json_dumps(cj, JSON_COMPACT);
    json_decref(cj);
    if (cs) {
        emit(s, cs, strlen(cs));
        emit(s, "\n", 1);
        free(cs);
    }
    r->cancel_sent = true;
    atomic_fetch_add(&s->k->cancels, 1);
}

/* ---- checking replies ---------------------------------------------------------------------------- */

static bool has_stop(const char *text, size_t len, int stopset)
{
    for (int j = 0; stopsets[stopset][j]; j++)
        if (memmem(text, len, stopsets[stopset][j], strlen(stopsets[stopset][j])))
            return true;
    return false;
}

/* Length of text without trailing U+FFFD: a byte-level model's half character at the end of a short
 * run is sent as U+FFFD where a longer run has the whole character. */
static size_t strip_fffd(const char *t, size_t n)
{
    while (n >= 3 && !memcmp(t + n - 3, "\xef\xbf\xbd", 3))
        n -= 3;
    return n;
}

static void compare_repeat(session *s, const sreq *r, const char *text, size_t len, bool stop, int completion)
{
    soak *k = s->k;
    if (r->prompt < 0 || r->sclass < 0)
        return;
    check_id c = r->sclass ? C_SEEDED_REPEAT : C_GREEDY_REPEAT;
    size_t key = ((size_t)r->prompt * N_STOPSETS + (size_t)r->stopset) * N_SCLASS + (size_t)r->sclass;
    pthread_mutex_lock(&k->table_mu);
    int n = 0;
    bool same_exists = false;
    for (result *e = k->table[key]; e; e = e->next, n++) {
        bool bad = false;
        if (!r->stopset) {
            /* the same token stream: the shorter run's text is a prefix of the longer one's, and a run
             * that stopped (end-of-text) is never outlived by another */
            if (completion < e->completion) {
                size_t m = strip_fffd(text, len);
                bad = e->len < m || memcmp(e->text, text, m) || stop;
            } else if (completion > e->completion) {
                size_t m = strip_fffd(e->text, e->len);
                bad = len < m || memcmp(e->text, text, m) || e->stop;
            } else {
                bad = len != e->len || memcmp(e->text, text, len) || stop != e->stop;
            }
        } else if (e->max_tokens == r->max_tokens || (e->stop && stop)) {
            bad = len != e->len || memcmp(e->text, text, len) || stop != e->stop || completion != e->completion;
        } else {
            continue;
        }
        atomic_fetch_add(r->sclass ? &k->seeded_compared : &k->greedy_compared, 1);
        if (bad) {
            char b1[600], b2[600];
            violation(k, c,
                      "%s id %s prompt %d stopset %d class %d: max_tokens %d gave %d tokens (%s) \"%s\"; an earlier "
                      "max_tokens %d gave %d tokens (%s) \"%s\"",
                      s->tag, r->id, r->prompt, r->stopset, r->sclass, r->max_tokens, completion,
                      stop ? "stop" : "length", show(b1, sizeof b1, text, len), e->max_tokens, e->completion,
                      e->stop ? "stop" : "length", show(b2, sizeof b2, e->text, e->len));
            break;
        }
        if (e->max_tokens == r->max_tokens)
            same_exists = true;
    }
    if (!same_exists && n < 6) {
        result *e = mn_calloc(1, sizeof *e);
        if (e && (e->text = mn_strndup(text, len))) {
            e->len = len;
            e->max_tokens = r->max_tokens;
            e->completion = completion;
            e->stop = stop;
            e->next = k->table[key];
            k->table[key] = e;
        } else {
            mn_free(e);
        }
    }
    pthread_mutex_unlock(&k->table_mu);
}

/* A speculating server's done line carries "spec" (docs/server.md): whole counts, no more tokens
 * accepted than drafted, one voted drafter per verification, and mean_accepted_len their ratio. */
static bool spec_consistent(json_t *spec)
{
    json_t *dr = json_object_get(spec, "drafted"), *ac = json_object_get(spec, "accepted"),
           *ve = json_object_get(spec, "verifications"), *mean = json_object_get(spec, "mean_accepted_len"),
           *voted = json_object_get(spec, "voted");
    if (json_object_size(spec) != 5 || !json_is_integer(dr) || !json_is_integer(ac) || !json_is_integer(ve) ||
        !json_is_real(mean) || !json_is_object(voted))
        return false;
    json_int_t drafted = json_integer_value(dr), accepted = json_integer_value(ac), n = json_integer_value(ve);
    if (accepted < 0 || accepted > drafted || n < 0)
        return false;
    /* the server writes reals to 6 significant digits */
    double want = n ? (double)accepted / (double)n : 0.0, got = json_real_value(mean);
    if (got < want - 1e-5 * (want + 1) || got > want + 1e-5 * (want + 1))
        return false;
    json_int_t votes = 0;
    const char *name;
    json_t *count;
    json_object_foreach(voted, name, count) {
        if (!json_is_integer(count) || json_integer_value(count) < 0)
            return false;
        votes += json_integer_value(count);
    }
    return votes == n;
}

static void check_done(session *s, sreq *r, json_t *o)
{
    soak *k = s->k;
    char sb[600], sb2[600];
    json_t *text = json_object_get(o, "text"), *fr = json_object_get(o, "finish_reason"),
           *usage = json_object_get(o, "usage");
    json_t *pt = json_object_get(usage, "prompt_tokens"), *ct = json_object_get(usage, "completion_tokens");
    json_t *spec = json_object_get(o, "spec");
    if (!json_is_true(json_object_get(o, "done")) || !json_is_string(text) || !json_is_string(fr) ||
        !json_is_integer(pt) || !json_is_integer(ct) || json_object_size(o) != 5 + (spec != NULL)) {
        violation(k, C_DONE_FIELDS, "%s id %s: malformed done line", s->tag, r->id);
        return;
    }
    if (spec && !spec_consistent(spec)) {
        char *figures = json_dumps(spec, JSON_COMPACT);
        violation(k, C_DONE_FIELDS, "%s id %s: spec figures that disagree: %s", s->tag, r->id, figures ? figures : "?");
        free(figures);
    }
    const char *reason = json_string_value(fr), *t = json_string_value(text);
    size_t len = json_string_length(text);
    long completion = (long)json_integer_value(ct), prompt_tokens = (long)json_integer_value(pt);
    bool cancelled = !strcmp(reason, "cancelled"), stop = !strcmp(reason, "stop"), length = !strcmp(reason, "length");
    atomic_fetch_add(&k->done, 1);
    atomic_fetch_add(&k->tokens, completion);
    if (cancelled)
        atomic_fetch_add(&k->cancelled, 1);
    if (!cancelled && !stop && !length)
        violation(k, C_DONE_FIELDS, "%s id %s: finish_reason \"%s\"", s->tag, r->id, reason);
    if (completion < 0 || completion > r->max_tokens || (length && completion != r->max_tokens))
        violation(k, C_DONE_FIELDS, "%s id %s: %ld completion tokens, finish %s, max_tokens %d", s->tag, r->id,
                  completion, reason, r->max_tokens);
    /* a request cancelled before intake was never tokenized */
    if ((prompt_tokens < 1 && !cancelled) || (prompt_tokens && r->prompt >= 0 && k->prompts[r->prompt].tokens &&
                              prompt_tokens != k->prompts[r->prompt].tokens))
        violation(k, C_DONE_FIELDS, "%s id %s: prompt_tokens %ld, the prompt file says %ld", s->tag, r->id,
                  prompt_tokens, r->prompt >= 0 ? k->prompts[r->prompt].tokens : 0L);
    if (r->stopset && has_stop(t, len, r->stopset))
        violation(k, C_DONE_FIELDS, "%s id %s: text contains a stop string: \"%s\"", s->tag, r->id,
                  show(sb, sizeof sb, t, len));
    if (cancelled && !r->cancel_sent)
        violation(k, C_CANCEL, "%s id %s: finish_reason cancelled without a cancel", s->tag, r->id);
    if (r->stream && (r->dlen != len || memcmp(r->deltas ? r->deltas : "", t, len)))
        violation(k, C_DELTA_TEXT, "%s id %s (%s, %d deltas): deltas \"%s\" != text \"%s\"", s->tag, r->id, reason,
                  r->n_deltas, show(sb, sizeof sb, r->deltas ? r->deltas : "", r->dlen), show(sb2, sizeof sb2, t, len));
    if (!cancelled)
        compare_repeat(s, r, t, len, stop, (int)completion);
}

static void got_final(session *s, sreq *r, json_t *o, const char *code)
{
    soak *k = s->k;
    atomic_fetch_add(&k->answered, 1);
    if (code) {
        atomic_fetch_add(&k->errors, 1);
        if (!strcmp(code, "busy"))
            atomic_fetch_add(&k->busy, 1);
        else if (!strcmp(code, "internal"))
            atomic_fetch_add(&k->internal, 1);
        else {
            const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
            violation(k, C_ANSWERED_ONCE, "%s id %s: a valid request answered with error %s: %s", s->tag, r->id, code,
                      msg ? msg : "(no message)");
        }
    } else {
        check_done(s, r, o);
    }
}

static const char *error_code(session *s, json_t *o, const char *id)
{
    json_t *e = json_object_get(o, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    if (!code || !json_is_string(json_object_get(e, "message")) || json_object_size(o) != (id ? 2u : 1u)) {
        violation(s->k, C_KNOWN_IDS, "%s: malformed error line for id %s", s->tag, id ? id : "(none)");
        return "?";
    }
    return code;
}

static void on_line(session *s, const char *line, size_t len)
{
    soak *k = s->k;
    char sb[1024];
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, &je); /* a model may produce U+0000 */
    if (!json_is_object(o)) {
        violation(k, C_KNOWN_IDS, "%s: reply is not a JSON object (%s): %s", s->tag, je.text,
                  show(sb, sizeof sb, line, len));
        json_decref(o);
        return;
    }
    json_t *jid = json_object_get(o, "id");
    bool is_error = json_object_get(o, "error"), is_delta = json_object_get(o, "delta"),
         is_done = json_object_get(o, "done");
    if (!jid) {
        const char *code = is_error ? error_code(s, o, NULL) : "?";
        if (!is_error)
            violation(k, C_KNOWN_IDS, "%s: a line without id that is not an error: %s", s->tag,
                      show(sb, sizeof sb, line, len));
        else if (s->toolong_sent && !s->toolong_answered && !strcmp(code, "line_too_long"))
            s->toolong_answered = true;
        else if (s->noid_head == s->noid_tail)
            violation(k, C_KNOWN_IDS, "%s: unexpected error without id: %s", s->tag, show(sb, sizeof sb, line, len));
        else {
            const bad_line *b = s->noid[s->noid_head++];
            const char *what = b->fmt ? b->fmt : "(an id of 129 bytes)";
            if (!code_in(b->code, code))
                violation(k, C_BAD_LINES, "%s: bad line %s answered with %s, expected %s", s->tag,
                          show(sb, sizeof sb, what, strlen(what)), code, b->code);
        }
        json_decref(o);
        return;
    }
    const char *id = json_string_value(jid);
    if (!id) {
        violation(k, C_KNOWN_IDS, "%s: id is not a string: %s", s->tag, show(sb, sizeof sb, line, len));
        json_decref(o);
        return;
    }
    if (s->sync_sent && !strcmp(id, s->sync_id)) {
        const char *code = is_error ? error_code(s, o, id) : "(not an error)";
        if (strcmp(code, "unknown_id") || s->sync_answered)
            violation(k, C_CANCEL, "%s: the closing cancel of an unused id got %s", s->tag, code);
        s->sync_answered = true;
        json_decref(o);
        return;
    }
    probe *p = find_probe(s, id);
    if (p) {
        const char *code = is_error ? error_code(s, o, id) : "(not an error)";
        if (p->answered)
            violation(k, C_BAD_LINES, "%s: bad line %s answered twice", s->tag, id);
        else if (!code_in(p->b->code, code))
            violation(k, C_BAD_LINES, "%s: bad line %s (%s) answered with %s, expected %s", s->tag, id,
                      show(sb, sizeof sb, p->b->fmt, strlen(p->b->fmt)), code, p->b->code);
        p->answered = true;
        json_decref(o);
        return;
    }
    sreq *r = find_req(s, id);
    if (!r) {
        violation(k, C_KNOWN_IDS, "%s: a line for an id never sent on this connection: %s", s->tag,
                  show(sb, sizeof sb, line, len));
        json_decref(o);
        return;
    }
    s->last_progress = mn_now();
    if (is_delta) {
        json_t *d = json_object_get(o, "delta");
        if (!json_is_string(d) || json_object_size(o) != 2)
            violation(k, C_KNOWN_IDS, "%s id %s: malformed delta line", s->tag, id);
        else if (!r->stream)
            violation(k, C_DELTA_ORDER, "%s id %s: a delta for a request without stream", s->tag, id);
        else if (r->phase == 2)
            violation(k, C_DELTA_ORDER, "%s id %s: a delta after the final line", s->tag, id);
        else {
            size_t n = json_string_length(d);
            if (!n)
                violation(k, C_DELTA_ORDER, "%s id %s: an empty delta", s->tag, id);
            if (!grow(&r->deltas, &r->dcap, r->dlen + n + 1)) {
                fprintf(stderr, "minions-soak: out of memory\n");
                exit(1);
            }
            memcpy(r->deltas + r->dlen, json_string_value(d), n);
            r->dlen += n;
            r->n_deltas++;
        }
    } else if (is_done || is_error) {
        const char *code = is_error ? error_code(s, o, id) : NULL;
        if (code && !strcmp(code, "unknown_id") && r->phase != 2) {
            /* the answer to a cancel of a request in flight, or a final line with the wrong code */
            violation(k, C_CANCEL, "%s id %s: unknown_id while the request is in flight%s", s->tag, id,
                      r->cancel_sent ? "" : " (and no cancel was sent)");
            r->unknown_errs++;
        } else if (r->phase == 0 && r->dup_sent && !r->dup_answered && code && !strcmp(code, "invalid_request")) {
            r->dup_answered = true; /* "id is already in flight" */
        } else if (r->phase == 0 || r->phase == 1) {
            got_final(s, r, o, code);
            if (r->phase == 0 && r->dup_sent && !r->dup_answered) {
                /* the original ended before the server read the duplicate: it is a new request */
                r->dup_answered = true;
                r->phase = 1;
                r->dlen = 0;
                r->n_deltas = 0;
                atomic_fetch_add(&k->dups_raced, 1);
            } else {
                r->phase = 2;
            }
        } else if (code && !strcmp(code, "unknown_id") && r->cancel_sent && r->unknown_errs == 0) {
            r->unknown_errs++; /* the cancel came after the request ended */
            atomic_fetch_add(&k->unknown_after_cancel, 1);
        } else {
            violation(k, C_ANSWERED_ONCE, "%s id %s: a second final line: %s", s->tag, id,
                      show(sb, sizeof sb, line, len));
        }
    } else {
        violation(k, C_KNOWN_IDS, "%s id %s: neither delta, done nor error: %s", s->tag, id,
                  show(sb, sizeof sb, line, len));
    }
    /* a stream request to cancel after some deltas */
    if (r->stream && r->cancel_after >= 0 && !r->cancel_sent && r->phase == 0 && r->n_deltas >= r->cancel_after &&
        !s->shut && !s->sync_sent) {
        send_cancel(s, r);
    }
    json_decref(o);
}

/* ---- running a session --------------------------------------------------------------------------- */

static void send_request(session *s, sreq *r, double now)
{
    emit(s, r->line, r->line_len);
    r->sent = true;
    r->t_sent = now;
    s->n_sent++;
    atomic_fetch_add(&s->k->sent, 1);
    if (r->dup_delay == 0) {
        emit(s, r->line, r->line_len);
        r->dup_sent = true;
        atomic_fetch_add(&s->k->dups, 1);
    }
    if ((r->stream && r->cancel_after == 0) || (!r->stream && r->cancel_delay == 0))
        send_cancel(s, r);
    if (s->mode == END_ABRUPT && s->n_sent == s->abrupt_after)
        s->abrupt_at = now + s->abrupt_delay;
    if (s->n_sent == s->pause_after) {
        s->pause_until = now + s->pause_len;
        atomic_fetch_add(&s->k->slow_readers, 1);
    }
}

/* Timed actions and the next items of the plan. */
static void advance(session *s, double now)
{
    if (s->shut || s->sync_sent || s->toolong_sent)
        return;
    for (int i = 0; i < s->n_reqs; i++) {
        sreq *r = &s->reqs[i];
        if (!r->sent || r->phase == 2)
            continue;
        if (!r->stream && r->cancel_delay > 0 && !r->cancel_sent && now >= r->t_sent + r->cancel_delay)
            send_cancel(s, r);
        if (r->dup_delay > 0 && !r->dup_sent && r->phase == 0 && now >= r->t_sent + r->dup_delay) {
            emit(s, r->line, r->line_len);
            r->dup_sent = true;
            atomic_fetch_add(&s->k->dups, 1);
        }
    }
    while (s->next_item < s->n_items) {
        int it = s->next_item;
        if (s->items[it].kind == IT_REQ) {
            if (in_flight(s) >= s->depth)
                break;
            send_request(s, &s->reqs[s->items[it].arg], now);
        } else if (s->items[it].kind == IT_BAD) {
            send_bad_line(s, s->items[it].arg);
        } else {
            emit(s, s->items[it].arg & 1 ? "\r\n" : "\n", s->items[it].arg & 1 ? 2 : 1);
            atomic_fetch_add(&s->k->blank_lines, 1);
        }
        s->next_item++;
    }
    if (s->next_item < s->n_items)
        return;
    if (s->mode == END_SYNC && in_flight(s) == 0) {
        snprintf(s->sync_id, sizeof s->sync_id, "sync-%s", s->tag);
        char line[96];
        int n = snprintf(line, sizeof line, "{\"cancel\":\"%s\"}\n", s->sync_id);
        emit(s, line, (size_t)n);
        s->sync_sent = true;
    } else if (s->mode == END_TOOLONG) {
        size_t n = (size_t)s->k->max_line + 100;
        char *big = mn_malloc(n);
        if (big) {
            memset(big, 'x', n);
            emit(s, big, n);
            mn_free(big);
        }
        s->toolong_sent = true;
    }
}

static int flush_out(session *s)
{
    while (s->out_len) {
        ssize_t n = send(s->c.fd, s->out, s->out_len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -1;
        memmove(s->out, s->out + n, s->out_len - (size_t)n);
        s->out_len -= (size_t)n;
    }
    if (s->mode == END_HALFCLOSE && !s->shut && s->next_item == s->n_items) {
        shutdown(s->c.fd, SHUT_WR);
        s->shut = true;
        atomic_fetch_add(&s->k->half_closes, 1);
    }
    return 0;
}

/* Read what is there; lines go to on_line. -1 on a read error. */
static int read_in(session *s)
{
    for (;;) {
        if (!grow(&s->c.buf, &s->c.cap, s->c.len + 4096)) {
            fprintf(stderr, "minions-soak: out of memory\n");
            exit(1);
        }
        ssize_t n = recv(s->c.fd, s->c.buf + s->c.len, s->c.cap - s->c.len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0)
            return -1;
        if (n == 0) {
            s->eof = true;
            if (s->c.len)
                violation(s->k, C_CLOSE, "%s: %zu bytes without a newline before end-of-file", s->tag, s->c.len);
            return 0;
        }
        s->c.len += (size_t)n;
        size_t start = 0;
        for (char *nl; (nl = memchr(s->c.buf + start, '\n', s->c.len - start));) {
            size_t end = (size_t)(nl - s->c.buf);
            on_line(s, s->c.buf + start, end - start);
            start = end + 1;
        }
        memmove(s->c.buf, s->c.buf + start, s->c.len - start);
        s->c.len -= start;
        if (s->pause_until > 0 && mn_now() < s->pause_until)
            return 0;
    }
}

/* Checks of a session that ran to its end. */
static void check_complete(session *s)
{
    soak *k = s->k;
    for (int i = 0; i < s->n_reqs; i++) {
        sreq *r = &s->reqs[i];
        if (r->sent && !req_complete(r))
            violation(k, C_ANSWERED_ONCE, "%s id %s: no final line%s (mode %d, %d deltas)", s->tag, r->id,
                      r->dup_sent && !r->dup_answered ? " for its duplicate" : "", s->mode, r->n_deltas);
    }
    for (int i = 0; i < s->n_probes; i++)
        if (!s->probes[i].answered)
            violation(k, C_BAD_LINES, "%s: bad line %s not answered (expected %s)", s->tag, s->probes[i].id,
                      s->probes[i].b->code);
    if (s->noid_head != s->noid_tail)
        violation(k, C_BAD_LINES, "%s: %d bad lines without id not answered (next expected %s)", s->tag,
                  s->noid_tail - s->noid_head, s->noid[s->noid_head]->code);
}

static void session_free(session *s)
{
    for (int i = 0; i < s->n_reqs; i++) {
        mn_free(s->reqs[i].line);
        mn_free(s->reqs[i].deltas);
    }
    mn_free(s->out);
    mn_client_close(&s->c);
}

/* Run one planned session. Returns the number of requests it sent, -1 when it could not connect. */
static int session_run(session *s)
{
    soak *k = s->k;
    mn_err err = {{0}};
    if (mn_client_connect(s->tcp ? k->tcp : k->unix_path, &s->c, &err) < 0) {
        violation(k, C_PROGRESS, "%s: %s", s->tag, err.msg);
        return -1;
    }
    atomic_fetch_add(&k->sessions, 1);
    if (s->pause_after >= 0) {
        int small = 4096;
        setsockopt(s->c.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    }
    fcntl(s->c.fd, F_SETFL, fcntl(s->c.fd, F_GETFL) | O_NONBLOCK);
    s->last_progress = mn_now();
    for (;;) {
        double now = mn_now();
        if (s->abrupt_at > 0 && now >= s->abrupt_at) {
            int n = in_flight(s);
            atomic_fetch_add(&k->abrupt, 1);
            atomic_fetch_add(&k->abandoned, n);
            if (s->linger0 && s->tcp) {
                struct linger lg = {.l_onoff = 1, .l_linger = 0};
                setsockopt(s->c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                atomic_fetch_add(&k->abrupt_rst, 1);
            }
            break;
        }
        advance(s, now);
        if (flush_out(s) < 0) {
            if (s->mode == END_TOOLONG && s->toolong_sent) {
                s->out_len = 0; /* the server closed after the too-long line: read what it said */
            } else {
                violation(k, C_CLOSE, "%s: send failed: %s (mode %d)", s->tag, strerror(errno), s->mode);
                break;
            }
        }
        if (s->mode == END_SYNC && s->sync_answered) {
            check_complete(s);
            atomic_fetch_add(&k->sync_ends, 1);
            break;
        }
        if (s->eof) {
            if (s->mode == END_HALFCLOSE) {
                check_complete(s);
            } else if (s->mode == END_TOOLONG) {
                if (!s->toolong_answered)
                    violation(k, C_CLOSE, "%s: end-of-file after a too-long line without its error", s->tag);
                atomic_fetch_add(&k->too_long, 1);
                atomic_fetch_add(&k->abandoned, in_flight(s));
            } else {
                violation(k, C_CLOSE, "%s: the server closed the connection (mode %d)", s->tag, s->mode);
            }
            break;
        }
        if (now - s->last_progress > k->stall_s) {
            violation(k, C_PROGRESS, "%s: no progress for %.0f s (mode %d, %d in flight, sent %d/%d)", s->tag,
                      k->stall_s, s->mode, in_flight(s), s->n_sent, s->n_reqs);
            s->stalled = true;
            if (s->mode == END_SYNC || s->mode == END_HALFCLOSE)
                check_complete(s);
            break;
        }
        bool paused = s->pause_until > 0 && now < s->pause_until;
        double wait = 0.02;
        if (paused && s->pause_until - now < wait)
            wait = s->pause_until - now;
        if (s->abrupt_at > 0 && s->abrupt_at - now < wait)
            wait = s->abrupt_at - now;
        if (wait < 0)
            wait = 0; /* never a negative timeout: poll would wait for ever */
        struct pollfd pf = {.fd = s->c.fd, .events = (short)((paused ? 0 : POLLIN) | (s->out_len ? POLLOUT : 0))};
        int timeout = (int)(wait * 1e3) + 1;
        if (poll(&pf, 1, timeout) < 0 && errno != EINTR) {
            violation(k, C_PROGRESS, "%s: poll: %s", s->tag, strerror(errno));
            break;
        }
        if (paused && (pf.revents & (POLLHUP | POLLERR)))
            usleep((useconds_t)(wait * 1e6)); /* a hang-up is read after the pause; do not spin */
        if (!paused && (pf.revents & (POLLIN | POLLHUP | POLLERR)) && read_in(s) < 0) {
            if (s->mode == END_TOOLONG && s->toolong_sent) {
                s->eof = true; /* a reset after the too-long line: was its error read first? */
                continue;
            }
            violation(k, C_CLOSE, "%s: receive failed: %s (mode %d)", s->tag, strerror(errno), s->mode);
            break;
        }
    }
    int sent = s->n_sent;
    session_free(s);
    return sent;
}

typedef struct client_arg {
    soak *k;
    int thread, quota;
} client_arg;

static void *client_main(void *arg)
{
    client_arg *ca = arg;
    soak *k = ca->k;
    uint64_t rng = k->seed * 0x100000001b3ULL + (uint64_t)ca->thread * 0x9e3779b97f4a7c15ULL + 1;
    int left = ca->quota, failures = 0, stalls = 0;
    session *s = mn_malloc(sizeof *s);
    if (!s)
        return NULL;
    for (int serial = 0; left > 0; serial++) {
        memset(s, 0, sizeof *s);
        s->k = k;
        s->thread = ca->thread;
        s->serial = serial;
        s->c.fd = -1;
        plan_session(s, &rng, left);
        int sent = session_run(s);
        if (sent < 0) {
            if (++failures >= 5) {
                violation(k, C_PROGRESS, "client %d: giving up with %d requests unsent", ca->thread, left);
                break;
            }
            usleep(200000);
            continue;
        }
        left -= sent;
        stalls = s->stalled ? stalls + 1 : 0;
        if (stalls >= MAX_STALLS && left > 0) { /* a frozen server: end the run with its summary */
            pthread_mutex_lock(&k->print_mu); /* its stalls are the violations; this says why the run ends */
            fprintf(stderr, "soak: client %d gives up after %d stalled sessions in a row, %d requests unsent\n",
                    ca->thread, stalls, left);
            pthread_mutex_unlock(&k->print_mu);
            break;
        }
    }
    mn_free(s);
    return NULL;
}

/* ---- admin --------------------------------------------------------------------------------------- */

typedef struct stats {
    long running, queued, in_flight, done, failed, used, free, cached, total, connections, throttled, preemptions,
        steps;
    long drafts_used; /* the draft models' KV blocks in use (0 without model drafters) */
} stats;

static int admin_open(const char *addr)
{
    int sock = nn_socket(AF_SP, NN_REQ), tmo = 5000;
    if (sock < 0)
        return -1;
    if (nn_setsockopt(sock, NN_SOL_SOCKET, NN_RCVTIMEO, &tmo, sizeof tmo) < 0 ||
        nn_setsockopt(sock, NN_SOL_SOCKET, NN_SNDTIMEO, &tmo, sizeof tmo) < 0 || nn_connect(sock, addr) < 0) {
        nn_close(sock);
        return -1;
    }
    return sock;
}

/* One command; the parsed reply (NULL on a failure or "ok": false). */
static json_t *admin_call(int sock, const char *cmd)
{
    if (sock < 0 || nn_send(sock, cmd, strlen(cmd), 0) < 0)
        return NULL;
    char *buf = NULL;
    int n = nn_recv(sock, &buf, NN_MSG, 0);
    if (n < 0)
        return NULL;
    json_t *o = json_loadb(buf, (size_t)n, 0, NULL);
    nn_freemsg(buf);
    if (!json_is_true(json_object_get(o, "ok"))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static long jget(json_t *o, const char *a, const char *b, const char *c)
{
    json_t *v = json_object_get(o, a);
    if (b)
        v = json_object_get(v, b);
    if (c)
        v = json_object_get(v, c);
    return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

static int admin_stats(int sock, stats *st)
{
    json_t *o = admin_call(sock, "{\"cmd\":\"stats\"}");
    json_t *s = json_object_get(o, "stats");
    if (!s) {
        json_decref(o);
        return -1;
    }
    *st = (stats){
        .running = jget(s, "requests", "running", NULL), .queued = jget(s, "requests", "queued", NULL),
        .in_flight = jget(s, "requests", "in_flight", NULL), .done = jget(s, "requests", "done", NULL),
        .failed = jget(s, "requests", "failed", NULL), .used = jget(s, "kv", "target", "used"),
        .free = jget(s, "kv", "target", "free"), .cached = jget(s, "kv", "target", "cached"),
        .total = jget(s, "kv", "target", "total"),
        .connections = jget(s, "connections", NULL, NULL), .throttled = jget(s, "throttled", NULL, NULL),
        .preemptions = jget(s, "preemptions", NULL, NULL), .steps = jget(s, "steps", NULL, NULL),
        .drafts_used = json_object_get(json_object_get(s, "kv"), "drafts") ? jget(s, "kv", "drafts", "used") : 0,
    };
    json_decref(o);
    return 0;
}

static long admin_get(int sock, const char *key)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "{\"cmd\":\"get\",\"key\":\"%s\"}", key);
    json_t *o = admin_call(sock, cmd);
    long v = jget(o, "value", NULL, NULL);
    json_decref(o);
    return v;
}

static int admin_set(int sock, const char *key, long value)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "{\"cmd\":\"set\",\"key\":\"%s\",\"value\":%ld}", key, value);
    json_t *o = admin_call(sock, cmd);
    json_decref(o);
    return o ? 0 : -1;
}

typedef struct monitor_arg {
    soak *k;
    long batch, queue; /* the settings to come back to */
} monitor_arg;

static void *monitor_main(void *arg)
{
    monitor_arg *ma = arg;
    soak *k = ma->k;
    int sock = admin_open(k->admin);
    uint64_t rng = k->seed ^ 0xabcdef12345ULL;
    double next_churn = mn_now() + 1.0, queue_back = 0;
    int failures = 0;
    while (!atomic_load(&k->stop_monitor)) {
        stats st;
        if (admin_stats(sock, &st) < 0) {
            if (++failures == 3)
                violation(k, C_LIVE_STATS, "admin stats failed 3 times in a row");
        } else {
            failures = 0;
            k->samples++;
            if (st.used < 0 || st.cached < 0 || st.used + st.free + st.cached != st.total || st.used > st.total ||
                st.running < 0 || st.queued < 0 || st.in_flight < st.running)
                violation(k, C_LIVE_STATS,
                          "stats: kv used %ld free %ld cached %ld total %ld, running %ld queued %ld in_flight %ld",
                          st.used, st.free, st.cached, st.total, st.running, st.queued, st.in_flight);
            if (k->verbose && k->samples % 10 == 0)
                fprintf(stderr, "soak: %6.1f s running %ld queued %ld in_flight %ld kv %ld/%ld conns %ld throttled %ld "
                        "done %ld failed %ld preempt %ld steps %ld\n", mn_now() - k->t0, st.running, st.queued,
                        st.in_flight, st.used, st.total, st.connections, st.throttled, st.done, st.failed,
                        st.preemptions, st.steps);
            if (st.used > k->max_used)
                k->max_used = st.used;
            if (st.throttled > k->max_throttled)
                k->max_throttled = st.throttled;
            k->throttled_samples += st.throttled > 0;
        }
        double now = mn_now();
        if (k->churn && ma->batch > 0 && now >= next_churn) {
            /* mostly a batch of half to all of its limit, sometimes 1 or 2 */
            long b = rng_chance(&rng, 0.1) ? 1 + (long)rng_below(&rng, 2)
                                           : ma->batch / 2 + 1 + (long)rng_below(&rng, (uint32_t)(ma->batch - ma->batch / 2));
            if (b > ma->batch)
                b = ma->batch;
            admin_set(sock, "batch.max_sequences", b);
            /* now and then a short window of a small queue: busy answers (they are instant, so a long
             * window would turn a large share of the requests into busy ones) */
            long q = 0;
            if (ma->queue > 0 && !queue_back && rng_chance(&rng, 0.04)) {
                q = 4 + (long)rng_below(&rng, 13);
                admin_set(sock, "queue.max", q);
                queue_back = now + 0.1;
            }
            if (k->verbose)
                fprintf(stderr, "soak: %6.1f s set batch.max_sequences %ld%s%.0ld\n", now - k->t0, b,
                        q ? " queue.max " : "", q);
            next_churn = now + 0.5 + rng_unit(&rng);
        }
        if (queue_back && now >= queue_back) {
            admin_set(sock, "queue.max", ma->queue);
            queue_back = 0;
        }
        usleep(100000);
    }
    if (k->churn && ma->batch > 0) {
        admin_set(sock, "batch.max_sequences", ma->batch);
        admin_set(sock, "queue.max", ma->queue);
    }
    if (sock >= 0)
        nn_close(sock);
    return NULL;
}

/* ---- start and end ------------------------------------------------------------------------------- */

/* One greedy request on a fresh connection: its text, or NULL (the reason on stderr). */
static char *greedy_text(soak *k, const char *tag, bool stream)
{
    mn_client c;
    mn_err err = {{0}};
    const char *addr = k->unix_path ? k->unix_path : k->tcp;
    if (mn_client_connect(addr, &c, &err) < 0) {
        fprintf(stderr, "minions-soak: %s request: %s\n", tag, err.msg);
        return NULL;
    }
    if (mn_client_set_timeout(&c, k->stall_s) < 0) { /* a frozen server is a failed check, not a hang */
        fprintf(stderr, "minions-soak: %s request: cannot set a timeout: %s\n", tag, strerror(errno));
        mn_client_close(&c);
        return NULL;
    }
    json_t *o = json_pack("{s:s, s:i, s:i, s:b}", "id", tag, "max_tokens", BASE_TOKENS, "temperature", 0, "stream",
                          stream);
    if (o && mn_prompt_set(&k->prompts[0], o) < 0) {
        json_decref(o);
        o = NULL;
    }
    char *line = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    char *text = NULL, *deltas = NULL;
    size_t dlen = 0, dcap = 0;
    bool ended = false;
    if (line && mn_client_send(&c, line, strlen(line)) == 0 && mn_client_send(&c, "\n", 1) == 0) {
        size_t n;
        for (char *l; (l = mn_client_read_line(&c, &n));) {
            json_t *r = json_loadb(l, n, JSON_ALLOW_NUL, NULL);
            json_t *d = json_object_get(r, "delta");
            if (json_is_string(d) && grow(&deltas, &dcap, dlen + json_string_length(d) + 1)) {
                memcpy(deltas + dlen, json_string_value(d), json_string_length(d));
                dlen += json_string_length(d);
            }
            if (json_object_get(r, "done") || json_object_get(r, "error")) {
                const char *t = json_string_value(json_object_get(r, "text"));
                const char *fr = json_string_value(json_object_get(r, "finish_reason"));
                ended = true;
                /* "stop": a chat prompt's answer may end at the end of its turn */
                if (!t || !fr || (strcmp(fr, "length") && strcmp(fr, "stop")))
                    fprintf(stderr, "minions-soak: %s request: %s\n", tag, l);
                else if (stream && (dlen != json_string_length(json_object_get(r, "text")) || memcmp(deltas, t, dlen)))
                    fprintf(stderr, "minions-soak: %s request: deltas differ from the text\n", tag);
                else
                    text = mn_strndup(t, json_string_length(json_object_get(r, "text")));
                json_decref(r);
                break;
            }
            json_decref(r);
        }
    }
    if (!text && !line)
        fprintf(stderr, "minions-soak: %s request: out of memory\n", tag);
    else if (!ended)
        fprintf(stderr, "minions-soak: %s request: %s\n", tag, mn_client_strerror(&c));
    free(line);
    mn_free(deltas);
    mn_client_close(&c);
    return text;
}

/* Wait up to `limit` seconds until the server is idle (nothing running, queued or in flight) with
 * KV used 0 and no connection left. *st gets the last stats read: every field -1 when none could be
 * read (the server is gone). */
static void wait_idle(int sock, stats *st, double limit)
{
    double t = mn_now();
    memset(st, 0xff, sizeof *st);
    for (;;) {
        stats now;
        if (admin_stats(sock, &now) == 0) {
            *st = now;
            if (!now.running && !now.queued && !now.in_flight && !now.used && !now.drafts_used && !now.connections)
                return;
        }
        if (mn_now() - t >= limit)
            return;
        usleep(100000);
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: minions-soak (--addr HOST:PORT | --unix PATH)... --admin ADDR [options]\n"
            "  -a, --addr HOST:PORT   the server's TCP address\n"
            "  -u, --unix PATH        the server's Unix socket (with --addr too: each connection picks one)\n"
            "      --admin ADDR       the server's admin socket (ipc://PATH or tcp://127.0.0.1:N)\n"
            "  -r, --requests N       requests in all (default 10000)\n"
            "  -c, --clients C        concurrent connections, one thread each (default 16)\n"
            "  -p, --prompts FILE     JSON lines with a \"prompt\" field (default prompts/kjv.jsonl)\n"
            "  -s, --seed S           seed of the plans (default 1)\n"
            "  -n, --max-tokens M     max_tokens is drawn from 1..M (default 24)\n"
            "      --max-line N       the server's --max-line: some connections end with a longer line\n"
            "                         (default 0: never)\n"
            "      --no-churn         leave batch.max_sequences and queue.max alone during the run\n"
            "      --stall S          a connection with no answer for S seconds has stalled (default 60);\n"
            "                         a thread stops after 3 stalled connections in a row\n"
            "  -v, --verbose          a stats line every second and the settings moved, on stderr\n"
            "Prints one JSON summary line, then 'soak: N passed, M failed'; exit 0 when all passed.\n");
}

int main(int argc, char **argv)
{
    static soak k_;
    soak *k = &k_;
    k->n_requests = 10000;
    k->n_clients = 16;
    k->max_tokens = 24;
    k->seed = 1;
    k->churn = true;
    k->stall_s = 60;
    const char *prompts = "prompts/kjv.jsonl";
    static const struct option opts[] = {
        {"addr", required_argument, 0, 'a'},       {"unix", required_argument, 0, 'u'},
        {"admin", required_argument, 0, 'A'},      {"requests", required_argument, 0, 'r'},
        {"clients", required_argument, 0, 'c'},    {"prompts", required_argument, 0, 'p'},
        {"seed", required_argument, 0, 's'},       {"max-tokens", required_argument, 0, 'n'},
        {"max-line", required_argument, 0, 'L'},   {"no-churn", no_argument, 0, 'N'},
        {"verbose", no_argument, 0, 'v'},        {"stall", required_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0},
    };
    for (int c; (c = getopt_long(argc, argv, "a:u:r:c:p:s:n:vh", opts, NULL)) != -1;) {
        long n = 0;
        bool ok = true;
        switch (c) {
        case 'a': k->tcp = optarg; break;
        case 'u': k->unix_path = optarg; break;
        case 'A': k->admin = optarg; break;
        case 'r': ok = mn_parse_long(optarg, 1, 1L << 30, &n), k->n_requests = (int)n; break;
        case 'c': ok = mn_parse_long(optarg, 1, 1024, &n), k->n_clients = (int)n; break;
        case 'p': prompts = optarg; break;
        case 's': ok = mn_parse_long(optarg, 0, LONG_MAX, &n), k->seed = (uint64_t)n; break;
        case 'n': ok = mn_parse_long(optarg, 1, 4096, &n), k->max_tokens = (int)n; break;
        case 'L': ok = mn_parse_long(optarg, 0, 64 << 20, &n), k->max_line = (int)n; break;
        case 'N': k->churn = false; break;
        case 'v': k->verbose = true; break;
        case 'S': ok = mn_parse_real(optarg, 1e-3, 86400, &k->stall_s); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (!ok) {
            fprintf(stderr, "minions-soak: bad option value '%s'\n", optarg);
            return 2;
        }
    }
    if (optind != argc || (!k->tcp && !k->unix_path) || !k->admin) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (mn_prompts_load(prompts, 1, 999, &k->prompts, &k->n_prompts) < 0) {
        fprintf(stderr, "minions-soak: cannot read prompts from %s\n", prompts);
        return 1;
    }
    pthread_mutex_init(&k->print_mu, NULL);
    pthread_mutex_init(&k->table_mu, NULL);
    k->table = mn_calloc((size_t)k->n_prompts * N_STOPSETS * N_SCLASS, sizeof *k->table);
    pthread_t *th = mn_calloc((size_t)k->n_clients, sizeof *th);
    client_arg *args = mn_calloc((size_t)k->n_clients, sizeof *args);
    if (!k->table || !th || !args)
        return 1;

    int admin = admin_open(k->admin);
    stats st0, st;
    if (admin < 0 || admin_stats(admin, &st0) < 0) {
        fprintf(stderr, "minions-soak: no stats from the admin socket %s\n", k->admin);
        return 1;
    }
    monitor_arg ma = {k, admin_get(admin, "batch.max_sequences"), admin_get(admin, "queue.max")};
    char *base = greedy_text(k, "base", false);
    if (!base) {
        fprintf(stderr, "minions-soak: the server does not answer a first greedy request\n");
        return 1;
    }

    k->t0 = mn_now();
    pthread_t mon;
    pthread_create(&mon, NULL, monitor_main, &ma);
    for (int i = 0; i < k->n_clients; i++) {
        args[i] = (client_arg){k, i, k->n_requests / k->n_clients + (i < k->n_requests % k->n_clients)};
        pthread_create(&th[i], NULL, client_main, &args[i]);
    }
    for (int i = 0; i < k->n_clients; i++)
        pthread_join(th[i], NULL);
    double elapsed = mn_now() - k->t0;
    atomic_store(&k->stop_monitor, true);
    pthread_join(mon, NULL);

    if (atomic_load(&k->sent) != k->n_requests)
        violation(k, C_PROGRESS, "%ld of %d requests sent", atomic_load(&k->sent), k->n_requests);
    double tw = mn_now();
    wait_idle(admin, &st, IDLE_WAIT_S);
    double idle_s = mn_now() - tw;
    /* without stats (the server or its admin socket is gone) the checks of its state are skipped:
     * the one violation says so */
    bool have_stats = st.total >= 0;
    long finished = (st.done - st0.done) + (st.failed - st0.failed) - 1; /* the base request */
    long answered = atomic_load(&k->answered), sent_all = atomic_load(&k->sent) + atomic_load(&k->dups_raced);
    if (!have_stats) {
        violation(k, C_IDLE, "no stats from the admin socket after the soak: is the server still there?");
    } else {
        if (st.running || st.queued || st.in_flight)
            violation(k, C_IDLE, "not idle after %.0f s: running %ld queued %ld in_flight %ld", IDLE_WAIT_S,
                      st.running, st.queued, st.in_flight);
        if (st.used != 0 || st.drafts_used != 0)
            violation(k, C_KV_ZERO,
                      "KV used %ld of %ld blocks, drafts' %ld, after the soak (running %ld queued %ld in_flight %ld)",
                      st.used, st.total, st.drafts_used, st.running, st.queued, st.in_flight);
        if (st.connections != 0)
            violation(k, C_CONNS_ZERO, "%ld connections left after the soak", st.connections);
        if (finished < answered || finished > sent_all)
            violation(k, C_COUNTERS, "stats done+failed grew by %ld; answered %ld, sent %ld", finished, answered,
                      sent_all);
    }
    char *last = greedy_text(k, "last", true);
    if (!last || strcmp(last, base)) {
        char b1[600], b2[600];
        violation(k, C_FINAL_GREEDY, "the final greedy request gave \"%s\", the first \"%s\"",
                  last ? show(b1, sizeof b1, last, strlen(last)) : "(nothing)", show(b2, sizeof b2, base, strlen(base)));
    }
    stats st2;
    wait_idle(admin, &st2, 5);
    if (have_stats && st2.total < 0) {
        violation(k, C_IDLE, "no stats from the admin socket after the final request: is the server still there?");
    } else if (have_stats) {
        if (st2.in_flight != 0)
            violation(k, C_IDLE, "after the final request: in_flight %ld", st2.in_flight);
        if ((st2.used != 0 || st2.drafts_used != 0) && st.used == 0 && st.drafts_used == 0)
            violation(k, C_KV_ZERO, "after the final request: KV used %ld, drafts' %ld", st2.used, st2.drafts_used);
        if (st2.connections != 0 && st.connections == 0)
            violation(k, C_CONNS_ZERO, "after the final request: %ld connections", st2.connections);
    }
    nn_close(admin);

    int passed = 0, failed = 0, total_viol = 0;
    for (int c = 0; c < C_COUNT; c++) {
        int v = atomic_load(&k->viol[c]);
        total_viol += v;
        v ? failed++ : passed++;
        if (v)
            fprintf(stderr, "soak: FAIL %s (%d violations)\n", check_names[c], v);
        else
            fprintf(stderr, "soak: ok   %s\n", check_names[c]);
    }
    printf("{\"requests\":%ld,\"answered\":%ld,\"done\":%ld,\"errors\":%ld,\"busy\":%ld,\"internal\":%ld,"
           "\"cancels_sent\":%ld,\"cancelled\":%ld,\"unknown_id_after_cancel\":%ld,\"sessions\":%ld,"
           "\"sync_ends\":%ld,\"half_closes\":%ld,\"disconnects\":%ld,\"disconnects_rst\":%ld,"
           "\"too_long_ends\":%ld,\"disconnected_in_flight\":%ld,\"bad_lines\":%ld,\"blank_lines\":%ld,"
           "\"duplicates\":%ld,\"duplicates_raced\":%ld,\"slow_readers\":%ld,\"greedy_compared\":%ld,"
           "\"seeded_compared\":%ld,\"tokens\":%ld,\"violations\":%d,\"elapsed_s\":%.2f,\"idle_wait_s\":%.2f,"
           "\"kv_used\":%ld,\"kv_total\":%ld,\"kv_used_max\":%ld,\"connections\":%ld,\"throttled_max\":%ld,"
           "\"throttled_samples\":%ld,"
           "\"preemptions\":%ld,\"steps\":%ld,\"stats_samples\":%ld}\n",
           atomic_load(&k->sent), answered, atomic_load(&k->done), atomic_load(&k->errors), atomic_load(&k->busy),
           atomic_load(&k->internal), atomic_load(&k->cancels), atomic_load(&k->cancelled),
           atomic_load(&k->unknown_after_cancel), atomic_load(&k->sessions), atomic_load(&k->sync_ends),
           atomic_load(&k->half_closes), atomic_load(&k->abrupt), atomic_load(&k->abrupt_rst),
           atomic_load(&k->too_long), atomic_load(&k->abandoned), atomic_load(&k->bad_lines),
           atomic_load(&k->blank_lines), atomic_load(&k->dups), atomic_load(&k->dups_raced),
           atomic_load(&k->slow_readers), atomic_load(&k->greedy_compared), atomic_load(&k->seeded_compared),
           atomic_load(&k->tokens), total_viol, elapsed, idle_s, st.used, st.total, k->max_used, st.connections,
           k->max_throttled, k->throttled_samples, st.total < 0 ? -1 : st.preemptions - st0.preemptions,
           st.total < 0 ? -1 : st.steps - st0.steps, k->samples);
    printf("soak: %d passed, %d failed\n", passed, failed);
    fflush(stdout);

    mn_free(base);
    mn_free(last);
    for (size_t i = 0; i < (size_t)k->n_prompts * N_STOPSETS * N_SCLASS; i++)
        for (result *e = k->table[i], *next; e; e = next) {
            next = e->next;
            mn_free(e->text);
            mn_free(e);
        }
    mn_prompts_free(k->prompts, k->n_prompts);
    mn_free(k->table);
    mn_free(th);
    mn_free(args);
    return failed ? 1 : 0;
}
