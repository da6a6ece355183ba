// See flat_json.h. nlohmann's SAX parser hands over one token at a time; the handler below keeps
// the path to the current value and records each value under it.
#include "io/flat_json.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <utility>
#include <vector>

namespace mpt {

namespace {

class FlatJsonBuilder final : public nlohmann::json_sax<nlohmann::json> {
public:
    FlatJsonBuilder(std::map<std::string, JsonValue>& values, size_t text_bytes)
        : values_(values), max_pointer_bytes_(FlatJson::max_pointer_bytes(text_bytes)) {}

    const std::string& error() const { return error_; }

    bool null() override { return added(add(JsonValue{})); }

    bool boolean(bool value) override {
        JsonValue entry;
        entry.type = JsonType::boolean;
        entry.boolean = value;
        return added(add(std::move(entry)));
    }

    bool number_integer(number_integer_t value) override {
        JsonValue entry;
        entry.type = JsonType::negative_integer;
        entry.negative_integer = value;
        return added(add(std::move(entry)));
    }

    bool number_unsigned(number_unsigned_t value) override {
        JsonValue entry;
        entry.type = JsonType::unsigned_integer;
        entry.unsigned_integer = value;
        return added(add(std::move(entry)));
    }

    bool number_float(number_float_t value, const string_t&) override {
        JsonValue entry;
        entry.type = JsonType::floating;
        entry.floating = value;
        return added(add(std::move(entry)));
    }

    bool string(string_t& value) override {
        JsonValue entry;
        entry.type = JsonType::string;
        entry.string = std::move(value);
        return added(add(std::move(entry)));
    }

    bool binary(binary_t&) override { return reject("binary data is not JSON"); }  // only binary formats have it

    bool start_object(std::size_t) override { return open(JsonType::object); }
    bool start_array(std::size_t) override { return open(JsonType::array); }

    bool key(string_t& name) override {
        key_ = std::move(name);
        return true;
    }

    bool end_object() override { return close(); }
    bool end_array() override { return close(); }

    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& problem) override {
        return reject(std::string("not valid JSON: ") + problem.what());
    }

private:
    // An object or array whose members are being read. Map entries stay where they are while
    // others are added, so these point into the map.
    struct Open {
        const std::string* pointer;
        JsonValue* value;
    };

    bool reject(std::string message) {
        if (error_.empty()) error_ = std::move(message);
        return false;
    }

    // Records `value` under the current path; null (and the error set) when it cannot be.
    std::map<std::string, JsonValue>::iterator add(JsonValue value) {
        std::string pointer;
        if (!open_.empty()) {
            Open& parent = open_.back();
            pointer = parent.value->type == JsonType::object ? json_pointer(*parent.pointer, key_)
                                                             : json_pointer(*parent.pointer, parent.value->size);
            ++parent.value->size;
        }
        pointer_bytes_ += pointer.size();
        if (values_.size() == FlatJson::max_values || pointer_bytes_ > max_pointer_bytes_) {
            reject("the JSON holds more values, or longer names, than mptrain reads");
            return values_.end();
        }
        auto [entry, inserted] = values_.emplace(std::move(pointer), std::move(value));
        if (!inserted) {
            reject("the JSON has two members named '" + key_.substr(0, 80) + "' in one object");
            return values_.end();
        }
        return entry;
    }

    bool added(std::map<std::string, JsonValue>::iterator entry) const { return entry != values_.end(); }

    bool open(JsonType type) {
        if (open_.size() == FlatJson::max_depth)
            return reject("the JSON nests deeper than " + std::to_string(FlatJson::max_depth) + " levels");
        JsonValue container;
        container.type = type;
        const auto entry = add(std::move(container));
        if (!added(entry)) return false;
        open_.push_back(Open{&entry->first, &entry->second});
        return true;
    }

    bool close() {
        open_.pop_back();
        return true;
    }

    std::map<std::string, JsonValue>& values_;
    const size_t max_pointer_bytes_;
    size_t pointer_bytes_ = 0;
    std::vector<Open> open_;  // the containers around the current value, outermost first
    std::string key_;         // the name of the member whose value comes next
    std::string error_;
};

const char* type_name(JsonType type) {
    switch (type) {
        case JsonType::null: return "null";
        case JsonType::boolean: return "a boolean";
        case JsonType::unsigned_integer:
        case JsonType::negative_integer: return "an integer";
        case JsonType::floating: return "a non-integer number";
        case JsonType::string: return "a string";
        case JsonType::object: return "an object";
        case JsonType::array: return "an array";
    }
    return "a value";
}

// A pointer for messages: "'/layers/0/units'", the root as "the JSON".
std::string where(const std::string& pointer) { return pointer.empty() ? "the JSON" : "'" + pointer.substr(0, 120) + "'"; }

}  // namespace

bool JsonValue::operator==(const JsonValue& other) const {
    if (type != other.type) return false;
    switch (type) {
        case JsonType::null: return true;
        case JsonType::boolean: return boolean == other.boolean;
        case JsonType::unsigned_integer: return unsigned_integer == other.unsigned_integer;
        case JsonType::negative_integer: return negative_integer == other.negative_integer;
        case JsonType::floating: return floating == other.floating;
        case JsonType::string: return string == other.string;
        case JsonType::object:
        case JsonType::array: return size == other.size;  // their members are entries of their own
    }
    return false;
}

