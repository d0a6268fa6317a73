/* test_gguf.c - the GGUF reader and the model loader against valid, truncated, bit-flipped and
 * deliberately broken files, and the advice that drops a mapped file's pages. Run under ASan as part of the test command: any out-of-bounds read
 * fails the run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "testutil.h"

Test(gguf, reads_a_valid_file)
{
    gguf_file *f;
    mn_err err = {{0}};
    cr_assert_eq(gguf_open_file(fixture("gqa_f32.gguf"), &f, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(gguf_version(f), 3);
    uint64_t v;
    cr_assert_eq(gguf_get_uint(f, "llama.embedding_length", &v, &err), MN_OK);
    cr_assert_eq(v, 64);
    gguf_str arch;
    cr_assert_eq(gguf_get_string(f, "general.architecture", &arch, &err), MN_OK);
    cr_assert(gguf_str_eq(arch, "llama"));
    const gguf_tensor *t = gguf_find_tensor(f, "blk.1.ffn_down.weight");
    cr_assert_not_null(t);
    cr_assert_eq(t->ne[0], 100);
    cr_assert_eq(t->ne[1], 64);
    cr_assert_eq(t->nbytes, 100 * 64 * 4);
    cr_assert_eq(gguf_get_uint(f, "no.such.key", &v, &err), MN_NOTFOUND);
    cr_assert_eq(gguf_get_uint(f, "general.architecture", &v, &err), MN_INVALID);
    gguf_close(f);
}

/* Every prefix of a valid file is an error, never a crash or an out-of-bounds read. The buffer is
 * copied to an exact-size allocation each time so ASan sees reads past its end. */
