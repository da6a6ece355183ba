// The CUDA backend (see backend.h for the contract and cuda_backend.h for its test hooks). Device
// memory comes from one cudaMalloc per arena; ops are issued on the scheduler's current lane's
// stream; compute-lane tasks are recorded and replayed as CUDA graphs (cuda_step_graph.cuh).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_batch_stager.cuh"
#include "backend/cuda/cuda_dense_backward_data.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_dense_update.cuh"
#include "backend/cuda/cuda_dropout.cuh"
#include "backend/cuda/cuda_epoch_order.cuh"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cuh"
#include "backend/cuda/cuda_gemm.cuh"
#include "backend/cuda/cuda_loss_head.cuh"
#include "backend/cuda/cuda_max_abs.cuh"
#include "backend/cuda/cuda_scheduler.cuh"
#include "backend/cuda/cuda_step_graph.cuh"
#include "backend/cuda/replay_host_time.h"

namespace mpt {

class CudaBackend final : public Backend, private CudaTaskHooks {
public:
    CudaBackend(int device, MemoryTracker* memory);
    ~CudaBackend() override;

    BackendKind kind() const override { return BackendKind::cuda; }
    std::string device_name() const override { return name_; }
    void describe(JsonWriter& out) const override;  // cuda_backend_description.cu
    // Values of MPTRAIN_CUDA_GRAPHS, MPTRAIN_CUDA_FUSED_EPILOGUES and MPTRAIN_CUDA_SPLIT_K it does not know.
    std::string setup_warning() const override;
    size_t storage_size(DType dtype) const override { return dtype == DType::fp32 ? 4 : 2; }
    DType preferred_compute_dtype() const override;
    size_t relu_mask_bytes(int64_t rows, int64_t features) const override;
    size_t gemm_workspace_bytes() const override;
    bool update_needs_gradient_scratch(const OptimizerConfig& optimizer, int64_t rows, const DenseUpdateShape* layers,
                                       int count) const override;
    void reserve_update_scratch(const DenseUpdateShape* layers, int count, int64_t rows, bool clipping) override;

    void* allocate(size_t bytes) override;
    void release(void* pointer) noexcept override;
    void* allocate_host(size_t bytes) override;
    void release_host(void* pointer) noexcept override;
    void copy_to_device(void* destination, const void* source, size_t bytes) override;
    void copy_to_host(void* destination, const void* source, size_t bytes) override;
    void fill_zero(void* destination, size_t bytes) override;
    void copy_to_host_async(void* host, const void* source, size_t bytes) override;
    void convert_from_fp32(void* destination, DType dtype, const float* source, int64_t count) override;
    void convert_to_fp32(float* destination, const void* source, DType dtype, int64_t count) override;

    Scheduler& scheduler() override { return *scheduler_; }

    void fill_order(int32_t* order, int64_t rows, bool shuffle, uint64_t seed) override;
    void gather_batch(const GatherArgs& args) override;
    void dense_forward(const DenseForwardArgs& args) override;
    void loss_head(const LossHeadArgs& args) override;
    bool dense_backward_data(const DenseBackwardDataArgs& args) override;
    void dropout(const DropoutArgs& args) override;
    void begin_step(TrainState* state) override;
    void max_abs(const MaxAbsInput* inputs, int count, float* out) override;
    void decide_update(const float* max_abs_pairs, int layer_count, int64_t rows, TrainState* state) override;
    void dense_update(const DenseUpdateArgs& args, const OptimizerConfig& optimizer) override;
    void clip_factor(const float* gradients, int64_t count, float clipnorm, TrainState* state) override;
    void average_weights(const float* masters, float* averages, int64_t count, float momentum,
                         const TrainState* state) override;
    void swap_values(float* first, float* second, int64_t count) override;
    void finish_step(TrainState* state, const LossScalerConfig& scaler, const double* metrics,
                     double* committed_metrics) override;

