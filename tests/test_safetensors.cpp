// Tests for the file layer in src/io/: CRC32C against published vectors and a bitwise reference;
// safetensors round trips checked with an independent JSON parse; every class of damaged file
// rejected with MPT_STATUS_CORRUPT_DATA (files are parsed from exact-size buffers, so an
// out-of-bounds read shows under ASan); atomic writes under injected and real failures; a child
// process SIGKILLed while checkpointing; interop with Python's safetensors (skipped without it).
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io/safetensors.h"

namespace {

using mpt::SafetensorsReader;
using mpt::SafetensorsWriter;
using Bytes = std::vector<uint8_t>;

// ---- helpers ---------------------------------------------------------------------------------------

// The textbook one-bit-at-a-time CRC32C, sharing nothing with the table-driven one.
uint32_t bitwise_crc32c(const void* data, size_t size) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < size; ++i) {
        crc ^= bytes[i];
        for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

std::string hex8(uint32_t value) {
    char text[9];
    std::snprintf(text, sizeof text, "%08x", value);
    return text;
}

struct Outcome {
    mpt_status status = MPT_STATUS_OK;
    std::string message;
};

template <class Action>
Outcome outcome_of(Action&& action) {
    Outcome outcome;
    try {
        action();
    } catch (const mpt::Error& error) {
        outcome.status = error.status();
        outcome.message = error.what();
    }
    return outcome;
}

// Parses from a buffer of exactly the file's size, so that any read past the end is a heap overflow.
Outcome parse_outcome(const Bytes& file, bool require_checksums) {
    return outcome_of([&] { (void)SafetensorsReader::parse(Bytes(file), require_checksums); });
}

// A file assembled by hand: the 8-byte little-endian length, the header text as given, the data.
Bytes raw_file(const std::string& header, const Bytes& data = {}) {
    Bytes file;
    for (int i = 0; i < 8; ++i) file.push_back(static_cast<uint8_t>(uint64_t(header.size()) >> (8 * i)));
    file.insert(file.end(), header.begin(), header.end());
    file.insert(file.end(), data.begin(), data.end());
    return file;
}

Bytes bytes_of(const void* data, size_t size) {
    const auto* begin = static_cast<const uint8_t*>(data);
    return Bytes(begin, begin + size);
}

class TempDir {
public:
    TempDir() {
        const char* base = std::getenv("TMPDIR");
        std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/mptrain_io_XXXXXX";
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ignored);
        for (const auto& entry : std::filesystem::recursive_directory_iterator(path_, ignored)) {
            if (entry.is_directory(ignored)) std::filesystem::permissions(entry.path(), std::filesystem::perms::owner_all, ignored);
        }
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

std::vector<std::string> directory_entries(const std::string& directory) {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(directory)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
}

Bytes slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void put_file(const std::string& path, const Bytes& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

// Runs `child` in a forked process and returns its exit code (or 128 + signal).
template <class Child>
int run_in_child(Child&& child) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int code = 99;
        try {
            code = child();
        } catch (...) {
            code = 98;
        }
        ::_exit(code);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The header checksum a file should carry, computed here from the format's description (CRC32C of
// the header length and header with the checksum's own 8 digits read as '0'), with the bitwise CRC.
// `digits` receives where those digits are in the file; 0 when the file has none.
std::string expected_header_checksum(const Bytes& file, size_t* digits = nullptr) {
    const std::string needle = "\"mptrain.crc32c.__metadata__\":\"";
    const auto found = std::search(file.begin(), file.end(), needle.begin(), needle.end());
    if (digits != nullptr) *digits = 0;
    if (found == file.end()) return "";
    uint64_t header_length = 0;
    for (int i = 0; i < 8; ++i) header_length |= uint64_t(file[i]) << (8 * i);
    const size_t at = static_cast<size_t>(found - file.begin()) + needle.size();
    if (digits != nullptr) *digits = at;
    Bytes prefix(file.begin(), file.begin() + static_cast<long>(8 + header_length));
    std::fill(prefix.begin() + static_cast<long>(at), prefix.begin() + static_cast<long>(at + 8), uint8_t('0'));
    return hex8(bitwise_crc32c(prefix.data(), prefix.size()));
}

// A small file from our writer: three tensors and one user metadata entry.
Bytes small_file() {
    SafetensorsWriter writer;
    const float weights[6] = {0.5f, -1.0f, 2.0f, 3.25f, -0.125f, 8.0f};
    const int64_t step = 42;
    writer.add("weights", "F32", {2, 3}, weights, sizeof weights);
    writer.add("step", "I64", {}, &step, sizeof step);
    writer.add("empty", "U8", {0}, nullptr, 0);
    writer.set_metadata("note", "hello");
    return writer.serialize();
}

// ---- CRC32C ------------------------------------------------------------------------------------------

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

// ---- safetensors: valid files ----------------------------------------------------------------------

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

// ---- safetensors: damaged files ---------------------------------------------------------------------

TEST_CASE("a file truncated at any length is rejected as corrupt") {
    const Bytes file = small_file();
    REQUIRE(parse_outcome(file, true).status == MPT_STATUS_OK);
    for (size_t length = 0; length < file.size(); ++length) {
        const Outcome outcome = parse_outcome(Bytes(file.begin(), file.begin() + static_cast<long>(length)), false);
        INFO("length ", length, ": ", outcome.message);
        REQUIRE(outcome.status == MPT_STATUS_CORRUPT_DATA);
    }
    TempDir dir;
    for (size_t length : {size_t(0), size_t(7), size_t(8), size_t(40), file.size() - 1}) {
        put_file(dir.file("t"), Bytes(file.begin(), file.begin() + static_cast<long>(length)));
        CHECK(outcome_of([&] { (void)SafetensorsReader::open(dir.file("t")); }).status == MPT_STATUS_CORRUPT_DATA);
    }
}

TEST_CASE("our writer stores the header's CRC32C, taken over the length and header with its own digits as zeros") {
    const Bytes file = small_file();
    size_t digits = 0;
    const std::string expected = expected_header_checksum(file, &digits);
    REQUIRE(digits != 0);
    CHECK(std::string(file.begin() + static_cast<long>(digits), file.begin() + static_cast<long>(digits + 8)) == expected);
    const SafetensorsReader reader = SafetensorsReader::parse(file, true);
    CHECK(reader.header_checksummed());
    CHECK(reader.metadata().count(mpt::safetensors_header_checksum_key()) == 0);  // a property of the bytes
    CHECK(mpt::safetensors_header_checksum_key() == "mptrain.crc32c.__metadata__");
}

TEST_CASE("a flipped bit anywhere in a file of ours is rejected, unless it renames the header checksum, which then reads as absent") {
    // User metadata and the tensor table are covered by the header checksum, the data by the
    // tensors'. A flip in the header checksum's key leaves a file like another writer's, without one
    // (or with an orphaned tensor checksum): the reader says so, and mptrain's loaders refuse it
    // unless it holds only what mptrain wrote before headers had checksums (checkpoint/refusal_cases.cpp).
    const Bytes file = small_file();
    uint64_t header_length = 0;
    for (int i = 0; i < 8; ++i) header_length |= uint64_t(file[i]) << (8 * i);
    const std::string header(file.begin() + 8, file.begin() + 8 + static_cast<long>(header_length));
    const size_t key = header.find("\"mptrain.crc32c.__metadata__\"");
    REQUIRE(key != std::string::npos);
    const auto in_checksum_key = [&](size_t position) {
        return position >= 8 + key + 1 && position < 8 + key + 1 + std::strlen("mptrain.crc32c.__metadata__");
    };
    int accepted = 0, rejected = 0;
    for (size_t position = 0; position < file.size(); ++position) {
        for (int bit = 0; bit < 8; ++bit) {
            Bytes damaged = file;
            damaged[position] ^= static_cast<uint8_t>(1u << bit);
            const Outcome outcome = parse_outcome(damaged, true);
            INFO("position ", position, " bit ", bit, ": ", outcome.message);
            if (outcome.status == MPT_STATUS_OK) {
                REQUIRE(in_checksum_key(position));
                CHECK_FALSE(SafetensorsReader::parse(damaged, true).header_checksummed());
                ++accepted;
            } else {
                REQUIRE(outcome.status == MPT_STATUS_CORRUPT_DATA);
                if (position >= 8 + header_length) REQUIRE(outcome.message.find("checksum") != std::string::npos);
                ++rejected;
            }
        }
    }
    MESSAGE(rejected, " flips rejected, ", accepted, " accepted (all renaming the header checksum)");
}

TEST_CASE("a header checksum that is wrong, malformed or not written as the writer writes it is rejected") {
    const Bytes good = small_file();
    size_t digits = 0;
    REQUIRE(!expected_header_checksum(good, &digits).empty());
    const std::string stored(good.begin() + static_cast<long>(digits), good.begin() + static_cast<long>(digits + 8));
    const auto with_digits = [&](const std::string& text) {
        Bytes file = good;
        std::copy(text.begin(), text.end(), file.begin() + static_cast<long>(digits));
        return file;
    };
    std::string uppercase = stored;
    for (char& c : uppercase) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const struct {
        Bytes file;
        const char* reason;
    } cases[] = {
        {with_digits(stored == "00000000" ? "00000001" : "00000000"), "the header fails its checksum"},
        {with_digits("zzzzzzzz"), "not 8 hex digits"},
        {with_digits(uppercase == stored ? "G0000000" : uppercase), "not 8 hex digits"},
        {raw_file(R"({"__metadata__":{"mptrain.crc32c.__metadata__" : "00000000"}})"), "not stored as mptrain writes it"},
        {raw_file(R"({"__metadata__":{"mptrain.crc32c.__metadata__":"0000000"}})"), "not 8 hex digits"},
        {raw_file(R"({"__metadata__":{"mptrain.crc32c.__metadata__":"00000000","mptrain.crc32c.__metadata__":"00000000"}})"),
         "two header checksums"},
    };
    for (const auto& c : cases) {
        const Outcome outcome = parse_outcome(c.file, false);
        INFO(std::string(c.file.begin() + 8, c.file.end()), " -> ", outcome.message);
        CHECK(outcome.status == MPT_STATUS_CORRUPT_DATA);
        CHECK(outcome.message.find(c.reason) != std::string::npos);
    }
    // Without one, as other writers and mptrain before it wrote them, a file is read and says so.
    const SafetensorsReader theirs = SafetensorsReader::parse(raw_file(R"({"__metadata__":{"a":"b"}})"), false);
    CHECK_FALSE(theirs.header_checksummed());
}

TEST_CASE("a header length that lies is rejected") {
    const Bytes file = small_file();
    const auto with_length = [&](uint64_t length) {
        Bytes damaged = file;
        for (int i = 0; i < 8; ++i) damaged[i] = static_cast<uint8_t>(length >> (8 * i));
        return parse_outcome(damaged, true);
    };
    uint64_t real = 0;
    for (int i = 0; i < 8; ++i) real |= uint64_t(file[i]) << (8 * i);
    for (uint64_t length : {uint64_t(0), uint64_t(1), real - 8, real - 1, real + 1, real + 8, uint64_t(file.size() - 8),
                            uint64_t(file.size() - 7), uint64_t(1) << 32, UINT64_MAX, UINT64_MAX - 7}) {
        const Outcome outcome = with_length(length);
        INFO("length ", length, ": ", outcome.message);
        CHECK(outcome.status == MPT_STATUS_CORRUPT_DATA);
    }
    CHECK(with_length(UINT64_MAX).message.find("past the end") != std::string::npos);

    // Over the 100 MB limit while inside the file.
    Bytes big(8 + SafetensorsReader::max_header_bytes + 8, ' ');
    const uint64_t length = SafetensorsReader::max_header_bytes + 1;
    for (int i = 0; i < 8; ++i) big[i] = static_cast<uint8_t>(length >> (8 * i));
    const Outcome outcome = outcome_of([&] { (void)SafetensorsReader::parse(std::move(big), false); });
    CHECK(outcome.status == MPT_STATUS_CORRUPT_DATA);
    CHECK(outcome.message.find("limit") != std::string::npos);
}

struct BadHeader {
    const char* header;
    size_t data_bytes;
    const char* reason;  // a fragment of the expected message
};

void check_rejected(const std::vector<BadHeader>& cases) {
    for (const BadHeader& c : cases) {
        const Outcome outcome = parse_outcome(raw_file(c.header, Bytes(c.data_bytes, 0x5A)), false);
        INFO("header ", c.header, " -> ", outcome.message);
        CHECK(outcome.status == MPT_STATUS_CORRUPT_DATA);
        CHECK(outcome.message.find(c.reason) != std::string::npos);
    }
}

TEST_CASE("offsets that overlap, leave holes, run past the end or leave trailing bytes are rejected") {
    check_rejected({
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, "overlaps"},
        {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, "overlaps"},
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})", 8, "overlaps"},
        {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12, "hole"},
        {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "hole"},
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "past the"},
        {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})", 4, "past the"},
        {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8, "after the last tensor"},
        {R"({})", 1, "after the last tensor"},
        {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8, "end before they begin"},
    });
    // A zero-sized tensor at the very end is fine.
    CHECK(parse_outcome(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("b":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})",
                                 Bytes(4)),
                        false)
              .status == MPT_STATUS_OK);
}

