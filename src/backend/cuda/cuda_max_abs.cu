// See cuda_max_abs.cuh. A pass's tensors are one range of chunks dealt to the blocks
// (max_abs_chunk_layout.h). Each block takes the max of its chunks as bits and raises its tensor's
// cell in the scratch to it (cuda_max_abs_cells.cuh: exact, independent of the blocks' order). The
// last block to finish reads the tensors' maxima, sets the cells back to 0, writes the results and,
// with a decision attached, the update decision: the results need no zeroing first, and the
// decision no launch of its own.
#include "backend/cuda/cuda_max_abs.cuh"

#include "amp/loss_scaler.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_max_abs_cells.cuh"
#include "backend/cuda/max_abs_chunk_layout.h"

namespace mpt {

namespace {

struct MaxAbsLaunch {
    const void* values[kMaxAbsInputs];
    int64_t count[kMaxAbsInputs];
    DType dtype[kMaxAbsInputs];
    bool vectorised[kMaxAbsInputs];
    bool taken[kMaxAbsInputs];               // count kMaxAbsTaken: no chunk, its maximum already in out
    int64_t first_chunk[kMaxAbsInputs + 1];  // [tensors]: the pass's chunks (max_abs_chunk_layout.h)
    int tensors;
    MaxAbsScratch scratch;
    MaxAbsDecision decision;  // the last block's, when decision.state is set
};

// The max, as bits, of this thread's elements in chunk `local` of tensor `tensor`: its 4 units'
// loads issued together, then the tail's element where this chunk is the tensor's last.
__device__ __forceinline__ unsigned chunk_max(const MaxAbsLaunch& launch, int tensor, int64_t local) {
    const void* __restrict__ values = launch.values[tensor];
    const int64_t count = launch.count[tensor];
    const DType dtype = launch.dtype[tensor];
    const int element_bytes = dtype == DType::fp32 ? 4 : 2;
    const int unit_elements = max_abs_chunks::per_unit(launch.vectorised[tensor], element_bytes);
    const int64_t units = max_abs_chunks::units(count, unit_elements);
    const int64_t first = local * max_abs_chunks::kChunkUnits + threadIdx.x;
    unsigned largest = 0;
    if (unit_elements > 1) {
        const uint4* data = static_cast<const uint4*>(values);
        uint4 raw[max_abs_chunks::kUnitsPerThread];
#pragma unroll
        for (int j = 0; j < max_abs_chunks::kUnitsPerThread; ++j) {
            const int64_t unit = first + j * max_abs_chunks::kThreads;
            raw[j] = unit < units ? data[unit] : make_uint4(0u, 0u, 0u, 0u);  // +0s: no maximum
        }
#pragma unroll
        for (int j = 0; j < max_abs_chunks::kUnitsPerThread; ++j)
            largest = max(largest, unit_elements == 4 ? vector_max<4>(raw[j], dtype) : vector_max<8>(raw[j], dtype));
    } else {
        float element[max_abs_chunks::kUnitsPerThread];
#pragma unroll
        for (int j = 0; j < max_abs_chunks::kUnitsPerThread; ++j) {
            const int64_t unit = first + j * max_abs_chunks::kThreads;
            element[j] = unit < units ? load_element(values, dtype, unit) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < max_abs_chunks::kUnitsPerThread; ++j) largest = max(largest, magnitude_bits(element[j]));
    }
    const int64_t tail = max_abs_chunks::tail_first(count, unit_elements) + threadIdx.x;
    if (tail < count && local + 1 == max_abs_chunks::chunks(count, unit_elements))
        largest = max(largest, magnitude_bits(load_element(values, dtype, tail)));
    return largest;
}

__global__ void __launch_bounds__(max_abs_chunks::kThreads) max_abs_kernel(const MaxAbsLaunch launch, float* out) {
    start_after_preceding_kernel();
    __shared__ float maxima[kMaxAbsInputs];
    const int64_t chunks = launch.first_chunk[launch.tensors];
    int tensor = 0;
    unsigned largest = 0;
    for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
        const int next = max_abs_chunks::tensor_of_chunk(launch.first_chunk, launch.tensors, chunk, tensor);
        if (next != tensor) {  // the same for the whole block: its chunk sequence is the block's
            raise_max_cell(launch.scratch.maxima + tensor, largest);
            largest = 0;
            tensor = next;
        }
        largest = max(largest, chunk_max(launch, tensor, chunk - launch.first_chunk[tensor]));
    }
    raise_max_cell(launch.scratch.maxima + tensor, largest);
    if (!last_block_of_grid(launch.scratch.counter)) return;

    // The last block: each tensor's maximum (set back to 0 for the next kernel as it is read), or
    // the one its dense_backward_data wrote already, then the decision.
    if (threadIdx.x < static_cast<unsigned>(launch.tensors)) {
        if (launch.taken[threadIdx.x]) {
            maxima[threadIdx.x] = out[threadIdx.x];
        } else {
            maxima[threadIdx.x] = take_max_cell(launch.scratch.maxima + threadIdx.x);
            out[threadIdx.x] = maxima[threadIdx.x];
        }
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
    bool reads = decision.state != nullptr;  // a decision, or an input that is not taken, needs the kernel
    for (int k = 0; k < count; ++k) reads = reads || inputs[k].count != kMaxAbsTaken;
    if (!reads) return;
    MaxAbsLaunch launch{};
    launch.tensors = count;
    for (int k = 0; k < count; ++k) {
        const MaxAbsInput& input = inputs[k];
        launch.values[k] = input.values;
        launch.count[k] = input.count > 0 ? input.count : 0;
        launch.dtype[k] = input.dtype;
        launch.vectorised[k] = (reinterpret_cast<uintptr_t>(input.values) & 15u) == 0;
        launch.taken[k] = input.count == kMaxAbsTaken;
        const int unit_elements = max_abs_chunks::per_unit(launch.vectorised[k], input.dtype == DType::fp32 ? 4 : 2);
        launch.first_chunk[k + 1] = launch.first_chunk[k] + max_abs_chunks::chunks(launch.count[k], unit_elements);
    }
    launch.scratch = scratch;
    launch.decision = decision;
    // A block a chunk up to the scratch's cap; one at least, so that the last block writes the
    // results (0 for passes of empty tensors).
    const unsigned blocks = grid_for(launch.first_chunk[count], 1, static_cast<unsigned>(scratch.max_blocks));
    launch_kernel("max_abs_kernel", max_abs_kernel, blocks, max_abs_chunks::kThreads, 0, stream, launch, out);
}

}  // namespace mpt
