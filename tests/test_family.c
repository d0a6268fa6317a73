/* test_family.c - the bundled model family (models/): every model loads, all share one vocabulary
 * (the voter compares their tokens), the engine's tokenizer encodes every held-out unit of the three
 * corpora exactly like the training tool and every prompt exactly like llama.cpp, and the committed
 * prompt sets are what they claim. */
#include <jansson.h>
#include <string.h>

#include "model/model.h"
#include "testutil.h"

static const char *const MODELS[] = {"target", "draft-kjv", "draft-web", "draft-devil"};

static mn_model *load_family(const char *name)
{
    char path[1024];
    const char *src = getenv("MINIONS_SRCDIR");
    snprintf(path, sizeof path, "%s/models/%s.gguf", src ? src : ".", name);
    mn_model *m = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_model_load(path, &m, &err), MN_OK, "%s: %s", name, err.msg);
    return m;
}

Test(family, models_load_and_share_one_vocabulary)
{
    mn_model *target = load_family("target");
    cr_assert_eq(target->hp.n_vocab, 2048);
    cr_assert(mn_tok_is_lossless(target->tok), "the family's vocabulary has all 256 bytes");
    cr_assert_lt(target->hp.n_kv_heads, target->hp.n_heads, "the target exercises grouped-query attention");
    for (size_t i = 1; i < sizeof MODELS / sizeof MODELS[0]; i++) {
        mn_model *d = load_family(MODELS[i]);
        cr_assert_eq(d->hp.n_vocab, target->hp.n_vocab);
        cr_assert_lt(mn_model_n_params(d), mn_model_n_params(target) / 3, "%s is a small draft", MODELS[i]);
        for (int32_t id = 0; id < (int32_t)target->hp.n_vocab; id++) {
            size_t a, b;
            const char *pa = mn_tok_piece(target->tok, id, &a), *pb = mn_tok_piece(d->tok, id, &b);
            cr_assert(a == b && memcmp(pa, pb, a) == 0, "%s token %d differs from the target's", MODELS[i], id);
        }
        mn_model_free(d);
    }
    mn_model_free(target);
}

Test(family, engine_encodes_heldout_text_like_the_training_tool, .timeout = 600)
{
    FILE *ft = fopen(fixture("family.texts.jsonl"), "r"), *fe = fopen(fixture("family.tokens.jsonl"), "r");
    cr_assert(ft && fe, "family fixtures missing (tests/make-fixtures.sh builds them from Debian's corpora)");
    mn_model *m = load_family("target");
    char *lt = NULL, *le = NULL;
    size_t ct = 0, ce = 0, units = 0, tokens = 0;
    while (getline(&lt, &ct, ft) > 0) {
        cr_assert(getline(&le, &ce, fe) > 0);
        json_error_t jerr;
        json_t *text = json_loads(lt, JSON_DECODE_ANY, &jerr), *ids = json_loads(le, 0, &jerr);
        cr_assert(json_is_string(text) && json_is_array(ids));
        mn_tokens out = {0};
        cr_assert_eq(mn_tok_encode(m->tok, json_string_value(text), json_string_length(text), false, &out), MN_OK);
        cr_assert_eq(out.n, json_array_size(ids), "unit %zu: %zu tokens, the training tool %zu", units, out.n,
                     json_array_size(ids));
        size_t least = mn_tok_min_tokens(m->tok, json_string_value(text), json_string_length(text), false, false);
        cr_assert(least > 0 && least <= out.n, "unit %zu: lower bound %zu, %zu tokens", units, least, out.n);
        /* with control tokens in the text (a chat's markers), the bound for encode_special holds too */
        char *marked = NULL;
        cr_assert(asprintf(&marked, "<|endoftext|>%s<|endoftext|>", json_string_value(text)) > 0);
        mn_tokens sp = {0};
        cr_assert_eq(mn_tok_encode_special(m->tok, marked, strlen(marked), false, &sp), MN_OK);
        cr_assert_eq(sp.n, out.n + 2, "unit %zu: the two markers are a token each", units);
        least = mn_tok_min_tokens(m->tok, marked, strlen(marked), false, true);
        cr_assert(least > 0 && least <= sp.n, "unit %zu: special lower bound %zu, %zu tokens", units, least, sp.n);
        mn_tokens_free(&sp);
        free(marked);
        for (size_t i = 0; i < out.n; i++)
            cr_assert_eq(out.ids[i], json_integer_value(json_array_get(ids, i)), "unit %zu token %zu", units, i);
        tokens += out.n;
        units++;
        mn_tokens_free(&out);
        json_decref(text);
        json_decref(ids);
    }
    cr_log_info("%zu held-out units, %zu tokens, identical", units, tokens);
    cr_assert_gt(units, 150, "every held-out chapter and entry of the three corpora");
    free(lt);
    free(le);
    fclose(ft);
    fclose(fe);
    mn_model_free(m);
}

