/* See destination.h. */
#define _POSIX_C_SOURCE 200809L

#include "destination.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

int destination_check(const char* flag, const char* path)
{
    struct stat info;
    const char* slash = strrchr(path, '/');
    char* directory;
    int failed = 0;

    if (stat(path, &info) == 0 && S_ISDIR(info.st_mode)) {
        check_report_plain("%s %s: that is a directory, not a file", flag, path);
        return 1;
    }
    /* The directory part as written ("/" for a file in the root, "." for none). */
    directory = slash == NULL ? strdup(".") : slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
    if (directory == NULL) {
        check_report_plain("%s %s: out of memory", flag, path);
        return 1;
    }
    if (stat(directory, &info) != 0 || !S_ISDIR(info.st_mode)) {
        check_report_plain("%s %s: no directory %s to write it in", flag, path, directory);
        failed = 1;
    } else if (access(directory, W_OK | X_OK) != 0) {
        check_report_plain("%s %s: cannot write in %s: %s", flag, path, directory, strerror(errno));
        failed = 1;
    }
    free(directory);
    return failed;
}
