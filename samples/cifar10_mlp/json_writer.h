/* A minimal JSON writer for the metrics file: nested objects with string, number and integer
 * members, indented by two spaces. Non-finite numbers become null (JSON has no NaN). */
#ifndef CIFAR10_JSON_WRITER_H
#define CIFAR10_JSON_WRITER_H

#include <stdint.h>
#include <stdio.h>

enum { JSON_MAX_DEPTH = 8 };

typedef struct json_writer {
    FILE* file;
    int depth;
    int has_members[JSON_MAX_DEPTH]; /* per open object: a comma goes before the next member */
} json_writer;

void json_init(json_writer* writer, FILE* file);
/* Opens an object: the top-level one with key NULL, a nested one as member `key`. */
void json_begin_object(json_writer* writer, const char* key);
/* Closes the innermost object; closing the top-level one ends the line. */
void json_end_object(json_writer* writer);
void json_string(json_writer* writer, const char* key, const char* value);
void json_number(json_writer* writer, const char* key, double value);
void json_integer(json_writer* writer, const char* key, int64_t value);
void json_boolean(json_writer* writer, const char* key, int value);
/* [v0, v1, ...] on one line, non-finite values as null. */
void json_number_array(json_writer* writer, const char* key, const double* values, int count);
/* `json`, a complete JSON value (e.g. mptrain's context description), written as it is. */
void json_raw(json_writer* writer, const char* key, const char* json);

#endif
