// See executor.h. Phases of a training step with L layers (layer i is 0-based):
//   forward of layer i: phase i + 1; loss head: phase L + 1; backward of layer i: phase 2L + 1 - i.
// A buffer is live from the phase that writes it to the last phase that reads it, and buffers whose
// lives do not overlap share bytes in the step arena.
#include "nn/executor.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace mpt {

Executor::Executor(Model& model, const PrecisionPolicy& policy, ExecutionMode mode, LossKind loss,
                   const OptimizerConfig& optimizer, const LossScalerConfig& scaler)
    : model_(model),
      backend_(model.context()->backend()),
      policy_(policy),
      mode_(mode),
      loss_(loss),
      optimizer_(optimizer),
      scaler_(scaler) {
    model_.build();
    layer_dtypes_ = layer_compute_dtypes(model_, policy_);
    classes_ = model_.layers().back().units;
    output_width_ = model_.layers().back().padded_units;
    plan_persistent();
}

void Executor::plan_persistent() {
    const int64_t parameters = model_.parameter_block_elements();
    bool any_low = false;
    for (DType dtype : layer_dtypes_) any_low |= dtype != DType::fp32;
    low_element_bytes_ = backend_.storage_size(DType::bf16);
    const bool training = mode_ == ExecutionMode::training;
    const int state_arrays = training ? optimizer_state_count(optimizer_) : 0;

    ArenaPlan plan;
    const int low_id = any_low ? plan.add(static_cast<size_t>(parameters) * low_element_bytes_, 0, ArenaPlan::kAlways) : -1;
    const int gradient_id = training ? plan.add(static_cast<size_t>(parameters) * sizeof(float), 0, ArenaPlan::kAlways) : -1;
    int state_ids[2] = {-1, -1};
    for (int s = 0; s < state_arrays; ++s)
        state_ids[s] = plan.add(static_cast<size_t>(parameters) * sizeof(float), 0, ArenaPlan::kAlways);
    const int train_state_id = plan.add(sizeof(TrainState), 0, ArenaPlan::kAlways);
    const int metrics_id = plan.add(kMetricsCount * sizeof(double), 0, ArenaPlan::kAlways);
    plan.solve();
    persistent_planned_ = plan.total_bytes();
    persistent_arena_ = Arena(backend_, model_.context()->memory(), plan.total_bytes());

    auto pointer = [&](int id) { return id < 0 ? nullptr : persistent_arena_.at<char>(plan.offset(id)); };
    low_copies_ = pointer(low_id);
    gradients_ = reinterpret_cast<float*>(pointer(gradient_id));
    for (int s = 0; s < 2; ++s) optimizer_states_[s] = reinterpret_cast<float*>(pointer(state_ids[s]));
    state_ = reinterpret_cast<TrainState*>(pointer(train_state_id));
    metrics_ = reinterpret_cast<double*>(pointer(metrics_id));
    write_state(initial_train_state(scaler_));

    if (!training) return;
    float* masters = model_.masters();
    for (size_t i = 0; i < model_.layers().size(); ++i) {
        const DenseLayer& layer = model_.layers()[i];
        const DType dtype = layer_dtypes_[i];
        auto group = [&](int64_t offset, int64_t count) {
            ParameterGroup g{};
            g.master = masters + offset;
            g.low_copy = dtype == DType::fp32 ? nullptr : low_copies_ + static_cast<size_t>(offset) * low_element_bytes_;
            g.low_dtype = dtype;
            g.gradient = gradients_ + offset;
            g.state1 = optimizer_states_[0] ? optimizer_states_[0] + offset : nullptr;
            g.state2 = optimizer_states_[1] ? optimizer_states_[1] + offset : nullptr;
            g.count = count;
            groups_.push_back(g);
        };
        group(layer.weight_offset, layer.weight_count());
        group(layer.bias_offset, layer.padded_units);
    }
}

DType Executor::activation_dtype(size_t layer) const {
    return layer + 1 == layer_dtypes_.size() ? DType::fp32 : layer_dtypes_[layer + 1];
}

