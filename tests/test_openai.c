/* test_openai.c - the HTTP API's pure parts: the OpenAI bodies (net/openai.h), the Prometheus
 * text (net/metrics.h), the log-probabilities (model/sampler.h) and the latency histogram (util/hist.h). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "model/chat.h"
#include "model/sampler.h"
#include "net/metrics.h"
#include "net/openai.h"
#include "testutil.h"
#include "util/alloc.h"
#include "util/hist.h"

static mn_oai_config cfg(void) { return (mn_oai_config){.max_tokens_limit = 4096, .chat = MN_CHAT_CHATML}; }

static mn_oai_request parse_ok(mn_oai_kind kind, const char *body)
{
    mn_oai_config c = cfg();
    mn_oai_request q;
    mn_oai_error e;
    cr_assert_eq(mn_oai_parse(kind, body, strlen(body), &c, &q, &e), MN_OK, "%s: %s", body, e.message);
    return q;
}

static void parse_bad(mn_oai_kind kind, const char *body, const char *param)
{
    mn_oai_config c = cfg();
    mn_oai_request q;
    mn_oai_error e;
    cr_assert_eq(mn_oai_parse(kind, body, strlen(body), &c, &q, &e), MN_INVALID, "%s was accepted", body);
    cr_assert_eq(e.status, 400);
    cr_assert_str_eq(e.param, param, "%s: %s", body, e.message);
    cr_assert(q.p.prompt == NULL && q.p.prompt_ids == NULL && q.model == NULL, "nothing is left allocated");
}

Test(openai, requests_take_openais_defaults_and_fields)
{
    mn_oai_request q = parse_ok(MN_OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"Once\"]}");
    cr_assert_str_eq(q.p.prompt, "Once");
    cr_assert_str_eq(q.model, "m");
    cr_assert_eq(q.p.max_tokens, 16, "OpenAI's default for a completion");
    cr_assert_float_eq(q.p.temperature, 1.0, 1e-6);
    cr_assert(q.p.speculate && !q.p.stream && !q.p.logprobs && !q.p.parse_special);
    cr_assert(!q.seeded, "no seed: the http actor draws one");
    cr_assert_null(q.p.end_of_turn, "a completion ends at end of text only");
    mn_oai_request_free(&q);
    q = parse_ok(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":null,\"stop\":\"END\",\"logprobs\":2,"
                                    "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"seed\":5,"
                                    "\"speculate\":false,\"spec\":{\"max_len\":3},\"service_tier\":\"auto\"}");
    cr_assert_eq(q.p.n_stop, 1);
    cr_assert_str_eq(q.p.stop[0], "END");
    cr_assert(q.p.logprobs && q.p.top_logprobs == 2 && q.p.stream && q.include_usage && !q.p.speculate);
    cr_assert_eq(q.p.spec_max_len, 3);
    cr_assert(q.seeded && q.p.seed == 5);
    mn_oai_request_free(&q);
    q = parse_ok(MN_OAI_CHAT, "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be kind.\"},"
                              "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi \"},"
                              "{\"type\":\"text\",\"text\":\"you\"}]}],\"max_completion_tokens\":7,"
                              "\"logprobs\":true,\"top_logprobs\":1}");
    cr_assert_str_eq(q.p.prompt, "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi you<|im_end|>\n"
                                 "<|im_start|>assistant\n");
    cr_assert(q.p.parse_special, "a rendered chat prompt's markers are control tokens");
    cr_assert_str_eq(q.p.end_of_turn, "<|im_end|>", "a chat ends with the assistant's turn");
    cr_assert_eq(q.p.max_tokens, 7);
    cr_assert(q.p.logprobs && q.p.top_logprobs == 1);
    cr_assert_eq(q.p.n_stop, 0, "chatml's turn ends at its token");
    mn_oai_request_free(&q);
    /* a model without a template (the plain format): its turn ends before the next "User:" */
    mn_oai_config plain = {.max_tokens_limit = 4096, .chat = MN_CHAT_PLAIN};
    mn_oai_error e;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"stop\":\"END\"}";
    cr_assert_eq(mn_oai_parse(MN_OAI_CHAT, body, strlen(body), &plain, &q, &e), MN_OK, "%s", e.message);
    cr_assert_eq(q.p.n_stop, 2);
    cr_assert_str_eq(q.p.stop[0], "END");
    cr_assert_str_eq(q.p.stop[1], "\nUser:");
    mn_oai_request_free(&q);
    body = "{\"prompt\":\"Hi\"}"; /* a completion is no chat */
    cr_assert_eq(mn_oai_parse(MN_OAI_COMPLETION, body, strlen(body), &plain, &q, &e), MN_OK, "%s", e.message);
    cr_assert_eq(q.p.n_stop, 0);
    mn_oai_request_free(&q);
}

