/* Ctrl-C (SIGINT) or SIGTERM during training: fit's callbacks see the request and stop fit, and the
 * run saves its --save-checkpoint (mid-epoch, resumable with --resume) before it exits, rather than
 * lose the epochs trained. A second signal ends the program at once, as without this. */
#ifndef CIFAR10_INTERRUPT_H
#define CIFAR10_INTERRUPT_H

/* Catches SIGINT and SIGTERM until interrupt_release; each is caught once. */
void interrupt_catch(void);
/* Gives both signals back their default action. */
void interrupt_release(void);
/* Non-zero once either signal was caught (it stays so). */
int interrupt_requested(void);
/* The signal caught, 0 for none: the program exits with 128 + it, as a shell reports a killed one. */
int interrupt_signal(void);

#endif
