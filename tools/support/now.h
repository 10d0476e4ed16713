/* now.h - the tools' clock: seconds on the monotonic clock, which no
 * change of the wall-clock time moves, for timing steps, benchmarks and
 * waits (a difference of two readings is what means something).
 * Internal to the tools: not installed, not in the library. */
#ifndef NB_TOOLS_NOW_H
#define NB_TOOLS_NOW_H

#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