TEST_CASE("a shape that disagrees with its offsets is rejected, and huge shapes do not overflow") {
    check_rejected({
        {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "need 12"},
        {R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,4]}})", 4, "need 8"},
        {R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,0]}})", 0, "need 4"},
        // Products that wrap around to the stated byte count if computed without checks.
        {R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0, "overflows"},
        {R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", 0, "overflows"},
        {R"({"a":{"dtype":"I64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0, "overflows"},
        {R"({"a":{"dtype":"U8","shape":[3037000500,3037000500],"data_offsets":[0,0]}})", 0, "overflows"},
        {R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})", 0, "overflows"},
        {R"({"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0, "overflows"},
        {R"({"a":{"dtype":"U8","shape":[0,18446744073709551615],"data_offsets":[0,0]}})", 0, "overflows"},
        {R"({"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}})", 0, "non-integer"},
        {R"({"a":{"dtype":"U8","shape":[1e30],"data_offsets":[0,0]}})", 0, "non-integer"},
    });
    // The largest shape that fits is accepted as far as arithmetic goes (then fails on the offsets).
    check_rejected({{R"({"a":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,0]}})", 0, "need 9223372036854775807"}});
}

TEST_CASE("malformed JSON and values of the wrong type are rejected") {
    std::string deep = R"({"a":{"dtype":"U8","shape":)";
    deep += std::string(100000, '[');
    std::string rank65 = R"({"a":{"dtype":"U8","shape":[1)";
    for (int i = 0; i < 64; ++i) rank65 += ",1";
    rank65 += R"(],"data_offsets":[0,1]}})";
    const std::string with_nul("{}\0", 3);
    check_rejected({
        {"", 0, "must be a JSON object"},
        {"   ", 0, "must be a JSON object"},
        {"\xef\xbb\xbf{}", 0, "must be a JSON object"},  // a byte order mark
        {"{", 0, "not valid JSON"},
        {"{} x", 0, "not valid JSON"},
        {"{}{}", 0, "not valid JSON"},
        {"{/*c*/}", 0, "not valid JSON"},
        {R"({"a\ud800":{}})", 0, "not valid JSON"},
        {"{\"\xff\":{}}", 0, "not valid JSON"},
        {"[]", 0, "must be a JSON object"},
        {"\"text\"", 0, "must be a JSON object"},
        {"null", 0, "must be a JSON object"},
        {"12", 0, "must be a JSON object"},
        {R"({"a":1})", 0, "must be an object with"},
        {R"({"a":[]})", 0, "must be an object with"},
        {R"({"a":{"dtype":1,"shape":[],"data_offsets":[0,1]}})", 1, "\"dtype\" must be a string"},
        {R"({"a":{"dtype":"U8","shape":"1","data_offsets":[0,1]}})", 1, "\"shape\" must be an array"},
        {R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1, "found a negative integer"},
        {R"({"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}})", 0, "found a negative integer"},
        {R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1, "non-integer"},
        {R"({"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", 1, "non-integer"},
        {R"({"a":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", 1, "found an array"},
        {R"({"a":{"dtype":"U8","shape":[null],"data_offsets":[0,1]}})", 1, "found null"},
        {R"({"a":{"dtype":"U8","shape":[true],"data_offsets":[0,1]}})", 1, "found a boolean"},
        {R"({"a":{"dtype":"U8","shape":{},"data_offsets":[0,1]}})", 1, "found an object"},
        {deep.c_str(), 0, "found an array"},
        {rank65.c_str(), 1, "more than 64 dimensions"},
        {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 1, "fewer than two"},
        {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[]}})", 1, "fewer than two"},
        {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,1]}})", 1, "more than two"},
        {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", 1, "negative"},
        {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":"0,1"}})", 1, "\"data_offsets\" must be"},
        {R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1, "lacks one of"},
        {R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", 1, "lacks one of"},
        {R"({"a":{"dtype":"U8","shape":[1]}})", 1, "lacks one of"},
        {R"({"a":{}})", 0, "lacks one of"},
        {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"offsets":[0,1]}})", 1, "unknown field"},
        {R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1, "unknown or unsupported dtype"},
        {R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4, "unknown or unsupported dtype"},
        {R"({"a":{"dtype":"","shape":[1],"data_offsets":[0,4]}})", 4, "unknown or unsupported dtype"},
        {R"({"__metadata__":[]})", 0, "\"__metadata__\" must be an object"},
        {R"({"__metadata__":"x"})", 0, "\"__metadata__\" must be an object"},
        {R"({"__metadata__":{"k":1}})", 0, "must be a string"},
        {R"({"__metadata__":{"k":null}})", 0, "must be a string"},
        {R"({"__metadata__":{"k":{"x":"y"}}})", 0, "must be a string"},
        // Duplicate keys, which general JSON parsers silently resolve.
        {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1, "two entries for tensor"},
        {R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1, "two 'dtype' fields"},
        {R"({"a":{"dtype":"U8","shape":[1],"shape":[1],"data_offsets":[0,1]}})", 1, "two 'shape' fields"},
        {R"({"__metadata__":{"k":"1","k":"2"}})", 0, "two entries 'k'"},
        {R"({"__metadata__":{},"__metadata__":{}})", 0, "two \"__metadata__\""},
    });
    // A NUL inside the stated header length.
    const Outcome nul = parse_outcome(raw_file(with_nul), false);
    CHECK(nul.status == MPT_STATUS_CORRUPT_DATA);
    CHECK(nul.message.find("not valid JSON") != std::string::npos);
    // Leading whitespace, as the reference reader allows.
    CHECK(parse_outcome(raw_file("  {}"), false).status == MPT_STATUS_OK);
}

