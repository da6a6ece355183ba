// Reading a test's output files back: a file's bytes (a checkpoint, a model), and whether it holds
// some text, such as a tensor's name or an option's key in its header.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace mpt_test {

inline std::string file_bytes(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

inline bool file_contains(const std::string& path, const std::string& text) {
    return file_bytes(path).find(text) != std::string::npos;
}

}  // namespace mpt_test
