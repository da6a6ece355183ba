// See executor.h. Phases of a training step with L layers (layer i is 0-based):
//   forward of layer i: phase i + 1; loss head: phase L + 1;
//   input gradient through layer i (writes dZ_{i-1}): phase 2L + 1 - i; every layer's update: 2L + 1.
// All input gradients are computed before any weight changes, because dZ_{i-1} needs the old W_i and
// the update may only start once the whole step is known to be finite. A buffer is live from the
// phase that writes it to the last phase that reads it; buffers whose lives do not overlap share
// bytes in the step arena.
#include "nn/executor.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "core/error.h"

namespace mpt {

namespace {

// Inference executors are forward-only and planned per predict call: a smaller workspace still lets
// cuBLASLt split K for small batches, without a 32 MiB allocation on every call.
constexpr size_t kInferenceWorkspaceBytes = size_t{4} << 20;

}  // namespace

Executor::Executor(Model& model, const PrecisionPolicy& policy, ExecutionMode mode, const LossConfig& loss,
                   const OptimizerConfig& optimizer, const LossScalerConfig& scaler)
    : model_(model),
      backend_(model.context()->backend()),
      policy_(policy),
      mode_(mode),
      loss_(loss),
      optimizer_(optimizer),
      scaler_(scaler),
      word_cache_(backend_, model.context()->memory()) {
    model_.build();
    layer_dtypes_ = layer_compute_dtypes(model_, policy_);
    classes_ = model_.layers().back().units;
    require(loss_.class_weights.empty() || static_cast<int64_t>(loss_.class_weights.size()) == classes_,
            MPT_STATUS_SHAPE_MISMATCH, "the class weights' count is not the model's outputs");
    output_width_ = model_.layers().back().padded_units;
    for (size_t i = 0; i < model_.layers().size(); ++i) {
        const DenseLayer& layer = model_.layers()[i];
        gradient_offsets_.push_back(gradient_elements_);
        gradient_elements_ += layer.weight_count() + layer.padded_units;
        update_shapes_.push_back({layer.padded_inputs, layer.padded_units, layer_dtypes_[i]});
    }
    trainable_layers_.reserve(model_.layers().size());
    trainable_index_.assign(model_.layers().size(), -1);
    bounds_taken_.assign(2 * model_.layers().size(), 0);
    trained_last_step_.assign(model_.layers().size(), 1);
    plan_persistent();
}

void Executor::plan_persistent() {
    size_t workspace_bytes = backend_.gemm_workspace_bytes();
    if (mode_ == ExecutionMode::inference) workspace_bytes = std::min(workspace_bytes, kInferenceWorkspaceBytes);
    try {
        plan_persistent(workspace_bytes);
    } catch (const Error& error) {
        if (error.status() != MPT_STATUS_OUT_OF_MEMORY || workspace_bytes == 0) throw;
        // cuBLASLt still has algorithms without a workspace (fewer, and no split K): a tight memory
        // budget or a nearly full device still gets an executor rather than an error.
        plan_persistent(0);
    }
}

void Executor::plan_persistent(size_t workspace_bytes) {
    const int64_t parameters = model_.parameter_block_elements();
    bool any_low = false;
    for (size_t i = 0; i < layer_dtypes_.size(); ++i) any_low |= !parameters_read_as_masters(i);
    low_element_bytes_ = backend_.storage_size(DType::bf16);
    const bool training = mode_ == ExecutionMode::training;
    const int state_arrays = training ? optimizer_state_count(optimizer_) : 0;

    ArenaPlan plan;
    const int low_id = any_low ? plan.add(static_cast<size_t>(parameters) * low_element_bytes_, 0, ArenaPlan::kAlways) : -1;
    int state_ids[kMaxOptimizerStates] = {-1, -1, -1};
    for (int s = 0; s < state_arrays; ++s)
        state_ids[s] = plan.add(static_cast<size_t>(parameters) * sizeof(float), 0, ArenaPlan::kAlways);
    const int averages_id = training && averages_weights(optimizer_)
                                ? plan.add(static_cast<size_t>(parameters) * sizeof(float), 0, ArenaPlan::kAlways)
                                : -1;
    // The report, then the committed metrics right after its running ones: one copy writes both.
    static_assert(sizeof(StepReport) % alignof(double) == 0 &&
                      offsetof(StepReport, metrics) + sizeof(StepReport::metrics) == sizeof(StepReport),
                  "the committed metrics follow the running ones");
    const int report_id = plan.add(sizeof(StepReport) + kMetricsCount * sizeof(double), 0, ArenaPlan::kAlways);
    const int bounds_id = plan.add(2 * model_.layers().size() * sizeof(float), 0, ArenaPlan::kAlways);
    const size_t weights_bytes = training ? loss_.class_weights.size() * sizeof(float) : 0;
    const int class_weights_id = weights_bytes ? plan.add(weights_bytes, 0, ArenaPlan::kAlways) : -1;
    // The GEMMs' workspace: the dense ops of one executor run one after another on one lane.
    const int workspace_id = workspace_bytes ? plan.add(workspace_bytes, 0, ArenaPlan::kAlways) : -1;
    plan.solve();
    persistent_planned_ = plan.total_bytes();
    persistent_arena_ = Arena(backend_, model_.context()->memory(), plan.total_bytes());

    auto pointer = [&](int id) { return id < 0 ? nullptr : persistent_arena_.at<char>(plan.offset(id)); };
    low_copies_ = pointer(low_id);
    for (int s = 0; s < kMaxOptimizerStates; ++s) optimizer_states_[s] = reinterpret_cast<float*>(pointer(state_ids[s]));
    averages_ = reinterpret_cast<float*>(pointer(averages_id));
    // Never read before the first applied step writes them (TrainState::applied_steps says when).
    if (averages_) backend_.fill_zero(averages_, static_cast<size_t>(parameters) * sizeof(float));
    // Addresses inside backend memory, computed on the host; never dereferenced here.
    report_ = reinterpret_cast<StepReport*>(pointer(report_id));
    state_ = &report_->state;
    metrics_ = report_->metrics;
    committed_metrics_ = reinterpret_cast<double*>(report_ + 1);
    reset_metrics();
    gradient_bounds_ = reinterpret_cast<float*>(pointer(bounds_id));
    gemm_workspace_ = GemmWorkspace{pointer(workspace_id), workspace_id < 0 ? 0 : workspace_bytes};
    class_weights_ = reinterpret_cast<float*>(pointer(class_weights_id));
    if (class_weights_) backend_.copy_to_device(class_weights_, loss_.class_weights.data(), weights_bytes);
    write_state(initial_train_state(scaler_));
}

DType Executor::activation_dtype(size_t layer) const {
    return layer + 1 == layer_dtypes_.size() ? DType::fp32 : layer_dtypes_[layer + 1];
}

bool Executor::parameters_read_as_masters(size_t layer) const {
    return layer_dtypes_[layer] == DType::fp32 || backend_.rounds_parameters_on_read(layer_dtypes_[layer]);
}

const void* Executor::layer_weights(size_t layer) const {
    const int64_t offset = model_.layers()[layer].weight_offset;
    if (parameters_read_as_masters(layer)) return model_.masters() + offset;
    return low_copies_ + static_cast<size_t>(offset) * low_element_bytes_;
}

const void* Executor::layer_bias(size_t layer) const {
    const int64_t offset = model_.layers()[layer].bias_offset;
    if (parameters_read_as_masters(layer) || layer + 1 == layer_dtypes_.size()) return model_.masters() + offset;
    return low_copies_ + static_cast<size_t>(offset) * low_element_bytes_;
}

const void* Executor::layer_input(size_t layer, int slot, bool dropped) const {
    if (layer == 0) return step_buffer(dropped && dropped_inputs_ >= 0 ? dropped_inputs_ : batch_slots_[slot].inputs);
    const LayerSlots& previous = layer_slots_[layer - 1];
    return step_buffer(dropped && previous.dropped >= 0 ? previous.dropped : previous.activation);
}

void Executor::reserve_rows(int64_t rows, bool whole_steps) {
    require(rows > 0, MPT_STATUS_INVALID_ARGUMENT, "batch size must be positive");
    if (rows <= planned_rows_ && (planned_whole_steps_ || !whole_steps)) return;
    // The new plan serves whatever the old one did too: plans only grow.
    if (planned_rows_ > 0) {
        rows = std::max(rows, planned_rows_);
        whole_steps = whole_steps || planned_whole_steps_;
    }
    backend_.scheduler().synchronize();  // the copy lane may still be filling the old arena
    // Release first so the new plan fits where the old one was; if the new one fails (budget, out of
    // memory) nothing is planned, and the next call plans again. The weight words go too: the
    // step arena comes before them.
    step_arena_ = Arena();
    planned_rows_ = 0;
    release_weight_words();

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
        slot.row_weights = plan.add(row_count * sizeof(float), 0, ArenaPlan::kAlways);
    }
    // The dropped copy of the batch, written by the forward and last read by the first layer's update.
    dropped_inputs_ = -1;
    if (training && model_.input_dropout() > 0.0f)
        dropped_inputs_ = plan.add(row_count * static_cast<size_t>(first.padded_inputs) *
                                       backend_.storage_size(layer_dtypes_[0]),
                                   0, 2 * layer_count + 1);
    layer_slots_.assign(layers.size(), LayerSlots{});
    layer_updates_.assign(layers.size(), DenseUpdateArgs{});
    const int last = layer_count - 1;
    for (int i = 0; i < layer_count; ++i) {
        const DenseLayer& layer = layers[static_cast<size_t>(i)];
        const int produced = i + 1;
        int last_read;
        // Read by the loss head; in training kept until the input gradient below is written (2L - i
        // for i = L - 2), which the CUDA backend's head layer in a cluster writes in the launch that
        // also writes the logits (head_layer_case.h): sharing bytes, it would be declined.
        if (i == last) last_read = training ? layer_count + 2 : layer_count + 1;
        // Read by the update of layer i + 1; with dropout that reads the dropped copy, and the outputs
        // themselves are last read by backward (2L - i), kept as long here only for simplicity.
        else if (training) last_read = 2 * layer_count + 1;
        else last_read = i + 2;                            // read by the forward of layer i + 1
        const size_t elements = row_count * static_cast<size_t>(layer.padded_units);
        const size_t activation_bytes = elements * backend_.storage_size(activation_dtype(static_cast<size_t>(i)));
        layer_slots_[static_cast<size_t>(i)].activation = plan.add(activation_bytes, produced, last_read);
        if (training && layer.dropout > 0.0f && i != last)
            layer_slots_[static_cast<size_t>(i)].dropped = plan.add(activation_bytes, produced, last_read);
        // The ReLU mask only serves the backward pass: inference runs the plain bias+ReLU epilogue.
        const size_t mask_bytes = training ? backend_.relu_mask_bytes(rows, layer.padded_units) : 0;
        if (mask_bytes && layer.activation == Activation::relu && i != last)
            layer_slots_[static_cast<size_t>(i)].relu_mask = plan.add(mask_bytes, produced, last_read);
        if (training) {
            // dZ_i: written by the head (last layer) or through layer i + 1, read until the update.
            const int written = i == last ? layer_count + 1 : 2 * layer_count - i;
            layer_slots_[static_cast<size_t>(i)].output_grad =
                plan.add(elements * backend_.storage_size(layer_dtypes_[static_cast<size_t>(i)]), written,
                         2 * layer_count + 1);
        }
    }
    // One layer's dW and db where the backend's whole update needs them in memory at this batch size:
    // layers are updated one after another, so one scratch of the largest layer serves them all,
    // and it lives in the update phase only. Clipping, unless the backend takes the norm from the
    // batch, needs every layer's at once (their norm comes before the first update), packed
    // without gaps (gradient_offsets_): clip_factor sums exactly what this step's gradients wrote.
    gradient_scratch_ = -1;
    const int update_phase = 2 * layer_count + 1;
    if (!whole_steps) {
        // Micro-batches only: their gradients go to the accumulated gradients.
    } else if (training && clips_gradients(optimizer_) && !backend_.clips_from_batch(rows)) {
        gradient_scratch_ = plan.add(static_cast<size_t>(gradient_elements_) * sizeof(float), update_phase, update_phase);
    } else if (training && backend_.update_needs_gradient_scratch(optimizer_, rows, update_shapes_.data(),
                                                                  static_cast<int>(update_shapes_.size()))) {
        int64_t largest_layer = 0;
        for (const DenseLayer& layer : layers)
            largest_layer = std::max(largest_layer, layer.bias_offset + layer.padded_units - layer.weight_offset);
        gradient_scratch_ = plan.add(static_cast<size_t>(largest_layer) * sizeof(float), update_phase, update_phase);
    }
    outputs_ = plan.add(row_count * static_cast<size_t>(output_width_) * sizeof(float), layer_count + 1, ArenaPlan::kAlways);
    staging_ = plan.add(row_count * static_cast<size_t>(first.padded_inputs) * sizeof(float), 0, 0);
    plan.solve();

