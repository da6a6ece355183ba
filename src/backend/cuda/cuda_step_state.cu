// See cuda_step_state.cuh.
#include "backend/cuda/cuda_step_state.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

// Every weight gradient is a sum of `rows` products |dZ| * |A| <= max|dZ| * max|A|; if that bound
// (with max|A| taken as at least 1) is finite in fp32, so is every gradient (CpuBackend's rule).
__global__ void decide_update_kernel(const float* max_abs_pairs, int layer_count, int64_t rows, TrainState* state) {
    start_after_preceding_kernel();
    for (int layer = 0; layer < layer_count; ++layer) {
        const double bound = static_cast<double>(rows) * max_abs_pairs[2 * layer] *
                             fmax(1.0, static_cast<double>(max_abs_pairs[2 * layer + 1]));
        if (!(bound < 3.0e38)) state->found_inf = 1;
    }
}

__global__ void finish_step_kernel(TrainState* state, const LossScalerConfig scaler, const double* metrics,
                                   double* committed_metrics) {
    start_after_preceding_kernel();
    TrainState value = *state;
    advance_loss_scaler(value, scaler);
    *state = value;
    if (metrics && committed_metrics)
        for (int i = 0; i < kMetricsCount; ++i) committed_metrics[i] = metrics[i];
}

}  // namespace

void run_decide_update(const float* max_abs_pairs, int layer_count, int64_t rows, TrainState* state,
                       cudaStream_t stream) {
    require(state != nullptr && (layer_count == 0 || max_abs_pairs != nullptr), MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: decide_update needs the bounds and the train state");
    if (layer_count <= 0) return;
    launch_kernel("decide_update_kernel", decide_update_kernel, 1, 1, 0, stream, max_abs_pairs, layer_count, rows,
                  state);
}

void run_finish_step(TrainState* state, const LossScalerConfig& scaler, const double* metrics,
                     double* committed_metrics, cudaStream_t stream) {
    require(state != nullptr, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: finish_step needs the train state");
    // In the scaler's kernel: the copy adds no launch (nor graph node) to a step.
    launch_kernel("finish_step_kernel", finish_step_kernel, 1, 1, 0, stream, state, scaler, metrics, committed_metrics);
}

}  // namespace mpt
