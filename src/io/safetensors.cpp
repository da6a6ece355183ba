// The safetensors writer, and a reader that checks the whole file before exposing any byte of it.
// The header is parsed with nlohmann's SAX interface into a small state machine for the format's
// schema, so wrong types, duplicate keys and oversized shapes are rejected as they are met, with no
// JSON tree built in between; the writer writes it with JsonWriter. No nlohmann::json array or
// object is ever built here: their destructor allocates, and terminates the process when that fails.
#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io/json_writer.h"

namespace mpt {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

const char* const checksum_prefix = "mptrain.crc32c.";
const char* const metadata_key = "__metadata__";

struct DTypeInfo {
    const char* name;
    size_t size;
};

// Every byte-sized dtype of the reference implementation (safetensors 0.5+).
constexpr DTypeInfo dtype_table[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8},
};

// A name as it may appear in an error message: quoted, at most 80 bytes, with quotes, backslashes,
// control and non-ASCII bytes escaped as \xNN.
std::string printable(const std::string& text) {
    std::string out;
    for (size_t i = 0; i < text.size() && i < 80; ++i) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if (byte >= 0x20 && byte < 0x7F && byte != '\\' && byte != '\'') {
            out += static_cast<char>(byte);
        } else {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
            out += escaped;
        }
    }
    if (text.size() > 80) out += "...";
    return "'" + out + "'";
}

[[noreturn]] void corrupt(const std::string& message) { fail(MPT_STATUS_CORRUPT_DATA, message); }

std::string hex8(uint32_t value) {
    char text[9];
    std::snprintf(text, sizeof text, "%08x", value);
    return text;
}

// Exactly as the writer formats it (lowercase), so that no altered byte reads as the same value.
bool parse_hex8(const std::string& text, uint32_t& value) {
    if (text.size() != 8) return false;
    value = 0;
    for (char c : text) {
        uint32_t digit;
        if (c >= '0' && c <= '9') digit = static_cast<uint32_t>(c - '0');
        else if (c >= 'a' && c <= 'f') digit = static_cast<uint32_t>(c - 'a' + 10);
        else return false;
        value = value << 4 | digit;
    }
    return true;
}

// Where the header checksum's 8 digits sit in `header`, or npos when it holds none; see
// safetensors_header_checksum_key. More than one (only in a damaged file) is an error.
size_t find_header_checksum(const char* header, size_t size) {
    const std::string needle = "\"" + safetensors_header_checksum_key() + "\":\"";
    const std::string_view text(header, size);
    const size_t at = text.find(needle);
    if (at == std::string_view::npos) return at;
    if (text.find(needle, at + 1) != std::string_view::npos) corrupt("the header holds two header checksums");
    const size_t digits = at + needle.size();
    if (size - digits < 9 || header[digits + 8] != '"') corrupt("the header checksum is not 8 hex digits");
    return digits;
}

// The header checksum of a file's first `prefix_bytes` bytes (length and header) whose checksum digits
// start at `digits_at` (counted from the file's start): those 8 bytes count as '0'.
uint32_t header_checksum(const uint8_t* file, size_t prefix_bytes, size_t digits_at) {
    uint32_t crc = crc32c(file, digits_at);
    crc = crc32c_extend(crc, "00000000", 8);
    return crc32c_extend(crc, file + digits_at + 8, prefix_bytes - digits_at - 8);
}

bool is_valid_utf8_text(const std::string& text) {
    try {
        // dump() throws on invalid UTF-8 (its default error handler). A string value, unlike an array
        // or object, is destroyed without allocating.
        (void)nlohmann::json(text).dump();
        return true;
    } catch (const nlohmann::json::exception&) {
        return false;
    }
}

// A tensor entry as the header states it, before the cross-checks.
struct HeaderTensor {
    std::string dtype;
    std::vector<uint64_t> shape;
    uint64_t offsets[2] = {0, 0};
    size_t offset_count = 0;
    unsigned fields_seen = 0;
};

// The header's schema as a SAX state machine. Each callback returns false on the first defect,
// which stops the parse; `error()` then says what was wrong.
class HeaderParser final : public nlohmann::json_sax<nlohmann::json> {
public:
    const std::string& error() const { return error_; }
    std::map<std::string, std::string>& metadata() { return metadata_; }
    std::map<std::string, HeaderTensor>& tensors() { return tensors_; }

