/* Monotonic clock for timing training steps and evaluation. */
#define _POSIX_C_SOURCE 200809L

#include "timer.h"

#include <time.h>

double timer_seconds(void)
{
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0)
        return 0.0; /* CLOCK_MONOTONIC is mandatory on POSIX systems; this cannot happen there */
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}
