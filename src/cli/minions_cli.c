/* minions_cli.c - minions-cli: send one prompt to a running minionsd and stream the continuation to
 * stdout (raw text, as it arrives); the finish reason and token counts go to stderr. Exit 1 when the
 * server answers with an error (its code and message go to stderr), when the reply does not end
 * (the connection closes, or nothing comes for --timeout seconds) or when stdout cannot be
 * written; exit 2 on a usage error. */
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/client.h"
#include "net/sockpath.h"
#include "net/proto.h"
#include "util/num.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: minions-cli [options] PROMPT\n"
            "  -a, --addr HOST:PORT   server TCP address (default 127.0.0.1:8090)\n"
            "  -u, --unix PATH        use the server's Unix socket instead\n"
            "  -n, --max-tokens N     tokens to generate (default 64)\n"
            "      --temperature T    0 = greedy (default 0)\n"
            "      --top-p P          nucleus mass (default 1)\n"
            "      --seed N           sampling seed (default 0)\n"
            "      --stop TEXT        stop string (repeatable)\n"
            "      --no-stream        print the text once, at the end\n"
            "      --timeout S        give up when nothing comes for S seconds (default 300; 0: never)\n"
            "usage: minions-cli --admin ADDR COMMAND   (e.g. --admin default '{\"cmd\":\"stats\"}')\n"
            "      sends one JSON command to the admin socket and prints the reply (exit 1 unless its\n"
            "      \"ok\" is true); ADDR 'default' is minionsd's default (ipc://$XDG_RUNTIME_DIR/minionsd.admin,\n"
            "      else under /tmp/minionsd-UID/)\n");
}

/* The whole of s as a finite number (an integer where integer is set): a value for the request,
 * whose range the server checks. */
static json_t *number(const char *s, bool integer)
{
    long n;
    double x;
    if (integer)
        return mn_parse_long(s, LONG_MIN, LONG_MAX, &n) ? json_integer(n) : NULL;
    return mn_parse_real(s, -DBL_MAX, DBL_MAX, &x) ? json_real(x) : NULL;
}

/* Whether stdout took everything written to it; says why not on stderr. */
static bool stdout_ok(void)
{
    if (fflush(stdout) == 0 && !ferror(stdout))
        return true;
    fprintf(stderr, "minions-cli: cannot write to stdout: %s\n", strerror(errno));
    return false;
}

/* One request-reply round trip on the admin socket; the reply goes to stdout. 0 when the reply is
 * a JSON object whose "ok" is true. */
