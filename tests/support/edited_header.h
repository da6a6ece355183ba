// Editing the header of an mptrain file as a user with a text editor (or a damaged disk) could,
// from a C API test: the file split into its header and data, the header edited, and the file
// written again with the header checksum recomputed as the format describes it, so that the file is
// consistent and only what the edit says is wrong with it.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/bitwise_crc32c.h"
#include "support/file_contents.h"

namespace mpt_test {

inline const std::string kHeaderChecksum = "\"mptrain.crc32c.__metadata__\":\"";

struct FileParts {
    std::string header;  // the JSON with its padding
    std::string data;
};

inline FileParts split_file(const std::string& path) {
    const std::string bytes = mpt_test::file_bytes(path);
    REQUIRE(bytes.size() > 8);
    uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = header_length << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    REQUIRE(8 + header_length <= bytes.size());
    return {bytes.substr(8, header_length), bytes.substr(8 + header_length)};
}

inline std::string length_field(size_t length) {
    std::string field(8, '\0');
    for (int i = 0; i < 8; ++i) field[static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i) & 0xFF);
    return field;
}

// Writes `header` (padded again) and `data` as a file. A header checksum in it is recomputed as the
// format describes it (CRC32C of length and header, its own digits read as '0'), so the file is
// consistent and only what the edit says is wrong with it.
inline std::string write_parts(const std::filesystem::path& path, std::string header, const std::string& data) {
    while (header.size() % 8) header += ' ';
    const size_t at = header.find(kHeaderChecksum);
    if (at != std::string::npos) {
        const size_t digits = at + kHeaderChecksum.size();
        header.replace(digits, 8, "00000000");
        char hex[9];
        std::snprintf(hex, sizeof hex, "%08x", bitwise_crc32c(length_field(header.size()) + header));
        header.replace(digits, 8, hex);
    }
    const std::string file = length_field(header.size()) + header + data;
    std::ofstream(path, std::ios::binary).write(file.data(), static_cast<std::streamsize>(file.size()));
    return path.string();
}

// The trainer's metadata (options, progress) is JSON inside a JSON string: its fields read
// \"name\":value. The first such field named `field` gets `value`.
inline std::string with_metadata_field(std::string header, const std::string& field, const std::string& value) {
    const std::string key = "\\\"" + field + "\\\":";
    const size_t at = header.find(key);
    REQUIRE(at != std::string::npos);
    const size_t begin = at + key.size(), end = header.find_first_of(",}", begin);
    header.replace(begin, end - begin, value);
    return header;
}

inline std::string float_bits_text(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return std::to_string(bits);
}


// Gives tensor `name` of the file `parts` holds the bytes `bytes` (as many as it has) and its checksum
// in the header (mptrain.crc32c.<name>: the CRC32C of the bytes, 8 hex digits) to match.
inline void replace_tensor_bytes(FileParts& parts, const std::string& name, const std::string& bytes) {
    const std::string entry = "\"" + name + "\":{";
    const size_t at = parts.header.find(entry);
    REQUIRE_MESSAGE(at != std::string::npos, name << " is not in the header");
    const std::string offsets_key = "\"data_offsets\":[";
    const size_t offsets = parts.header.find(offsets_key, at);
    REQUIRE(offsets != std::string::npos);
    size_t begin = 0, end = 0;
    REQUIRE(std::sscanf(parts.header.c_str() + offsets + offsets_key.size(), "%zu,%zu", &begin, &end) == 2);
    REQUIRE(end - begin == bytes.size());
    parts.data.replace(begin, bytes.size(), bytes);
    const std::string checksum_key = "\"mptrain.crc32c." + name + "\":\"";
    const size_t checksum = parts.header.find(checksum_key);
    REQUIRE(checksum != std::string::npos);
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", bitwise_crc32c(bytes));
    parts.header.replace(checksum + checksum_key.size(), 8, hex);
}

}  // namespace mpt_test
