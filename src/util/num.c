/* num.c - numbers from the command line (see num.h). */
#include "util/num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

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
