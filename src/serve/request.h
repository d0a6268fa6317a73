/* request.h - one generation request as it moves through the actors.
 *
 * Ownership moves with the request's message (req->msg): net -> intake -> kvmem -> verifier -> kvmem
 * -> net, and net frees it after the done (or error) line. Every actor runs on the engine's loop
 * thread, so the fields need no lock; each field says which actor writes it. The compute worker
 * touches only kv (through the backend), the token array and the sampler, and only while the
 * verifier's step job that holds the request is in flight.
 */
#ifndef MN_REQUEST_H
#define MN_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "mem/kv.h"
#include "model/sampler.h"
#include "model/tokenizer.h"
#include "net/proto.h"
#include "runtime/mailbox.h"
#include "util/clock.h"

struct mn_conn;

typedef enum mn_req_stage {
    MN_REQ_INTAKE,    /* posted to intake */
    MN_REQ_QUEUED,    /* in kvmem's pending queue (new, or preempted for recomputation) */
    MN_REQ_RUNNING,   /* admitted: holds KV, in the verifier's running set */
    MN_REQ_FINISHED,  /* on its way back to net */
} mn_req_stage;

typedef struct mn_req {
    mn_msg msg;               /* the request's travelling message (first member) */
    mn_msg flush;             /* verifier -> net: new text to stream; queued at most once (flush_queued) */
    mn_req_params p;          /* owned */
    struct mn_conn *conn;     /* net: NULL once the client is gone */
    struct mn_req *conn_next; /* net: the connection's in-flight list */
    mn_req_stage stage;
    uint64_t serial;          /* kvmem: admission order; the newest is preempted first */
    bool cancelled;           /* net: client cancel or disconnect; actors drop it at their next look */
    bool flush_queued;        /* verifier/net */
    bool preempted;           /* kvmem: lost its KV; recompute from toks */
    /* tokens: the prompt, then every generated token (a preempted request recomputes them all) */
    mn_tokens toks;           /* intake fills the prompt, verifier appends */
    uint32_t n_prompt;
    uint32_t n_gen;           /* verifier: tokens generated (counted even when eos) */
    mn_kv_seq kv;             /* kvmem owns the table; positions [0, kv.len) hold toks[0, kv.len) */
    mn_sampler *smp;          /* intake creates; the step job uses */
    /* output text and how much of it went out */
    char *text;               /* verifier: decoded pieces, truncated at a stop string */
    size_t text_len, text_cap;
    size_t ready;             /* verifier: bytes that may be streamed (no partial UTF-8 or stop string) */
    size_t sent;              /* net: bytes streamed */
    const char *finish;       /* verifier/kvmem: "length", "stop", "cancelled"; NULL while running */
    bool failed;              /* the request ends with an error line (err_code, err_msg) */
    mn_errcode err_code;
    char err_msg[200];        /* kept in the request: failing never needs memory */
    double t_arrive, t_first; /* seconds, monotonic */
} mn_req;

/* A request for params p (moved in: p is zeroed). NULL on OOM (p is then freed). */
mn_req *mn_req_new(mn_req_params *p, struct mn_conn *conn);
void mn_req_free(mn_req *r);
/* End the request with an error line instead of a done line. */
void mn_req_fail(mn_req *r, mn_errcode code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Append a decoded piece; apply stop strings (the text is cut before the first stop string found
 * and true is returned: finish "stop") and update r->ready. MN_NOMEM leaves the text as it was. */
mn_status mn_req_append(mn_req *r, const char *piece, size_t n, bool *stopped);
/* Make everything left ready (the request is finishing). */
void mn_req_seal(mn_req *r);

#endif
