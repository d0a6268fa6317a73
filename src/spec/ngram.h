/* ngram.h - the n-gram drafter (--draft ngram): prompt lookup over the sequence's own tokens.
 *
 * Given a sequence t[0..n) (its prompt followed by its output so far), find an earlier place where
 * the sequence's last k tokens occurred, and propose what followed them there. Precisely: a match
 * of length k ends at e (1 <= e <= n - 1) when t[e-k..e) == t[n-k..n) and e - k >= 0; e <= n - 1
 * keeps the match strictly earlier than the suffix and leaves at least one token after it.
 *
 * Which match: the longest k in [min_n, max_n] wins (a longer context predicts better); among
 * matches of that length the most recent (largest e) wins, since nearby text best predicts what
 * comes next and it is what a repetition in progress is continuing.
 *
 * What is proposed: up to s tokens that followed, t[e], t[e+1], .... When they run into the end
 * of the sequence, the proposal continues with its own tokens: the match says the sequence repeats
 * with period n - e, so the token predicted at n + j is t[e + j], which for e + j >= n is the
 * proposal's own out[e + j - n]. A run "a a a a" thus proposes s more a's.
 *
 * How many: a match of max_n tokens proposes all s; a shorter one at most short_s. A long match
 * is a repetition in progress and tends to hold for many tokens, a short one is a guess that is
 * kept or lost within a token or two, and every proposed token costs a verified position whether
 * it is kept or not. On the bundled target's own greedy continuations of 60 prompts per set
 * (simulated with the measured cost of a k-token pass), proposing 2 tokens on a short match
 * produced 1-9% more tokens per unit of target time than proposing s on every match, the more the
 * longer s (kjv, web at s = 3..8; devil 0-3%), and the best s graded beat the best s flat by 5%;
 * measured in the server: docs/measurements.md, "The n-gram drafter, graded and shared".
 *
 * Defaults: min_n = 2, max_n = 4, short_s = 2 (minionsd: drafter.ngram.min_n, short_len). One-token
 * matches fire on every common word and mostly propose junk, and each wrong proposal costs verified
 * positions: with min_n = 1 the server was level at 1 client and 20% slower at 16. Beyond four,
 * longer matches rarely change which place is found but raise the cost, O(n * max_n).
 *
 * Cost: O(n * max_n) comparisons per call (one backward scan; it stops at the first match of length
 * max_n, the best possible). No allocation: out is the caller's, s entries.
 * Thread: pure over the caller's arrays; any thread.
 */
#ifndef MN_NGRAM_H
#define MN_NGRAM_H

#include <stdint.h>

#include "util/status.h"

#define MN_NGRAM_MIN_N_DEFAULT 2  /* shortest suffix worth matching */
#define MN_NGRAM_MAX_N_DEFAULT 4  /* longest suffix compared */
#define MN_NGRAM_SHORT_DEFAULT 2  /* most tokens proposed on a match shorter than max_n */

/* MN_OK when 1 <= min_n <= max_n, else MN_INVALID with the reason in err. For the settings. */
mn_status mn_ngram_check(uint32_t min_n, uint32_t max_n, mn_err *err);

/* Propose the tokens after t[0..n) into out[0..m) and return m: m = s for a match of max_n
 * tokens, min(s, short_s) for a shorter one (short_s >= s: every match proposes s); or return 0,
 * writing nothing, when no match of length >= min_n exists, when n < 2, or when the parameters fail
 * mn_ngram_check. (With the self-continuation above a match always yields all m tokens.) t and out
 * must not overlap; out has room for s. Cannot fail otherwise. */
uint32_t mn_ngram_propose(const int32_t *t, uint32_t n, uint32_t min_n, uint32_t max_n, uint32_t s,
                          uint32_t short_s, int32_t *out);

/* The shared cache: what earlier sequences did after the same tokens.
 *
 * A sequence with no match in its own tokens often continues as another one did: requests of one
 * domain share names, phrases and formulas, and a model repeats its own habits across requests. The
 * cache holds the tokens of finished sequences in a ring of cap tokens (each followed by
 * MN_NGRAM_SEP, so that no continuation runs from one sequence into the next), and a hash table
 * from every k-gram of them (k = 2..max_n) to the ring position of the token that followed it, the
 * latest occurrence winning. A lookup tries the longest suffix first and proposes what followed it,
 * up to the separator, within s (a max_n match) or short_s (a shorter one), like the own-token
 * lookup. Entries are not removed when the ring overwrites their text: a lookup compares the k
 * tokens before the position it finds with the suffix, so a stale or colliding entry proposes
 * nothing. Any proposal is only a guess for the target to verify, so whatever the cache holds, the
 * output is unchanged; only the acceptance is.
 *
 * Memory: cap tokens of ring and a table of the next power of two >= 4 cap entries, 4 bytes each
 * (the default 2^18 tokens: 1 MiB + 4 MiB), allocated once. Cost: adding n tokens O(n * max_n);
 * a lookup O(max_n^2 + s). Thread: not shared between threads; the owner's (the n-gram drafter's,
 * on the loop). */
#define MN_NGRAM_SEP (-1)
#define MN_NGRAM_CACHE_TOKENS_DEFAULT (1u << 18)

typedef struct mn_ngram_cache {
    int32_t *ring;   /* [cap] tokens and separators */
    uint32_t *table; /* [mask + 1]: 1 + the ring index of the token after a k-gram; 0: empty */
    uint32_t cap, head, mask, max_n;
    uint64_t added;  /* tokens ever added (separators not counted) */
} mn_ngram_cache;

/* An empty cache of cap_tokens (>= 64) for k-grams up to max_n (2..8). MN_NOMEM or MN_INVALID. */
mn_status mn_ngram_cache_init(mn_ngram_cache *c, uint32_t cap_tokens, uint32_t max_n, mn_err *err);
/* Frees what init allocated; c may be zeroed or already freed. */
void mn_ngram_cache_free(mn_ngram_cache *c);
/* Append a finished sequence t[0..n) (only its last cap - 1 tokens when longer), overwriting the
 * oldest, and index its k-grams. Tokens must be >= 0. */
void mn_ngram_cache_add(mn_ngram_cache *c, const int32_t *t, uint32_t n);
/* Propose what followed the longest suffix of t[0..n) (>= min_n tokens) in the cache into out and
 * return how many (0: none); as mn_ngram_propose for s and short_s. */
uint32_t mn_ngram_cache_propose(const mn_ngram_cache *c, const int32_t *t, uint32_t n, uint32_t min_n, uint32_t s,
                                uint32_t short_s, int32_t *out);

#endif
