/* intake.c - the intake actor (see intake.h). Tokenizing a prompt is the only work it does; it is
 * cheap next to a model pass and keeps the tokenizer off the compute worker. */
#include "actors/intake.h"

#include <string.h>

#include "util/alloc.h"
#include "util/log.h"

struct mn_intake {
    mn_intake_config cfg;
    uint64_t prompt_tokens;
};

mn_status mn_intake_new(const mn_intake_config *cfg, mn_intake **out, mn_err *err)
{
    mn_intake *in = mn_calloc(1, sizeof *in);
    if (!in)
        return mn_fail(err, MN_NOMEM, "intake: out of memory");
    in->cfg = *cfg;
    *out = in;
    return MN_OK;
}

void mn_intake_free(mn_intake *in) { mn_free(in); }

static void answer(mn_intake *in, mn_req *r)
{
    mn_req_event(r, MN_REQ_EV_FINISHED);
    r->msg.type = MN_MSG_DONE;
    mn_mailbox_post(r->owner, &r->msg);
}

static uint32_t blocks_for(const mn_intake *in, uint32_t n)
{
    return (n + in->cfg.kv_block_size - 1) / in->cfg.kv_block_size;
}

static void admit(mn_intake *in, mn_req *r)
{
    const mn_model *model = in->cfg.model;
    uint32_t n_ctx = model->hp.n_ctx;
    if (r->cancelled) {
        r->finish = "cancelled";
        return answer(in, r);
    }
    if (r->p.prompt_ids) { /* token ids, taken as they are */
        if (r->p.n_prompt_ids >= n_ctx) {
            mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt is %u tokens; the model's context is %u", r->p.n_prompt_ids,
                        n_ctx);
            return answer(in, r);
        }
        for (uint32_t i = 0; i < r->p.n_prompt_ids; i++) {
            int32_t id = r->p.prompt_ids[i];
            if (id < 0 || (uint32_t)id >= model->hp.n_vocab) {
                mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt token %u is %d; the model's vocabulary has %u", i, id,
                            model->hp.n_vocab);
                return answer(in, r);
            }
            if (mn_tokens_push(&r->toks, id) != MN_OK) {
                mn_req_fail(r, MN_E_INTERNAL, "out of memory while taking the prompt's tokens");
                return answer(in, r);
            }
        }
    } else {
        /* Refuse what cannot fit before tokenizing it: this actor runs on the loop, and a 1 MiB
         * prompt costs tens of milliseconds that every stream would wait for. */
        size_t least = mn_tok_min_tokens(model->tok, r->p.prompt, r->p.prompt_len, true, r->p.parse_special);
        if (least >= n_ctx) {
            mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt is %zu bytes, at least %zu tokens; the model's context is %u",
                        r->p.prompt_len, least, n_ctx);
            return answer(in, r);
        }
        mn_status st = r->p.parse_special
                           ? mn_tok_encode_special(model->tok, r->p.prompt, r->p.prompt_len, true, &r->toks)
                           : mn_tok_encode(model->tok, r->p.prompt, r->p.prompt_len, true, &r->toks);
        if (st != MN_OK) {
            mn_req_fail(r, MN_E_INTERNAL, "out of memory while tokenizing the prompt");
            return answer(in, r);
        }
    }
    r->n_prompt = (uint32_t)r->toks.n;
    r->end_of_turn = r->p.end_of_turn ? mn_tok_control(model->tok, r->p.end_of_turn, strlen(r->p.end_of_turn)) : -1;
    if (r->toks.n == 0) {
        mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt encodes to no tokens");
        return answer(in, r);
    }
    if (r->toks.n >= n_ctx) {
        mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt is %zu tokens; the model's context is %u", r->toks.n, n_ctx);
        return answer(in, r);
    }
    /* Its whole length is reserved at admission, so no step ever waits for blocks: every position
     * it may write, within the context. A draft never reaches past it: the verifier caps a draft at
     * what the request may still generate. */
    uint64_t need = r->toks.n + (uint64_t)r->p.max_tokens, room = (uint64_t)in->cfg.kv_blocks * in->cfg.kv_block_size;
    r->kv_need = need > n_ctx ? n_ctx : (uint32_t)need;
    if (r->p.max_tokens_fit && r->kv_need > room && room > r->toks.n) { /* a pool smaller than the context */
        r->kv_need = (uint32_t)room;
        r->p.max_tokens = (uint32_t)(room - r->toks.n);
    }
    if (blocks_for(in, r->kv_need) > in->cfg.kv_blocks) {
        mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt + max_tokens need %u KV blocks; the server has %u",
                    blocks_for(in, r->kv_need), in->cfg.kv_blocks);
        return answer(in, r);
    }
    if (in->cfg.n_drafters && !(r->spec.d = mn_calloc(in->cfg.n_drafters, sizeof *r->spec.d))) {
        mn_req_fail(r, MN_E_INTERNAL, "out of memory for the drafters' state");
        return answer(in, r);
    }
    if (r->p.logprobs && (!(r->kept_lp = mn_calloc(1 + MN_SPEC_MAX_LEN, sizeof *r->kept_lp)) ||
                          !(r->lp = mn_calloc(r->p.max_tokens, sizeof *r->lp)))) {
        mn_req_fail(r, MN_E_INTERNAL, "out of memory for the log-probabilities");
        return answer(in, r);
    }
    r->spec.on = in->cfg.n_drafters && r->p.speculate && r->p.spec_max_len > 0; /* max_len 0: opted out */
    r->spec.max_len = r->p.spec_max_len;
    mn_sampler_params sp = {r->p.temperature, r->p.top_p, r->p.seed};
    if (mn_sampler_new(model->hp.n_vocab, &sp, &r->smp) != MN_OK) {
        mn_req_fail(r, MN_E_INTERNAL, "out of memory for the sampler");
        return answer(in, r);
    }
    in->prompt_tokens += r->n_prompt;
    mn_req_event(r, MN_REQ_EV_QUEUED);
    r->msg.type = MN_MSG_ENQUEUE;
    mn_mailbox_post(in->cfg.addr->kvmem, &r->msg);
}

void mn_intake_handle(void *intake, mn_msg *m)
{
    mn_intake *in = intake;
    switch ((mn_msg_type)m->type) {
    case MN_MSG_ADMIT:
        admit(in, (mn_req *)m);
        break;
    case MN_MSG_STATS: {
        mn_stats_part *q = (mn_stats_part *)m;
        q->stats->intake.prompt_tokens = in->prompt_tokens;
        mn_stats_reply(q);
        break;
    }
    default:
        mn_log(MN_LOG_ERROR, "intake: unexpected message %u", m->type);
    }
}