Test(gguf, every_truncation_is_an_error, .timeout = 600)
{
    size_t len;
    unsigned char *full = slurp(fixture("q4_1.gguf"), &len);
    /* every length through the header and the first tensor bytes, then a stride through the data */
    for (size_t n = 0; n < len; n += n < 20000 ? 1 : 97) {
        unsigned char *cut = malloc(n ? n : 1);
        memcpy(cut, full, n);
        gguf_file *f = NULL;
        mn_err err = {{0}};
        mn_status s = gguf_open_mem(cut, n, &f, &err);
        cr_assert_neq(s, MN_OK, "a file cut to %zu of %zu bytes was accepted", n, len);
        cr_assert(err.msg[0], "no message for a cut at %zu", n);
        free(cut);
    }
    free(full);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Bit flips anywhere in the header (and a few in the data): the reader either accepts the file or
 * names a problem; the model loader likewise. Nothing crashes. */
Test(gguf, bit_flips_never_crash, .timeout = 600)
{
    size_t len;
    unsigned char *orig = slurp(fixture("untied_f32.gguf"), &len);
    gguf_file *f0;
    cr_assert_eq(gguf_open_mem(orig, len, &f0, NULL), MN_OK);
    size_t header = (size_t)((const unsigned char *)gguf_tensor_at(f0, 0)->data - orig);
    gguf_close(f0);
    unsigned char *buf = malloc(len);
    int rejected = 0;
    for (int i = 0; i < 3000; i++) {
        memcpy(buf, orig, len);
        int flips = 1 + (int)(rnd() % 3);
        for (int k = 0; k < flips; k++) {
            size_t pos = (size_t)(rnd() % (i % 10 == 9 ? len : header));
            buf[pos] ^= (unsigned char)(1u << (rnd() % 8));
        }
        gguf_file *f = NULL;
        mn_err err = {{0}};
        if (gguf_open_mem(buf, len, &f, &err) != MN_OK) {
            rejected++;
            cr_assert(err.msg[0]);
            continue;
        }
        mn_model *m = NULL;
        if (mn_model_from_gguf(f, "flipped", &m, &err) == MN_OK)
            mn_model_free(m);
        else
            cr_assert(err.msg[0], "the loader failed without a message");
    }
    cr_assert_gt(rejected, 100, "bit flips in the header should usually be caught (%d were)", rejected);
    free(buf);
    free(orig);
}

static void expect_error(const unsigned char *buf, size_t len, const char *needle)
{
    gguf_file *f = NULL;
    mn_err err = {{0}};
    mn_status s = gguf_open_mem(buf, len, &f, &err);
    cr_assert_neq(s, MN_OK, "expected an error containing '%s'", needle);
    cr_assert(strstr(err.msg, needle), "message '%s' does not mention '%s'", err.msg, needle);
}

Test(gguf, named_errors)
{
    size_t len;
    unsigned char *orig = slurp(fixture("gqa_f32.gguf"), &len);
    unsigned char *buf = malloc(len);

    memcpy(buf, orig, len);
    buf[0] = 'X';
    expect_error(buf, len, "magic");

    memcpy(buf, orig, len);
    buf[4] = 7;
    expect_error(buf, len, "version");

    memcpy(buf, orig, len);
    memset(buf + 8, 0xff, 8); /* tensor count */
    expect_error(buf, len, "tensors cannot fit");

    memcpy(buf, orig, len);
    memset(buf + 16, 0x7f, 8); /* kv count */
    expect_error(buf, len, "keys cannot fit");

    /* the last tensor's data offset pushed past the end */
    gguf_file *f;
    cr_assert_eq(gguf_open_mem(orig, len, &f, NULL), MN_OK);
    const gguf_tensor *last = gguf_tensor_at(f, gguf_n_tensors(f) - 1);
    size_t name_len = strlen(last->name);
    gguf_close(f);
    unsigned char *p = NULL;
    for (size_t i = 0; i + name_len < len; i++)
        if (memcmp(orig + i, "output_norm.weight", name_len) == 0) {
            p = orig + i;
            break;
        }
    cr_assert_not_null(p);
    memcpy(buf, orig, len);
    size_t off_pos = (size_t)(p - orig) + name_len + 4 + 8 * 1 + 4; /* n_dims, ne[0], type */
    uint64_t huge = (uint64_t)len * 4;
    huge -= huge % 32;
    memcpy(buf + off_pos, &huge, 8);
    expect_error(buf, len, "runs past the end");

    memcpy(buf, orig, len);
    uint64_t odd = 8;
    memcpy(buf + off_pos, &odd, 8);
    expect_error(buf, len, "not aligned");

    memcpy(buf, orig, len); /* the first tensor's bytes, which are another's */
    uint64_t zero = 0;
    memcpy(buf + off_pos, &zero, 8);
    expect_error(buf, len, "share bytes");
    free(buf);
    free(orig);
}

Test(model, loader_names_missing_and_misshapen_tensors)
{
    mn_model *m = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(fixture("broken_missing.gguf"), &m, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "blk.1.ffn_up.weight") && strstr(err.msg, "missing"), "%s", err.msg);
    cr_assert_eq(mn_model_load(fixture("broken_shape.gguf"), &m, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "blk.0.ffn_gate.weight") && strstr(err.msg, "shape"), "%s", err.msg);
    cr_assert_eq(mn_model_load("/nonexistent/model.gguf", &m, &err), MN_IO);
    cr_assert(strstr(err.msg, "/nonexistent/model.gguf"), "%s", err.msg);
}

/* Where the value of a file's key begins: `skip` bytes (its type, a string's length) after the key's
 * first occurrence in buf. */
static unsigned char *value_of(unsigned char *buf, size_t len, const char *key, size_t skip)
{
    for (size_t i = 0; i + strlen(key) + skip < len; i++)
        if (memcmp(buf + i, key, strlen(key)) == 0)
            return buf + i + strlen(key) + skip;
    cr_assert_fail("no key %s", key);
    return NULL;
}

/* A block count the file's tensors cannot hold is refused by name, before anything is sized by it
 * (libFuzzer's tools/fuzz-gguf.c found a 2^28 that made the loader ask for 4 GB). */
