/* Wall-clock time for the sample's measurements (CLOCK_MONOTONIC, so NTP steps cannot skew it). */
#ifndef CIFAR10_TIMER_H
#define CIFAR10_TIMER_H

/* Seconds since an arbitrary fixed point; only differences mean something. */
double timer_seconds(void);

#endif
