// fp16/bf16 conversions in integer arithmetic on the IEEE bit patterns, so results are exact and
// independent of the FP environment (rounding mode, FTZ/DAZ, -ffast-math) and of _Float16 support.
#include "core/dtype.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "core/float_bits.h"

namespace mpt {

namespace {

constexpr uint32_t kSignMask = 0x80000000u;
constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kFloatInf = 0x7F800000u;
constexpr uint32_t kFloatQuietBit = 0x00400000u;
// |x| >= 65520 (halfway between fp16 max 65504 and 2^16) rounds to Inf; ties go to the even 2^16.
constexpr uint32_t kHalfOverflow = 0x477FF000u;
constexpr uint32_t kHalfMinNormal = 0x38800000u;         // 2^-14
constexpr uint32_t kHalfMinSubnormal = 0x33800000u;      // 2^-24
constexpr uint32_t kHalfMinSubnormalHalf = 0x33000000u;  // 2^-25: a tie, rounds to even 0

// All-ones when `condition` holds, else zero; selects are written as masks so that no compiler
// turns them into branches, which would stop the loops below from vectorising.
inline uint32_t mask_if(bool condition) { return 0u - static_cast<uint32_t>(condition); }

inline uint32_t select(uint32_t mask, uint32_t if_set, uint32_t if_clear) {
    return (if_set & mask) | (if_clear & ~mask);
}

// The fp32 bit pattern of the fp16 value nearest to `bits` (RNE), branch-free so that round_array
// vectorises. It rounds the fp32 pattern itself, clearing its low `shift` bits half to even: the
// carry of a round-up flows into the exponent, which is exactly the next binade. fp16 keeps 10
// fraction bits (shift 13) down to 2^-14; below, its quantum is the fixed 2^-24, so fp32 binades
// with biased exponent 112..103 drop 14..23 bits. Binade 2^-25 (and below) would need a quantum
// above the implicit bit; a comparison settles it: (2^-25, 2^-24) -> 2^-24, the rest -> 0.
inline uint32_t round_half_bits(uint32_t bits) {
    const uint32_t sign = bits & kSignMask;
    const uint32_t magnitude = bits & kAbsMask;
    // magnitude < 2^31, so signed compares are exact; SSE2 only has signed 32-bit compares.
    const int32_t signed_magnitude = static_cast<int32_t>(magnitude);

    // Clamp the exponent to 103..113 (shift 13..23) with sign-mask arithmetic: a MIN/MAX would need
    // SSE4.1's pminsd, which a baseline x86-64 build lacks, and then nothing vectorises.
    int32_t exponent = signed_magnitude >> 23;  // 0..255
    int32_t above = exponent - 113;
    exponent -= above & ~(above >> 31);  // min(exponent, 113)
    int32_t below = exponent - 103;
    exponent -= below & (below >> 31);     // max(exponent, 103)
    const int32_t shift = 126 - exponent;  // 13..23
    // 2^shift built as a float and converted to an integer: a per-element power of two without a
    // per-lane variable shift (SSE2 has none). Exact, as 2^shift is a small integer.
    const uint32_t quantum = static_cast<uint32_t>(
        static_cast<int32_t>(bits_float(static_cast<uint32_t>(shift + 127) << 23)));
    const uint32_t odd = (magnitude & quantum) != 0u ? 1u : 0u;
    // Wraps harmlessly for Inf/NaN, whose result is replaced below.
    const uint32_t rounded = (magnitude + (quantum >> 1) - 1u + odd) & ~(quantum - 1u);

    const uint32_t tiny =
        mask_if(signed_magnitude > static_cast<int32_t>(kHalfMinSubnormalHalf)) & kHalfMinSubnormal;
    uint32_t result =
        select(mask_if(signed_magnitude < static_cast<int32_t>(kHalfMinSubnormal)), tiny, rounded);
    result =
        select(mask_if(signed_magnitude >= static_cast<int32_t>(kHalfOverflow)), kFloatInf, result);
    // NaN: set the quiet bit and keep the sign and the payload bits fp16 can hold.
    const uint32_t nan = (magnitude | kFloatQuietBit) & 0xFFFFE000u;
    result = select(mask_if(signed_magnitude > static_cast<int32_t>(kFloatInf)), nan, result);
    return sign | result;
}

// bf16 is the top half of fp32: RNE on the low 16 bits. Finite values at the top round up into the
// Inf pattern, as IEEE requires; only NaN (whose increment could carry into Inf or the sign) needs
// its own case.
inline uint32_t round_bfloat16_bits(uint32_t bits) {
    const uint32_t is_nan =
        mask_if(static_cast<int32_t>(bits & kAbsMask) > static_cast<int32_t>(kFloatInf));
    const uint32_t nan = (bits | kFloatQuietBit) & 0xFFFF0000u;
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    return select(is_nan, nan, rounded);
}

// Zero and the fp16 normal range [2^-14, 65520) round by the fixed 13-bit RNE of the pattern alone;
// anything else (fp16 subnormals, overflow, Inf, NaN) needs round_half_bits.
inline uint32_t half_needs_general_path(uint32_t bits) {
    const uint32_t magnitude = bits & kAbsMask;
    return mask_if(magnitude - 1u < kHalfMinNormal - 1u || magnitude >= kHalfOverflow);
}

inline uint32_t round_half_normal_bits(uint32_t bits) {
    return (bits + 0xFFFu + ((bits >> 13) & 1u)) & 0xFFFFE000u;
}

// Fixed-size blocks, so that even GCC's -O2 "very cheap" vectoriser (which refuses loops needing a
// scalar epilogue, or a runtime check that source and destination do not overlap) vectorises the
// inner loops: each block is rounded in a local array, so `out` may be `in`.
constexpr size_t kBlock = 32;

void round_bfloat16_into(const float* in, float* out, size_t count) {
    size_t index = 0;
    for (; index + kBlock <= count; index += kBlock) {
        float block[kBlock];
        std::memcpy(block, in + index, sizeof block);
        for (size_t lane = 0; lane < kBlock; ++lane) {
            block[lane] = bits_float(round_bfloat16_bits(float_bits(block[lane])));
        }
        std::memcpy(out + index, block, sizeof block);
    }
    for (; index < count; ++index) {
        out[index] = bits_float(round_bfloat16_bits(float_bits(in[index])));
    }
}

// Training data is overwhelmingly zero or in the fp16 normal range, so a block takes the cheap
// rounding when all of it is; the general path costs about twice as much.
void round_half_into(const float* in, float* out, size_t count) {
    size_t index = 0;
    for (; index + kBlock <= count; index += kBlock) {
        float block[kBlock];
        std::memcpy(block, in + index, sizeof block);
        uint32_t general = 0;
        for (size_t lane = 0; lane < kBlock; ++lane) {
            general |= half_needs_general_path(float_bits(block[lane]));
        }
        if (general == 0) {
            for (size_t lane = 0; lane < kBlock; ++lane) {
                block[lane] = bits_float(round_half_normal_bits(float_bits(block[lane])));
            }
        } else {
            for (size_t lane = 0; lane < kBlock; ++lane) {
                block[lane] = bits_float(round_half_bits(float_bits(block[lane])));
            }
        }
        std::memcpy(out + index, block, sizeof block);
    }
    for (; index < count; ++index) {
        out[index] = bits_float(round_half_bits(float_bits(in[index])));
    }
}

[[noreturn]] void throw_bad_dtype(DType dtype) {
    throw std::invalid_argument("invalid dtype " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::fp32: return 4;
        case DType::fp16: return 2;
        case DType::bf16: return 2;
    }
    return 0;
}

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::fp32: return "fp32";
        case DType::fp16: return "fp16";
        case DType::bf16: return "bf16";
    }
    return "unknown";
}

