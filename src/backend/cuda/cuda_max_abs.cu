// See cuda_max_abs.cuh. A block-wide max (cub::BlockReduce), then one atomicMax per block on the
// result's bits: for non-negative floats (and +Inf) the unsigned order of the bits is the order of
// the values, so the maximum is exact and independent of the order of blocks.
#include "backend/cuda/cuda_max_abs.cuh"

#include <cub/block/block_reduce.cuh>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

constexpr int kThreads = 256;
constexpr unsigned kInfinityBits = 0x7f800000u;

// |x| as bits, NaN and Inf as +Inf.
__device__ __forceinline__ unsigned magnitude_bits(float value) {
    const unsigned bits = __float_as_uint(value) & 0x7fffffffu;
    return bits >= kInfinityBits ? kInfinityBits : bits;
}

template <int kPerVector>
__device__ __forceinline__ unsigned vector_max(const uint4& raw, DType dtype) {
    unsigned largest = 0;
    if (kPerVector == 4) {
        const float* v = reinterpret_cast<const float*>(&raw);
#pragma unroll
        for (int i = 0; i < 4; ++i) largest = max(largest, magnitude_bits(v[i]));
    } else if (dtype == DType::bf16) {
        const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
        for (int i = 0; i < 8; ++i) largest = max(largest, magnitude_bits(__bfloat162float(v[i])));
    } else {
        const __half* v = reinterpret_cast<const __half*>(&raw);
#pragma unroll
        for (int i = 0; i < 8; ++i) largest = max(largest, magnitude_bits(__half2float(v[i])));
    }
    return largest;
}

struct MaxAbsLaunch {
    const void* values[kMaxAbsInputs];
    int64_t count[kMaxAbsInputs];
    DType dtype[kMaxAbsInputs];
    bool vectorised[kMaxAbsInputs];
};

__global__ void __launch_bounds__(kThreads) max_abs_kernel(const MaxAbsLaunch launch, unsigned* outputs) {
    start_after_preceding_kernel();
    const void* __restrict__ values = launch.values[blockIdx.y];
    const int64_t count = launch.count[blockIdx.y];
    const DType dtype = launch.dtype[blockIdx.y];
    const bool vectorised = launch.vectorised[blockIdx.y];
    unsigned* out = outputs + blockIdx.y;
    unsigned largest = 0;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    int64_t scalar_begin = 0;
    if (vectorised) {
        const int per_vector = dtype == DType::fp32 ? 4 : 8;
        const int64_t vectors = count / per_vector;
        const uint4* data = static_cast<const uint4*>(values);
        for (int64_t i = first; i < vectors; i += stride) {
            const uint4 raw = data[i];
            largest = max(largest, per_vector == 4 ? vector_max<4>(raw, dtype) : vector_max<8>(raw, dtype));
        }
        scalar_begin = vectors * per_vector;
    }
    for (int64_t i = scalar_begin + first; i < count; i += stride)
        largest = max(largest, magnitude_bits(load_element(values, dtype, i)));
    using MaxReduce = cub::BlockReduce<unsigned, kThreads>;
    __shared__ typename MaxReduce::TempStorage temp;
    const unsigned block_max = MaxReduce(temp).Reduce(largest, [](unsigned a, unsigned b) { return a > b ? a : b; });
    if (threadIdx.x == 0 && block_max != 0) atomicMax(out, block_max);
}

}  // namespace

void validate_max_abs(const MaxAbsInput* inputs, int count, const float* out) {
    require(count >= 0 && count <= kMaxAbsInputs, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: max_abs takes at most 16 inputs");
    require(count == 0 || (inputs && out), MPT_STATUS_INVALID_ARGUMENT, "cuda backend: max_abs needs inputs and outputs");
    for (int k = 0; k < count; ++k)
        require(inputs[k].count <= 0 || inputs[k].values, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: max_abs needs values");
}

void run_max_abs(const MaxAbsInput* inputs, int count, float* out, int max_blocks, cudaStream_t stream) {
    if (count == 0) return;
    // Zero first: blocks only raise the results, and an empty input's maximum is 0.
    MPT_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(count) * sizeof(float), stream));
    MaxAbsLaunch launch{};
    int64_t most_work = 0;
    for (int k = 0; k < count; ++k) {
        const MaxAbsInput& input = inputs[k];
        launch.values[k] = input.values;
        launch.count[k] = input.count > 0 ? input.count : 0;
        launch.dtype[k] = input.dtype;
        launch.vectorised[k] = (reinterpret_cast<uintptr_t>(input.values) & 15u) == 0;
        const int64_t work = launch.vectorised[k] ? launch.count[k] / (input.dtype == DType::fp32 ? 4 : 8) + 1 : launch.count[k];
        most_work = work > most_work ? work : most_work;
    }
    if (most_work == 0) return;
    // Blocks past a smaller tensor's end find nothing to do and return at once.
    const dim3 grid(grid_for(most_work, kThreads, static_cast<unsigned>(max_blocks)), static_cast<unsigned>(count));
    launch_kernel("max_abs_kernel", max_abs_kernel, grid, kThreads, 0, stream, launch,
                  reinterpret_cast<unsigned*>(out));
}

}  // namespace mpt
