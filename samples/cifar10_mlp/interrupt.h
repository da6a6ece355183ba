/* Ctrl-C (SIGINT) or SIGTERM during training: fit's callbacks see the request and stop fit, the run
 * saves its --save-checkpoint (mid-epoch, resumable with --resume), and the program then ends by
 * that signal, as a shell expects of an interrupted program, rather than lose the epochs trained.
 * A second signal ends the program at once, as without this. */
#ifndef CIFAR10_INTERRUPT_H
#define CIFAR10_INTERRUPT_H

/* Catches SIGINT and SIGTERM until interrupt_release, each unless it was ignored (as a script's
 * background job ignores SIGINT): an ignored signal stays ignored. */
void interrupt_catch(void);
/* Gives both signals back what they had before interrupt_catch (unless one was caught). */
void interrupt_release(void);
/* Non-zero once either signal was caught (it stays so). */
int interrupt_requested(void);
/* When a signal was caught: ends the program by it (its default action). Otherwise returns. */
void interrupt_end_program(void);

#endif
