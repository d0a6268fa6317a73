/* num.h - numbers from the command line: the whole string as one number within a range, or none.
 *
 * Every CLI reads its option values through these, so that "4x", "", "1e999" or a value out of
 * range is refused the same way everywhere (strtol and atoi would take a prefix, or wrap).
 * Thread: any. Errors: false, *out unchanged.
 */
#ifndef MN_NUM_H
#define MN_NUM_H

#include <stdbool.h>

/* A decimal integer in [lo, hi]. */
bool mn_parse_long(const char *s, long lo, long hi, long *out);
/* A comma-separated list of decimal integers in [lo, hi] ("1,4,16"), at most max of them, into
 * out: their count, or -1 when the list is malformed (an empty item, one out of range, too many);
 * out may then hold part of it. */
int mn_parse_long_list(const char *list, long lo, long hi, long *out, int max);
/* A finite real number in [lo, hi]. */
bool mn_parse_real(const char *s, double lo, double hi, double *out);

#endif
