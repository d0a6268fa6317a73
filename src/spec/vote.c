/* vote.c - token tree and weighted-majority walk.
 *
 * Invariants of a built tree: node 0 is the root; every other node's depth is its parent's + 1;
 * a node's weight and n_drafters count exactly the non-empty proposals through it; siblings are in
 * creation order, and since drafters are inserted in index order that is ascending first_drafter,
 * so "first child seen with the largest weight" is the documented tie-break.
 */
#include "spec/vote.h"

#include <math.h>

uint32_t mn_vote_nodes_needed(const uint32_t *lens, uint32_t n_drafters)
{
    uint64_t n = 1;
    for (uint32_t i = 0; i < n_drafters; i++)
        n += lens[i];
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

static void node_init(mn_vote_node *nd, int32_t token, uint32_t depth, uint32_t first_drafter)
{
    nd->token = token;
    nd->depth = depth;
    nd->first_child = MN_VOTE_NIL;
    nd->next_sibling = MN_VOTE_NIL;
    nd->first_drafter = first_drafter;
    nd->n_drafters = 0;
    nd->end_drafter = MN_VOTE_NONE;
    nd->weight = 0.0f;
}

/* The child of `parent` that stands for `token`, made (appended after the last sibling) when
 * missing. Capacity was checked up front, so *n_nodes never passes it. */
static uint32_t child_for(mn_vote_node *nodes, uint32_t *n_nodes, uint32_t parent, int32_t token,
                          uint32_t drafter)
{
    uint32_t last = MN_VOTE_NIL;
    for (uint32_t c = nodes[parent].first_child; c != MN_VOTE_NIL; c = nodes[c].next_sibling) {
        if (nodes[c].token == token)
            return c;
        last = c;
    }
    uint32_t c = (*n_nodes)++;
    node_init(&nodes[c], token, nodes[parent].depth + 1, drafter);
    if (last == MN_VOTE_NIL)
        nodes[parent].first_child = c;
    else
        nodes[last].next_sibling = c;
    return c;
}

mn_status mn_vote_build(mn_vote_node *nodes, uint32_t cap, const int32_t *const *drafts,
                        const uint32_t *lens, const float *weights, uint32_t n_drafters,
                        uint32_t *n_nodes, mn_err *err)
{
    for (uint32_t i = 0; i < n_drafters; i++) {
        if (!isfinite(weights[i]) || weights[i] < 0.0f)
            return mn_fail(err, MN_INVALID, "vote: drafter %u has weight %g (want finite, >= 0)", i,
                           (double)weights[i]);
        if (lens[i] > 0 && !drafts[i])
            return mn_fail(err, MN_INVALID, "vote: drafter %u has %u tokens but no array", i, lens[i]);
    }
    uint32_t need = mn_vote_nodes_needed(lens, n_drafters);
    if (!nodes || cap < need)
        return mn_fail(err, MN_INVALID, "vote: %u tree nodes needed, scratch holds %u", need,
                       nodes ? cap : 0);

    uint32_t n = 1;
    node_init(&nodes[0], -1, 0, MN_VOTE_NONE);
    for (uint32_t i = 0; i < n_drafters; i++) {
        if (lens[i] == 0)
            continue; /* no proposal, no say */
        float w = weights[i];
        uint32_t cur = 0;
        if (nodes[0].first_drafter == MN_VOTE_NONE)
            nodes[0].first_drafter = i;
        nodes[0].weight += w;
        nodes[0].n_drafters++;
        for (uint32_t d = 0; d < lens[i]; d++) {
            cur = child_for(nodes, &n, cur, drafts[i][d], i);
            nodes[cur].weight += w;
            nodes[cur].n_drafters++;
        }
        uint32_t e = nodes[cur].end_drafter;
        if (e == MN_VOTE_NONE || w > weights[e]) /* strict: the lower index keeps a tie */
            nodes[cur].end_drafter = i;
    }
    *n_nodes = n;
    return MN_OK;
}

uint32_t mn_vote_walk(const mn_vote_node *nodes, uint32_t n_nodes)
{
    uint32_t cur = 0;
    if (n_nodes == 0)
        return 0;
    while (nodes[cur].first_child != MN_VOTE_NIL) {
        uint32_t best = nodes[cur].first_child;
        for (uint32_t c = nodes[best].next_sibling; c != MN_VOTE_NIL; c = nodes[c].next_sibling)
            if (nodes[c].weight > nodes[best].weight) /* strict: earlier sibling wins a tie */
                best = c;
        cur = best;
    }
    return cur;
}

mn_status mn_vote(const int32_t *const *drafts, const uint32_t *lens, const float *weights,
                  uint32_t n_drafters, mn_vote_node *scratch, uint32_t cap, mn_vote_result *out,
                  mn_err *err)
{
    uint32_t n_nodes = 0;
    *out = (mn_vote_result){.drafter = MN_VOTE_NONE, .len = 0, .tokens = NULL, .weight = 0.0f};
    mn_status st = mn_vote_build(scratch, cap, drafts, lens, weights, n_drafters, &n_nodes, err);
    if (st != MN_OK)
        return st;
    uint32_t leaf = mn_vote_walk(scratch, n_nodes);
    if (leaf == 0)
        return MN_OK; /* every proposal was empty */
    uint32_t d = scratch[leaf].end_drafter; /* a leaf always ends some proposal */
    out->drafter = d;
    out->len = lens[d];
    out->tokens = drafts[d];
    out->weight = scratch[leaf].weight;
    return MN_OK;
}

uint32_t mn_vote_ask(const float *weights, uint32_t enabled, uint32_t costly, float skip_below, uint32_t round,
                     uint32_t n_drafters)
{
    if (skip_below <= 0)
        return enabled;
    float best = 0;
    for (uint32_t i = 0; i < n_drafters; i++)
        if (enabled >> i & 1)
            best = weights[i] > best ? weights[i] : best;
    uint32_t ask = 0;
    for (uint32_t i = 0; i < n_drafters; i++)
        if ((enabled >> i & 1) && (!(costly >> i & 1) || weights[i] >= skip_below * best))
            ask |= 1u << i;
    return mn_vote_exploring(round) ? ask | mn_vote_turn(enabled & ~ask, round) : ask;
}

uint32_t mn_vote_turn(uint32_t candidates, uint32_t round)
{
    if (!candidates)
        return 0;
    uint32_t k = round / MN_VOTE_EXPLORE_EVERY % (uint32_t)__builtin_popcount(candidates);
    while (k--)
        candidates &= candidates - 1;
    return candidates & -candidates;
}
