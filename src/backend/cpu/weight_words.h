// A layer's weights as 16-bit words of its compute dtype (bf16 or fp16 bits): what the CPU backend's
// GEMMs read instead of the fp32 masters when a prediction's weights do not change between calls
// (Executor::prepare_prediction), half the bytes of the masters they round as they load them.
// Written with the rounding those GEMMs apply to the masters (avx512_rounding.h), so either way a
// product gets the same operands.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace mpt {

class ThreadPool;

// Whether write_weight_words runs here: CPUs with AVX512-BF16.
bool weight_words_supported();
// Rounds `count` floats to bf16 or fp16 words, as small_gemm and the AMX GEMM round their operands
// (to the nearest, ties to even; bf16 counts fp32 subnormals as zero; fp16 overflows to Inf).
void write_weight_words(DType operands, const float* values, uint16_t* words, int64_t count, ThreadPool& pool);

}  // namespace mpt