TEST_CASE("checksums: a wrong, malformed or orphaned one is rejected, a missing one only when required") {
    const Bytes digits = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    const auto file_with = [&](const std::string& metadata) {
        return raw_file(R"({"__metadata__":{)" + metadata + R"(},"a":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}})",
                        digits);
    };
    CHECK(parse_outcome(file_with(R"("mptrain.crc32c.a":"e3069283")"), true).status == MPT_STATUS_OK);
    const struct {
        std::string metadata;
        bool require;
        const char* reason;
    } cases[] = {
        {R"("mptrain.crc32c.a":"e3069284")", false, "fails its checksum"},
        {R"("mptrain.crc32c.a":"00000000")", false, "fails its checksum"},
        {R"("mptrain.crc32c.a":"e306928")", false, "not 8 hex digits"},
        {R"("mptrain.crc32c.a":"e30692830")", false, "not 8 hex digits"},
        {R"("mptrain.crc32c.a":"zzzzzzzz")", false, "not 8 hex digits"},
        {R"("mptrain.crc32c.a":"+3069283")", false, "not 8 hex digits"},
        {R"("mptrain.crc32c.a":"E3069283")", false, "not 8 hex digits"},  // only the writer's lowercase
        {R"("mptrain.crc32c.a":"e3069283","mptrain.crc32c.b":"e3069283")", false, "which is absent"},
        {R"("other":"x")", true, "has no checksum"},
    };
    for (const auto& c : cases) {
        const Outcome outcome = parse_outcome(file_with(c.metadata), c.require);
        INFO(c.metadata, " -> ", outcome.message);
        CHECK(outcome.status == MPT_STATUS_CORRUPT_DATA);
        CHECK(outcome.message.find(c.reason) != std::string::npos);
    }
    CHECK(parse_outcome(file_with(R"("other":"x")"), false).status == MPT_STATUS_OK);
}

