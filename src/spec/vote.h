/* vote.h - the majority-voted token tree (Minions, section 3.2): merge the drafters' proposals for
 * one sequence into a token tree and walk it by weighted majority.
 *
 * The tree: the root stands for the sequence so far; drafter i's proposal drafts[i][0..lens[i]) is a
 * path from the root, and proposals that share a prefix share its nodes. A node's weight is the sum
 * of the weights of the drafters whose proposal passes through it (ends at it or goes on below it).
 *
 * The walk: from the root, step to the child with the largest weight, until a node has no child.
 * That node ends at least one proposal, so the voted path is always one drafter's whole proposal;
 * that drafter is the voted drafter (the one whose q the classic acceptance rule would use).
 *
 * Rules a caller may rely on (all deterministic functions of drafts, lens and weights):
 *  - Ties between children go to the child whose lowest-indexed supporter has the lower index, i.e.
 *    the drafter order is the priority order (list the best drafter first). Weights are compared
 *    exactly; sums are accumulated in drafter order, so equal inputs give equal sums.
 *  - A proposal that ends is no vote to stop: the walk goes on while any longer proposal agrees with
 *    the path so far, as in the paper (the voted path ends at a leaf). Drafting one more token costs
 *    one verified position and greedy acceptance can only gain from it.
 *  - A drafter that proposes nothing (lens[i] == 0) has no say at any level.
 *  - When several drafters proposed exactly the voted path, the voted drafter is the heaviest of
 *    them, the lowest index among equals.
 *  - When every proposal is empty there is no voted drafter (MN_VOTE_NONE) and the path is empty.
 *
 * Cost: O(L * B) to build, L = sum of lens, B = the largest number of children of one node
 * (<= n_drafters); O(L) to walk. No allocation: the nodes live in caller scratch.
 * Thread: pure functions over the caller's arrays; any thread, no shared state.
 */
#ifndef MN_VOTE_H
#define MN_VOTE_H

#include <stdbool.h>
#include <stdint.h>

#include "util/status.h"

#define MN_VOTE_NONE UINT32_MAX  /* "no drafter" in drafter fields and results */
#define MN_VOTE_NIL UINT32_MAX   /* "no node" in the tree's links */

/* One node of the tree. The layout is public so that callers can size scratch and tests can read
 * the tree; only mn_vote_build writes it. Node 0 is the root. */
typedef struct mn_vote_node {
    int32_t token;          /* the drafted token this node stands for; -1 at the root */
    uint32_t depth;         /* 0 at the root, 1 for a proposal's first token */
    uint32_t first_child;   /* index of the first child, MN_VOTE_NIL when a leaf */
    uint32_t next_sibling;  /* next child of the same parent, MN_VOTE_NIL at the end; siblings are
                             * in creation order, which is the order of their first supporter */
    uint32_t first_drafter; /* lowest index of a drafter passing through (the tie-break key) */
    uint32_t n_drafters;    /* drafters passing through (the plain, unweighted majority) */
    uint32_t end_drafter;   /* heaviest drafter whose proposal ends here, MN_VOTE_NONE if none */
    float weight;           /* sum of the weights of the drafters passing through */
} mn_vote_node;

/* What the vote chose for one sequence. */
typedef struct mn_vote_result {
    uint32_t drafter;       /* the voted drafter, MN_VOTE_NONE when every proposal was empty */
    uint32_t len;           /* tokens on the voted path: lens[drafter], 0 when none */
    const int32_t *tokens;  /* borrowed: drafts[drafter] (valid while the caller's draft is), NULL
                             * when none; the voted path is exactly this drafter's proposal */
    float weight;           /* weight of the voted path's last node: the drafters that back all of it */
} mn_vote_result;

/* Nodes needed for these proposals: 1 (the root) + the sum of lens. A bound good for every vote is
 * 1 + n_drafters * max_len, so an actor sizes its scratch once at start-up. */
uint32_t mn_vote_nodes_needed(const uint32_t *lens, uint32_t n_drafters);

/* Build the tree of n_drafters proposals into nodes[0..cap): drafts[i] has lens[i] tokens (drafts[i]
 * may be NULL when lens[i] is 0), weights[i] is drafter i's weight (finite, >= 0). On MN_OK
 * *n_nodes is the node count and nodes[] holds the tree; the caller owns everything, nothing is
 * kept. Fails with MN_INVALID (message in err, nodes untouched) when cap < mn_vote_nodes_needed, a
 * weight is negative or not finite, or a non-empty proposal is NULL. n_drafters may be 0. */
