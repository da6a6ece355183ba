/* Where --json goes: checked before training, written only once the run has succeeded, so a failed
 * or interrupted run leaves the report of an earlier run as it was. The program's own output
 * (/dev/stdout, or the file stdout goes to) gets the report after the progress lines. */
#ifndef CIFAR10_JSON_DESTINATION_H
#define CIFAR10_JSON_DESTINATION_H

#include <stdio.h>

typedef struct json_destination {
    const char* path;
    FILE* stream;      /* the report's stream: a device or pipe opened early, stdout or stderr, or
                        * the file, opened (truncated) only when the report is written */
    int is_own_output; /* `stream` is stdout or stderr: flushed, never closed */
} json_destination;

/* Before training: whether a report can be written at `path`, so a bad path fails in a second, not
 * after an hour. A file must be writable (or, if there is none yet, its directory); the program's
 * standard output or error (the same terminal, pipe or file) is used as it is; another device or
 * pipe is opened now, as a reader of a pipe expects. Returns 0, or 1 after printing the error. */
int json_destination_open(json_destination* destination, const char* path);

/* At the end of a successful run: the stream to write the report to. Returns NULL after printing
 * the error. */
FILE* json_destination_begin(json_destination* destination);

/* Ends the report: flushes the stream and closes it unless it is the program's own.
 * `write_failed`: the writes already failed. Returns 0, or 1 after printing the error. */
int json_destination_commit(json_destination* destination, int write_failed);

/* After a failed run: closes a stream opened early; a file is left as it was. Safe to call twice,
 * and on a zeroed destination. */
void json_destination_abandon(json_destination* destination);

#endif
