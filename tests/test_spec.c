/* test_spec.c - the speculation algorithms of src/spec/: the voted token tree, weight learning,
 * acceptance rules, the n-gram drafter and the length tuner. Hand-computed cases, plus chi-square tests of the
 * sampling rules that are shown to have power: each one is also run on a deliberately wrong rule,
 * which must fail it. Pure functions; no fixtures, no model. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/sampler.h"
#include "spec/accept.h"
#include "spec/ngram.h"
#include "spec/tuner.h"
#include "spec/vote.h"
#include "spec/weights.h"

#define LEN(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

/* ---------------------------------------------------------------------------------------------- */
/* vote */

static mn_vote_node scratch[64];

static mn_vote_result vote3(const int32_t *const *drafts, const uint32_t *lens, const float *w,
                            uint32_t n)
{
    mn_vote_result r;
    mn_err err = {{0}};
    mn_status st = mn_vote(drafts, lens, w, n, scratch, LEN(scratch), &r, &err);
    cr_assert_eq(st, MN_OK, "vote: %s", err.msg);
    return r;
}

Test(vote, weighted_majority_differs_from_plain_majority)
{
    /* level 1: all agree on 1. Level 2: A alone says 2 (weight 3), B and C say 4 (1 + 1 = 2). */
    const int32_t a[] = {1, 2, 3}, b[] = {1, 4, 5}, c[] = {1, 4, 6};
    const int32_t *d[] = {a, b, c};
    const uint32_t lens[] = {3, 3, 3};
    const float w[] = {3.0f, 1.0f, 1.0f};
    mn_vote_result r = vote3(d, lens, w, 3);
    cr_assert_eq(r.drafter, 0);
    cr_assert_eq(r.len, 3);
    cr_assert_eq(r.tokens, a);
    cr_assert_float_eq(r.weight, 3.0f, 0.0);

    /* equal weights: the plain majority 4 wins level 2; level 3 ties 5 vs 6 -> lower index, B */
    const float eq[] = {1.0f, 1.0f, 1.0f};
    r = vote3(d, lens, eq, 3);
    cr_assert_eq(r.drafter, 1);
    cr_assert_eq(r.tokens, b);
}

Test(vote, level_majority_can_beat_the_heaviest_drafter)
{
    /* A is the heaviest single drafter, but B and C together outweigh it at level 1 (3 > 2); at
     * level 2 they tie (1.5 each) and B, listed first, wins. */
    const int32_t a[] = {7, 8}, b[] = {9, 1}, c[] = {9, 2};
    const int32_t *d[] = {a, b, c};
    const uint32_t lens[] = {2, 2, 2};
    const float w[] = {2.0f, 1.5f, 1.5f};
    mn_vote_result r = vote3(d, lens, w, 3);
    cr_assert_eq(r.drafter, 1);
    cr_assert_eq(r.len, 2);
    cr_assert_eq(r.tokens[0], 9);
    cr_assert_eq(r.tokens[1], 1);
    cr_assert_float_eq(r.weight, 1.5f, 0.0);
}

Test(vote, tree_shape_and_node_weights)
{
    const int32_t a[] = {1, 2, 3}, b[] = {1, 4, 5}, c[] = {1, 4, 6};
    const int32_t *d[] = {a, b, c};
    const uint32_t lens[] = {3, 3, 3};
    const float w[] = {3.0f, 1.0f, 0.5f};
    uint32_t n = 0;
    mn_err err = {{0}};
    cr_assert_eq(mn_vote_nodes_needed(lens, 3), 10);
    cr_assert_eq(mn_vote_build(scratch, LEN(scratch), d, lens, w, 3, &n, &err), MN_OK);
    /* root, 1, 2, 3, 4, 5, 6: the shared 1 and 4 are merged */
    cr_assert_eq(n, 7);
    cr_assert_float_eq(scratch[0].weight, 4.5f, 0.0);
    cr_assert_eq(scratch[0].n_drafters, 3);
    uint32_t one = scratch[0].first_child;
    cr_assert_eq(scratch[one].token, 1);
    cr_assert_eq(scratch[one].next_sibling, MN_VOTE_NIL);
    cr_assert_float_eq(scratch[one].weight, 4.5f, 0.0);
    uint32_t two = scratch[one].first_child, four = scratch[two].next_sibling;
    cr_assert_eq(scratch[two].token, 2);
    cr_assert_eq(scratch[four].token, 4);
    cr_assert_eq(scratch[four].depth, 2);
    cr_assert_float_eq(scratch[four].weight, 1.5f, 0.0);
    cr_assert_eq(scratch[four].n_drafters, 2);
    cr_assert_eq(scratch[four].first_drafter, 1);
    cr_assert_eq(scratch[four].end_drafter, MN_VOTE_NONE);
    uint32_t three = scratch[two].first_child;
    cr_assert_eq(scratch[three].end_drafter, 0);
    cr_assert_eq(scratch[three].first_child, MN_VOTE_NIL);
    cr_assert_eq(mn_vote_walk(scratch, n), three);
}

Test(vote, ties_go_to_the_lower_drafter_index_not_the_token)
{
    const int32_t a[] = {9}, b[] = {3};
    const uint32_t lens[] = {1, 1};
    const float w[] = {1.0f, 1.0f};
    const int32_t *ab[] = {a, b}, *ba[] = {b, a};
    cr_assert_eq(vote3(ab, lens, w, 2).tokens[0], 9);
    cr_assert_eq(vote3(ba, lens, w, 2).tokens[0], 3);
    /* a tie one level down, after a shared first token */
    const int32_t x[] = {5, 8}, y[] = {5, 2};
    const int32_t *xy[] = {x, y};
    const uint32_t l2[] = {2, 2};
    cr_assert_eq(vote3(xy, l2, w, 2).drafter, 0);
    /* a hair more weight flips it */
    const float w2[] = {1.0f, 1.0001f};
    cr_assert_eq(vote3(xy, l2, w2, 2).drafter, 1);
}

Test(vote, proposals_of_different_lengths)
{
    /* A's proposal ends where B's goes on: ending is no vote to stop, so the walk follows B. */
    const int32_t a[] = {1, 2}, b[] = {1, 2, 3, 4};
    const int32_t *d[] = {a, b};
    const uint32_t lens[] = {2, 4};
    const float w[] = {5.0f, 1.0f};
    mn_vote_result r = vote3(d, lens, w, 2);
    cr_assert_eq(r.drafter, 1);
    cr_assert_eq(r.len, 4);
    cr_assert_float_eq(r.weight, 1.0f, 0.0);

    /* the longer one disagrees at level 2 and loses the tie there: the short one is voted */
    const int32_t c[] = {1, 2, 3, 4}, e[] = {1, 5};
    const int32_t *d2[] = {c, e};
    const uint32_t l2[] = {4, 2};
    const float w2[] = {1.0f, 1.0f};
    r = vote3(d2, l2, w2, 2);
    cr_assert_eq(r.drafter, 0);
    cr_assert_eq(r.len, 4);
    const float w3[] = {1.0f, 2.0f};
    r = vote3(d2, l2, w3, 2);
    cr_assert_eq(r.drafter, 1);
    cr_assert_eq(r.len, 2);
}

Test(vote, a_drafter_proposing_nothing_has_no_say)
{
    const int32_t b[] = {4, 5};
    const int32_t *d[] = {NULL, b};
    const uint32_t lens[] = {0, 2};
    const float w[] = {10.0f, 1.0f};
    mn_vote_result r = vote3(d, lens, w, 2);
    cr_assert_eq(r.drafter, 1);
    cr_assert_eq(r.len, 2);
    cr_assert_eq(r.tokens, b);

    const uint32_t none[] = {0, 0};
    r = vote3(d, none, w, 2);
    cr_assert_eq(r.drafter, MN_VOTE_NONE);
    cr_assert_eq(r.len, 0);
    cr_assert_null(r.tokens);
    r = vote3(NULL, NULL, NULL, 0);
    cr_assert_eq(r.drafter, MN_VOTE_NONE);
}

Test(vote, identical_proposals_vote_the_heaviest_lowest_index)
{
    const int32_t a[] = {1, 2}, b[] = {1, 2}, c[] = {1, 2};
    const int32_t *d[] = {a, b, c};
    const uint32_t lens[] = {2, 2, 2};
    const float w[] = {1.0f, 3.0f, 3.0f};
    mn_vote_result r = vote3(d, lens, w, 3);
    cr_assert_eq(r.drafter, 1);
    cr_assert_float_eq(r.weight, 7.0f, 0.0);
}

/* Exploring rounds back off while the model drafts sit out everywhere (each one catches a model
 * drafter up on every token since its last turn), and come back to every MN_VOTE_EXPLORE_EVERY-th
 * round as soon as a request drafts with the models again. */
Test(vote, exploring_backs_off_while_the_models_sit_out)
{
    const uint32_t e = MN_VOTE_EXPLORE_EVERY;
    uint32_t gap = e, seen[5];
    for (int i = 0; i < 5; i++)
        seen[i] = gap = mn_vote_explore_gap(gap, false);
    cr_assert_eq(seen[0], 2 * e);
    cr_assert_eq(seen[1], 4 * e);
    cr_assert_eq(seen[2], 8 * e);
    cr_assert_eq(seen[3], MN_VOTE_EXPLORE_MAX, "bounded");
    cr_assert_eq(seen[4], MN_VOTE_EXPLORE_MAX);
    cr_assert_eq(mn_vote_explore_gap(MN_VOTE_EXPLORE_MAX, true), e, "the models drafted: at once");
    cr_assert_eq(mn_vote_explore_gap(2 * e, true), e);
    cr_assert_eq(mn_vote_explore_gap(0, false), e, "never below the base");
}

/* Who drafts: drafters 0-2 cost (models), 3 does not (n-gram). The light models sit out but for
 * every MN_VOTE_EXPLORE_EVERY-th round of the clock, where one of them drafts, each in turn. */
Test(vote, ask_skips_light_models_and_explores_them_in_turn)
{
    const float w[4] = {0.05f, 2.0f, 0.1f, 4.0f}; /* 0 and 2 under 0.25 x 4: sitting out */
    const uint32_t all = 0xf, costly = 0x7, always = 0x2 | 0x8, e = MN_VOTE_EXPLORE_EVERY;
    for (uint32_t r = 0; r < e - 1; r++)
        cr_assert_eq(mn_vote_ask(w, all, costly, 0.25f, r, 4), always, "round %u", r);
    cr_assert_eq(mn_vote_ask(w, all, costly, 0.25f, e - 1, 4), always | 0x1, "round e - 1: the first sitting out");
    cr_assert_eq(mn_vote_ask(w, all, costly, 0.25f, e, 4), always, "round e");
    cr_assert_eq(mn_vote_ask(w, all, costly, 0.25f, 2 * e - 1, 4), always | 0x4, "round 2e - 1: the next");
    cr_assert_eq(mn_vote_ask(w, all, costly, 0.25f, 3 * e - 1, 4), always | 0x1, "round 3e - 1: the first again");
    cr_assert_eq(mn_vote_ask(w, all, costly, 0, 5, 4), all, "skip_below 0: all, always");
    cr_assert_eq(mn_vote_ask(w, 0x3, costly, 0.25f, 5, 4), 0x2, "the best among the enabled sets the bar: 0 sits out");
    cr_assert_eq(mn_vote_ask(w, 0xb, costly, 0.25f, 3, 4), 0xa, "disabled drafters are never asked");
    const float even[4] = {1, 1, 1, 1};
    cr_assert_eq(mn_vote_ask(even, all, costly, 0.25f, e - 1, 4), all, "nobody sits out: nothing to explore");
}

/* The rotation: the k-th of the candidates (lowest index first), k = round / e mod their count. */
Test(vote, turn_rotates_over_the_candidates)
{
    const uint32_t e = MN_VOTE_EXPLORE_EVERY;
    cr_assert_eq(mn_vote_turn(0xb, e - 1), 0x1);
    cr_assert_eq(mn_vote_turn(0xb, e), 0x2, "the clock's next stretch: the next one");
    cr_assert_eq(mn_vote_turn(0xb, 2 * e + 5), 0x8);
    cr_assert_eq(mn_vote_turn(0xb, 3 * e), 0x1, "and round again");
    cr_assert_eq(mn_vote_turn(0, 7), 0, "no candidate");
}

Test(vote, refuses_bad_input)
{
    const int32_t a[] = {1, 2, 3}, b[] = {4, 5};
    const int32_t *d[] = {a, b};
    const uint32_t lens[] = {3, 2};
    const float w[] = {1.0f, 1.0f};
    mn_vote_result r;
    mn_err err = {{0}};
    /* 1 + 3 + 2 = 6 nodes are needed */
    cr_assert_eq(mn_vote(d, lens, w, 2, scratch, 5, &r, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "6 tree nodes"), "%s", err.msg);
    cr_assert_eq(r.drafter, MN_VOTE_NONE);
    cr_assert_eq(mn_vote(d, lens, w, 2, scratch, 6, &r, &err), MN_OK);
    const float neg[] = {1.0f, -0.5f}, nan_w[] = {NAN, 1.0f}, inf_w[] = {1.0f, INFINITY};
    cr_assert_eq(mn_vote(d, lens, neg, 2, scratch, 64, &r, &err), MN_INVALID);
    cr_assert_eq(mn_vote(d, lens, nan_w, 2, scratch, 64, &r, &err), MN_INVALID);
    cr_assert_eq(mn_vote(d, lens, inf_w, 2, scratch, 64, &r, &err), MN_INVALID);
    const int32_t *holes[] = {a, NULL};
    cr_assert_eq(mn_vote(holes, lens, w, 2, scratch, 64, &r, &err), MN_INVALID);
}

/* ---------------------------------------------------------------------------------------------- */
/* weights */

/* Parameters whose arithmetic is exact in binary floating point. */
static mn_weights_params exact_params(uint32_t window)
{
    return (mn_weights_params){
        .window = window,
        .reward_threshold = 0.5f,
        .punish_threshold = 0.25f,
        .reward_factor = 2.0f,
        .punish_factor = 0.5f,
        .min_weight = 0.25f,
        .max_weight = 4.0f,
    };
}

Test(weights, defaults_are_valid_and_documented)
{
    mn_weights_params p = mn_weights_defaults();
    cr_assert_eq(mn_weights_check(&p, NULL), MN_OK);
    cr_assert_eq(p.window, 16);
    cr_assert_float_eq(p.reward_threshold, 0.6f, 0.0);
    cr_assert_float_eq(p.punish_threshold, 0.3f, 0.0);
    cr_assert_float_eq(p.reward_factor, 1.1f, 0.0);
    cr_assert_float_eq(p.punish_factor, 0.8f, 0.0);
    cr_assert_float_eq(p.min_weight, 0.0625f, 0.0);
    cr_assert_float_eq(p.max_weight, 16.0f, 0.0);
}

