/* ngram.c - prompt lookup. One scan from the most recent end position backwards; a candidate only
 * replaces the best so far when strictly longer, which is what makes the most recent match win
 * among equals, and a match of length max_n ends the scan since nothing can beat it. */
#include "spec/ngram.h"

mn_status mn_ngram_check(uint32_t min_n, uint32_t max_n, mn_err *err)
{
    if (min_n < 1 || min_n > max_n)
        return mn_fail(err, MN_INVALID, "ngram: want 1 <= min_n (%u) <= max_n (%u)", min_n, max_n);
    return MN_OK;
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
    if (best_len < max_n && short_s < s)
        s = short_s;
    for (uint32_t j = 0; j < s; j++) {
        uint32_t at = best_e + j;
        out[j] = at < n ? t[at] : out[at - n]; /* past the end: the repeat continues itself */
    }
    return s;
}
