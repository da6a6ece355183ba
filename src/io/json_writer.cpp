// See json_writer.h.
#include "io/json_writer.h"

#include <charconv>

namespace mpt {

void append_json_string(std::string& out, std::string_view value) {
    static const char hex_digits[] = "0123456789abcdef";
    out += '"';
    for (const char c : value) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default: {
                const auto byte = static_cast<unsigned char>(c);
                if (byte < 0x20) {  // other control characters as \u00xx, lowercase as nlohmann writes them
                    out += "\\u00";
                    out += hex_digits[byte >> 4];
                    out += hex_digits[byte & 0xF];
                } else {
                    out += c;  // DEL and UTF-8 sequences as they are (ensure_ascii off)
                }
            }
        }
    }
    out += '"';
}

void JsonWriter::separate() {
    if (after_value_) text_ += ',';
}

JsonWriter& JsonWriter::begin_object() {
    separate();
    text_ += '{';
    after_value_ = false;
    return *this;
}

JsonWriter& JsonWriter::end_object() {
    text_ += '}';
    after_value_ = true;
    return *this;
}

JsonWriter& JsonWriter::begin_array() {
    separate();
    text_ += '[';
    after_value_ = false;
    return *this;
}

JsonWriter& JsonWriter::end_array() {
    text_ += ']';
    after_value_ = true;
    return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
    separate();
    append_json_string(text_, name);
    text_ += ':';
    after_value_ = false;
    return *this;
}

JsonWriter& JsonWriter::string(std::string_view value) {
    separate();
    append_json_string(text_, value);
    after_value_ = true;
    return *this;
}

JsonWriter& JsonWriter::integer(int64_t value) {
    char digits[24];
    return token(std::string_view(digits, static_cast<size_t>(std::to_chars(digits, digits + sizeof digits, value).ptr - digits)));
}

JsonWriter& JsonWriter::unsigned_integer(uint64_t value) {
    char digits[24];
    return token(std::string_view(digits, static_cast<size_t>(std::to_chars(digits, digits + sizeof digits, value).ptr - digits)));
}

JsonWriter& JsonWriter::boolean(bool value) { return token(value ? "true" : "false"); }

JsonWriter& JsonWriter::token(std::string_view text) {
    separate();
    text_ += text;
    after_value_ = true;
    return *this;
}

}  // namespace mpt
