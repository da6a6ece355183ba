// The small TrainState transitions of a step on CUDA, each one thread of one block reading and
// writing device memory: the update decision (decide_update) and the loss scaler's advance
// (finish_step, which also keeps the metrics as the step leaves them). Their arithmetic is the CPU
// backend's, on the same inline functions.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mpt {

void run_decide_update(const float* max_abs_pairs, int layer_count, int64_t rows, TrainState* state,
                       cudaStream_t stream);
void run_finish_step(TrainState* state, const LossScalerConfig& scaler, const double* metrics,
                     double* committed_metrics, cudaStream_t stream);

#if defined(__CUDACC__) || defined(MPT_CUDA_EMULATION)  // (emulation: tests/cuda_emulation)
// finish_step's work, by one thread: for its kernel, and for the last block of a step's last update
// launch that takes it (cuda_fused_sgd_launch.cuh).
__device__ __forceinline__ void finish_step_on_device(TrainState* state, const LossScalerConfig& scaler,
                                                      const double* metrics, double* committed_metrics) {
    TrainState value = *state;
    advance_loss_scaler(value, scaler);
    *state = value;
    if (metrics && committed_metrics)
        for (int i = 0; i < kMetricsCount; ++i) committed_metrics[i] = metrics[i];
}
#endif

}  // namespace mpt
