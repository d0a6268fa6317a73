/* testutil.h - helpers shared by the test suites: fixture paths, file loading, /proc/self/smaps,
 * the nucleus of a draw by sorting.
 * Fixtures live in $MINIONS_TEST_DATA (made by tests/make-fixtures.sh before the suites run). */
#ifndef MN_TESTUTIL_H
#define MN_TESTUTIL_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/draw.h"
#include "model/model.h"
#include "model/sampler.h"
#include "runtime/registry.h"

/* 1 in the ASan build, whose runner is sanitized and whose in-process forward passes run the
 * checked kernels (tens of times slower; the daemons it starts run their model work unsanitized,
 * Makefile.am's PROGRAM_KERNELS): in-process tests that add time there and no code path go to the
 * normal build only. */
#ifdef __SANITIZE_ADDRESS__
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* dir/name in one of 8 rotating buffers, dir from the environment variable env or dflt. */
static inline const char *path_in(const char *env, const char *dflt, const char *name)
{
    static char buf[8][1024];
    static int next;
    const char *dir = getenv(env);
    char *b = buf[next++ % 8];
    snprintf(b, 1024, "%s/%s", dir ? dir : dflt, name);
    return b;
}

/* The rest of the line `key` (e.g. "Rss:", "VmFlags:") of the mapping that holds p, from
 * /proc/self/smaps, into out; false (out empty) when there is none. */
static inline bool smaps_field(const void *p, const char *key, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    bool inside = false, found = false;
    size_t klen = strlen(key);
    *out = '\0';
    while (f && !found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) /* a mapping's first line */
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && strncmp(line, key, klen) == 0)
            found = snprintf(out, cap, "%s", line + klen) >= 0;
    }
    if (f)
        fclose(f);
    return found;
}

/* A built fixture (tests/make-fixtures.sh). */
static inline const char *fixture(const char *name) { return path_in("MINIONS_TEST_DATA", "tests/data", name); }

/* A file of the source tree, e.g. "tests/fixtures/..." (committed fixtures). */
static inline const char *source_file(const char *name) { return path_in("MINIONS_SRCDIR", ".", name); }

/* The fetched SmolLM2 model when it and its reference fixtures exist, else NULL. */
static inline const char *smollm2_path(void)
{
    static char path[1024];
    const char *dir = getenv("MINIONS_MODELS_DIR");
    snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir ? dir : "models/cache");
    FILE *a = fopen(path, "rb"), *b = fopen(fixture("smollm2.top2"), "r");
    const char *ok = a && b ? path : NULL;
    if (a)
        fclose(a);
    if (b)
        fclose(b);
    return ok;
}

/* The whole file, malloc'd; *len its size. Fails the test when unreadable. */
static inline void *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open fixture %s (run make check, which builds fixtures)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    ((char *)buf)[n] = 0;
    *len = (size_t)n;
    return buf;
}

static inline mn_model *load_model(const char *name)
{
    mn_model *m = NULL;
    mn_err err = {{0}};
    mn_status s = mn_model_load(fixture(name), &m, &err);
    cr_assert_eq(s, MN_OK, "loading %s: %s", name, err.msg);
    return m;
}

/* A CPU backend whose KV cache holds `kv_type` elements. */
static inline mn_backend *cpu_backend_kv(const mn_model *m, int threads, uint32_t max_tokens, uint32_t blocks,
                                         mn_kv_type kv_type)
{
    mn_backend_config cfg = mn_backend_defaults(m, 0);
    cfg.kv_type = kv_type;
    cfg.n_threads = threads;
    cfg.max_tokens = max_tokens;
    cfg.kv_block_size = 4; /* small blocks so tests cross many block boundaries */
    cfg.kv_blocks = blocks;
    cfg.kind = MN_BACKEND_CPU;
    mn_backend *b = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_backend_new(m, &cfg, &b, &err), MN_OK, "backend: %s", err.msg);
    return b;
}

static inline mn_backend *cpu_backend(const mn_model *m, int threads, uint32_t max_tokens, uint32_t blocks)
{
    return cpu_backend_kv(m, threads, max_tokens, blocks, MN_KV_F32);
}

static inline int weight_heavier_first(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The nucleus of a row of n logits (model/draw.h) the plain way: every token's weight, all sorted
 * heaviest first, theta the weight at which their running sum reaches the need, its ties those of
 * that weight up to there, counted (nothing of the sampler's search or of mn_draw_ties). w: scratch
 * of n weights, left sorted. At top_p 1 (need == total) theta is 0 and the mass the total. */
static inline mn_draw_nucleus nucleus_by_sorting(const float *x, uint32_t n, float temperature, float top_p,
                                                 uint64_t *w)
{
    float mx = x[mn_argmax(x, n)];
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += w[i] = mn_draw_weight(x[i], mx, mn_draw_scale(temperature));
    uint64_t need = mn_draw_need(top_p, total);
    if (!total || need == total)
        return (mn_draw_nucleus){0, 0, total};
    qsort(w, n, sizeof *w, weight_heavier_first);
    uint64_t run = 0;
    uint32_t i = 0, first = 0; /* w[first..i] weigh w[i] */
    for (; run + w[i] < need; run += w[i++])
        if (w[i + 1] != w[i])
            first = i + 1;
    return (mn_draw_nucleus){w[i], i - first + 1, run + w[i]};
}

#endif
