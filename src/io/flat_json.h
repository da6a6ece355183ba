// A JSON text read into plain standard containers: a sorted map from each value's JSON Pointer
// (RFC 6901: "" is the whole text, "/layers/0/units" a member of an item of an array) to the value.
// Objects and arrays are entries too, with their member or item count, so two texts with equal maps
// hold the same JSON. It replaces nlohmann::json documents in the library: their destructor is
// noexcept yet allocates, so a failed allocation there terminated the process; this one is parsed
// with nlohmann's SAX interface and destroyed without allocating.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mpt {

// The text is not JSON, or not JSON of the shape asked for; callers turn it into their own error.
class JsonFormatError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class JsonType { null, boolean, unsigned_integer, negative_integer, floating, string, object, array };

struct JsonValue {
    JsonType type = JsonType::null;
    bool boolean = false;
    uint64_t unsigned_integer = 0;  // nlohmann reads every non-negative integer as unsigned
    int64_t negative_integer = 0;   // and every negative one as signed
    double floating = 0.0;
    std::string string;
    size_t size = 0;  // object, array: how many members or items

    bool operator==(const JsonValue& other) const;
    bool operator!=(const JsonValue& other) const { return !(*this == other); }
};

class FlatJson {
public:
    // Bounds that keep a forged text from costing much memory: each value is stored with its whole
    // path, about 140 bytes for a value that takes 2 bytes of text ("0,"). The library's documents
    // nest three levels deep and hold five values per layer, so 2^18 values (at most about 40 MB)
    // take an architecture of some 50,000 layers; their paths are about as long as their text.
    static constexpr size_t max_depth = 16;
    static constexpr size_t max_values = size_t{1} << 18;
    static size_t max_pointer_bytes(size_t text_bytes) { return 4 * text_bytes + 65536; }

    // Throws JsonFormatError when `text` is not one valid JSON value, exceeds the bounds above or
    // has an object with two members of the same name (nlohmann's documents kept the last one; no
    // writer of ours writes two).
    static FlatJson parse(std::string_view text);

    const std::map<std::string, JsonValue>& values() const { return values_; }
    const JsonValue* find(const std::string& pointer) const;

    // The value at `pointer` as a type: JsonFormatError naming it when it is absent or another type.
    int64_t int64(const std::string& pointer) const;  // an integer in int64's range
    uint32_t uint32(const std::string& pointer) const;
    bool boolean(const std::string& pointer) const;
    const std::string& string(const std::string& pointer) const;
    size_t array_size(const std::string& pointer) const;  // an array's item count
    void require_object(const std::string& pointer) const;

    // The names of the members of the object at `pointer`, in alphabetical order (the map's); empty
    // when it is no object.
    std::vector<std::string> member_names(const std::string& pointer) const;

    // Removes member `name` of the object at `parent` when it is there and holds a scalar (no members
    // or items of its own), and returns it; otherwise changes nothing and returns nothing.
    std::optional<JsonValue> take_scalar_member(const std::string& parent, std::string_view name);
    // Gives the scalar at `pointer` (no members or items of its own) the value `value`, when it is
    // there; otherwise changes nothing.
    void replace_scalar(const std::string& pointer, const JsonValue& value);

    bool operator==(const FlatJson& other) const { return values_ == other.values_; }
    bool operator!=(const FlatJson& other) const { return !(*this == other); }

private:
    const JsonValue& typed(const std::string& pointer, JsonType type, const char* wanted) const;

    std::map<std::string, JsonValue> values_;
};

// The pointer of member `name` (or of the item at index `name`) of the value at `parent`.
std::string json_pointer(const std::string& parent, std::string_view name);
std::string json_pointer(const std::string& parent, size_t index);

// A value for messages: a string as itself, a scalar as JSON, an object or array by its kind.
std::string json_value_text(const JsonValue& value);

}  // namespace mpt
