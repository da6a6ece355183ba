// Test and debug hooks of the CUDA backend, callable from host-only code (no CUDA headers here).
// The backend itself is created through create_cuda_backend() in backend/backend.h. These exist
// only in builds with the CUDA backend (MPTRAIN_WITH_CUDA); each throws
// Error(MPT_STATUS_INVALID_ARGUMENT) when `backend` is not a CUDA backend.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace mpt {

// Device and pinned host allocations made so far (allocate(), allocate_host() and the backend's own
// scratch).
uint64_t cuda_backend_allocation_count(const Backend& backend);
// Compute tasks replayed from a captured CUDA graph so far, and graphs captured.
uint64_t cuda_backend_graph_replays(const Backend& backend);
uint64_t cuda_backend_graph_captures(const Backend& backend);
// Tasks whose capture failed (they run eagerly from then on), and the last failure's reason.
uint64_t cuda_backend_graph_refusals(const Backend& backend);
std::string cuda_backend_last_graph_refusal(const Backend& backend);
// cuBLASLt plans with a fused epilogue that were refused, by its heuristic or when they ran (the
// op then runs the GEMM and its own epilogue kernel: right numbers, slower), and the last one's
// key and status.
uint64_t cuda_backend_refused_epilogue_plans(const Backend& backend);
std::string cuda_backend_last_refused_epilogue(const Backend& backend);
// Of those, the ones refused only when they ran (the op was planned again and run unfused).
uint64_t cuda_backend_refused_epilogue_runs(const Backend& backend);
// Tests: every fused-epilogue GEMM fails when it runs, as if cuBLASLt returned NOT_SUPPORTED then.
void cuda_backend_refuse_fused_runs(Backend& backend, bool refuse);
// Which path the dense ops were planned on, counted per op issued (an op planned again after a
// refusal counts twice, and so do the ops after it in its task): the GEMM with its fused epilogue, or
// the GEMM and the op's own epilogue kernel; the update as the fused SGD kernel, or through the
// weight-gradient GEMM. The counts noted "per run" are taken as a recorded task runs (its first
// sighting, eagerly, and its capture; a replay counts none, and a refused capture's pass none beside
// the eager run after it).
struct CudaOpPaths {
    uint64_t forward_fused = 0, forward_unfused = 0;
    // fused: a GEMM writing dZ_prev itself (DRELU with the mask, none for a linear layer, or none then
    // the ReLU derivative from A_prev in place); unfused: a GEMM into fp32 scratch, then a kernel.
    uint64_t backward_data_fused = 0, backward_data_unfused = 0;
    uint64_t weight_gradient_fused = 0, weight_gradient_unfused = 0;
    uint64_t fused_sgd = 0;
    uint64_t clip_factor = 0;  // clip_factor ops issued (clipped steps)
    uint64_t max_abs_deciding = 0;    // max_abs passes that took the decide_update after them in their launch
    uint64_t begin_steps_folded = 0;  // begin_steps whose found_inf reset a later loss head did (per run of
                                      // a recorded task: its first sighting and its capture, not replays)
    uint64_t dependent_launches = 0;  // the backend's kernels launched with programmatic dependent launch
    uint64_t fused_sgd_grouped = 0;   // fused SGD updates run in a launch with other layers' (per run of a
                                      // recorded task, as begin_steps_folded)
    uint64_t steps_finished_by_update = 0;  // finish_steps taken by the last update launch (likewise)
    uint64_t backward_data_relu_from_output = 0;  // input gradients whose ReLU derivative came from the
                                                  // previous layer's output, not a mask (planned)
    uint64_t backward_data_max_abs = 0;           // input gradients that also wrote the step's maxima of
                                                  // dZ_prev and A_prev for its finiteness proof: from the
                                                  // outputs, or on the small-batch kernel (planned)
    uint64_t fused_sgd_three_blocks = 0;          // fused SGD updates planned with the 3-blocks-an-SM kernel
    uint64_t fused_sgd_32_rows = 0;               // fused SGD updates planned with the kernel for 32 rows
    uint64_t fused_sgd_bulk_copy = 0;             // fused SGD updates planned with the bulk-copy kernel
    uint64_t gradient_into_masters = 0;           // updates planned as one GEMM into the masters (planned;
                                                  // counted as no weight-gradient path)
    uint64_t forward_small_batch = 0;             // forwards planned on the small-batch kernel (of the fused)
    uint64_t backward_data_small_batch = 0;       // input gradients planned on the small-batch kernel (likewise)
    uint64_t small_batch_split = 0;               // of those two, planned with K split across a cluster
    // Last layers' forward and input gradient run with their loss head in one cluster launch (per run
    // of a recorded task, as begin_steps_folded). The forward and the backward stay counted on the
    // paths they were planned on when issued.
    uint64_t head_layers_in_cluster = 0;
    // Decisions taken by a step's first update launch (fused SGD), its max_abs pass left out because
    // every maximum was taken as its tensor was written or its tensor is empty (per run of a recorded
    // task, likewise).
    uint64_t updates_deciding = 0;
};
CudaOpPaths cuda_backend_op_paths(const Backend& backend);
// Graph capture of repeated compute tasks (default on; MPTRAIN_CUDA_GRAPHS=0 turns it off).
void cuda_backend_set_graphs(Backend& backend, bool enabled);
// Every capture from now on fails as a call not permitted during capture would (a
// cudaStreamSynchronize of the capturing stream), so that the refusal path runs on a GPU.
void cuda_backend_break_captures(Backend& backend, bool broken);
// The fused paths: cuBLASLt's epilogues and the fused SGD kernel (default on;
// MPTRAIN_CUDA_FUSED_EPILOGUES=0 turns them off); off forces the unfused fallback paths.
void cuda_backend_set_fused_epilogues(Backend& backend, bool enabled);
bool cuda_backend_fused_epilogues(const Backend& backend);
// Forward layers of at most 64 rows as one tensor-core kernel each (cuda_small_batch_forward.cuh;
// default off until a GPU has measured it; MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 turns it on). Ignored
// below compute capability 8.0; returns whether it is now on.
bool cuda_backend_set_small_batch_forward(Backend& backend, bool enabled);
// A recorded step's last layer (linear, fp32 logits, at most 32 padded outputs, 16-bit, its inputs a
// multiple of 8 and, without clusters, at most 128) at batches of at most 64 rows runs its forward, its
// loss head and its input gradient as one launch, K split across a thread-block cluster
// (cuda_head_layer.cuh), where none of the buffers one of them writes shares bytes with another's;
// default off until a GPU has measured it (MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 turns it on).
void cuda_backend_set_head_layer_cluster(Backend& backend, bool enabled);
// The most blocks the head layer's cluster may have on this device (head_layer_cluster_capacity: 8 with
// clusters, else 1), asked when the switch is first turned on (0 before).
int cuda_backend_head_layer_max_blocks(const Backend& backend);
// The input gradients of at most 64 rows likewise (cuda_small_batch_backward_data.cuh;
// MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1).
bool cuda_backend_set_small_batch_backward_data(Backend& backend, bool enabled);
// The backend's kernels launched with programmatic dependent launch, each one's launch overlapping
// the kernel before it (cuda_launch.cuh; default off: 0.98x on an H200 at batch 32, under the 2%
// that would make it one; MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 turns it on). Ignored below compute
// capability 9.0 or where the build has no code for 9.0; returns whether it is now on.
bool cuda_backend_set_dependent_launch(Backend& backend, bool enabled);
// A recorded task's consecutive fused SGD updates (the layers of a plain-SGD step of at most 64
// rows) as one launch, the layers updated side by side instead of each waiting for the one before
// it to drain (default off: 0.99x on an H200 at batch 32; MPTRAIN_CUDA_GROUPED_SGD=1 turns it on);
// the last of those launches also takes the finish_step right after it (one graph node fewer). The
// same arithmetic, bit for bit.
void cuda_backend_set_grouped_sgd(Backend& backend, bool enabled);
// A recorded step's begin_step folded into its loss head and its update decision into its max pass
// (default on; MPTRAIN_CUDA_STEP_FOLDS=0 turns both off): two graph nodes fewer, the same numbers.
void cuda_backend_set_step_folds(Backend& backend, bool enabled);
// Whether it is on now: a refused graph capture or launch turns it off (it may be what broke it),
// unless cuBLASLt's refusal of a fused plan is what refused the capture.
bool cuda_backend_dependent_launch(const Backend& backend);
// cuBLASLt algorithms chosen by timing (MPTRAIN_CUDA_GEMM_AUTOTUNE=1; cuda_gemm_autotune.cuh): plans
// timed, those where another than the heuristic's first won, the microseconds the winners saved
// (one run of each plan, summed), and why the last plan with several candidates was not timed.
struct CudaGemmAutotune {
    bool enabled = false;
    uint64_t timed_plans = 0, retuned_plans = 0;
    double saved_us = 0.0;
    std::string last_untimed;
};
CudaGemmAutotune cuda_backend_gemm_autotune(const Backend& backend);
// GEMM plans that MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 kept whole along K (gemm_split_k_rule.h: outputs
// with a tile per multiprocessor or more); 0 without it.
uint64_t cuda_backend_plans_kept_whole_by_size(const Backend& backend);

}  // namespace mpt