Test(model, a_block_count_past_the_tensors_is_refused)
{
    size_t len;
    unsigned char *buf = slurp(fixture("gqa_f32.gguf"), &len);
    unsigned char *p = value_of(buf, len, "llama.block_count", 4); /* a u32 after its type */
    uint32_t blocks;
    memcpy(&blocks, p, 4);
    cr_assert_eq(blocks, 2);
    for (uint32_t n = 3; n; n = n == 3 ? 1u << 28 : 0) {
        memcpy(p, &n, 4);
        gguf_file *f;
        mn_err err = {{0}};
        cr_assert_eq(gguf_open_mem(buf, len, &f, &err), MN_OK, "%s", err.msg);
        mn_model *m = NULL;
        cr_assert_eq(mn_model_from_gguf(f, "blocks", &m, &err), MN_INVALID, "block_count %u", n);
        cr_assert(strstr(err.msg, "block_count"), "block_count %u: %s", n, err.msg);
    }
    free(buf);
}

Test(model, hparams_and_tied_output)
{
    mn_model *m = load_model("gqa_f32.gguf");
    cr_assert_eq(m->hp.dim, 64);
    cr_assert_eq(m->hp.n_heads, 4);
    cr_assert_eq(m->hp.n_kv_heads, 2);
    cr_assert_eq(m->hp.head_dim, 16);
    cr_assert_eq(m->hp.n_vocab, 512);
    cr_assert(m->tied_output);
    mn_model_free(m);
    m = load_model("untied_f32.gguf");
    cr_assert(!m->tied_output);
    cr_assert_float_eq(m->hp.rope_base, 500.0f, 1e-3);
    mn_model_free(m);
}

Test(model, unknown_pre_tokenizer_is_named)
{
    size_t len;
    unsigned char *buf = slurp(fixture("gqa_f32.gguf"), &len);
    /* the string follows its key's type and its length: "default" -> "defaulX" */
    unsigned char *p = value_of(buf, len, "tokenizer.ggml.pre", 4 + 8);
    cr_assert(memcmp(p, "default", 7) == 0);
    p[6] = 'X';
    gguf_file *f;
    mn_err err = {{0}};
    cr_assert_eq(gguf_open_mem(buf, len, &f, &err), MN_OK);
    mn_model *m = NULL;
    cr_assert_eq(mn_model_from_gguf(f, "renamed", &m, &err), MN_UNSUPPORTED);
    cr_assert(strstr(err.msg, "pre-tokenizer 'defaulX'"), "%s", err.msg);
    free(buf);
}

/* gqa_f32.gguf with the F32 value of `key` written as the F64 v. The header grows by 4 bytes, so the
 * data section moves to the next multiple of the alignment (32) after the new header's end. */
static unsigned char *with_f64(const char *key, double v, size_t *out_len)
{
    size_t len;
    unsigned char *orig = slurp(fixture("gqa_f32.gguf"), &len);
    gguf_file *f;
    cr_assert_eq(gguf_open_mem(orig, len, &f, NULL), MN_OK);
    size_t data = len, n = gguf_n_tensors(f);
    for (size_t i = 0; i < n; i++) {
        size_t at = (size_t)((const unsigned char *)gguf_tensor_at(f, i)->data - orig);
        data = at < data ? at : data;
    }
    const gguf_tensor *last = gguf_tensor_at(f, n - 1);
    unsigned char *name = memmem(orig, data, last->name, strlen(last->name));
    cr_assert(name);
    size_t header_end = (size_t)(name - orig) + strlen(last->name) + 4 + 8 * last->n_dims + 4 + 8;
    gguf_close(f);
    unsigned char *type = value_of(orig, len, key, 0);
    uint32_t t;
    memcpy(&t, type, 4);
    cr_assert_eq(t, GGUF_F32, "%s is an F32 in the fixture", key);
    size_t at = (size_t)(type - orig), new_data = (header_end + 4 + 31) / 32 * 32;
    unsigned char *buf = calloc(1, new_data + len - data);
    memcpy(buf, orig, at);
    t = GGUF_F64;
    memcpy(buf + at, &t, 4);
    memcpy(buf + at + 4, &v, 8);
    memcpy(buf + at + 12, orig + at + 8, header_end - (at + 8));
    memcpy(buf + new_data, orig + data, len - data);
    free(orig);
    *out_len = new_data + len - data;
    return buf;
}

