/* clock.h - monotonic seconds, for timing and statistics. Thread-safe. */
#ifndef MN_CLOCK_H
#define MN_CLOCK_H

#include <time.h>

static inline double mn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
