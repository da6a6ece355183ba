// Device code shared by the kernels that take max |x| of the tensors they read or write (the max_abs
// pass, cuda_max_abs.cu; the ReLU backward in place, cuda_dense_backward_data.cu; the small-batch
// input gradient; the loss heads and the head layer, which reduce their blocks' maxima themselves):
// magnitudes as bits, each block's maximum raised into a cell of the MaxAbsScratch with atomicMax,
// and the last block found by the scratch's ticket counter.
//
// For non-negative floats and +Inf the unsigned order of the bits is the order of the values, so a
// maximum taken on bits is exact and independent of the order of the blocks and of their atomics.
// The cells and the counter are zero between kernels: the last block reads each cell it used and
// sets it back to 0 in one atomicExch, and the last ticket wraps the counter. Kernels that share
// the scratch run one after another on the compute lane.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_max_abs.cuh"

namespace mpt {

constexpr unsigned kFloatInfinityBits = 0x7f800000u;

// |x| as bits, NaN and Inf as +Inf.
__device__ __forceinline__ unsigned magnitude_bits(float value) {
    const unsigned bits = __float_as_uint(value) & 0x7fffffffu;
    return bits >= kFloatInfinityBits ? kFloatInfinityBits : bits;
}

// The largest magnitude's bits among a 16-byte vector's 4 fp32 or 8 fp16/bf16 elements.
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

// The block's largest of `largest` (bits), in thread 0 (0 in the others): a warp's by shuffles, the
// block's by thread 0 from the warps' in shared memory. Every thread of the block calls it at the
// same point (blocks of whole warps).
__device__ __forceinline__ unsigned block_largest_bits(unsigned largest) {
    __shared__ unsigned warp_largest[32];
    for (int offset = 16; offset > 0; offset >>= 1)
        largest = max(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    if (threadIdx.x % 32 == 0) warp_largest[threadIdx.x / 32] = largest;
    __syncthreads();
    unsigned block_largest = 0;
    if (threadIdx.x == 0)
        for (unsigned w = 0; w < blockDim.x / 32; ++w) block_largest = max(block_largest, warp_largest[w]);
    __syncthreads();  // warp_largest is free for the block's next call
    return block_largest;
}

// Raises `cell` to the block's maximum of `largest`, one atomicMax a block (none for a 0, the cell's
// value between kernels): atomics on one address queue in one L2 slice, so one a warp would cost up
// to 8 times as many. Every thread of the block calls it at the same point.
__device__ __forceinline__ void raise_max_cell(unsigned* cell, unsigned largest) {
    const unsigned block_largest = block_largest_bits(largest);
    if (threadIdx.x == 0 && block_largest != 0) atomicMax(cell, block_largest);
}

// After every raise_max_cell of the block, called by all its threads: whether it is the grid's last
// block to get here (the same answer in every thread; a grid of any shape). Thread 0's atomics reach
// L2 before its ticket (its fence), and the last block's reads come after every ticket (its fence),
// so it reads every block's maximum.
__device__ __forceinline__ bool last_block_of_grid(unsigned* counter) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    // Wraps to 0 on the last ticket: the counter is ready for the next kernel whatever happens after.
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    if (threadIdx.x == 0) last = atomicInc(counter, blocks - 1) == blocks - 1;
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// The last block's read of a cell, which it leaves 0 for the next kernel: the maximum as a float.
__device__ __forceinline__ float take_max_cell(unsigned* cell) { return __uint_as_float(atomicExch(cell, 0u)); }

// The end of a kernel that takes an input gradient's maximum and its input's as it writes the one
// (ReLU's backward in place, the small-batch input gradient): each block's raised into cells 0 and 1
// of `scratch`, and the grid's last block writes both where asked (null: not) and sets both cells
// back to 0 whether asked for or not (a block may have raised either). Every thread of every block
// calls it, with its own largest magnitudes' bits.
__device__ __forceinline__ void write_gradient_and_input_maxima(const MaxAbsScratch& scratch, unsigned gradient_largest,
                                                                unsigned input_largest, float* gradient_max,
                                                                float* input_max) {
    raise_max_cell(scratch.maxima, gradient_largest);
    raise_max_cell(scratch.maxima + 1, input_largest);
    if (!last_block_of_grid(scratch.counter) || threadIdx.x != 0) return;
    const float gradient = take_max_cell(scratch.maxima);
    const float input = take_max_cell(scratch.maxima + 1);
    if (gradient_max) *gradient_max = gradient;
    if (input_max) *input_max = input;
}

}  // namespace mpt
