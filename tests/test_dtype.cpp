// Tests for the fp16/bf16 conversions in src/core/dtype.cpp: exhaustive over every 16-bit pattern,
// and float rounding checked against references that share no code with it (RNE in double
// arithmetic, the compiler's _Float16 conversion where it has one, and hand-computed bit patterns).
#include "core/dtype.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

using mpt::DType;

uint32_t bits_of(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

float float_of(uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

// A binary floating-point format described by its numbers, for the double-arithmetic reference.
struct Format {
    int precision;      // significand bits, implicit bit included
    int min_exponent;   // the smallest normal number is 2^min_exponent
    int max_exponent;   // the largest finite number is (2 - 2^(1-precision)) * 2^max_exponent
    int fraction_bits;  // stored fraction bits (precision - 1)
    int exponent_bias;
};

constexpr Format kHalf{11, -14, 15, 10, 15};
constexpr Format kBfloat16{8, -126, 127, 7, 127};

double max_finite(const Format& format) {
    return std::ldexp(2.0 - std::ldexp(1.0, 1 - format.precision), format.max_exponent);
}

// The value of a 16-bit pattern of `format`, decoded with ldexp.
double decode(const Format& format, uint16_t bits) {
    const int exponent_field =
        (bits >> format.fraction_bits) & ((1 << (15 - format.fraction_bits)) - 1);
    const int fraction = bits & ((1 << format.fraction_bits) - 1);
    const int max_field = (1 << (15 - format.fraction_bits)) - 1;
    double magnitude;
    if (exponent_field == max_field) {
        magnitude = fraction != 0 ? std::numeric_limits<double>::quiet_NaN()
                                  : std::numeric_limits<double>::infinity();
    } else if (exponent_field == 0) {
        magnitude = std::ldexp(fraction, format.min_exponent - format.fraction_bits);
    } else {
        magnitude = std::ldexp((1 << format.fraction_bits) + fraction,
                               exponent_field - format.exponent_bias - format.fraction_bits);
    }
    return (bits & 0x8000) ? -magnitude : magnitude;
}

// IEEE round-to-nearest-even of a non-NaN `value` into `format`: find the two neighbouring
// representable values with exact double arithmetic and pick the nearer, ties to the even one.
// Overflow follows IEEE: round as if the exponent were unbounded, then anything above the largest
// finite value is Inf.
double reference_round(const Format& format, double value) {
    if (value == 0.0 || std::isinf(value)) return value;
    const double magnitude = std::fabs(value);
    int exponent;
    std::frexp(magnitude, &exponent);  // magnitude in [2^(exponent-1), 2^exponent)
    const int binade = std::max(exponent - 1, format.min_exponent);
    const double quantum = std::ldexp(1.0, binade - (format.precision - 1));
    const double units = magnitude / quantum;  // exact: a division by a power of two
    const double lower = std::floor(units);
    const double upper = lower + 1.0;
    double chosen;
    if (units - lower < upper - units) {
        chosen = lower;
    } else if (units - lower > upper - units) {
        chosen = upper;
    } else {
        chosen = std::fmod(lower, 2.0) == 0.0 ? lower : upper;
    }
    double result = chosen * quantum;
    if (result > max_finite(format)) result = std::numeric_limits<double>::infinity();
    return std::copysign(result, value);
}

// Same value and same sign (so -0 and +0 differ); NaN equals nothing here.
bool same_value(double a, double b) { return a == b && std::signbit(a) == std::signbit(b); }

#if defined(__FLT16_MANT_DIG__)
constexpr bool kHaveFloat16 = true;
uint16_t compiler_float_to_half(float value) {
    const _Float16 half = static_cast<_Float16>(value);
    uint16_t bits;
    std::memcpy(&bits, &half, sizeof bits);
    return bits;
}
float compiler_half_to_float(uint16_t bits) {
    _Float16 half;
    std::memcpy(&half, &bits, sizeof half);
    return static_cast<float>(half);
}
#else
constexpr bool kHaveFloat16 = false;
uint16_t compiler_float_to_half(float) { return 0; }
float compiler_half_to_float(uint16_t) { return 0.0f; }
#endif

// Checks every conversion of one non-NaN float against the references; returns false (after
// reporting) on the first mismatch so a broken build does not print millions of failures.
bool check_half_conversion(float value) {
    const double expected = reference_round(kHalf, value);
    const uint16_t bits = mpt::float_to_half(value);
    if (!same_value(decode(kHalf, bits), expected)) {
        FAIL_CHECK("float_to_half(bits 0x" << std::hex << bits_of(value) << ") = 0x" << bits
                                           << ", expected value " << expected);
        return false;
    }
    if (kHaveFloat16 && bits != compiler_float_to_half(value)) {
        FAIL_CHECK("float_to_half(bits 0x" << std::hex << bits_of(value) << ") = 0x" << bits
                                           << ", _Float16 gives 0x"
                                           << compiler_float_to_half(value));
        return false;
    }
    const float rounded = mpt::round_to(DType::fp16, value);
    if (!same_value(rounded, expected)) {
        FAIL_CHECK("round_to(fp16, bits 0x" << std::hex << bits_of(value) << ") = " << rounded
                                            << ", expected " << expected);
        return false;
    }
    return true;
}

bool check_bfloat16_conversion(float value) {
    const double expected = reference_round(kBfloat16, value);
    const uint16_t bits = mpt::float_to_bfloat16(value);
    if (!same_value(decode(kBfloat16, bits), expected)) {
        FAIL_CHECK("float_to_bfloat16(bits 0x" << std::hex << bits_of(value) << ") = 0x" << bits
                                               << ", expected value " << expected);
        return false;
    }
    const float rounded = mpt::round_to(DType::bf16, value);
    if (!same_value(rounded, expected)) {
        FAIL_CHECK("round_to(bf16, bits 0x" << std::hex << bits_of(value) << ") = " << rounded
                                            << ", expected " << expected);
        return false;
    }
    return true;
}

bool check_conversion(const Format& format, float value) {
    return &format == &kHalf ? check_half_conversion(value) : check_bfloat16_conversion(value);
}

// Every positive finite pattern, the midpoint between it and the next one up (for the largest
// finite value, the midpoint towards the overflow threshold 2^(max_exponent+1)), and the float
// neighbours of both; all with both signs.
std::vector<float> halfway_points_and_neighbours(const Format& format) {
    std::vector<float> values;
    const int positive_finite = (((1 << (15 - format.fraction_bits)) - 1) << format.fraction_bits);
    for (int bits = 0; bits < positive_finite; ++bits) {
        const double here = decode(format, static_cast<uint16_t>(bits));
        const double next = bits + 1 == positive_finite
                                ? std::ldexp(1.0, format.max_exponent + 1)
                                : decode(format, static_cast<uint16_t>(bits + 1));
        const float midpoint = static_cast<float>((here + next) / 2);
        REQUIRE(static_cast<double>(midpoint) == (here + next) / 2);  // the tie is a float
        for (const float point : {static_cast<float>(here), midpoint}) {
            for (const float value :
                 {point, std::nextafter(point, 0.0f), std::nextafter(point, INFINITY)}) {
                values.push_back(value);
                values.push_back(-value);
            }
        }
    }
    return values;
}

std::vector<float> nan_patterns() {
    std::vector<float> nans;
    for (const uint32_t bits : {0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0x7FFFFFFFu, 0x7F802000u,
                                0x7FA00000u, 0xFFC00000u, 0xFF800001u, 0xFFFFFFFFu, 0xFFC01234u}) {
        nans.push_back(float_of(bits));
    }
    return nans;
}

// Random bit patterns, a fixed seed and std::mt19937's raw output (identical on every platform).
std::vector<float> random_floats(size_t count, uint32_t seed) {
    std::mt19937 generator(seed);
    std::vector<float> values(count);
    for (float& value : values) value = float_of(static_cast<uint32_t>(generator()));
    return values;
}

}  // namespace

TEST_CASE("dtype sizes and names match the storage formats") {
    CHECK(mpt::dtype_size(DType::fp32) == 4);
    CHECK(mpt::dtype_size(DType::fp16) == 2);
    CHECK(mpt::dtype_size(DType::bf16) == 2);
    CHECK(std::strcmp(mpt::dtype_name(DType::fp32), "fp32") == 0);
    CHECK(std::strcmp(mpt::dtype_name(DType::fp16), "fp16") == 0);
    CHECK(std::strcmp(mpt::dtype_name(DType::bf16), "bf16") == 0);
}

TEST_CASE("every fp16 bit pattern converts to the value it encodes and back to the same bits") {
    int mismatches = 0;
    for (uint32_t pattern = 0; pattern <= 0xFFFF && mismatches < 10; ++pattern) {
        const uint16_t bits = static_cast<uint16_t>(pattern);
        const float value = mpt::half_to_float(bits);
        const bool is_nan = (bits & 0x7C00) == 0x7C00 && (bits & 0x03FF) != 0;
        bool ok;
        if (is_nan) {
            // The fraction (payload, quiet bit) moves to the top of the fp32 fraction; a quiet NaN
            // comes back bit for bit, a signalling one comes back quieted.
            const uint16_t back = mpt::float_to_half(value);
            ok = std::isnan(value) && std::signbit(value) == ((bits & 0x8000) != 0) &&
                 ((bits_of(value) >> 13) & 0x3FF) == (bits & 0x3FFu) && back == (bits | 0x0200) &&
                 std::isnan(mpt::round_to(DType::fp16, value));
        } else {
            ok = same_value(value, decode(kHalf, bits)) && mpt::float_to_half(value) == bits &&
                 bits_of(mpt::round_to(DType::fp16, value)) == bits_of(value) &&
                 (!kHaveFloat16 || bits_of(compiler_half_to_float(bits)) == bits_of(value));
        }
        if (!ok) {
            ++mismatches;
            FAIL_CHECK("fp16 pattern 0x" << std::hex << bits << " -> float bits 0x"
                                         << bits_of(value));
        }
    }
    CHECK(mismatches == 0);
}

TEST_CASE("every bf16 bit pattern converts to the value it encodes and back to the same bits") {
    int mismatches = 0;
    for (uint32_t pattern = 0; pattern <= 0xFFFF && mismatches < 10; ++pattern) {
        const uint16_t bits = static_cast<uint16_t>(pattern);
        const float value = mpt::bfloat16_to_float(bits);
        const bool is_nan = (bits & 0x7F80) == 0x7F80 && (bits & 0x007F) != 0;
        bool ok;
        if (is_nan) {
            const uint16_t back = mpt::float_to_bfloat16(value);
            ok = std::isnan(value) && std::signbit(value) == ((bits & 0x8000) != 0) &&
                 ((bits_of(value) >> 16) & 0x7F) == (bits & 0x7Fu) && back == (bits | 0x0040) &&
                 std::isnan(mpt::round_to(DType::bf16, value));
        } else {
            ok = same_value(value, decode(kBfloat16, bits)) &&
                 mpt::float_to_bfloat16(value) == bits &&
                 bits_of(mpt::round_to(DType::bf16, value)) == bits_of(value);
        }
        if (!ok) {
            ++mismatches;
            FAIL_CHECK("bf16 pattern 0x" << std::hex << bits << " -> float bits 0x"
                                         << bits_of(value));
        }
    }
    CHECK(mismatches == 0);
}

TEST_CASE("the _Float16 reference is available to the fp16 tests") {
    if (!kHaveFloat16) {
        MESSAGE("this compiler has no _Float16: fp16 is checked against the double reference only");
        return;
    }
    // The reference itself must round to nearest even, or it would prove nothing.
    CHECK(compiler_float_to_half(65520.0f) == 0x7C00);
    CHECK(compiler_float_to_half(1.0f + 0x1p-11f) == 0x3C00);
    CHECK(compiler_float_to_half(1.0f + 3 * 0x1p-11f) == 0x3C02);
}

TEST_CASE("float to half rounds every halfway point to even and its neighbours to the nearer") {
    const std::vector<float> values = halfway_points_and_neighbours(kHalf);
    CHECK(values.size() == 31744u * 12u);
    size_t checked = 0;
    for (const float value : values) {
        if (!check_half_conversion(value)) break;
        ++checked;
    }
    CHECK(checked == values.size());
}

TEST_CASE("float to bf16 rounds every halfway point to even and its neighbours to the nearer") {
    const std::vector<float> values = halfway_points_and_neighbours(kBfloat16);
    CHECK(values.size() == 32640u * 12u);
    size_t checked = 0;
    for (const float value : values) {
        if (!check_bfloat16_conversion(value)) break;
        ++checked;
    }
    CHECK(checked == values.size());
}

TEST_CASE("random float bit patterns round to fp16 and bf16 as the references do") {
    const std::vector<float> values = random_floats(3'000'000, 20240601u);
    for (const Format* format : {&kHalf, &kBfloat16}) {
        size_t checked = 0;
        for (const float value : values) {
            if (std::isnan(value)) {
                ++checked;
                continue;  // NaNs have their own test
            }
            if (!check_conversion(*format, value)) break;
            ++checked;
        }
        CHECK(checked == values.size());
    }
}

TEST_CASE("random magnitudes in the fp16 subnormal range round as the references do") {
    // Uniform bit patterns seldom land below 2^-14; these cover every fp32 exponent down there.
    std::mt19937 generator(7u);
    size_t checked = 0;
    const size_t count = 500'000;
    for (size_t index = 0; index < count; ++index) {
        const uint32_t random = static_cast<uint32_t>(generator());
        const uint32_t magnitude = random % 0x38800000u;  // [0, 2^-14)
        if (!check_half_conversion(float_of(magnitude | (random & 0x80000000u)))) break;
        ++checked;
    }
    CHECK(checked == count);
}

TEST_CASE("float to half handles the boundary values exactly") {
    struct Case {
        float value;
        uint16_t half;
    };
    const Case cases[] = {
        {65504.0f, 0x7BFF},                        // largest finite half
        {std::nextafter(65520.0f, 0.0f), 0x7BFF},  // 65519.996: still rounds down
        {65520.0f, 0x7C00},                        // the tie goes to the even 2^16: overflow
        {65536.0f, 0x7C00},
        {std::numeric_limits<float>::max(), 0x7C00},
        {-65520.0f, 0xFC00},
        {-std::nextafter(65520.0f, 0.0f), 0xFBFF},
        {1.0f, 0x3C00},
        {1.0f + 0x1p-11f, 0x3C00},      // tie, 0x3C00 is even
        {1.0f + 3 * 0x1p-11f, 0x3C02},  // tie, 0x3C02 is even
        {1.0f + 0x1p-11f + 0x1p-23f, 0x3C01},
        {2047.0f, 0x67FF},
        {2049.0f, 0x6800},                         // tie between 2048 and 2050
        {0x1p-14f, 0x0400},                        // smallest normal half
        {std::nextafter(0x1p-14f, 0.0f), 0x0400},  // rounds up into the normals
        {0x1p-14f - 0x1p-25f, 0x0400},             // 1023.5 units: tie, 1024 is even
        {0x1p-14f - 0x1p-24f, 0x03FF},             // largest subnormal half
        {0x1p-24f, 0x0001},                        // smallest subnormal half
        {0x1p-25f, 0x0000},                        // half of it: tie, 0 is even
        {std::nextafter(0x1p-25f, 1.0f), 0x0001},
        {std::nextafter(0x1p-25f, 0.0f), 0x0000},
        {3 * 0x1p-25f, 0x0002},  // 1.5 units: tie, 2 is even
        {5 * 0x1p-25f, 0x0002},  // 2.5 units: tie, 2 is even
        {0x1p-26f, 0x0000},
        {-0x1p-24f, 0x8001},
        {-0x1p-26f, 0x8000},                          // underflow keeps the sign
        {std::numeric_limits<float>::min(), 0x0000},  // fp32 smallest normal
        {std::numeric_limits<float>::denorm_min(), 0x0000},
        {-std::numeric_limits<float>::denorm_min(), 0x8000},
        {float_of(0x007FFFFFu), 0x0000},  // largest fp32 subnormal
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {INFINITY, 0x7C00},
        {-INFINITY, 0xFC00},
    };
    for (const Case& test : cases) {
        CAPTURE(test.value);
        CHECK(mpt::float_to_half(test.value) == test.half);
        CHECK(bits_of(mpt::round_to(DType::fp16, test.value)) ==
              bits_of(static_cast<float>(decode(kHalf, test.half))));
        if (kHaveFloat16) {
            CHECK(compiler_float_to_half(test.value) == test.half);  // the table itself
        }
    }
}

TEST_CASE("float to bf16 handles the boundary values exactly") {
    struct Case {
        uint32_t value;
        uint16_t bfloat16;
    };
    const Case cases[] = {
        {0x3F800000u, 0x3F80},  // 1
        {0x3F808000u, 0x3F80},  // 1 + 2^-8: tie, 0x3F80 is even
        {0x3F818000u, 0x3F82},  // 1 + 3 * 2^-8: tie, 0x3F82 is even
        {0x3F808001u, 0x3F81},
        {0x3F807FFFu, 0x3F80},
        {0x7F7F7FFFu, 0x7F7F},  // just below the tie above the largest finite bf16
        {0x7F7F8000u, 0x7F80},  // the tie goes to the even pattern, which is Inf
        {0x7F7FFFFFu, 0x7F80},  // FLT_MAX overflows
        {0xFF7FFFFFu, 0xFF80},
        {0x00000001u, 0x0000},  // fp32 subnormals round like any other value
        {0x00008000u, 0x0000},  // tie, 0 is even
        {0x00008001u, 0x0001},
        {0x00018000u, 0x0002},  // tie, 2 is even
        {0x007FFFFFu, 0x0080},  // largest fp32 subnormal rounds up to the smallest normal
        {0x80008001u, 0x8001},
        {0x80000001u, 0x8000},
        {0x00000000u, 0x0000},
        {0x80000000u, 0x8000},
        {0x7F800000u, 0x7F80},
        {0xFF800000u, 0xFF80},
    };
    for (const Case& test : cases) {
        CAPTURE(test.value);
        CHECK(mpt::float_to_bfloat16(float_of(test.value)) == test.bfloat16);
        CHECK(bits_of(mpt::round_to(DType::bf16, float_of(test.value))) ==
              static_cast<uint32_t>(test.bfloat16) << 16);
    }
}

TEST_CASE("NaN stays a quiet NaN with its sign in every conversion") {
    for (const float nan : nan_patterns()) {
        const uint32_t bits = bits_of(nan);
        CAPTURE(bits);
        const bool negative = (bits & 0x80000000u) != 0;

        const uint16_t half = mpt::float_to_half(nan);
        CHECK((half & 0x7C00) == 0x7C00);
        CHECK((half & 0x0200) != 0);  // quiet bit (so the fraction is non-zero: NaN, not Inf)
        CHECK(((half & 0x8000) != 0) == negative);
        CHECK((half & 0x01FF) == ((bits >> 13) & 0x1FF));  // payload bits that fit are kept

        const uint16_t bfloat16 = mpt::float_to_bfloat16(nan);
        CHECK((bfloat16 & 0x7F80) == 0x7F80);
        CHECK((bfloat16 & 0x0040) != 0);
        CHECK(((bfloat16 & 0x8000) != 0) == negative);
        CHECK((bfloat16 & 0x003F) == ((bits >> 16) & 0x3F));

        for (const DType dtype : {DType::fp16, DType::bf16}) {
            const float rounded = mpt::round_to(dtype, nan);
            CHECK(std::isnan(rounded));
            CHECK((bits_of(rounded) & 0x00400000u) != 0);
            CHECK(std::signbit(rounded) == negative);
            float in_array[1] = {nan};
            mpt::round_array(dtype, in_array, 1);
            CHECK(std::isnan(in_array[0]));
            CHECK((bits_of(in_array[0]) & 0x00400000u) != 0);
            CHECK(std::signbit(in_array[0]) == negative);
        }
        CHECK(bits_of(mpt::round_to(DType::fp32, nan)) == bits);
    }
}

TEST_CASE("infinities and signed zeros are unchanged by every dtype") {
    const uint32_t patterns[] = {0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u};
    for (const uint32_t bits : patterns) {
        CAPTURE(bits);
        for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
            CHECK(bits_of(mpt::round_to(dtype, float_of(bits))) == bits);
            float in_array[1] = {float_of(bits)};
            mpt::round_array(dtype, in_array, 1);
            CHECK(bits_of(in_array[0]) == bits);
        }
    }
    CHECK(mpt::float_to_half(INFINITY) == 0x7C00);
    CHECK(mpt::float_to_half(-INFINITY) == 0xFC00);
    CHECK(mpt::float_to_bfloat16(INFINITY) == 0x7F80);
    CHECK(mpt::float_to_bfloat16(-INFINITY) == 0xFF80);
    CHECK(bits_of(mpt::half_to_float(0x7C00)) == 0x7F800000u);
    CHECK(bits_of(mpt::half_to_float(0xFC00)) == 0xFF800000u);
    CHECK(bits_of(mpt::half_to_float(0x8000)) == 0x80000000u);
}

