// Caller arrays that must hold finite numbers (data sets' samples and targets, predictions' inputs):
// NaN or Inf there is refused before anything reads the array, since a ReLU or a clipped
// probability would otherwise turn it into finite, plausible-looking results.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace mpt {

// `rows` x `width` floats; fails with MPT_STATUS_NON_FINITE naming the first NaN or Inf.
inline void require_finite(const float* values, int64_t rows, int64_t width, const char* what) {
    const int64_t count = rows * width;
    for (int64_t i = 0; i < count; ++i)
        if (!std::isfinite(values[i]))
            fail(MPT_STATUS_NON_FINITE, std::string(what) + " " + std::to_string(i / width) + ", element " +
                                            std::to_string(i % width) + " is NaN or Inf");
}

}  // namespace mpt
