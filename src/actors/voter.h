/* voter.h - the voter actor: fans a round out to the drafters, merges their proposals by weighted
 * majority (spec/vote.h) and learns each drafter's weight from the target's verdicts
 * (spec/weights.h).
 *
 * A round (MN_MSG_DRAFT from the verifier) goes to every enabled drafter as a part; when the last
 * part is back, each request's proposals made at its current length form a token tree, and the
 * heaviest path, by the weights spec.weights selects, becomes its draft (spec.vtoks[1..], n_draft,
 * voted); the round goes back to the verifier (MN_MSG_VOTED). Drafters are listed in command-line
 * order, which is the tie-break order. With spec.skip_below > 0, a model drafter far lighter than a
 * request's best drafter sits that request's round out (spec.ask), but for an exploring round, in
 * turn (mn_vote_ask in spec/vote.h). Every model drafter sits out a request whose model length the
 * tuner set to 0 (spec.len[MN_TUNER_COSTLY]), but for one such request an exploring round, which
 * asks one model drafter, in turn, for one token (ask_mask). Exploring rounds come every
 * MN_VOTE_EXPLORE_EVERY rounds, backing off to every MN_VOTE_EXPLORE_MAX while no request drafts
 * with the models (mn_vote_explore_gap).
 * With spec.cascade (the default) a round goes out in two steps: first to the drafters that run no
 * model (the n-gram one), then to the model drafters for the requests those proposed nothing for;
 * a request with a free proposal is voted on it alone. The vote chose a draft of about the same
 * length either way, and on two cores every model drafter's pass is paid for in turn
 * (docs/speculation.md, "The cascade").
 *
 * Learning: a vote is judged when the request next comes through the voter, i.e. at its next round
 * or when the verifier hands it back (MN_MSG_RELEASE passes through here on its way to kvmem), so
 * every vote is judged exactly once, after its verification, while the request is alive. Every
 * drafter that proposed is judged on its own proposal (its agreeing prefix with the tokens the
 * target kept), in the sequence's weights and in the global ones. Each reward or punishment of a
 * global weight, and each finished request's speculation summary, goes to on_event (the engine
 * publishes it on the --events socket) and to the debug log.
 *
 * Messages in: DRAFT (mn_round), PROPOSED (mn_round_part), RELEASE (mn_req), SET, STATS. Out: DRAFT
 * parts to the drafters, VOTED to the verifier, RELEASE to release_to.
 * Thread: the engine's loop.
 */
#ifndef MN_VOTER_H
#define MN_VOTER_H

#include "actors/msg.h"
#include "actors/request.h"

typedef void (*mn_voter_event_fn)(void *owner, const char *json_line);

typedef struct mn_voter_config {
    uint32_t n_drafters;         /* 1..MN_MAX_DRAFTERS */
    const char *const *names;    /* borrowed: [n_drafters] */
    mn_weights_params params;    /* the weight rule */
    mn_weights_mode mode;        /* spec.weights */
    float skip_below;            /* spec.skip_below: see ask_mask in voter.c; 0: every drafter, every round */
    bool cascade;                /* spec.cascade: the costly drafters draft only where the others did not */
    uint32_t costly;             /* bit i: drafter i runs a model (the n-gram drafter does not) */
    mn_voter_event_fn on_event;  /* an event as a JSON object (no newline); may be NULL */
    void *owner;
    const mn_addr *addr;         /* borrowed */
    mn_mailbox *release_to;      /* borrowed: where a released request goes on: the n-gram drafter (it
                                  * learns from finished ones, then passes them to kvmem) or kvmem */
} mn_voter_config;

typedef struct mn_voter mn_voter;

mn_status mn_voter_new(const mn_voter_config *cfg, mn_voter **out, mn_err *err);
void mn_voter_handle(void *voter, mn_msg *m);
void mn_voter_free(mn_voter *v);

const char *mn_weights_mode_name(mn_weights_mode m);
/* "sequence", "global", "fixed" -> mode; -1 when unknown. */
int mn_weights_mode_parse(const char *name);

#endif