TEST_CASE("round_array matches the references and round_to on random values and specials") {
    // An odd length and an unaligned start exercise the vector body and the scalar tail alike.
    std::vector<float> source = random_floats(100'003, 99u);
    const std::vector<float> nans = nan_patterns();
    const float specials[] = {0.0f,
                              -0.0f,
                              INFINITY,
                              -INFINITY,
                              65504.0f,
                              65520.0f,
                              std::nextafter(65520.0f, 0.0f),
                              -65520.0f,
                              0x1p-24f,
                              0x1p-25f,
                              -0x1p-25f,
                              3 * 0x1p-25f,
                              std::nextafter(0x1p-14f, 0.0f),
                              std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::denorm_min(),
                              float_of(0x7F7F8000u),
                              float_of(0x00008000u),
                              1.0f + 0x1p-11f};
    size_t slot = 1;
    for (int repeat = 0; repeat < 30; ++repeat) {
        for (const float value : specials) source[slot += 97] = value;
        for (const float value : nans) source[slot += 89] = value;
    }
    for (size_t index = source.size() - 40; index < source.size(); ++index) {
        source[index] = specials[index % (sizeof specials / sizeof specials[0])];
    }

    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        CAPTURE(mpt::dtype_name(dtype));
        std::vector<float> values = source;
        mpt::round_array(dtype, values.data() + 1, values.size() - 1);
        CHECK(bits_of(values[0]) == bits_of(source[0]));  // outside the range: untouched
        size_t mismatches = 0;
        for (size_t index = 1; index < values.size() && mismatches < 10; ++index) {
            const float value = source[index];
            bool ok;
            if (std::isnan(value)) {
                ok =
                    std::isnan(values[index]) && std::signbit(values[index]) == std::signbit(value);
            } else {
                const double expected = dtype == DType::fp32   ? value
                                        : dtype == DType::fp16 ? reference_round(kHalf, value)
                                                               : reference_round(kBfloat16, value);
                ok = same_value(values[index], expected);
            }
            ok = ok && bits_of(values[index]) == bits_of(mpt::round_to(dtype, value));
            if (!ok) {
                ++mismatches;
                FAIL_CHECK("index " << index << ": bits 0x" << std::hex << bits_of(value)
                                    << " -> 0x" << bits_of(values[index]));
            }
        }
        CHECK(mismatches == 0);
        // round_copy: the same bits into another array (unaligned, odd length), nothing around it.
        std::vector<float> copied(source.size() + 1, -1.0f);
        mpt::round_copy(dtype, source.data() + 1, copied.data() + 2, source.size() - 1);
        CHECK(std::memcmp(copied.data() + 2, values.data() + 1, (source.size() - 1) * sizeof(float)) == 0);
        CHECK(copied[0] == -1.0f);
        CHECK(copied[1] == -1.0f);
    }
}

