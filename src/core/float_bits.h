// An fp32 value's IEEE bit pattern and back (std::bit_cast is C++20).
#pragma once

#include <cstdint>
#include <cstring>

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

}  // namespace mpt
