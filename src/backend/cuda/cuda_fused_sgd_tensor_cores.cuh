// Fused SGD (cuda_fused_sgd.cuh) with the weight gradient's tiles computed by the tensor cores:
// mma.m16n8k16 with fp16/bf16 operands and fp32 sums, compute capability 8.0 and up, for batches
// of up to 256 rows (kTensorCoreSgdMaxRows). The same update, tiles and grid as the CUDA-core
// kernel; the sums are the tensor cores' (the same products, added in another order). Why: at
// batch 32 the CUDA-core kernel issues 32 FMAs and 2 shared loads per weight and ran at 38% of the
// SM's issue rate (ncu, H200), where its 10 bytes a weight would take about 28 us at the copy
// ceiling; here a weight costs 1/64 of an mma per 16 batch rows and the update around it. At batch
// 256 it replaces the weight-gradient GEMM and the update kernel, whose fp32 gradient is 8 bytes a
// weight written and read again.
// Chosen by MPTRAIN_CUDA_TENSOR_CORE_SGD=1 (or the backend's setter) until a GPU has measured it.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_fused_sgd_launch.cuh"

namespace mpt {

// Whether the current device can run it: compute capability 8.0 and up, and this build's code for
// the device was compiled for 8.0 or later (a build for 7.5 alone runs on newer devices from its
// PTX, compiled without the mma instruction). Also raises the kernels' dynamic shared memory limit
// on the device: call it before the first run there.
bool fused_sgd_tensor_cores_available();

// Whether its kernel for the update takes whole float2s of masters and 32-bit pairs of copies.
bool fused_sgd_tensor_core_vector_path(const DenseUpdateArgs& args);

// The kernel for an update that fused_sgd_applies with tensor cores, of a 16-bit compute dtype, where
// fused_sgd_tensor_cores_available() (the caller's checks); run_fused_sgd_layers launches it.
FusedSgdVariant fused_sgd_tensor_core_variant(const DenseUpdateArgs& args);

}  // namespace mpt
