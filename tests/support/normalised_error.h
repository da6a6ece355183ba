// The comparison measure of the GPU-against-CPU tests: ||actual - expected|| / ||expected||, in
// double, infinite when `actual` holds a NaN or Inf where `expected` is finite (a poisoned element
// nobody wrote, or a non-finite result). An infinity both hold (a 16-bit gradient both backends
// overflowed) is no difference and takes no part in the norm; NaN is never equal (compare NaN
// places first, as zero_shared_nans in tests/cuda_ops/loss_head_cases.cpp does).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace mpt_test {

inline double normalised_error(const std::vector<float>& actual, const std::vector<float>& expected) {
    REQUIRE(actual.size() == expected.size());
    double difference = 0.0, norm = 0.0;
    for (size_t i = 0; i < actual.size(); ++i) {
        if (!std::isfinite(actual[i]) && std::isfinite(expected[i])) return std::numeric_limits<double>::infinity();
        if (std::isinf(expected[i]) && actual[i] == expected[i]) continue;
        const double d = static_cast<double>(actual[i]) - expected[i];
        difference += d * d;
        norm += static_cast<double>(expected[i]) * expected[i];
    }
    if (norm == 0.0) return difference == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
    return std::sqrt(difference / norm);
}

}  // namespace mpt_test