    bool null() override { return unexpected("null"); }
    bool boolean(bool) override { return unexpected("a boolean"); }
    bool number_integer(number_integer_t) override { return unexpected("a negative integer"); }
    bool number_float(number_float_t, const string_t&) override { return unexpected("a non-integer number"); }
    bool binary(binary_t&) override { return unexpected("binary data"); }

    bool number_unsigned(number_unsigned_t value) override {
        if (state_ == State::shape_item) {
            if (tensor_->shape.size() == SafetensorsReader::max_rank) {
                return reject(context() + " has more than " + std::to_string(SafetensorsReader::max_rank) + " dimensions");
            }
            tensor_->shape.push_back(value);
            return true;
        }
        if (state_ == State::offsets_item) {
            if (tensor_->offset_count == 2) return reject(context() + ": \"data_offsets\" has more than two entries");
            tensor_->offsets[tensor_->offset_count++] = value;
            return true;
        }
        return unexpected("an integer");
    }

    bool string(string_t& value) override {
        if (state_ == State::metadata_value) {
            metadata_[key_] = std::move(value);
            state_ = State::metadata_key;
            return true;
        }
        if (state_ == State::tensor_value && field_ == Field::dtype) {
            tensor_->dtype = std::move(value);
            state_ = State::tensor_key;
            return true;
        }
        return unexpected("a string");
    }

    bool start_object(std::size_t) override {
        if (state_ == State::root_start) {
            state_ = State::root_key;
            return true;
        }
        if (state_ == State::root_value) {
            state_ = tensor_ == nullptr ? State::metadata_key : State::tensor_key;
            return true;
        }
        return unexpected("an object");
    }

    bool key(string_t& key) override {
        switch (state_) {
            case State::root_key:
                if (key == metadata_key) {
                    if (seen_metadata_) return reject("the header has two \"__metadata__\" entries");
                    seen_metadata_ = true;
                    tensor_ = nullptr;
                } else {
                    auto [entry, inserted] = tensors_.try_emplace(key);
                    if (!inserted) return reject("the header has two entries for tensor " + printable(key));
                    tensor_ = &entry->second;
                }
                key_ = std::move(key);
                state_ = State::root_value;
                return true;
            case State::metadata_key:
                if (metadata_.count(key) != 0) return reject("\"__metadata__\" has two entries " + printable(key));
                key_ = std::move(key);
                state_ = State::metadata_value;
                return true;
            case State::tensor_key: {
                if (key == "dtype") field_ = Field::dtype;
                else if (key == "shape") field_ = Field::shape;
                else if (key == "data_offsets") field_ = Field::data_offsets;
                else return reject(context() + " has an unknown field " + printable(key));
                const unsigned bit = 1u << static_cast<unsigned>(field_);
                if ((tensor_->fields_seen & bit) != 0) return reject(context() + " has two " + printable(key) + " fields");
                tensor_->fields_seen |= bit;
                state_ = State::tensor_value;
                return true;
            }
            default:
                return reject("unexpected key in the header");  // the JSON grammar makes this unreachable
        }
    }

    bool end_object() override {
        switch (state_) {
            case State::root_key:
                state_ = State::done;
                return true;
            case State::metadata_key:
                state_ = State::root_key;
                return true;
            case State::tensor_key:
                if (tensor_->fields_seen != 7u) {
                    return reject(context() + " lacks one of \"dtype\", \"shape\" and \"data_offsets\"");
                }
                state_ = State::root_key;
                return true;
            default:
                return reject("unexpected end of an object in the header");
        }
    }

    bool start_array(std::size_t) override {
        if (state_ == State::tensor_value && field_ == Field::shape) {
            state_ = State::shape_item;
            return true;
        }
        if (state_ == State::tensor_value && field_ == Field::data_offsets) {
            state_ = State::offsets_item;
            return true;
        }
        return unexpected("an array");
    }

    bool end_array() override {
        if (state_ == State::shape_item) {
            state_ = State::tensor_key;
            return true;
        }
        if (state_ == State::offsets_item) {
            if (tensor_->offset_count != 2) return reject(context() + ": \"data_offsets\" has fewer than two entries");
            state_ = State::tensor_key;
            return true;
        }
        return reject("unexpected end of an array in the header");
    }

    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& problem) override {
        return reject(std::string("the header is not valid JSON: ") + problem.what());
    }

