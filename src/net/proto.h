/* proto.h - the client protocol: one JSON object per line, both ways (docs/server.md).
 *
 * Pure functions over jansson, no I/O: parse and validate a request or cancel line, and format the
 * reply lines (delta, done, error). Every reply line ends with '\n'. Strings in replies are UTF-8:
 * mn_utf8_complete_len tells how much of a byte-level model's output can be sent without splitting a
 * character, and mn_utf8_sanitize replaces what is not valid UTF-8 with U+FFFD.
 *
 * Thread: any; nothing is shared.
 */
#ifndef MN_PROTO_H
#define MN_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/chat.h"
#include "util/status.h"

typedef enum mn_errcode {
    MN_E_INVALID_JSON,     /* the line is not a JSON object */
    MN_E_INVALID_REQUEST,  /* a field is missing, of the wrong type or out of range */
    MN_E_LINE_TOO_LONG,    /* the line passed the limit; the connection closes after the error */
    MN_E_BUSY,             /* the server cannot take the request now (queue full, draining) */
    MN_E_UNKNOWN_ID,       /* cancel of an id not in flight on this connection */
    MN_E_INTERNAL,         /* the server failed; the request is gone */
} mn_errcode;

const char *mn_errcode_name(mn_errcode code);

#define MN_PROTO_MAX_STOP 8      /* stop strings per request */
#define MN_PROTO_MAX_STOP_LEN 64 /* bytes per stop string */
#define MN_PROTO_MAX_ID_LEN 128  /* bytes per id */
#define MN_PROTO_MAX_SPEC_LEN 16 /* the longest draft a request may allow (spec.max_len) */
#define MN_PROTO_MAX_MESSAGES 64  /* messages of a chat request */
#define MN_PROTO_MAX_TOP_LOGPROBS 5 /* alternatives per generated token (HTTP's top_logprobs) */

typedef struct mn_req_params {
    char *id;                    /* owned, NUL-terminated */
    char *prompt;                /* owned, may contain NUL bytes: use prompt_len */
    size_t prompt_len;
    int32_t *prompt_ids;         /* owned, or NULL: the prompt as token ids, taken as they are (the
                                  * OpenAI API's token prompts); prompt is then NULL */
    uint32_t n_prompt_ids;
    uint32_t max_tokens;         /* 1..limit (default 64) */
    bool max_tokens_fit;         /* not given, meaning as many as fit (an HTTP chat's): intake caps
                                  * it at what the KV pool holds beside the prompt */
    float temperature;           /* >= 0 (default 0: greedy) */
    float top_p;                 /* (0, 1] (default 1) */
    uint64_t seed;               /* default 0 */
    bool stream;                 /* delta lines (default false) */
    bool speculate;              /* may the server draft for it (default true) */
    uint32_t spec_max_len;       /* spec.max_len: its longest draft, 0..16 (default 16: the server's) */
    bool return_tokens;          /* the done line lists the generated token ids (default false) */
    bool parse_special;          /* the prompt's control-token texts are those tokens (a chat prompt the
                                  * server rendered; never from a client's JSON line) */
    const char *end_of_turn;     /* a chat's format's end-of-turn text (static, model/chat.h) or NULL:
                                  * generation also stops at the control token of that text */
    bool logprobs;               /* keep each generated token's log-probability (HTTP only) */
    uint32_t top_logprobs;       /* with logprobs, also the n most likely tokens at each position
                                  * (0..MN_PROTO_MAX_TOP_LOGPROBS) */
    char *stop[MN_PROTO_MAX_STOP + 1]; /* owned: the client's (MN_PROTO_MAX_STOP at most), then a
                                     * chat's mn_chat_turn_stop where its format has one */
    uint32_t n_stop;
} mn_req_params;

void mn_req_params_free(mn_req_params *p);
/* After the client's stop strings: a chat's turn stop in format f, if it has one (model/chat.h).
 * MN_NOMEM when memory runs out. */
mn_status mn_req_params_add_turn_stop(mn_req_params *p, mn_chat_format f);
/* *dst = a deep copy of *src (its id, prompt and stop strings owned anew). MN_NOMEM, with *dst
 * empty, when memory runs out. */