Test(weights, refuses_bad_parameters)
{
    mn_err err = {{0}};
    mn_weights_params base = mn_weights_defaults(), p;
#define BAD(field, value)                                                            \
    do {                                                                             \
        p = base;                                                                    \
        p.field = value;                                                             \
        cr_assert_eq(mn_weights_check(&p, &err), MN_INVALID, #field " = " #value); \
    } while (0)
    BAD(window, 0);
    BAD(window, MN_WEIGHTS_WINDOW_MAX + 1);
    BAD(punish_threshold, 0.7f);
    BAD(reward_threshold, NAN);
    BAD(reward_factor, 0.9f);
    BAD(punish_factor, 0.0f);
    BAD(punish_factor, 1.5f);
    BAD(min_weight, 0.0f);
    BAD(min_weight, 2.0f);
    BAD(max_weight, 0.5f);
    BAD(max_weight, INFINITY);
    BAD(max_weight, 3e38f); /* five drafters at it sum to inf: a tie a minority would win */
#undef BAD
    mn_weights w;
    cr_assert_eq(mn_weights_init(&w, 0, &base, &err), MN_INVALID);
    cr_assert_eq(mn_weights_init(&w, MN_WEIGHTS_MAX_DRAFTERS + 1, &base, &err), MN_INVALID);
    cr_assert_eq(mn_weights_init(&w, MN_WEIGHTS_MAX_DRAFTERS, &base, &err), MN_OK);
}

Test(weights, rate_is_the_verdict_on_the_drafters_own_proposal)
{
    /* The voted draft was 10 11 12 13; the target kept 10 and then said 20. */
    const int32_t kept[] = {10, 20};
    const int32_t voted[] = {10, 11, 12, 13}, other[] = {10, 20, 30, 40}, shorter[] = {10, 11},
                  wrong[] = {5, 6, 7};
    cr_assert_float_eq(mn_weights_rate(voted, 4, kept, 2), 0.25f, 0.0);   /* 1 of 4 */
    cr_assert_float_eq(mn_weights_rate(other, 4, kept, 2), 1.0f, 0.0);    /* agreed with all judged */
    cr_assert_float_eq(mn_weights_rate(shorter, 2, kept, 2), 0.5f, 0.0);
    cr_assert_float_eq(mn_weights_rate(wrong, 3, kept, 2), 0.0f, 0.0);
    cr_assert_float_eq(mn_weights_rate(voted, 1, kept, 2), 1.0f, 0.0);    /* short, all kept */
    /* a fully accepted draft: kept = draft + bonus */
    const int32_t all[] = {10, 11, 12, 13, 14};
    cr_assert_float_eq(mn_weights_rate(voted, 4, all, 5), 1.0f, 0.0);
    cr_assert_lt(mn_weights_rate(voted, 0, kept, 2), 0.0f);
    cr_assert_lt(mn_weights_rate(voted, 4, kept, 0), 0.0f);
}

Test(weights, exact_update_sequence)
{
    mn_weights w;
    mn_weights_params p = exact_params(2);
    cr_assert_eq(mn_weights_init(&w, 1, &p, NULL), MN_OK);
    cr_assert_float_eq(w.w[0], 1.0f, 0.0);
    cr_assert_lt(mn_weights_acr(&w, 0), 0.0f);
    static const struct {
        float rate, acr, weight;
        mn_weights_verdict v;
    } steps[] = {
        {1.0f, 1.0f, 2.0f, MN_WEIGHTS_REWARD},
        {1.0f, 1.0f, 4.0f, MN_WEIGHTS_REWARD},
        {1.0f, 1.0f, 4.0f, MN_WEIGHTS_REWARD},     /* 8 clamped to max_weight */
        {0.0f, 0.5f, 4.0f, MN_WEIGHTS_KEEP},       /* 0.5 does not exceed 0.5: strict */
        {0.0f, 0.0f, 2.0f, MN_WEIGHTS_PUNISH},     /* window of 2: the old 1s are gone */
        {0.25f, 0.125f, 1.0f, MN_WEIGHTS_PUNISH},
        {0.5f, 0.375f, 1.0f, MN_WEIGHTS_KEEP},
        {0.0f, 0.25f, 1.0f, MN_WEIGHTS_KEEP},      /* 0.25 is not below 0.25: strict */
        {0.0f, 0.0f, 0.5f, MN_WEIGHTS_PUNISH},
        {0.0f, 0.0f, 0.25f, MN_WEIGHTS_PUNISH},
        {0.0f, 0.0f, 0.25f, MN_WEIGHTS_PUNISH},    /* 0.125 clamped to min_weight */
        {1.0f, 0.5f, 0.25f, MN_WEIGHTS_KEEP},
        {1.0f, 1.0f, 0.5f, MN_WEIGHTS_REWARD},     /* and it climbs back */
    };
    for (uint32_t i = 0; i < LEN(steps); i++) {
        mn_weights_verdict v = mn_weights_observe(&w, 0, steps[i].rate);
        cr_assert_eq(v, steps[i].v, "step %u: verdict %d", i, v);
        cr_assert_float_eq(mn_weights_acr(&w, 0), steps[i].acr, 0.0, "step %u", i);
        cr_assert_float_eq(w.w[0], steps[i].weight, 0.0, "step %u: weight %g", i, (double)w.w[0]);
    }
}

Test(weights, a_mean_on_a_threshold_is_kept_whatever_the_float_rounding)
{
    /* The defaults' thresholds 0.6 and 0.3 as window means of rates a / len: 3 / 10 six times
     * summed in floats gave 0.29999998, under the punish threshold, and 0.6-means came out above
     * the reward one. A mean on a threshold is neither above nor below it. */
    mn_weights w;
    mn_weights_params p = mn_weights_defaults();
    p.window = 16;
    cr_assert_eq(mn_weights_init(&w, 2, &p, NULL), MN_OK);
    for (uint32_t i = 0; i < 14; i++) {
        cr_assert_eq(mn_weights_observe(&w, 0, 3.0f / 10.0f), MN_WEIGHTS_KEEP, "step %u", i);
        float r1 = i < 8 ? 6.0f / 10.0f : (i % 2 ? 8.0f / 10.0f : 4.0f / 10.0f); /* means 0.6 and below */
        cr_assert_eq(mn_weights_observe(&w, 1, r1), MN_WEIGHTS_KEEP, "step %u", i);
    }
    cr_assert_float_eq(w.w[0], 1.0f, 0.0);
    cr_assert_float_eq(w.w[1], 1.0f, 0.0);
    cr_assert_eq(mn_weights_observe(&w, 0, 2.0f / 10.0f), MN_WEIGHTS_PUNISH, "a mean below still punishes");
}

Test(weights, defaults_trajectory)
{
    mn_weights w;
    mn_weights_params p = mn_weights_defaults();
    cr_assert_eq(mn_weights_init(&w, 2, &p, NULL), MN_OK);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(mn_weights_observe(&w, 0, 1.0f), MN_WEIGHTS_REWARD);
    cr_assert_float_eq(w.w[0], 2.5937424f, 1e-5); /* 1.1^10 */
    cr_assert_float_eq(w.w[1], 1.0f, 0.0);        /* drafter 1 untouched */
    for (int i = 0; i < 30; i++)
        mn_weights_observe(&w, 0, 1.0f);
    cr_assert_float_eq(w.w[0], 16.0f, 0.0);       /* the ceiling */
    /* 16 ones in the window: each 0 lowers the ACR by 1/16; it passes below 0.6 on the 7th
     * (9/16 = 0.5625) and below 0.3 on the 12th (4/16 = 0.25) */
    mn_weights_verdict v[16];
    for (int i = 0; i < 16; i++)
        v[i] = mn_weights_observe(&w, 0, 0.0f);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(v[i], MN_WEIGHTS_REWARD, "zero #%d", i + 1);
    for (int i = 6; i < 11; i++)
        cr_assert_eq(v[i], MN_WEIGHTS_KEEP, "zero #%d", i + 1);
    for (int i = 11; i < 16; i++)
        cr_assert_eq(v[i], MN_WEIGHTS_PUNISH, "zero #%d", i + 1);
    cr_assert_float_eq(w.w[0], 16.0f * 0.32768f, 1e-4); /* 0.8^5 */
    for (int i = 0; i < 40; i++)
        mn_weights_observe(&w, 0, 0.0f);
    cr_assert_float_eq(w.w[0], 0.0625f, 0.0);           /* the floor */
}

Test(weights, every_drafter_learns_not_only_the_voted_one)
{
    mn_weights w;
    mn_weights_params p = exact_params(4);
    cr_assert_eq(mn_weights_init(&w, 4, &p, NULL), MN_OK);
    /* voted: 10 11 12 13, target kept 10 20 */
    const int32_t voted[] = {10, 11, 12, 13}, right[] = {10, 20, 30, 40}, half[] = {10, 11};
    const int32_t *d[] = {voted, right, half, NULL};
    const uint32_t lens[] = {4, 4, 2, 0};
    const int32_t kept[] = {10, 20};
    mn_weights_verdict v[4];
    mn_weights_learn(&w, d, lens, kept, 2, v);
    cr_assert_eq(v[0], MN_WEIGHTS_KEEP);    /* 0.25: not below 0.25 */
    cr_assert_eq(v[1], MN_WEIGHTS_REWARD);  /* lost the vote, but was right */
    cr_assert_eq(v[2], MN_WEIGHTS_KEEP);    /* 0.5 */
    cr_assert_eq(v[3], MN_WEIGHTS_ABSTAIN); /* proposed nothing */
    cr_assert_float_eq(mn_weights_acr(&w, 0), 0.25f, 0.0);
    cr_assert_float_eq(mn_weights_acr(&w, 1), 1.0f, 0.0);
    cr_assert_float_eq(mn_weights_acr(&w, 2), 0.5f, 0.0);
    cr_assert_lt(mn_weights_acr(&w, 3), 0.0f);
    const float want[] = {1.0f, 2.0f, 1.0f, 1.0f};
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(w.w[i], want[i], 0.0, "drafter %d", i);
    mn_weights_learn(&w, d, lens, kept, 2, NULL);
    cr_assert_float_eq(w.w[0], 1.0f, 0.0); /* window {0.25, 0.25}: 0.25 is still not below 0.25 */
    cr_assert_float_eq(w.w[1], 4.0f, 0.0);
}

Test(weights, abstentions_change_nothing)
{
    mn_weights w;
    mn_weights_params p = exact_params(4);
    cr_assert_eq(mn_weights_init(&w, 2, &p, NULL), MN_OK);
    cr_assert_eq(mn_weights_observe(&w, 0, -1.0f), MN_WEIGHTS_ABSTAIN);
    cr_assert_eq(mn_weights_observe(&w, 0, NAN), MN_WEIGHTS_ABSTAIN);
    cr_assert_eq(mn_weights_observe(&w, 2, 1.0f), MN_WEIGHTS_ABSTAIN);
    cr_assert_eq(w.count[0], 0);
    cr_assert_float_eq(w.w[0], 1.0f, 0.0);
    cr_assert_lt(mn_weights_acr(&w, 2), 0.0f);
}

Test(weights, sequence_level_starts_from_global_and_learns_alone)
{
    mn_weights global, seq;
    mn_weights_params p = exact_params(4);
    cr_assert_eq(mn_weights_init(&global, 3, &p, NULL), MN_OK);
    mn_weights_observe(&global, 0, 1.0f); /* 2 */
    mn_weights_observe(&global, 1, 0.0f); /* 0.5 */
    mn_weights_init_from(&seq, &global);
    cr_assert_eq(seq.n_drafters, 3);
    cr_assert_eq(seq.par.window, 4);
    cr_assert_float_eq(seq.w[0], 2.0f, 0.0);
    cr_assert_float_eq(seq.w[1], 0.5f, 0.0);
    cr_assert_float_eq(seq.w[2], 1.0f, 0.0);
    for (uint32_t i = 0; i < 3; i++)
        cr_assert_lt(mn_weights_acr(&seq, i), 0.0f, "sequence windows start empty");
    /* the sequence's own verdicts move only its weights */
    mn_weights_observe(&seq, 1, 1.0f);
    cr_assert_float_eq(seq.w[1], 1.0f, 0.0);
    cr_assert_float_eq(global.w[1], 0.5f, 0.0);
    /* and the global's later learning does not reach a running sequence */
    mn_weights_observe(&global, 0, 1.0f);
    cr_assert_float_eq(global.w[0], 4.0f, 0.0);
    cr_assert_float_eq(seq.w[0], 2.0f, 0.0);
    /* the global history did not come along: one 0 punishes the sequence's drafter 0 at once */
    cr_assert_eq(mn_weights_observe(&seq, 0, 0.0f), MN_WEIGHTS_PUNISH);
    cr_assert_eq(mn_weights_observe(&global, 0, 0.0f), MN_WEIGHTS_REWARD); /* {1,1,0}: 2/3 */
}

Test(weights, a_sequence_follows_parameters_set_live)
{
    mn_weights g, seq;
    mn_weights_params p = exact_params(2);
    cr_assert_eq(mn_weights_init(&g, 1, &p, NULL), MN_OK);
    mn_weights_init_from(&seq, &g);
    cr_assert_eq(mn_weights_observe(&seq, 0, 1.0f), MN_WEIGHTS_REWARD);
    cr_assert_float_eq(seq.w[0], 2.0f, 0.0);
    p.reward_factor = 1.5f;
    p.window = 1;
    cr_assert_eq(mn_weights_set_params(&g, &p, NULL), MN_OK);
    mn_weights_follow(&seq, &g);
    cr_assert_float_eq(seq.w[0], 2.0f, 0.0, "its weight stays");
    cr_assert_eq(mn_weights_observe(&seq, 0, 1.0f), MN_WEIGHTS_REWARD);
    cr_assert_float_eq(seq.w[0], 3.0f, 0.0, "the new reward_factor: %g", (double)seq.w[0]);
    cr_assert_eq(mn_weights_observe(&seq, 0, 0.0f), MN_WEIGHTS_PUNISH, "the new window of 1");
}

Test(weights, live_window_change_keeps_the_newest_rates)
{
    mn_weights w;
    mn_weights_params p = exact_params(4);
    cr_assert_eq(mn_weights_init(&w, 1, &p, NULL), MN_OK);
    const float rates[] = {0.0f, 0.0f, 0.0f, 1.0f, 1.0f}; /* the first 0 falls out of the window */
    for (uint32_t i = 0; i < LEN(rates); i++)
        mn_weights_observe(&w, 0, rates[i]);
    cr_assert_float_eq(mn_weights_acr(&w, 0), 0.5f, 0.0);
    float before = w.w[0];
    mn_weights_params small = exact_params(2);
    cr_assert_eq(mn_weights_set_params(&w, &small, NULL), MN_OK);
    cr_assert_float_eq(mn_weights_acr(&w, 0), 1.0f, 0.0); /* {1, 1} */
    cr_assert_float_eq(w.w[0], before, 0.0);
    mn_weights_observe(&w, 0, 0.0f);
    cr_assert_float_eq(mn_weights_acr(&w, 0), 0.5f, 0.0); /* {1, 0} */
    mn_weights_params big = exact_params(8);
    cr_assert_eq(mn_weights_set_params(&w, &big, NULL), MN_OK);
    mn_weights_observe(&w, 0, 0.5f);
    cr_assert_float_eq(mn_weights_acr(&w, 0), 0.5f, 0.0); /* {1, 0, 0.5} */
    mn_weights_params bad = exact_params(0);
    cr_assert_eq(mn_weights_set_params(&w, &bad, NULL), MN_INVALID);
    cr_assert_eq(w.par.window, 8);
}

/* ---------------------------------------------------------------------------------------------- */
/* acceptance: deterministic cases */

/* A scripted uniform source: returns u[0], u[1], ... and counts the draws. */
typedef struct script {
    const double *u;
    uint32_t n, at;
} script;

static double scripted(void *ctx)
{
    script *s = ctx;
    cr_assert_lt(s->at, s->n, "rule drew more uniforms than scripted");
    return s->u[s->at++];
}

Test(accept, greedy_all_accepted_then_the_bonus_token)
{
    const int32_t draft[] = {5, 6, 7}, argmax[] = {5, 6, 7, 9};
    mn_accept_result r = mn_accept_greedy(draft, 3, argmax);
    cr_assert_eq(r.n_accepted, 3);
    cr_assert_eq(r.next, 9);
}

Test(accept, greedy_stops_at_the_first_mismatch)
{
    const int32_t draft[] = {5, 6, 7};
    const int32_t mid[] = {5, 8, 7, 9}, first[] = {4, 6, 7, 9};
    mn_accept_result r = mn_accept_greedy(draft, 3, mid);
    cr_assert_eq(r.n_accepted, 1);
    cr_assert_eq(r.next, 8); /* the target's own token, even though 7 would match after it */
    r = mn_accept_greedy(draft, 3, first);
    cr_assert_eq(r.n_accepted, 0);
    cr_assert_eq(r.next, 4);
}

Test(accept, greedy_empty_draft_is_plain_decoding)
{
    const int32_t argmax[] = {4};
    mn_accept_result r = mn_accept_greedy(NULL, 0, argmax);
    cr_assert_eq(r.n_accepted, 0);
    cr_assert_eq(r.next, 4);
}

/* The target's scripted draws: row i draws draws[i]; counts the calls and their order. */
/* A sampler over rows of logits: row i of a verification is rows[i]. */
typedef struct sampler_rows {
    mn_sampler *s;
    const float (*rows)[6];
} sampler_rows;

static int32_t coupled_sampler_draw(void *ctx, uint32_t row)
{
    sampler_rows *c = ctx;
    return mn_sampler_next(c->s, c->rows[row]);
}

typedef struct scripted_draws {
    const int32_t *draws;
    uint32_t n, calls;
} scripted_draws;

static int32_t scripted_draw(void *ctx, uint32_t row)
{
    scripted_draws *d = ctx;
    cr_assert_eq(row, d->calls, "rows are drawn in order, once each");
    cr_assert_lt(row, d->n, "the rule drew past the first mismatch");
    d->calls++;
    return d->draws[row];
}

Test(accept, coupled_keeps_the_draft_while_the_target_draws_it)
{
    const int32_t draft[] = {5, 6, 7};
    const int32_t all[] = {5, 6, 7, 9}, mid[] = {5, 8, 7, 9}, none[] = {4, 6, 7, 9};
    scripted_draws d = {all, 4, 0};
    mn_accept_result r = mn_accept_coupled(draft, 3, scripted_draw, &d);
    cr_assert(r.n_accepted == 3 && r.next == 9 && d.calls == 4);
    d = (scripted_draws){mid, 2, 0}; /* drawing row 2 would fail: the rule stops at the mismatch */
    r = mn_accept_coupled(draft, 3, scripted_draw, &d);
    cr_assert(r.n_accepted == 1 && r.next == 8 && d.calls == 2);
    d = (scripted_draws){none, 1, 0};
    r = mn_accept_coupled(draft, 3, scripted_draw, &d);
    cr_assert(r.n_accepted == 0 && r.next == 4 && d.calls == 1);
    d = (scripted_draws){none, 1, 0}; /* no draft: plain decoding's one draw */
    r = mn_accept_coupled(NULL, 0, scripted_draw, &d);
    cr_assert(r.n_accepted == 0 && r.next == 4 && d.calls == 1);
}

/* With a sampler's draws the coupled rule emits exactly what plain sampling with the same seed
 * emits, whatever the draft: the draft only decides how many rows one verification covers. */
Test(accept, coupled_emits_plain_sampling_whatever_the_draft)
{
    enum { V = 6, N = 40 };
    float logits[N][V];
    mn_rng rng;
    mn_rng_seed(&rng, 3);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++)
            logits[i][j] = (float)(4 * mn_rng_uniform(&rng));
    mn_sampler_params sp = {0.9f, 0.95f, 11};
    mn_sampler *plain, *spec;
    cr_assert_eq(mn_sampler_new(V, &sp, &plain), MN_OK);
    cr_assert_eq(mn_sampler_new(V, &sp, &spec), MN_OK);
    int32_t want[N], got[N + 8];
    for (int i = 0; i < N; i++) /* logits[i] stands for the target's row at position i */
        want[i] = mn_sampler_next(plain, logits[i]);
    uint32_t n = 0;
    while (n < N) {
        int32_t draft[4];
        uint32_t nd = n % 5 < 4 ? n % 5 : 0; /* drafts of 0..3 tokens: some right, some wrong */
        if (n + nd >= N)
            nd = N - 1 - n; /* the verification reads rows n .. n + nd */
        for (uint32_t k = 0; k < nd; k++)
            draft[k] = k % 2 == 0 ? want[n + k] : (int32_t)((n + k) % V);
        sampler_rows ctx = {spec, (const float(*)[6])(logits + n)};
        mn_accept_result r = mn_accept_coupled(draft, nd, coupled_sampler_draw, &ctx);
        for (uint32_t k = 0; k < r.n_accepted; k++)
            got[n++] = draft[k];
        got[n++] = r.next;
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(got[i], want[i], "token %d", i);
    mn_sampler_free(plain);
    mn_sampler_free(spec);
}

Test(accept, onehot_scripted_cases)
{
    /* row 0: p = (.5, .25, .25, 0), draft x = 1; row 1 (bonus): all mass on 3 */
    const float p[] = {0.5f, 0.25f, 0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f};
    const int32_t draft[] = {1};
    mn_accept_result r;
    mn_err err = {{0}};

    script acc = {(const double[]){0.2, 0.99}, 2, 0}; /* 0.2 < p(1) = 0.25: accept; bonus -> 3 */
    cr_assert_eq(mn_accept_onehot(draft, 1, p, 4, scripted, &acc, &r, &err), MN_OK);
    cr_assert_eq(r.n_accepted, 1);
    cr_assert_eq(r.next, 3);
    cr_assert_eq(acc.at, 2);

    /* reject; the rest {0: .5, 2: .25} has mass .75; 0.5 * .75 = .375 < .5 -> token 0 */
    script rej0 = {(const double[]){0.3, 0.5}, 2, 0};
    cr_assert_eq(mn_accept_onehot(draft, 1, p, 4, scripted, &rej0, &r, &err), MN_OK);
    cr_assert_eq(r.n_accepted, 0);
    cr_assert_eq(r.next, 0);
    cr_assert_eq(rej0.at, 2, "a rejection draws once more and stops");

    /* 0.9 * .75 = .675 -> past 0 (.5), within 2 (.75); never x = 1, never the empty 3 */
    script rej2 = {(const double[]){0.3, 0.9}, 2, 0};
    cr_assert_eq(mn_accept_onehot(draft, 1, p, 4, scripted, &rej2, &r, &err), MN_OK);
    cr_assert_eq(r.next, 2);
    script top = {(const double[]){0.3, 0.999999}, 2, 0};
    cr_assert_eq(mn_accept_onehot(draft, 1, p, 4, scripted, &top, &r, &err), MN_OK);
    cr_assert_eq(r.next, 2);

    /* rows need not sum exactly to 1: twice the row behaves the same */
    const float p2[] = {1.0f, 0.5f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 3.0f};
    script again = {(const double[]){0.3, 0.5}, 2, 0};
    cr_assert_eq(mn_accept_onehot(draft, 1, p2, 4, scripted, &again, &r, &err), MN_OK);
    cr_assert_eq(r.n_accepted, 0);
    cr_assert_eq(r.next, 0);

    /* empty draft: one draw from row 0 */
    script plain = {(const double[]){0.6}, 1, 0};
    cr_assert_eq(mn_accept_onehot(NULL, 0, p, 4, scripted, &plain, &r, &err), MN_OK);
    cr_assert_eq(r.n_accepted, 0);
    cr_assert_eq(r.next, 1); /* .6 falls in (.5, .75] */
}

Test(accept, onehot_certain_tokens)
{
    /* p(x) = 1 is always kept, p(x) = 0 never, whatever the uniform */
    const float p[] = {0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.5f, 0.5f, 0.0f};
    const int32_t sure[] = {1, 0}, never[] = {1, 1};
    mn_accept_result r;
    script s1 = {(const double[]){0.999999, 0.999999, 0.1}, 3, 0};
    cr_assert_eq(mn_accept_onehot(sure, 2, p, 3, scripted, &s1, &r, NULL), MN_OK);
    cr_assert_eq(r.n_accepted, 2);
    cr_assert_eq(r.next, 0); /* bonus from row 2 = (.5, .5, 0): 0.1 falls on 0 */
    script s2 = {(const double[]){0.0, 0.0, 0.0}, 3, 0};
    cr_assert_eq(mn_accept_onehot(never, 2, p, 3, scripted, &s2, &r, NULL), MN_OK);
    cr_assert_eq(r.n_accepted, 1);
    cr_assert_eq(r.next, 0); /* the only other token with mass */
}

Test(accept, classic_scripted_cases)
{
    /* p = (.5, .5), q = (.75, .25). x = 0: accept with (.5/.75) = 2/3; on rejection the residual
     * max(0, p - q) = (0, .25) puts everything on 1. x = 1: p/q = 2, always accepted. */
    const float p[] = {0.5f, 0.5f, 0.25f, 0.75f};
    const float q[] = {0.75f, 0.25f};
    const int32_t x0[] = {0}, x1[] = {1};
    mn_accept_result r;
    script a = {(const double[]){0.6, 0.5}, 2, 0};
    cr_assert_eq(mn_accept_classic(x0, 1, p, q, 2, scripted, &a, &r, NULL), MN_OK);
    cr_assert_eq(r.n_accepted, 1);
    cr_assert_eq(r.next, 1); /* bonus: 0.5 falls past .25 */
    script b = {(const double[]){0.7, 0.0}, 2, 0};
    cr_assert_eq(mn_accept_classic(x0, 1, p, q, 2, scripted, &b, &r, NULL), MN_OK);
    cr_assert_eq(r.n_accepted, 0);
    cr_assert_eq(r.next, 1);
    script c = {(const double[]){0.999999, 0.1}, 2, 0};
    cr_assert_eq(mn_accept_classic(x1, 1, p, q, 2, scripted, &c, &r, NULL), MN_OK);
    cr_assert_eq(r.n_accepted, 1);
    cr_assert_eq(r.next, 0);
    /* q(x) = 0 with p(x) > 0: the ratio is infinite, accepted */
    const float q0[] = {1.0f, 0.0f};
    script d = {(const double[]){0.999999, 0.1}, 2, 0};
    cr_assert_eq(mn_accept_classic(x1, 1, p, q0, 2, scripted, &d, &r, NULL), MN_OK);
    cr_assert_eq(r.n_accepted, 1);
    /* p(x) = q(x) = 0 with p == q elsewhere: the residual is empty, yet x is impossible: rejected,
     * and the next token drawn from p (0.6 of the mass 1 falls on token 1) */
    const float pz[] = {0.5f, 0.5f, 0.0f, 0.2f, 0.3f, 0.5f}, qz[] = {0.25f, 0.25f, 0.0f};
    const int32_t x2[] = {2};
    script e = {(const double[]){0.5, 0.6}, 2, 0};
    cr_assert_eq(mn_accept_classic(x2, 1, pz, qz, 3, scripted, &e, &r, NULL), MN_OK);
    cr_assert_eq(r.n_accepted, 0);
    cr_assert_eq(r.next, 1);
}

Test(accept, refuses_bad_input)
{
    const float p[] = {0.5f, 0.5f, 0.5f, 0.5f};
    const float zero[] = {0.0f, 0.0f, 0.5f, 0.5f}, negative[] = {1.5f, -0.5f, 0.5f, 0.5f},
                nan_row[] = {NAN, 0.5f, 0.5f, 0.5f};
    const int32_t out_of_range[] = {2}, neg_tok[] = {-1}, ok[] = {0};
    mn_accept_result r;
    mn_err err = {{0}};
    script s = {(const double[]){0.1, 0.1}, 2, 0};
    cr_assert_eq(mn_accept_onehot(out_of_range, 1, p, 2, scripted, &s, &r, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "outside the vocabulary"), "%s", err.msg);
    cr_assert_eq(r.next, -1);
    cr_assert_eq(mn_accept_onehot(neg_tok, 1, p, 2, scripted, &s, &r, &err), MN_INVALID);
    cr_assert_eq(mn_accept_onehot(ok, 1, p, 0, scripted, &s, &r, &err), MN_INVALID);
    cr_assert_eq(mn_accept_onehot(ok, 1, zero, 2, scripted, &s, &r, &err), MN_INVALID);
    cr_assert_eq(mn_accept_onehot(ok, 1, negative, 2, scripted, &s, &r, &err), MN_INVALID);
    cr_assert_eq(mn_accept_onehot(ok, 1, nan_row, 2, scripted, &s, &r, &err), MN_INVALID);
    cr_assert_eq(mn_accept_classic(ok, 1, p, zero, 2, scripted, &s, &r, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "draft row 0"), "%s", err.msg);
    cr_assert_eq(s.at, 0, "nothing is drawn for input that is refused");
}

/* ---------------------------------------------------------------------------------------------- */
/* acceptance: the emitted token is distributed as p (chi-square, with power checks) */

/* splitmix64: a small seeded generator, uniform in [0, 1) with 53 bits. */
static double uniform64(void *ctx)
{
    uint64_t *x = ctx, z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

#define NV 6
#define DRAWS 200000
/* The chi-square statistic with NV - 1 = 5 degrees of freedom exceeds 35.89 with probability 1e-6
 * when the counts really follow p. The seeds are fixed, so each verdict is reproducible; a correct
 * rule fails only if these seeds were a one-in-a-million draw, and the wrong rules below differ
 * from p by so much that their statistics are in the thousands. */
#define CHI2_CRIT 35.89

static const float P6[NV] = {0.05f, 0.10f, 0.15f, 0.20f, 0.20f, 0.30f};
static const float Q6[NV] = {0.30f, 0.20f, 0.20f, 0.15f, 0.10f, 0.05f};

static double chi2(const uint32_t *count, const float *p)
{
    double s = 0.0;
    for (int y = 0; y < NV; y++) {
        double e = (double)DRAWS * p[y], d = count[y] - e;
        s += d * d / e;
    }
    return s;
}

/* One verification of a one-token draft, under some rule; returns the first emitted token. */
typedef int32_t (*rule_fn)(int32_t x, const float *p, const float *q, uint64_t *rng);

static int32_t first_token(mn_accept_result r, int32_t x) { return r.n_accepted ? x : r.next; }

static int32_t rule_onehot(int32_t x, const float *p, const float *q, uint64_t *rng)
{
    (void)q;
    float rows[2 * NV];
    memcpy(rows, p, sizeof(float) * NV);
    memcpy(rows + NV, p, sizeof(float) * NV);
    mn_accept_result r;
    cr_assert_eq(mn_accept_onehot(&x, 1, rows, NV, uniform64, rng, &r, NULL), MN_OK);
    return first_token(r, x);
}

static int32_t rule_classic(int32_t x, const float *p, const float *q, uint64_t *rng)
{
    float rows[2 * NV];
    memcpy(rows, p, sizeof(float) * NV);
    memcpy(rows + NV, p, sizeof(float) * NV);
    mn_accept_result r;
    cr_assert_eq(mn_accept_classic(&x, 1, rows, q, NV, uniform64, rng, &r, NULL), MN_OK);
    return first_token(r, x);
}

static int32_t sample(const float *p, uint64_t *rng)
{
    double u = uniform64(rng), acc = 0.0;
    for (int y = 0; y < NV; y++)
        if (u < (acc += p[y]))
            return y;
    return NV - 1;
}

/* Wrong rule 1: keep the draft token whatever p says. */
static int32_t wrong_always_accept(int32_t x, const float *p, const float *q, uint64_t *rng)
{
    (void)p, (void)q, (void)rng;
    return x;
}

/* Wrong rule 2: the one-hot test, but the replacement is drawn from p with x left in. */
static int32_t wrong_resample_with_x(int32_t x, const float *p, const float *q, uint64_t *rng)
{
    (void)q;
    return uniform64(rng) < p[x] ? x : sample(p, rng);
}

/* Wrong rule 3: the classic test, but the replacement is drawn from p instead of max(0, p - q). */
static int32_t wrong_residual_p(int32_t x, const float *p, const float *q, uint64_t *rng)
{
    return uniform64(rng) * q[x] < p[x] ? x : sample(p, rng);
}

/* Run DRAWS verifications; the draft token is fixed_x, or drawn from q when fixed_x < 0. */
static double run(rule_fn rule, int32_t fixed_x, const float *q, uint64_t seed)
{
    uint32_t count[NV] = {0};
    uint64_t rng = seed;
    for (int i = 0; i < DRAWS; i++) {
        int32_t x = fixed_x >= 0 ? fixed_x : sample(q, &rng);
        int32_t y = rule(x, P6, q, &rng);
        cr_assert(y >= 0 && y < NV);
        count[y]++;
    }
    double c = chi2(count, P6);
    cr_log_info("chi2 = %.2f (seed %llu, x %d)", c, (unsigned long long)seed, fixed_x);
    return c;
}

Test(accept_stats, onehot_emits_p_for_a_fixed_draft_token, .timeout = 10)
{
    for (int32_t x = 0; x < NV; x += 2) {
        double c = run(rule_onehot, x, NULL, 1234 + (uint64_t)x);
        cr_assert_lt(c, CHI2_CRIT, "one-hot, x = %d: chi2 = %.2f", x, c);
    }
}

Test(accept_stats, onehot_test_has_power, .timeout = 10)
{
    double c1 = run(wrong_always_accept, 2, NULL, 1234);
    double c2 = run(wrong_resample_with_x, 2, NULL, 1234);
    cr_assert_gt(c1, CHI2_CRIT, "always-accept passed: chi2 = %.2f", c1);
    cr_assert_gt(c2, CHI2_CRIT, "resample-with-x passed: chi2 = %.2f", c2);
}

Test(accept_stats, onehot_is_exact_for_any_way_of_choosing_x, .timeout = 10)
{
    /* the vote is one such way; here x comes from q, and the output still follows p */
    double c = run(rule_onehot, -1, Q6, 99);
    cr_assert_lt(c, CHI2_CRIT, "one-hot, x ~ q: chi2 = %.2f", c);
}

Test(accept_stats, classic_emits_p_when_x_is_drawn_from_q, .timeout = 10)
{
    double c = run(rule_classic, -1, Q6, 4321);
    cr_assert_lt(c, CHI2_CRIT, "classic: chi2 = %.2f", c);
}

Test(accept_stats, classic_test_has_power, .timeout = 10)
{
    double c1 = run(wrong_always_accept, -1, Q6, 4321); /* emits q */
    double c2 = run(wrong_residual_p, -1, Q6, 4321);
    cr_assert_gt(c1, CHI2_CRIT, "always-accept passed: chi2 = %.2f", c1);
    cr_assert_gt(c2, CHI2_CRIT, "residual-from-p passed: chi2 = %.2f", c2);
}

Test(accept_stats, bonus_token_follows_the_last_row, .timeout = 10)
{
    /* row 0 is certain of the draft token, so every draw reaches the bonus row, which is P6 */
    float rows[2 * NV] = {0};
    rows[3] = 1.0f;
    memcpy(rows + NV, P6, sizeof P6);
    uint32_t count[NV] = {0};
    uint64_t rng = 777;
    const int32_t x = 3;
    for (int i = 0; i < DRAWS; i++) {
        mn_accept_result r;
        cr_assert_eq(mn_accept_onehot(&x, 1, rows, NV, uniform64, &rng, &r, NULL), MN_OK);
        cr_assert_eq(r.n_accepted, 1);
        count[r.next]++;
    }
    double c = chi2(count, P6);
    cr_assert_lt(c, CHI2_CRIT, "bonus: chi2 = %.2f", c);
}

/* ---------------------------------------------------------------------------------------------- */
/* n-gram drafter */

/* With short_s = s: every match proposes s tokens (how many a short match proposes is tested apart). */
static uint32_t propose_short(const int32_t *t, uint32_t n, uint32_t min_n, uint32_t max_n, uint32_t s,
                              uint32_t short_s, int32_t *out)
{
    for (uint32_t i = 0; i < 16; i++)
        out[i] = -7; /* untouched marker */
    return mn_ngram_propose(t, n, min_n, max_n, s, short_s, out);
}

static uint32_t propose(const int32_t *t, uint32_t n, uint32_t min_n, uint32_t max_n, uint32_t s,
                        int32_t *out)
{
    return propose_short(t, n, min_n, max_n, s, s, out);
}

static void assert_tokens(const int32_t *got, const int32_t *want, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "token %u: got %d, want %d", i, got[i], want[i]);
}

Test(ngram, repetition_proposes_the_repeat)
{
    const int32_t t[] = {1, 2, 3, 4, 1, 2, 3};
    int32_t out[16];
    cr_assert_eq(propose(t, LEN(t), 2, 3, 3, out), 3);
    assert_tokens(out, (const int32_t[]){4, 1, 2}, 3);
    cr_assert_eq(out[3], -7, "wrote past s");
}

Test(ngram, a_repeat_running_into_the_end_continues_itself)
{
    const int32_t run3[] = {3, 3, 3, 3};
    int32_t out[16];
    cr_assert_eq(propose(run3, 4, 1, 2, 4, out), 4);
    assert_tokens(out, (const int32_t[]){3, 3, 3, 3}, 4);
    const int32_t alt[] = {1, 2, 1, 2, 1, 2};
    cr_assert_eq(propose(alt, 6, 2, 4, 5, out), 5);
    assert_tokens(out, (const int32_t[]){1, 2, 1, 2, 1}, 5);
}

Test(ngram, no_match_proposes_nothing)
{
    const int32_t t[] = {1, 2, 3, 4, 5};
    int32_t out[16];
    cr_assert_eq(propose(t, 5, 1, 4, 4, out), 0);
    cr_assert_eq(out[0], -7);
    /* only a one-token match, below min_n = 2 */
    const int32_t u[] = {5, 1, 2, 3, 5};
    cr_assert_eq(propose(u, 5, 2, 4, 4, out), 0);
    cr_assert_eq(propose(u, 5, 1, 4, 2, out), 2);
    assert_tokens(out, (const int32_t[]){1, 2}, 2);
    /* too short to have an earlier position */
    cr_assert_eq(propose(u, 1, 1, 4, 2, out), 0);
    cr_assert_eq(propose(u, 0, 1, 4, 2, out), 0);
}

Test(ngram, longest_match_preferred_within_max_n)
{
    /* suffix 7 8 9: "7 8 9" at the start (then 1 5 8), and a more recent "8 9" (then 2 6 7) */
    const int32_t t[] = {7, 8, 9, 1, 5, 8, 9, 2, 6, 7, 8, 9};
    int32_t out[16];
    cr_assert_eq(propose(t, LEN(t), 2, 3, 3, out), 3);
    assert_tokens(out, (const int32_t[]){1, 5, 8}, 3);
    /* with max_n = 2 both are length-2 matches and the most recent wins */
    cr_assert_eq(propose(t, LEN(t), 2, 2, 3, out), 3);
    assert_tokens(out, (const int32_t[]){2, 6, 7}, 3);
}

Test(ngram, most_recent_of_equal_matches_wins)
{
    const int32_t t[] = {5, 1, 2, 7, 6, 1, 2, 8, 9, 1, 2};
    int32_t out[16];
    cr_assert_eq(propose(t, LEN(t), 2, 4, 3, out), 3);
    assert_tokens(out, (const int32_t[]){8, 9, 1}, 3);
}

Test(ngram, respects_s)
{
    const int32_t t[] = {1, 2, 3, 4, 1, 2, 3};
    int32_t out[16];
    cr_assert_eq(propose(t, LEN(t), 2, 3, 1, out), 1);
    cr_assert_eq(out[0], 4);
    cr_assert_eq(out[1], -7);
    cr_assert_eq(propose(t, LEN(t), 2, 3, 0, out), 0);
    cr_assert_eq(out[0], -7);
}

Test(ngram, a_match_shorter_than_max_n_proposes_at_most_short_s)
{
    /* suffix 1 2 3: a 3-token match (= max_n) proposes s; with max_n = 4 it is short */
    const int32_t t[] = {1, 2, 3, 4, 5, 6, 7, 1, 2, 3};
    int32_t out[16];
    cr_assert_eq(propose_short(t, LEN(t), 2, 3, 5, 2, out), 5);
    assert_tokens(out, (const int32_t[]){4, 5, 6, 7, 1}, 5);
    cr_assert_eq(propose_short(t, LEN(t), 2, 4, 5, 2, out), 2);
    assert_tokens(out, (const int32_t[]){4, 5}, 2);
    cr_assert_eq(out[2], -7, "wrote past short_s");
    /* short_s >= s: every match proposes s; short_s = 0: a short match proposes nothing */
    cr_assert_eq(propose_short(t, LEN(t), 2, 4, 5, 9, out), 5);
    cr_assert_eq(propose_short(t, LEN(t), 2, 4, 5, 0, out), 0);
    cr_assert_eq(out[0], -7);
    /* a short match running into the end still continues itself, within short_s */
    const int32_t alt[] = {8, 1, 2, 1, 2};
    cr_assert_eq(propose_short(alt, LEN(alt), 2, 4, 6, 3, out), 3);
    assert_tokens(out, (const int32_t[]){1, 2, 1}, 3);
}

/* The shared cache: what an earlier sequence did after the same tokens. */
static uint32_t cache_propose(const mn_ngram_cache *c, const int32_t *t, uint32_t n, uint32_t s, uint32_t short_s,
                              int32_t *out)
{
    for (uint32_t i = 0; i < 16; i++)
        out[i] = -7;
    return mn_ngram_cache_propose(c, t, n, 2, s, short_s, out);
}

Test(ngram_cache, proposes_what_an_earlier_sequence_did)
{
    mn_ngram_cache c;
    cr_assert_eq(mn_ngram_cache_init(&c, 64, 4, NULL), MN_OK);
    const int32_t a[] = {10, 11, 12, 13, 14, 15, 16};
    mn_ngram_cache_add(&c, a, LEN(a));
    int32_t out[16];
    /* a 4-gram match proposes s, up to the end of that sequence (no run into the next one) */
    const int32_t q[] = {99, 10, 11, 12, 13};
    cr_assert_eq(cache_propose(&c, q, LEN(q), 8, 2, out), 3);
    assert_tokens(out, (const int32_t[]){14, 15, 16}, 3);
    cr_assert_eq(out[3], -7);
    cr_assert_eq(cache_propose(&c, q, LEN(q), 2, 2, out), 2);
    /* a 2-gram match is short: short_s */
    const int32_t r[] = {98, 97, 13, 14};
    cr_assert_eq(cache_propose(&c, r, LEN(r), 8, 2, out), 2);
    assert_tokens(out, (const int32_t[]){15, 16}, 2);
    /* nothing known; too short a suffix; s = 0 */
    const int32_t u[] = {1, 2, 3};
    cr_assert_eq(cache_propose(&c, u, LEN(u), 8, 2, out), 0);
    cr_assert_eq(cache_propose(&c, (const int32_t[]){13}, 1, 8, 2, out), 0);
    cr_assert_eq(cache_propose(&c, q, LEN(q), 0, 2, out), 0);
    cr_assert_eq(out[0], -7);
    /* the latest occurrence wins */
    const int32_t b[] = {12, 13, 50, 51};
    mn_ngram_cache_add(&c, b, LEN(b));
    const int32_t w[] = {7, 12, 13};
    cr_assert_eq(cache_propose(&c, w, LEN(w), 8, 8, out), 2);
    assert_tokens(out, (const int32_t[]){50, 51}, 2);
    mn_ngram_cache_free(&c);
    mn_ngram_cache_free(&c); /* twice is harmless */
    cr_assert_eq(cache_propose(&c, w, LEN(w), 8, 8, out), 0);
}

Test(ngram_cache, overwritten_text_proposes_nothing_and_wraps_cleanly)
{
    mn_ngram_cache c;
    cr_assert_eq(mn_ngram_cache_init(&c, 64, 4, NULL), MN_OK);
    int32_t first[40], filler[60], out[16];
    for (int i = 0; i < 40; i++)
        first[i] = 1000 + i;
    mn_ngram_cache_add(&c, first, 40);
    const int32_t q[] = {1010, 1011, 1012, 1013};
    cr_assert_eq(cache_propose(&c, q, 4, 4, 4, out), 4);
    assert_tokens(out, (const int32_t[]){1014, 1015, 1016, 1017}, 4);
    /* 60 more tokens wrap the 64-token ring over the first sequence's start: its table entries
     * remain but point at other text now, and must not propose it */
    for (int i = 0; i < 60; i++)
        filler[i] = 2000 + i;
    mn_ngram_cache_add(&c, filler, 60);
    cr_assert_eq(cache_propose(&c, q, 4, 4, 4, out), 0);
    /* the new sequence is whole and found across the ring's end */
    const int32_t f[] = {2054, 2055, 2056, 2057};
    cr_assert_eq(cache_propose(&c, f, 4, 8, 8, out), 2);
    assert_tokens(out, (const int32_t[]){2058, 2059}, 2);
    /* a sequence longer than the ring keeps its end */
    int32_t big[200];
    for (int i = 0; i < 200; i++)
        big[i] = 5000 + i;
    mn_ngram_cache_add(&c, big, 200);
    const int32_t g[] = {5190, 5191, 5192, 5193};
    cr_assert_eq(cache_propose(&c, g, 4, 3, 3, out), 3);
    assert_tokens(out, (const int32_t[]){5194, 5195, 5196}, 3);
    cr_assert_eq(c.added, 40u + 60u + 63u);
    mn_ngram_cache_free(&c);
    cr_assert_eq(mn_ngram_cache_init(&c, 63, 4, NULL), MN_INVALID);
    cr_assert_eq(mn_ngram_cache_init(&c, 64, 1, NULL), MN_INVALID);
}

Test(ngram, bad_parameters_propose_nothing)
{
    const int32_t t[] = {1, 2, 1, 2};
    int32_t out[16];
    cr_assert_eq(propose(t, 4, 0, 2, 2, out), 0);
    cr_assert_eq(propose(t, 4, 3, 2, 2, out), 0);
    cr_assert_eq(mn_ngram_check(0, 2, NULL), MN_INVALID);
    cr_assert_eq(mn_ngram_check(3, 2, NULL), MN_INVALID);
    cr_assert_eq(mn_ngram_check(MN_NGRAM_MIN_N_DEFAULT, MN_NGRAM_MAX_N_DEFAULT, NULL), MN_OK);
}

Test(ngram, long_sequences_stay_linear, .timeout = 60)
{
    /* 1M tokens with no repeated pair: a quadratic scan would take hours (5e11 steps), the linear
     * one ms, so the timeout tells them apart with room for a loaded machine and a sanitizer build;
     * then the same with the suffix repeating far back, which the scan must still find */
    enum { N = 1 << 20 };
    static int32_t t[N];
    for (uint32_t i = 0; i < N; i++)
        t[i] = (int32_t)i;
    int32_t out[16];
    cr_assert_eq(mn_ngram_propose(t, N, 2, 4, 4, 4, out), 0);
    t[N - 2] = 10;
    t[N - 1] = 11;
    cr_assert_eq(mn_ngram_propose(t, N, 2, 4, 4, 4, out), 4);
    assert_tokens(out, (const int32_t[]){12, 13, 14, 15}, 4);
}

/* ---------------------------------------------------------------------------------------------- */
/* tuner */

/* A speculation model: a pass over 1 + s tokens costs 1 + verify_slope * s decode steps plus s
 * draft steps of draft_cost; each drafted token is accepted with probability a while the previous
 * ones were, so a round yields (1 - a^(s+1)) / (1 - a) tokens on average. */
typedef struct spec_model {
    double a, verify_slope, draft_cost;
    bool drawn; /* each sequence's acceptance drawn (with the histograms the model rule reads), instead
                 * of every step yielding the expectation */
} spec_model;

static double model_cost(const spec_model *m, uint32_t s)
{
    double tokens = m->a < 1 ? (1 - pow(m->a, s + 1)) / (1 - m->a) : s + 1;
    return (1 + m->verify_slope * s + m->draft_cost * s) / tokens;
}

static uint32_t model_best(const spec_model *m, uint32_t lo, uint32_t hi)
{
    uint32_t best = lo;
    for (uint32_t s = lo; s <= hi; s++)
        best = model_cost(m, s) < model_cost(m, best) ? s : best;
    return best;
}

static uint32_t lcg(uint32_t *st)
{
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

/* The length of class cls's next step as the verifier plays it: the class's s, or during a paired
 * probe s and the other side in blocks of MN_TUNER_PAIR_BLOCK. */
static uint32_t next_s(const mn_tuner *t, uint32_t cls)
{
    static uint32_t steps[MN_TUNER_CLASSES];
    mn_tuner_advice a = mn_tuner_advise(t, cls);
    if (a.other == a.s) {
        steps[cls] = 0;
        return a.s;
    }
    return mn_tuner_step_length(&a, steps[cls]++);
}

/* A step without histograms (what the slope rule reads). */
static bool observe(mn_tuner *t, uint32_t batch, uint32_t s, double seconds, uint32_t tokens, bool adapt,
                    mn_tuner_decision *d)
{
    mn_tuner_step st = {.batch = batch, .s = s, .seconds = seconds, .tokens = tokens};
    return mn_tuner_observe(t, &st, adapt, d);
}

/* One step of `batch` sequences at the length the tuner gives that class (next_s), its time times
 * (1 +- noise) uniform. Not drawn: seconds per produced token from the model, the step yields 10
 * tokens. Drawn: each sequence keeps each draft token with probability a while it kept the
 * previous ones, and the step takes batch * (1 + (verify_slope + draft_cost) * s) seconds.
 * Returns whether it decided; *ran (when not NULL) the step's length. */
static bool feed(mn_tuner *t, const spec_model *m, uint32_t batch, double noise, uint32_t *rng, mn_tuner_decision *d,
                 uint32_t *ran)
{
    uint32_t s = next_s(t, mn_tuner_class_of(batch));
    if (ran)
        *ran = s;
    double jitter = 1 + noise * (2.0 * (lcg(rng) & 0xffff) / 0xffff - 1);
    if (!m->drawn)
        return observe(t, batch, s, 10 * model_cost(m, s) * jitter, 10, true, d);
    mn_tuner_step st = {.batch = batch, .s = s};
    st.seconds = batch * (1 + (m->verify_slope + m->draft_cost) * s) * jitter;
    for (uint32_t i = 0; i < batch; i++) {
        uint32_t a = 0;
        while (a < s && (lcg(rng) & 0xffff) < m->a * 0x10000)
            a++;
        if (a == s && s > 0)
            st.full[a]++;
        else
            st.ended[a]++;
        st.tokens += 1 + a;
    }
    return mn_tuner_observe(t, &st, true, d);
}

/* Run n decisions; returns the mean cost over them relative to the best length's. */
static double run_decisions(mn_tuner *t, const spec_model *m, uint32_t batch, double noise, int n, uint32_t *rng,
                            int *at_best)
{
    uint32_t best = model_best(m, t->p.s_min, t->p.s_max);
    double sum = 0;
    int steps = 0;
    *at_best = 0;
    for (int k = 0; k < n;) {
        mn_tuner_decision d;
        uint32_t s;
        bool decided = feed(t, m, batch, noise, rng, &d, &s);
        sum += model_cost(m, s);
        steps++;
        if (decided) {
            k++;
            *at_best += d.to == best;
        }
    }
    return sum / steps / model_cost(m, best);
}

/* The defaults without the warm-up (the tests below count steps from the first), and with a rule. */
static mn_tuner_params warm(void)
{
    mn_tuner_params p = mn_tuner_defaults();
    p.warm_up = 0;
    return p;
}

static mn_tuner_params with_rule(mn_tuner_rule rule)
{
    mn_tuner_params p = warm();
    p.rule = rule;
    return p;
}

Test(tuner, defaults_are_valid)
{
    mn_tuner_params p = mn_tuner_defaults();
    cr_assert_eq(mn_tuner_check(&p, NULL), MN_OK);
    cr_assert_eq(p.s_min, 0);
    cr_assert_eq(p.s_max, 8);
    cr_assert_eq(p.rule, MN_TUNER_RULE_SEQUENCE);
    cr_assert_eq(p.warm_up, 64);
}

/* While the drafters' weights learn (the first warm_up speculating sequences) no speculating step
 * counts: no window fills, the model learns nothing; plain steps count meanwhile, and once warm
 * every step does. */
Test(tuner, speculating_steps_count_once_warm)
{
    mn_tuner_params p = mn_tuner_defaults();
    p.warm_up = 10;
    p.decision_threshold = 2;
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    mn_tuner_decision d;
    mn_tuner_step wide = {.batch = 3, .s = 4, .seconds = 1.0, .tokens = 6};
    wide.ended[1] = 3;
    mn_tuner_step plain = {.batch = 1, .s = 0, .seconds = 0.5, .tokens = 1};
    for (int i = 0; i < 4; i++) /* 12 sequences: the fourth step ends the warm-up, and is not counted */
        cr_assert_not(mn_tuner_observe(&t, &wide, true, &d));
    const mn_tuner_class *c3 = &t.c[mn_tuner_class_of(3)];
    cr_assert_eq(c3->win_steps, 0);
    cr_assert_eq(c3->model.seqs, 0);
    cr_assert_eq(c3->model.steps[4], 0);
    cr_assert_eq(t.warmed, 12);
    cr_assert_not(mn_tuner_observe(&t, &wide, true, &d));
    cr_assert_eq(c3->win_steps, 1, "warm: the step counts");
    cr_assert_eq(c3->model.seqs, 3);
    cr_assert(mn_tuner_observe(&t, &wide, true, &d), "a window of decision_threshold steps");

    mn_tuner cold;
    mn_tuner_init(&cold, &p, 0);
    cr_assert_not(mn_tuner_observe(&cold, &plain, true, &d));
    cr_assert(mn_tuner_observe(&cold, &plain, true, &d), "plain steps count from the first");
    cr_assert_eq(cold.warmed, 0);
}

Test(tuner, batch_classes)
{
    uint32_t want[] = {0, 0, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5};
    for (uint32_t b = 1; b < LEN(want); b++)
        cr_assert_eq(mn_tuner_class_of(b), want[b], "batch %u", b);
    cr_assert_eq(mn_tuner_class_of(32), 5);
    cr_assert_eq(mn_tuner_class_of(33), 6);
    cr_assert_eq(mn_tuner_class_of(1000), 6);
    cr_assert_str_eq(mn_tuner_class_name(2), "3-4");
}

/* From either end of the range, without noise: it reaches the cheapest length and then spends
 * nearly every decision there (probes of stale neighbors excepted). */
Test(tuner, finds_the_cheapest_length_and_rests_there)
{
    spec_model m = {.a = 0.75, .verify_slope = 0.15, .draft_cost = 0.1};
    uint32_t best = model_best(&m, 0, 8);
    cr_assert(best > 1 && best < 7, "the model's optimum %u should be inside the range", best);
    for (uint32_t s0 = 0; s0 <= 8; s0 += 8) {
        mn_tuner_params p = with_rule(MN_TUNER_RULE_SLOPE);
        mn_tuner t;
        mn_tuner_init(&t, &p, s0);
        uint32_t rng = 1;
        int at_best;
        run_decisions(&t, &m, 1, 0, 20, &rng, &at_best); /* the walk there */
        double rel = run_decisions(&t, &m, 1, 0, 400, &rng, &at_best);
        cr_assert_geq(at_best, 340, "from %u: at the optimum %u in %d of 400 decisions", s0, best, at_best);
        cr_assert_lt(rel, 1.02, "from %u: %.3f x the optimum's cost", s0, rel);
    }
}

/* With 15% noise per step (default windows), the mean cost stays within 5% of the optimum. */
Test(tuner, noise_costs_little)
{
    spec_model m = {.a = 0.8, .verify_slope = 0.2, .draft_cost = 0.05};
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SLOPE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 1);
    uint32_t rng = 7;
    int at_best;
    run_decisions(&t, &m, 4, 0.15, 30, &rng, &at_best);
    double rel = run_decisions(&t, &m, 4, 0.15, 600, &rng, &at_best);
    cr_assert_lt(rel, 1.05, "%.3f x the optimum's cost", rel);
}

/* Drafts that are never accepted: plain decoding (s = 0) is cheapest, and it stays there. */
Test(tuner, goes_to_plain_decoding_when_no_draft_pays)
{
    spec_model m = {.a = 0, .verify_slope = 0.2, .draft_cost = 0.1};
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SLOPE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    uint32_t rng = 3;
    int at_best;
    run_decisions(&t, &m, 1, 0, 10, &rng, &at_best);
    cr_assert_eq(t.c[0].s, 0);
    run_decisions(&t, &m, 1, 0, 200, &rng, &at_best);
    cr_assert_geq(at_best, 170);
}

/* The rule step by step: a probe up with one point, then the slope, s_reward / s_punish steps and
 * the bounds. */
Test(tuner, slope_rule_steps_and_bounds)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SLOPE);
    p.s_min = 2, p.s_max = 7, p.s_reward = 2, p.decision_threshold = 1, p.margin = 0;
    mn_tuner t;
    mn_tuner_init(&t, &p, 0);
    cr_assert_eq(t.c[0].s, 2, "clamped to s_min");
    mn_tuner_decision d;
    /* one point: probe up by s_reward */
    cr_assert(observe(&t, 1, 2, 1.0, 1, true, &d));
    cr_assert_eq(d.to, 4);
    cr_assert_str_eq(d.why, "probe");
    /* 4 cheaper than 2: slope < 0, up again to 6 (no point there: a probe) */
    cr_assert(observe(&t, 1, 4, 0.8, 1, true, &d));
    cr_assert_eq(d.to, 6);
    /* at 6 no neighbor has a point (4 is out of reach): a probe, and s + 2 is past s_max, so down
     * by s_punish to 5 */
    cr_assert(observe(&t, 1, 6, 0.9, 1, true, &d));
    cr_assert_eq(d.from, 6);
    cr_assert_eq(d.to, 5);
    cr_assert_str_eq(d.why, "probe");
    /* 5 cheapest of 4, 5, 6: the line through them rises (0.8 -> 0.9), pointing at 4, which is
     * fresh and dearer: it rests */
    cr_assert(observe(&t, 1, 5, 0.7, 1, true, &d));
    cr_assert_eq(d.to, 5);
    cr_assert_str_eq(d.why, "rest");
    /* at s_max the probe goes down */
    mn_tuner_init(&t, &p, 7);
    cr_assert(observe(&t, 1, 7, 1.0, 1, true, &d));
    cr_assert_eq(d.to, 6);
    for (int i = 0; i < 200; i++) {
        uint32_t s = t.c[0].s;
        cr_assert(s >= 2 && s <= 7);
        observe(&t, 1, s, 1.0 + 0.1 * (i % 3), 1, true, &d);
    }
}

