// Tests for src/backend/cpu/rounded_copy.cpp: the rounded copies of the parameters carry the same
// bits as round_copy (src/core/dtype.cpp, itself checked against independent references in
// test_dtype) for every class of input, streamed or not, at any length and alignment, in place
// too. Over a stride of the 2^32 patterns by default; MPTRAIN_TEST_EVERY_PATTERN=1 takes all of them
// (about a minute).
#include "backend/cpu/rounded_copy.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/float_bits.h"

namespace {

using mpt::DType;

// The first pattern at which the two differ, or -1.
int64_t first_difference(const std::vector<float>& expected, const float* got) {
    for (size_t i = 0; i < expected.size(); ++i)
        if (mpt::float_bits(expected[i]) != mpt::float_bits(got[i])) return static_cast<int64_t>(i);
    return -1;
}

std::string hex(uint32_t bits) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", bits);
    return text;
}

// write_rounded_copy over `patterns` (as bits), both ways, against round_copy.
void check_patterns(DType dtype, const std::vector<uint32_t>& patterns) {
    std::vector<float> source(patterns.size()), expected(patterns.size()), got(patterns.size());
    for (size_t i = 0; i < patterns.size(); ++i) source[i] = mpt::bits_float(patterns[i]);
    mpt::round_copy(dtype, source.data(), expected.data(), source.size());
    for (const bool streamed : {false, true}) {
        std::fill(got.begin(), got.end(), -777.0f);
        mpt::write_rounded_copy(dtype, source.data(), got.data(), source.size(), streamed);
        const int64_t at = first_difference(expected, got.data());
        if (at < 0) continue;
        const size_t i = static_cast<size_t>(at);
        const std::string what = std::string(mpt::dtype_name(dtype)) + (streamed ? " streamed" : "") + ": " +
                                 hex(patterns[i]) + " rounds to " + hex(mpt::float_bits(got[i])) + ", not " +
                                 hex(mpt::float_bits(expected[i]));
        FAIL_CHECK(what);
    }
}

// Every sign and exponent with the fractions where fp16 and bf16 round differently: around each
// half-way point (13 and 16 dropped bits, and each shift of fp16's subnormals), the extremes, and
// the quiet bit of NaNs.
std::vector<uint32_t> edge_patterns() {
    std::vector<uint32_t> fractions = {0u, 1u, 0x7FFFFFu, 0x400000u, 0x3FFFFFu, 0x7FE000u, 0x7FF000u};
    for (uint32_t shift = 13; shift <= 24; ++shift) {
        const uint32_t half = 1u << (shift - 1);
        for (const uint32_t below : {half - 1, half, half + 1, 3 * half - 1, 3 * half, 3 * half + 1})
            fractions.push_back(below & 0x7FFFFFu);
    }
    std::vector<uint32_t> patterns;
    for (uint32_t sign = 0; sign < 2; ++sign)
        for (uint32_t exponent = 0; exponent < 256; ++exponent)
            for (const uint32_t fraction : fractions) patterns.push_back(sign << 31 | exponent << 23 | fraction);
    return patterns;
}

}  // namespace

TEST_CASE("rounded copies carry round_copy's bits at the rounding's edges, NaN and Inf included") {
    if (!mpt::rounded_copy_vectorised()) MESSAGE("this CPU lacks AVX2 or F16C: the copies are round_copy's own");
    for (const DType dtype : {DType::fp16, DType::bf16, DType::fp32}) check_patterns(dtype, edge_patterns());
}

TEST_CASE("rounded copies carry round_copy's bits over a stride of every pattern, or all of them") {
    const char* every = std::getenv("MPTRAIN_TEST_EVERY_PATTERN");
    const bool all = every && std::string(every) == "1";
    // A prime stride visits every low-bit residue; the batches keep the memory small.
    const uint64_t stride = all ? 1 : 251, batch = uint64_t{1} << 24;
    for (const DType dtype : {DType::fp16, DType::bf16}) {
        std::vector<uint32_t> patterns;
        for (uint64_t first = 0; first < (uint64_t{1} << 32); first += batch * stride) {
            patterns.clear();
            for (uint64_t p = first; p < std::min(first + batch * stride, uint64_t{1} << 32); p += stride)
                patterns.push_back(static_cast<uint32_t>(p));
            check_patterns(dtype, patterns);
        }
    }
}

TEST_CASE("rounded copies at every length and alignment, in place too, touch nothing beyond") {
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> source(300);
    for (float& value : source) value = normal(random);
    for (const DType dtype : {DType::fp16, DType::bf16}) {
        for (const bool streamed : {false, true}) {
            for (size_t offset = 0; offset < 8; ++offset) {
                for (const size_t count :
                     {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{17}, size_t{291}}) {
                    CAPTURE(count);
                    CAPTURE(offset);
                    std::vector<float> expected(count);
                    mpt::round_copy(dtype, source.data(), expected.data(), count);
                    // Poisoned around the destination, which starts `offset` floats past a 32-byte line.
                    alignas(32) static float buffer[320];
                    for (float& value : buffer) value = -777.0f;
                    float* destination = buffer + offset;
                    mpt::write_rounded_copy(dtype, source.data(), destination, count, streamed);
                    CHECK(first_difference(expected, destination) == -1);
                    for (size_t i = 0; i < offset; ++i) CHECK(buffer[i] == -777.0f);
                    for (size_t i = offset + count; i < 320; ++i) CHECK(buffer[i] == -777.0f);
                    // In place: the source rounded where it lies.
                    std::vector<float> in_place(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(count));
                    mpt::write_rounded_copy(dtype, in_place.data(), in_place.data(), count, streamed);
                    CHECK(first_difference(expected, in_place.data()) == -1);
                }
            }
        }
    }
}
