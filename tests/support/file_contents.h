// Reading a test's output files back: whether a file (a checkpoint, a model) holds some text, such
// as a tensor's name or an option's key in its header.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace mpt_test {

inline bool file_contains(const std::string& path, const std::string& text) {
    std::ifstream file(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    return bytes.find(text) != std::string::npos;
}

}  // namespace mpt_test