const void* Executor::layer_weights(size_t layer) const {
    const int64_t offset = model_.layers()[layer].weight_offset;
    if (layer_dtypes_[layer] == DType::fp32) return model_.masters() + offset;
    return low_copies_ + static_cast<size_t>(offset) * low_element_bytes_;
}

const void* Executor::layer_bias(size_t layer) const {
    const int64_t offset = model_.layers()[layer].bias_offset;
    if (layer_dtypes_[layer] == DType::fp32 || layer + 1 == layer_dtypes_.size()) return model_.masters() + offset;
    return low_copies_ + static_cast<size_t>(offset) * low_element_bytes_;
}

const void* Executor::layer_input(size_t layer, int slot) const {
    if (layer == 0) return step_buffer(batch_slots_[slot].inputs);
    return step_buffer(layer_slots_[layer - 1].activation);
}

void Executor::reserve_rows(int64_t rows) {
    require(rows > 0, MPT_STATUS_INVALID_ARGUMENT, "batch size must be positive");
    if (rows <= planned_rows_) return;
    backend_.scheduler().synchronize();  // the copy lane may still be filling the old arena
    step_arena_ = Arena();

    const auto& layers = model_.layers();
    const int layer_count = static_cast<int>(layers.size());
    const bool training = mode_ == ExecutionMode::training;
    const size_t row_count = static_cast<size_t>(rows);
    ArenaPlan plan;
    const DenseLayer& first = layers.front();
    for (BatchSlot& slot : batch_slots_) {
        slot.inputs = plan.add(row_count * static_cast<size_t>(first.padded_inputs) * backend_.storage_size(layer_dtypes_[0]),
                               0, ArenaPlan::kAlways);
        slot.labels = plan.add(row_count * sizeof(int32_t), 0, ArenaPlan::kAlways);
        slot.targets = plan.add(row_count * static_cast<size_t>(classes_) * sizeof(float), 0, ArenaPlan::kAlways);
    }
    layer_slots_.assign(layers.size(), LayerSlots{});
    const int last = layer_count - 1;
    for (int i = 0; i < layer_count; ++i) {
        const DenseLayer& layer = layers[static_cast<size_t>(i)];
        const int produced = i + 1;
        int last_read;
        if (i == last) last_read = layer_count + 1;       // read by the loss head
        else if (training) last_read = 2 * layer_count - i;  // read by the backward of layer i + 1
        else last_read = i + 2;                           // read by the forward of layer i + 1
        const size_t elements = row_count * static_cast<size_t>(layer.padded_units);
        layer_slots_[static_cast<size_t>(i)].activation =
            plan.add(elements * backend_.storage_size(activation_dtype(static_cast<size_t>(i))), produced, last_read);
        const size_t mask_bytes = backend_.relu_mask_bytes(rows, layer.padded_units);
        if (mask_bytes && layer.activation == Activation::relu && i != last)
            layer_slots_[static_cast<size_t>(i)].relu_mask = plan.add(mask_bytes, produced, last_read);
        if (training) {
            // dZ_i: written by the head (last layer) or by the backward of layer i + 1, read by the backward of i.
            const int written = i == last ? layer_count + 1 : 2 * layer_count - i;
            layer_slots_[static_cast<size_t>(i)].output_grad =
                plan.add(elements * backend_.storage_size(layer_dtypes_[static_cast<size_t>(i)]), written, written + 1);
        }
    }
    outputs_ = plan.add(row_count * static_cast<size_t>(output_width_) * sizeof(float), layer_count + 1, ArenaPlan::kAlways);
    staging_ = plan.add(row_count * static_cast<size_t>(first.padded_inputs) * sizeof(float), 0, 0);
    plan.solve();

    step_arena_ = Arena(backend_, model_.context()->memory(), plan.total_bytes());
    step_plan_ = std::move(plan);
    logits_grad_ = training ? layer_slots_.back().output_grad : -1;
    planned_rows_ = rows;
}