TEST_CASE("opening a missing, unreadable or oversized file fails with the right status") {
    TempDir dir;
    const Outcome missing = outcome_of([&] { (void)SafetensorsReader::open(dir.file("none")); });
    CHECK(missing.status == MPT_STATUS_IO_ERROR);
    CHECK(missing.message.find(dir.file("none")) != std::string::npos);
    CHECK(outcome_of([&] { (void)SafetensorsReader::open(dir.path()); }).status == MPT_STATUS_IO_ERROR);
    put_file(dir.file("f"), small_file());
    CHECK(outcome_of([&] { (void)SafetensorsReader::open(dir.file("f"), true, 10); }).status == MPT_STATUS_CORRUPT_DATA);
    CHECK(outcome_of([&] { (void)SafetensorsReader::open(dir.file("f"), true); }).status == MPT_STATUS_OK);
    CHECK(outcome_of([&] { (void)SafetensorsReader::open("/dev/null"); }).status == MPT_STATUS_IO_ERROR);
    // A FIFO with no writer would block a plain open(); it is refused at once as not a regular file.
    REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
    const Outcome fifo = outcome_of([&] { (void)SafetensorsReader::open(dir.file("fifo")); });
    CHECK(fifo.status == MPT_STATUS_IO_ERROR);
    CHECK(fifo.message.find("not a regular file") != std::string::npos);
}

