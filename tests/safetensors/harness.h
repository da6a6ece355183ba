// What tests/test_safetensors.cpp and its cases in tests/safetensors/ share: a bitwise CRC32C, files
// as bytes (written raw, read back, parsed to an outcome), a directory's entries, and a child process
// to run a write in (a temporary directory is support/temp_dir.h's).
#pragma once

#include <doctest/doctest.h>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "support/bitwise_crc32c.h"
#include "support/temp_dir.h"

namespace mpt_test::safetensors {

using mpt::SafetensorsReader;
using mpt::SafetensorsWriter;
using Bytes = std::vector<uint8_t>;
using mpt_test::bitwise_crc32c;  // (support/bitwise_crc32c.h: the cases name it unqualified)
using mpt_test::TempDir;         // (support/temp_dir.h: likewise)

inline std::string hex8(uint32_t value) {
    char text[9];
    std::snprintf(text, sizeof text, "%08x", value);
    return text;
}

struct Outcome {
    mpt_status status = MPT_STATUS_OK;
    std::string message;
};

template <class Action>
inline Outcome outcome_of(Action&& action) {
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
inline Outcome parse_outcome(const Bytes& file, bool require_checksums) {
    return outcome_of([&] { (void)SafetensorsReader::parse(Bytes(file), require_checksums); });
}

// A file assembled by hand: the 8-byte little-endian length, the header text as given, the data.
inline Bytes raw_file(const std::string& header, const Bytes& data = {}) {
    Bytes file;
    for (int i = 0; i < 8; ++i) file.push_back(static_cast<uint8_t>(uint64_t(header.size()) >> (8 * i)));
    file.insert(file.end(), header.begin(), header.end());
    file.insert(file.end(), data.begin(), data.end());
    return file;
}

inline Bytes bytes_of(const void* data, size_t size) {
    const auto* begin = static_cast<const uint8_t*>(data);
    return Bytes(begin, begin + size);
}

inline std::vector<std::string> directory_entries(const std::string& directory) {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(directory)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
}

inline Bytes slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void put_file(const std::string& path, const Bytes& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

// Runs `child` in a forked process and returns its exit code (or 128 + signal).
template <class Child>
inline int run_in_child(Child&& child) {
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
inline std::string expected_header_checksum(const Bytes& file, size_t* digits = nullptr) {
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
inline Bytes small_file() {
    SafetensorsWriter writer;
    const float weights[6] = {0.5f, -1.0f, 2.0f, 3.25f, -0.125f, 8.0f};
    const int64_t step = 42;
    writer.add("weights", "F32", {2, 3}, weights, sizeof weights);
    writer.add("step", "I64", {}, &step, sizeof step);
    writer.add("empty", "U8", {0}, nullptr, 0);
    writer.set_metadata("note", "hello");
    return writer.serialize();
}

}  // namespace mpt_test::safetensors
