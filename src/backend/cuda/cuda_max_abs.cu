// See cuda_max_abs.cuh. Each block takes the max of its share of one tensor (cub::BlockReduce) as
// bits: for non-negative floats (and +Inf) the unsigned order of the bits is the order of the
// values, so every maximum is exact and independent of the order of blocks. Each block leaves its
// max in the scratch; the last block to finish (a ticket counter that wraps to 0) takes each
// tensor's max of those, writes the results and, with a decision attached, the update decision: the
// results need no zeroing first, and the decision no launch of its own.
#include "backend/cuda/cuda_max_abs.cuh"

#include <cub/block/block_reduce.cuh>

#include "amp/loss_scaler.h"
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
    MaxAbsScratch scratch;
    MaxAbsDecision decision;  // the last block's, when decision.state is set
};

using MaxReduce = cub::BlockReduce<unsigned, kThreads>;

struct Larger {
    __device__ __forceinline__ unsigned operator()(unsigned a, unsigned b) const { return a > b ? a : b; }
};

// The max of one block's share of tensor blockIdx.y, as bits (in thread 0; cub's block reduction).
__device__ unsigned block_share_max(const MaxAbsLaunch& launch, typename MaxReduce::TempStorage& temp) {
    const void* __restrict__ values = launch.values[blockIdx.y];
    const int64_t count = launch.count[blockIdx.y];
    const DType dtype = launch.dtype[blockIdx.y];
    const bool vectorised = launch.vectorised[blockIdx.y];
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
    return MaxReduce(temp).Reduce(largest, Larger{});
}

__global__ void __launch_bounds__(kThreads) max_abs_kernel(const MaxAbsLaunch launch, float* out) {
    start_after_preceding_kernel();
    __shared__ typename MaxReduce::TempStorage temp;
    __shared__ bool last_block;
    __shared__ float maxima[kMaxAbsInputs];
    const unsigned block_max = block_share_max(launch, temp);
    const unsigned blocks = gridDim.x * gridDim.y;
    if (threadIdx.x == 0) {
        launch.scratch.partials[blockIdx.y * gridDim.x + blockIdx.x] = block_max;
        __threadfence();
        // Wraps to 0 on the last ticket: the counter is ready for the next launch whatever happens after.
        last_block = atomicInc(launch.scratch.counter, blocks - 1) == blocks - 1;
    }
    __syncthreads();
    if (!last_block) return;

    // The last block: every other block's partial is written and fenced. Every tensor's partials are
    // loaded before any is reduced, so that their round trips to L2 overlap (a tensor at a time, a
    // block reduction between, made a chain of one round trip and two barriers a tensor: 6 tensors
    // in the seed MLP's step, in a kernel of 7.9 us at batch 32 on an H200 for 10 KB); then each
    // warp takes its lanes' maxima with shuffles, and one thread a tensor those of the warps.
    __threadfence();
    const volatile unsigned* partials = launch.scratch.partials;
    const unsigned tensors = gridDim.y;
    // A thread's first partial of each tensor as straight-line loads (in a loop of unknown length
    // each tensor's loads waited for the tensor before: sm_90's code showed one round trip a tensor),
    // then the rest where the grid is wider than the block.
    unsigned largest[kMaxAbsInputs];
#pragma unroll
    for (unsigned tensor = 0; tensor < kMaxAbsInputs; ++tensor)
        largest[tensor] = tensor < tensors && threadIdx.x < gridDim.x ? partials[tensor * gridDim.x + threadIdx.x] : 0u;
    if (gridDim.x > kThreads) {
#pragma unroll
        for (unsigned tensor = 0; tensor < kMaxAbsInputs; ++tensor)
            if (tensor < tensors)
                for (unsigned b = threadIdx.x + kThreads; b < gridDim.x; b += kThreads)
                    largest[tensor] = max(largest[tensor], partials[tensor * gridDim.x + b]);
    }
    __shared__ unsigned warp_maxima[kThreads / 32][kMaxAbsInputs];
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (unsigned tensor = 0; tensor < kMaxAbsInputs; ++tensor) {
        for (int offset = 16; offset > 0; offset >>= 1)
            largest[tensor] = max(largest[tensor], __shfl_xor_sync(0xffffffffu, largest[tensor], offset));
        if (lane == 0) warp_maxima[warp][tensor] = largest[tensor];
    }
    __syncthreads();
    if (threadIdx.x < tensors) {
        unsigned tensor_max = 0;
        for (unsigned w = 0; w < kThreads / 32; ++w) tensor_max = max(tensor_max, warp_maxima[w][threadIdx.x]);
        maxima[threadIdx.x] = __uint_as_float(tensor_max);
        out[threadIdx.x] = maxima[threadIdx.x];
    }
    __syncthreads();  // the decision below reads every tensor's maximum
    if (threadIdx.x == 0) {
        const MaxAbsDecision& decision = launch.decision;
        if (decision.state && !gradient_bounds_finite(maxima, decision.layer_count, decision.rows))
            decision.state->found_inf = 1;
    }
}

}  // namespace

void validate_max_abs(const MaxAbsInput* inputs, int count, const float* out) {
    require(count >= 0 && count <= kMaxAbsInputs, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: max_abs takes at most 16 inputs");
    require(count == 0 || (inputs && out), MPT_STATUS_INVALID_ARGUMENT, "cuda backend: max_abs needs inputs and outputs");
    for (int k = 0; k < count; ++k)
        require(inputs[k].count <= 0 || inputs[k].values, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: max_abs needs values");
}

void run_max_abs(const MaxAbsInput* inputs, int count, float* out, const MaxAbsScratch& scratch,
                 const MaxAbsDecision& decision, cudaStream_t stream) {
    if (count == 0) return;
    require(!decision.state || (decision.layer_count >= 0 && 2 * decision.layer_count <= count), MPT_STATUS_INTERNAL,
            "cuda backend: max_abs's decision reads pairs it does not compute");
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
    launch.scratch = scratch;
    launch.decision = decision;
    // Blocks past a smaller tensor's end find nothing to do and leave 0 (an empty tensor's maximum).
    // At least one block per tensor, so that each result is written.
    const dim3 grid(grid_for(most_work, kThreads, static_cast<unsigned>(scratch.max_blocks)),
                    static_cast<unsigned>(count));
    launch_kernel("max_abs_kernel", max_abs_kernel, grid, kThreads, 0, stream, launch, out);
}

}  // namespace mpt
