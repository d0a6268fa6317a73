/* http.h - the http actor: the OpenAI-compatible HTTP API and Prometheus metrics on the engine's
 * loop (libevent's evhttp), a front end beside the client actor's JSON lines.
 *
 * Routes (docs/server.md, "HTTP"): POST /v1/completions and /v1/chat/completions (net/openai.h
 * parses and formats; streaming answers are server-sent events), GET /v1/models, GET /health (200,
 * or 503 while draining), GET /metrics (net/metrics.h, from a stats query to every actor). With an
 * API key every route but /health wants `Authorization: Bearer KEY` (401 otherwise).
 *
 * A request without a seed gets one drawn here (a generator seeded from the kernel's entropy), so
 * that the same unseeded request samples afresh each time, as OpenAI's API does.
 *
 * A generation becomes one mn_req per choice (a list of prompts, n: net/openai.h), owned by this
 * actor (r->owner is its mailbox): posted to intake, streamed on MN_MSG_FLUSH, and answered once
 * the last is DONE, then freed here. One request at a time per connection (HTTP/1.1 without
 * pipelining, as evhttp serves it). A connection that fails or closes cancels its choices, whose KV
 * returns to the pool; evhttp notices a peer that went away when it
 * writes, so a non-streaming request whose client left runs to its end, as on the line protocol.
 * A stream whose client does not read is paused past out_high unsent bytes, and resumed when its
 * output is written. Bodies past max_body get 413; a connection idle (or stuck writing) for
 * timeout_s is closed.
 *
 * Drain (MN_MSG_DRAIN): stop listening, answer new requests on open connections with 503 and
 * `Connection: close`, and call on_drained once every accepted request is answered and written.
 * A forced drain cancels what is in flight.
 *
 * Messages in: FLUSH, DONE (mn_req), DRAIN, STATS (its section), STATS_BACK (its /metrics
 * queries). Out: ADMIT to intake, STATS to every actor, kicks.
 * Thread: the engine's loop.
 */
#ifndef MN_HTTP_ACTOR_H
#define MN_HTTP_ACTOR_H

#include "actors/msg.h"
#include "model/chat.h"
#include "model/tokenizer.h"

struct event_base;

typedef struct mn_http_config {
    const char *host;            /* numeric listen address */
    int port;                    /* 0: ephemeral */
    const char *api_key;         /* NULL: no authentication */
    const char *model_name;      /* what /v1/models lists */
    const char *backend;         /* "cpu" or "cuda", for /metrics */
    const mn_tokenizer *tok;     /* the model's: logprobs name their tokens */
    mn_chat_format chat;         /* the model's chat format */
    uint32_t max_tokens_limit;
    uint32_t max_body;           /* bytes of a request body */
    uint32_t out_high;           /* unsent bytes that pause a stream */
    uint32_t timeout_s;          /* an idle or stuck connection is closed after this long */
    uint32_t n_drafters;         /* > 0: responses carry the "minions" extension */
    const char *const *drafter_names; /* borrowed: [n_drafters] */
    const mn_addr *addr;         /* borrowed */
    void (*on_drained)(void *owner);
    void *owner;
} mn_http_config;

typedef struct mn_http_actor mn_http_actor;

/* Listen; MN_IO with a message when the address cannot be bound. */
mn_status mn_http_actor_new(struct event_base *base, const mn_http_config *cfg, mn_http_actor **out, mn_err *err);
void mn_http_actor_handle(void *http, mn_msg *m);
/* Close every connection. The other actors must have handed back every request. */
void mn_http_actor_free(mn_http_actor *ha);
/* The bound port. */
int mn_http_actor_port(const mn_http_actor *ha);

#endif
