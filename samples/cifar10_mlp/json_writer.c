/* Writes the metrics file's JSON, escaping strings as RFC 8259 requires. */
#include "json_writer.h"

#include <inttypes.h>
#include <math.h>

void json_init(json_writer* writer, FILE* file)
{
    int i;
    writer->file = file;
    writer->depth = 0;
    for (i = 0; i < JSON_MAX_DEPTH; ++i)
        writer->has_members[i] = 0;
}

static void write_escaped(FILE* file, const char* text)
{
    const unsigned char* c;
    fputc('"', file);
    for (c = (const unsigned char*)text; *c != '\0'; ++c) {
        switch (*c) {
        case '"': fputs("\\\"", file); break;
        case '\\': fputs("\\\\", file); break;
        case '\n': fputs("\\n", file); break;
        case '\r': fputs("\\r", file); break;
        case '\t': fputs("\\t", file); break;
        default:
            if (*c < 0x20)
                fprintf(file, "\\u%04x", (unsigned)*c);
            else
                fputc(*c, file); /* UTF-8 passes through unchanged */
        }
    }
    fputc('"', file);
}

/* Comma, newline, indentation and "key": before a member of the innermost object. */
static void begin_member(json_writer* writer, const char* key)
{
    int i;
    if (writer->depth == 0)
        return;
    if (writer->has_members[writer->depth - 1])
        fputc(',', writer->file);
    writer->has_members[writer->depth - 1] = 1;
    fputc('\n', writer->file);
    for (i = 0; i < writer->depth; ++i)
        fputs("  ", writer->file);
    if (key != NULL) {
        write_escaped(writer->file, key);
        fputs(": ", writer->file);
    }
}

void json_begin_object(json_writer* writer, const char* key)
{
    begin_member(writer, key);
    fputc('{', writer->file);
    if (writer->depth < JSON_MAX_DEPTH) {
        writer->has_members[writer->depth] = 0;
        ++writer->depth;
    }
}

void json_end_object(json_writer* writer)
{
    int i;
    if (writer->depth == 0)
        return;
    --writer->depth;
    if (writer->has_members[writer->depth]) {
        fputc('\n', writer->file);
        for (i = 0; i < writer->depth; ++i)
            fputs("  ", writer->file);
    }
    fputc('}', writer->file);
    if (writer->depth == 0)
        fputc('\n', writer->file);
}

void json_string(json_writer* writer, const char* key, const char* value)
{
    begin_member(writer, key);
    write_escaped(writer->file, value);
}

void json_number(json_writer* writer, const char* key, double value)
{
    begin_member(writer, key);
    if (isfinite(value))
        fprintf(writer->file, "%.9g", value);
    else
        fputs("null", writer->file);
}

void json_integer(json_writer* writer, const char* key, int64_t value)
{
    begin_member(writer, key);
    fprintf(writer->file, "%" PRId64, value);
}

void json_number_array(json_writer* writer, const char* key, const double* values, int count)
{
    int i;
    begin_member(writer, key);
    fputc('[', writer->file);
    for (i = 0; i < count; ++i) {
        if (i > 0)
            fputs(", ", writer->file);
        if (isfinite(values[i]))
            fprintf(writer->file, "%.9g", values[i]);
        else
            fputs("null", writer->file);
    }
    fputc(']', writer->file);
}

void json_raw(json_writer* writer, const char* key, const char* json)
{
    begin_member(writer, key);
    fputs(json, writer->file);
}

void json_boolean(json_writer* writer, const char* key, int value)
{
    begin_member(writer, key);
    fputs(value ? "true" : "false", writer->file);
}
