// max |x| over a step's tensors on CUDA, for its finiteness proof (decide_update), in one kernel
// over all of them: NaN and Inf count as +Inf. The results are written to device
// memory, so no value ever travels to the host; the same launch can take the update decision on
// them (CudaBackend fuses a decide_update that reads exactly the maxima just computed).
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mpt {

// The kernel's own device memory: each tensor's maximum as bits, which the blocks raise with
// atomicMax, and the ticket counter that finds the last block (cuda_max_abs_cells.cuh). Both are zero
// between launches (the last block sets the maxima back, the last ticket wraps the counter); zeroed
// once when allocated. One backend's passes share it, and so do the ReLU backward's in-place kernels
// that take maxima (cuda_dense_backward_data.cuh), so they run one after another: on the compute
// lane, as the executor issues them.
struct MaxAbsScratch {
    unsigned* counter;  // in a 256-byte sector of its own, as the loss head's
    unsigned* maxima;   // [kMaxAbsInputs]
    int max_blocks;     // the grid's blocks at most
};
constexpr size_t max_abs_scratch_bytes() { return 256 + static_cast<size_t>(kMaxAbsInputs) * sizeof(unsigned); }

// decide_update taken by the same launch, once the maxima are known: its pairs are the first
// 2 * layer_count results. Nothing when state is null.
struct MaxAbsDecision {
    TrainState* state = nullptr;
    int layer_count = 0;
    int64_t rows = 0;
};

void validate_max_abs(const MaxAbsInput* inputs, int count, const float* out);
void run_max_abs(const MaxAbsInput* inputs, int count, float* out, const MaxAbsScratch& scratch,
                 const MaxAbsDecision& decision, cudaStream_t stream);

}  // namespace mpt
