/* Files the run writes only at its end (--save-checkpoint), checked before it trains: a path that
 * cannot be written would otherwise cost the whole run. */
#ifndef CIFAR10_DESTINATION_H
#define CIFAR10_DESTINATION_H

/* Whether a file can be written at `path` as mpt_trainer_save_checkpoint writes it (a new file in
 * its directory, then renamed over `path`): the path is no directory, and its directory exists and
 * may be written. `flag` names the option in the message. Returns 0, or 1 after printing the error. */
int destination_check(const char* flag, const char* path);

#endif
