/* minionsd.c - the serving daemon: the engine on one loop, clients over TCP and a Unix socket, an
 * admin socket. Prints one "minionsd: listening ..." line on stdout once it accepts connections
 * (tests read the TCP port from it when --port 0 asks for an ephemeral one). Exits 0 after a drain
 * (SIGTERM, SIGINT, SIGHUP or the admin's drain). */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/engine.h"
#include "actors/voter.h"
#include "net/sockpath.h"
#include "runtime/registry.h"
#include "util/log.h"
#include "util/num.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: minionsd [options]\n"
            "  -m, --model PATH       GGUF llama model (default models/target.gguf)\n"
            "      --backend B        auto|cpu|cuda (default auto: CUDA where a device runs it)\n"
            "      --draft-backend B  auto|cpu|cuda for the model drafts (default: the target's)\n"
            "      --host ADDR        TCP listen address (default 127.0.0.1)\n"
            "      --port N           TCP port; 0 = ephemeral, -1 = no TCP (default 8090)\n"
            "      --unix PATH        also listen on a Unix socket\n"
            "      --idle-timeout S   a line connection with no request in flight that sends no whole line\n"
            "                         for S seconds is closed, and one that leaves its output unread\n"
            "                         past --output-buffer that long; 0 = never (default 300)\n"
            "      --http [HOST:]PORT serve the OpenAI-compatible HTTP API and /metrics there (HOST default\n"
            "                         127.0.0.1; PORT 0 = ephemeral; default: no HTTP)\n"
            "      --api-key KEY      HTTP requests need 'Authorization: Bearer KEY' (/health excepted)\n"
            "      --api-key-file F   the same, the key read from F's first line (not shown by ps)\n"
            "      --http-timeout S   an idle or stuck HTTP connection is closed after S seconds (default 120)\n"
            "      --admin ADDR       admin socket: ipc://PATH or tcp://127.0.0.1:N ('none': no admin socket;\n"
            "                         default ipc://$XDG_RUNTIME_DIR/minionsd.admin, or under /tmp/minionsd-UID/)\n"
            "      --socket-mode M    permissions of the Unix and ipc socket files (default 0600)\n"
            "  -t, --threads N        compute threads (default: every core it may run on)\n"
            "      --max-batch N      most sequences decoded together (default 16)\n"
            "      --kv-blocks N      KV blocks of 16 tokens (default: max-batch full contexts, at most\n"
            "                         a quarter of the machine's memory)\n"
            "      --kv-mib N         KV budget in MiB instead of --kv-blocks\n"
            "      --kv-type f32|f16  the KV cache's elements: f16 halves its memory and what attention reads\n"
            "                         a token, rounding K and V to half floats (default f32)\n"
            "      --max-queue N      most requests waiting before 'busy' (default 256)\n"
            "      --max-line N       longest request line in bytes (default 1048576)\n"
            "      --output-buffer KIB unsent output that pauses a client's requests (default 256)\n"
            "      --prefix-cache on|off keep finished requests' KV for later ones that start the same way\n"
            "                         (default on)\n"
            "      --drain-timeout S  a drain (SIGTERM, SIGINT, SIGHUP, admin) still running after S seconds\n"
            "                         closes every connection; 0 = wait for ever (default 30)\n"
            "      --log-level L      error|warn|info|debug (default warn)\n"
            "speculative decoding:\n"
            "      --draft PATH|ngram a drafter: a GGUF draft model sharing the target's vocabulary, or the\n"
            "                         n-gram (prompt lookup) drafter; repeat for a vote (up to 8, the first\n"
            "                         wins ties); without one, plain decoding\n"
            "      --spec-length N    tokens drafted per verification, 0..16: the tuner's start; 0 = plain\n"
            "                         decoding (default 4)\n"
            "      --spec-weights W   sequence|global|fixed: whose weights the vote reads (default sequence)\n"
            "      --spec-skip-below F a model drafter whose weight is under F x a request's best drafter's\n"
            "                         skips its rounds, those sitting out taking every 32nd in turn;\n"
            "                         0 = all draft always (default 0.25)\n"
            "      --spec-cascade on|off the model drafters draft only for requests the n-gram drafter\n"
            "                         proposed nothing for (live: spec.cascade; default on)\n"
            "      --ngram-cache N    tokens of finished requests the n-gram drafter keeps to propose from\n"
            "                         when a request's own tokens give no match; 0 = none (default 262144:\n"
            "                         5 MiB; live off/on: drafter.ngram.shared)\n"
            "      --tuner MODE[,K=V] fixed|adaptive: adaptive chooses the length from measured cost per\n"
            "                         token, starting at --spec-length (default adaptive); keys rule\n"
            "                         (sequence: each sequence its own lengths, the n-gram's and the\n"
            "                         models', the default; model; slope), s_min, s_max,\n"
            "                         decision_threshold, s_reward, s_punish, probe_every, margin,\n"
            "                         warm_up, cost (docs/speculation.md)\n"
            "      --pipeline         draft one group of sequences while the target verifies another\n"
            "                         (live: pipeline.enabled; default off)\n"
            "      --draft-threads N  compute threads (of -t) for the draft models alone; 0 = they share\n"
            "                         the target's (default: with --pipeline a quarter, at least 1; else 0)\n"
            "      --events ADDR      nanomsg PUB socket (ipc://PATH or tcp://127.0.0.1:N) for weight changes,\n"
            "                         tuner decisions and finished requests\n"
            "      --step-trace FILE  one JSON line per target step into FILE: its times, sequences and\n"
            "                         tokens (tools/bench-steps.py reads it; docs/server.md)\n"
            "Environment: MINIONS_CPU=avx512w|avx512|avx2|generic picks the CPU kernels (default: the\n"
            "fastest this CPU runs; all give the same bits, docs/runtime.md); for tests,\n"
            "MINIONS_FAIL_PASS=N (MINIONS_FAIL_DRAFT_PASS=N) fails the target's (each draft's) N-th pass\n");
}

