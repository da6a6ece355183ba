// Writes JSON text directly, one token at a time, with no document tree in between. The library
// builds no nlohmann::json arrays or objects: their destructor is noexcept yet allocates (it
// flattens the tree onto a heap stack), so a failed allocation there would terminate the process
// instead of reaching the caller as OUT_OF_MEMORY.
//
// The output is byte for byte what nlohmann's dump() writes for the same values (no whitespace,
// strings escaped as it escapes them with ensure_ascii off), so files stay identical to those
// written before. Members come out in the order they are written: callers that replaced a
// nlohmann::json object (a sorted map) write its keys in alphabetical order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace mpt {

class JsonWriter {
public:
    JsonWriter& begin_object();
    JsonWriter& end_object();
    JsonWriter& begin_array();
    JsonWriter& end_array();
    // An object member's name; its value follows.
    JsonWriter& key(std::string_view name);
    // Strings must be valid UTF-8: the safetensors writer checks every name and metadata value it is
    // given, and the library's own strings are ASCII.
    JsonWriter& string(std::string_view value);
    JsonWriter& integer(int64_t value);
    JsonWriter& unsigned_integer(uint64_t value);
    JsonWriter& boolean(bool value);

    const std::string& text() const { return text_; }
    std::string take() { return std::move(text_); }

private:
    void separate();  // the comma before a value or member that is not its container's first
    JsonWriter& token(std::string_view text);  // a number or literal, written as it is

    std::string text_;
    bool after_value_ = false;  // a value or member ended last: the next one needs a comma
};

// `value` as a quoted JSON string, escaped as nlohmann's dump() escapes it.
void append_json_string(std::string& out, std::string_view value);

}  // namespace mpt
