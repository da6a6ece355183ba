// The matrix-vector products of bf16 and fp16 layers on an AMX CPU: a GEMM with one row or one
// column of C (a single sample's forward or input gradient). AMX multiplies 32-row blocks, so for
// one row it would pack the whole weight matrix and use 1/32 of its products; here the fp32
// masters are read once, each value rounded to the layer's dtype as it is loaded, and the exact
// products (two bf16 or two fp16 values multiply exactly in fp32) are summed in fp32 with fused
// multiply-adds. A one-row prediction of the seed MLP then reads what fp32's sgemv reads and takes
// about as long: 1.85x (bf16) and 4.1x (fp16) faster than on AMX tiles (bench/NOTES.md).
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_gemm.h"
#include "core/dtype.h"

namespace mpt {

class ThreadPool;

// y = alpha * op(matrix) . vector + beta * y (GemvProblem), with matrix and vector values rounded to
// `dtype` (bf16 or fp16: nearest, ties to even; bf16 counts fp32 subnormal inputs as zero, as the
// AMX GEMM does) and their products summed in fp32, each element in one fixed order whatever the
// thread count. beta == 0 ignores y's old contents, NaN included. Needs AVX512-BF16 and AVX512-BW
// (every AMX CPU has them): only where amx_gemm_available().
void low_precision_gemv(DType dtype, const GemvProblem& gemv, float alpha, float beta, ThreadPool& pool);

}  // namespace mpt