TEST_CASE("inputs kept in the fuzz corpus are accepted or rejected as their names say, without crashing") {
    const std::filesystem::path corpus =
        std::filesystem::path(__FILE__).parent_path().parent_path() / "fuzz" / "corpus" / "safetensors";
    if (!std::filesystem::is_directory(corpus)) {
        MESSAGE("skipped: no corpus at ", corpus.string());
        return;
    }
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
        const std::string name = entry.path().filename();
        const Outcome outcome = parse_outcome(slurp(entry.path()), false);
        INFO(name, ": ", outcome.message);
        CHECK((outcome.status == MPT_STATUS_OK || outcome.status == MPT_STATUS_CORRUPT_DATA));
        if (name.rfind("valid-", 0) == 0) CHECK(outcome.status == MPT_STATUS_OK);
        if (name.rfind("invalid-", 0) == 0 || name.rfind("regress-", 0) == 0) CHECK(outcome.status == MPT_STATUS_CORRUPT_DATA);
        ++files;
    }
    CHECK(files > 0);
}

// ---- atomic writes ----------------------------------------------------------------------------------

TEST_CASE("an atomic write creates, then replaces, a file and leaves no temporaries") {
    TempDir dir;
    const std::string target = dir.file("data.bin");
    const Bytes first(1000, 0x11), second(77, 0x22);
    mpt::write_file_atomic(target, first.data(), first.size());
    CHECK(slurp(target) == first);
    const uint8_t head[3] = {1, 2, 3};
    mpt::write_file_atomic(target, {{head, 3}, {second.data(), second.size()}, {nullptr, 0}});
    Bytes expected = {1, 2, 3};
    expected.insert(expected.end(), second.begin(), second.end());
    CHECK(slurp(target) == expected);
    CHECK(mpt::read_file(target, 1000) == expected);
    CHECK(directory_entries(dir.path()) == std::vector<std::string>{"data.bin"});

    // A path without a directory part goes to the working directory (checked in a child).
    const int code = run_in_child([&] {
        if (::chdir(dir.path().c_str()) != 0) return 2;
        mpt::write_file_atomic("relative.bin", head, 3);
        return mpt::read_file("relative.bin", 3) == Bytes{1, 2, 3} ? 0 : 1;
    });
    CHECK(code == 0);
    CHECK(directory_entries(dir.path()) == std::vector<std::string>{"data.bin", "relative.bin"});
}

mpt::AtomicWriteStep fault_step;
int fault_on_call = 0, fault_calls = 0, fault_errno = 0;

int inject_fault(mpt::AtomicWriteStep step) {
    if (step != fault_step) return 0;
    return ++fault_calls == fault_on_call ? fault_errno : 0;
}

