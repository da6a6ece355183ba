// CudaBackend's compute tasks (cuda_backend.cuh): the ops a task records, folded where a small op
// can ride in its neighbour's launch (begin_step in the loss head, the update decision in the max
// pass, or in the first update where the pass has nothing to read, a step's fused SGD updates in one
// launch), then captured as a CUDA graph and replayed for every later task of the same signature, or
// run eagerly where a graph is refused or not worth it.
#include <chrono>
#include <exception>
#include <string>

#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_head_layer.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_max_abs.cuh"

namespace mpt {

namespace {

constexpr size_t kMinGraphOps = 4;  // shorter tasks (a lone gather) are not worth a graph

}  // namespace

void CudaBackend::fold_begin_step() {
    for (size_t begin = 0; begin < recorded_.size(); ++begin) {
        if (recorded_[begin].code != OpCode::begin_step) continue;
        for (size_t index = begin + 1; index < recorded_.size(); ++index) {
            RecordedOp& op = recorded_[index];
            if (op.code == OpCode::loss_head) {
                if (op.head.state == recorded_[begin].state) {
                    ++op_paths_.begin_steps_folded;
                    recorded_[begin].folded_into_head = true;
                    op.starts_step = true;
                }
                break;
            }
            if (op.code != OpCode::dense_forward && op.code != OpCode::dropout) break;
        }
    }
}

bool CudaBackend::decision_follows(size_t index) const {
    if (index + 1 >= recorded_.size()) return false;
    const RecordedOp& max_abs = recorded_[index];
    const RecordedOp& decision = recorded_[index + 1];
    return max_abs.code == OpCode::max_abs && decision.code == OpCode::decide_update &&
           decision.values == max_abs.out && decision.count >= 0 && 2 * decision.count <= max_abs.count;
}

void CudaBackend::execute_max_abs_deciding(const RecordedOp& max_abs, const RecordedOp& decision, cudaStream_t stream) {
    const DependentLaunchScope launches(dependent_launch_ ? &op_paths_.dependent_launches : nullptr);
    MaxAbsDecision decide;
    decide.state = decision.state;
    decide.layer_count = static_cast<int>(decision.count);
    decide.rows = decision.rows;
    run_max_abs(max_abs.max_inputs, static_cast<int>(max_abs.count), max_abs.out, max_abs_scratch_, decide, stream);
    ++op_paths_.max_abs_deciding;
}

bool CudaBackend::head_layer_fits(const RecordedOp& forward, const RecordedOp& head, const RecordedOp& data) const {
    return head_layer_cluster_ && forward.code == OpCode::dense_forward && head.code == OpCode::loss_head &&
           data.code == OpCode::backward_data &&
           head_layer_fusable(forward.forward, head.head, data.data, head_layer_max_blocks_);
}

bool CudaBackend::head_layer_follows(size_t index) const {
    return index + 2 < recorded_.size() &&
           head_layer_fits(recorded_[index], recorded_[index + 1], recorded_[index + 2]);
}

bool CudaBackend::head_layer_takes(const RecordedOp& data) const {
    return recording_ && recorded_.size() >= 2 &&
           head_layer_fits(recorded_[recorded_.size() - 2], recorded_.back(), data);
}

void CudaBackend::execute_head_layer(size_t index, cudaStream_t stream) {
    const DependentLaunchScope launches(dependent_launch_ ? &op_paths_.dependent_launches : nullptr);
    const RecordedOp& head = recorded_[index + 1];
    const RecordedOp& data = recorded_[index + 2];
    run_head_layer(recorded_[index].forward, head.head, data.data, data.data_plan.reads_mask, data.max_abs_promised,
                   head.starts_step, stream);
    ++op_paths_.head_layers_in_cluster;
}

size_t CudaBackend::fused_sgd_run(size_t index) const {
    size_t count = 0;
    while (index + count < recorded_.size() && count < static_cast<size_t>(kFusedSgdMaxLayers)) {
        const RecordedOp& op = recorded_[index + count];
        if (op.code != OpCode::dense_update || !op.update_plan.fused_sgd) break;
        bool independent = true;
        for (size_t k = index; k < index + count; ++k)
            independent = independent && fused_sgd_updates_independent(recorded_[k].update, op.update);
        if (!independent) break;
        ++count;
    }
    return count;
}

bool CudaBackend::finish_follows_updates(size_t index) const {
    return index > 0 && index < recorded_.size() && recorded_[index].code == OpCode::finish_step &&
           recorded_[index - 1].code == OpCode::dense_update &&
           recorded_[index].state == recorded_[index - 1].update.state;
}

bool CudaBackend::update_decides(size_t index) const {
    if (!decision_follows(index) || index + 2 >= recorded_.size()) return false;
    const RecordedOp& max_abs = recorded_[index];
    const RecordedOp& decision = recorded_[index + 1];
    const RecordedOp& update = recorded_[index + 2];
    for (int64_t k = 0; k < max_abs.count; ++k)
        if (max_abs.max_inputs[k].count > 0) return false;  // a tensor to read: the pass decides
    return decision.count > 0 && update.code == OpCode::dense_update && update.update_plan.fused_sgd &&
           update.update.state == decision.state;
}

FusedSgdDecision CudaBackend::update_decision(size_t index) const {
    const RecordedOp& max_abs = recorded_[index];
    const RecordedOp& decision = recorded_[index + 1];
    FusedSgdDecision decide;
    decide.max_abs_pairs = max_abs.out;  // decision.values (decision_follows)
    decide.layer_count = static_cast<int>(decision.count);
    decide.rows = decision.rows;
    decide.state = decision.state;
    for (int64_t k = 0; k < max_abs.count; ++k)
        if (max_abs.max_inputs[k].count != kMaxAbsTaken) decide.empty_entries |= 1u << k;
    return decide;
}

void CudaBackend::execute_fused_sgd_layers(size_t index, size_t count, const RecordedOp* finish, cudaStream_t stream,
                                           const FusedSgdDecision* decision) {
    const DependentLaunchScope launches(dependent_launch_ ? &op_paths_.dependent_launches : nullptr);
    FusedSgdFinish finishing;
    if (finish) {
        finishing.state = finish->state;
        finishing.scaler = finish->scaler;
        finishing.metrics = static_cast<const double*>(finish->values);
        finishing.committed_metrics = finish->committed_metrics;
        finishing.counter = finish_counter_;
        ++op_paths_.steps_finished_by_update;
    }
    const DenseUpdateArgs* layers[kFusedSgdMaxLayers];
    const OptimizerConfig* optimizers[kFusedSgdMaxLayers];
    // The compilations the layers' plans chose: the kernel for 32 rows wherever one was planned so, as
    // the launch takes it only for the layers it applies to (which plan() chose it for alike); the
    // bulk-copy kernel layer by layer, as planned.
    FusedSgdKernelChoice choice;
    for (size_t k = 0; k < count; ++k) {
        layers[k] = &recorded_[index + k].update;
        optimizers[k] = &recorded_[index + k].optimizer;
        choice.three_blocks = choice.three_blocks || recorded_[index + k].update_plan.fused_sgd_three_blocks;
        choice.exact_rows = choice.exact_rows || recorded_[index + k].update_plan.fused_sgd_exact_rows;
        if (recorded_[index + k].update_plan.fused_sgd_bulk_copy) choice.bulk_copy_layers |= 1u << k;
    }
    op_paths_.fused_sgd_grouped += static_cast<uint64_t>(run_fused_sgd_layers(
        layers, optimizers, static_cast<int>(count), finish ? &finishing : nullptr, choice, stream, decision));
    if (decision) ++op_paths_.updates_deciding;
}

// ---- recording and graphs ----------------------------------------------------------------------

void CudaBackend::begin_compute_task() {
    task_started_ = std::chrono::steady_clock::now();
    recorded_.clear();
    recording_ = graphs_enabled_;
}

// Whatever plan the op had last: a replacement plan that failed to get its scratch no longer says it
// writes the mask, but the entry of the plan before it may still stand.
void CudaBackend::forget_unwritten_mask(const RecordedOp& op) noexcept {
    if (op.code == OpCode::dense_forward && op.forward.relu_mask) masks_.erase(op.forward.relu_mask);
}

void CudaBackend::abandon_compute_task() noexcept {
    recording_ = false;
    // The trainer always runs a forward before its backward; direct users of the backend may not.
    for (const RecordedOp& op : recorded_) forget_unwritten_mask(op);
    recorded_.clear();
}

void CudaBackend::execute_recorded(cudaStream_t stream, bool capturing) {
    // After a refusal, this op and every later one are planned again, each right before it runs: a
    // forward that no longer writes its ReLU mask changes its backward's plan, and a scratch grown
    // by one op's new plan is freed only after the ops before it ran (none still holds the old
    // one). The ops before the refused one have run as planned.
    if (step_folds_) fold_begin_step();
    bool planning_again = false;
    for (size_t index = 0; index < recorded_.size(); ++index) {
        // (Not after a refusal, as below: the update is planned again before it runs.)
        if (step_folds_ && !planning_again && update_decides(index)) {  // fused SGD: no cuBLASLt plan
            const FusedSgdDecision decision = update_decision(index);
            const size_t first = index + 2;
            size_t layers = grouped_sgd_ ? fused_sgd_run(first) : 1;
            // (The updates of another state, which a direct user of the backend may group, not with it.)
            for (size_t k = 1; k < layers; ++k)
                if (recorded_[first + k].update.state != decision.state) layers = k;
            const bool finishes = grouped_sgd_ && finish_follows_updates(first + layers);
            execute_fused_sgd_layers(first, layers, finishes ? &recorded_[first + layers] : nullptr, stream, &decision);
            index = first + layers - 1 + (finishes ? 1 : 0);
            continue;
        }
        if (step_folds_ && decision_follows(index)) {  // neither op is planned, nor refused
            execute_max_abs_deciding(recorded_[index], recorded_[index + 1], stream);
            ++index;
            continue;
        }
        // (Not after a refusal: the ops from there on are planned again one by one, and a forward
        // planned again may no longer write the mask its backward's plan reads.)
        if (!planning_again && head_layer_follows(index)) {  // no cuBLASLt plan to refuse
            execute_head_layer(index, stream);
            index += 2;
            continue;
        }
        if (grouped_sgd_ && !planning_again) {
            const size_t layers = fused_sgd_run(index);
            const bool finishes = layers > 0 && finish_follows_updates(index + layers);
            if (layers > 1 || finishes) {  // never refused: no cuBLASLt plan
                execute_fused_sgd_layers(index, layers, finishes ? &recorded_[index + layers] : nullptr, stream);
                index += layers - 1 + (finishes ? 1 : 0);
                continue;
            }
        }
        if (planning_again) plan(recorded_[index]);
        for (;;) {
            try {
                execute(recorded_[index], stream);
                break;
            } catch (const FusedGemmRefused&) {
                // Under capture nothing may allocate (a grown scratch would): end_compute_task
                // gives up the capture and runs the task eagerly, which comes back here.
                if (capturing) throw;
                planning_again = true;
                plan(recorded_[index]);
            }
        }
    }
}

void CudaBackend::flush_recording() {
    if (!recording_) return;
    recording_ = false;  // the rest of the task runs eagerly
    activate();
    execute_recorded(scheduler_->stream(Lane::compute), false);
    recorded_.clear();
}

void CudaBackend::end_compute_task() {
    rethrow_deferred_error();
    if (!recording_) return;  // graphs off, or flushed: everything is issued already
    recording_ = false;
    activate();
    const cudaStream_t compute = scheduler_->stream(Lane::compute);
    if (recorded_.size() < kMinGraphOps) {
        execute_recorded(compute, false);
        return;
    }
    signature_.clear();
    signature_.put(dependent_launch_);   // the graph's kernel edges differ with it
    signature_.put(grouped_sgd_);        // and its update kernels with this
    signature_.put(step_folds_);         // and its nodes with this
    signature_.put(head_layer_cluster_);  // and its last layer's launches with this
    for (const RecordedOp& op : recorded_) sign(op);

    cudaGraphExec_t exec = nullptr;
    switch (graphs_.lookup(signature_, exec)) {
        case StepGraphCache::Action::replay: {
            const auto launching = std::chrono::steady_clock::now();
            if (!launch_or_run_eagerly(exec, compute)) return;
            graphs_.count_replay();
            const auto nanoseconds = [](std::chrono::steady_clock::duration span) {
                return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(span).count());
            };
            replay_host_time_.add(nanoseconds(launching - task_started_),
                                  nanoseconds(std::chrono::steady_clock::now() - launching));
            return;
        }
        case StepGraphCache::Action::run_eagerly:
            execute_recorded(compute, false);
            return;
        case StepGraphCache::Action::capture:
            break;
    }

