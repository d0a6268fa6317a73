/* generate.c - minions-generate: load a GGUF model and continue a prompt on one sequence.
 *
 * The continuation (not the prompt) goes to stdout as the raw bytes its tokens decode to, flushed as
 * they come; statistics go to stderr. Greedy (temperature 0, the default) is deterministic.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/matmul.h"
#include "model/model.h"
#include "model/sampler.h"
#include "runtime/registry.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/num.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: minions-generate --model FILE.gguf --prompt TEXT [options]\n"
            "  -m, --model PATH        GGUF llama model\n"
            "  -p, --prompt TEXT       prompt (use --prompt-file for a file)\n"
            "      --prompt-file PATH  read the prompt from a file\n"
            "  -n, --max-tokens N      tokens to generate (default 64)\n"
            "      --temperature T     0 = greedy (default 0)\n"
            "      --top-p P           nucleus mass in (0, 1] (default 1)\n"
            "      --seed N            sampling seed (default 0)\n"
            "  -t, --threads N         compute threads (default: every core it may run on)\n"
            "      --backend B         auto|cpu|cuda (default auto: CUDA where a device runs it)\n"
            "      --kv-type T         f32|f16: the KV cache's elements (f16: half floats; default f32)\n"
            "      --log-level L       error|warn|info|debug (default warn)\n");
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0, r;
    char *buf = mn_malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *grown = mn_realloc(buf, cap *= 2);
            if (!grown)
                mn_free(buf);
            buf = grown;
        }
    }
    /* a directory, an I/O error: not an empty prompt */
    int failed = !buf ? ENOMEM : ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (failed) {
        mn_free(buf);
        errno = failed;
        return NULL;
    }
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL;
    long max_tokens = 64, threads = 0;
    long seed = 0; /* at most 2^53, as the server's: a JSON number is a double there */
    double temperature = 0, top_p = 1;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},       {"prompt", required_argument, 0, 'p'},
        {"prompt-file", required_argument, 0, 'F'}, {"max-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 'T'}, {"top-p", required_argument, 0, 'P'},
        {"seed", required_argument, 0, 'S'},        {"threads", required_argument, 0, 't'},
        {"log-level", required_argument, 0, 'L'},   {"help", no_argument, 0, 'h'},
        {"backend", required_argument, 0, 'B'},     {"kv-type", required_argument, 0, 'K'},
        {0, 0, 0, 0},
    };
    int kind = MN_BACKEND_AUTO, kv_type = MN_KV_F32;
    for (int c; (c = getopt_long(argc, argv, "m:p:n:t:h", opts, NULL)) != -1;) {
        int ok = 1;
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'p': prompt = optarg; break;
        case 'F': prompt_file = optarg; break;
        case 'n': ok = mn_parse_long(optarg, 1, 1 << 20, &max_tokens); break;
        case 'T': ok = mn_parse_real(optarg, 0, 100, &temperature); break;
        case 'P': ok = mn_parse_real(optarg, 1e-6, 1, &top_p); break;
        case 'S': ok = mn_parse_long(optarg, 0, 1L << 53, &seed); break;
        case 't': ok = mn_parse_long(optarg, 1, 256, &threads); break;
        case 'B': ok = (kind = mn_backend_parse_kind(optarg)) >= 0; break;
        case 'K': ok = (kv_type = mn_kv_type_parse(optarg)) >= 0; break;
        case 'L': {
            int lvl = mn_log_parse_level(optarg);
            ok = lvl >= 0;
            if (ok)
                mn_log_set_level((mn_log_level)lvl);
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (!ok) {
            fprintf(stderr, "minions-generate: bad option value '%s'\n", optarg);
            return 2;
        }
    }
    if (!model_path || !prompt == !prompt_file || optind != argc) { /* one prompt, nothing else */
        usage(stderr);
        return 2;
    }
    size_t prompt_len = prompt ? strlen(prompt) : 0;
    char *prompt_buf = NULL;
    if (prompt_file) {
        errno = 0;
        if (!(prompt_buf = read_file(prompt_file, &prompt_len))) {
            fprintf(stderr, "minions-generate: cannot read %s: %s\n", prompt_file, strerror(errno));
            return 1;
        }
        prompt = prompt_buf;
    }

    int rc = 1;
    mn_err err = {{0}};
    mn_model *m = NULL;
    mn_backend *be = NULL;
    mn_sampler *smp = NULL;
    mn_tokens toks = {0};
    mn_kv_seq kv = {0};
    float *logits = NULL;
    double t0 = mn_now();
    if (mn_model_load(model_path, &m, &err) != MN_OK) {
        fprintf(stderr, "minions-generate: %s\n", err.msg);
        goto out;
    }
    if (mn_tok_encode(m->tok, prompt, prompt_len, true, &toks) != MN_OK) {
        fprintf(stderr, "minions-generate: cannot tokenize the prompt\n");
        goto out;
    }
    if (toks.n == 0) {
        fprintf(stderr, "minions-generate: the prompt is empty\n");
        goto out;
    }
    uint64_t want = toks.n + (uint64_t)max_tokens;
    if (want > m->hp.n_ctx)
        want = m->hp.n_ctx;
    if (toks.n >= want) {
        fprintf(stderr, "minions-generate: the prompt (%zu tokens) fills the context of %u\n", toks.n, m->hp.n_ctx);
        goto out;
    }
    mn_backend_config cfg = mn_backend_defaults(m, (uint32_t)want);
    if (threads > 0)
        cfg.n_threads = (int)threads;
    cfg.kind = (mn_backend_kind)kind;
    cfg.kv_type = (mn_kv_type)kv_type;
    mn_sampler_params sp = {(float)temperature, (float)top_p, (uint64_t)seed};
    if (mn_backend_new(m, &cfg, &be, &err) != MN_OK || mn_sampler_new(m->hp.n_vocab, &sp, &smp) != MN_OK ||
        !(logits = mn_malloc((size_t)m->hp.n_vocab * sizeof(float)))) {
        fprintf(stderr, "minions-generate: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto out;
    }
    double t1 = mn_now();
    if (mn_backend_prefill(be, &kv, toks.ids, (uint32_t)toks.n, logits, &err) != MN_OK) {
        fprintf(stderr, "minions-generate: %s\n", err.msg);
        goto out;
    }
    double t2 = mn_now();
    uint32_t produced = 0;
    const char *finish = "length";
    for (;;) { /* the last token comes from the logits of the context's last position */
        int32_t next = mn_sampler_next(smp, logits);
        produced++;
        if (mn_tok_is_eog(m->tok, next)) {
            finish = "eos";
            break;
        }
        size_t n;
        const char *piece = mn_tok_piece(m->tok, next, &n);
        if (fwrite(piece, 1, n, stdout) != n || fflush(stdout) != 0) {
            fprintf(stderr, "\nminions-generate: cannot write the text: %s\n", strerror(errno));
            goto out;
        }
        if (produced == (uint32_t)max_tokens || kv.len >= want)
            break;
        mn_batch_seq seq = {.kv = &kv, .tokens = &next, .n_tokens = 1};
        mn_batch batch = {&seq, 1, NULL};
        if (mn_kv_reserve(be->kv, &kv, kv.len + 1) != MN_OK ||
            mn_backend_forward(be, &batch, logits, &err) != MN_OK) {
            fprintf(stderr, "\nminions-generate: %s\n", err.msg[0] ? err.msg : "KV pool exhausted");
            goto out;
        }
    }
    double t3 = mn_now();
    fprintf(stderr,
            "\nminions-generate: model %s (%s), backend %s, %d threads, CPU kernels %s\n"
            "  load %.3f s | prompt %zu tokens, %.1f tok/s | generated %u tokens, %.1f tok/s | finish: %s\n",
            m->name, model_path, be->ops->name, cfg.n_threads, mn_cpu_kernels_name(), t1 - t0, toks.n,
            toks.n / (t2 - t1), produced, produced > 1 ? (produced - 1) / (t3 - t2) : 0.0, finish);
    rc = 0;
out:
    if (be)
        mn_kv_seq_release(be->kv, &kv);
    mn_free(logits);
    mn_sampler_free(smp);
    mn_tokens_free(&toks);
    mn_backend_free(be);
    mn_model_free(m);
    mn_free(prompt_buf);
    return rc;
}
