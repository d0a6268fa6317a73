/* serverutil.c - see serverutil.h. */
#include "serverutil.h"
#include "testutil.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v ? v : dflt;
}

const char *model_path(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/models/target.gguf", env_or("MINIONS_SRCDIR", "."));
    return path;
}

rlim_t g_nofile;


void server_start(server *s, const char *const *extra)
{
    server_start_model(s, model_path(), extra);
}

/* The daemons this process started and their directories, until server_wait has seen them exit: a
 * test that ends early (a failed assertion ends it; Criterion's worker then exits, running atexit's
 * handlers) still kills its daemon and removes its directory. */
static struct {
    pid_t pid; /* 0: not started yet */
    char dir[64];
} g_live[64];
static int g_n_live;

static void remove_dir(const char *dir)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
}

static void forget_server(const server *s)
{
    for (int i = 0; i < g_n_live; i++)
        if (!strcmp(g_live[i].dir, s->dir)) {
            g_live[i] = g_live[--g_n_live];
            return;
        }
}

static void clean_up_servers(void)
{
    for (int i = 0; i < g_n_live; i++) {
        if (g_live[i].pid > 0) {
            kill(g_live[i].pid, SIGKILL);
            waitpid(g_live[i].pid, NULL, 0);
        }
        remove_dir(g_live[i].dir);
    }
    g_n_live = 0;
}

void server_start_model(server *s, const char *model, const char *const *extra)
{
    static bool registered;
    if (!registered)
        registered = atexit(clean_up_servers) == 0;
    snprintf(s->dir, sizeof s->dir, "/tmp/minions-test-XXXXXX");
    cr_assert(mkdtemp(s->dir));
    int live = g_n_live < (int)(sizeof g_live / sizeof *g_live) ? g_n_live++ : -1;
    if (live >= 0)
        g_live[live].pid = 0, snprintf(g_live[live].dir, sizeof g_live[live].dir, "%s", s->dir);
    snprintf(s->unix_path, sizeof s->unix_path, "%s/sock", s->dir);
    snprintf(s->admin, sizeof s->admin, "ipc://%s/admin", s->dir);
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/minionsd", env_or("MINIONS_BIN_DIR", "."));
    const char *argv[32] = {bin, "--model", model, "--port", "0", "--unix", s->unix_path,
                            "--admin", s->admin, "--threads", "2"};
    int argc = 11;
    for (int i = 0; extra && extra[i]; i++)
        argv[argc++] = extra[i];
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t parent = getpid();
    s->pid = fork();
    cr_assert(s->pid >= 0);
    if (s->pid > 0 && live >= 0)
        g_live[live].pid = s->pid;
    if (s->pid == 0) { /* the daemon dies with the test, even when an assertion ends it early */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char log[128]; /* the daemon's log, for the tests that read it */
        snprintf(log, sizeof log, "%s/log", s->dir);
        int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (lfd >= 0)
            dup2(lfd, 2), close(lfd);
        if (g_nofile)
            setrlimit(RLIMIT_NOFILE, &(struct rlimit){g_nofile, g_nofile});
        execv(bin, (char **)argv);
        _exit(127);
    }
    close(fds[1]);
    FILE *out = fdopen(fds[0], "r");
    char line[512] = {0};
    cr_assert(fgets(line, sizeof line, out), "minionsd printed no ready line");
    fclose(out);
    const char *tcp = strstr(line, "tcp ");
    cr_assert(tcp, "ready line: %s", line);
    sscanf(tcp + 4, "%63s", s->tcp);
    const char *http = strstr(line, " http ");
    s->http_port = http && strrchr(http, ':') ? atoi(strrchr(http, ':') + 1) : 0;
}

/* minionsd (the bundled target, --port 0, --admin none) with these arguments exits non-zero at
 * start-up, its stderr naming `needle`. One that starts instead is stopped after 30 s (timeout's
 * 124): the test fails then, leaving no daemon. */
