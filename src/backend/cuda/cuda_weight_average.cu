// See cuda_weight_average.cuh. The average is averaged_weight's expression with each rounding
// spelled out (no contraction into a fused multiply-add), so it equals the CPU's bit for bit.
#include "backend/cuda/cuda_weight_average.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

__global__ void __launch_bounds__(kThreads) average_weights_kernel(const float* __restrict__ masters,
                                                                   float* __restrict__ averages, int64_t count,
                                                                   float momentum, const TrainState* state) {
    start_after_preceding_kernel();
    const bool copy = momentum == 0.0f;  // a frozen layer's: its weights, whatever the step
    if (state->found_inf && !copy) return;  // a skipped step: the weights did not change
    const bool first = copy || state->applied_steps == 0;
    const float keep = momentum, take = __fsub_rn(1.0f, momentum);
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float weight = masters[i];
        averages[i] = first ? weight : __fadd_rn(__fmul_rn(keep, averages[i]), __fmul_rn(take, weight));
    }
}

__global__ void __launch_bounds__(kThreads) swap_values_kernel(float* __restrict__ first, float* __restrict__ second,
                                                               int64_t count) {
    start_after_preceding_kernel();
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float value = first[i];
        first[i] = second[i];
        second[i] = value;
    }
}

}  // namespace

void run_average_weights(const float* masters, float* averages, int64_t count, float momentum, const TrainState* state,
                         cudaStream_t stream) {
    if (count == 0) return;
    launch_kernel("average_weights_kernel", average_weights_kernel, grid_for(count, kThreads, kMaxBlocks), kThreads, 0,
                  stream, masters, averages, count, momentum, state);
}

void run_swap_values(float* first, float* second, int64_t count, cudaStream_t stream) {
    if (count == 0) return;
    launch_kernel("swap_values_kernel", swap_values_kernel, grid_for(count, kThreads, kMaxBlocks), kThreads, 0, stream,
                  first, second, count);
}

}  // namespace mpt
