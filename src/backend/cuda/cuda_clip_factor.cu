// See cuda_clip_factor.cuh. The squares are taken of fp32 values and added in double: no overflow
// for any finite gradient, whatever the loss scale.
#include "backend/cuda/cuda_clip_factor.cuh"

#include <cub/block/block_reduce.cuh>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

constexpr int kThreads = 256;
static_assert(kClipFactorMaxBlocks <= kThreads, "the final block adds one partial per thread");

using SumReduce = cub::BlockReduce<double, kThreads>;

__global__ void __launch_bounds__(kThreads)
    sum_squares_kernel(const float* __restrict__ gradients, int64_t count, bool vectorised, double* partials) {
    start_after_preceding_kernel();
    double sum = 0.0;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    int64_t scalar_begin = 0;
    if (vectorised) {
        const int64_t vectors = count / 4;
        const float4* data = reinterpret_cast<const float4*>(gradients);
        for (int64_t i = first; i < vectors; i += stride) {
            const float4 v = data[i];
            sum += static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y +
                   static_cast<double>(v.z) * v.z + static_cast<double>(v.w) * v.w;
        }
        scalar_begin = vectors * 4;
    }
    for (int64_t i = scalar_begin + first; i < count; i += stride) sum += static_cast<double>(gradients[i]) * gradients[i];
    __shared__ typename SumReduce::TempStorage temp;
    const double block_sum = SumReduce(temp).Sum(sum);
    if (threadIdx.x == 0) partials[blockIdx.x] = block_sum;
}

__global__ void __launch_bounds__(kThreads) clip_factor_kernel(const double* partials, int blocks, float clipnorm,
                                                                TrainState* state) {
    start_after_preceding_kernel();
    const double partial = static_cast<int>(threadIdx.x) < blocks ? partials[threadIdx.x] : 0.0;
    __shared__ typename SumReduce::TempStorage temp;
    const double sum = SumReduce(temp).Sum(partial);
    if (threadIdx.x == 0) {
        TrainState value = *state;
        record_global_clip(value, sum, clipnorm);
        state->gradient_norm = value.gradient_norm;
        state->clip_factor = value.clip_factor;
    }
}

}  // namespace

void run_clip_factor(const float* gradients, int64_t count, float clipnorm, TrainState* state, double* partials,
                     cudaStream_t stream) {
    require(gradients != nullptr && state != nullptr && partials != nullptr && count >= 0, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: clip_factor needs the gradients and the train state");
    const bool vectorised = (reinterpret_cast<uintptr_t>(gradients) & 15) == 0;
    // The grid depends on the count alone, so the partials (and their sum) do too.
    const unsigned blocks = grid_for((count + 3) / 4, kThreads, kClipFactorMaxBlocks);
    launch_kernel("sum_squares_kernel", sum_squares_kernel, blocks, kThreads, 0, stream, gradients, count, vectorised,
                  partials);
    launch_kernel("clip_factor_kernel", clip_factor_kernel, 1, kThreads, 0, stream, partials, static_cast<int>(blocks),
                  clipnorm, state);
}

}  // namespace mpt