TEST_CASE("a failure at any step of an atomic write keeps the old file and removes the temporary") {
    TempDir dir;
    const std::string target = dir.file("ckpt.safetensors");
    SafetensorsWriter old_writer;
    old_writer.set_metadata("version", "old");
    old_writer.write(target);
    const Bytes old_file = slurp(target);

    SafetensorsWriter writer;
    const Bytes payload(1 << 16, 0x33);
    writer.add("p", "U8", {int64_t(payload.size())}, payload.data(), payload.size());
    using Step = mpt::AtomicWriteStep;
    const struct {
        Step step;
        int call;
        int error;
        const char* name;
    } faults[] = {
        {Step::open_temp, 1, EACCES, "open"},     {Step::write, 1, ENOSPC, "first write"},
        {Step::write, 3, ENOSPC, "a later write"}, {Step::write, 2, EIO, "write EIO"},
        {Step::sync_file, 1, EIO, "fsync"},        {Step::sync_file, 1, ENOSPC, "fsync ENOSPC"},
        {Step::close_file, 1, EIO, "close"},       {Step::rename, 1, EXDEV, "rename"},
    };
    for (const auto& fault : faults) {
        INFO(fault.name);
        fault_step = fault.step;
        fault_on_call = fault.call;
        fault_calls = 0;
        fault_errno = fault.error;
        mpt::set_atomic_write_fault_hook(inject_fault);
        const Outcome outcome = outcome_of([&] { writer.write(target); });
        mpt::set_atomic_write_fault_hook(nullptr);
        CHECK(fault_calls >= fault.call);  // the fault was reached
        CHECK(outcome.status == MPT_STATUS_IO_ERROR);
        CHECK(outcome.message.find(std::strerror(fault.error)) != std::string::npos);
        CHECK(slurp(target) == old_file);
        CHECK(directory_entries(dir.path()) == std::vector<std::string>{"ckpt.safetensors"});
    }

    // After the rename the new file is in place; a failing directory sync is still reported.
    fault_step = Step::sync_directory;
    fault_on_call = 1;
    fault_calls = 0;
    fault_errno = EIO;
    mpt::set_atomic_write_fault_hook(inject_fault);
    const Outcome late = outcome_of([&] { writer.write(target); });
    mpt::set_atomic_write_fault_hook(nullptr);
    CHECK(late.status == MPT_STATUS_IO_ERROR);
    CHECK(slurp(target) == writer.serialize());
    CHECK(directory_entries(dir.path()) == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("a write that hits the file size limit midway fails with IO_ERROR and keeps the old file") {
    TempDir dir;
    const std::string target = dir.file("ckpt.safetensors");
    const Bytes old_file = {'o', 'l', 'd'};
    put_file(target, old_file);
    // A real kernel error in the middle of write(): EFBIG from RLIMIT_FSIZE, in a child so that the
    // limit and the ignored SIGXFSZ do not touch the test process.
    const int code = run_in_child([&] {
        ::signal(SIGXFSZ, SIG_IGN);
        const rlimit limit{1 << 16, 1 << 16};
        if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
        SafetensorsWriter writer;
        const Bytes payload(1 << 20, 0x44);
        writer.add("p", "U8", {int64_t(payload.size())}, payload.data(), payload.size());
        const Outcome outcome = outcome_of([&] { writer.write(target); });
        if (outcome.status != MPT_STATUS_IO_ERROR) return 3;
        return outcome.message.find(std::strerror(EFBIG)) != std::string::npos ? 0 : 4;
    });
    CHECK(code == 0);
    CHECK(slurp(target) == old_file);
    CHECK(directory_entries(dir.path()) == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("writing into a read-only directory fails with IO_ERROR and keeps the old file") {
    TempDir dir;
    const std::string locked = dir.file("locked");
    REQUIRE(::mkdir(locked.c_str(), 0755) == 0);
    const std::string target = locked + "/ckpt.safetensors";
    const Bytes old_file = {'o', 'l', 'd'};
    put_file(target, old_file);
    REQUIRE(::chmod(locked.c_str(), 0555) == 0);
    REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
    // Root ignores directory permissions, so the write runs in a child that drops to "nobody".
    const int code = run_in_child([&] {
        if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) return 2;
        const Bytes payload(100, 0x55);
        const Outcome outcome = outcome_of([&] { mpt::write_file_atomic(target, payload.data(), payload.size()); });
        if (outcome.status != MPT_STATUS_IO_ERROR) return 3;
        return outcome.message.find(std::strerror(EACCES)) != std::string::npos ? 0 : 4;
    });
    CHECK(code == 0);
    CHECK(slurp(target) == old_file);
    CHECK(directory_entries(locked) == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("writing into a missing directory or over a directory fails with IO_ERROR") {
    TempDir dir;
    const uint8_t byte = 1;
    const Outcome missing = outcome_of([&] { mpt::write_file_atomic(dir.file("no/such/dir/f"), &byte, 1); });
    CHECK(missing.status == MPT_STATUS_IO_ERROR);
    CHECK(missing.message.find(std::strerror(ENOENT)) != std::string::npos);
    CHECK(outcome_of([&] { mpt::write_file_atomic(dir.path() + "/", &byte, 1); }).status == MPT_STATUS_IO_ERROR);
    CHECK(outcome_of([&] { mpt::write_file_atomic("", &byte, 1); }).status == MPT_STATUS_IO_ERROR);
    REQUIRE(::mkdir(dir.file("sub").c_str(), 0755) == 0);
    CHECK(outcome_of([&] { mpt::write_file_atomic(dir.file("sub"), &byte, 1); }).status == MPT_STATUS_IO_ERROR);
    CHECK(directory_entries(dir.path()) == std::vector<std::string>{"sub"});
}

TEST_CASE("stale temporaries of one target are removed, and nothing else") {
    TempDir dir;
    for (const char* name : {"ckpt.st", ".ckpt.st.tmp-1-2-3", ".ckpt.st.tmp-9-9-9", ".other.tmp-1-2-3", "ckpt.st.tmp-x"}) {
        put_file(dir.file(name), {1});
    }
    CHECK(mpt::remove_stale_temp_files(dir.file("ckpt.st")) == 2);
    CHECK(directory_entries(dir.path()) == std::vector<std::string>{".other.tmp-1-2-3", "ckpt.st", "ckpt.st.tmp-x"});
}

// ---- crash consistency --------------------------------------------------------------------------------

// An 8 MiB checkpoint whose every word follows from its sequence number and position, cheaply, so
// that most of a write is spent writing; a mix of two checkpoints cannot match either formula.
constexpr size_t payload_words = (8u << 20) / 4;

void fill_payload(uint64_t sequence, std::vector<uint32_t>& words) {
    words.resize(payload_words);
    const auto salt = static_cast<uint32_t>(sequence * 0x85EBCA77u + 0x165667B1u);
    for (size_t i = 0; i < payload_words; ++i) words[i] = static_cast<uint32_t>(i) * 0x9E3779B1u ^ salt;
}

void write_checkpoint(const std::string& path, uint64_t sequence, std::vector<uint32_t>& scratch) {
    fill_payload(sequence, scratch);
    SafetensorsWriter writer;
    writer.add_borrowed("payload", "U32", {int64_t(payload_words)}, scratch.data(), payload_words * 4);
    const auto step = static_cast<int64_t>(sequence);
    writer.add("step", "I64", {}, &step, sizeof step);
    writer.set_metadata("sequence", std::to_string(sequence));
    writer.write(path);
}

// The sequence number of a complete, intact checkpoint; fails the test otherwise.
uint64_t check_checkpoint(const std::string& path, std::vector<uint32_t>& expected) {
    const SafetensorsReader reader = SafetensorsReader::open(path, true);
    const uint64_t sequence = std::stoull(reader.metadata().at("sequence"));
    int64_t step;
    REQUIRE(reader.tensor("step").bytes == sizeof step);
    std::memcpy(&step, reader.tensor("step").data, sizeof step);
    REQUIRE(uint64_t(step) == sequence);
    const mpt::TensorView& payload = reader.tensor("payload");
    REQUIRE(payload.bytes == payload_words * 4);
    fill_payload(sequence, expected);
    REQUIRE(std::memcmp(payload.data, expected.data(), payload.bytes) == 0);
    return sequence;
}

// In the checkpointing child: reports on a pipe each step of the atomic write it reaches, so that
// the parent can kill it at a chosen point as well as at random times.
int checkpoint_signal_fd = -1;

int signal_write_step(mpt::AtomicWriteStep step) {
    using Step = mpt::AtomicWriteStep;
    const char code = step == Step::write ? 'w' : step == Step::sync_file ? 's' : step == Step::sync_directory ? 'd' : 0;
    if (code != 0 && ::write(checkpoint_signal_fd, &code, 1) != 1) ::_exit(3);
    return 0;
}

// Reads the child's step reports until `code` arrives; false if the child dies or 10 s pass first.
bool wait_for_step(int fd, char code) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd ready{fd, POLLIN, 0};
        if (::poll(&ready, 1, static_cast<int>(left.count())) <= 0) continue;
        char got = 0;
        const ssize_t n = ::read(fd, &got, 1);
        if (n == 1 && got == code) return true;
        if (n == 0) return false;  // the child died
        if (n < 0 && errno != EINTR) return false;
    }
}

TEST_CASE("a process killed at random points while checkpointing leaves the old or the new file, never a torn one") {
    TempDir dir;
    const std::string target = dir.file("ckpt.safetensors");
    std::vector<uint32_t> scratch;
    const auto started = std::chrono::steady_clock::now();
    write_checkpoint(target, 0, scratch);
    const double one_write = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const double window = std::min(2.5 * one_write, 0.3);  // kill anywhere in a few writes, a few seconds in all

    // Kills cycle through: a random time; as the temporary is being written ('w'); once it is
    // complete and being synced ('s'); after the rename, while the directory is synced ('d').
    const char modes[] = {'r', 'w', 'r', 's', 'r', 'd'};
    std::mt19937 random(2024);
    uint64_t last = check_checkpoint(target, scratch);
    int advanced = 0, torn_temporaries = 0;
    // 18 kills, or fewer (at least one round of six) on a machine so slow that they take over 8 s.
    int kills = 0;
    for (int kill_index = 0; kill_index < 18; ++kill_index, ++kills) {
        if (kill_index >= 6 && std::chrono::steady_clock::now() - started > std::chrono::seconds(8)) break;
        const char mode = modes[kill_index % 6];
        int fds[2];
        REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
        std::fflush(nullptr);
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            ::close(fds[0]);
            checkpoint_signal_fd = fds[1];
            mpt::set_atomic_write_fault_hook(signal_write_step);
            try {
                std::vector<uint32_t> child_scratch;
                for (uint64_t sequence = last + 1;; ++sequence) write_checkpoint(target, sequence, child_scratch);
            } catch (...) {
            }
            ::_exit(1);  // only reached when a write failed
        }
        ::close(fds[1]);
        if (mode == 'r') {
            std::this_thread::sleep_for(std::chrono::duration<double>(std::uniform_real_distribution<double>(0.0, window)(random)));
        } else {
            CHECK(wait_for_step(fds[0], mode));
        }
        REQUIRE(::kill(child, SIGKILL) == 0);
        int status = 0;
        REQUIRE(::waitpid(child, &status, 0) == child);
        ::close(fds[0]);
        INFO("kill ", kill_index, " in mode ", mode);
        REQUIRE(WIFSIGNALED(status));  // killed, not failed

        const uint64_t sequence = check_checkpoint(target, scratch);
        CHECK(sequence >= last);
        if (mode == 'd') CHECK(sequence > last);  // killed after a rename: the new file is in place
        if (sequence > last) ++advanced;
        last = sequence;
        const size_t stale = mpt::remove_stale_temp_files(target);
        CHECK(stale <= 1);
        torn_temporaries += static_cast<int>(stale);
    }
    CHECK(directory_entries(dir.path()) == std::vector<std::string>{"ckpt.safetensors"});
    // Evidence that kills landed both between writes and in the middle of them.
    CHECK(advanced > 0);
    CHECK(torn_temporaries > 0);
    MESSAGE(kills, " kills (one write took ", one_write * 1000, " ms): the checkpoint advanced ", advanced,
            " times, reached sequence ", last, "; ", torn_temporaries, " kills left a half-written temporary");
}

// ---- interoperability with Python's safetensors -----------------------------------------------------

const char* const interop_script = R"PY(
import sys
import numpy as np
from safetensors import deserialize, safe_open
from safetensors.numpy import save_file

ours, theirs = sys.argv[1], sys.argv[2]

def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

expected = {
    "weights": (np.float32, [2, 3], (np.arange(6) - 2.5) * 0.25),
    "half": (np.float16, [4], [1.0, -2.0, 65504.0, 2.0 ** -14]),
    "steps": (np.int64, [], -1234567890123),
    "empty": (np.float32, [0, 5], []),
    "bytes": (np.uint8, [5], [0, 1, 127, 128, 255]),
    "flags": (np.bool_, [3], [True, False, True]),
    "wide": (np.float64, [2], [1.0 / 3.0, -1e300]),
}
raw = {name: info for name, info in deserialize(open(ours, "rb").read())}  # Rust validation of the whole file
assert sorted(raw) == sorted(list(expected) + ["bf"]), sorted(raw)
for name, (dtype, shape, values) in expected.items():
    array = np.frombuffer(bytes(raw[name]["data"]), dtype=dtype).reshape(raw[name]["shape"])
    assert list(array.shape) == shape, (name, array.shape)
    assert np.array_equal(array, np.array(values, dtype=dtype).reshape(shape)), (name, array)
assert raw["bf"]["dtype"] == "BF16" and raw["bf"]["shape"] == [3]
assert np.frombuffer(bytes(raw["bf"]["data"]), dtype="<u2").tolist() == [0x3F80, 0xC040, 0x7F80]
with safe_open(ours, framework="np") as f:
    metadata = f.metadata()
    assert np.array_equal(f.get_tensor("weights"), ((np.arange(6) - 2.5) * 0.25).astype(np.float32).reshape(2, 3))
assert metadata["arch"] == "mlp 3072-256-10" and metadata["unicode"] == "\u00fcn\u00ef \u2713", metadata
for name in raw:
    assert metadata["mptrain.crc32c." + name] == "%08x" % crc32c(bytes(raw[name]["data"])), name
# The header's own checksum: over the length and header, its 8 digits read as zeros.
file_bytes = open(ours, "rb").read()
prefix = bytearray(file_bytes[:8 + int.from_bytes(file_bytes[:8], "little")])
needle = b'"mptrain.crc32c.__metadata__":"'
digits = prefix.index(needle) + len(needle)
prefix[digits:digits + 8] = b"00000000"
assert metadata["mptrain.crc32c.__metadata__"] == "%08x" % crc32c(bytes(prefix)), metadata

save_file({
    "w": (np.arange(12, dtype=np.float32) * 0.5).reshape(3, 4),
    "i": np.array([-1, 2 ** 40], dtype=np.int64),
    "s": np.array(7, dtype=np.int32),
    "e": np.zeros((0,), dtype=np.float16),
    "h": np.array([0.5, -65504.0], dtype=np.float16),
}, theirs, metadata={"format": "np", "who": "python"})
print("python interop ok")
)PY";

TEST_CASE("files written here open in Python's safetensors, and files written by Python open here") {
    if (std::system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0) {
        MESSAGE("skipped: python3 with the safetensors and numpy modules is not available");
        return;
    }
    TempDir dir;
    SafetensorsWriter writer;
    float weights[6];
    for (int i = 0; i < 6; ++i) weights[i] = (static_cast<float>(i) - 2.5f) * 0.25f;
    const uint16_t half[4] = {0x3C00, 0xC000, 0x7BFF, 0x0400};  // 1, -2, 65504, 2^-14
    const uint16_t bf[3] = {0x3F80, 0xC040, 0x7F80};            // 1, -3, +inf
    const int64_t steps = -1234567890123;
    const uint8_t bytes[5] = {0, 1, 127, 128, 255};
    const uint8_t flags[3] = {1, 0, 1};
    const double wide[2] = {1.0 / 3.0, -1e300};
    writer.add("weights", "F32", {2, 3}, weights, sizeof weights);
    writer.add("half", "F16", {4}, half, sizeof half);
    writer.add("bf", "BF16", {3}, bf, sizeof bf);
    writer.add("steps", "I64", {}, &steps, sizeof steps);
    writer.add("empty", "F32", {0, 5}, nullptr, 0);
    writer.add("bytes", "U8", {5}, bytes, sizeof bytes);
    writer.add("flags", "BOOL", {3}, flags, sizeof flags);
    writer.add("wide", "F64", {2}, wide, sizeof wide);
    writer.set_metadata("arch", "mlp 3072-256-10");
    writer.set_metadata("unicode", "ünï ✓");
    writer.write(dir.file("ours.safetensors"));

    {
        std::ofstream script(dir.file("interop.py"));
        script << interop_script;
    }
    const std::string command = "python3 " + dir.file("interop.py") + " " + dir.file("ours.safetensors") + " " +
                                dir.file("theirs.safetensors");
    REQUIRE(std::system(command.c_str()) == 0);

    const SafetensorsReader reader = SafetensorsReader::open(dir.file("theirs.safetensors"), false);
    CHECK(reader.names() == std::vector<std::string>{"e", "h", "i", "s", "w"});
    CHECK(reader.metadata() == std::map<std::string, std::string>{{"format", "np"}, {"who", "python"}});
    const mpt::TensorView& w = reader.tensor("w");
    CHECK(w.dtype == "F32");
    CHECK(w.shape == std::vector<int64_t>{3, 4});
    REQUIRE(w.bytes == 48);
    for (int i = 0; i < 12; ++i) {
        float value;
        std::memcpy(&value, w.data + 4 * i, 4);
        CHECK(value == static_cast<float>(i) * 0.5f);
    }
    const mpt::TensorView& i64 = reader.tensor("i");
    int64_t integers[2];
    REQUIRE(i64.bytes == sizeof integers);
    std::memcpy(integers, i64.data, sizeof integers);
    CHECK(integers[0] == -1);
    CHECK(integers[1] == (int64_t(1) << 40));
    CHECK(reader.tensor("s").shape.empty());
    CHECK(reader.tensor("s").bytes == 4);
    CHECK(reader.tensor("e").bytes == 0);
    uint16_t h[2];
    REQUIRE(reader.tensor("h").bytes == sizeof h);
    std::memcpy(h, reader.tensor("h").data, sizeof h);
    CHECK(h[0] == 0x3800);  // 0.5
    CHECK(h[1] == 0xFBFF);  // -65504
    // Python's writer stores no checksums.
    const Outcome required = outcome_of([&] { (void)SafetensorsReader::open(dir.file("theirs.safetensors"), true); });
    CHECK(required.status == MPT_STATUS_CORRUPT_DATA);
    CHECK(required.message.find("has no checksum") != std::string::npos);
}

}  // namespace
