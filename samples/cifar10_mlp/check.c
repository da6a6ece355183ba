/* Error reporting for mptrain failures and the sample's own failures. */
#include "check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void check_report(mpt_status status, const char* what, ...)
{
    /* Copy the message first: it is only valid until the next mptrain call on this thread, and
     * mpt_status_string is one. */
    char message[2048];
    const char* last_error = mpt_last_error();
    va_list args;

    snprintf(message, sizeof message, "%s", last_error != NULL ? last_error : "");
    fflush(stdout); /* keep the order of stdout and stderr lines when both go to one terminal */
    fputs("error: ", stderr);
    va_start(args, what);
    vfprintf(stderr, what, args);
    va_end(args);
    fprintf(stderr, ": %s", mpt_status_string(status));
    if (message[0] != '\0')
        fprintf(stderr, ": %s", message);
    fputc('\n', stderr);
}

void check_report_plain(const char* what, ...)
{
    va_list args;
    fflush(stdout);
    fputs("error: ", stderr);
    va_start(args, what);
    vfprintf(stderr, what, args);
    va_end(args);
    fputc('\n', stderr);
}