/* Decisions come every decision_threshold steps at the current s; steps at another s (in flight
 * across a change) do not count; classes keep separate lengths and curves; fixed mode records
 * points and never moves. */
Test(tuner, windows_classes_and_fixed_mode)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SLOPE);
    p.decision_threshold = 3;
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    mn_tuner_decision d;
    cr_assert_not(observe(&t, 1, 4, 1.0, 2, true, &d));
    cr_assert_not(observe(&t, 1, 3, 1.0, 2, true, &d)); /* another s: ignored */
    cr_assert_not(observe(&t, 16, 4, 1.0, 2, true, &d)); /* another class */
    cr_assert_not(observe(&t, 1, 4, 1.0, 2, true, &d));
    cr_assert(observe(&t, 1, 4, 1.0, 2, true, &d));
    cr_assert_eq(d.cls, 0);
    cr_assert_float_eq(d.cost, 0.5, 1e-12);
    cr_assert_float_eq(t.c[0].at[4].cost, 0.5, 1e-12);
    cr_assert_eq(t.c[0].s, 5);
    cr_assert_eq(t.c[4].s, 5, "batch 16's class has not decided: it follows batch 1's");
    cr_assert_eq(t.c[4].win_steps, 0, "its window restarts at the new length");

    mn_tuner_restart(&t, 12, false); /* fixed mode: spec.length as given, even past s_max */
    for (int i = 0; i < 30; i++)
        cr_assert_not(observe(&t, 1, 12, 2.0, 1, false, &d));
    cr_assert_eq(t.c[0].s, 12);
    cr_assert(t.c[0].at[12].known);
    cr_assert_float_eq(t.c[0].at[12].cost, 2.0, 1e-12);
    mn_tuner_restart(&t, 12, true);
    cr_assert_eq(t.c[0].s, 8, "adaptive: clamped to s_max");
}