void start_refused(const char *const *args, const char *needle)
{
    char cmd[4096], bin[1024];
    snprintf(bin, sizeof bin, "%s/minionsd", env_or("MINIONS_BIN_DIR", "."));
    int n = snprintf(cmd, sizeof cmd, "timeout 30 %s --model %s --port 0 --admin none", bin, model_path());
    for (int i = 0; args[i]; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", args[i]);
    snprintf(cmd + n, sizeof cmd - (size_t)n, " 2>&1 </dev/null");
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    char out[4096] = {0};
    size_t len = fread(out, 1, sizeof out - 1, f);
    out[len] = 0;
    int status = pclose(f);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 124, "minionsd started with: %s",
              cmd);
    cr_assert(strstr(out, needle), "minionsd's message for %s lacks '%s': %s", cmd, needle, out);
}

/* A copy of the GGUF at src in dst whose u32 value at `key` is value (patched in place). */
void copy_with_u32(const char *src, const char *dst, const char *key, uint32_t value)
{
    size_t len = 0, klen = strlen(key);
    char *bytes = slurp(src, &len), *at = memmem(bytes, len, key, klen);
    cr_assert(at, "no %s in %s", key, src);
    uint32_t type;
    memcpy(&type, at + klen, 4);
    cr_assert_eq(type, 4, "%s is a u32", key); /* GGUF's UINT32; the value follows */
    memcpy(at + klen + 4, &value, 4);
    FILE *f = fopen(dst, "wb");
    cr_assert(f && fwrite(bytes, 1, len, f) == len && fclose(f) == 0, "%s", dst);
    free(bytes);
}

/* Wait for the daemon to exit; returns its exit status (-1: killed after timeout_s, or a signal).
 * Either way its directory is removed. */
int server_wait(server *s, int timeout_s)
{
    int status, ret = -1;
    bool exited = false;
    for (int i = 0; i < timeout_s * 20 && !exited; i++) {
        exited = waitpid(s->pid, &status, WNOHANG) == s->pid;
        if (!exited)
            usleep(50000);
    }
    if (exited) {
        ret = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    } else {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &status, 0);
    }
    remove_dir(s->dir);
    forget_server(s);
    return ret;
}

void server_stop(server *s)
{
    kill(s->pid, SIGTERM);
    cr_assert_eq(server_wait(s, 60), 0, "minionsd did not exit 0 after SIGTERM");
}

static int admin_socket(server *s)
{
    int sock = nn_socket(AF_SP, NN_REQ);
    cr_assert(sock >= 0);
    int tmo = 20000;
    nn_setsockopt(sock, NN_SOL_SOCKET, NN_RCVTIMEO, &tmo, sizeof tmo);
    cr_assert(nn_connect(sock, s->admin) >= 0);
    return sock;
}

json_t *admin_on(int sock, const char *cmd)
{
    cr_assert(nn_send(sock, cmd, strlen(cmd), 0) >= 0);
    char *buf = NULL;
    int n = nn_recv(sock, &buf, NN_MSG, 0);
    cr_assert(n > 0, "admin reply: %s", nn_strerror(nn_errno()));
    json_t *o = json_loadb(buf, (size_t)n, 0, NULL);
    cr_assert(o, "admin reply is not JSON");
    nn_freemsg(buf);
    return o;
}

/* One admin command; the parsed reply (caller decrefs). */
json_t *admin(server *s, const char *cmd)
{
    int sock = admin_socket(s);
    json_t *o = admin_on(sock, cmd);
    nn_close(sock);
    return o;
}

int admin_connect(server *s)
{
    int sock = admin_socket(s);
    json_decref(admin_on(sock, "{\"cmd\":\"stats\"}")); /* answered: the daemon holds the connection */
    return sock;
}

void admin_ok(server *s, const char *cmd)
{
    json_t *r = admin(s, cmd);
    cr_assert(json_is_true(json_object_get(r, "ok")), "%s: %s", cmd, json_dumps(r, 0));
    json_decref(r);
}

void admin_refuses(server *s, const char *const *cmds, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_t *r = admin(s, cmds[i]);
        cr_assert(json_is_false(json_object_get(r, "ok")), "accepted: %s", cmds[i]);
        json_decref(r);
    }
}

json_int_t stat_at(json_t *stats, const char *path)
{
    json_t *v = json_object_get(stats, "stats");
    char key[128];
    for (const char *p = path; v && *p;) {
        size_t n = strcspn(p, ".");
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        v = json_object_get(v, key);
        p += n + (p[n] == '.');
    }
    return json_is_boolean(v) ? json_is_true(v) : json_integer_value(v);
}

