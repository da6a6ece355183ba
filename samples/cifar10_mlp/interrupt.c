/* See interrupt.h. */
#include "interrupt.h"

#include <signal.h>

static volatile sig_atomic_t caught_signal = 0;

/* Only async-signal-safe work: record the signal and let the next one take its default action. */
static void on_signal(int number)
{
    caught_signal = number;
    signal(number, SIG_DFL);
}

void interrupt_catch(void)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
}

void interrupt_release(void)
{
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

int interrupt_requested(void)
{
    return caught_signal != 0;
}

int interrupt_signal(void)
{
    return (int)caught_signal;
}