static int admin_command(const char *addr, const char *cmd)
{
    int sock = nn_socket(AF_SP, NN_REQ), tmo = 10000;
    char *reply = NULL;
    int n = -1;
    if (sock >= 0 && nn_setsockopt(sock, NN_SOL_SOCKET, NN_RCVTIMEO, &tmo, sizeof tmo) >= 0 &&
        nn_connect(sock, addr) >= 0 && nn_send(sock, cmd, strlen(cmd), 0) >= 0)
        n = nn_recv(sock, &reply, NN_MSG, 0);
    if (n < 0) {
        fprintf(stderr, "minions-cli: admin %s: %s\n", addr, nn_strerror(nn_errno()));
        if (sock >= 0)
            nn_close(sock);
        return 1;
    }
    printf("%.*s\n", n, reply);
    json_t *o = json_loadb(reply, (size_t)n, 0, NULL);
    int rc = json_is_true(json_object_get(o, "ok")) ? 0 : 1;
    json_decref(o);
    nn_freemsg(reply);
    nn_close(sock);
    if (!stdout_ok())
        rc = 1;
    return rc;
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1:8090";
    int stream = 1;
    const char *admin = NULL;
    double timeout = MN_CLIENT_TIMEOUT_S;
    json_t *req = json_object(), *stops = json_array();
    json_object_set_new(req, "id", json_string("cli"));
    json_object_set_new(req, "stream", json_true());
    static const struct option opts[] = {
        {"addr", required_argument, 0, 'a'},        {"unix", required_argument, 0, 'u'},
        {"max-tokens", required_argument, 0, 'n'},  {"temperature", required_argument, 0, 'T'},
        {"top-p", required_argument, 0, 'P'},       {"seed", required_argument, 0, 'S'},
        {"stop", required_argument, 0, 's'},        {"no-stream", no_argument, 0, 'N'},
        {"admin", required_argument, 0, 'A'},      {"help", no_argument, 0, 'h'},
        {"timeout", required_argument, 0, 'O'},    {0, 0, 0, 0},
    };
    char unix_path[MN_SOCKPATH_ADDR_MAX];
    for (int c; (c = getopt_long(argc, argv, "a:u:n:h", opts, NULL)) != -1;) {
        const char *key = NULL; /* a numeric field of the request */
        switch (c) {
        case 'a': addr = optarg; break;
        case 'u': /* a path, even without a slash (mn_client_connect tells paths by theirs) */
            if (snprintf(unix_path, sizeof unix_path, "%s%s", strchr(optarg, '/') ? "" : "./", optarg) >=
                (int)sizeof unix_path) {
                fprintf(stderr, "minions-cli: %s: path too long\n", optarg);
                goto usage_error;
            }
            addr = unix_path;
            break;
        case 'n': key = "max_tokens"; break;
        case 'T': key = "temperature"; break;
        case 'P': key = "top_p"; break;
        case 'S': key = "seed"; break;
        case 's':
            if (json_array_append_new(stops, json_string(optarg)) != 0) {
                fprintf(stderr, "minions-cli: --stop '%s' is not UTF-8\n", optarg);
                goto usage_error;
            }
            break;
        case 'O':
            if (!mn_parse_real(optarg, 0, 86400, &timeout)) {
                fprintf(stderr, "minions-cli: bad option value '%s'\n", optarg);
                goto usage_error;
            }
            break;
        case 'A': admin = optarg; break;
        case 'N': json_object_set_new(req, "stream", json_false()), stream = 0; break;
        case 'h':
            usage(stdout);
            json_decref(req);
            json_decref(stops);
            return 0;
        default: usage(stderr); goto usage_error;
        }
        json_t *v = key ? number(optarg, c == 'n' || c == 'S') : NULL;
        if (key && (!v || json_object_set_new(req, key, v) != 0)) {
            fprintf(stderr, "minions-cli: bad option value '%s'\n", optarg);
            goto usage_error;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        goto usage_error;
    }
    if (admin) {
        json_decref(req);
        json_decref(stops);
        char dflt[MN_SOCKPATH_ADDR_MAX];
        mn_err err = {{0}};
        if (!strcmp(admin, "default") && mn_sockpath_default_admin(dflt, sizeof dflt, &err) != MN_OK) {
            fprintf(stderr, "minions-cli: %s\n", err.msg);
            return 1;
        }
        return admin_command(strcmp(admin, "default") ? admin : dflt, argv[optind]);
    }
    if (json_object_set_new(req, "prompt", json_string(argv[optind])) != 0) {
        fprintf(stderr, "minions-cli: the prompt is not UTF-8\n");
        goto usage_error;
    }
    if (json_array_size(stops))
        json_object_set(req, "stop", stops);
    json_decref(stops);
    char *line = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    mn_client c;
    mn_err err = {{0}};
    if (!line || mn_client_connect(addr, &c, &err) < 0) {
        fprintf(stderr, "minions-cli: %s\n", err.msg[0] ? err.msg : "out of memory");
        free(line);
        return 1;
    }
    size_t n = strlen(line);
    line[n] = '\n'; /* json_dumps leaves room for the NUL we overwrite; send n + 1 bytes */
    int rc = 1;
    if (mn_client_set_timeout(&c, timeout) < 0) {
        fprintf(stderr, "minions-cli: cannot set the timeout: %s\n", strerror(errno));
        goto out;
    }
    if (mn_client_send(&c, line, n + 1) < 0) {
        fprintf(stderr, "minions-cli: send failed: %s\n", mn_client_strerror(&c));
        goto out;
    }
    for (;;) {
        char *l = mn_client_read_line(&c, &n);
        if (!l) {
            fprintf(stderr, "\nminions-cli: %s\n", mn_client_strerror(&c));
            break;
        }
        json_t *o = json_loadb(l, n, 0, NULL), *v;
        if (!o) {
            fprintf(stderr, "minions-cli: bad reply line: %s\n", l);
            break;
        }
        if ((v = json_object_get(o, "delta"))) {
            fwrite(json_string_value(v), 1, json_string_length(v), stdout);
            if (!stdout_ok()) {
                json_decref(o);
                break;
            }
        } else if ((v = json_object_get(o, "error"))) {
            const char *code = json_string_value(json_object_get(v, "code")),
                       *msg = json_string_value(json_object_get(v, "message"));
            if (code && msg)
                fprintf(stderr, "minions-cli: %s: %s\n", code, msg);
            else /* not the protocol's error object: show the line */
                fprintf(stderr, "minions-cli: error: %s\n", l);
            json_decref(o);
            break;
        } else if (json_object_get(o, "done")) {
            if (!stream) { /* without streaming the text comes only here */
                json_t *text = json_object_get(o, "text");
                fwrite(json_string_value(text), 1, json_string_length(text), stdout);
            }
            json_t *u = json_object_get(o, "usage");
            fprintf(stderr, "\nminions-cli: finish %s, prompt %lld tokens, completion %lld tokens\n",
                    json_string_value(json_object_get(o, "finish_reason")),
                    (long long)json_integer_value(json_object_get(u, "prompt_tokens")),
                    (long long)json_integer_value(json_object_get(u, "completion_tokens")));
            json_t *sp = json_object_get(o, "spec");
            if (sp) {
                char *voted = json_dumps(json_object_get(sp, "voted"), JSON_COMPACT);
                fprintf(stderr, "minions-cli: speculation kept %lld of %lld drafted tokens in %lld verifications "
                                "(%.2f each), voted %s\n",
                        (long long)json_integer_value(json_object_get(sp, "accepted")),
                        (long long)json_integer_value(json_object_get(sp, "drafted")),
                        (long long)json_integer_value(json_object_get(sp, "verifications")),
                        json_number_value(json_object_get(sp, "mean_accepted_len")), voted ? voted : "?");
                free(voted);
            }
            rc = stdout_ok() ? 0 : 1;
            json_decref(o);
            break;
        }
        json_decref(o);
    }
out:
    free(line);
    mn_client_close(&c);
    return rc;
usage_error: /* freed, so that LeakSanitizer's exit status does not hide ours */
    json_decref(req);
    json_decref(stops);
    return 2;
}