std::string json_pointer(const std::string& parent, std::string_view name) {
    std::string pointer = parent + '/';
    for (const char c : name) {
        if (c == '~') pointer += "~0";
        else if (c == '/') pointer += "~1";
        else pointer += c;
    }
    return pointer;
}

std::string json_pointer(const std::string& parent, size_t index) { return parent + '/' + std::to_string(index); }

std::string json_value_text(const JsonValue& value) {
    switch (value.type) {
        case JsonType::null: return "null";
        case JsonType::boolean: return value.boolean ? "true" : "false";
        case JsonType::unsigned_integer: return std::to_string(value.unsigned_integer);
        case JsonType::negative_integer: return std::to_string(value.negative_integer);
        case JsonType::floating: {
            char text[32];
            return std::string(text, std::to_chars(text, text + sizeof text, value.floating).ptr);
        }
        case JsonType::string: return value.string;
        case JsonType::object: return "(an object)";
        case JsonType::array: return "(an array)";
    }
    return "";
}

FlatJson FlatJson::parse(std::string_view text) {
    FlatJson json;
    FlatJsonBuilder builder(json.values_, text.size());
    bool parsed = false;
    try {
        parsed = nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
    } catch (const nlohmann::json::exception& problem) {
        throw JsonFormatError(std::string("not valid JSON: ") + problem.what());
    }
    if (!parsed) throw JsonFormatError(builder.error().empty() ? "not valid JSON" : builder.error());
    return json;
}

const JsonValue* FlatJson::find(const std::string& pointer) const {
    const auto found = values_.find(pointer);
    return found == values_.end() ? nullptr : &found->second;
}

void FlatJson::replace_scalar(const std::string& pointer, const JsonValue& value) {
    const auto found = values_.find(pointer);
    if (found == values_.end() || found->second.size != 0 || value.size != 0) return;
    found->second = value;
}

const JsonValue& FlatJson::typed(const std::string& pointer, JsonType type, const char* wanted) const {
    const JsonValue* value = find(pointer);
    if (value == nullptr) throw JsonFormatError(where(pointer) + " is missing");
    if (value->type != type) throw JsonFormatError(where(pointer) + " must be " + wanted + ", not " + type_name(value->type));
    return *value;
}

int64_t FlatJson::int64(const std::string& pointer) const {
    const JsonValue* value = find(pointer);
    if (value != nullptr && value->type == JsonType::negative_integer) return value->negative_integer;
    const JsonValue& number = typed(pointer, JsonType::unsigned_integer, "an integer");
    if (number.unsigned_integer > static_cast<uint64_t>(INT64_MAX))
        throw JsonFormatError(where(pointer) + " is out of range (over 2^63 - 1)");
    return static_cast<int64_t>(number.unsigned_integer);
}

uint32_t FlatJson::uint32(const std::string& pointer) const {
    const JsonValue& number = typed(pointer, JsonType::unsigned_integer, "a non-negative integer");
    if (number.unsigned_integer > UINT32_MAX) throw JsonFormatError(where(pointer) + " is out of range (over 2^32 - 1)");
    return static_cast<uint32_t>(number.unsigned_integer);
}

bool FlatJson::boolean(const std::string& pointer) const { return typed(pointer, JsonType::boolean, "a boolean").boolean; }

const std::string& FlatJson::string(const std::string& pointer) const {
    return typed(pointer, JsonType::string, "a string").string;
}

size_t FlatJson::array_size(const std::string& pointer) const { return typed(pointer, JsonType::array, "an array").size; }

void FlatJson::require_object(const std::string& pointer) const { (void)typed(pointer, JsonType::object, "an object"); }

std::optional<JsonValue> FlatJson::take_scalar_member(const std::string& parent, std::string_view name) {
    const auto object = values_.find(parent);
    if (object == values_.end() || object->second.type != JsonType::object) return std::nullopt;
    const auto member = values_.find(json_pointer(parent, name));
    if (member == values_.end() || member->second.type == JsonType::object || member->second.type == JsonType::array)
        return std::nullopt;
    JsonValue taken = std::move(member->second);
    values_.erase(member);
    --object->second.size;
    return taken;
}

std::vector<std::string> FlatJson::member_names(const std::string& pointer) const {
    std::vector<std::string> names;
    const JsonValue* object = find(pointer);
    if (object == nullptr || object->type != JsonType::object) return names;
    const std::string prefix = pointer + '/';
    for (auto entry = values_.lower_bound(prefix);
         entry != values_.end() && entry->first.compare(0, prefix.size(), prefix) == 0; ++entry) {
        const std::string_view segment = std::string_view(entry->first).substr(prefix.size());
        if (segment.find('/') != std::string_view::npos) continue;  // deeper down
        std::string name;
        for (size_t i = 0; i < segment.size(); ++i) {
            if (segment[i] == '~' && i + 1 < segment.size()) {
                name += segment[i + 1] == '1' ? '/' : '~';
                ++i;
            } else {
                name += segment[i];
            }
        }
        names.push_back(std::move(name));
    }
    return names;
}

}  // namespace mpt
