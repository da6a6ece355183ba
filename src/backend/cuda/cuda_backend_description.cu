// CudaBackend::describe: mpt_context_describe's CUDA members. The switches as they are now (a refused
// graph capture turns dependent launch off, a device below 9.0 keeps it off and one below 8.0 the
// tensor-core paths, whatever the environment asked), the graphs' counts and the last refusal, and how many ops took
// each path: what a benchmark record needs to say what it measured, and a user to see why a step
// is not replayed from a graph.
#include "backend/cuda/cuda_backend.cuh"
#include "io/json_writer.h"

namespace mpt {

void CudaBackend::describe(JsonWriter& out) const {
    out.key("device_index").integer(device_);
    out.key("compute_capability")
        .string(std::to_string(compute_capability_ / 10) + "." + std::to_string(compute_capability_ % 10));
    out.key("multiprocessors").integer(multiprocessors_);

    out.key("switches").begin_object();
    out.key("graphs").boolean(graphs_enabled_);
    out.key("fused_epilogues").boolean(fused_epilogues_);
    out.key("split_k").boolean(gemm_->split_k());
    out.key("split_k_small_outputs").boolean(gemm_->split_k_small_outputs_only());
    out.key("gemm_autotune").boolean(gemm_->autotune());
    out.key("small_batch_forward").boolean(small_batch_forward_);
    out.key("small_batch_backward").boolean(small_batch_backward_data_);
    out.key("dependent_launch").boolean(dependent_launch_);
    out.key("grouped_sgd").boolean(grouped_sgd_);
    out.key("step_folds").boolean(step_folds_);
    out.key("relu_from_output").boolean(relu_from_output_);
    out.key("fused_sgd_three_blocks").boolean(fused_sgd_three_blocks_);
    out.key("fused_sgd_32_rows").boolean(fused_sgd_exact_rows_);
    out.key("bulk_copy_sgd").boolean(bulk_copy_sgd_);
    out.key("gradient_into_masters").boolean(gradient_into_masters_);
    out.key("head_layer_cluster").boolean(head_layer_cluster_);
    out.end_object();

    // The device's L2: its size and the largest persisting set-aside the device allows (0: none, below
    // compute capability 8.0 or under MIG).
    out.key("l2").begin_object();
    out.key("bytes").integer(l2_bytes_);
    out.key("set_aside_max").integer(l2_set_aside_max_);
    out.end_object();

    out.key("graphs").begin_object();
    out.key("captures").unsigned_integer(graphs_.captures());
    out.key("replays").unsigned_integer(graphs_.replays());
    out.key("refusals").unsigned_integer(graphs_.refusals());
    out.key("last_refusal").string(graphs_.last_refusal());
    // The host's part of a replayed step (replay_host_time.h), in nanoseconds: the task's issuing up
    // to its launch, and the launch itself (shortest: with room in the GPU's queue).
    out.key("replay_issue_ns_mean").integer(replay_host_time_.mean_issue_ns());
    out.key("launch_ns_shortest").integer(replay_host_time_.shortest_launch_ns());
    out.key("launch_ns_mean").integer(replay_host_time_.mean_launch_ns());
    out.end_object();

    const CudaOpPaths& ops = op_paths_;
    out.key("ops").begin_object();
    out.key("forward_fused").unsigned_integer(ops.forward_fused);
    out.key("forward_unfused").unsigned_integer(ops.forward_unfused);
    out.key("forward_small_batch").unsigned_integer(ops.forward_small_batch);
    out.key("backward_data_fused").unsigned_integer(ops.backward_data_fused);
    out.key("backward_data_unfused").unsigned_integer(ops.backward_data_unfused);
    out.key("backward_data_small_batch").unsigned_integer(ops.backward_data_small_batch);
    out.key("small_batch_split").unsigned_integer(ops.small_batch_split);
    out.key("head_layers_in_cluster").unsigned_integer(ops.head_layers_in_cluster);
    out.key("weight_gradient_fused").unsigned_integer(ops.weight_gradient_fused);
    out.key("weight_gradient_unfused").unsigned_integer(ops.weight_gradient_unfused);
    out.key("fused_sgd").unsigned_integer(ops.fused_sgd);
    out.key("clip_factor").unsigned_integer(ops.clip_factor);
    out.key("max_abs_deciding").unsigned_integer(ops.max_abs_deciding);
    out.key("updates_deciding").unsigned_integer(ops.updates_deciding);
    out.key("begin_steps_folded").unsigned_integer(ops.begin_steps_folded);
    out.key("dependent_launches").unsigned_integer(ops.dependent_launches);
    out.key("fused_sgd_grouped").unsigned_integer(ops.fused_sgd_grouped);
    out.key("backward_data_relu_from_output").unsigned_integer(ops.backward_data_relu_from_output);
    out.key("backward_data_max_abs").unsigned_integer(ops.backward_data_max_abs);
    out.key("fused_sgd_three_blocks").unsigned_integer(ops.fused_sgd_three_blocks);
    out.key("fused_sgd_32_rows").unsigned_integer(ops.fused_sgd_32_rows);
    out.key("fused_sgd_bulk_copy").unsigned_integer(ops.fused_sgd_bulk_copy);
    out.key("gradient_into_masters").unsigned_integer(ops.gradient_into_masters);
    out.key("steps_finished_by_update").unsigned_integer(ops.steps_finished_by_update);
    out.end_object();

    const CudaGemm& gemm = *gemm_;
    out.key("gemm").begin_object();
    out.key("refused_epilogue_plans").unsigned_integer(gemm.refused_epilogue_plans());
    out.key("refused_epilogue_runs").unsigned_integer(gemm.refused_epilogue_runs());
    out.key("last_refused_epilogue").string(gemm.last_refused_epilogue());
    out.key("autotuned_plans").unsigned_integer(gemm.timed_plans());
    out.key("retuned_plans").unsigned_integer(gemm.retuned_plans());
    // Whole nanoseconds: JsonWriter writes no floating-point numbers.
    out.key("autotune_saved_ns").integer(static_cast<int64_t>(gemm.autotune_saved_us() * 1000.0 + 0.5));
    out.key("last_untimed").string(gemm.last_untimed());
    out.key("plans_kept_whole_by_size").unsigned_integer(gemm.plans_kept_whole_by_size());
    out.end_object();
}

}  // namespace mpt
