// Bounds on the sizes callers pass in, checked at the API before any size is derived from them.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "mptrain/mptrain.h"

namespace mpt {

// The most elements one caller's array may hold (a data set's samples, a prediction's inputs or
// outputs): 2^40, so every count and byte size computed from it fits in int64_t with room to spare.
constexpr int64_t kMaxHostElements = MPT_MAX_HOST_ELEMENTS;  // mptrain.h

// rows * width as an element count, failing with INVALID_ARGUMENT above kMaxHostElements (both > 0).
inline int64_t checked_elements(int64_t rows, int64_t width, const char* what) {
    if (width > kMaxHostElements / rows)
        fail(MPT_STATUS_INVALID_ARGUMENT, std::string(what) + " would hold more than 2^40 elements");
    return rows * width;
}

}  // namespace mpt