/* With the pipeline the verifier takes its length from the class of the pool's bound B, and a step
 * may verify more sequences than B (plain ones beside the drafted): the step counts in B's class,
 * at that class's length, not in the class of its size. */
Test(tuner, a_pipelined_step_counts_in_its_pools_class)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SLOPE);
    p.decision_threshold = 3;
    p.warm_up = 0;
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    mn_tuner_decision d;
    mn_tuner_step st = {.batch = 12, .s = 4, .planned = 4, .seconds = 1.0, .tokens = 20};
    cr_assert_not(mn_tuner_observe(&t, &st, true, &d));
    cr_assert_eq(t.c[mn_tuner_class_of(4)].win_steps, 1, "filed under the pool's class (3-4)");
    cr_assert_eq(t.c[mn_tuner_class_of(12)].win_steps, 0, "not under its size's (9-16)");
    cr_assert_eq(t.c[mn_tuner_class_of(4)].win_seqs, 12, "its sequences are the step's");
    st.planned = 0;
    cr_assert_not(mn_tuner_observe(&t, &st, true, &d));
    cr_assert_eq(t.c[mn_tuner_class_of(12)].win_steps, 1, "without a pool, its size's class");
}

/* A resting tuner re-measures its neighbors, so it follows a curve that moves (other text): after
 * the drafts get much better the best length rises, and it gets there. */
