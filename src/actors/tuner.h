/* tuner.h - the tuner actor: owns the speculation length (spec.length, tuner.*) and, in adaptive
 * mode, chooses it per batch size from the verifier's measurements (spec/tuner.h).
 *
 * The verifier reports every verification step whose shape the length decides (MN_MSG_MEASURED:
 * batch, s, seconds, tokens); the tuner feeds them to the rule and, when a class's s changes, tells
 * the verifier (MN_SET_SPEC_LENGTH with the class in `index`). In fixed mode every class runs at
 * spec.length and measurements only fill the curves shown in stats. Setting spec.length (or
 * switching to adaptive) restarts every class at that length. spec.length 0 turns speculation off
 * in either mode: the adaptive tuner starts from a positive length only. Each decision goes to
 * on_event (the engine publishes it on the --events socket) and to the debug log.
 *
 * Messages in: MEASURED (mn_measure), SET (MN_SET_SPEC_LENGTH, MN_SET_TUNER), STATS. Out: SET to the
 * verifier.
 * Thread: the engine's loop.
 */
#ifndef MN_TUNER_ACTOR_H
#define MN_TUNER_ACTOR_H

#include "actors/msg.h"

typedef struct mn_tuner_actor_config {
    mn_tuner_mode mode;
    mn_tuner_params params;
    uint32_t spec_length;        /* the fixed length and adaptive's start */
    void (*on_event)(void *owner, const char *json_line); /* may be NULL */
    void *owner;
    const mn_addr *addr;         /* borrowed */
} mn_tuner_actor_config;

typedef struct mn_tuner_actor mn_tuner_actor;

mn_status mn_tuner_actor_new(const mn_tuner_actor_config *cfg, mn_tuner_actor **out, mn_err *err);
/* Posts the verifier its starting lengths (spec.length, within the bounds when adaptive): once, when
 * every actor is built (the setting messages are the verifier's to free, and a failed start-up
 * frees no mailbox's messages). */
void mn_tuner_actor_start(mn_tuner_actor *t);
void mn_tuner_actor_handle(void *tuner, mn_msg *m);
void mn_tuner_actor_free(mn_tuner_actor *t);

#endif
