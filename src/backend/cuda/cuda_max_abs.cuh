// max |x| over a step's tensors on CUDA, for its finiteness proof (decide_update), in one kernel
// (blockIdx.y picks the tensor): NaN and Inf count as +Inf. The results are written to device
// memory, so no value ever travels to the host; the same launch can take the update decision on
// them (CudaBackend fuses a decide_update that reads exactly the maxima just computed).
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mpt {

// The kernel's own device memory: one partial maximum per block and tensor, and the ticket counter
// that finds the last block (zero between launches: the last ticket wraps it). One backend's passes
// share it, so they run one after another: on the compute lane, as the executor issues them.
struct MaxAbsScratch {
    unsigned* counter;   // in a 256-byte sector of its own, as the loss head's
    unsigned* partials;  // [kMaxAbsInputs * max_blocks]
    int max_blocks;      // blocks per tensor at most
};
constexpr size_t max_abs_scratch_bytes(int max_blocks) {
    return 256 + static_cast<size_t>(kMaxAbsInputs) * static_cast<size_t>(max_blocks) * sizeof(unsigned);
}

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