Test(tuner, follows_a_curve_that_moves)
{
    spec_model weak = {.a = 0.5, .verify_slope = 0.15, .draft_cost = 0.05};
    spec_model strong = {.a = 0.95, .verify_slope = 0.15, .draft_cost = 0.05};
    uint32_t b_weak = model_best(&weak, 0, 8), b_strong = model_best(&strong, 0, 8);
    cr_assert(b_strong >= b_weak + 3, "%u vs %u", b_strong, b_weak);
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SLOPE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    uint32_t rng = 5;
    int at_best;
    run_decisions(&t, &weak, 1, 0, 60, &rng, &at_best);
    cr_assert_lt(model_cost(&weak, t.c[0].s) / model_cost(&weak, b_weak), 1.02, "at %u, the best is %u", t.c[0].s,
                 b_weak);
    run_decisions(&t, &strong, 1, 0, 120, &rng, &at_best);
    double rel = run_decisions(&t, &strong, 1, 0, 200, &rng, &at_best);
    cr_assert_lt(rel, 1.02, "%.3f x the optimum's cost after the change", rel);
}

/* ---- the model rule ---- */

/* The counterfactual yield, by hand (batch 2: class 1): one sequence rejected after 2 of 6 drafted tokens and one that
 * kept all 6, then one step at 2 (both kept 1). Lengths up to 6 are exact; 8 extrapolates the
 * censored sequence with rho = kept / (kept + stopped); times come from the line through 2 and 6. */
Test(tuner, model_yield_by_hand)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_MODEL);
    p.decision_threshold = 1000; /* no window closes: nothing decays */
    mn_tuner t;
    mn_tuner_init(&t, &p, 6);
    mn_tuner_decision d;
    mn_tuner_step a = {.batch = 2, .s = 6, .seconds = 2 * 1.6, .tokens = 3 + 7};
    a.ended[2] = 1, a.full[6] = 1;
    cr_assert_not(mn_tuner_observe(&t, &a, true, &d));
    cr_assert(isnan(mn_tuner_model_cost(&t, 1, 4)), "one length ran: no line for the others");
    mn_tuner_step b = {.batch = 2, .s = 2, .seconds = 2 * 1.2, .tokens = 2 + 2};
    b.ended[1] = 2;
    cr_assert_not(mn_tuner_observe(&t, &b, true, &d));
    /* time per sequence: 1.2 at 2, 1.6 at 6: the line 1 + 0.1 x */
    double yield4 = ((1 + 2) + (1 + 4) + 2 * (1 + 1)) / 4.0;
    cr_assert_float_eq(mn_tuner_model_cost(&t, 1, 4), 1.4 / yield4, 1e-9);
    double yield1 = (2 + 2 + 2 + 2) / 4.0;
    cr_assert_float_eq(mn_tuner_model_cost(&t, 1, 1), 1.1 / yield1, 1e-9);
    double rho = (2 + 6 + 1 + 1) / (2 + 6 + 1 + 1 + 3.0); /* kept / (kept + stopped) */
    double yield8 = ((1 + 2) + (1 + 6 + rho + rho * rho) + 2 * (1 + 1)) / 4.0;
    cr_assert_float_eq(mn_tuner_model_cost(&t, 1, 8), 1.8 / yield8, 1e-9);
    cr_assert_float_eq(mn_tuner_model_cost(&t, 1, 0), 1.0, 1e-9, "0 never ran: the line's value over 1 token");
    cr_assert(isnan(mn_tuner_model_cost(&t, 0, 4)), "another class (batch 1) knows nothing");
}

/* Drawn acceptance, from either end of the range: it reaches the cheapest length and then spends
 * nearly every window there (a probe every probe_every windows excepted). */
Test(tuner, model_finds_the_cheapest_length)
{
    spec_model m = {.a = 0.75, .verify_slope = 0.15, .draft_cost = 0.1, .drawn = true};
    uint32_t best = model_best(&m, 0, 8);
    cr_assert(best > 1 && best < 7, "the model's optimum %u should be inside the range", best);
    for (uint32_t s0 = 0; s0 <= 8; s0 += 8) {
        mn_tuner_params p = with_rule(MN_TUNER_RULE_MODEL);
        mn_tuner t;
        mn_tuner_init(&t, &p, s0);
        uint32_t rng = 11;
        int at_best;
        run_decisions(&t, &m, 1, 0, 20, &rng, &at_best);
        double rel = run_decisions(&t, &m, 1, 0, 400, &rng, &at_best);
        cr_assert_geq(at_best, 330, "from %u: at the optimum %u in %d of 400 windows", s0, best, at_best);
        cr_assert_lt(rel, 1.02, "from %u: %.3f x the optimum's cost", s0, rel);
        cr_assert_leq(t.c[0].probes, 20 + 400 / p.probe_every + 2, "probes: %llu",
                      (unsigned long long)t.c[0].probes);
    }
}

