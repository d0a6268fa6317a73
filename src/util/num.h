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
/* A finite real number in [lo, hi]. */
bool mn_parse_real(const char *s, double lo, double hi, double *out);

#endif