    step_arena_ = Arena(backend_, model_.context()->memory(), plan.total_bytes());
    step_plan_ = std::move(plan);
    logits_grad_ = training ? layer_slots_.back().output_grad : -1;
    planned_rows_ = rows;
    planned_whole_steps_ = whole_steps;
}

std::pair<size_t, size_t> Executor::planned_layer_bytes(size_t layer, bool gradient) const {
    if (planned_rows_ == 0 || layer >= layer_slots_.size()) return {0, 0};
    const int id = gradient ? layer_slots_[layer].output_grad : layer_slots_[layer].activation;
    if (id < 0) return {0, 0};
    return {step_plan_.offset(id), step_plan_.offset(id) + step_plan_.bytes(id)};
}

size_t Executor::planned_bytes() const {
    return persistent_planned_ + (planned_rows_ ? step_plan_.total_bytes() : 0) + word_cache_.bytes() +
           accumulated_arena_.bytes();
}
size_t Executor::allocated_bytes() const {
    return persistent_arena_.bytes() + step_arena_.bytes() + word_cache_.bytes() + accumulated_arena_.bytes();
}

void Executor::reserve_accumulated_gradients() {
    if (accumulated_gradients_) return;
    accumulated_arena_ = Arena(backend_, model_.context()->memory(), static_cast<size_t>(gradient_elements_) * sizeof(float));
    accumulated_gradients_ = static_cast<float*>(accumulated_arena_.base());
}