/* With 15% noise on every step's time and drawn acceptance, 4 sequences a step, and after the
 * drafts get much better (the best length rises by 3 or more), it follows. */
Test(tuner, model_noise_and_a_change_of_text)
{
    spec_model weak = {.a = 0.5, .verify_slope = 0.15, .draft_cost = 0.05, .drawn = true};
    spec_model strong = {.a = 0.95, .verify_slope = 0.15, .draft_cost = 0.05, .drawn = true};
    mn_tuner_params p = with_rule(MN_TUNER_RULE_MODEL);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    uint32_t rng = 5;
    int at_best;
    run_decisions(&t, &weak, 4, 0.15, 30, &rng, &at_best);
    double rel = run_decisions(&t, &weak, 4, 0.15, 300, &rng, &at_best);
    cr_assert_lt(rel, 1.05, "weak drafts: %.3f x the optimum's cost", rel);
    run_decisions(&t, &strong, 4, 0.15, 30, &rng, &at_best);
    rel = run_decisions(&t, &strong, 4, 0.15, 300, &rng, &at_best);
    cr_assert_lt(rel, 1.05, "strong drafts: %.3f x the optimum's cost", rel);
}

/* Drafts that are never accepted: plain decoding. Drafts that always are: s_max. */
Test(tuner, model_goes_to_the_ends)
{
    spec_model none = {.a = 0, .verify_slope = 0.2, .draft_cost = 0.1, .drawn = true};
    spec_model all = {.a = 1, .verify_slope = 0.2, .draft_cost = 0.1, .drawn = true};
    mn_tuner_params p = with_rule(MN_TUNER_RULE_MODEL);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    uint32_t rng = 3;
    int at_best;
    run_decisions(&t, &none, 1, 0, 10, &rng, &at_best);
    cr_assert_eq(t.c[0].home, 0);
    run_decisions(&t, &none, 1, 0, 200, &rng, &at_best);
    cr_assert_geq(at_best, 180);
    run_decisions(&t, &all, 1, 0, 60, &rng, &at_best);
    run_decisions(&t, &all, 1, 0, 200, &rng, &at_best);
    cr_assert_geq(at_best, 180, "at s_max in %d of 200 windows", at_best);
}

/* The model fills in fixed mode too (stats show it), and a step at another length than the
 * class's (in flight across a change) still teaches it. */
Test(tuner, model_learns_in_fixed_mode_and_from_any_length)
{
    mn_tuner_params p = warm();
    p.decision_threshold = 2;
    mn_tuner t;
    mn_tuner_init(&t, &p, 3);
    mn_tuner_decision d;
    mn_tuner_step a = {.batch = 1, .s = 3, .seconds = 1.0, .tokens = 2};
    a.ended[1] = 1;
    mn_tuner_step b = {.batch = 1, .s = 5, .seconds = 2.0, .tokens = 6};
    b.full[5] = 1;
    for (int i = 0; i < 4; i++) {
        cr_assert_not(mn_tuner_observe(&t, &a, false, &d));
        cr_assert_not(mn_tuner_observe(&t, &b, false, &d));
    }
    cr_assert_eq(t.c[0].s, 3);
    cr_assert_eq(t.c[0].at[5].steps, 0, "the window counts only the class's length");
    cr_assert(t.c[0].model.steps[5] > 0);
    cr_assert(!isnan(mn_tuner_model_cost(&t, 0, 4)));
}

/* ---- the sequence rule ---- */

/* A rate priced along a straight line: price[j] = j theta. */
static void straight(mn_tuner_rate *a, float theta)
{
    a->theta = theta;
    for (uint32_t j = 0; j <= MN_TUNER_MAX_LEN; j++)
        a->price[j] = (float)j * theta;
}

Test(tuner, sequence_length_by_hand)
{
    mn_tuner_seq q = {0};
    mn_tuner_rate a = {.first = 0.5f, .least = 1};
    straight(&a, 0.3f);
    for (uint32_t j = 2; j <= MN_TUNER_MAX_LEN; j++)
        a.carry[j] = 0.5f;
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 8), 1, "the prior alone: 0.5 > 0.3 > 0.25");
    straight(&a, 0.2f);
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 8), 2, "0.25 > 0.2 > 0.125");
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 0), 0);
    a.carry[3] = 0.9f, a.carry[4] = 0.9f, a.carry[5] = 0.6f;
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 8), 4, "0.5, 0.25, 0.225, 0.2025 > 0.2 > 0.1215: carry by position");
    for (int i = 0; i < 6; i++) /* the first token kept six times: f = (3.29 + 0.5) / (3.29 + 1) */
        mn_tuner_seq_observe(&q, 4);
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 8), 5, "0.88, 0.44, 0.40, 0.36, 0.21 > 0.2 > 0.11");
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 3), 3, "never past the cap");
    for (int i = 0; i < 12; i++) /* then rejected at once, twelve times */
        mn_tuner_seq_observe(&q, 0);
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 8), 1, "it never goes below its least, 1");
    a.least = 0;
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 8), 0, "or 0: (0.10 + 0.5) / (3.98 + 1) = 0.12 < 0.3");
    straight(&a, NAN);
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 5), 5, "no figures: the cap");
}

/* Where the price of a draft has a step, the gain P_i(1) + ... + P_i(j) - price[j] stops below
 * it: with carry 0.7 and a pass whose fourth draft token costs 1.5 produced tokens more, three
 * tokens; priced along the straight line 0.2 a token, five (P_i(5) = 0.24 > 0.2 > 0.17). */
Test(tuner, sequence_length_stops_below_a_step_in_the_price)
{
    mn_tuner_seq q = {0};
    mn_tuner_rate a = {.first = 1.0f, .least = 1};
    for (uint32_t j = 2; j <= MN_TUNER_MAX_LEN; j++)
        a.carry[j] = 0.7f;
    straight(&a, 0.2f);
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 8), 5);
    for (uint32_t j = 4; j <= MN_TUNER_MAX_LEN; j++)
        a.price[j] += 1.5f;
    cr_assert_eq(mn_tuner_seq_length(&q, &a, 8), 3, "1, 1.7, 2.19 against 0.2, 0.4, 0.6; 2.53 against 2.3");
}

/* The class of one sequence prices drafts by its own steps' pass times by drafted tokens (t(0) =
 * 1.0, t(2) = 1.2, t(4) = 2.0 s; c = 4.2 / 7 s a produced token): measured, interpolated between,
 * extended past the last by theta c = beta; another class, along the straight line. */
Test(tuner, one_sequence_prices_drafts_by_its_verify_curve)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.decision_threshold = 1000;
    mn_tuner t;
    mn_tuner_init(&t, &p, 8);
    static const uint32_t drafted[3] = {0, 2, 4};
    static const double seconds[3] = {1.0, 1.2, 2.0};
    for (int round = 0; round < 2; round++)
        for (int k = 0; k < 3; k++) {
            mn_tuner_step st = {.batch = 1, .s = 8, .drafted = drafted[k], .seconds = seconds[k],
                                .tokens = 1 + (drafted[k] ? 2 : 0), .undrafted = !drafted[k]};
            if (drafted[k] == 2)
                st.full[2] = 1;
            else
                st.ended[drafted[k] ? 2 : 0] = 1;
            mn_tuner_decision d;
            mn_tuner_observe(&t, &st, true, &d);
        }
    double c = 4.2 / 7, beta = 0.25; /* the line through (0, 1.0), (2, 1.2), (4, 2.0) */
    mn_tuner_rate one = mn_tuner_advise(&t, 0).kind[MN_TUNER_FREE];
    const double want[7] = {0, 0.1, 0.2, 0.6, 1.0, 1.0 + beta, 1.0 + 2 * beta};
    for (int j = 0; j < 7; j++)
        cr_assert_float_eq(one.price[j], want[j] / c, 1e-5, "price[%d] %g", j, one.price[j]);
    cr_assert_float_eq(one.theta, beta / c, 1e-5);
    mn_tuner_rate two = mn_tuner_advise(&t, mn_tuner_class_of(2)).kind[MN_TUNER_FREE];
    for (int j = 0; j < 7; j++)
        cr_assert_float_eq(two.price[j], j * two.theta, 1e-5, "borrowed figures: the straight line");
}

/* The class's acceptance by position from its steps' histograms: a draft that ended after a kept
 * tokens tried a + 1 positions, one kept whole tried a, and a sequence with no draft tried none. */
Test(tuner, sequence_acceptance_by_position)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.decision_threshold = 1000;
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    mn_tuner_decision d;
    mn_tuner_step st = {.batch = 8, .s = 4, .seconds = 1, .tokens = 10, .drafted = 20, .undrafted = 1};
    st.ended[0] = 3; /* two rejected at once, one with no draft */
    st.ended[1] = 2; /* kept 1, rejected the 2nd */
    st.full[4] = 3;  /* kept all 4 */
    mn_tuner_observe(&t, &st, true, &d);
    mn_tuner_rate a = mn_tuner_advise(&t, mn_tuner_class_of(8)).kind[MN_TUNER_FREE];
    cr_assert_float_eq(a.first, 5.0 / 7.0, 1e-6, "7 drafts tried the first token, 5 kept it");
    double c2 = (3 + 5.0 / 7.0) / (5 + 1), c3 = (3 + c2) / (3 + 1), c4 = (3 + c3) / (3 + 1), c5 = (0 + c4) / (0 + 1);
    cr_assert_float_eq(a.carry[2], c2, 1e-6, "5 reached the 2nd, 3 kept it (one pseudo-draft at first)");
    cr_assert_float_eq(a.carry[3], c3, 1e-6);
    cr_assert_float_eq(a.carry[4], c4, 1e-6);
    cr_assert_float_eq(a.carry[5], c5, 1e-6, "never reached: as good as the one before");
}

/* theta = beta / c from a step time that grows by 0.1 s per drafted token and sequence. */
Test(tuner, sequence_theta_from_steps)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.decision_threshold = 1000;
    mn_tuner t;
    mn_tuner_init(&t, &p, 8);
    mn_tuner_decision d;
    cr_assert(isnan(mn_tuner_advise(&t, 0).kind[MN_TUNER_FREE].theta));
    double seconds = 0, tokens = 0;
    for (uint32_t k = 0; k < 6; k++) {
        mn_tuner_step st = {.batch = 1, .s = 8, .drafted = 2 + k, .seconds = 1 + 0.1 * (2 + k), .tokens = 2};
        st.ended[1] = 1;
        seconds += st.seconds, tokens += 2;
        mn_tuner_observe(&t, &st, true, &d);
    }
    mn_tuner_advice a = mn_tuner_advise(&t, 0);
    const mn_tuner_rate *fr = &a.kind[MN_TUNER_FREE];
    cr_assert_float_eq(fr->theta, 0.1 / (seconds / tokens), 1e-5);
    cr_assert_float_eq(fr->first, 1.0, 1e-6, "the first token kept six times");
    cr_assert_float_eq(fr->carry[2], (0 + 1.0) / (6 + 1), 1e-6, "the second rejected six times");
    cr_assert_eq(a.s, 8);
    p.rule = MN_TUNER_RULE_MODEL;
    mn_tuner_reparam(&t, &p);
    cr_assert(isnan(mn_tuner_advise(&t, 0).kind[MN_TUNER_FREE].theta), "other rules give no figures");
}

/* n steps of one sequence at 8 drafting 2, 3, ... tokens, each step 1 s plus 0.1 s a draft token,
 * keeping 2 of them: a line of drafting time with a spread, so theta is defined. */
static void spread_drafts(mn_tuner *t, uint32_t n, bool adapt)
{
    for (uint32_t k = 0; k < n; k++) {
        mn_tuner_step st = {.batch = 1, .s = 8, .drafted = 2 + k, .seconds = 1 + 0.1 * (2 + k), .tokens = 3};
        st.ended[2] = 1;
        mn_tuner_decision d;
        mn_tuner_observe(t, &st, adapt, &d);
    }
}

/* A costly draft (a model's) has figures of its own: its acceptance, learned only from the drafts
 * the costly drafters won the vote with, and its theta, (beta + delta) / c, one more of its tokens
 * costing the target's beta and the drafters' own pass, delta; where not even its first token pays,
 * a sequence drafts none (a free draft, at least one). Before any costly draft is verified it is
 * taken as good as a free one, and delta as 0. */
Test(tuner, costly_drafts_have_their_own_figures)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.decision_threshold = 1000;
    mn_tuner t;
    mn_tuner_init(&t, &p, 8);
    spread_drafts(&t, 6, true); /* free drafts of 2..7 tokens keep 2: beta 0.1 s a token */
    mn_tuner_advice a = mn_tuner_advise(&t, 0);
    const mn_tuner_rate *fr = &a.kind[MN_TUNER_FREE], *co = &a.kind[MN_TUNER_COSTLY];
    cr_assert(!isnan(fr->theta) && co->theta == fr->theta && co->first == fr->first &&
                  !memcmp(co->carry, fr->carry, sizeof co->carry),
              "no costly draft yet: the free figures (theta %g / %g, first %g / %g)", fr->theta, co->theta,
              fr->first, co->first);
    for (int k = 0; k < 4; k++) { /* a model's 3-token drafts, rejected at once; 0.1 s a position */
        mn_tuner_step st = {.batch = 1, .s = 8, .drafted = 3, .seconds = 1.6, .drafting = 0.3, .tokens = 1,
                            .costly_drafting = 0.3, .costly_positions = 3};
        st.ended[0] = st.costly_ended[0] = 1;
        mn_tuner_decision d;
        mn_tuner_observe(&t, &st, true, &d);
    }
    a = mn_tuner_advise(&t, 0);
    double c = (8.7 + 4 * 1.6) / (18 + 4); /* seconds per produced token, every speculating step */
    cr_assert_float_eq(fr->theta, 0.1 / c, 1e-5, "beta over c: the steps' work is on the line still");
    cr_assert_float_eq(co->theta, (0.1 + 0.1) / c, 1e-5, "(beta + delta) over c");
    cr_assert_float_eq(fr->first, 1.0, 1e-6, "the free drafts kept their first token six times of six");
    cr_assert_float_eq(co->first, 0.0, 1e-6, "the model's, none of four");
    mn_tuner_seq q = {0};
    cr_assert_eq(mn_tuner_seq_length(&q, fr, 8), 2, "free: 1, 1, then 1/7 < theta %g", fr->theta);
    cr_assert_eq(mn_tuner_seq_length(&q, co, 8), 0, "costly: none, its first token does not pay");
}

/* Figures whose steps stopped coming decay away to unknown, and the free drafts' stand in again:
 * decayed on, the costly drafts' sums reached doubles' denormals after some 5,300 windows and
 * stuck there, giving their first-token rate and theta 1 (they never drafted again). */
Test(tuner, costly_figures_unfed_for_ever_become_unknown)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.decision_threshold = 1;
    mn_tuner t;
    mn_tuner_init(&t, &p, 8);
    spread_drafts(&t, 6, true);
    for (int k = 0; k < 4; k++) { /* a model's 3-token drafts, rejected at once */
        mn_tuner_step st = {.batch = 1, .s = 8, .drafted = 3, .seconds = 1.6, .drafting = 0.3, .tokens = 1,
                            .costly_drafting = 0.3, .costly_positions = 3};
        st.ended[0] = st.costly_ended[0] = 1;
        mn_tuner_decision d;
        mn_tuner_observe(&t, &st, false, &d);
    }
    mn_tuner_advice a = mn_tuner_advise(&t, 0);
    cr_assert_float_eq(a.kind[MN_TUNER_COSTLY].first, 0.0, 1e-6, "the model's drafts kept nothing");
    for (int w = 0; w < 1000; w++) /* free drafts only, a window each */
        spread_drafts(&t, 6, false);
    a = mn_tuner_advise(&t, 0);
    const mn_tuner_rate *fr = &a.kind[MN_TUNER_FREE], *co = &a.kind[MN_TUNER_COSTLY];
    cr_assert(!isnan(fr->theta), "the free drafts' figures stay");
    cr_assert(co->theta == fr->theta && co->first == fr->first && !memcmp(co->carry, fr->carry, sizeof co->carry),
              "the costly figures after 6,000 windows unfed: theta %g, first %g (the free ones %g, %g)", co->theta,
              co->first, fr->theta, fr->first);
}

/* Plain decoding renews nothing the sequence rule knows about drafts: a class that rests at plain
 * decoding for a hundred windows keeps its theta and acceptance as they were, where the decay
 * had worn the line of drafting time below two points' worth (theta NAN: every sequence of the
 * next probe drafted s_max). */
