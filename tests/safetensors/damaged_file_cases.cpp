// test_safetensors: every class of damaged file rejected with MPT_STATUS_CORRUPT_DATA (files parsed
// from exact-size buffers, so an out-of-bounds read shows under ASan): truncations, flipped bits,
// header checksums and lengths that lie, offsets and shapes that disagree, malformed JSON, and the
// fuzz corpus's kept inputs.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "safetensors/harness.h"

using namespace mpt_test::safetensors;

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
    CHECK(outcome_of([&] { (void)SafetensorsReader::open(dir.path.string()); }).status == MPT_STATUS_IO_ERROR);
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
