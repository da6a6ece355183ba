// Tests for the file layer in src/io/: CRC32C against published vectors and a bitwise reference;
// safetensors round trips checked with an independent JSON parse; every class of damaged file
// rejected with MPT_STATUS_CORRUPT_DATA (files are parsed from exact-size buffers, so an
// out-of-bounds read shows under ASan); atomic writes under injected and real failures; a child
// process SIGKILLed while checkpointing; interop with Python's safetensors (skipped without it).
// This file: CRC32C and valid files; the same program's other cases, by subject, are in
// tests/safetensors/ (damaged files, atomic writes and crashes, Python's safetensors).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "safetensors/harness.h"

using namespace mpt_test::safetensors;

TEST_CASE("crc32c gives the published check values") {
    CHECK(mpt::crc32c("123456789", 9) == 0xE3069283u);  // the CRC catalogue's check value
    CHECK(mpt::crc32c("", 0) == 0u);
    // RFC 3720 (iSCSI), appendix B.4.
    uint8_t block[32];
    std::memset(block, 0, sizeof block);
    CHECK(mpt::crc32c(block, 32) == 0x8A9136AAu);
    std::memset(block, 0xFF, sizeof block);
    CHECK(mpt::crc32c(block, 32) == 0x62A8AB43u);
    for (int i = 0; i < 32; ++i) block[i] = static_cast<uint8_t>(i);
    CHECK(mpt::crc32c(block, 32) == 0x46DD794Eu);
    for (int i = 0; i < 32; ++i) block[i] = static_cast<uint8_t>(31 - i);
    CHECK(mpt::crc32c(block, 32) == 0x113FDB5Cu);
}

TEST_CASE("crc32c agrees with a bitwise reference at every length, alignment and split") {
    std::mt19937 random(7);
    Bytes buffer(600);
    for (auto& byte : buffer) byte = static_cast<uint8_t>(random());
    for (size_t offset = 0; offset < 8; ++offset) {
        for (size_t length = 0; length + offset <= 300; ++length) {
            const uint32_t expected = bitwise_crc32c(buffer.data() + offset, length);
            REQUIRE(mpt::crc32c(buffer.data() + offset, length) == expected);
            const size_t split = length == 0 ? 0 : random() % (length + 1);
            const uint32_t first = mpt::crc32c(buffer.data() + offset, split);
            REQUIRE(mpt::crc32c_extend(first, buffer.data() + offset + split, length - split) == expected);
        }
    }
    Bytes large(1 << 20);
    for (auto& byte : large) byte = static_cast<uint8_t>(random());
    CHECK(mpt::crc32c(large.data(), large.size()) == bitwise_crc32c(large.data(), large.size()));
}