TEST_CASE("round_array rounds runs of halfway points and their neighbours as the references do") {
    // Sorted by magnitude, so most blocks lie wholly in the fp16 normal range (the fast path) and a
    // few straddle the subnormal boundary or overflow.
    for (const Format* format : {&kHalf, &kBfloat16}) {
        const DType dtype = format == &kHalf ? DType::fp16 : DType::bf16;
        CAPTURE(mpt::dtype_name(dtype));
        const std::vector<float> source = halfway_points_and_neighbours(*format);
        std::vector<float> values = source;
        mpt::round_array(dtype, values.data(), values.size());
        size_t mismatches = 0;
        for (size_t index = 0; index < values.size() && mismatches < 10; ++index) {
            if (!same_value(values[index], reference_round(*format, source[index]))) {
                ++mismatches;
                FAIL_CHECK("index " << index << ": bits 0x" << std::hex << bits_of(source[index])
                                    << " -> 0x" << bits_of(values[index]));
            }
        }
        CHECK(mismatches == 0);
    }
}

TEST_CASE("round_array rounds a lone special value at any position in a run of ordinary values") {
    // Wherever a value that needs special handling sits (any lane of a block, the scalar tail), it
    // is rounded correctly and does not disturb its neighbours, which are all ties.
    std::vector<float> specials = {65520.0f,
                                   -65520.0f,
                                   std::nextafter(65520.0f, 0.0f),
                                   65536.0f,
                                   std::numeric_limits<float>::max(),
                                   INFINITY,
                                   -INFINITY,
                                   0x1p-14f,
                                   std::nextafter(0x1p-14f, 0.0f),
                                   -std::nextafter(0x1p-14f, 0.0f),
                                   0x1p-24f,
                                   0x1p-25f,
                                   3 * 0x1p-25f,
                                   std::numeric_limits<float>::min(),
                                   std::numeric_limits<float>::denorm_min(),
                                   0.0f,
                                   -0.0f,
                                   float_of(0x7F7F8000u),
                                   float_of(0x00008000u)};
    const size_t length = 75;  // two 32-element blocks and a tail
    for (const Format* format : {&kHalf, &kBfloat16}) {
        const DType dtype = format == &kHalf ? DType::fp16 : DType::bf16;
        CAPTURE(mpt::dtype_name(dtype));
        const float tie = format == &kHalf ? 1.0f + 0x1p-11f : 1.0f + 0x1p-8f;
        size_t mismatches = 0;
        for (const float special : specials) {
            for (size_t position = 0; position < length; ++position) {
                std::vector<float> source(length);
                for (size_t index = 0; index < length; ++index) {
                    source[index] =
                        (index % 2 ? -1.0f : 1.0f) * std::ldexp(tie, static_cast<int>(index % 7));
                }
                source[position] = special;
                std::vector<float> values = source;
                mpt::round_array(dtype, values.data(), values.size());
                for (size_t index = 0; index < length; ++index) {
                    if (!same_value(values[index], reference_round(*format, source[index])) &&
                        mismatches++ < 10) {
                        FAIL_CHECK("special bits 0x" << std::hex << bits_of(special) << std::dec
                                                     << " at " << position << ": index " << index
                                                     << " gives bits 0x" << std::hex
                                                     << bits_of(values[index]));
                    }
                }
            }
        }
        for (const float nan : nan_patterns()) {
            for (size_t position = 0; position < length; ++position) {
                std::vector<float> values(length, tie);
                values[position] = nan;
                mpt::round_array(dtype, values.data(), values.size());
                for (size_t index = 0; index < length; ++index) {
                    const bool ok = index == position
                                        ? std::isnan(values[index]) &&
                                              std::signbit(values[index]) == std::signbit(nan)
                                        : values[index] == 1.0f;
                    if (!ok && mismatches++ < 10) {
                        FAIL_CHECK("NaN at " << position << " breaks index " << index);
                    }
                }
            }
        }
        CHECK(mismatches == 0);
    }
}

TEST_CASE("an invalid dtype is rejected by the rounding functions") {
    const DType invalid = static_cast<DType>(0);
    CHECK(mpt::dtype_size(invalid) == 0);
    CHECK(std::strcmp(mpt::dtype_name(invalid), "unknown") == 0);
    CHECK_THROWS_AS(static_cast<void>(mpt::round_to(invalid, 1.0f)), std::invalid_argument);
    float value = 1.0f;
    CHECK_THROWS_AS(mpt::round_array(invalid, &value, 1), std::invalid_argument);
}