/* on|off into *out; 0 (and *out unchanged) for anything else. */
static int parse_on_off(const char *s, bool *out)
{
    if (strcmp(s, "on") && strcmp(s, "off"))
        return 0;
    *out = !strcmp(s, "on");
    return 1;
}

/* --http [HOST:]PORT; HOST may be [IPv6], in brackets ("::1" alone would read as host ":", port 1). */
static int parse_http(const char *arg, char *host, size_t cap, mn_engine_config *cfg)
{
    const char *colon = strrchr(arg, ':');
    long port;
    if (!mn_parse_long(colon ? colon + 1 : arg, 0, 65535, &port))
        return 0;
    size_t n = colon ? (size_t)(colon - arg) : 0;
    if (n >= 2 && arg[0] == '[' && arg[n - 1] == ']')
        arg++, n -= 2;
    else if (memchr(arg, ':', n))
        return 0;
    if (n >= cap)
        return 0;
    snprintf(host, cap, "%.*s", (int)(colon && n ? n : 9), colon && n ? arg : "127.0.0.1");
    cfg->http_host = host;
    cfg->http_port = (int)port;
    return 1;
}

/* The API key: the first line of path, without its newline; a longer one than key holds is refused
 * (cut, it would be another key). */
static int read_key(const char *path, char *key, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f || !fgets(key, (int)cap, f)) {
        fprintf(stderr, "minionsd: --api-key-file %s: %s\n", path, f ? "empty" : strerror(errno));
        if (f)
            fclose(f);
        return 0;
    }
    size_t n = strcspn(key, "\r\n");
    int next = key[n] ? '\n' : fgetc(f);
    fclose(f);
    if (next != EOF && next != '\n' && next != '\r') {
        fprintf(stderr, "minionsd: --api-key-file %s: the key is longer than %zu bytes\n", path, cap - 1);
        return 0;
    }
    key[n] = 0;
    if (!*key) {
        fprintf(stderr, "minionsd: --api-key-file %s: the first line is empty\n", path);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    mn_engine_config cfg = mn_engine_defaults();
    mn_err err = {{0}};
    long v, kv_mib = 0;
    int model_given = 0, admin_given = 0;
    char http_host[64], api_key[512];
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"host", required_argument, 0, 'H'},
        {"port", required_argument, 0, 'p'},      {"unix", required_argument, 0, 'u'},
        {"admin", required_argument, 0, 'a'},     {"threads", required_argument, 0, 't'},
        {"max-batch", required_argument, 0, 'b'}, {"kv-blocks", required_argument, 0, 'k'},
        {"kv-mib", required_argument, 0, 'K'},    {"max-queue", required_argument, 0, 'q'},
        {"kv-type", required_argument, 0, 'Y'},
        {"max-line", required_argument, 0, 'l'},  {"log-level", required_argument, 0, 'L'},
        {"output-buffer", required_argument, 0, 'o'}, {"drain-timeout", required_argument, 0, 'D'},
        {"backend", required_argument, 0, 'B'},   {"socket-mode", required_argument, 0, 'M'},
        {"draft-backend", required_argument, 0, 'X'},
        {"draft", required_argument, 0, 'r'},     {"spec-length", required_argument, 0, 's'},
        {"spec-weights", required_argument, 0, 'W'}, {"events", required_argument, 0, 'e'},
        {"spec-skip-below", required_argument, 0, 'S'}, {"tuner", required_argument, 0, 'T'},
        {"pipeline", no_argument, 0, 'P'},        {"draft-threads", required_argument, 0, 'd'},
        {"http", required_argument, 0, 'w'},      {"api-key", required_argument, 0, 'A'},
        {"api-key-file", required_argument, 0, 'F'}, {"http-timeout", required_argument, 0, 'O'},
        {"ngram-cache", required_argument, 0, 'N'}, {"step-trace", required_argument, 0, 'R'},
        {"prefix-cache", required_argument, 0, 'C'}, {"spec-cascade", required_argument, 0, 'c'},
        {"idle-timeout", required_argument, 0, 'I'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    for (int c; (c = getopt_long(argc, argv, "m:t:h", opts, NULL)) != -1;) {
        int ok = 1;
        switch (c) {
        case 'm': cfg.model_path = optarg, model_given = 1; break;
        case 'H': cfg.host = optarg; break;
        case 'p': ok = mn_parse_long(optarg, -1, 65535, &v), cfg.port = (int)v; break;
        case 'u': cfg.unix_path = optarg; break;
        case 'a': cfg.admin_addr = strcmp(optarg, "none") ? optarg : NULL, admin_given = 1; break;
        case 'B': ok = (v = mn_backend_parse_kind(optarg)) >= 0, cfg.backend = (mn_backend_kind)v; break;
        case 'X': ok = (cfg.draft_backend = mn_backend_parse_kind(optarg)) >= 0; break;
        case 'M': ok = mn_sockpath_parse_mode(optarg, &cfg.socket_mode, &err) == MN_OK; break;
        case 't': ok = mn_parse_long(optarg, 1, 256, &v), cfg.n_threads = (int)v; break;
        case 'b': ok = mn_parse_long(optarg, 1, 1024, &v), cfg.max_batch = (uint32_t)v; break;
        case 'k': ok = mn_parse_long(optarg, 1, MN_ENGINE_MAX_KV_BLOCKS, &v), cfg.kv_blocks = (uint32_t)v; break;
        case 'K': ok = mn_parse_long(optarg, 1, 1 << 20, &kv_mib); break;
        case 'Y': ok = (v = mn_kv_type_parse(optarg)) >= 0, cfg.kv_type = (mn_kv_type)v; break;
        case 'q': ok = mn_parse_long(optarg, 1, 1 << 20, &v), cfg.max_queue = (uint32_t)v; break;
        case 'l': ok = mn_parse_long(optarg, 64, 1 << 30, &v), cfg.max_line = (uint32_t)v; break;
        case 'o': ok = mn_parse_long(optarg, 4, 1 << 20, &v), cfg.out_high = (uint32_t)v << 10; break;
        case 'D': ok = mn_parse_long(optarg, 0, 86400, &v), cfg.drain_timeout_s = (uint32_t)v; break;
        case 'L': ok = (v = mn_log_parse_level(optarg)) >= 0; if (ok) mn_log_set_level((mn_log_level)v); break;
        case 'r':
            if (cfg.n_drafts == MN_ENGINE_MAX_DRAFTS) {
                fprintf(stderr, "minionsd: at most %d --draft\n", MN_ENGINE_MAX_DRAFTS);
                return 2;
            }
            ok = *optarg != 0, cfg.drafts[cfg.n_drafts++] = optarg;
            break;
        case 's': ok = mn_parse_long(optarg, 0, MN_SPEC_MAX_LEN, &v), cfg.spec_length = (uint32_t)v; break;
        case 'W': ok = (cfg.weights_mode = mn_weights_mode_parse(optarg)) >= 0; break;
        case 'e': cfg.events_addr = optarg; break;
        case 'R': cfg.step_trace = optarg; break;
        case 'P': cfg.pipeline = true; break;
        case 'd': ok = mn_parse_long(optarg, 0, 255, &v), cfg.draft_threads = (int)v; break;
        case 'N':
            ok = mn_parse_long(optarg, 0, 1L << 28, &v) && (v == 0 || v >= 64), cfg.ngram_cache = (uint32_t)v;
            break;
        case 'C': ok = parse_on_off(optarg, &cfg.prefix_cache); break;
        case 'c': ok = parse_on_off(optarg, &cfg.cascade); break;
        case 'w': ok = parse_http(optarg, http_host, sizeof http_host, &cfg); break;
        case 'A': ok = *optarg != 0, cfg.api_key = optarg; break;
        case 'F':
            if (!read_key(optarg, api_key, sizeof api_key))
                return 2;
            cfg.api_key = api_key;
            break;
        case 'O': ok = mn_parse_long(optarg, 1, 86400, &v), cfg.http_timeout_s = (uint32_t)v; break;
        case 'I': ok = mn_parse_long(optarg, 0, 86400, &v), cfg.idle_timeout_s = (uint32_t)v; break;
        case 'T': {
            mn_tuner_mode mode;
            if (mn_tuner_parse(optarg, &mode, &cfg.tuner, &err) != MN_OK) {
                fprintf(stderr, "minionsd: %s\n", err.msg);
                return 2;
            }
            cfg.tuner_mode = (int)mode;
            break;
        }
        case 'S': {
            double f;
            ok = mn_parse_real(optarg, 0, 1, &f), cfg.skip_below = (float)f;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (!ok) {
            const struct option *o = opts;
            while (o->name && o->val != c)
                o++;
            fprintf(stderr, "minionsd: bad value '%s' for --%s\n", optarg, o->name ? o->name : "?");
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    const char *clash = cfg.kv_blocks && kv_mib ? "--kv-blocks and --kv-mib each size the KV pool: give one"
                        : cfg.events_addr && !cfg.n_drafts
                            ? "--events publishes what speculation does, and there is no --draft"
                        : cfg.port < 0 && !cfg.unix_path && !cfg.http_host
                            ? "--port -1 with neither --unix nor --http: no client could reach the server"
                        : cfg.api_key && !cfg.http_host
                            ? "--api-key guards the HTTP API, and there is no --http (the line protocol takes no key)"
                        : (cfg.unix_path && !*cfg.unix_path) ||
                                  (cfg.admin_addr && !strcmp(cfg.admin_addr, "ipc://")) ||
                                  (cfg.events_addr && !strcmp(cfg.events_addr, "ipc://"))
                            ? "a socket path is empty (--unix, or --admin / --events ipc://)"
                            : NULL;
    if (clash) {
        fprintf(stderr, "minionsd: %s\n", clash);
        return 2;
    }
    cfg.kv_mib = (uint32_t)kv_mib;
    if (!model_given && access(cfg.model_path, R_OK) != 0)
        cfg.model_path = MN_BUNDLED_MODEL; /* run from outside the source tree: the bundled target */
    char admin_default[MN_SOCKPATH_ADDR_MAX];
    if (!admin_given) {
        if (mn_sockpath_default_admin(admin_default, sizeof admin_default, &err) != MN_OK) {
            fprintf(stderr, "minionsd: default admin socket: %s (or choose one with --admin)\n", err.msg);
            return 1;
        }
        cfg.admin_addr = admin_default;
    }
    if (cfg.http_host && !cfg.api_key && strcmp(cfg.http_host, "127.0.0.1") && strcmp(cfg.http_host, "::1") &&
        strcmp(cfg.http_host, "localhost"))
        mn_log(MN_LOG_WARN, "--http %s without --api-key: anyone who reaches the port may generate", cfg.http_host);
    mn_engine *e = NULL;
    if (mn_engine_new(&cfg, &e, &err) != MN_OK) {
        fprintf(stderr, "minionsd: %s\n", err.msg);
        return 1;
    }
    printf("minionsd: listening");
    if (mn_engine_port(e) >= 0)
        printf(" tcp %s:%d", cfg.host, mn_engine_port(e));
    if (cfg.unix_path)
        printf(" unix %s", cfg.unix_path);
    if (cfg.admin_addr)
        printf(" admin %s", cfg.admin_addr);
    if (cfg.http_host)
        printf(" http %s:%d", cfg.http_host, mn_engine_http_port(e));
    printf("\n");
    fflush(stdout);
    mn_status st = mn_engine_run(e, &err);
    mn_engine_free(e);
    if (st != MN_OK) {
        fprintf(stderr, "minionsd: %s\n", err.msg);
        return 1;
    }
    return 0;
}