Test(tuner, plain_windows_keep_the_sequence_rules_figures)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.decision_threshold = 4;
    mn_tuner t;
    mn_tuner_init(&t, &p, 8);
    mn_tuner_decision d;
    spread_drafts(&t, 8, false); /* two windows at 8 */
    mn_tuner_advice before = mn_tuner_advise(&t, 0);
    const mn_tuner_rate *b = &before.kind[MN_TUNER_FREE];
    cr_assert(!isnan(b->theta) && !isnan(b->first));
    mn_tuner_restart(&t, 0, true);
    for (uint32_t k = 0; k < 400; k++) { /* a hundred windows at 0 */
        mn_tuner_step st = {.batch = 1, .s = 0, .seconds = 1, .tokens = 1};
        st.ended[0] = 1;
        mn_tuner_observe(&t, &st, false, &d);
    }
    mn_tuner_advice after = mn_tuner_advise(&t, 0);
    const mn_tuner_rate *f = &after.kind[MN_TUNER_FREE];
    cr_assert(f->theta == b->theta && f->first == b->first && !memcmp(f->carry, b->carry, sizeof f->carry),
              "theta %g -> %g, first %g -> %g", b->theta, f->theta, b->first, f->first);
}

/* A class that has only decoded plainly, decided or not, drafts its first probe with the nearest
 * class's figures, not with none (every sequence at its cap). */
Test(tuner, a_class_without_figures_borrows_the_nearest)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.decision_threshold = 4;
    mn_tuner t;
    mn_tuner_init(&t, &p, 0);
    mn_tuner_decision d;
    uint32_t c16 = mn_tuner_class_of(16);
    bool decided = false;
    for (uint32_t k = 0; k < 4; k++) { /* 9-16 decodes plainly and decides (to probe speculating) */
        mn_tuner_step st = {.batch = 16, .s = 0, .seconds = 1, .tokens = 16};
        st.ended[0] = 16;
        decided |= mn_tuner_observe(&t, &st, true, &d);
    }
    cr_assert(decided && t.c[c16].decisions == 1);
    cr_assert(isnan(mn_tuner_advise(&t, c16).kind[MN_TUNER_FREE].theta), "no class has figures yet");
    spread_drafts(&t, 6, true); /* one sequence speculates */
    mn_tuner_advice a1 = mn_tuner_advise(&t, 0), a16 = mn_tuner_advise(&t, c16);
    const mn_tuner_rate *f1 = &a1.kind[MN_TUNER_FREE], *f16 = &a16.kind[MN_TUNER_FREE];
    cr_assert(!isnan(f1->theta) && f16->theta == f1->theta && f16->first == f1->first, "theta %g, %g", f1->theta,
              f16->theta);
}

/* A batch of two sequences that copy (each draft token kept with probability 0.95) and two that do
 * not (0.2), a step costing 1 per sequence plus 0.12 per drafted token: one length for all is a
 * compromise, a length per sequence is not. The sequence rule, as the verifier runs it (each
 * sequence's length from the advice and its own acceptance), beats the best fixed length. */
typedef struct seq_sim {
    mn_tuner_seq acc[4];
    double seconds, tokens;
} seq_sim;

static void seq_steps(mn_tuner *t, seq_sim *sim, int steps, bool per_sequence, uint32_t *rng)
{
    static const double accept[4] = {0.95, 0.95, 0.2, 0.2};
    for (int i = 0; i < steps; i++) {
        mn_tuner_class *c = &t->c[mn_tuner_class_of(4)];
        uint32_t s = per_sequence ? next_s(t, mn_tuner_class_of(4)) : c->s;
        mn_tuner_advice a = per_sequence ? mn_tuner_advise(t, mn_tuner_class_of(4)) : mn_tuner_fixed_advice(s);
        mn_tuner_step st = {.batch = 4, .s = s};
        for (int k = 0; k < 4; k++) {
            uint32_t cap = mn_tuner_seq_length(&sim->acc[k], &a.kind[MN_TUNER_FREE], s), kept = 0;
            while (kept < cap && (lcg(rng) & 0xffff) < accept[k] * 0x10000)
                kept++;
            mn_tuner_seq_observe(&sim->acc[k], kept);
            if (cap && kept == cap)
                st.full[kept]++;
            else
                st.ended[kept]++;
            st.drafted += cap;
            st.tokens += 1 + kept;
        }
        st.seconds = 4 + 0.12 * st.drafted;
        sim->seconds += st.seconds, sim->tokens += st.tokens;
        mn_tuner_decision d;
        mn_tuner_observe(t, &st, per_sequence, &d);
    }
}

Test(tuner, sequence_rule_beats_every_fixed_length_on_a_mixed_batch)
{
    double best_fixed = INFINITY;
    uint32_t rng = 17;
    for (uint32_t s = 0; s <= 8; s++) {
        mn_tuner_params p = warm();
        mn_tuner t;
        mn_tuner_init(&t, &p, s);
        seq_sim sim = {0};
        seq_steps(&t, &sim, 3000, false, &rng);
        double cost = sim.seconds / sim.tokens;
        best_fixed = cost < best_fixed ? cost : best_fixed;
    }
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    seq_sim warm = {0}, sim = {0};
    seq_steps(&t, &warm, 300, true, &rng);
    memcpy(sim.acc, warm.acc, sizeof sim.acc);
    seq_steps(&t, &sim, 3000, true, &rng);
    double cost = sim.seconds / sim.tokens;
    cr_log_info("per token: sequence rule %.4f, best fixed length %.4f", cost, best_fixed);
    cr_assert_lt(cost, 0.95 * best_fixed, "sequence rule %.4f against the best fixed length's %.4f", cost, best_fixed);
}

/* One sequence whose text runs in stretches, as served text does: while it copies (its prompt, a
 * verse every drafter knows) a draft token is kept with probability 0.95; elsewhere the first token
 * is kept 0.3 of the time and each next one, after a kept one, 0.6. A stretch lasts 5 verifications
 * on average. A step costs 1 plus 0.2 per drafted token. Acceptance along a draft is then not
 * geometric: one rate for every position (the rule before 2026-11-29) takes a copying draft's
 * later tokens for as risky as a first one and cuts it short. */
static double stretch_steps(mn_tuner *t, mn_tuner_seq *q, int steps, bool per_sequence, uint32_t *rng)
{
    static bool copying;
    double seconds = 0, tokens = 0;
    for (int i = 0; i < steps; i++) {
        if ((lcg(rng) & 0xffff) < 0.2 * 0x10000)
            copying = !copying;
        uint32_t s = per_sequence ? next_s(t, 0) : t->c[0].s;
        mn_tuner_advice a = per_sequence ? mn_tuner_advise(t, 0) : mn_tuner_fixed_advice(s);
        uint32_t cap = mn_tuner_seq_length(q, &a.kind[MN_TUNER_FREE], s), kept = 0;
        while (kept < cap && (lcg(rng) & 0xffff) < (copying ? 0.95 : kept ? 0.6 : 0.3) * 0x10000)
            kept++;
        if (cap)
            mn_tuner_seq_observe(q, kept);
        mn_tuner_step st = {.batch = 1, .s = s, .drafted = cap, .tokens = 1 + kept, .seconds = 1 + 0.2 * cap};
        if (cap && kept == cap)
            st.full[kept]++;
        else
            st.ended[kept]++;
        seconds += st.seconds, tokens += st.tokens;
        mn_tuner_decision d;
        mn_tuner_observe(t, &st, per_sequence, &d);
    }
    return seconds / tokens;
}

Test(tuner, sequence_rule_follows_acceptance_along_a_draft)
{
    double best_fixed = INFINITY;
    uint32_t rng = 23, best_s = 0;
    for (uint32_t s = 0; s <= 8; s++) {
        mn_tuner_params p = warm();
        mn_tuner t;
        mn_tuner_init(&t, &p, s);
        mn_tuner_seq q = {0};
        double cost = stretch_steps(&t, &q, 20000, false, &rng);
        if (cost < best_fixed)
            best_fixed = cost, best_s = s;
    }
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    mn_tuner_seq q = {0};
    stretch_steps(&t, &q, 2000, true, &rng);
    double cost = stretch_steps(&t, &q, 20000, true, &rng);
    cr_log_info("per token: sequence rule %.4f, best fixed length (%u) %.4f", cost, best_s, best_fixed);
    cr_assert_lt(cost, 0.97 * best_fixed, "sequence rule %.4f against the best fixed length's (%u) %.4f", cost, best_s,
                 best_fixed);
}

/* Drafts that are never kept: the sequence rule's class goes to plain decoding, probing less and
 * less often while probes change nothing, and goes back to speculating once drafts are kept. */
Test(tuner, sequence_rule_goes_plain_and_back)
{
    spec_model none = {.a = 0, .verify_slope = 0.2, .draft_cost = 0.1, .drawn = true};
    spec_model all = {.a = 0.95, .verify_slope = 0.05, .draft_cost = 0, .drawn = true};
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    uint32_t rng = 9;
    int at_best;
    run_decisions(&t, &none, 1, 0, 40, &rng, &at_best);
    cr_assert_eq(t.c[0].home, 0, "plain");
    uint64_t probes = t.c[0].probes;
    run_decisions(&t, &none, 1, 0, 256, &rng, &at_best);
    cr_assert_leq(t.c[0].probes - probes, 6, "probes that change nothing back off: %llu in 256 windows",
                  (unsigned long long)(t.c[0].probes - probes));
    cr_assert_geq(t.c[0].probes - probes, 3, "but go on");
    run_decisions(&t, &all, 1, 0, 4 * p.probe_every + 10, &rng, &at_best);
    cr_assert_eq(t.c[0].home, p.s_max, "speculating, the sequences choosing up to s_max");
}

/* Review findings. Above s_min 0 there is no plain side, so the class's bound is s_max wherever it
 * started (started at s_min 2 it rested there for good); at decision_threshold 1 a paired probe still
 * runs the other side (its window ended inside home's first block); and a class's first paired probe
 * after a switch from the model rule chooses as a first probe does. */
Test(tuner, sequence_rule_edges)
{
    spec_model none = {.a = 0, .verify_slope = 0.2, .draft_cost = 0.1, .drawn = true};
    spec_model all = {.a = 0.95, .verify_slope = 0.05, .draft_cost = 0, .drawn = true};
    uint32_t rng = 3;
    int at_best;
    mn_tuner t;
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.s_min = 2;
    mn_tuner_init(&t, &p, 2);
    run_decisions(&t, &all, 1, 0, 4, &rng, &at_best);
    cr_assert_eq(t.c[0].home, p.s_max, "from s_min: home %u", t.c[0].home);
    p.s_min = 0;
    mn_tuner_init(&t, &p, 4);
    run_decisions(&t, &none, 1, 0, 8, &rng, &at_best);
    mn_tuner_reparam(&t, &(mn_tuner_params){.s_min = 1, .s_max = p.s_max, .decision_threshold = p.decision_threshold,
                                            .s_reward = 1, .s_punish = 1, .probe_every = p.probe_every,
                                            .margin = p.margin, .warm_up = p.warm_up, .cost = p.cost, .rule = p.rule});
    cr_assert_eq(t.c[0].home, 1, "clamped to the new s_min");
    run_decisions(&t, &all, 1, 0, 2, &rng, &at_best);
    cr_assert_eq(t.c[0].home, p.s_max, "and from there to s_max: home %u", t.c[0].home);

    p.decision_threshold = 1;
    mn_tuner_init(&t, &p, 8);
    run_decisions(&t, &none, 1, 0, 40, &rng, &at_best);
    cr_assert_gt(t.c[0].at[0].steps, 0, "the probes never ran plain decoding");
    cr_assert_eq(t.c[0].home, 0, "plain decoding, far cheaper, is home at decision_threshold 1");

    p = with_rule(MN_TUNER_RULE_MODEL);
    mn_tuner_init(&t, &p, 4);
    run_decisions(&t, &none, 1, 0, 40, &rng, &at_best);
    cr_assert_gt(t.c[0].probes, 1, "the model rule probed");
    p.rule = MN_TUNER_RULE_SEQUENCE;
    mn_tuner_reparam(&t, &p);
    cr_assert_eq(t.c[0].probes, 0, "the sequence rule's probes start from its first");
}

/* A live change of rule starts the new rule from where the class is (the slope rule moves s alone,
 * and the model rule read its stale home as where to rest); a change of what a step's time counts
 * (tuner.cost) forgets the times measured as the other quantity, not what was kept. */
Test(tuner, a_change_of_rule_or_cost_forgets_what_no_longer_holds)
{
    spec_model all = {.a = 0.95, .verify_slope = 0.05, .draft_cost = 0, .drawn = true};
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SLOPE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 2);
    uint32_t rng = 5;
    int at_best;
    run_decisions(&t, &all, 1, 0, 12, &rng, &at_best);
    mn_tuner_class *c = &t.c[0];
    cr_assert_gt(c->s, 2, "the slope rule moved up: s %u", c->s);
    cr_assert_eq(c->home, 2, "the slope rule leaves home where it started");
    p.rule = MN_TUNER_RULE_MODEL;
    mn_tuner_reparam(&t, &p);
    cr_assert_eq(c->home, c->s, "the model rule starts where the class is");
    run_decisions(&t, &all, 1, 0, 4, &rng, &at_best);
    double seqs = c->model.seqs;
    bool known = false;
    for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN; x++)
        known |= c->at[x].known;
    cr_assert(known && seqs > 0);
    p.cost = MN_TUNER_COST_VERIFY;
    mn_tuner_reparam(&t, &p);
    for (uint32_t x = 0; x <= MN_TUNER_MAX_LEN; x++) {
        cr_assert_not(c->at[x].known, "point %u measured the other cost", x);
        cr_assert_eq(c->model.seconds[x], 0);
    }
    cr_assert_eq(c->model.spec_seconds, 0);
    cr_assert_eq(c->model.seqs, seqs, "what was kept stays");
}

/* Steps that cannot be costed (no token produced, no finite time) count nowhere. */
Test(tuner, steps_without_tokens_or_time_are_ignored)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.decision_threshold = 1;
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    mn_tuner_decision d;
    mn_tuner_step zero = {.batch = 1, .s = 4, .seconds = 1e-3, .tokens = 0};
    mn_tuner_step inf = {.batch = 1, .s = 4, .seconds = INFINITY, .tokens = 1};
    cr_assert(!mn_tuner_observe(&t, &zero, true, &d));
    cr_assert(!mn_tuner_observe(&t, &inf, true, &d));
    cr_assert_eq(t.c[0].win_steps, 0);
    cr_assert_eq(t.c[0].at[4].steps, 0);
}

/* Drafting that costs a fixed share of every speculating step (model drafters' rounds) and drafts
 * that do not repay it: the class must measure plain decoding as soon as it has left its starting
 * length, and then stay plain. A line through the speculating lengths' times carries the fixed cost
 * down to 0, where plain decoding pays none; taken for plain's time, it kept the class at s_max
 * until its first timed probe, probe_every windows later (a vote of three model drafts served 16
 * clients at 0.78x plain so). */
Test(tuner, sequence_rule_measures_plain_decoding_before_judging_it)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    uint32_t rng = 5, cls = mn_tuner_class_of(16);
    for (int decisions = 0; decisions < 4;) {
        uint32_t s = next_s(&t, cls);
        /* a sequence's step: 1 plain, 2 + 0.1 s speculating; each draft token kept with probability
         * 0.5 while the previous ones were: about 1.4 a token at s = 8 */
        mn_tuner_step st = {.batch = 16, .s = s, .drafted = 16 * s, .seconds = 16 * (s ? 2 + 0.1 * s : 1)};
        for (int i = 0; i < 16; i++) {
            uint32_t a = 0;
            while (a < s && (lcg(&rng) & 0xffff) < 0x8000)
                a++;
            if (s && a == s)
                st.full[a]++;
            else
                st.ended[a]++;
            st.tokens += 1 + a;
        }
        mn_tuner_decision d;
        decisions += mn_tuner_observe(&t, &st, true, &d);
    }
    cr_assert_eq(t.c[cls].home, 0, "plain decoding, measured, is cheaper: home %u after 4 windows", t.c[cls].home);
    cr_assert_eq(t.c[cls].s, 0);
}