/* Hyperparameters are checked as the model uses them: a float key stored as F64 is refused when its
 * float is 0 (an epsilon of 1e-300 made every logit NaN), and an end-of-text id past the vocabulary
 * is refused rather than dropped (generation would never stop at it). */
Test(model, hparams_are_checked_as_the_model_uses_them)
{
    size_t len;
    unsigned char *buf = with_f64("llama.attention.layer_norm_rms_epsilon", 1e-5, &len);
    gguf_file *f;
    mn_err err = {{0}};
    mn_model *m = NULL;
    cr_assert_eq(gguf_open_mem(buf, len, &f, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(mn_model_from_gguf(f, "f64 eps", &m, &err), MN_OK, "an F64 epsilon loads: %s", err.msg);
    cr_assert_float_eq(m->hp.rms_eps, 1e-5f, 1e-12f);
    mn_model_free(m);
    free(buf);
    buf = with_f64("llama.attention.layer_norm_rms_epsilon", 1e-300, &len);
    cr_assert_eq(gguf_open_mem(buf, len, &f, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(mn_model_from_gguf(f, "tiny eps", &m, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "layer_norm_rms_epsilon") && strstr(err.msg, "out of range"), "%s", err.msg);
    free(buf);
    buf = with_f64("llama.rope.freq_base", 1e-45, &len); /* positive, but base^-(d - 2)/d is inf */
    cr_assert_eq(gguf_open_mem(buf, len, &f, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(mn_model_from_gguf(f, "tiny base", &m, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "freq_base"), "%s", err.msg);
    free(buf);

    unsigned char *orig = slurp(fixture("gqa_f32.gguf"), &len);
    unsigned char *p = value_of(orig, len, "tokenizer.ggml.eos_token_id", 4);
    uint32_t eos = 999999;
    memcpy(p, &eos, 4);
    cr_assert_eq(gguf_open_mem(orig, len, &f, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(mn_model_from_gguf(f, "eos", &m, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "eos_token_id = 999999"), "%s", err.msg);
    free(orig);
}

/* The resident kB of the mapping that holds p (-1: not found). */
static long rss_kb_of(const void *p)
{
    char rss[64];
    long kb = -1;
    if (smaps_field(p, "Rss:", rss, sizeof rss))
        sscanf(rss, "%ld", &kb);
    return kb;
}

/* A backend that took its own copy drops the file's pages (cpu_backend.c): they leave the resident
 * set, and what is read afterwards is still the file's bytes. */
Test(gguf, dropped_pages_leave_the_resident_set_and_read_back_unchanged)
{
    gguf_file *f;
    mn_err err = {{0}};
    cr_assert_eq(gguf_open_file(fixture("gqa_f32.gguf"), &f, &err), MN_OK, "%s", err.msg);
    size_t n = gguf_n_tensors(f), total = 0;
    uint8_t **before = calloc(n, sizeof *before);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        before[i] = malloc(t->nbytes);
        memcpy(before[i], t->data, t->nbytes); /* every page touched: resident */
        total += t->nbytes;
    }
    const void *any = gguf_tensor_at(f, 0)->data;
    long resident = rss_kb_of(any);
    cr_assert_geq(resident * 1024, (long)total * 9 / 10, "%ld kB resident of %zu bytes", resident, total);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        gguf_drop_pages(f, t->data, t->nbytes);
    }
    gguf_drop_pages(f, (const uint8_t *)any - (1 << 30), 4096); /* outside the file: ignored */
    long dropped = rss_kb_of(any);
    cr_assert_lt(dropped, resident / 4, "%ld kB resident after the drop, %ld before", dropped, resident);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        cr_assert_eq(memcmp(before[i], t->data, t->nbytes), 0, "tensor %s changed", t->name);
        free(before[i]);
    }
    free(before);
    gguf_close(f);
}
