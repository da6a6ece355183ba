/* See interrupt.h. */
#define _POSIX_C_SOURCE 200809L

#include "interrupt.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Lock-free, so the handler may set it (C11 7.14.1.1) on whichever thread the signal lands (the
 * library's workers too) and the training thread read it without a data race. */
static atomic_int caught_signal = 0;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may only set a lock-free atomic");
static struct sigaction previous_int, previous_term;
static int catching = 0;

/* Only async-signal-safe work: record the signal, and give both signals back their earlier action,
 * so that another one (either) acts as it would have. */
static void on_signal(int number)
{
    atomic_store(&caught_signal, number);
    sigaction(SIGINT, &previous_int, NULL);
    sigaction(SIGTERM, &previous_term, NULL);
}

/* Keeps `number`'s action in `previous` and installs on_signal, unless the signal is ignored. */
static void catch_unless_ignored(int number, struct sigaction* previous)
{
    struct sigaction action;
    sigaction(number, NULL, previous);
    if (previous->sa_handler == SIG_IGN)
        return;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(number, &action, NULL);
}

void interrupt_catch(void)
{
    catch_unless_ignored(SIGINT, &previous_int);
    catch_unless_ignored(SIGTERM, &previous_term);
    catching = 1;
}

void interrupt_release(void)
{
    if (!catching)
        return;
    catching = 0;
    sigaction(SIGINT, &previous_int, NULL);
    sigaction(SIGTERM, &previous_term, NULL);
}

int interrupt_requested(void)
{
    return atomic_load(&caught_signal) != 0;
}

void interrupt_end_program(void)
{
    const int number = atomic_load(&caught_signal);
    if (number == 0)
        return;
    fflush(stdout);
    fflush(stderr);
    signal(number, SIG_DFL);
    raise(number);
}
