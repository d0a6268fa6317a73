/* intake.c - the intake actor (see intake.h). Tokenizing a prompt is the only work it does; it is
 * cheap next to a model pass and keeps the tokenizer off the compute worker. */
#include "serve/intake.h"

static void answer(mn_engine *e, mn_req *r)
{
    r->stage = MN_REQ_FINISHED;
    r->msg.type = MN_MSG_DONE;
    mn_mailbox_post(e->net_mb, &r->msg);
}

void mn_intake_handle(void *engine, mn_msg *m)
{
    mn_engine *e = engine;
    mn_req *r = (mn_req *)m;
    const mn_model *model = e->model;
    if (r->cancelled) {
        r->finish = "cancelled";
        return answer(e, r);
    }
    if (e->draining) {
        mn_req_fail(r, MN_E_BUSY, "the server is draining and takes no new requests");
        return answer(e, r);
    }
    /* Refuse what cannot fit before tokenizing it: this actor runs on the loop, and a 1 MiB prompt
     * costs tens of milliseconds that every stream would wait for. */
    size_t least = mn_tok_min_tokens(model->tok, r->p.prompt_len, true);
    if (least >= model->hp.n_ctx) {
        mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt is %zu bytes, at least %zu tokens; the model's context is %u",
                    r->p.prompt_len, least, model->hp.n_ctx);
        return answer(e, r);
    }
    if (mn_tok_encode(model->tok, r->p.prompt, r->p.prompt_len, true, &r->toks) != MN_OK) {
        mn_req_fail(r, MN_E_INTERNAL, "out of memory while tokenizing the prompt");
        return answer(e, r);
    }
    r->n_prompt = (uint32_t)r->toks.n;
    if (r->toks.n == 0) {
        mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt encodes to no tokens");
        return answer(e, r);
    }
    if (r->toks.n >= model->hp.n_ctx) {
        mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt is %zu tokens; the model's context is %u", r->toks.n,
                    model->hp.n_ctx);
        return answer(e, r);
    }
    uint64_t longest = r->toks.n + (uint64_t)r->p.max_tokens;
    if (longest > model->hp.n_ctx)
        longest = model->hp.n_ctx;
    if (mn_kv_blocks_for(e->be->kv, (uint32_t)longest) > e->be->kv->n_blocks) {
        mn_req_fail(r, MN_E_INVALID_REQUEST, "prompt + max_tokens need %u KV blocks; the server has %u",
                    mn_kv_blocks_for(e->be->kv, (uint32_t)longest), e->be->kv->n_blocks);
        return answer(e, r);
    }
    mn_sampler_params sp = {r->p.temperature, r->p.top_p, r->p.seed};
    if (mn_sampler_new(model->hp.n_vocab, &sp, &r->smp) != MN_OK) {
        mn_req_fail(r, MN_E_INTERNAL, "out of memory for the sampler");
        return answer(e, r);
    }
    e->stats.prompt_tokens += r->n_prompt;
    r->stage = MN_REQ_QUEUED;
    r->msg.type = MN_MSG_ENQUEUE;
    mn_mailbox_post(e->kvmem_mb, &r->msg);
}
