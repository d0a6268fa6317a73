/* num.c - numbers from the command line (see num.h). */
#include "util/num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bool mn_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

int mn_parse_long_list(const char *list, long lo, long hi, long *out, int max)
{
    int n = 0;
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[24];
        if (n == max || len >= sizeof item)
            return -1;
        memcpy(item, p, len);
        item[len] = 0;
        if (!mn_parse_long(item, lo, hi, &out[n++]))
            return -1;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

bool mn_parse_real(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}
