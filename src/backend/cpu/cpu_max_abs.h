// max |x| over a range of floats as the CPU backend takes it (its max_abs pass, and where a tensor's
// maximum is taken as it is written: the backward's derivative loop, the loss head's gradient).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/float_bits.h"

namespace mpt {

// Largest |value| over [first, last), or Inf when any value is Inf or NaN, as the largest of the
// magnitudes' bit patterns: for non-negative floats their order is the values' order, and Inf and
// NaN are the patterns from 0x7f800000 up. An integer maximum is a reduction the compiler
// vectorises; the float form with a non-finite flag stayed scalar (5% of a bf16 step at batch 256).
inline float max_abs_range(const float* data, int64_t first, int64_t last) {
    constexpr int32_t kInfinityBits = 0x7f800000;
    int32_t largest = 0;
    for (int64_t i = first; i < last; ++i) {
        const int32_t magnitude = static_cast<int32_t>(float_bits(data[i]) & 0x7fffffffu);
        largest = magnitude > largest ? magnitude : largest;
    }
    return largest >= kInfinityBits ? INFINITY : bits_float(static_cast<uint32_t>(largest));
}

}  // namespace mpt
