// The fused loss head on CUDA: activation, loss, scaled logits gradient and metrics in one kernel
// with the CPU reference's semantics (cpu_loss_head.cpp), one warp per row. Per-block partial sums
// are combined by the last block to finish, in a fixed order, so results are deterministic and the
// metrics and found_inf are updated on the device without a host round trip. The gradient's max |x|
// (LossHeadArgs::logits_grad_max_abs) is taken as it is written, the blocks' by atomicMax on bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace mpt {

// Device scratch for the cross-block reduction, preallocated by the backend.
struct LossHeadScratch {
    double* partial_loss;       // [kLossHeadMaxBlocks]
    long long* partial_correct;
    long long* partial_counted;
    unsigned* counter;          // zero between launches (the last block resets it)
    unsigned* gradient_largest;  // the blocks' max |logits gradient| as bits; zero between launches, as counter
};
constexpr int kLossHeadMaxBlocks = 256;

void validate_loss_head(const LossHeadArgs& args);
// `starts_step`: found_inf is cleared before this head's own check (begin_step folded into it; needs
// args.state), so it ends 1 for a non-finite loss and 0 otherwise.
void run_loss_head(const LossHeadArgs& args, const LossHeadScratch& scratch, cudaStream_t stream,
                   bool starts_step = false);

}  // namespace mpt