size_t Executor::planned_bytes() const { return persistent_planned_ + (planned_rows_ ? step_plan_.total_bytes() : 0); }
size_t Executor::allocated_bytes() const { return persistent_arena_.bytes() + step_arena_.bytes(); }

void Executor::sync_weights() {
    if (synced_weights_version_ == model_.weights_version()) return;
    for (size_t i = 0; i < model_.layers().size(); ++i) {
        if (layer_dtypes_[i] == DType::fp32) continue;
        const DenseLayer& layer = model_.layers()[i];
        auto convert = [&](int64_t offset, int64_t count) {
            backend_.convert_from_fp32(low_copies_ + static_cast<size_t>(offset) * low_element_bytes_, layer_dtypes_[i],
                                       model_.masters() + offset, count);
        };
        convert(layer.weight_offset, layer.weight_count());
        convert(layer.bias_offset, layer.padded_units);
    }
    synced_weights_version_ = model_.weights_version();
}

void Executor::gather(const Dataset& dataset, const DatasetView& view, const int32_t* order, int64_t first,
                      int64_t rows, int slot) {
    GatherArgs args{};
    args.samples = view.samples;
    args.samples_are_u8 = dataset.is_u8();
    args.scale = dataset.scale();
    args.offset = dataset.offset();
    args.order = order;
    args.first = first;
    args.rows = rows;
    args.features = dataset.features();
    args.padded_features = model_.layers().front().padded_inputs;
    args.batch = step_buffer(batch_slots_[slot].inputs);
    args.batch_dtype = layer_dtypes_[0];
    args.labels = view.labels;
    args.batch_labels = static_cast<int32_t*>(step_buffer(batch_slots_[slot].labels));
    args.targets = view.targets;
    args.target_width = dataset.target_width();
    args.batch_targets = static_cast<float*>(step_buffer(batch_slots_[slot].targets));
    backend_.gather_batch(args);
}