static bool compares(json_int_t v, const char *op, json_int_t want)
{
    if (!strcmp(op, "=="))
        return v == want;
    if (!strcmp(op, "!="))
        return v != want;
    if (!strcmp(op, ">="))
        return v >= want;
    if (!strcmp(op, ">"))
        return v > want;
    if (!strcmp(op, "<="))
        return v <= want;
    if (!strcmp(op, "<"))
        return v < want;
    cr_assert_fail("wait_stat: no operator %s", op);
    return false;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

json_int_t wait_stat_on(int sock, const char *path, const char *op, json_int_t want)
{
    double until = now_s() + WAIT_STAT_S;
    for (;;) {
        json_t *st = admin_on(sock, "{\"cmd\":\"stats\"}");
        json_int_t v = stat_at(st, path);
        if (compares(v, op, want)) {
            json_decref(st);
            return v;
        }
        if (now_s() > until) {
            char *dump = json_dumps(st, JSON_COMPACT);
            cr_assert_fail("stats %s is %lld, not %s %lld, after %d s: %s", path, (long long)v, op, (long long)want,
                           WAIT_STAT_S, dump);
        }
        json_decref(st);
        usleep(20000);
    }
}

json_int_t wait_stat(server *s, const char *path, const char *op, json_int_t want)
{
    int sock = admin_connect(s);
    json_int_t v = wait_stat_on(sock, path, op, want);
    nn_close(sock);
    return v;
}

json_int_t wait_stat_still(server *s, const char *path, double still_s)
{
    int sock = admin_connect(s);
    double until = now_s() + WAIT_STAT_S, since = now_s();
    json_t *st = admin_on(sock, "{\"cmd\":\"stats\"}");
    json_int_t v = stat_at(st, path);
    json_decref(st);
    while (now_s() - since < still_s) {
        cr_assert(now_s() < until, "stats %s still moved after %d s (now %lld)", path, WAIT_STAT_S, (long long)v);
        usleep(50000);
        st = admin_on(sock, "{\"cmd\":\"stats\"}");
        json_int_t again = stat_at(st, path);
        json_decref(st);
        if (again != v)
            v = again, since = now_s();
    }
    nn_close(sock);
    return v;
}

/* stats.group.key, or stats.group when key is NULL */
json_int_t kv_of(json_t *stats, const char *pool, const char *key)
{
    json_t *kv = json_object_get(json_object_get(stats, "stats"), "kv");
    return json_integer_value(json_object_get(json_object_get(kv, pool), key));
}

json_int_t stat_of(json_t *stats, const char *group, const char *key)
{
    json_t *g = json_object_get(json_object_get(stats, "stats"), group);
    return json_integer_value(key ? json_object_get(g, key) : g);
}

void connect_to(const char *addr, tconn *t)
{
    mn_err err = {{0}};
    cr_assert_eq(mn_client_connect(addr, &t->c, &err), 0, "%s", err.msg);
    t->stash = json_array();
}

void tconn_close(tconn *t)
{
    mn_client_close(&t->c);
    json_decref(t->stash);
    t->stash = NULL;
}

void send_line(tconn *t, const char *line)
{
    cr_assert_eq(mn_client_send(&t->c, line, strlen(line)), 0);
    cr_assert_eq(mn_client_send(&t->c, "\n", 1), 0);
}

void send_request(tconn *c, const char *id, const char *prompt, int max_tokens, double temperature,
                         int stream)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:f, s:b}", "id", id, "prompt", prompt, "max_tokens", max_tokens,
                          "temperature", temperature, "stream", stream);
    char *line = json_dumps(o, JSON_COMPACT);
    send_line(c, line);
    free(line);
    json_decref(o);
}

/* The next reply line from the socket (the stash is not consulted). */
json_t *read_reply(tconn *t)
{
    size_t n;
    char *l = mn_client_read_line(&t->c, &n);
    cr_assert(l, "the server closed the connection");
    json_t *o = json_loadb(l, n, 0, NULL);
    cr_assert(o, "reply is not JSON: %s", l);
    return o;
}

