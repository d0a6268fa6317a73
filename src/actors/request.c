/* request.c - a request's state machine, and its text: stop strings and what may be streamed yet. */
#include "actors/request.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/alloc.h"
#include "util/log.h"

const char *mn_req_state_name(mn_req_state s)
{
    static const char *const names[] = {"new", "queued", "admitted", "running", "paused", "preempted", "finished"};
    return s <= MN_REQ_FINISHED ? names[s] : "?";
}

/* Where ev takes r, or -1 when ev is not allowed now. Throttling is remembered in every state, so
 * that a queued request is admitted straight into PAUSED. */
static int next_state(mn_req *r, mn_req_ev ev)
{
    mn_req_state s = r->state;
    switch (ev) {
    case MN_REQ_EV_QUEUED:
        return s == MN_REQ_NEW ? MN_REQ_QUEUED : -1;
    case MN_REQ_EV_ADMITTED:
        if (s != MN_REQ_QUEUED && s != MN_REQ_PREEMPTED)
            return -1;
        r->resume_to = MN_REQ_ADMITTED;
        return r->throttled ? MN_REQ_PAUSED : MN_REQ_ADMITTED;
    case MN_REQ_EV_PRODUCED: /* a step in flight when its client stopped reading still lands */
        if (s == MN_REQ_PAUSED) {
            r->resume_to = MN_REQ_RUNNING;
            return MN_REQ_PAUSED;
        }
        return s == MN_REQ_ADMITTED || s == MN_REQ_RUNNING ? MN_REQ_RUNNING : -1;
    case MN_REQ_EV_THROTTLED:
        r->throttled = true;
        if (s != MN_REQ_ADMITTED && s != MN_REQ_RUNNING)
            return (int)s;
        r->resume_to = s;
        return MN_REQ_PAUSED;
    case MN_REQ_EV_RESUMED:
        r->throttled = false;
        return s == MN_REQ_PAUSED ? (int)r->resume_to : (int)s;
    case MN_REQ_EV_PREEMPTED:
        return mn_req_holds_kv(r) ? MN_REQ_PREEMPTED : -1;
    case MN_REQ_EV_FINISHED:
        return s != MN_REQ_FINISHED ? MN_REQ_FINISHED : -1;
    }
    return -1;
}

bool mn_req_event(mn_req *r, mn_req_ev ev)
{
    int next = next_state(r, ev);
    if (next < 0) {
        mn_log(MN_LOG_ERROR, "request %s: event %d is not allowed in state %s", r->p.id, (int)ev,
               mn_req_state_name(r->state));
        return false;
    }
    r->state = (mn_req_state)next;
    return true;
}

mn_req *mn_req_new(mn_req_params *p, mn_mailbox *owner, void *conn)
{
    mn_req *r = mn_calloc(1, sizeof *r);
    if (!r) {
        mn_req_params_free(p);
        return NULL;
    }
    r->p = *p;
    memset(p, 0, sizeof *p);
    r->owner = owner;
    r->conn = conn;
    r->end_of_turn = -1;
    r->t_arrive = mn_now();
    return r;
}

void mn_req_observe_latency(const mn_req *r, mn_hist *e2e, mn_hist *tpot)
{
    if (!r->n_gen || r->failed)
        return;
    mn_hist_observe(e2e, r->t_last - r->t_arrive);
    if (r->n_gen > 1)
        mn_hist_observe(tpot, (r->t_last - r->t_first) / (r->n_gen - 1));
}

mn_outcome mn_req_outcome(const mn_req *r)
{
    if (r->failed)
        return MN_OUTCOME_ERROR;
    if (r->finish && !strcmp(r->finish, "length"))
        return MN_OUTCOME_LENGTH;
    if (r->finish && !strcmp(r->finish, "cancelled"))
        return MN_OUTCOME_CANCELLED;
    return MN_OUTCOME_STOP;
}

uint32_t mn_req_draft_valid(const mn_req_draft *x, const mn_req *r)
{
    uint32_t limit = r->toks.n ? (uint32_t)r->toks.n - 1 : 0, keep = x->prop_at;
    if (x->kv.len < limit)
        limit = x->kv.len;
    if (keep > limit)
        keep = limit;
    while (keep < limit && keep - x->prop_at < MN_SPEC_MAX_LEN && x->prop[keep - x->prop_at] == r->toks.ids[keep])
        keep++;
    return keep;
}

void mn_req_free(mn_req *r)
{
    if (!r)
        return;
    mn_req_params_free(&r->p);
    mn_tokens_free(&r->toks);
    mn_sampler_free(r->smp);
    mn_free(r->spec.d); /* kvmem released every KV table before the request came back */
    mn_free(r->text);
    mn_free(r->kept_lp);
    mn_free(r->lp);
    mn_free(r);
}

void mn_req_fail(mn_req *r, mn_errcode code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err_msg, sizeof r->err_msg, fmt, ap);
    va_end(ap);
    r->err_code = code;
    r->failed = true;
}

/* Longest suffix of text that is a proper prefix of stop: those bytes may yet become a stop string. */
static size_t partial_stop(const char *text, size_t len, const char *stop)
{
    size_t sl = strlen(stop);
    for (size_t k = sl - 1 < len ? sl - 1 : len; k > 0; k--)
        if (!memcmp(text + len - k, stop, k))
            return k;
    return 0;
}

mn_status mn_req_append(mn_req *r, const char *piece, size_t n, bool *stopped)
{
    *stopped = false;
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + n + 1)
            cap *= 2;
        char *t = mn_realloc(r->text, cap);
        if (!t)
            return MN_NOMEM;
        r->text = t;
        r->text_cap = cap;
    }
    size_t old = r->text_len;
    memcpy(r->text + old, piece, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
    size_t cut = r->text_len;
    for (uint32_t i = 0; i < r->p.n_stop; i++) {
        const char *s = r->p.stop[i];
        size_t sl = strlen(s);
        size_t from = old >= sl - 1 ? old - (sl - 1) : 0; /* a new match must end in the new piece */
        const char *hit = memmem(r->text + from, r->text_len - from, s, sl);
        if (hit && (size_t)(hit - r->text) < cut)
            cut = (size_t)(hit - r->text);
        *stopped |= hit != NULL;
    }
    if (*stopped) {
        r->text_len = cut;
        r->text[cut] = 0;
        mn_req_seal(r);
        return MN_OK;
    }
    size_t hold = 0;
    for (uint32_t i = 0; i < r->p.n_stop; i++) {
        size_t k = partial_stop(r->text, r->text_len, r->p.stop[i]);
        if (k > hold)
            hold = k;
    }
    size_t ready = mn_utf8_complete_len(r->text, r->text_len - hold);
    if (ready > r->ready)
        r->ready = ready;
    return MN_OK;
}

void mn_req_seal(mn_req *r)
{
    r->ready = r->text_len;
}
