// A dense layer's bias gradient on CUDA: the column sums of dZ [rows, columns] in fp32, in a fixed
// order (the same bits every run). Where cuBLASLt's BGRADB epilogue does not do it in the
// weight-gradient GEMM: fused epilogues off or refused, and gradient accumulation (BGRADB writes,
// never adds). A column-per-thread kernel takes every shape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace mpt {

struct BiasGradientArgs {
    const void* output_grad;  // dZ [rows, columns]
    DType dtype;
    float* bias_grad;         // [columns]
    int64_t rows;
    int64_t columns;
    bool accumulate;  // adds the sums to bias_grad's values
};

void run_bias_gradient(const BiasGradientArgs& args, cudaStream_t stream);

}  // namespace mpt