    // Second sighting: capture the task into a graph, then launch it.
    const cudaError_t began = cudaStreamBeginCapture(compute, cudaStreamCaptureModeThreadLocal);
    if (began != cudaSuccess) {
        cudaGetLastError();
        graphs_.refuse(signature_, std::string("cudaStreamBeginCapture: ") + cudaGetErrorName(began));
        execute_recorded(compute, false);
        return;
    }
    // The op paths a run of the task takes are counted once a run (not per replay): should the capture
    // be refused, or its graph's launch fail, the eager run after it counts them instead.
    const CudaOpPaths before_capture = op_paths_;
    // Whatever is thrown, the capture must end: a stream left capturing fails every later call.
    std::string issue_failure;
    bool gemm_refused = false;  // cuBLASLt's refusal of a fused plan: nothing the launches did
    try {
        if (break_captures_) break_capture(compute);
        execute_recorded(compute, true);
    } catch (const FusedGemmRefused& error) {
        issue_failure = error.what();
        gemm_refused = true;
    } catch (const std::exception& error) {
        issue_failure = error.what();
    } catch (...) {
        issue_failure = "an unknown exception";
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(compute, &graph);
    cudaGraphExec_t captured = nullptr;
    cudaError_t instantiated = cudaErrorUnknown;
    if (issue_failure.empty() && ended == cudaSuccess && graph)
        instantiated = cudaGraphInstantiate(&captured, graph, 0);
    if (graph) discard_cuda_error(cudaGraphDestroy(graph));
    if (instantiated != cudaSuccess) {
        // Not capturable here (or a real fault, which the eager run below reports): run it eagerly,
        // now and from now on. The reason is kept for the tests and the device check.
        cudaGetLastError();
        std::string why = !issue_failure.empty() ? "issuing under capture: " + issue_failure
                          : ended != cudaSuccess
                              ? std::string("cudaStreamEndCapture: ") + cudaGetErrorName(ended)
                              : std::string("cudaGraphInstantiate: ") + cudaGetErrorName(instantiated);
        // Dependent launch is worth less than the graphs: a capture it may have broken (some devices
        // refuse its attribute under capture, at the launch or at the capture's end) turns it off
        // before the task runs again eagerly, and the task's next sightings, a new signature
        // without it, are captured without it. The refusal stays counted.
        if (dependent_launch_ && !gemm_refused) {
            dependent_launch_ = false;
            why += " (dependent launch turned off)";
        }
        graphs_.refuse(signature_, why);
        op_paths_ = before_capture;
        execute_recorded(compute, false);
        return;
    }
    graphs_.store(signature_, captured);
    launch_or_run_eagerly(captured, compute, &before_capture);
}

bool CudaBackend::launch_or_run_eagerly(cudaGraphExec_t exec, cudaStream_t compute, const CudaOpPaths* before_capture) {
    const cudaError_t launched = cudaGraphLaunch(exec, compute);
    if (launched == cudaSuccess) return true;
    // Nothing of the task ran. The graph is not launched again: the task runs eagerly now and from
    // now on, and a real fault (a sticky error) is reported by that run. Dependent launch, which
    // may be what the launch refused, is turned off as after a refused capture.
    cudaGetLastError();
    std::string why = std::string("cudaGraphLaunch: ") + cudaGetErrorName(launched);
    if (dependent_launch_) {
        dependent_launch_ = false;
        why += " (dependent launch turned off)";
    }
    graphs_.refuse(signature_, why);
    if (before_capture) op_paths_ = *before_capture;
    execute_recorded(compute, false);
    return false;
}

void CudaBackend::break_capture(cudaStream_t compute) {
    // Synchronising a capturing stream is not permitted: the call fails and invalidates the capture.
    MPT_CUDA_CHECK(cudaStreamSynchronize(compute));
}

}  // namespace mpt