uint16_t float_to_half(float value) {
    const uint32_t bits = float_bits(value);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & kAbsMask;
    if (magnitude > kFloatInf) {
        return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
    }
    if (magnitude >= kHalfOverflow) return static_cast<uint16_t>(sign | 0x7C00u);
    if (magnitude >= kHalfMinNormal) {
        // Rebias the exponent (127 -> 15) and round off 13 fraction bits; a carry out of the
        // fraction correctly bumps the exponent.
        uint32_t rebiased = magnitude - ((127u - 15u) << 23);
        rebiased += 0xFFFu + ((rebiased >> 13) & 1u);
        return static_cast<uint16_t>(sign | (rebiased >> 13));
    }
    // Subnormal fp16: the result counts units of 2^-24. magnitude = significand * 2^(exponent-150),
    // so the count is significand >> (126 - exponent), rounded half to even. Rounding 2^-14 - tiny
    // up to 1024 units yields the smallest normal's pattern 0x0400, as it should.
    const uint32_t exponent = magnitude >> 23;
    if (exponent < 102) return sign;  // below 2^-25 (fp32 subnormals included): rounds to zero
    const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t units = significand >> shift;
    const uint32_t remainder = significand & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (units & 1u))) ++units;
    return static_cast<uint16_t>(sign | units);
}

float half_to_float(uint16_t bits) {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1Fu;
    uint32_t fraction = bits & 0x3FFu;
    if (exponent == 0x1F) return bits_float(sign | kFloatInf | (fraction << 13));  // Inf, NaN
    if (exponent != 0) return bits_float(sign | ((exponent + 127 - 15) << 23) | (fraction << 13));
    if (fraction == 0) return bits_float(sign);
    // Subnormal: normalise (every fp16 subnormal is a normal fp32).
    uint32_t float_exponent = 127 - 14;
    while ((fraction & 0x400u) == 0) {
        fraction <<= 1;
        --float_exponent;
    }
    return bits_float(sign | (float_exponent << 23) | ((fraction & 0x3FFu) << 13));
}

uint16_t float_to_bfloat16(float value) {
    return static_cast<uint16_t>(round_bfloat16_bits(float_bits(value)) >> 16);
}

float bfloat16_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

float round_to(DType dtype, float value) {
    switch (dtype) {
        case DType::fp32: return value;
        case DType::fp16: return bits_float(round_half_bits(float_bits(value)));
        case DType::bf16: return bits_float(round_bfloat16_bits(float_bits(value)));
    }
    throw_bad_dtype(dtype);
}

void round_array(DType dtype, float* values, size_t count) { round_copy(dtype, values, values, count); }

void round_copy(DType dtype, const float* source, float* destination, size_t count) {
    switch (dtype) {
        case DType::fp32:
            if (destination != source && count) std::memmove(destination, source, count * sizeof(float));
            return;
        case DType::fp16: round_half_into(source, destination, count); return;
        case DType::bf16: round_bfloat16_into(source, destination, count); return;
    }
    throw_bad_dtype(dtype);
}

}  // namespace mpt
