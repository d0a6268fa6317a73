/* serverutil.h - what the minionsd end-to-end tests share: start and stop a daemon, talk to it over
 * its sockets and its admin socket, and minions-generate's reference texts. Criterion assertions
 * end the calling test on failure. Needs $MINIONS_BIN_DIR and $MINIONS_SRCDIR. */
#ifndef MN_TEST_SERVERUTIL_H
#define MN_TEST_SERVERUTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "cli/client.h"

extern rlim_t g_nofile; /* when set, the next daemon runs with this many file descriptors at most */

typedef struct server {
    pid_t pid;
    char dir[64];
    char tcp[64];      /* 127.0.0.1:PORT */
    char unix_path[128];
    char admin[160];   /* ipc://... */
    int http_port;     /* with --http in extra: its port, else 0 */
} server;

/* A client plus the replies read while waiting for another id. */
typedef struct tconn {
    mn_client c;
    json_t *stash; /* array of replies not yet consumed */
} tconn;

const char *env_or(const char *name, const char *dflt);
const char *model_path(void);
void server_start(server *s, const char *const *extra);
/* The same with another target model (a path). */
void server_start_model(server *s, const char *model, const char *const *extra);

/* minionsd (the bundled target, --port 0, --admin none) with these arguments (NULL-ended) exits
 * non-zero at start-up, its output naming `needle`; one that starts instead fails the test after
 * 30 s. */
void start_refused(const char *const *args, const char *needle);

/* A copy of the GGUF at src in dst whose u32 value at `key` is value (patched in place). */
void copy_with_u32(const char *src, const char *dst, const char *key, uint32_t value);

/* Wait for the daemon to exit; returns its exit status (-1: killed after timeout_s, or a signal).
 * Either way its directory (s->dir: sockets, log) is removed. A daemon the test leaves running (an
 * assertion ended it early) is killed, and its directory removed, when the test's process exits. */
int server_wait(server *s, int timeout_s);
void server_stop(server *s);

/* One admin command; the parsed reply (caller decrefs). */
json_t *admin(server *s, const char *cmd);
/* An admin connection that stays open, already answered once (so the daemon holds it: one out of
 * file descriptors could not accept a new one); commands over it with admin_on; nn_close it. */
int admin_connect(server *s);
json_t *admin_on(int sock, const char *cmd);

/* The command is answered ok:true (else the test fails, showing the reply). */
void admin_ok(server *s, const char *cmd);
/* Each of the n commands is answered ok:false. */
void admin_refuses(server *s, const char *const *cmds, size_t n);

/* A stats value by its dotted path under "stats": "idle_closed", "requests.running",
 * "http.accept_pauses"; a boolean ("draining") reads 1 or 0, a missing one 0. */
json_int_t stat_at(json_t *stats, const char *path);

/* Poll stats until the value at path compares with want by op ("==", "!=", ">=", ">", "<=", "<");
 * returns that value. Not within WAIT_STAT_S seconds: the test fails, showing the stats. */
enum { WAIT_STAT_S = 120 };
json_int_t wait_stat(server *s, const char *path, const char *op, json_int_t want);
/* The same over an admin_connect connection. */
json_int_t wait_stat_on(int sock, const char *path, const char *op, json_int_t want);
/* Poll until the value at path has not moved for still_s seconds (within WAIT_STAT_S); returns it.
 * For counts with no state that says they are final (a step in flight still lands). */
json_int_t wait_stat_still(server *s, const char *path, double still_s);

/* stats.group.key, or stats.group when key is NULL */
json_int_t stat_of(json_t *stats, const char *group, const char *key);
/* stats.kv.pool.key: pool "target" or "drafts", key "used", "free", "cached", "adopted", ... */
json_int_t kv_of(json_t *stats, const char *pool, const char *key);
void connect_to(const char *addr, tconn *t);
void tconn_close(tconn *t);
void send_line(tconn *t, const char *line);
void send_request(tconn *c, const char *id, const char *prompt, int max_tokens, double temperature, int stream);

/* On an idle server whose prefix cache has seen each of the n prompts: each asked again (one token,
 * greedy, one after another) adopts every whole block of its prompt but the last token, exactly,
 * in the target's pool, and in each of the n_drafters model drafts' pools where drafted[i] says
 * earlier requests for prompt i speculated (none otherwise; drafted NULL: none did). A count taken
 * while many clients run is not fixed (which requests end before others are admitted moves it);
 * these are. */
void check_prompts_cached(server *s, char **prompts, int n, int n_drafters, const bool *drafted);

/* The next reply line from the socket (the stash is not consulted). */
json_t *read_reply(tconn *t);

/* The next reply for id: from the stash, else from the socket (stashing other ids' replies). */
json_t *next_for(tconn *t, const char *id);

/* Read until the done or error line of `id`; the deltas read here must be the done text's tail
 * (all of it when none were read before). */
json_t *await(tconn *c, const char *id);

/* minions-generate's greedy continuation of prompt (by the bundled target, or by model). */
char *generate(const char *prompt, int n);
char *generate_model(const char *model, const char *prompt, int n);
/* The same with a KV cache of kv_type ("f32" or "f16": minions-generate --kv-type). */
char *generate_kv(const char *model, const char *prompt, int n, const char *kv_type);

/* The first prompts of each bundled prompt set. */
int load_prompts(char **out, int per_set);

/* Two prompts of each set and minions-generate's greedy continuation of each. */
int load_references(char **prompts, char **want, int max_tokens);

/* Every KV block free (target and drafts) and no request in flight, within 10 s; else the test fails. */
void wait_idle(server *s);
/* Until a request holds KV (stats' requests.running), within 4 s: how many do; 0 when none came. */
json_int_t wait_running(server *s);

/* Clients that stop reading cannot hold the KV pool: 16 streaming clients that never read fill a
 * pool sized for exactly them; a reading client is still served (a paused request is preempted);
 * then all 16 read at once and their texts equal minions-generate's. extra: more daemon options.
 * With slots, the pool has room to spare and the 16 fill every place the server holds requests in
 * instead (--max-batch 4 --max-queue 12). */
void check_paused_preemption(const char *const *extra, bool slots);

/* 32 client threads, alternately over TCP and the Unix socket, each sending 4 greedy requests of
 * max_tokens in turn (prompt (id + k) % 6 of load_references' six, every other one streamed; with
 * opt_out_every > 0 each opt_out_every-th says "speculate": false). Returns how many of the 128
 * failed or differed from want. */
int run_32_clients(server *s, char **prompts, char **want, int max_tokens, int opt_out_every);

#endif