TEST_CASE("a hand-written file in the reference layout is read, with scalars and metadata") {
    const double scalar = 1.5;
    const int16_t values[3] = {1, -2, 3};
    Bytes data = bytes_of(&scalar, 8);
    const Bytes more = bytes_of(values, 6);
    data.insert(data.end(), more.begin(), more.end());
    const std::string header =
        R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I16","shape":[3],"data_offsets":[8,14]},)"
        R"("a":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}  )";
    const Bytes file = raw_file(header, data);

    const SafetensorsReader reader = SafetensorsReader::parse(file.data(), file.size(), false);
    CHECK(reader.names() == std::vector<std::string>{"a", "b"});
    CHECK(reader.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
    const mpt::TensorView& a = reader.tensor("a");
    CHECK(a.dtype == "F64");
    CHECK(a.shape.empty());
    CHECK(a.element_count() == 1);
    REQUIRE(a.bytes == 8);
    double read_scalar;
    std::memcpy(&read_scalar, a.data, 8);
    CHECK(read_scalar == 1.5);
    const mpt::TensorView& b = reader.tensor("b");
    CHECK(b.shape == std::vector<int64_t>{3});
    CHECK(bytes_of(b.data, b.bytes) == more);
    CHECK_FALSE(reader.has("c"));
    const Outcome missing = outcome_of([&] { (void)reader.tensor("c"); });
    CHECK(missing.status == MPT_STATUS_CORRUPT_DATA);

    // No checksums in this file: accepted only when they are not required.
    CHECK(parse_outcome(file, true).status == MPT_STATUS_CORRUPT_DATA);
    // A header with nothing in it is a valid, empty file.
    CHECK(SafetensorsReader::parse(raw_file("{}"), true).names().empty());
}

TEST_CASE("tensors of every dtype round-trip, including scalars and empty tensors, in the reference layout") {
    struct Case {
        std::string name, dtype;
        std::vector<int64_t> shape;
        size_t element_size;
    };
    const std::vector<Case> cases = {
        {"bool", "BOOL", {3}, 1},     {"u8", "U8", {2, 2}, 1},        {"i8", "I8", {5}, 1},
        {"e5m2", "F8_E5M2", {1}, 1},  {"e4m3", "F8_E4M3", {2}, 1},    {"e8m0", "F8_E8M0", {3}, 1},
        {"i16", "I16", {1, 3}, 2},    {"u16", "U16", {4}, 2},         {"f16", "F16", {2, 3}, 2},
        {"bf16", "BF16", {7}, 2},     {"i32", "I32", {}, 4},          {"u32", "U32", {1, 1, 1, 1}, 4},
        {"f32", "F32", {3, 5}, 4},    {"i64", "I64", {2}, 8},         {"u64", "U64", {}, 8},
        {"f64", "F64", {3}, 8},       {"c64", "C64", {2}, 8},         {"empty", "F32", {0}, 4},
        {"empty3d", "BF16", {3, 0, 2}, 2},
    };
    std::mt19937 random(11);
    std::map<std::string, Bytes> originals;
    SafetensorsWriter writer;
    for (const Case& c : cases) {
        size_t count = 1;
        for (int64_t dimension : c.shape) count *= static_cast<size_t>(dimension);
        Bytes data(count * c.element_size);
        for (auto& byte : data) byte = static_cast<uint8_t>(random());
        originals[c.name] = data;
        writer.add(c.name, c.dtype, c.shape, data.data(), data.size());
        CHECK(mpt::safetensors_dtype_size(c.dtype) == c.element_size);
    }
    const Bytes file = writer.serialize();

    // The layout, read with a general JSON parser rather than our reader.
    uint64_t header_length = 0;
    for (int i = 0; i < 8; ++i) header_length |= uint64_t(file[i]) << (8 * i);
    CHECK(header_length % 8 == 0);
    REQUIRE(8 + header_length <= file.size());
    const auto header = nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + static_cast<long>(header_length));
    uint64_t expected_offset = 0;
    std::vector<std::pair<uint64_t, std::string>> by_offset;
    for (const Case& c : cases) by_offset.push_back({header.at(c.name).at("data_offsets").at(0).get<uint64_t>(), c.name});
    std::sort(by_offset.begin(), by_offset.end());
    size_t previous_element_size = 8;
    for (const auto& [begin, name] : by_offset) {
        const auto& entry = header.at(name);
        const Case& c = *std::find_if(cases.begin(), cases.end(), [&](const Case& x) { return x.name == name; });
        CHECK(entry.at("dtype") == c.dtype);
        CHECK(entry.at("shape").get<std::vector<int64_t>>() == c.shape);
        const uint64_t end = entry.at("data_offsets").at(1).get<uint64_t>();
        CHECK(begin == expected_offset);
        CHECK(end - begin == originals[name].size());
        CHECK(begin % c.element_size == 0);                 // each tensor aligned to its element size
        CHECK(c.element_size <= previous_element_size);     // larger elements first
        previous_element_size = c.element_size;
        const size_t at = 8 + header_length + begin;
        CHECK(Bytes(file.begin() + static_cast<long>(at), file.begin() + static_cast<long>(at + (end - begin))) ==
              originals[name]);
        CHECK(header.at("__metadata__").at("mptrain.crc32c." + name) ==
              hex8(bitwise_crc32c(originals[name].data(), originals[name].size())));
        expected_offset = end;
    }
    CHECK(8 + header_length + expected_offset == file.size());

    // And through our reader.
    const SafetensorsReader reader = SafetensorsReader::parse(file, true);
    CHECK(reader.names().size() == cases.size());
    for (const Case& c : cases) {
        const mpt::TensorView& view = reader.tensor(c.name);
        CHECK(view.dtype == c.dtype);
        CHECK(view.shape == c.shape);
        CHECK(bytes_of(view.data, view.bytes) == originals[c.name]);
        CHECK(reinterpret_cast<uintptr_t>(view.data) % c.element_size == 0);
    }
}