/* Several choices: prompts x n, choice i answering prompt i / n with the seed plus i % n. */
Test(openai, a_list_of_prompts_and_n_make_the_choices)
{
    mn_oai_request q = parse_ok(MN_OAI_COMPLETION, "{\"prompt\":[\"One\",\"Two\"],\"n\":3,\"seed\":10,"
                                                   "\"stop\":[\"x\",\"y\"],\"max_tokens\":5}");
    cr_assert_eq(mn_oai_choices(&q), 6);
    static const char *const prompts[] = {"One", "One", "One", "Two", "Two", "Two"};
    for (uint32_t i = 0; i < 6; i++) {
        mn_req_params p;
        cr_assert_eq(mn_oai_choice_params(&q, i, &p), MN_OK);
        cr_assert_str_eq(p.prompt, prompts[i]);
        cr_assert_eq(p.prompt_len, 3);
        cr_assert_eq(p.seed, 10 + i % 3);
        cr_assert_eq(p.max_tokens, 5);
        cr_assert_eq(p.n_stop, 2);
        cr_assert_str_eq(p.stop[1], "y");
        cr_assert(p.stop[1] != q.p.stop[1], "a copy of its own");
        cr_assert_null(p.id);
        mn_req_params_free(&p);
    }
    mn_oai_request_free(&q);
    q = parse_ok(MN_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"n\":2}");
    cr_assert_eq(mn_oai_choices(&q), 2);
    mn_oai_request_free(&q);
    q = parse_ok(MN_OAI_COMPLETION, "{\"prompt\":\"x\"}");
    cr_assert_eq(mn_oai_choices(&q), 1, "one prompt, n 1 by default");
    mn_oai_request_free(&q);
}

/* Token prompts: a list of ids is one prompt and a list of such lists several, each taken as it
 * is (the engine checks the ids against its vocabulary). */
Test(openai, token_prompts_are_taken_as_they_are)
{
    mn_oai_request q = parse_ok(MN_OAI_COMPLETION, "{\"prompt\":[5,0,7],\"max_tokens\":3}");
    cr_assert_null(q.p.prompt);
    cr_assert_eq(q.p.n_prompt_ids, 3);
    cr_assert(q.p.prompt_ids[0] == 5 && q.p.prompt_ids[1] == 0 && q.p.prompt_ids[2] == 7);
    cr_assert_eq(mn_oai_choices(&q), 1);
    mn_oai_request_free(&q);
    q = parse_ok(MN_OAI_COMPLETION, "{\"prompt\":[[1,2],[3]],\"n\":2}");
    cr_assert_eq(mn_oai_choices(&q), 4);
    for (uint32_t i = 0; i < 4; i++) {
        mn_req_params p;
        cr_assert_eq(mn_oai_choice_params(&q, i, &p), MN_OK);
        cr_assert_null(p.prompt);
        cr_assert_eq(p.n_prompt_ids, i < 2 ? 2 : 1);
        cr_assert_eq(p.prompt_ids[0], i < 2 ? 1 : 3);
        cr_assert(p.prompt_ids != q.p.prompt_ids && p.prompt_ids != q.more_ids[0], "a copy of its own");
        mn_req_params_free(&p);
    }
    mn_oai_request_free(&q);
}