Test(family, prompt_sets_have_200_prompts_of_8_to_64_tokens)
{
    mn_model *m = load_family("target");
    const char *src = getenv("MINIONS_SRCDIR");
    static const char *const sets[] = {"kjv", "web", "devil"};
    for (int s = 0; s < 3; s++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/prompts/%s.jsonl", src ? src : ".", sets[s]);
        FILE *f = fopen(path, "r");
        cr_assert(f, "missing %s", path);
        char *line = NULL;
        size_t cap = 0;
        int n = 0;
        while (getline(&line, &cap, f) > 0) {
            json_error_t jerr;
            json_t *o = json_loads(line, 0, &jerr);
            const char *p = json_string_value(json_object_get(o, "prompt"));
            cr_assert(p, "%s line %d has no prompt", sets[s], n + 1);
            mn_tokens t = {0};
            cr_assert_eq(mn_tok_encode(m->tok, p, strlen(p), false, &t), MN_OK);
            cr_assert(t.n >= 8 && t.n <= 64, "%s line %d: %zu tokens", sets[s], n + 1, t.n);
            cr_assert_eq((json_int_t)t.n, json_integer_value(json_object_get(o, "tokens")));
            mn_tokens_free(&t);
            json_decref(o);
            n++;
        }
        cr_assert_geq(n, 200, "%s has %d prompts", sets[s], n);
        free(line);
        fclose(f);
    }
    mn_model_free(m);
}

/* Our GGUF files must tokenize alike in other engines (issue #9): tests/fixtures/llama-tokenize-ids.jsonl
 * holds llama.cpp's ids for every prompt of the three sets with models/target.gguf, in file order
 * (tools/llama-tokenize-fixtures.sh made it). */
Test(family, engine_encodes_every_prompt_like_llama_cpp)
{
    mn_model *m = load_family("target");
    const char *path = source_file("tests/fixtures/llama-tokenize-ids.jsonl");
    FILE *fx = fopen(path, "r");
    cr_assert(fx, "missing %s", path);
    static const char *const sets[] = {"kjv", "web", "devil"};
    char *lp = NULL, *lx = NULL;
    size_t cp = 0, cx = 0, prompts = 0;
    for (int s = 0; s < 3; s++) {
        char set_file[64];
        snprintf(set_file, sizeof set_file, "prompts/%s.jsonl", sets[s]);
        const char *set_path = source_file(set_file);
        FILE *fp = fopen(set_path, "r");
        cr_assert(fp, "missing %s", set_path);
        for (json_int_t i = 0; getline(&lp, &cp, fp) > 0; i++) {
            cr_assert(getline(&lx, &cx, fx) > 0, "the fixture ends before %s line %d", sets[s], (int)i + 1);
            json_error_t jerr;
            json_t *o = json_loads(lp, 0, &jerr), *x = json_loads(lx, 0, &jerr);
            const char *p = json_string_value(json_object_get(o, "prompt"));
            json_t *ids = json_object_get(x, "ids");
            cr_assert(p && json_is_array(ids));
            cr_assert_str_eq(json_string_value(json_object_get(x, "set")), sets[s]);
            cr_assert_eq(json_integer_value(json_object_get(x, "index")), i);
            /* add_bos as a request asks for it: the family's GGUF says add_bos_token = false, so no
             * BOS comes out, as llama.cpp gives none (--no-bos) */
            mn_tokens t = {0};
            cr_assert_eq(mn_tok_encode(m->tok, p, strlen(p), true, &t), MN_OK);
            cr_assert_eq(t.n, json_array_size(ids), "%s prompt %d: %zu tokens, llama.cpp %zu", sets[s], (int)i, t.n,
                         json_array_size(ids));
            for (size_t k = 0; k < t.n; k++)
                cr_assert_eq(t.ids[k], json_integer_value(json_array_get(ids, k)), "%s prompt %d token %zu",
                             sets[s], (int)i, k);
            mn_tokens_free(&t);
            json_decref(o);
            json_decref(x);
            prompts++;
        }
        fclose(fp);
    }
    cr_assert(getline(&lx, &cx, fx) <= 0, "the fixture has more lines than the prompt sets");
    cr_assert_geq(prompts, 600, "every prompt of the three sets");
    cr_log_info("%zu prompts, identical to llama.cpp's ids", prompts);
    free(lp);
    free(lx);
    fclose(fx);
    mn_model_free(m);
}
