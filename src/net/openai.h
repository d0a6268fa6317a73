/* openai.h - the OpenAI-compatible HTTP API's bodies: parse a completion or chat request, format
 * its responses and stream chunks, its errors and the model list (docs/server.md, "HTTP").
 *
 * Pure functions over jansson, no I/O, like net/proto.h: the http actor (actors/http.h) owns the
 * connections. A request's fields are checked as strictly as the JSON-lines protocol's, except
 * that fields this server does not know are ignored, as OpenAI-compatible servers do (clients send
 * `user`, `metadata`, ...); a known field with a value we cannot honour (a penalty other than 0,
 * echo, best_of > 1, tools) is a 400 that names it.
 *
 * A completion's prompt is a string, a list of strings, a list of token ids (taken as they are:
 * no BOS is added; the engine checks them against its vocabulary) or a list of such lists.
 * Several choices: `n` (each prompt's samples) and, for completions, a list of prompts give a
 * request prompts x n choices, at most MN_OAI_MAX_CHOICES, choice i answering prompt i / n
 * (OpenAI's order). Each choice is a request of its own to the engine, with the seed plus i % n, so
 * that a seeded request's samples differ and each is the one a request for that prompt with that
 * seed gets alone.
 *
 * Thread: any; nothing is shared.
 */
#ifndef MN_OPENAI_H
#define MN_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/chat.h"
#include "net/proto.h"

typedef enum mn_oai_kind {
    MN_OAI_COMPLETION,   /* POST /v1/completions: prompt -> text */
    MN_OAI_CHAT,         /* POST /v1/chat/completions: messages -> message */
} mn_oai_kind;

#define MN_OAI_MAX_CHOICES 16    /* prompts x n of one request */

typedef struct mn_oai_config {
    uint32_t max_tokens_limit;   /* largest max_tokens (the default is 16, OpenAI's, or less) */
    mn_chat_format chat;         /* how messages become a prompt */
} mn_oai_config;

/* A parsed request. p.id is left NULL (the http actor names it). */
typedef struct mn_oai_request {
    mn_oai_kind kind;
    mn_req_params p;             /* owned; chat: the rendered prompt, parse_special set; completions:
                                  * the first prompt */
    char **more;                 /* completions: the list's other prompts, owned (NUL-terminated) */
    size_t *more_len;
    int32_t **more_ids;          /* or, for a list of token prompts, those (owned), and their lengths */
    uint32_t *more_n_ids;
    uint32_t n_prompts;          /* 1 + the entries of more or more_ids */
    uint32_t n;                  /* choices per prompt */
    char *model;                 /* owned: the name the client asked for, echoed back */
    bool seeded;                 /* the body gave a seed; without one p.seed is 0 and the caller
                                  * draws one (OpenAI: unseeded requests sample afresh each time) */
    bool include_usage;          /* stream_options.include_usage: a last chunk with usage and no choice */
} mn_oai_request;

void mn_oai_request_free(mn_oai_request *q);
/* The choices of a parsed request: n_prompts x n. */
uint32_t mn_oai_choices(const mn_oai_request *q);
/* The engine request of choice i (< mn_oai_choices(q)): q->p with prompt i / n and the seed plus
 * i % n, a deep copy the caller owns (its id NULL). MN_NOMEM when memory runs out. */
mn_status mn_oai_choice_params(const mn_oai_request *q, uint32_t i, mn_req_params *out);

/* An error as OpenAI shapes it: HTTP status, type ("invalid_request_error", ...), the field at
 * fault (or ""), and a message. */
typedef struct mn_oai_error {
    int status;
    const char *type;
    char param[64];
    char message[240];
} mn_oai_error;

/* Parse a request body. MN_INVALID with *err filled (status 400) when it is refused. */
mn_status mn_oai_parse(mn_oai_kind kind, const char *body, size_t len, const mn_oai_config *cfg, mn_oai_request *out,
                       mn_oai_error *err);

/* One generated token's log-probabilities, for the logprobs fields. */
typedef struct mn_oai_logprob {
    const char *text;            /* the token's bytes (not NUL-terminated) */
    size_t len;
    float logprob;
    uint32_t n_top;
    struct {
        const char *text;
        size_t len;
        float logprob;
    } top[MN_PROTO_MAX_TOP_LOGPROBS];
} mn_oai_logprob;

/* What a response (or a stream chunk) says; every pointer is borrowed. */
typedef struct mn_oai_result {
    mn_oai_kind kind;
    const char *id;              /* "cmpl-..." or "chatcmpl-..." */
    uint32_t index;              /* the choice's */
    const char *model;
    int64_t created;             /* unix seconds */
    const char *text;            /* the whole text (response) or the new piece (chunk) */
    size_t text_len;
    const char *finish_reason;   /* NULL in a chunk that does not end the choice */
    const mn_oai_logprob *logprobs; /* NULL: "logprobs": null */
    size_t n_logprobs;
    size_t text_offset;          /* completions' logprobs.text_offset: bytes before this text */
    bool first;                  /* chat stream: the chunk that opens the message (role) */
    bool usage;                  /* carry usage (a response, or the chunk that ends the stream) */
    uint32_t prompt_tokens, completion_tokens;
    const mn_proto_spec *spec;   /* NULL: no "minions" extension; else "minions": {"spec": ...} */
} mn_oai_result;

/* A whole response body (JSON, no newline) with the choices res[0..n), each at its index; the
 * head, usage and extension come from res[0]. NULL only on OOM. *len gets the length. */
char *mn_oai_response(const mn_oai_result *res, size_t n, size_t *len);
/* One server-sent event: "data: {chunk}\n\n". NULL only on OOM. */
char *mn_oai_chunk(const mn_oai_result *res, size_t *len);
/* A last chunk with usage (and the extension, where spec is set) and no choice
 * (stream_options.include_usage). */
char *mn_oai_usage_chunk(const mn_oai_result *res, size_t *len);
/* {"error": {"message", "type", "param", "code"}}. NULL only on OOM. */
char *mn_oai_error_body(const mn_oai_error *err, size_t *len);
/* The model list: one model, `name`. */
char *mn_oai_models(const char *name, int64_t created, size_t *len);

#endif