TEST_CASE("metadata round-trips, and each tensor's checksum is stored as 8 hex digits") {
    SafetensorsWriter writer;
    const std::map<std::string, std::string> user = {
        {"arch", "mlp 3072-256-10"}, {"empty", ""},           {"quotes", "a\"b\\c\n\t/"},
        {"unicode", "ünï ✓ 学习"},   {"long", std::string(10000, 'x')}, {"", "empty key"},
    };
    for (const auto& [key, value] : user) writer.set_metadata(key, value);
    writer.set_metadata("arch", "replaced");
    const uint8_t data[9] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    writer.add("digits", "U8", {9}, data, 9);

    TempDir dir;
    writer.write(dir.file("m.safetensors"));
    const SafetensorsReader reader = SafetensorsReader::open(dir.file("m.safetensors"));
    auto expected = user;
    expected["arch"] = "replaced";
    expected["mptrain.crc32c.digits"] = "e3069283";
    CHECK(reader.metadata() == expected);
    CHECK(mpt::safetensors_checksum_key("digits") == "mptrain.crc32c.digits");
}

TEST_CASE("borrowed tensors are written from the caller's memory") {
    std::vector<float> values = {1.0f, 2.0f, 3.0f};
    SafetensorsWriter writer;
    writer.add_borrowed("w", "F32", {3}, values.data(), values.size() * sizeof(float));
    values[1] = -7.0f;  // changed before the write: the file has the new value
    const SafetensorsReader reader = SafetensorsReader::parse(writer.serialize(), true);
    float read[3];
    std::memcpy(read, reader.tensor("w").data, sizeof read);
    CHECK(read[0] == 1.0f);
    CHECK(read[1] == -7.0f);
    CHECK(read[2] == 3.0f);
}

TEST_CASE("the writer rejects inconsistent tensors and reserved names") {
    SafetensorsWriter writer;
    const float four[4] = {};
    writer.add("w", "F32", {4}, four, sizeof four);
    const auto status = [&](auto action) { return outcome_of(action).status; };
    CHECK(status([&] { writer.add("w", "F32", {4}, four, sizeof four); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.add("x", "F32", {3}, four, sizeof four); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.add("x", "F16", {4}, four, sizeof four); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.add("x", "F33", {4}, four, sizeof four); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.add("x", "F4", {32}, four, sizeof four); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.add("x", "F32", {-4}, four, sizeof four); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.add("x", "U8", {INT64_MAX, 2}, four, 0); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.add("x", "F32", {4}, nullptr, sizeof four); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.add("__metadata__", "F32", {4}, four, sizeof four); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.add("bad\xff", "F32", {4}, four, sizeof four); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.set_metadata("mptrain.crc32c.w", "00000000"); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.set_metadata("mptrain.crc32c.__metadata__", "00000000"); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status([&] { writer.set_metadata("k", "bad\xc3"); }) == MPT_STATUS_INVALID_ARGUMENT);
    // The rejected calls left the writer as it was.
    const SafetensorsReader reader = SafetensorsReader::parse(writer.serialize(), true);
    CHECK(reader.names() == std::vector<std::string>{"w"});
}
