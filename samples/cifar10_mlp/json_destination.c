/* See json_destination.h. */
#define _POSIX_C_SOURCE 200809L

#include "json_destination.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "destination.h"

/* Whether `info` is the file behind descriptor `descriptor` (a terminal, pipe or file alike). */
static int is_descriptor(const struct stat* info, int descriptor)
{
    struct stat own;
    return fstat(descriptor, &own) == 0 && own.st_dev == info->st_dev && own.st_ino == info->st_ino;
}

int json_destination_open(json_destination* destination, const char* path)
{
    struct stat info;

    memset(destination, 0, sizeof *destination);
    destination->path = path;
    if (stat(path, &info) != 0)
        return destination_check("--json", path); /* none yet: it is created in its directory */
    /* /dev/stdout, or the file stdout goes to: a descriptor of its own would write over the
     * progress lines from the start of the file; the report follows them instead. */
    if (is_descriptor(&info, STDOUT_FILENO) || is_descriptor(&info, STDERR_FILENO)) {
        destination->stream = is_descriptor(&info, STDOUT_FILENO) ? stdout : stderr;
        destination->is_own_output = 1;
        return 0;
    }
    if (S_ISDIR(info.st_mode)) {
        check_report_plain("--json %s: that is a directory, not a file", path);
        return 1;
    }
    if (S_ISREG(info.st_mode)) {
        if (access(path, W_OK) != 0) {
            check_report_plain("--json %s: cannot write it: %s", path, strerror(errno));
            return 1;
        }
        return 0;
    }
    destination->stream = fopen(path, "w");
    if (destination->stream == NULL) {
        check_report_plain("cannot open %s for writing: %s", path, strerror(errno));
        return 1;
    }
    return 0;
}

FILE* json_destination_begin(json_destination* destination)
{
    if (destination->stream == NULL) {
        destination->stream = fopen(destination->path, "w");
        if (destination->stream == NULL)
            check_report_plain("cannot open %s for writing: %s", destination->path, strerror(errno));
    }
    return destination->stream;
}

int json_destination_commit(json_destination* destination, int write_failed)
{
    FILE* stream = destination->stream;
    int error = 0; /* errno of the call that failed; 0 when the writes had */

    if (stream == NULL)
        return 1;
    destination->stream = NULL;
    if (!write_failed && fflush(stream) != 0)
        error = errno;
    if (!destination->is_own_output && fclose(stream) != 0 && !write_failed && error == 0)
        error = errno;
    if (error != 0)
        check_report_plain("writing %s failed: %s", destination->path, strerror(error));
    else if (write_failed)
        check_report_plain("writing %s failed", destination->path);
    return write_failed || error != 0;
}

void json_destination_abandon(json_destination* destination)
{
    if (destination->stream != NULL && !destination->is_own_output)
        fclose(destination->stream);
    destination->stream = NULL;
}