Test(openai, what_cannot_be_honoured_is_refused_by_name)
{
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"n\":17}", "n");
    /* compared as integers: as doubles 2^53 + 1 and -2^53 - 1 round into the range */
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"seed\":9007199254740993}", "seed");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"seed\":-9007199254740993}", "seed");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"n\":0}", "n");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"n\":1.5}", "n");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"n\":4}", "n");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[\"a\",\"\"]}", "prompt");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[]}", "prompt");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"best_of\":2}", "best_of");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "echo");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"frequency_penalty\":1}", "frequency_penalty");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":1}}", "logit_bias");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[1,\"a\"]}", "prompt");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[1,2.5]}", "prompt");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[3,-1]}", "prompt");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[[1],\"a\"]}", "prompt");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[\"a\",[1]]}", "prompt");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[[1],[]]}", "prompt");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":[[1],[2,true]]}", "prompt");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"top_p\":0}", "top_p");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":5000}", "max_tokens");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "max_tokens");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}",
              "stop");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"model\":5}", "model");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":[]}", "stream_options");
    parse_bad(MN_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}",
              "tools");
    parse_bad(MN_OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages");
    parse_bad(MN_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages");
    parse_bad(MN_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "logprobs");
    parse_bad(MN_OAI_COMPLETION, "[]", "");
    parse_bad(MN_OAI_COMPLETION, "{\"prompt\":\"x\"", "");
}

static json_t *load(const char *s, size_t len)
{
    json_t *o = json_loadb(s, len, 0, NULL);
    cr_assert(o, "not JSON: %.*s", (int)len, s);
    return o;
}

Test(openai, responses_and_chunks_have_openais_shape)
{
    mn_oai_logprob lp = {.text = "\xe4\xb8", .len = 2, .logprob = -0.5f, .n_top = 1};
    lp.top[0].text = "\xe4\xb8", lp.top[0].len = 2, lp.top[0].logprob = -0.5f;
    mn_oai_result res = {.kind = MN_OAI_CHAT, .id = "chatcmpl-1", .model = "m", .created = 7, .text = "Hi",
                         .text_len = 2, .finish_reason = "stop", .logprobs = &lp, .n_logprobs = 1, .usage = true,
                         .prompt_tokens = 3, .completion_tokens = 1};
    size_t len;
    char *s = mn_oai_response(&res, 1, &len);
    json_t *o = load(s, len);
    cr_assert_str_eq(json_string_value(json_object_get(o, "object")), "chat.completion");
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "message"), "content")), "Hi");
    json_t *tok = json_array_get(json_object_get(json_object_get(c, "logprobs"), "content"), 0);
    cr_assert(!strncmp(json_string_value(json_object_get(tok, "token")), "\xef\xbf\xbd", 3),
              "half a character is sent as U+FFFD (%s); its bytes are exact", json_string_value(json_object_get(tok, "token")));
    cr_assert_eq(json_array_size(json_object_get(tok, "bytes")), 2);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "total_tokens")), 4);
    json_decref(o);
    mn_free(s);
    res.first = true;
    res.finish_reason = NULL;
    res.usage = false;
    res.logprobs = NULL;
    s = mn_oai_chunk(&res, &len);
    cr_assert(!strncmp(s, "data: {", 7) && !strcmp(s + len - 2, "\n\n"), "%s", s);
    o = load(s + 6, len - 8);
    c = json_array_get(json_object_get(o, "choices"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "delta"), "role")), "assistant");
    cr_assert(json_is_null(json_object_get(c, "finish_reason")));
    cr_assert_null(json_object_get(o, "usage"));
    json_decref(o);
    mn_free(s);
    mn_oai_result two[2] = {res, res}; /* a response of two choices: each at its index, usage once */
    two[0].usage = true;
    two[1].index = 1;
    two[1].text = "Ho";
    s = mn_oai_response(two, 2, &len);
    o = load(s, len);
    json_t *cs = json_object_get(o, "choices");
    cr_assert_eq(json_array_size(cs), 2);
    for (size_t i = 0; i < 2; i++)
        cr_assert_eq(json_integer_value(json_object_get(json_array_get(cs, i), "index")), (json_int_t)i);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(json_array_get(cs, 1), "message"), "content")),
                     "Ho");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "total_tokens")), 4);
    json_decref(o);
    mn_free(s);
    mn_oai_error e = {.status = 400, .type = "invalid_request_error", .param = "n", .message = "no"};
    s = mn_oai_error_body(&e, &len);
    o = load(s, len);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "param")), "n");
    cr_assert(json_is_null(json_object_get(json_object_get(o, "error"), "code")));
    json_decref(o);
    mn_free(s);
}