private:
    enum class State { root_start, root_key, root_value, metadata_key, metadata_value, tensor_key, tensor_value,
                       shape_item, offsets_item, done };
    enum class Field : unsigned { dtype = 0, shape = 1, data_offsets = 2 };

    bool reject(const std::string& message) {
        if (error_.empty()) error_ = message;
        return false;
    }

    // Where the parser is, for messages.
    std::string context() const { return "tensor " + printable(key_); }

    // A value of the wrong kind: say what the current position of the schema wants.
    bool unexpected(const char* found) {
        std::string wanted;
        switch (state_) {
            case State::root_start: wanted = "the header must be a JSON object"; break;
            case State::root_value:
                wanted = tensor_ == nullptr ? "\"__metadata__\" must be an object of strings"
                                            : context() + " must be an object with \"dtype\", \"shape\" and \"data_offsets\"";
                break;
            case State::metadata_value: wanted = "\"__metadata__\" entry " + printable(key_) + " must be a string"; break;
            case State::tensor_value:
            case State::shape_item:
            case State::offsets_item:
                wanted = context() + (field_ == Field::dtype   ? ": \"dtype\" must be a string"
                                      : field_ == Field::shape ? ": \"shape\" must be an array of non-negative integers"
                                                               : ": \"data_offsets\" must be two non-negative integers");
                break;
            default: wanted = "unexpected value in the header"; break;
        }
        return reject(wanted + ", found " + found);
    }

    State state_ = State::root_start;
    Field field_ = Field::dtype;
    std::string key_;                  // the current root key (tensor name) or metadata key
    HeaderTensor* tensor_ = nullptr;   // the current tensor entry; null inside "__metadata__"
    bool seen_metadata_ = false;
    std::string error_;
    std::map<std::string, std::string> metadata_;
    std::map<std::string, HeaderTensor> tensors_;
};

// Elements of `shape`, or false when a dimension or the product does not fit in int64.
bool checked_element_count(const std::vector<uint64_t>& shape, uint64_t& count) {
    constexpr auto int64_max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    count = 1;
    for (uint64_t dimension : shape) {
        if (dimension > int64_max) return false;
        if (__builtin_mul_overflow(count, dimension, &count) || count > int64_max) return false;
    }
    return true;
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
    for (const DTypeInfo& info : dtype_table) {
        if (dtype == info.name) return info.size;
    }
    return 0;
}

std::string safetensors_checksum_key(const std::string& tensor_name) { return checksum_prefix + tensor_name; }

const std::string& safetensors_header_checksum_key() {
    static const std::string key = safetensors_checksum_key(metadata_key);
    return key;
}

int64_t TensorView::element_count() const {
    int64_t count = 1;
    for (int64_t dimension : shape) count *= dimension;  // validated by the reader not to overflow
    return count;
}

// ---- writer --------------------------------------------------------------------------------------

SafetensorsWriter::Entry& SafetensorsWriter::add_entry(const std::string& name, const std::string& dtype,
                                                       const std::vector<int64_t>& shape, const void* data,
                                                       size_t bytes) {
    const auto invalid = [&](const std::string& why) {
        fail(MPT_STATUS_INVALID_ARGUMENT, "safetensors tensor " + printable(name) + ": " + why);
    };
    if (name == metadata_key) invalid("the name is reserved for the metadata");
    if (!is_valid_utf8_text(name)) invalid("the name is not valid UTF-8");
    if (names_.count(name) != 0) invalid("added twice");
    const size_t element_size = safetensors_dtype_size(dtype);
    if (element_size == 0) invalid("unknown dtype " + printable(dtype));
    if (shape.size() > SafetensorsReader::max_rank) invalid("too many dimensions");
    std::vector<uint64_t> dimensions;
    for (int64_t dimension : shape) {
        if (dimension < 0) invalid("negative dimension");
        dimensions.push_back(static_cast<uint64_t>(dimension));
    }
    uint64_t count = 0, expected_bytes = 0;
    if (!checked_element_count(dimensions, count) || __builtin_mul_overflow(count, element_size, &expected_bytes) ||
        expected_bytes != bytes) {
        invalid("the shape and dtype need a different byte count than the " + std::to_string(bytes) + " given");
    }
    if (data == nullptr && bytes != 0) invalid("null data");

    Entry entry;
    entry.name = name;
    entry.dtype = dtype;
    entry.shape = shape;
    entry.bytes = bytes;
    entry.borrowed = static_cast<const uint8_t*>(data);
    entries_.push_back(std::move(entry));
    names_.insert(name);
    return entries_.back();
}