    // The backend's own device buffers: allocate()/release() that also charge the context's memory
    // tracker (arenas and resident datasets reserve their bytes themselves).
    void* allocate_scratch(size_t bytes);
    void release_scratch(void* pointer) noexcept;

    uint64_t allocation_count() const { return allocations_; }
    uint64_t graph_replays() const { return graphs_.replays(); }
    uint64_t graph_captures() const { return graphs_.captures(); }
    uint64_t graph_refusals() const { return graphs_.refusals(); }
    const std::string& last_graph_refusal() const { return graphs_.last_refusal(); }
    const ReplayHostTime& replay_host_time() const { return replay_host_time_; }
    const CudaGemm& gemm() const { return *gemm_; }
    void set_graphs(bool enabled);
    void set_fused_epilogues(bool enabled) { fused_epilogues_ = enabled; }
    bool fused_epilogues() const { return fused_epilogues_; }
    // On only where small_batch_forward_available() (mma.m16n8k16); returns whether it is on.
    bool set_small_batch_forward(bool enabled);
    // On only where small_batch_backward_data_available(); returns whether it is on.
    bool set_small_batch_backward_data(bool enabled);
    // On only where dependent_launch_runs_on_current_device() (cuda_launch.cuh); returns whether it is on.
    bool set_dependent_launch(bool enabled);
    bool dependent_launch() const { return dependent_launch_; }
    void set_grouped_sgd(bool enabled) { grouped_sgd_ = enabled; }
    void set_step_folds(bool enabled) { step_folds_ = enabled; }
    void set_head_layer_cluster(bool enabled);
    // 0 until the switch is first on.
    int head_layer_max_blocks() const { return head_layer_max_blocks_; }
    void refuse_fused_runs(bool refuse) { gemm_->set_refuse_fused_runs(refuse); }
    void break_captures(bool broken) { break_captures_ = broken; }
    const CudaOpPaths& op_paths() const { return op_paths_; }

private:
    enum class OpCode : uint8_t {
        gather = 1,
        dense_forward,
        loss_head,
        backward_data,
        dropout,
        begin_step,
        max_abs,
        decide_update,
        dense_update,
        clip_factor,
        average_weights,
        finish_step
    };
    // One operation of a recorded task, with the plan chosen when it was issued.
    struct RecordedOp {
        OpCode code;
        GatherArgs gather;
        DenseForwardArgs forward;
        DenseForwardPlan forward_plan;
        LossHeadArgs head;
        DenseBackwardDataArgs data;
        DenseBackwardDataPlan data_plan;
        // The maxima the executor was told this backward writes (its plan when issued): kept whatever
        // plan it runs on after a refusal (CudaBackend::take_promised_maxima).
        bool max_abs_promised;
        DropoutArgs dropout;
        DenseUpdateArgs update;
        DenseUpdatePlan update_plan;
        OptimizerConfig optimizer;
        LossScalerConfig scaler;
        float* scratch;
        TrainState* state;
        MaxAbsInput max_inputs[kMaxAbsInputs];
        const void* values;      // decide_update's bounds, clip_factor's gradients, average_weights' masters,
                                 // finish_step's running metrics
        int64_t count;           // max_abs inputs, decide_update layers, clip_factor gradients, averaged values
        int64_t rows;
        float* out;              // max_abs's maxima, average_weights' averages
        float clipnorm;
        float momentum;          // average_weights'
        double* committed_metrics;  // finish_step's
        // Set by fold_begin_step (recorded tasks only; not part of the signature, which decides them):
        bool folded_into_head;  // begin_step: a later loss head clears found_inf instead of a memset
        bool starts_step;       // loss_head: clears found_inf before its own check
    };

    // A backward whose plan no longer writes the maxima it promised when issued (planned again after
    // a refusal): a max_abs pass over its two arrays writes them instead.
    void take_promised_maxima(const RecordedOp& op, cudaStream_t stream);

