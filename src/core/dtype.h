// Storage dtypes and their IEEE round-to-nearest-even conversions. The CPU backend emulates
// fp16/bf16 by rounding fp32 values to the nearest representable value (round_to), so overflow to
// Inf, underflow to zero and subnormals behave exactly as they will on the GPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpt {

enum class DType : uint8_t { fp32 = 1, fp16 = 2, bf16 = 3 };

// Bytes of one element as stored on a GPU (the CPU backend stores emulated values as fp32).
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

uint16_t float_to_half(float value);   // round-to-nearest-even; NaN stays NaN (quiet), overflow -> Inf
float half_to_float(uint16_t bits);    // exact
uint16_t float_to_bfloat16(float value);  // round-to-nearest-even; NaN stays NaN (quiet)
float bfloat16_to_float(uint16_t bits);   // exact

// The float nearest to `value` that `dtype` can represent (identity for fp32).
float round_to(DType dtype, float value);
// In-place round_to over an array; a no-op for fp32.
void round_array(DType dtype, float* values, size_t count);
// destination[i] = round_to(dtype, source[i]) in one pass; destination may be source itself, but
// must not overlap it otherwise.
void round_copy(DType dtype, const float* source, float* destination, size_t count);

}  // namespace mpt
