// CudaBackend::sign: a recorded op's part of its compute task's signature (cuda_step_graph.cuh), every
// argument that decides the device work, field by field, so that equal signatures replay one graph.
#include "backend/cuda/cuda_backend.cuh"

namespace mpt {

namespace {

void put_workspace(TaskSignature& signature, const GemmWorkspace& workspace) {
    signature.put(workspace.data);
    signature.put(workspace.bytes);
}

}  // namespace

void CudaBackend::sign(const RecordedOp& op) {
    TaskSignature& s = signature_;
    s.put(op.code);
    switch (op.code) {
        case OpCode::gather: {
            const GatherArgs& a = op.gather;
            s.put(a.samples);
            s.put(a.samples_are_u8);
            s.put(a.scale);
            s.put(a.offset);
            s.put(a.feature_mean);
            s.put(a.feature_divisor);
            s.put(a.order);
            s.put(a.first);
            s.put(a.rows);
            s.put(a.features);
            s.put(a.padded_features);
            s.put(a.batch);
            s.put(a.batch_dtype);
            s.put(a.labels);
            s.put(a.batch_labels);
            s.put(a.targets);
            s.put(a.target_width);
            s.put(a.batch_targets);
            s.put(a.row_weights);
            s.put(a.batch_row_weights);
            return;
        }
        case OpCode::dense_forward: {
            const DenseForwardArgs& a = op.forward;
            s.put(a.input);
            s.put(a.weights);
            s.put(a.bias);
            s.put(a.output);
            s.put(a.relu_mask);
            s.put(a.rows);
            s.put(a.in_features);
            s.put(a.out_features);
            s.put(a.valid_out);
            s.put(a.activation);
            s.put(a.compute_dtype);
            s.put(a.bias_dtype);
            s.put(a.output_dtype);
            put_workspace(s, a.workspace);
            s.put(op.forward_plan.gemm);
            s.put(op.forward_plan.fused);
            s.put(op.forward_plan.writes_mask);
            s.put(op.forward_plan.small_batch);
            s.put(op.forward_plan.small_batch_split.splits);
            s.put(op.forward_plan.small_batch_split.k_per_block);
            s.put(op.scratch);
            return;
        }
        case OpCode::loss_head: {
            const LossHeadArgs& a = op.head;
            s.put(a.logits);
            s.put(a.labels);
            s.put(a.targets);
            s.put(a.probabilities);
            s.put(a.logits_grad);
            s.put(a.state);
            s.put(a.metrics);
            s.put(a.rows);
            s.put(a.width);
            s.put(a.classes);
            s.put(a.activation);
            s.put(a.loss);
            s.put(a.label_smoothing);
            s.put(a.huber_delta);
            s.put(a.class_weights);  // the kernel reads the weights themselves at run time
            s.put(a.row_weights);    // a batch buffer (or null): the values are the gather's
            s.put(a.logits_grad_dtype);
            s.put(a.mean_rows);
            s.put(a.continues_batch);
            s.put(a.logits_grad_max_abs);
            return;
        }
        case OpCode::backward_data: {
            const DenseBackwardDataArgs& a = op.data;
            s.put(a.output_grad);
            s.put(a.weights);
            s.put(a.input);
            s.put(a.relu_mask);
            s.put(a.input_grad);
            s.put(a.rows);
            s.put(a.in_features);
            s.put(a.out_features);
            s.put(a.input_activation);
            s.put(a.compute_dtype);
            s.put(a.input_grad_dtype);
            put_workspace(s, a.workspace);
            s.put(a.input_grad_max_abs);
            s.put(a.input_max_abs);
            s.put(op.data_plan.gemm);
            s.put(op.data_plan.fused);
            s.put(op.data_plan.reads_mask);
            s.put(op.data_plan.relu_from_output);
            s.put(op.data_plan.writes_max_abs);
            s.put(op.max_abs_promised);
            s.put(op.data_plan.small_batch);
            s.put(op.data_plan.small_batch_split.splits);
            s.put(op.data_plan.small_batch_split.k_per_block);
            s.put(op.scratch);
            return;
        }
        case OpCode::dropout: {
            const DropoutArgs& a = op.dropout;
            s.put(a.input);
            s.put(a.output);
            s.put(a.dtype);
            s.put(a.count);
            s.put(a.draw.seed);
            s.put(a.draw.layer);
            s.put(a.draw.threshold);
            s.put(a.draw.scale);
            s.put(a.state);
            s.put(a.first_index);
            return;
        }
        case OpCode::begin_step: s.put(op.state); return;
        case OpCode::max_abs:
            s.put(op.count);  // first: the inputs' bytes then read one way only
            for (int64_t k = 0; k < op.count; ++k) {
                s.put(op.max_inputs[k].values);
                s.put(op.max_inputs[k].dtype);
                s.put(op.max_inputs[k].count);
            }
            s.put(op.out);
            return;
        case OpCode::decide_update:
            s.put(op.values);
            s.put(op.count);
            s.put(op.rows);
            s.put(op.state);
            return;
        case OpCode::dense_update: {
            const DenseUpdateArgs& a = op.update;
            s.put(a.output_grad);
            s.put(a.input);
            s.put(a.weights);
            s.put(a.bias);
            s.put(a.low_weights);
            s.put(a.low_bias);
            s.put(a.weight_grad);
            s.put(a.bias_grad);
            for (int k = 0; k < kMaxOptimizerStates; ++k) {
                s.put(a.weight_state[k]);
                s.put(a.bias_state[k]);
            }
            s.put(a.rows);
            s.put(a.in_features);
            s.put(a.out_features);
            s.put(a.compute_dtype);
            s.put(a.state);
            put_workspace(s, a.workspace);
            s.put(a.part);
            s.put(a.gradient_factor);
            s.put(op.update_plan.fused_sgd);
            s.put(op.update_plan.fused_sgd_three_blocks);
            s.put(op.update_plan.fused_sgd_exact_rows);
            s.put(op.update_plan.fused_sgd_bulk_copy);
            s.put(op.update_plan.into_masters);
            s.put(op.update_plan.into_masters_plan.gemm);
            s.put(op.update_plan.into_masters_plan.bias_fused);
            s.put(op.update_plan.into_masters_plan.scalars);
            s.put(op.update_plan.into_masters_plan.bias_grad);
            s.put(op.update_plan.gradient.gemm);
            s.put(op.update_plan.gradient.fused);
            s.put(op.update_plan.weight_grad);
            s.put(op.update_plan.bias_grad);
            const OptimizerConfig& o = op.optimizer;
            s.put(o.kind);
            s.put(o.learning_rate);
            s.put(o.momentum);
            s.put(o.nesterov);
            s.put(o.beta1);
            s.put(o.beta2);
            s.put(o.rho);
            s.put(o.centered);
            s.put(o.epsilon);
            s.put(o.weight_decay);
            s.put(o.global_clipnorm);
            // The schedule, not a step's rate: kernels evaluate it from the step count on the device.
            s.put(o.schedule.kind);
            s.put(o.schedule.warmup_steps);
            s.put(o.schedule.decay_steps);
            s.put(o.schedule.decay_factor);
            return;
        }
        case OpCode::clip_factor:
            s.put(op.values);
            s.put(op.count);
            s.put(op.clipnorm);
            s.put(op.state);
            return;
        case OpCode::average_weights:
            s.put(op.values);
            s.put(op.out);
            s.put(op.count);
            s.put(op.momentum);
            s.put(op.state);
            return;
        case OpCode::finish_step: {
            s.put(op.state);
            s.put(op.values);
            s.put(op.committed_metrics);
            const LossScalerConfig& c = op.scaler;
            s.put(c.mode);
            s.put(c.initial_scale);
            s.put(c.growth_factor);
            s.put(c.backoff_factor);
            s.put(c.growth_interval);
            s.put(c.min_scale);
            s.put(c.max_scale);
            return;
        }
    }
}

}  // namespace mpt