/* The next reply for id: from the stash, else from the socket (stashing other ids' replies). */
json_t *next_for(tconn *t, const char *id)
{
    size_t i;
    json_t *o;
    json_array_foreach(t->stash, i, o) {
        const char *rid = json_string_value(json_object_get(o, "id"));
        if (rid && !strcmp(rid, id)) {
            json_incref(o);
            json_array_remove(t->stash, i);
            return o;
        }
    }
    for (;;) {
        o = read_reply(t);
        const char *rid = json_string_value(json_object_get(o, "id"));
        if (rid && !strcmp(rid, id))
            return o;
        json_array_append_new(t->stash, o);
    }
}

/* Read until the done or error line of `id`; the deltas read here must be the done text's tail
 * (all of it when none were read before). */
json_t *await(tconn *c, const char *id)
{
    json_t *acc = json_string("");
    for (;;) {
        json_t *o = next_for(c, id);
        {
            json_t *d = json_object_get(o, "delta");
            if (d) {
                char *joined = NULL;
                cr_assert(asprintf(&joined, "%s%s", json_string_value(acc), json_string_value(d)) > 0);
                json_string_set(acc, joined);
                free(joined);
            } else {
                const char *text = json_string_value(json_object_get(o, "text"));
                if (json_object_get(o, "done") && json_string_length(acc))
                    cr_assert(strlen(text) >= json_string_length(acc) &&
                                  !strcmp(text + strlen(text) - json_string_length(acc), json_string_value(acc)),
                              "%s: deltas differ from the done text", id);
                json_decref(acc);
                return o;
            }
        }
        json_decref(o);
    }
}

/* minions-generate's greedy continuation of prompt. */
char *generate(const char *prompt, int n)
{
    return generate_model(model_path(), prompt, n);
}

char *generate_model(const char *model, const char *prompt, int n) { return generate_kv(model, prompt, n, "f32"); }

char *generate_kv(const char *model, const char *prompt, int n, const char *kv_type)
{
    char bin[1024], ntok[16];
    snprintf(bin, sizeof bin, "%s/minions-generate", env_or("MINIONS_BIN_DIR", "."));
    snprintf(ntok, sizeof ntok, "%d", n);
    const char *argv[] = {bin, "--model", model, "--prompt", prompt, "-n", ntok, "-t", "1", "--kv-type", kv_type, NULL};
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, bin, &fa, NULL, (char **)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fds[0], buf + len, cap - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "minions-generate failed");
    return buf;
}

/* The first prompts of each bundled prompt set. */
int load_prompts(char **out, int per_set)
{
    static const char *sets[] = {"kjv", "web", "devil"};
    int n = 0;
    for (int s = 0; s < 3; s++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/prompts/%s.jsonl", env_or("MINIONS_SRCDIR", "."), sets[s]);
        FILE *f = fopen(path, "r");
        cr_assert(f, "%s", path);
        char line[8192];
        for (int i = 0; i < per_set && fgets(line, sizeof line, f); i++) {
            json_t *o = json_loads(line, 0, NULL);
            out[n++] = strdup(json_string_value(json_object_get(o, "prompt")));
            json_decref(o);
        }
        fclose(f);
    }
    return n;
}

/* Two prompts of each set and minions-generate's greedy continuation of each. */
int load_references(char **prompts, char **want, int max_tokens)
{
    int n = load_prompts(prompts, 2);
    for (int i = 0; i < n; i++)
        want[i] = generate(prompts[i], max_tokens);
    return n;
}