mn_status mn_vote_build(mn_vote_node *nodes, uint32_t cap, const int32_t *const *drafts,
                        const uint32_t *lens, const float *weights, uint32_t n_drafters,
                        uint32_t *n_nodes, mn_err *err);

/* The weighted-majority walk over a tree built by mn_vote_build: the index of the node where it
 * stops (0, the root, when every proposal was empty). Cannot fail. */
uint32_t mn_vote_walk(const mn_vote_node *nodes, uint32_t n_nodes);

/* Build and walk in one call: the actor's per-sequence, per-step entry point. scratch[0..cap) is
 * caller-owned and overwritten; *out borrows drafts[out->drafter]. Errors as mn_vote_build; on
 * failure *out is the empty result (MN_VOTE_NONE, 0, NULL, 0). */
mn_status mn_vote(const int32_t *const *drafts, const uint32_t *lens, const float *weights,
                  uint32_t n_drafters, mn_vote_node *scratch, uint32_t cap, mn_vote_result *out,
                  mn_err *err);

/* Which drafters draft for one sequence this round (bit i: drafter i), of the enabled ones. All of
 * them when skip_below <= 0. Otherwise a costly drafter (bit set in `costly`: it runs a model)
 * whose weight is below skip_below x the best enabled weight sits the round out: its proposal
 * could hardly win the vote, and on the CPU every model drafter's passes add to the round's time;
 * drafters that cost nothing always draft. `round` is the caller's round clock: every
 * MN_VOTE_EXPLORE_EVERY-th round (round % MN_VOTE_EXPLORE_EVERY == MN_VOTE_EXPLORE_EVERY - 1) asks
 * one of the drafters sitting out, in turn (the k-th lowest index, k = round /
 * MN_VOTE_EXPLORE_EVERY mod their count), so that a skipped drafter keeps being judged and can win
 * its weight back when the text moves to its domain. The voter passes its own clock (one for the
 * round, backed off as mn_vote_explore_gap says), so a drafter explored in a round drafts for every
 * sequence in it, in one shared pass.
 * Until 2026-11-29 each sequence kept its own count, its first round asked all, and every 8th asked
 * all those sitting out at once: three model drafts then each caught up and drafted the whole length
 * to be outvoted, and with 16 clients some sequence was at such a round in most rounds. Every 8th
 * round of the voter's, with the cascade, still cost a fifth of a step on average with one client:
 * the explored drafter catches up on every token since its last turn and drafts the whole length
 * (a round of 318 us against a step of 198 on devil). Every 32nd served 1.04-1.27x as fast
 * (docs/speculation.md, "The vote and the weights"); a drafter sitting out is judged that much
 * less often. */
#define MN_VOTE_EXPLORE_EVERY 32
/* The exploring rounds back off while the model drafts sit out everywhere: the rounds from one to
 * the next are MN_VOTE_EXPLORE_EVERY after a stretch in which some request drafted with the models
 * (the tuner found they pay there), else twice the stretch before, up to MN_VOTE_EXPLORE_MAX. With
 * one client on kjv, web or devil the n-gram drafter carries the vote and the models sit out; their
 * exploring rounds, each catching a model drafter up on every token since its last turn, took 5% of
 * the run (rounds of 400-2,800 us against 4 us for the others). The voter's clock runs so that
 * mn_vote_exploring and mn_vote_turn see every exploring round as the MN_VOTE_EXPLORE_EVERY-th. */
#define MN_VOTE_EXPLORE_MAX (8 * MN_VOTE_EXPLORE_EVERY)
static inline uint32_t mn_vote_explore_gap(uint32_t last_gap, bool models_drafted)
{
    if (models_drafted || last_gap < MN_VOTE_EXPLORE_EVERY)
        return MN_VOTE_EXPLORE_EVERY;
    return last_gap < MN_VOTE_EXPLORE_MAX / 2 ? 2 * last_gap : MN_VOTE_EXPLORE_MAX;
}
/* Whether round `round` of that clock explores. */
static inline bool mn_vote_exploring(uint32_t round)
{
    return round % MN_VOTE_EXPLORE_EVERY == MN_VOTE_EXPLORE_EVERY - 1;
}
/* Of the drafters in `candidates` (a mask), the one whose turn it is in round `round` (its bit): the
 * k-th lowest index, k = round / MN_VOTE_EXPLORE_EVERY mod their count; 0 when there is none. */
uint32_t mn_vote_turn(uint32_t candidates, uint32_t round);
uint32_t mn_vote_ask(const float *weights, uint32_t enabled, uint32_t costly, float skip_below, uint32_t round,
                     uint32_t n_drafters);

#endif