void SafetensorsWriter::add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                            const void* data, size_t bytes) {
    Entry& entry = add_entry(name, dtype, shape, data, bytes);
    if (bytes != 0) entry.owned.assign(entry.borrowed, entry.borrowed + bytes);
    entry.borrowed = nullptr;
}

void SafetensorsWriter::add_borrowed(const std::string& name, const std::string& dtype,
                                     const std::vector<int64_t>& shape, const void* data, size_t bytes) {
    add_entry(name, dtype, shape, data, bytes).is_borrowed = true;
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
    if (key.compare(0, std::strlen(checksum_prefix), checksum_prefix) == 0) {
        fail(MPT_STATUS_INVALID_ARGUMENT, "safetensors metadata key " + printable(key) + " is reserved for checksums");
    }
    if (!is_valid_utf8_text(key) || !is_valid_utf8_text(value)) {
        fail(MPT_STATUS_INVALID_ARGUMENT, "safetensors metadata key " + printable(key) + ": not valid UTF-8");
    }
    metadata_[key] = value;
}

SafetensorsWriter::Layout SafetensorsWriter::layout() const {
    Layout layout;
    for (const Entry& entry : entries_) layout.order.push_back(&entry);
    std::sort(layout.order.begin(), layout.order.end(), [](const Entry* left, const Entry* right) {
        const size_t left_size = safetensors_dtype_size(left->dtype), right_size = safetensors_dtype_size(right->dtype);
        return left_size != right_size ? left_size > right_size : left->name < right->name;
    });

    std::map<std::string, std::string> metadata = metadata_;
    for (const Entry* entry : layout.order) {
        metadata[safetensors_checksum_key(entry->name)] = hex8(crc32c(entry->data(), entry->bytes));
    }
    metadata[safetensors_header_checksum_key()] = "00000000";  // filled in once the header is final
    // The metadata first, then the tensors in file order, as nlohmann's ordered_json wrote them.
    JsonWriter header;
    header.begin_object();
    if (!metadata.empty()) {
        header.key(metadata_key).begin_object();
        for (const auto& [key, value] : metadata) header.key(key).string(value);
        header.end_object();
    }
    uint64_t offset = 0;
    for (const Entry* entry : layout.order) {
        header.key(entry->name).begin_object().key("dtype").string(entry->dtype).key("shape").begin_array();
        for (int64_t dimension : entry->shape) header.integer(dimension);
        header.end_array().key("data_offsets").begin_array().unsigned_integer(offset).unsigned_integer(offset + entry->bytes);
        header.end_array().end_object();
        offset += entry->bytes;
    }
    layout.header = header.end_object().take();
    layout.header.append((8 - layout.header.size() % 8) % 8, ' ');
    uint64_t length = layout.header.size();
    for (int i = 0; i < 8; ++i) layout.header_length[i] = static_cast<uint8_t>(length >> (8 * i));

    std::vector<uint8_t> prefix(layout.header_length, layout.header_length + 8);
    prefix.insert(prefix.end(), layout.header.begin(), layout.header.end());
    const size_t digits = find_header_checksum(layout.header.data(), layout.header.size());
    const std::string value = hex8(header_checksum(prefix.data(), prefix.size(), 8 + digits));
    layout.header.replace(digits, 8, value);
    return layout;
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
    const Layout layout = this->layout();
    size_t size = 8 + layout.header.size();
    for (const Entry* entry : layout.order) size += entry->bytes;
    std::vector<uint8_t> file(size);
    std::memcpy(file.data(), layout.header_length, 8);
    std::memcpy(file.data() + 8, layout.header.data(), layout.header.size());
    size_t offset = 8 + layout.header.size();
    for (const Entry* entry : layout.order) {
        if (entry->bytes != 0) std::memcpy(file.data() + offset, entry->data(), entry->bytes);
        offset += entry->bytes;
    }
    return file;
}