void check_prompts_cached(server *s, char **prompts, int n, int n_drafters, const bool *drafted)
{
    json_int_t total = 0;
    json_t *r = admin(s, "{\"cmd\":\"get\",\"key\":\"kv.block_size\"}");
    json_int_t bs = json_integer_value(json_object_get(r, "value"));
    json_decref(r);
    cr_assert_gt(bs, 0);
    tconn c;
    connect_to(s->tcp, &c);
    for (int i = 0; i < n; i++) {
        json_t *before = admin(s, "{\"cmd\":\"stats\"}");
        send_request(&c, "again", prompts[i], 1, 0, 0);
        json_t *done = await(&c, "again");
        json_int_t tokens = json_integer_value(json_object_get(json_object_get(done, "usage"), "prompt_tokens"));
        json_decref(done);
        json_t *after = admin(s, "{\"cmd\":\"stats\"}");
        json_int_t want = (tokens - 1) / bs * bs;
        cr_assert_eq(kv_of(after, "target", "adopted") - kv_of(before, "target", "adopted"), want,
                     "prompt %d (%lld tokens): the target's pool", i, (long long)tokens);
        json_int_t drafts = kv_of(after, "drafts", "adopted") - kv_of(before, "drafts", "adopted");
        cr_assert_eq(drafts, drafted && drafted[i] ? n_drafters * want : 0,
                     "prompt %d (%lld tokens): the drafts' pools", i, (long long)tokens);
        total += want;
        json_decref(before);
        json_decref(after);
    }
    cr_assert_gt(total, 0, "no prompt fills a block");
    tconn_close(&c);
}

/* Every KV block free (the drafts' too) and no request in flight, within 10 s. */
void wait_idle(server *s)
{
    for (int i = 0; i < 200; i++) {
        json_t *st = admin(s, "{\"cmd\":\"stats\"}");
        json_int_t used = kv_of(st, "target", "used") + kv_of(st, "drafts", "used");
        json_int_t live = stat_of(st, "requests", "in_flight");
        json_decref(st);
        if (used == 0 && live == 0)
            return;
        usleep(50000);
    }
    cr_assert_fail("KV blocks or requests still held 10 s after the client left");
}

json_int_t wait_running(server *s)
{
    json_int_t running = 0;
    for (int i = 0; i < 400 && !running; i++, usleep(10000)) {
        json_t *st = admin(s, "{\"cmd\":\"stats\"}");
        running = stat_of(st, "requests", "running");
        json_decref(st);
    }
    return running;
}

/* A slow client reading again, on its own thread: the final line of its one request. */
typedef struct slow_reader {
    pthread_t th;
    tconn *c;
    char *final;  /* the done or error line, malloc'd; NULL when the connection ended first */
} slow_reader;

static void *slow_read(void *arg)
{
    slow_reader *r = arg;
    size_t n;
    char *l;
    while ((l = mn_client_read_line(&r->c->c, &n)))
        if (strstr(l, "\"done\"") || strstr(l, "\"error\"")) {
            r->final = strdup(l);
            break;
        }
    return NULL;
}

/* Clients that stop reading cannot hold the KV pool (issue #9, defect 3): 16 streaming clients that
 * never read fill a pool sized for exactly 16 of their requests and are throttled; a client that
 * reads must still be served - kvmem preempts a paused request for it - and once the slow clients
 * read again (all at once, so that they run as one batch) their requests are recomputed and their
 * text is exactly minions-generate's. */