mn_status mn_req_params_copy(const mn_req_params *src, mn_req_params *dst);

typedef enum mn_line_kind {
    MN_LINE_REQUEST,  /* params filled; the caller owns them */
    MN_LINE_CANCEL,   /* cancel_id filled (owned) */
} mn_line_kind;

typedef struct mn_line {
    mn_line_kind kind;
    mn_req_params req;
    char *cancel_id;
} mn_line;

typedef struct mn_proto_error {
    mn_errcode code;
    char id[MN_PROTO_MAX_ID_LEN + 1];  /* the request's id when it could be read, else "" */
    char message[200];                 /* names the offending field */
} mn_proto_error;                      /* id and message: valid UTF-8, cut between characters */

/* Parse one line (without its '\n'). max_tokens_limit bounds max_tokens. A request has a "prompt"
 * (the text as it is) or "messages" (a chat: rendered here in format chat, the served model's,
 * with parse_special and end_of_turn set, as the HTTP chat API does). On success *out is filled
 * and owned by the caller (free with mn_line_free); otherwise MN_INVALID and *err says why. A line
 * with a raw NUL byte is invalid_json; an escaped "\u0000" is kept in a prompt or a message's
 * content (see prompt_len) and refused in an id, a role, a cancel id or a stop string. */
mn_status mn_proto_parse(const char *line, size_t len, uint32_t max_tokens_limit, mn_chat_format chat, mn_line *out,
                         mn_proto_error *err);
void mn_line_free(mn_line *l);

/* Reply lines, newly allocated (mn_free), '\n'-terminated; *len gets the length. NULL only on OOM:
 * what is not valid UTF-8 in id, text or message is sent as U+FFFD (see mn_utf8_sanitize), so that
 * every request gets its answer. */
char *mn_proto_delta(const char *id, const char *text, size_t text_len, size_t *len);
/* What speculation did for one request: the done line's "spec" object. accepted counts accepted
 * draft tokens (not the target's own token); mean_accepted_len = accepted / verifications. */
typedef struct mn_proto_spec {
    uint32_t drafted, accepted, verifications;
    uint32_t n_drafters;
    const char *const *names;    /* [n_drafters] */
    const uint32_t *voted;       /* [n_drafters]: verifications whose draft was this drafter's */
} mn_proto_spec;

/* {"drafted":..,"accepted":..,"verifications":..,"mean_accepted_len":..,"voted":{name: n, ...}}; NULL
 * only on OOM. (The HTTP API's bodies use it too: net/openai.h.) */
struct json_t *mn_proto_spec_json(const mn_proto_spec *sp);
/* A JSON string of s[0..len) in which every byte sequence that is not UTF-8 has become U+FFFD; NULL
 * only on OOM. */
struct json_t *mn_json_utf8(const char *s, size_t len);
/* Whether the JSON number v lies in [lo, hi] (whole numbers of at most 2^53 when v is an integer):
 * an integer is compared as one, since 2^53 + 1 would round to 2^53 as a double. */
bool mn_json_number_within(const struct json_t *v, double lo, double hi);

/* The done line; spec (NULL: none) adds "spec", tokens (NULL: none) adds "tokens": [ids...]. */
char *mn_proto_done(const char *id, const char *text, size_t text_len, const char *finish_reason,
                    uint32_t prompt_tokens, uint32_t completion_tokens, const mn_proto_spec *spec,
                    const int32_t *tokens, size_t n_tokens, size_t *len);
char *mn_proto_error_line(const char *id, mn_errcode code, const char *message, size_t *len);

/* Length of the longest prefix of s that does not end inside an incomplete UTF-8 sequence (invalid
 * bytes count as complete: they are replaced at send time). */
size_t mn_utf8_complete_len(const char *s, size_t len);
/* A copy of s with every invalid UTF-8 byte sequence replaced by U+FFFD; NUL-terminated, *out_len
 * gets its length. NULL on OOM. */
char *mn_utf8_sanitize(const char *s, size_t len, size_t *out_len);

#endif
