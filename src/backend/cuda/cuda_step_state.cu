// See cuda_step_state.cuh.
#include "backend/cuda/cuda_step_state.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

// The proof's rule is the CPU backend's (gradient_bounds_finite). A step whose max_abs pass computes
// exactly these pairs takes the decision in that pass's launch instead (CudaBackend::execute_recorded).
__global__ void decide_update_kernel(const float* max_abs_pairs, int layer_count, int64_t rows, TrainState* state) {
    start_after_preceding_kernel();
    if (!gradient_bounds_finite(max_abs_pairs, layer_count, rows)) state->found_inf = 1;
}

__global__ void finish_step_kernel(TrainState* state, const LossScalerConfig scaler, const double* metrics,
                                   double* committed_metrics) {
    start_after_preceding_kernel();
    finish_step_on_device(state, scaler, metrics, committed_metrics);
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