void Executor::load_inputs(const float* host_rows, int64_t rows, int slot) {
    const DenseLayer& first = model_.layers().front();
    std::vector<float> padded(static_cast<size_t>(rows * first.padded_inputs), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
        std::memcpy(padded.data() + r * first.padded_inputs, host_rows + r * first.inputs,
                    static_cast<size_t>(first.inputs) * sizeof(float));
    float* staging = static_cast<float*>(step_buffer(staging_));
    backend_.copy_to_device(staging, padded.data(), padded.size() * sizeof(float));
    backend_.convert_from_fp32(step_buffer(batch_slots_[slot].inputs), layer_dtypes_[0], staging,
                               static_cast<int64_t>(padded.size()));
    // The head reads labels or targets even when only outputs are wanted: give it valid zeros.
    backend_.fill_zero(step_buffer(batch_slots_[slot].labels), static_cast<size_t>(rows) * sizeof(int32_t));
    backend_.fill_zero(step_buffer(batch_slots_[slot].targets), static_cast<size_t>(rows * classes_) * sizeof(float));
}

void Executor::forward(int slot, int64_t rows) {
    const auto& layers = model_.layers();
    for (size_t i = 0; i < layers.size(); ++i) {
        const DenseLayer& layer = layers[i];
        const bool last = i + 1 == layers.size();
        DenseForwardArgs args{};
        args.input = layer_input(i, slot);
        args.weights = layer_weights(i);
        args.bias = layer_bias(i);
        args.output = step_buffer(layer_slots_[i].activation);
        args.relu_mask = step_buffer(layer_slots_[i].relu_mask);
        args.rows = rows;
        args.in_features = layer.padded_inputs;
        args.out_features = layer.padded_units;
        args.valid_out = layer.units;
        args.activation = last ? Activation::linear : layer.activation;
        args.compute_dtype = layer_dtypes_[i];
        args.bias_dtype = (layer_dtypes_[i] == DType::fp32 || last) ? DType::fp32 : layer_dtypes_[i];
        args.output_dtype = activation_dtype(i);
        backend_.dense_forward(args);
    }
}

void Executor::loss_head(int slot, int64_t rows, HeadMode mode) {
    const bool with_gradient = mode == HeadMode::train;
    LossHeadArgs args{};
    args.logits = static_cast<const float*>(step_buffer(layer_slots_.back().activation));
    const bool labels = loss_uses_labels(loss_);
    args.labels = labels ? static_cast<const int32_t*>(step_buffer(batch_slots_[slot].labels)) : nullptr;
    args.targets = labels ? nullptr : static_cast<const float*>(step_buffer(batch_slots_[slot].targets));
    args.probabilities = mode == HeadMode::predict ? static_cast<float*>(step_buffer(outputs_)) : nullptr;
    args.logits_grad = with_gradient ? step_buffer(logits_grad_) : nullptr;
    args.state = with_gradient ? state_ : nullptr;
    args.metrics = mode == HeadMode::predict ? nullptr : metrics_;
    args.rows = rows;
    args.width = output_width_;
    args.classes = classes_;
    args.activation = model_.layers().back().activation;
    args.loss = loss_;
    args.logits_grad_dtype = layer_dtypes_.back();
    backend_.loss_head(args);
}

void Executor::backward(int slot, int64_t rows) {
    const auto& layers = model_.layers();
    for (size_t i = layers.size(); i-- > 0;) {
        const DenseLayer& layer = layers[i];
        const void* output_grad = step_buffer(layer_slots_[i].output_grad);
        DenseBackwardWeightsArgs weights{};
        weights.output_grad = output_grad;
        weights.input = layer_input(i, slot);
        weights.weight_grad = gradients_ + layer.weight_offset;
        weights.bias_grad = gradients_ + layer.bias_offset;
        weights.rows = rows;
        weights.in_features = layer.padded_inputs;
        weights.out_features = layer.padded_units;
        weights.compute_dtype = layer_dtypes_[i];
        backend_.dense_backward_weights(weights);
        if (i == 0) break;  // no gradient with respect to the data
        DenseBackwardDataArgs data{};
        data.output_grad = output_grad;
        data.weights = layer_weights(i);
        data.input = layer_input(i, slot);
        data.relu_mask = step_buffer(layer_slots_[i - 1].relu_mask);
        data.input_grad = step_buffer(layer_slots_[i - 1].output_grad);
        data.rows = rows;
        data.in_features = layer.padded_inputs;
        data.out_features = layer.padded_units;
        data.input_activation = layers[i - 1].activation;
        data.compute_dtype = layer_dtypes_[i];
        data.input_grad_dtype = layer_dtypes_[i - 1];
        backend_.dense_backward_data(data);
    }
}

void Executor::begin_step() { backend_.begin_step(state_); }

void Executor::update() {
    backend_.check_finite(gradients_, model_.parameter_block_elements(), state_);
    backend_.apply_update(groups_.data(), static_cast<int>(groups_.size()), optimizer_, scaler_, state_);
    model_.mark_weights_changed();
    synced_weights_version_ = model_.weights_version();
}

TrainState Executor::read_state() const {
    TrainState state;
    backend_.copy_to_host(&state, state_, sizeof state);
    return state;
}

void Executor::write_state(const TrainState& state) { backend_.copy_to_device(state_, &state, sizeof state); }

void Executor::read_metrics(double* metrics) const {
    backend_.copy_to_host(metrics, metrics_, kMetricsCount * sizeof(double));
}

void Executor::reset_metrics() { backend_.fill_zero(metrics_, kMetricsCount * sizeof(double)); }

void Executor::read_outputs(float* host, int64_t rows) const {
    std::vector<float> padded(static_cast<size_t>(rows * output_width_));
    backend_.copy_to_host(padded.data(), step_buffer(outputs_), padded.size() * sizeof(float));
    for (int64_t r = 0; r < rows; ++r)
        std::memcpy(host + r * classes_, padded.data() + r * output_width_, static_cast<size_t>(classes_) * sizeof(float));
}

float* Executor::optimizer_state(int index) const { return optimizer_states_[index]; }

}  // namespace mpt