Test(openai, logprobs_are_a_log_softmax_and_its_best)
{
    const float logits[] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
    mn_logprob lp;
    mn_logprobs(logits, 5, 2, 3, &lp);
    double z = 0;
    for (int i = 0; i < 5; i++)
        z += exp(logits[i]);
    cr_assert_float_eq(lp.logprob, 2.0 - log(z), 1e-5);
    cr_assert_eq(lp.n_top, 3);
    cr_assert(lp.top[0] == 1 && lp.top[1] == 3 && lp.top[2] == 2, "by logit, ties by id: %d %d %d", lp.top[0],
              lp.top[1], lp.top[2]);
    cr_assert_float_eq(lp.top_logprob[0], 3.0 - log(z), 1e-5);
    mn_logprobs(logits, 5, 0, 0, &lp);
    cr_assert_eq(lp.n_top, 0);
}

Test(openai, metrics_are_valid_prometheus_text)
{
    mn_stats s = {0};
    s.http.outcomes[MN_OUTCOME_LENGTH] = 3;
    s.verifier.accepted_hist[2] = 4; /* four verifications kept two draft tokens */
    s.verifier.accepted_hist[0] = 1;
    s.voter.drafter[0].weight = 1.5f;
    mn_hist_observe(&s.verifier.ttft, 0.003);
    mn_hist_observe(&s.verifier.ttft, 100);
    const char *names[] = {"draft \"a\""};
    mn_metrics_info info = {.model = "m", .backend = "cpu", .n_drafters = 1, .drafter_names = names};
    size_t len;
    char *t = mn_metrics_render(&s, &info, &len);
    cr_assert(t && len == strlen(t));
    cr_assert(strstr(t, "minions_requests_total{frontend=\"http\",outcome=\"length\"} 3\n"));
    cr_assert(strstr(t, "minions_spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 4\n"));
    cr_assert(strstr(t, "minions_spec_decode_num_accepted_tokens_per_pos_total{position=\"2\"} 0\n"));
    cr_assert(strstr(t, "minions_drafter_weight{drafter=\"draft \\\"a\\\"\"} 1.5\n"), "labels are escaped");
    cr_assert(strstr(t, "minions_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"));
    cr_assert(strstr(t, "minions_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
    cr_assert(strstr(t, "minions_time_to_first_token_seconds_bucket{le=\"60\"} 1\n"));
    cr_assert(strstr(t, "minions_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) { /* name{labels} value */
        if (line[0] == '#')
            continue;
        char *sp = strrchr(line, ' ');
        cr_assert(sp && strncmp(line, "minions_", 8) == 0, "%s", line);
        char *end;
        strtod(sp + 1, &end);
        cr_assert_eq(*end, 0, "a value: %s", line);
    }
    mn_free(t);
}
