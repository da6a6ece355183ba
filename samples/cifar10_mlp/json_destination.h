/* Where --json goes: checked before training, written only when the run has succeeded. A file is
 * replaced as a whole (a new file renamed over it), so a failed or interrupted run leaves the report
 * of an earlier run as it was; the program's own output (/dev/stdout) gets the report after the
 * progress lines, and another device or pipe is written as a stream. */
#ifndef CIFAR10_JSON_DESTINATION_H
#define CIFAR10_JSON_DESTINATION_H

#include <stdio.h>

typedef struct json_destination {
    const char* path;    /* as given */
    char* file;          /* a file to replace: the path, or the file a symbolic link leads to */
    char* temporary;     /* while the report is written: the new file, renamed over `file` at the end */
    FILE* stream;        /* where the report is being written, or a device or pipe opened early */
    int is_own_output;   /* `stream` is stdout or stderr: flushed, never closed */
} json_destination;

/* Before training: whether a report can be written at `path`, so a bad path fails in a second, not
 * after an hour. A regular file (through symbolic links), or none yet, needs a directory it may be
 * written in; the program's standard output or error (the same file, device or pipe) is used as it
 * is; another device or pipe is opened now. Returns 0, or 1 after printing the error. */
int json_destination_open(json_destination* destination, const char* path);

/* At the end of a successful run: the stream to write the report to (for a file, a new file beside
 * it). Returns NULL after printing the error. */
FILE* json_destination_begin(json_destination* destination);

/* Ends the report: a file's new file is synced, closed and renamed over it; a stream is flushed
 * (and closed unless it is the program's own). `write_failed`: the writes already failed (the new
 * file is then removed). Returns 0, or 1 after printing the error. */
int json_destination_commit(json_destination* destination, int write_failed);

/* After a failed run (or a failed commit): closes a stream it opened and removes an unfinished new
 * file; a file to replace is left as it was. Safe to call twice, and on a zeroed destination. */
void json_destination_abandon(json_destination* destination);

#endif