void check_paused_preemption(const char *const *extra, bool slots)
{
    enum { SLOW = 16, TOKENS = 400 };
    char *want = generate("And God said", TOKENS);
    server s;
    /* "And God said" is 3 tokens: each request reserves 3 + 400 positions, 26 blocks of 16.
     * Some 150 delta lines fill a 4 KiB output buffer and the Unix socket's: all are throttled
     * long before they finish. With slots: 4 run at a time and 12 wait, each pausing in turn. */
    const char *args[32] = {"--output-buffer", "4", "--kv-blocks", slots ? "512" : "416"};
    int n = 4;
    if (slots) {
        const char *more[] = {"--max-batch", "4", "--max-queue", "12"};
        for (int i = 0; i < 4; i++)
            args[n++] = more[i];
    }
    for (int i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    server_start(&s, args);
    tconn slow[SLOW], fast;
    for (int i = 0; i < SLOW; i++) {
        connect_to(s.unix_path, &slow[i]);
        send_request(&slow[i], "big", "And God said", TOKENS, 0, 1);
    }
    wait_stat(&s, "throttled", "==", SLOW); /* every client that does not read */
    json_t *st = admin(&s, "{\"cmd\":\"stats\"}");
    if (slots)
        cr_assert_eq(stat_of(st, "requests", "paused"), SLOW, "every request of the clients that do not read "
                     "pauses, with KV to spare: %s", json_dumps(st, 0));
    else
        cr_assert_eq(kv_of(st, "target", "free"), 0, "the paused requests hold the whole pool: %s", json_dumps(st, 0));
    json_decref(st);
    connect_to(s.tcp, &fast);
    send_request(&fast, "quick", "In the beginning", 32, 0, 0);
    json_t *o = await(&fast, "quick");
    cr_assert(json_object_get(o, "done"), "a reading client is served while paused clients hold the pool");
    json_decref(o);
    st = admin(&s, "{\"cmd\":\"stats\"}");
    cr_assert_geq(stat_of(st, "preemptions", NULL), 1, "no paused request was preempted");
    json_decref(st);
    slow_reader readers[SLOW];
    for (int i = 0; i < SLOW; i++) {
        readers[i] = (slow_reader){.c = &slow[i]};
        cr_assert_eq(pthread_create(&readers[i].th, NULL, slow_read, &readers[i]), 0);
    }
    for (int i = 0; i < SLOW; i++)
        pthread_join(readers[i].th, NULL);
    for (int i = 0; i < SLOW; i++) { /* recomputed, bit for bit */
        cr_assert(readers[i].final, "slow client %d got no final line", i);
        o = json_loads(readers[i].final, 0, NULL);
        cr_assert_str_eq(json_string_value(json_object_get(o, "text")), want, "slow client %d", i);
        json_decref(o);
        free(readers[i].final);
    }
    wait_idle(&s);
    for (int i = 0; i < SLOW; i++)
        tconn_close(&slow[i]);
    tconn_close(&fast);
    server_stop(&s);
    free(want);
}


typedef struct client_job {
    const char *addr;
    char **prompts, **want;
    int id, max_tokens, opt_out_every, failures;
} client_job;

/* One client thread: four requests in turn, compared with want. No Criterion assertion here (it
 * runs off the test's thread): a failure is counted. */
static void *client_thread(void *arg)
{
    client_job *j = arg;
    mn_client c;
    mn_err err = {{0}};
    if (mn_client_connect(j->addr, &c, &err) < 0) {
        j->failures = 4;
        return NULL;
    }
    for (int k = 0; k < 4; k++) {
        int p = (j->id + k) % 6;
        json_t *o = json_pack("{s:s, s:s, s:i, s:b}", "id", "x", "prompt", j->prompts[p], "max_tokens", j->max_tokens,
                              "stream", k % 2);
        if (j->opt_out_every)
            json_object_set_new(o, "speculate", json_boolean((j->id + k) % j->opt_out_every != 0));
        char *line = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        mn_client_send(&c, line, strlen(line));
        mn_client_send(&c, "\n", 1);
        free(line);
        int ok = 0;
        char deltas[8192] = "";   /* a streamed request's deltas must add up to its text */
        size_t nd = 0;
        for (char *l; !ok && (l = mn_client_read_line(&c, NULL));) {
            json_t *r = json_loads(l, 0, NULL);
            json_t *d = json_object_get(r, "delta");
            if (json_object_get(r, "done")) {
                const char *text = json_string_value(json_object_get(r, "text"));
                ok = !strcmp(text, j->want[p]) && (k % 2 == 0 || !strcmp(deltas, text)) ? 1 : -1;
            } else if (!d || nd + json_string_length(d) >= sizeof deltas) {
                ok = -1;
            } else {
                memcpy(deltas + nd, json_string_value(d), json_string_length(d) + 1);
                nd += json_string_length(d);
            }
            json_decref(r);
        }
        j->failures += ok != 1;
    }
    mn_client_close(&c);
    return NULL;
}

int run_32_clients(server *s, char **prompts, char **want, int max_tokens, int opt_out_every)
{
    pthread_t th[32];
    client_job jobs[32];
    for (int i = 0; i < 32; i++) {
        jobs[i] = (client_job){i % 2 ? s->tcp : s->unix_path, prompts, want, i, max_tokens, opt_out_every, 0};
        pthread_create(&th[i], NULL, client_thread, &jobs[i]);
    }
    int failures = 0;
    for (int i = 0; i < 32; i++) {
        pthread_join(th[i], NULL);
        failures += jobs[i].failures;
    }
    return failures;
}
