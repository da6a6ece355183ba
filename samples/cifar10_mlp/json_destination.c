/* See json_destination.h. */
#define _XOPEN_SOURCE 700 /* realpath, with POSIX 2008 */

#include "json_destination.h"

#include <errno.h>
#include <stdlib.h>
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
    struct stat info, link_info;

    memset(destination, 0, sizeof *destination);
    destination->path = path;
    if (stat(path, &info) == 0) {
        /* /dev/stdout, or the file stdout was redirected to: renaming over it would lose the
         * progress lines, and a second descriptor would write over them; the report follows them. */
        if (is_descriptor(&info, STDOUT_FILENO) || is_descriptor(&info, STDERR_FILENO)) {
            destination->stream = is_descriptor(&info, STDOUT_FILENO) ? stdout : stderr;
            destination->is_own_output = 1;
            return 0;
        }
        if (S_ISDIR(info.st_mode)) {
            check_report_plain("--json %s: that is a directory, not a file", path);
            return 1;
        }
        if (!S_ISREG(info.st_mode)) {
            destination->stream = fopen(path, "w");
            if (destination->stream == NULL) {
                check_report_plain("cannot open %s for writing: %s", path, strerror(errno));
                return 1;
            }
            return 0;
        }
    }
    /* A link to a file keeps leading to it: the file it leads to is what is replaced. */
    if (lstat(path, &link_info) == 0 && S_ISLNK(link_info.st_mode))
        destination->file = realpath(path, NULL);
    if (destination->file == NULL)
        destination->file = strdup(path);
    if (destination->file == NULL) {
        check_report_plain("--json %s: out of memory", path);
        return 1;
    }
    if (destination_check("--json", destination->file) != 0) {
        json_destination_abandon(destination);
        return 1;
    }
    return 0;
}

FILE* json_destination_begin(json_destination* destination)
{
    static const char suffix[] = ".XXXXXX";
    int descriptor;

    if (destination->stream != NULL)
        return destination->stream;
    destination->temporary = malloc(strlen(destination->file) + sizeof suffix);
    if (destination->temporary == NULL) {
        check_report_plain("writing %s: out of memory", destination->path);
        return NULL;
    }
    strcpy(destination->temporary, destination->file);
    strcat(destination->temporary, suffix);
    descriptor = mkstemp(destination->temporary);
    if (descriptor >= 0) {
        /* mkstemp makes it 0600; a report is as readable as any file the user creates. */
        const mode_t mask = umask(0);
        umask(mask);
        (void)fchmod(descriptor, 0666 & ~mask);
        destination->stream = fdopen(descriptor, "w");
    }
    if (destination->stream == NULL) {
        check_report_plain("cannot create a file beside %s: %s", destination->file, strerror(errno));
        if (descriptor >= 0)
            close(descriptor);
        json_destination_abandon(destination);
        return NULL;
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
    if (!write_failed && error == 0 && destination->temporary != NULL && fsync(fileno(stream)) != 0)
        error = errno;
    if (!destination->is_own_output && fclose(stream) != 0 && error == 0)
        error = errno;
    if (!write_failed && error == 0 && destination->temporary != NULL &&
        rename(destination->temporary, destination->file) != 0)
        error = errno;
    if (write_failed || error != 0) {
        if (error != 0)
            check_report_plain("writing %s failed: %s", destination->path, strerror(error));
        else
            check_report_plain("writing %s failed", destination->path);
        json_destination_abandon(destination);
        return 1;
    }
    free(destination->temporary);
    destination->temporary = NULL;
    json_destination_abandon(destination); /* frees what is left */
    return 0;
}

void json_destination_abandon(json_destination* destination)
{
    if (destination->stream != NULL && !destination->is_own_output)
        fclose(destination->stream);
    destination->stream = NULL;
    if (destination->temporary != NULL) {
        remove(destination->temporary);
        free(destination->temporary);
        destination->temporary = NULL;
    }
    free(destination->file);
    destination->file = NULL;
}