/* The sequence rule's probes are short when a step verifies many sequences: at 16 sequences, drafts
 * that never pay cost the first window (at the starting length), 8 blocks at s_max in the first
 * paired probe (decision_threshold steps a side), and then 2 steps at s_max per probe (they cost
 * more than 1.5x plain decoding over the same steps), and the classes that follow 9-16 do not
 * follow its probes; at one sequence a paired probe takes decision_threshold steps on each side. */
Test(tuner, sequence_rule_probes_briefly_at_a_large_batch)
{
    spec_model none = {.a = 0, .verify_slope = 0.2, .draft_cost = 0.1, .drawn = true};
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    uint32_t rng = 3, cls = mn_tuner_class_of(16);
    uint64_t speculating = 0, steps = 0, decisions = 0;
    while (decisions < 200) {
        mn_tuner_decision d;
        uint32_t s;
        decisions += feed(&t, &none, 16, 0, &rng, &d, &s);
        speculating += s > 0;
        steps++;
        if (decisions == 2)
            cr_assert_eq(speculating, 2 * p.decision_threshold,
                         "the first window at 4, then a paired probe of 8 blocks a side: %llu steps speculating",
                         (unsigned long long)speculating);
        if (decisions >= 2)
            cr_assert_eq(t.c[mn_tuner_class_of(8)].s, 0, "5-8 follows where 9-16 rests, not its probes");
    }
    cr_assert_eq(t.c[cls].s, 0);
    cr_assert_geq(t.c[cls].probes, 3);
    uint64_t probes = t.c[cls].probes - 1; /* after the first */
    cr_assert_eq(speculating, 2 * p.decision_threshold + 2 * probes,
                 "%llu steps speculating: the first window and probe, and %llu probes of 2 steps at s_max",
                 (unsigned long long)speculating, (unsigned long long)probes);
    cr_assert_lt(speculating, steps / 40, "%llu of %llu steps", (unsigned long long)speculating,
                 (unsigned long long)steps);

    /* one sequence a step: the paired probe after the first window takes decision_threshold steps a
     * side, in blocks of 4 from its home, s_max */
    mn_tuner_init(&t, &p, 4);
    mn_tuner_decision d;
    while (!feed(&t, &none, 1, 0, &rng, &d, NULL))
        ;
    cr_assert(t.c[0].pairing, "a paired probe follows the first window");
    uint32_t at[2] = {0, 0}, s;
    for (uint32_t i = 1; i < 2 * p.decision_threshold; i++) {
        cr_assert(!feed(&t, &none, 1, 0, &rng, &d, &s), "decided after %u steps of one sequence", i);
        at[s > 0]++;
    }
    cr_assert(feed(&t, &none, 1, 0, &rng, &d, &s));
    at[s > 0]++;
    cr_assert_eq(at[1], p.decision_threshold);
    cr_assert_eq(at[0], p.decision_threshold);
    cr_assert_eq(t.c[0].home, 0, "plain decoding costs less");
}

/* The machine's speed moves under the tuner (other tenants on a shared host: the same plain window
 * cost 380-570 us a token within one run on this one), here a square wave between 1 and 1.8 times
 * every 24 steps, while speculating is 10% cheaper than plain decoding at any speed. A paired probe
 * sees both sides at the same speeds, so the class stays speculating; windows measured one after
 * the other would each catch their own share of slow steps. */
Test(tuner, paired_probes_see_through_a_drifting_machine)
{
    spec_model m = {.a = 0.5, .verify_slope = 0.05, .draft_cost = 0.05};
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    cr_assert_lt(model_cost(&m, p.s_max), 0.91 * model_cost(&m, 0));
    int decisions = 0, speculating = 0;
    for (uint64_t step = 0; decisions < 400; step++) {
        uint32_t s = next_s(&t, 0);
        double speed = (step / 24) % 2 ? 1.8 : 1.0;
        mn_tuner_decision d;
        if (observe(&t, 1, s, 10 * model_cost(&m, s) * speed, 10, true, &d) && ++decisions > 20)
            speculating += t.c[0].home == p.s_max;
    }
    cr_assert_geq(speculating, 370, "speculating after %d of 380 decisions", speculating);
}

/* A later probe moves the class when the other side is far cheaper, even when its steps' costs
 * have heavy tails (a model draft catching up when it is asked again), where two standard errors
 * would take longer than a probe lasts: speculating steps cost 0.25 or, one in eight, 12 seconds a
 * token (1.72 on average), plain ones 1.0 flat; the class starts speculating and must leave. */
Test(tuner, a_far_cheaper_side_wins_a_probe_whatever_its_noise)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    p.probe_every = 1;
    mn_tuner t;
    mn_tuner_init(&t, &p, p.s_max);
    t.c[0].probes = 1; /* as if the first probe had chosen speculating */
    t.c[0].probed_at = 0;
    mn_tuner_decision d;
    uint32_t k = 0;
    for (int decisions = 0; decisions < 2 && t.c[0].home == p.s_max;) {
        uint32_t s = next_s(&t, 0);
        double seconds = s ? (k++ % 8 == 7 ? 12.0 : 0.25) : 1.0;
        decisions += observe(&t, 1, s, seconds, 1, true, &d);
    }
    cr_assert_eq(t.c[0].home, 0, "plain decoding costs 0.58 as much: home %u", t.c[0].home);
}

/* One step of 16 sequences at class cls's next length, producing 16 tokens at `spec` a token when it
 * speculates and `plain` when not, its time scattered +-spread (uniform). Whether it decided. */
static int jittered_step(mn_tuner *t, uint32_t cls, double spec, double plain, double spread, uint32_t *rng)
{
    uint32_t s = next_s(t, cls);
    double jitter = 1 + spread * (2.0 * (lcg(rng) & 0xffff) / 0xffff - 1);
    mn_tuner_decision d;
    return observe(t, 16, s, 16 * (s ? spec : plain) * jitter, 16, true, &d);
}

/* A home that loses by a little: at 16 sequences speculating steps cost 1.12 a token and plain ones
 * 1.0, each step scattered +-25% (uniform), as a shared host scatters them. The class starts
 * speculating, as if its first probe had chosen so on the warm-up's noise, with plain decoding's
 * figure from that probe. Its home windows then cost more than that figure, which must bring the
 * next probe at once rather than probe_every windows later: within 8 decisions the class must
 * leave. (The vote
 * served devil at 16 clients 0.94x plain so, speculating at every step after its first probe.)
 * Then, with the sides equal, the class must not move back and forth on noise. */
Test(tuner, a_home_that_loses_a_little_moves_soon)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    mn_tuner t;
    mn_tuner_init(&t, &p, p.s_max);
    uint32_t cls = mn_tuner_class_of(16), rng = 11;
    mn_tuner_class *c = &t.c[cls];
    c->probes = 1;
    c->probe_gap = p.probe_every;
    c->at[0] = (mn_tuner_point){.cost = 1.0, .known = true};
    int decisions = 0;
    while (decisions < 8 && c->home == p.s_max)
        decisions += jittered_step(&t, cls, 1.12, 1.0, 0.25, &rng);
    cr_assert_eq(c->home, 0, "plain decoding costs 0.89 as much: home %u after %d decisions", c->home, decisions);
    uint64_t moves = c->moves;
    for (decisions = 0; decisions < 200;)
        decisions += jittered_step(&t, cls, 1.0, 1.0, 0.25, &rng);
    cr_assert_leq(c->moves - moves, 2, "equal sides: %llu moves in 200 decisions",
                  (unsigned long long)(c->moves - moves));
}

/* A home that gets dearer when the text changes: at 16 sequences speculating costs 0.85 a token
 * and plain decoding 1.0 (steps scattered +-15%), and the class settles at speculating, its probes
 * spaced ever wider. Then speculating costs 1.07: less than PROBE_ALARM times plain decoding's
 * figure, but that much more than home's own in its last probe, which must bring a probe at once:
 * within 8 decisions the class must leave. (Served kjv, then devil, at 16 clients, the vote's class
 * rested at speculating so, and no probe came in the devil rounds.) */
Test(tuner, a_home_that_gets_dearer_probes_at_once)
{
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    mn_tuner t;
    mn_tuner_init(&t, &p, p.s_max);
    uint32_t cls = mn_tuner_class_of(16), rng = 5;
    mn_tuner_class *c = &t.c[cls];
    for (int decisions = 0; decisions < 40;)
        decisions += jittered_step(&t, cls, 0.85, 1.0, 0.15, &rng);
    cr_assert_eq(c->home, p.s_max, "speculating costs 0.85 as much: home %u", c->home);
    cr_assert_gt(c->probe_gap, p.probe_every, "probes that change nothing back off: gap %u", c->probe_gap);
    int decisions = 0;
    while (decisions < 8 && c->home == p.s_max)
        decisions += jittered_step(&t, cls, 1.07, 1.0, 0.15, &rng);
    cr_assert_eq(c->home, 0, "plain decoding costs 0.93 as much now: home %u after %d decisions", c->home, decisions);
}

/* Classes that have not decided follow the nearest one that has: when no draft pays at 16
 * sequences, 5-8 sequences (passed through while clients ramp down) decode plainly too, with the
 * leader's theta and acceptance, instead of drafting the starting length at every step; once they decide
 * for themselves they stop following, and a class with two deciding neighbors follows the nearer. */
Test(tuner, undecided_classes_follow_the_nearest_decided_one)
{
    spec_model none = {.a = 0, .verify_slope = 0.2, .draft_cost = 0.1, .drawn = true};
    spec_model all = {.a = 0.95, .verify_slope = 0.05, .draft_cost = 0, .drawn = true};
    mn_tuner_params p = with_rule(MN_TUNER_RULE_SEQUENCE);
    mn_tuner t;
    mn_tuner_init(&t, &p, 4);
    uint32_t rng = 5, c16 = mn_tuner_class_of(16), c8 = mn_tuner_class_of(8), c1 = mn_tuner_class_of(1);
    int at_best;
    run_decisions(&t, &none, 16, 0, 40, &rng, &at_best);
    cr_assert_eq(t.c[c16].home, 0, "no draft pays at 16 sequences");
    cr_assert_eq(t.c[c16].s, 0);
    for (uint32_t k = 0; k < MN_TUNER_CLASSES; k++)
        cr_assert_eq(t.c[k].s, 0, "class %s follows 9-16", mn_tuner_class_name(k));
    mn_tuner_rate a8 = mn_tuner_advise(&t, c8).kind[MN_TUNER_FREE];
    mn_tuner_rate a16 = mn_tuner_advise(&t, c16).kind[MN_TUNER_FREE];
    /* (theta is NAN here: every step drafted the same length, so no line of time over drafts) */
    cr_assert(a8.first == a16.first && !memcmp(a8.carry, a16.carry, sizeof a8.carry) &&
                  (a8.theta == a16.theta || (isnan(a8.theta) && isnan(a16.theta))),
              "with its theta and acceptance: %g %g, %g %g", a8.theta, a16.theta, a8.first, a16.first);

    /* batch 1 decides for itself (drafts that pay there): 2 sequences now follow batch 1 (nearer),
     * 5-8 still follow 9-16 (nearer), and 3-4 are as near to both: the larger batch leads */
    run_decisions(&t, &all, 1, 0, 4 * p.probe_every + 10, &rng, &at_best);
    cr_assert_eq(t.c[c1].home, p.s_max);
    cr_assert_eq(t.c[mn_tuner_class_of(2)].s, t.c[c1].s, "2 follows 1");
    cr_assert_eq(t.c[c8].s, 0, "5-8 follows 9-16");
    cr_assert_eq(t.c[mn_tuner_class_of(3)].s, 0, "3-4, between the two, follows the larger batch");

    /* 5-8 decides itself, from its own (good) drafts: it leaves plain decoding, and stops following */
    run_decisions(&t, &all, 8, 0, 4 * p.probe_every + 10, &rng, &at_best);
    cr_assert_eq(t.c[c8].home, p.s_max);
    run_decisions(&t, &none, 16, 0, 8, &rng, &at_best);
    cr_assert_eq(t.c[c16].home, 0);
    cr_assert_eq(t.c[c8].home, p.s_max, "a class that has decided no longer follows");
}

Test(tuner, parameters_and_option)
{
    mn_tuner_params p = mn_tuner_defaults();
    mn_err err = {{0}};
    cr_assert_eq(mn_tuner_set_param(&p, "s_max", 6, NULL, &err), MN_OK);
    cr_assert_eq(p.s_max, 6);
    cr_assert_eq(mn_tuner_set_param(&p, "s_min", 7, NULL, &err), MN_INVALID, "s_min above s_max");
    cr_assert_eq(p.s_min, 0, "unchanged on error");
    cr_assert_eq(mn_tuner_set_param(&p, "s_max", 17, NULL, &err), MN_INVALID);
    cr_assert_eq(mn_tuner_set_param(&p, "s_reward", 0, NULL, &err), MN_INVALID);
    cr_assert_eq(mn_tuner_set_param(&p, "decision_threshold", 2.5, NULL, &err), MN_INVALID);
    cr_assert_eq(mn_tuner_set_param(&p, "margin", 1, NULL, &err), MN_INVALID);
    cr_assert_eq(mn_tuner_set_param(&p, "margin", -1e-60, NULL, &err), MN_INVALID, "a float rounds it to -0");
    cr_assert_eq(mn_tuner_set_param(&p, "probe_every", NAN, "x", &err), MN_INVALID);
    cr_assert_eq(mn_tuner_set_param(&p, "warm_up", 0, NULL, &err), MN_OK);
    cr_assert_eq(p.warm_up, 0);
    cr_assert_eq(mn_tuner_set_param(&p, "warm_up", -1, NULL, &err), MN_INVALID);
    cr_assert_eq(mn_tuner_set_param(&p, "cost", NAN, "verify", &err), MN_OK);
    cr_assert_eq(p.cost, MN_TUNER_COST_VERIFY);
    cr_assert_eq(mn_tuner_set_param(&p, "rule", NAN, "model", &err), MN_OK);
    cr_assert_eq(p.rule, MN_TUNER_RULE_MODEL);
    cr_assert_eq(mn_tuner_set_param(&p, "rule", NAN, "sequence", &err), MN_OK);
    cr_assert_eq(p.rule, MN_TUNER_RULE_SEQUENCE);
    cr_assert_str_eq(mn_tuner_rule_name(p.rule), "sequence");
    cr_assert_eq(mn_tuner_set_param(&p, "rule", NAN, "model", &err), MN_OK);
    cr_assert_eq(mn_tuner_set_param(&p, "rule", NAN, "guess", &err), MN_INVALID);
    cr_assert_eq(mn_tuner_set_param(&p, "rule", 1, NULL, &err), MN_INVALID);
    cr_assert_eq(p.rule, MN_TUNER_RULE_MODEL, "unchanged on error");
    cr_assert_eq(mn_tuner_set_param(&p, "nope", 1, NULL, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "nope"), "%s", err.msg);

    mn_tuner_mode mode = MN_TUNER_FIXED;
    p = mn_tuner_defaults();
    cr_assert_eq(mn_tuner_parse("adaptive,s_max=6,decision_threshold=8,margin=0.1,cost=verify", &mode, &p, &err),
                 MN_OK, "%s", err.msg);
    cr_assert_eq(mode, MN_TUNER_ADAPTIVE);
    cr_assert_eq(p.s_max, 6);
    cr_assert_eq(p.decision_threshold, 8);
    cr_assert_float_eq(p.margin, 0.1f, 1e-6);
    cr_assert_eq(p.cost, MN_TUNER_COST_VERIFY);
    cr_assert_eq(mn_tuner_parse("fixed", &mode, &p, &err), MN_OK);
    cr_assert_eq(mode, MN_TUNER_FIXED);
    /* the keys are checked together: s_min above the default s_max before s_max raises it */
    cr_assert_eq(mn_tuner_parse("fixed,s_min=10,s_max=12", &mode, &p, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(p.s_min, 10);
    cr_assert_eq(p.s_max, 12);
    p = mn_tuner_defaults();
    const char *bad[] = {"", "sometimes", "adaptive,s_max", "adaptive,s_min=9", "adaptive,cost=free",
                         "adaptive,s_max=six"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mn_tuner_params before = p;
        cr_assert_eq(mn_tuner_parse(bad[i], &mode, &p, &err), MN_INVALID, "'%s'", bad[i]);
        cr_assert_eq(memcmp(&before, &p, sizeof p), 0, "'%s' changed the parameters", bad[i]);
        cr_assert_eq(mode, MN_TUNER_FIXED);
    }
}
