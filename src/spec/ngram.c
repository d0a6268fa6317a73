/* ngram.c - prompt lookup. One scan from the most recent end position backwards; a candidate only
 * replaces the best so far when strictly longer, which is what makes the most recent match win
 * among equals, and a match of length max_n ends the scan since nothing can beat it. */
#include "spec/ngram.h"

#include "util/alloc.h"

mn_status mn_ngram_check(uint32_t min_n, uint32_t max_n, mn_err *err)
{
    if (min_n < 1 || min_n > max_n)
        return mn_fail(err, MN_INVALID, "ngram: want 1 <= min_n (%u) <= max_n (%u)", min_n, max_n);
    return MN_OK;
}

/* How many tokens a match of len tokens proposes: s for a full max_n match, else at most short_s. */
static uint32_t proposal_len(uint32_t len, uint32_t max_n, uint32_t s, uint32_t short_s)
{
    return len >= max_n || short_s >= s ? s : short_s;
}

uint32_t mn_ngram_propose(const int32_t *t, uint32_t n, uint32_t min_n, uint32_t max_n, uint32_t s,
                          uint32_t short_s, int32_t *out)
{
    if (n < 2 || s == 0 || min_n < 1 || min_n > max_n)
        return 0;
    uint32_t best_e = 0, best_len = 0;
    for (uint32_t e = n - 1; e >= 1; e--) {
        uint32_t len = 0;
        /* len < e keeps t[e-1-len] in range; e <= n-1 keeps t[n-1-len] in range too */
        while (len < max_n && len < e && t[e - 1 - len] == t[n - 1 - len])
            len++;
        if (len >= min_n && len > best_len) {
            best_e = e;
            best_len = len;
            if (len == max_n)
                break;
        }
    }
    if (best_len == 0)
        return 0;
    s = proposal_len(best_len, max_n, s, short_s);
    for (uint32_t j = 0; j < s; j++) {
        uint32_t at = best_e + j;
        out[j] = at < n ? t[at] : out[at - n]; /* past the end: the repeat continues itself */
    }
    return s;
}

/* ---- the shared cache ----------------------------------------------------------------------- */

/* The slot of the k-gram t[0..k): FNV-1a over its tokens and k, folded into the table. */
static uint32_t slot(const mn_ngram_cache *c, const int32_t *t, uint32_t k)
{
    uint64_t h = 1469598103934665603ull ^ k;
    for (uint32_t i = 0; i < k; i++) {
        h ^= (uint32_t)t[i];
        h *= 1099511628211ull;
    }
    return (uint32_t)(h ^ h >> 29) & c->mask;
}

mn_status mn_ngram_cache_init(mn_ngram_cache *c, uint32_t cap_tokens, uint32_t max_n, mn_err *err)
{
    *c = (mn_ngram_cache){0};
    if (cap_tokens < 64 || cap_tokens > (1u << 28) || max_n < 2 || max_n > 8)
        return mn_fail(err, MN_INVALID, "ngram cache: want 64 <= tokens (%u) <= 2^28 and 2 <= max_n (%u) <= 8",
                       cap_tokens, max_n);
    uint32_t slots = 1;
    while (slots < 4 * cap_tokens)
        slots <<= 1;
    c->ring = mn_malloc((size_t)cap_tokens * sizeof *c->ring);
    c->table = mn_calloc(slots, sizeof *c->table);
    if (!c->ring || !c->table) {
        mn_ngram_cache_free(c);
        return mn_fail(err, MN_NOMEM, "ngram cache: out of memory for %u tokens", cap_tokens);
    }
    for (uint32_t i = 0; i < cap_tokens; i++)
        c->ring[i] = MN_NGRAM_SEP;
    c->cap = cap_tokens;
    c->mask = slots - 1;
    c->max_n = max_n;
    return MN_OK;
}

void mn_ngram_cache_free(mn_ngram_cache *c)
{
    mn_free(c->ring);
    mn_free(c->table);
    *c = (mn_ngram_cache){0};
}

void mn_ngram_cache_add(mn_ngram_cache *c, const int32_t *t, uint32_t n)
{
    if (!c->ring || n == 0)
        return;
    if (n > c->cap - 1) { /* keep its end: the separator needs a slot too */
        t += n - (c->cap - 1);
        n = c->cap - 1;
    }
    uint32_t start = c->head;
    for (uint32_t i = 0; i < n; i++)
        c->ring[(start + i) % c->cap] = t[i];
    c->ring[(start + n) % c->cap] = MN_NGRAM_SEP;
    c->head = (start + n + 1) % c->cap;
    c->added += n;
    /* t[j] follows the k-gram t[j-k..j); j = n would be the separator: nothing to propose */
    for (uint32_t j = 2; j < n; j++)
        for (uint32_t k = 2; k <= c->max_n && k <= j; k++)
            c->table[slot(c, t + j - k, k)] = 1 + (start + j) % c->cap;
}

uint32_t mn_ngram_cache_propose(const mn_ngram_cache *c, const int32_t *t, uint32_t n, uint32_t min_n, uint32_t s,
                                uint32_t short_s, int32_t *out)
{
    if (!c->ring || s == 0)
        return 0;
    if (min_n < 2)
        min_n = 2; /* one-token keys are not indexed */
    uint32_t top = c->max_n < n ? c->max_n : n;
    for (uint32_t k = top; k >= min_n; k--) {
        uint32_t v = c->table[slot(c, t + n - k, k)];
        if (!v)
            continue;
        uint32_t p = v - 1, i = 0; /* p: the ring index of the token after the k-gram */
        while (i < k && c->ring[(p + c->cap - k + i) % c->cap] == t[n - k + i])
            i++;
        if (i < k)
            continue; /* overwritten, or another k-gram in the same slot */
        uint32_t m = proposal_len(k, c->max_n, s, short_s), got = 0;
        /* stop at the separator, and at head: past it lies the oldest text, not a continuation */
        for (uint32_t at = p; got < m && at != c->head && c->ring[at] != MN_NGRAM_SEP; at = (at + 1) % c->cap)
            out[got++] = c->ring[at];
        if (got)
            return got;
    }
    return 0;
}