    // CudaTaskHooks
    void begin_compute_task() override;
    void end_compute_task() override;
    void abandon_compute_task() noexcept override;
    void flush_recording() override;

    void activate() const;
    cudaStream_t stream() const { return scheduler_->current_stream(); }
    float* scratch_for(size_t bytes);
    // Chooses the plan (and scratch) of a dense op from its args, as things stand: the fused
    // epilogue unless turned off or refused, the ReLU masks written so far. Nothing for other ops.
    void plan(RecordedOp& op);
    // plan() marks a forward's ReLU mask written before the forward runs: a forward dropped or failed
    // unrun leaves the mask unwritten, and a later backward must not take the fused DRELU path on it.
    void forget_unwritten_mask(const RecordedOp& op) noexcept;
    // Issues `op` now (eagerly) or appends it to the task being recorded. Eagerly, an op whose
    // fused GEMM cuBLASLt refuses when it runs is planned again and run unfused.
    void issue(const RecordedOp& op);
    // Launches a task's graph (true); should the launch fail, the task runs eagerly, now and from now
    // on (false), its op paths counted as they were before the capture (`before_capture`, when the
    // graph was captured right before: the eager run counts them).
    bool launch_or_run_eagerly(cudaGraphExec_t exec, cudaStream_t compute, const CudaOpPaths* before_capture = nullptr);
    // Test hook (break_captures): makes the capture under way fail, as a call not permitted there would.
    static void break_capture(cudaStream_t compute);
    void execute(const RecordedOp& op, cudaStream_t stream);
    // A recorded begin_step whose first loss head follows it with only forward and dropout ops between
    // (none of which reads or writes found_inf) is folded into that head: one graph node fewer.
    void fold_begin_step();
    // Whether recorded_[index] is a max_abs op and recorded_[index + 1] the decide_update that reads
    // exactly its results: then both are one launch (execute_max_abs_deciding).
    bool decision_follows(size_t index) const;
    void execute_max_abs_deciding(const RecordedOp& max_abs, const RecordedOp& decision, cudaStream_t stream);
    // Whether the three ops are the last layer's forward, its loss head and the layer's input gradient
    // as head_layer_fusable takes them, with the head layer in a cluster on: then they are one launch.
    bool head_layer_fits(const RecordedOp& forward, const RecordedOp& head, const RecordedOp& data) const;
    // Whether the recorded ops [index, index + 2] are such three (execute_head_layer runs them).
    bool head_layer_follows(size_t index) const;
    // Whether `data` (a backward_data op about to be recorded) completes such three.
    bool head_layer_takes(const RecordedOp& data) const;
    void execute_head_layer(size_t index, cudaStream_t stream);
    // How many of the recorded ops from recorded_[index] on are fused SGD updates, independent of
    // each other (fused_sgd_updates_independent), that one launch can take (at most
    // kFusedSgdMaxLayers; 0 when recorded_[index] is none): with grouped SGD on, they are one
    // launch (execute_fused_sgd_layers), updated side by side.
    size_t fused_sgd_run(size_t index) const;
    // Whether recorded_[index] is a finish_step of the state the updates before it read: with grouped
    // SGD on, the last update launch takes it (no launch of its own).
    bool finish_follows_updates(size_t index) const;
    // Whether recorded_[index] is a max_abs pass with nothing to read (every input taken, or empty)
    // whose decide_update over at least one layer follows it (decision_follows), followed in turn by
    // a fused SGD update of the state it decides for: then the update's launch takes the decision
    // (and writes the empty inputs' 0s) and no pass runs.
    bool update_decides(size_t index) const;
    // The decision of such a pass (recorded_[index]) and its decide_update, for the update's launch.
    FusedSgdDecision update_decision(size_t index) const;
    // The `count` updates from recorded_[index] on, and the finish_step after them when `finish`;
    // taking the step's decision when `decision`.
    void execute_fused_sgd_layers(size_t index, size_t count, const RecordedOp* finish, cudaStream_t stream,
                                  const FusedSgdDecision* decision = nullptr);
    // execute, or false when cuBLASLt refused the op's fused plan at run time (to plan it again).
    bool execute_unless_refused(const RecordedOp& op, cudaStream_t stream);
    // Runs the recorded task; an op refused as in issue() is planned again with all that follow
    // it, unless `capturing` (the refusal then escapes to end_compute_task).
    void execute_recorded(cudaStream_t stream, bool capturing);
    // Throws what release() could not (it is noexcept), once.
    void rethrow_deferred_error();
    // Adds the op's arguments to signature_ (cuda_backend_signature.cu).
    void sign(const RecordedOp& op);