void SafetensorsWriter::write(const std::string& path) const {
    const Layout layout = this->layout();
    std::vector<ByteSpan> pieces{{layout.header_length, 8}, {layout.header.data(), layout.header.size()}};
    for (const Entry* entry : layout.order) pieces.push_back({entry->data(), entry->bytes});
    write_file_atomic(path, pieces);
}

// ---- reader --------------------------------------------------------------------------------------

SafetensorsReader SafetensorsReader::open(const std::string& path, bool require_checksums, uint64_t max_file_bytes) {
    std::vector<uint8_t> bytes = read_file(path, max_file_bytes);
    try {
        return parse(std::move(bytes), require_checksums);
    } catch (const Error& error) {
        throw Error(error.status(), "safetensors file '" + path + "': " + error.what());
    }
}

SafetensorsReader SafetensorsReader::parse(const uint8_t* bytes, size_t size, bool require_checksums) {
    if (bytes == nullptr && size != 0) fail(MPT_STATUS_INVALID_ARGUMENT, "safetensors parse: null bytes");
    return parse(std::vector<uint8_t>(bytes, bytes + size), require_checksums);
}

SafetensorsReader SafetensorsReader::parse(std::vector<uint8_t> file_bytes, bool require_checksums) {
    const size_t size = file_bytes.size();
    if (size < 8) corrupt("the file has " + std::to_string(size) + " bytes, too few for the 8-byte header length");
    uint64_t header_bytes = 0;
    for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(file_bytes[i]) << (8 * i);
    if (header_bytes > size - 8) {
        corrupt("the header length " + std::to_string(header_bytes) + " runs past the end of the " +
                std::to_string(size) + "-byte file");
    }
    if (header_bytes > max_header_bytes) {
        corrupt("the header length " + std::to_string(header_bytes) + " is over the limit of " +
                std::to_string(max_header_bytes));
    }

    const char* header_begin = reinterpret_cast<const char*>(file_bytes.data() + 8);
    // nlohmann's lexer would take a NUL byte for the end of input and skip a UTF-8 byte order mark;
    // JSON allows neither, nor does the reference reader.
    if (std::memchr(header_begin, 0, header_bytes) != nullptr) corrupt("the header is not valid JSON: it contains a NUL byte");
    const char* first = header_begin;
    while (first != header_begin + header_bytes && (*first == ' ' || *first == '\t' || *first == '\n' || *first == '\r')) ++first;
    if (first == header_begin + header_bytes || *first != '{') corrupt("the header is not valid JSON: it must be a JSON object");
    // The header's own checksum, when it has one, before anything in it is believed.
    const size_t checksum_digits = find_header_checksum(header_begin, header_bytes);
    if (checksum_digits != std::string::npos) {
        uint32_t stored = 0;
        if (!parse_hex8(std::string(header_begin + checksum_digits, 8), stored))
            corrupt("the header checksum is not 8 hex digits");
        const uint32_t computed = header_checksum(file_bytes.data(), 8 + header_bytes, 8 + checksum_digits);
        if (computed != stored) {
            corrupt("the header fails its checksum (stored " + hex8(stored) + ", computed " + hex8(computed) +
                    "): its metadata or tensor table is damaged");
        }
    }
    HeaderParser parser;
    bool parsed = false;
    try {
        parsed = nlohmann::json::sax_parse(header_begin, header_begin + header_bytes, &parser);
    } catch (const nlohmann::json::exception& problem) {
        corrupt(std::string("the header is not valid JSON: ") + problem.what());
    }
    if (!parsed) corrupt(parser.error().empty() ? "the header is not valid JSON" : parser.error());

    SafetensorsReader reader;
    const uint8_t* data_section = file_bytes.data() + 8 + header_bytes;
    const uint64_t data_bytes = size - 8 - header_bytes;

    // Each entry on its own: known dtype, shape within int64, byte count equal to its offsets' span.
    struct Span {
        uint64_t begin, end;
        const std::string* name;
    };
    std::vector<Span> spans;
    for (auto& [name, entry] : parser.tensors()) {
        const std::string quoted = "tensor " + printable(name);
        const size_t element_size = safetensors_dtype_size(entry.dtype);
        if (element_size == 0) corrupt(quoted + " has an unknown or unsupported dtype " + printable(entry.dtype));
        uint64_t count = 0, bytes = 0;
        if (!checked_element_count(entry.shape, count) || __builtin_mul_overflow(count, element_size, &bytes)) {
            corrupt(quoted + " has a shape whose size overflows");
        }
        const uint64_t begin = entry.offsets[0], end = entry.offsets[1];
        if (begin > end) corrupt(quoted + " has data_offsets that end before they begin");
        if (end > data_bytes) {
            corrupt(quoted + " ends at byte " + std::to_string(end) + ", past the " + std::to_string(data_bytes) +
                    "-byte data section");
        }
        if (end - begin != bytes) {
            corrupt(quoted + " spans " + std::to_string(end - begin) + " bytes but its shape and dtype need " +
                    std::to_string(bytes));
        }
        spans.push_back({begin, end, &name});

        TensorView view;
        view.dtype = entry.dtype;
        view.shape.assign(entry.shape.begin(), entry.shape.end());
        view.data = data_section + begin;
        view.bytes = static_cast<size_t>(bytes);
        reader.tensors_.emplace(name, std::move(view));
    }

    // Together: the tensors tile the data section exactly, as the reference reader requires.
    std::sort(spans.begin(), spans.end(), [](const Span& left, const Span& right) {
        return left.begin != right.begin ? left.begin < right.begin : left.end < right.end;
    });
    uint64_t covered = 0;
    for (const Span& span : spans) {
        if (span.begin < covered) corrupt("tensor " + printable(*span.name) + " overlaps the tensor before it");
        if (span.begin > covered) corrupt("the data section has a hole before tensor " + printable(*span.name));
        covered = span.end;
    }
    if (covered != data_bytes) {
        corrupt("the data section has " + std::to_string(data_bytes - covered) + " bytes after the last tensor");
    }

    // A header checksum the search above did not find (written with escapes or spaces) went unchecked.
    if ((parser.metadata().count(safetensors_header_checksum_key()) != 0) != (checksum_digits != std::string::npos))
        corrupt("the header checksum is not stored as mptrain writes it, so it cannot be checked");
    reader.header_checksummed_ = checksum_digits != std::string::npos;

    // Checksums: each stored one names a tensor and matches; with require_checksums, each tensor has one.
    const size_t prefix_length = std::strlen(checksum_prefix);
    size_t checksums = 0;
    for (const auto& [key, value] : parser.metadata()) {
        if (key.compare(0, prefix_length, checksum_prefix) != 0 || key == safetensors_header_checksum_key()) continue;
        const std::string name = key.substr(prefix_length);
        const auto found = reader.tensors_.find(name);
        if (found == reader.tensors_.end()) corrupt("a checksum is stored for tensor " + printable(name) + ", which is absent");
        uint32_t stored = 0;
        if (!parse_hex8(value, stored)) corrupt("the checksum of tensor " + printable(name) + " is not 8 hex digits");
        const uint32_t computed = crc32c(found->second.data, found->second.bytes);
        if (computed != stored) {
            corrupt("tensor " + printable(name) + " fails its checksum (stored " + hex8(stored) + ", computed " +
                    hex8(computed) + "): the data is damaged");
        }
        ++checksums;
    }
    if (require_checksums && checksums != reader.tensors_.size()) {
        for (const auto& [name, view] : reader.tensors_) {
            if (parser.metadata().count(safetensors_checksum_key(name)) == 0) {
                corrupt("tensor " + printable(name) + " has no checksum");
            }
        }
    }

    parser.metadata().erase(safetensors_header_checksum_key());
    reader.metadata_ = std::move(parser.metadata());
    reader.file_ = std::move(file_bytes);  // a moved vector keeps its buffer, so the views stay valid
    return reader;
}

const TensorView& SafetensorsReader::tensor(const std::string& name) const {
    const auto found = tensors_.find(name);
    if (found == tensors_.end()) corrupt("the file has no tensor " + printable(name));
    return found->second;
}

std::vector<std::string> SafetensorsReader::names() const {
    std::vector<std::string> names;
    for (const auto& entry : tensors_) names.push_back(entry.first);
    return names;
}

}  // namespace mpt
