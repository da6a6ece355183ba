/* Error reporting: every mptrain status is checked, and a failure is printed as
 * "error: <what>: <status string>: <mpt_last_error()>" on stderr. */
#ifndef CIFAR10_CHECK_H
#define CIFAR10_CHECK_H

#include <mptrain/mptrain.h>

#if defined(__GNUC__)
#  define CHECK_PRINTF(fmt_index, args_index) __attribute__((format(printf, fmt_index, args_index)))
#else
#  define CHECK_PRINTF(fmt_index, args_index)
#endif

/* Prints a failed mptrain call. Call it right after the failing call: mpt_last_error() is only
 * valid until the next mptrain call on this thread. `what` is a printf format. */
void check_report(mpt_status status, const char* what, ...) CHECK_PRINTF(2, 3);

/* Prints "error: <what>" for failures outside mptrain (files, memory). */
void check_report_plain(const char* what, ...) CHECK_PRINTF(1, 2);

/* Evaluates an mptrain call; on failure reports it and jumps to the function's `done:` label, where
 * handles are released. Extra arguments fill the printf format `what`. */
#define CHECK_MPT(call, ...)                                  \
    do {                                                      \
        mpt_status check_status_ = (call);                    \
        if (check_status_ != MPT_STATUS_OK) {                 \
            check_report(check_status_, __VA_ARGS__);         \
            goto done;                                        \
        }                                                     \
    } while (0)

#endif