void Executor::sync_weights() {
    if (synced_weights_version_ == model_.weights_version()) return;
    for (size_t i = 0; i < model_.layers().size(); ++i) {
        if (parameters_read_as_masters(i)) continue;
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

int64_t Executor::weight_words_max_rows(size_t layer) const {
    return parameters_read_as_masters(layer) ? backend_.weight_words_max_rows(layer_dtypes_[layer]) : 0;
}

const uint16_t* Executor::layer_weight_words(size_t layer, int64_t rows) const {
    if (rows > weight_words_max_rows(layer)) return nullptr;
    const uint16_t* words = word_cache_.words(model_.weights_version());
    return words ? words + model_.layers()[layer].weight_offset : nullptr;
}

void Executor::prepare_prediction(int64_t rows) {
    const uint64_t version = model_.weights_version();
    const bool first_on_these_weights = predicted_version_ != version;
    predicted_version_ = version;
    if (word_cache_.words(version)) return;
    if (first_on_these_weights) {
        word_cache_.release();  // words of older weights, if any: nothing reads them again
        return;
    }
    const auto& layers = model_.layers();
    bool any = false;
    for (size_t i = 0; i < layers.size(); ++i) any = any || rows <= weight_words_max_rows(i);
    if (!any) return;
    uint16_t* words = word_cache_.room(static_cast<size_t>(model_.parameter_block_elements()));
    if (!words) return;
    // Every layer that reads words at some row count gets them, whatever `rows` is now: a layer of
    // another dtype may read them on fewer rows later.
    for (size_t i = 0; i < layers.size(); ++i) {
        if (weight_words_max_rows(i) == 0) continue;
        const DenseLayer& layer = layers[i];
        backend_.write_weight_words(model_.masters() + layer.weight_offset, words + layer.weight_offset,
                                    layer_dtypes_[i], layer.weight_count());
    }
    word_cache_.written(version);
}

void Executor::gather(const Dataset& dataset, const DatasetView& view, const int32_t* order,
                      const int32_t* host_order, int64_t first, int64_t rows, int slot) {
    GatherArgs args{};
    args.streamed = view.streamed;
    args.host_order = host_order;
    args.samples = view.samples;
    args.samples_are_u8 = dataset.is_u8();
    args.scale = dataset.scale();
    args.offset = dataset.offset();
    args.feature_mean = view.feature_mean;
    args.feature_divisor = view.feature_divisor;
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
    args.row_weights = view.row_weights;
    args.batch_row_weights = static_cast<float*>(step_buffer(batch_slots_[slot].row_weights));
    backend_.gather_batch(args);
    // Not with a standardization (the dataset's or the model's, Trainer::gather_view): it can widen them.
    batch_slots_[slot].inputs_decide_as_none =
        view.feature_mean == nullptr && dataset.batch_values_decide_as_none(args.batch_dtype);
}

void Executor::load_inputs(const float* host_rows, int64_t rows, int slot) {
    const DenseLayer& first = model_.layers().front();
    std::vector<float> padded(static_cast<size_t>(rows * first.padded_inputs), 0.0f);
    // The model's standardization on the host, as the gather would apply it on the backend.
    const FeatureStandardization* standardization = model_.input_standardization().get();
    for (int64_t r = 0; r < rows; ++r) {
        float* row = padded.data() + r * first.padded_inputs;
        const float* inputs = host_rows + r * first.inputs;
        if (standardization)
            for (int64_t f = 0; f < first.inputs; ++f) row[f] = standardization->apply(f, inputs[f]);
        else
            std::memcpy(row, inputs, static_cast<size_t>(first.inputs) * sizeof(float));
    }
    float* staging = static_cast<float*>(step_buffer(staging_));
    backend_.copy_to_device(staging, padded.data(), padded.size() * sizeof(float));
    backend_.convert_from_fp32(step_buffer(batch_slots_[slot].inputs), layer_dtypes_[0], staging,
                               static_cast<int64_t>(padded.size()));
    batch_slots_[slot].inputs_decide_as_none = false;
    clear_head_inputs(slot, rows);
}

void Executor::clear_head_inputs(int slot, int64_t rows) {
    backend_.fill_zero(step_buffer(batch_slots_[slot].labels), static_cast<size_t>(rows) * sizeof(int32_t));
    backend_.fill_zero(step_buffer(batch_slots_[slot].targets), static_cast<size_t>(rows * classes_) * sizeof(float));
}

void Executor::forward(int slot, int64_t rows, bool training, const BatchPart& part) {
    const auto& layers = model_.layers();
    // Input dropout, out of place as a hidden layer's: the first layer's forward, update and
    // finiteness check read the dropped copy (layer_input), and the gathered batch stays as it was.
    if (training && dropped_inputs_ >= 0)
        drop(input_dropout_layer(static_cast<int64_t>(layers.size())), model_.input_dropout(),
             step_buffer(batch_slots_[slot].inputs), step_buffer(dropped_inputs_), layer_dtypes_[0], rows,
             layers.front().padded_inputs, part.first_row);
    for (size_t i = 0; i < layers.size(); ++i) {
        const DenseLayer& layer = layers[i];
        const bool last = i + 1 == layers.size();
        DenseForwardArgs args{};
        args.input = layer_input(i, slot, training);
        args.weights = layer_weights(i);
        args.weight_words = layer_weight_words(i, rows);
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
        args.workspace = gemm_workspace_;
        backend_.dense_forward(args);
        if (training && layer_slots_[i].dropped >= 0)
            drop(static_cast<int64_t>(i), layer.dropout, args.output, step_buffer(layer_slots_[i].dropped),
                 args.output_dtype, rows, layer.padded_units, part.first_row);
    }
}

void Executor::drop(int64_t mask_layer, float rate, const void* input, void* output, DType dtype, int64_t rows,
                    int64_t width, int64_t first_row) {
    DropoutArgs args{};
    args.input = input;
    args.output = output;
    args.dtype = dtype;
    args.count = rows * width;
    args.draw = dropout_draw(dropout_seed_, mask_layer, rate);
    args.state = state_;
    args.first_index = first_row * width;
    backend_.dropout(args);
}

void Executor::loss_head(int slot, int64_t rows, HeadMode mode, bool row_weighted, const BatchPart& part) {
    const bool with_gradient = mode == HeadMode::train;
    LossHeadArgs args{};
    args.logits = static_cast<const float*>(step_buffer(layer_slots_.back().activation));
    const bool labels = loss_uses_labels(loss_.kind);
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
    args.loss = loss_.kind;
    args.label_smoothing = loss_.label_smoothing;
    args.huber_delta = loss_.huber_delta;
    args.class_weights = with_gradient ? class_weights_ : nullptr;  // training only, as Keras's class_weight
    // Training and evaluation, as Keras's sample_weight (which evaluate also takes).
    args.row_weights = row_weighted && mode != HeadMode::predict
                           ? static_cast<const float*>(step_buffer(batch_slots_[slot].row_weights))
                           : nullptr;
    args.logits_grad_dtype = layer_dtypes_.back();
    if (with_gradient) {
        args.mean_rows = part.batch_rows;
        args.continues_batch = part.first_row > 0;
        // A training pass's maxima for the update's finiteness check, taken where their tensors are
        // written: the last layer's max|dZ| here (every backend's head takes it), the others' by the
        // backward where its path can.
        std::fill(bounds_taken_.begin(), bounds_taken_.end(), 0);
        const int last = trainable_index_[model_.layers().size() - 1];
        if (last >= 0) {
            args.logits_grad_max_abs = gradient_bounds_ + 2 * last;
            bounds_taken_[static_cast<size_t>(2 * last)] = 1;
        }
    }
    backend_.loss_head(args);
}

void Executor::backward(int slot, int64_t rows, const BatchPart& part) {
    const auto& layers = model_.layers();
    // dZ_{i-1} from layer i, for every layer from the lowest trainable one up.
    const size_t lowest_trainable = trainable_layers_.front();
    for (size_t i = layers.size() - 1; i > lowest_trainable; --i) {
        const DenseLayer& layer = layers[i];
        DenseBackwardDataArgs data{};
        data.output_grad = step_buffer(layer_slots_[i].output_grad);
        data.weights = layer_weights(i);
        data.input = layer_input(i, slot, false);  // the outputs themselves: act' is taken from them
        data.relu_mask = step_buffer(layer_slots_[i - 1].relu_mask);
        data.input_grad = step_buffer(layer_slots_[i - 1].output_grad);
        data.rows = rows;
        data.in_features = layer.padded_inputs;
        data.out_features = layer.padded_units;
        data.input_activation = layers[i - 1].activation;
        data.compute_dtype = layer_dtypes_[i];
        data.input_grad_dtype = layer_dtypes_[i - 1];
        data.workspace = gemm_workspace_;
        // max|dZ_{i-1}| (layer i-1's pair) and max|A_{i-1}| (layer i's), where the backend can take
        // them as it writes dZ_{i-1}: trainable layers' pairs only, and neither when dropout follows
        // (it changes dZ_{i-1} after this, and layer i's update reads A_{i-1} after its dropout).
        const int below = trainable_index_[i - 1], above = trainable_index_[i];
        const bool undropped = layer_slots_[i - 1].dropped < 0;
        data.input_grad_max_abs = undropped && below >= 0 ? gradient_bounds_ + 2 * below : nullptr;
        data.input_max_abs = undropped && above >= 0 ? gradient_bounds_ + 2 * above + 1 : nullptr;
        if (backend_.dense_backward_data(data)) {
            if (data.input_grad_max_abs) bounds_taken_[static_cast<size_t>(2 * below)] = 1;
            if (data.input_max_abs) bounds_taken_[static_cast<size_t>(2 * above + 1)] = 1;
        }
        if (layer_slots_[i - 1].dropped >= 0)
            drop(static_cast<int64_t>(i - 1), layers[i - 1].dropout, data.input_grad, data.input_grad,
                 data.input_grad_dtype, rows, layer.padded_inputs, part.first_row);
    }
}

void Executor::begin_step() {
    // The layout of the trainable layers' gradients, as the model's flags stand now (they may change
    // between steps).
    trainable_layers_.clear();
    trainable_gradient_elements_ = 0;
    const auto& layers = model_.layers();
    for (size_t i = 0; i < layers.size(); ++i) {
        trainable_index_[i] = layers[i].trainable ? static_cast<int>(trainable_layers_.size()) : -1;
        if (!layers[i].trainable) continue;
        trainable_layers_.push_back(i);
        gradient_offsets_[i] = trainable_gradient_elements_;
        trainable_gradient_elements_ += layers[i].weight_count() + layers[i].padded_units;
    }
    if (trainable_layers_.empty()) model_.require_trainable_layer();  // fails, before anything is issued
    for (size_t i = 0; i < layers.size(); ++i) {
        // A layer frozen until now was not averaged while frozen: its average starts again from its
        // weights (as they are before this step's update), as on the first applied step.
        if (averages_ && layers[i].trainable && !trained_last_step_[i]) set_average_to_weights(i);
        trained_last_step_[i] = layers[i].trainable;
    }
    backend_.begin_step(state_);
}

bool Executor::all_layers_trainable() const { return trainable_layers_.size() == model_.layers().size(); }

void Executor::reserve_update_scratch(int64_t rows, bool clipping) {
    if (rows == update_scratch_rows_ && clipping == update_scratch_clipping_) return;
    // Micro-batches of two sizes (the last one shorter) come here twice a step: nothing allocated.
    backend_.reserve_update_scratch(update_shapes_.data(), static_cast<int>(update_shapes_.size()), rows, clipping);
    update_scratch_rows_ = rows;
    update_scratch_clipping_ = clipping;
}

void Executor::decide_from_bounds(int slot, int64_t rows, int64_t bound_rows) {
    const auto& layers = model_.layers();
    // (max|dZ_i|, max|A_prev_i|) per layer, kMaxAbsInputs tensors per pass.
    // The trainable layers' only (their gradients are the ones computed), packed in their order.
    MaxAbsInput inputs[kMaxAbsInputs];
    int pending = 0;
    size_t first_pair = 0;
    const size_t count = trainable_layers_.size();
    for (size_t k = 0; k < count; ++k) {
        const size_t i = trainable_layers_[k];
        const DenseLayer& layer = layers[i];
        // Maxima the loss head or the backward took as they wrote their tensors (bounds_taken_) stay
        // as they are.
        const MaxAbsInput taken{nullptr, layer_dtypes_[i], kMaxAbsTaken};
        inputs[pending++] = bounds_taken_[2 * k] ? taken
                                                 : MaxAbsInput{step_buffer(layer_slots_[i].output_grad),
                                                               layer_dtypes_[i], rows * layer.padded_units};
        // The gathered batch, undropped, whose values decide as no max: an empty input (max 0), not a
        // pass over it (at batch 4096 on a GPU, CIFAR-10's 25 MB of bf16 inputs).
        const bool measured = !(i == 0 && dropped_inputs_ < 0 && batch_slots_[slot].inputs_decide_as_none);
        if (bounds_taken_[2 * k + 1])
            inputs[pending++] = taken;
        else if (measured)
            inputs[pending++] = MaxAbsInput{layer_input(i, slot, true), layer_dtypes_[i], rows * layer.padded_inputs};
        else
            inputs[pending++] = MaxAbsInput{nullptr, layer_dtypes_[i], 0};
        if (pending == kMaxAbsInputs || k + 1 == count) {
            backend_.max_abs(inputs, pending, gradient_bounds_ + 2 * first_pair);
            pending = 0;
            first_pair = k + 1;
        }
    }
    backend_.decide_update(gradient_bounds_, static_cast<int>(count), bound_rows, state_);
}

void Executor::set_average_to_weights(size_t layer) {
    const DenseLayer& dense = model_.layers()[layer];
    // Momentum 0: a copy, whatever the step (Backend::average_weights).
    backend_.average_weights(model_.masters() + dense.weight_offset, averages_ + dense.weight_offset,
                             dense.bias_offset + dense.padded_units - dense.weight_offset, 0.0f, state_);
}

void Executor::finish_update() {
    if (averages_ && all_layers_trainable()) {
        backend_.average_weights(model_.masters(), averages_, model_.parameter_block_elements(), optimizer_.ema_momentum,
                                 state_);
    } else if (averages_) {
        // The trainable layers' only: a frozen layer's weights do not change, so averaging them
        // would be a pass over memory for nothing.
        for (const size_t i : trainable_layers_) {
            const DenseLayer& layer = model_.layers()[i];
            backend_.average_weights(model_.masters() + layer.weight_offset, averages_ + layer.weight_offset,
                                     layer.bias_offset + layer.padded_units - layer.weight_offset,
                                     optimizer_.ema_momentum, state_);
        }
    }
    backend_.finish_step(state_, scaler_, metrics_, committed_metrics_);
}

void Executor::update(int slot, int64_t rows) {
    // Whatever scratch the updates need, before the first of them changes a layer.
    reserve_update_scratch(rows, clips_gradients(optimizer_));
    decide_from_bounds(slot, rows, rows);
    try {
        update_layers(slot, rows);
        finish_update();
    } catch (...) {
        // Some layers may be updated already (a fault: their scratch was reserved above), so what
        // was made from the old weights (low copies, words) must not be read again.
        model_.mark_weights_changed();
        throw;
    }
    model_.mark_weights_changed();
    synced_weights_version_ = model_.weights_version();
}

void Executor::accumulate(int slot, int64_t rows, const BatchPart& part) {
    require(accumulated_gradients_ != nullptr && !part.whole(), MPT_STATUS_INTERNAL,
            "executor: accumulate needs a micro-batch and the accumulated gradients' memory");
    // The weight-gradient GEMMs' scratch only: no layer changes here, and the norm of a clipped
    // step is taken from the sums.
    reserve_update_scratch(rows, false);
    decide_from_bounds(slot, rows, part.batch_rows);
    const UpdatePart writes = part.first_row == 0 ? UpdatePart::gradient : UpdatePart::accumulate;
    for (const size_t i : trainable_layers_)
        backend_.dense_update(layer_update(i, slot, rows, writes, accumulated_gradients_), optimizer_);
}

void Executor::apply_accumulated(int slot, int64_t rows) {
    require(accumulated_gradients_ != nullptr, MPT_STATUS_INTERNAL, "executor: nothing was accumulated");
    try {
        if (clips_gradients(optimizer_))
            backend_.clip_factor(accumulated_gradients_, trainable_gradient_elements_, optimizer_.global_clipnorm, state_);
        for (const size_t i : trainable_layers_) {
            DenseUpdateArgs args = layer_update(i, slot, rows, UpdatePart::apply, accumulated_gradients_);
            if (clips_gradients(optimizer_)) args.gradient_factor = &state_->clip_factor;
            backend_.dense_update(args, optimizer_);
        }
        finish_update();
    } catch (...) {
        model_.mark_weights_changed();  // as update's
        throw;
    }
    model_.mark_weights_changed();
    synced_weights_version_ = model_.weights_version();
}

void Executor::update_layers(int slot, int64_t rows) {
    const size_t count = trainable_layers_.size();
    float* const gradient_scratch = static_cast<float*>(step_buffer(gradient_scratch_));
    if (!clips_gradients(optimizer_)) {
        for (const size_t i : trainable_layers_)
            backend_.dense_update(layer_update(i, slot, rows, UpdatePart::whole, gradient_scratch), optimizer_);
        return;
    }
    if (backend_.clips_from_batch(rows)) {
        // The norm from the batch, then every whole update times the factor (the layers in the order
        // of decide_from_bounds' pairs).
        for (size_t k = 0; k < count; ++k)
            layer_updates_[k] = layer_update(trainable_layers_[k], slot, rows, UpdatePart::whole, gradient_scratch);
        backend_.clip_factor_from_batch(layer_updates_.data(), static_cast<int>(count), gradient_bounds_,
                                        optimizer_.global_clipnorm, state_);
        for (size_t k = 0; k < count; ++k) {
            layer_updates_[k].gradient_factor = &state_->clip_factor;
            backend_.dense_update(layer_updates_[k], optimizer_);
        }
        return;
    }
    // Every gradient, their norm's factor, then every update: the gradients of all trainable layers
    // lie packed in the scratch, so one clip_factor call covers them and nothing else.
    for (const size_t i : trainable_layers_)
        backend_.dense_update(layer_update(i, slot, rows, UpdatePart::gradient, gradient_scratch), optimizer_);
    backend_.clip_factor(gradient_scratch, trainable_gradient_elements_, optimizer_.global_clipnorm, state_);
    for (const size_t i : trainable_layers_) {
        DenseUpdateArgs args = layer_update(i, slot, rows, UpdatePart::apply, gradient_scratch);
        args.gradient_factor = &state_->clip_factor;
        backend_.dense_update(args, optimizer_);
    }
}

DenseUpdateArgs Executor::layer_update(size_t i, int slot, int64_t rows, UpdatePart part, float* gradients) const {
    const DenseLayer& layer = model_.layers()[i];
    float* masters = model_.masters();
    // A step in parts keeps every layer's gradient, packed; otherwise the layers take turns in one
    // layer's scratch.
    const int64_t scratch_offset = part == UpdatePart::whole ? 0 : gradient_offsets_[i];
    const bool low = !parameters_read_as_masters(i);
    DenseUpdateArgs args{};
    args.output_grad = step_buffer(layer_slots_[i].output_grad);
    args.input = layer_input(i, slot, true);
    args.weights = masters + layer.weight_offset;
    args.bias = masters + layer.bias_offset;
    args.low_weights = low ? low_copies_ + static_cast<size_t>(layer.weight_offset) * low_element_bytes_ : nullptr;
    args.low_bias = low ? low_copies_ + static_cast<size_t>(layer.bias_offset) * low_element_bytes_ : nullptr;
    args.weight_grad = gradients ? gradients + scratch_offset : nullptr;
    // The bias right after the weights: in the parameter layout there may be an alignment gap.
    const int64_t bias_after = part == UpdatePart::whole ? layer.bias_offset - layer.weight_offset : layer.weight_count();
    args.bias_grad = gradients ? gradients + scratch_offset + bias_after : nullptr;
    for (int s = 0; s < kMaxOptimizerStates; ++s) {
        args.weight_state[s] = optimizer_states_[s] ? optimizer_states_[s] + layer.weight_offset : nullptr;
        args.bias_state[s] = optimizer_states_[s] ? optimizer_states_[s] + layer.bias_offset : nullptr;
    }
    args.rows = rows;
    args.in_features = layer.padded_inputs;
    args.out_features = layer.padded_units;
    args.compute_dtype = layer_dtypes_[i];
    args.state = state_;
    args.workspace = gemm_workspace_;
    args.part = part;
    return args;
}

TrainState Executor::read_state() const {
    TrainState state;
    backend_.copy_to_host(&state, state_, sizeof state);
    return state;
}

StepReport Executor::read_report() const {
    StepReport report;
    backend_.copy_to_host(&report, report_, sizeof report);
    return report;
}

void Executor::write_state(const TrainState& state) { backend_.copy_to_device(state_, &state, sizeof state); }

void Executor::read_metrics(double* metrics) const {
    backend_.copy_to_host(metrics, metrics_, kMetricsCount * sizeof(double));
}

void Executor::report_async(StepReport* host) const { backend_.copy_to_host_async(host, report_, sizeof(StepReport)); }

void Executor::write_metrics(const double* metrics) {
    double both[2 * kMetricsCount];
    std::copy(metrics, metrics + kMetricsCount, both);
    std::copy(metrics, metrics + kMetricsCount, both + kMetricsCount);
    backend_.copy_to_device(metrics_, both, sizeof both);  // the committed ones follow the running ones
}

void Executor::reset_metrics() { backend_.fill_zero(metrics_, 2 * kMetricsCount * sizeof(double)); }

void Executor::clear_running_metrics() { backend_.fill_zero(metrics_, kMetricsCount * sizeof(double)); }

void Executor::revert_metrics() {
    double committed[kMetricsCount];
    backend_.copy_to_host(committed, committed_metrics_, sizeof committed);
    backend_.copy_to_device(metrics_, committed, sizeof committed);
}

void Executor::read_outputs(float* host, int64_t rows) const {
    std::vector<float> padded(static_cast<size_t>(rows * output_width_));
    backend_.copy_to_host(padded.data(), step_buffer(outputs_), padded.size() * sizeof(float));
    for (int64_t r = 0; r < rows; ++r)
        std::memcpy(host + r * classes_, padded.data() + r * output_width_, static_cast<size_t>(classes_) * sizeof(float));
}

float* Executor::optimizer_state(int index) const { return optimizer_states_[index]; }

}  // namespace mpt
