// An fp32 value's IEEE bit pattern and back (std::bit_cast is C++20), and its shortest text: how
// files record floats exactly, and how their errors show them.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>

namespace mpt {

inline uint32_t float_bits(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

inline float bits_float(uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

// The shortest text that reads back as `value` ("0.1", "1e-10", "nan").
inline std::string number_text(float value) {
    char text[32];
    const auto result = std::to_chars(text, text + sizeof text, value);
    return std::string(text, result.ptr);
}

}  // namespace mpt
