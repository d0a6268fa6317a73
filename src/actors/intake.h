/* intake.h - the intake actor: checks a parsed request against the model, tokenizes its prompt,
 * creates its sampler and sizes its KV reservation, then hands it to kvmem (MN_MSG_ENQUEUE), or
 * ends it at once with an error (MN_MSG_DONE to the client actor).
 *
 * Messages in: MN_MSG_ADMIT (mn_req), MN_MSG_STATS. Out: ENQUEUE to kvmem, DONE to client.
 * Thread: the engine's loop.
 */
#ifndef MN_INTAKE_H
#define MN_INTAKE_H

#include "actors/msg.h"
#include "actors/request.h"
#include "model/model.h"

typedef struct mn_intake_config {
    const mn_model *model;       /* borrowed */
    uint32_t kv_block_size;      /* the target's KV pool geometry */
    uint32_t kv_blocks;
    uint32_t n_drafters;         /* 0: no speculation */
    const mn_addr *addr;         /* borrowed: the mailboxes */
} mn_intake_config;

typedef struct mn_intake mn_intake;

mn_status mn_intake_new(const mn_intake_config *cfg, mn_intake **out, mn_err *err);
void mn_intake_handle(void *intake, mn_msg *m);
void mn_intake_free(mn_intake *in);

#endif