    int device_ = 0;
    MemoryTracker* memory_ = nullptr;  // the context's, when created by one
    int compute_capability_ = 0;
    int multiprocessors_ = 1;
    std::string name_;
    uint64_t allocations_ = 0;

    void* reduction_scratch_ = nullptr;  // loss-head and clip-factor partials, the kernels' block counters
    LossHeadScratch head_scratch_{};
    double* clip_partials_ = nullptr;    // [kClipFactorMaxBlocks] in reduction_scratch_
    MaxAbsScratch max_abs_scratch_{};    // in reduction_scratch_
    unsigned* finish_counter_ = nullptr;  // fused SGD's finish_step ticket (FusedSgdFinish), likewise
    float* scratch_ = nullptr;        // fp32 accumulators of the unfused fallback paths
    size_t scratch_bytes_ = 0;

    std::unique_ptr<CudaGemm> gemm_;
    std::unique_ptr<CudaEpochOrder> epoch_order_;
    std::unique_ptr<CudaBatchStager> stager_;  // streamed datasets only, created on first use
    std::unique_ptr<CudaScheduler> scheduler_;
    bool fused_epilogues_ = true;
    bool small_batch_forward_ = false;
    bool small_batch_backward_data_ = false;
    bool dependent_launch_ = false;
    bool grouped_sgd_ = false;
    bool step_folds_ = true;  // begin_step into the loss head, the update decision into the max pass
    bool relu_from_output_ = false;  // forwards write no ReLU mask; backwards take ReLU's derivative from outputs
    bool fused_sgd_three_blocks_ = false;         // the fused SGD kernel compiled for 3 blocks an SM
    bool fused_sgd_exact_rows_ = false;           // ... and for batches of exactly 32 rows
    bool bulk_copy_sgd_ = false;  // fused SGD's masters by bulk copies, its gradient on tensor cores (9.0+)
    FusedSgdBulkCopyDevice bulk_copy_device_;     // its compilations that run here (prepared under the switch)
    bool gradient_into_masters_ = false;          // plain SGD's larger updates as one GEMM into the masters
    bool head_layer_cluster_ = false;             // the last layer's forward and input gradient in its head's launch
    int head_layer_max_blocks_ = 0;  // the head layer's cluster size here (head_layer_cluster_capacity; 0: not asked)
    int64_t l2_bytes_ = 0;                        // the device's L2 (described)
    int64_t l2_set_aside_max_ = 0;                // the most of it a persisting set-aside may take (0: none)
    CudaOpPaths op_paths_;
    std::exception_ptr deferred_error_;  // from release()'s flush, for the next issue or task end

    // ReLU masks written by a fused forward: mask pointer -> (rows, features) it describes.
    struct MaskShape {
        int64_t rows;
        int64_t features;
    };
    std::unordered_map<const void*, MaskShape> masks_;
    std::unordered_map<const void*, size_t> allocation_bytes_;  // allocate()'s blocks, for release()

    bool graphs_enabled_ = true;
    bool recording_ = false;
    std::vector<RecordedOp> recorded_;
    TaskSignature signature_;
    StepGraphCache graphs_;
    std::chrono::steady_clock::time_point task_started_;  // the recorded task's begin_compute_task
    ReplayHostTime replay_host_time_;
    bool break_captures_ = false;
};

}  // namespace mpt
