// test_cuda_ops: the fused loss head (every activation and loss, its metrics, found_inf and
// scaled logits gradient), and the last layer around it in one cluster launch
// (MPTRAIN_CUDA_HEAD_LAYER_CLUSTER), CUDA against the CPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/head_layer_case.h"
#include "cuda_ops/comparisons.h"
#include "cuda_ops/harness.h"
#include "nn/activation.h"
#include "support/loss_head_case.h"
#include "support/normalised_error.h"
#include "support/skip_without_gpu.h"
#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_dense_forward.cuh"
#endif

namespace {

using namespace mpt;
using namespace mpt::testing;
using mpt_test::normalised_error;

using HeadCase = mpt_test::LossHeadCase;

// NaN in the same places of the first `count` elements of both, and those places zeroed there so that
// normalised_error can compare the rest.
bool zero_shared_nans(std::vector<float>& a, std::vector<float>& b, size_t count) {
    bool same = true;
    for (size_t i = 0; i < count; ++i) {
        if (std::isnan(a[i]) != std::isnan(b[i])) same = false;
        else if (std::isnan(a[i])) a[i] = b[i] = 0.0f;
    }
    return same;
}

// nan_column >= 0: row 0's logit there is NaN. The arg-max of a row with a NaN output is the CPU
// loop's on both backends: index 0 when it holds the NaN, else the first largest of the others.
void compare_loss_head_logits(Backend& reference, Backend& candidate, const HeadCase& c, int64_t nan_column) {
    const bool nan_logit = nan_column >= 0;
    CAPTURE(nan_column);
    CAPTURE(static_cast<int>(c.activation));
    CAPTURE(static_cast<int>(c.loss));
    CAPTURE(c.rows);
    CAPTURE(c.classes);
    CAPTURE(std::string(dtype_name(c.gradient_dtype)));
    CAPTURE(c.with_state);
    CAPTURE(c.label_smoothing);
    CAPTURE(c.with_class_weights);
    CAPTURE(c.with_row_weights);
    CAPTURE(c.mean_rows);
    CAPTURE(c.continues_batch);
    const mpt_test::LossHeadInputs in = mpt_test::random_loss_head_inputs(c, random_engine(), nan_column);
    TrainState initial{};
    initial.loss_scale = mpt_test::kLossHeadScale;
    const std::vector<double> initial_metrics(std::begin(mpt_test::kLossHeadInitialMetrics),
                                              std::end(mpt_test::kLossHeadInitialMetrics));

    std::vector<float> gradients[2], probabilities[2];
    std::vector<double> metrics[2];
    TrainState states[2];
    Backend* backends[2] = {&reference, &candidate};
    for (int b = 0; b < 2; ++b) {
        Backend& backend = *backends[b];
        Buffer logits_buffer = upload(backend, DType::fp32, in.logits);
        Buffer labels_buffer = upload_raw(backend, in.labels);
        Buffer targets_buffer = upload(backend, DType::fp32, in.targets);
        Buffer gradient = poisoned(backend, c.gradient_dtype, static_cast<size_t>(c.rows * c.width));
        Buffer probability = poisoned(backend, DType::fp32, static_cast<size_t>(c.rows * c.width));
        Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
        Buffer metric = upload_raw(backend, initial_metrics);
        Buffer weights = upload(backend, DType::fp32, in.class_weights);
        Buffer row_weight_buffer = upload(backend, DType::fp32, in.row_weights);
        const LossHeadArgs args = mpt_test::loss_head_args(
            c, {logits_buffer.as<float>(), labels_buffer.as<int32_t>(), targets_buffer.as<float>(),
                probability.as<float>(), gradient.data(), state.as<TrainState>(), metric.as<double>(),
                weights.as<float>(), row_weight_buffer.as<float>()});
        backend.loss_head(args);
        gradients[b] = download(backend, gradient, c.gradient_dtype, static_cast<size_t>(c.rows * c.width));
        if (c.with_probabilities)
            probabilities[b] = download(backend, probability, DType::fp32, static_cast<size_t>(c.rows * c.width));
        metrics[b] = download_raw<double>(backend, metric, kMetricsCount);
        states[b] = download_raw<TrainState>(backend, state, 1)[0];
    }
    if (nan_logit) {  // row 0's outputs: NaN in the same places (which ones depends on the pair)
        const size_t row = static_cast<size_t>(c.width);
        CHECK(zero_shared_nans(gradients[0], gradients[1], row));
        if (c.with_probabilities) CHECK(zero_shared_nans(probabilities[0], probabilities[1], row));
    }
    CHECK(normalised_error(gradients[1], gradients[0]) <= error_bound(c.gradient_dtype));
    if (c.with_probabilities) CHECK(normalised_error(probabilities[1], probabilities[0]) <= error_bound(DType::fp32));
    if (nan_logit) {  // Approx is false for NaN: NaN-ness itself, on each backend
        for (int b = 0; b < 2; ++b) {
            CAPTURE(b);
            CHECK(std::isnan(metrics[b][kMetricLossSum]));
            CHECK(std::isnan(metrics[b][kMetricBatchLoss]));
            CHECK(states[b].found_inf == 1);
        }
    } else {
        CHECK(metrics[1][kMetricLossSum] == doctest::Approx(metrics[0][kMetricLossSum]).epsilon(1e-5));
        CHECK(metrics[1][kMetricBatchLoss] == doctest::Approx(metrics[0][kMetricBatchLoss]).epsilon(1e-5));
    }
    CHECK(metrics[1][kMetricCorrect] == metrics[0][kMetricCorrect]);
    CHECK(metrics[1][kMetricCounted] == metrics[0][kMetricCounted]);
    CHECK(states[1].found_inf == states[0].found_inf);
}

// Each case as given, then with a NaN logit in row 0 and a state, so that found_inf can be raised:
// in column 0 and, with more classes, in column 1 (an element-wise head keeps the row's other
// outputs, and the arg-max must pass over the NaN as the CPU's loop does).
void compare_loss_head(Backend& reference, Backend& candidate, const HeadCase& c) {
    compare_loss_head_logits(reference, candidate, c, -1);
    HeadCase nan_case = c;
    nan_case.with_state = true;
    compare_loss_head_logits(reference, candidate, nan_case, 0);
    if (c.classes > 1) compare_loss_head_logits(reference, candidate, nan_case, 1);
}

// The last layer of a step as a compute task: the step's begin_step, the layer's forward, its loss
// head and its input gradient, as the trainer issues them (recorded on CUDA, where the head layer in a
// cluster takes the last three and the head clears found_inf in the begin_step's place).
struct HeadLayerTask {
    Backend* backend;
    DenseForwardArgs below;  // the layer below's forward, where it writes the layer's input in the task
    DenseForwardArgs forward;
    LossHeadArgs head;
    DenseBackwardDataArgs data;
    bool maxima_taken = false;  // what dense_backward_data answered
};

void run_head_layer_task(void* argument) {
    HeadLayerTask& task = *static_cast<HeadLayerTask*>(argument);
    task.backend->begin_step(task.head.state);
    if (task.below.output) task.backend->dense_forward(task.below);
    task.backend->dense_forward(task.forward);
    task.backend->loss_head(task.head);
    task.maxima_taken = task.backend->dense_backward_data(task.data);
}

struct HeadLayerCase {
    Activation activation;  // the head's
    LossKind loss;
    Activation previous;  // the layer below's (its output is the layer's input)
    int64_t rows, in_features, width, classes;
    DType compute;
    float label_smoothing = 0.0f;
    bool with_class_weights = false;
    // The forward reads a copy of the layer below's outputs (as after a dropout there), the input
    // gradient's activation derivative the outputs themselves.
    bool dropped_input = false;
    bool fp32_input_grad = false;  // the layer below kept in fp32 (else its gradient has the compute dtype)
    bool maxima = false;           // the backward asked for max|dZ_prev| and max|A_prev|
    bool row_weights = false;
    // The layer below runs in the task (ReLU, its forward writing its mask where the backend keeps one),
    // its outputs the layer's input: the input gradient's derivative then comes from that mask, as
    // the DRELU plan reads it.
    bool forward_below = false;
};

// The case's ops recorded on `candidate` (on CUDA, MPTRAIN_CUDA_HEAD_LAYER_CLUSTER's path where
// `fused` says the launch takes them: one more such launch counted) against `reference` (the CPU)
// issuing them: the logits, the metrics and found_inf, the logits gradient, the input gradient and,
// where asked and taken, the maxima (each side's exactly those of its own arrays).
void compare_head_layer(Backend& reference, Backend& candidate, const HeadLayerCase& c, bool fused) {
    CAPTURE(static_cast<int>(c.activation));
    CAPTURE(static_cast<int>(c.loss));
    CAPTURE(static_cast<int>(c.previous));
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.width);
    CAPTURE(std::string(dtype_name(c.compute)));
    // The layer below's outputs, as its activation leaves them (non-negative after a ReLU, some zeros).
    std::vector<float> input = random_values(static_cast<size_t>(c.rows * c.in_features), -1, 1);
    for (float& value : input) value = activation_forward(c.previous, value);
    input = rounded(input, c.compute);
    std::vector<float> dropped = input;
    if (c.dropped_input)
        for (size_t i = 0; i < dropped.size(); ++i)
            dropped[i] = i % 3 == 0 ? 0.0f : rounded({2.0f * input[i]}, c.compute)[0];
    const DType input_grad_dtype = c.fp32_input_grad ? DType::fp32 : c.compute;
    // Padded outputs' weights and bias are zero, as the model keeps them: cuBLASLt's forward computes
    // the padded columns, the CPU and the cluster's launch write 0 there.
    const std::vector<float> weights = rounded(padded_weights(c.width, c.in_features, c.classes, 0.3f), c.compute);
    std::vector<float> bias = random_values(static_cast<size_t>(c.width), -0.5f, 0.5f);
    std::fill(bias.begin() + c.classes, bias.end(), 0.0f);
    const std::vector<float> class_weights = random_values(static_cast<size_t>(c.classes), 0, 3);
    const std::vector<float> row_weights = random_values(static_cast<size_t>(c.rows), 0, 2);
    std::uniform_int_distribution<int32_t> label_distribution(0, static_cast<int32_t>(c.classes - 1));
    std::vector<int32_t> labels(static_cast<size_t>(c.rows));
    for (int32_t& label : labels) label = label_distribution(random_engine());
    const std::vector<float> targets = random_values(static_cast<size_t>(c.rows * c.classes), 0, 1);
    const bool sparse = loss_uses_labels(c.loss);
    constexpr int64_t kBelowInputs = 64;
    const std::vector<float> below_input =
        rounded(random_values(static_cast<size_t>(c.rows * kBelowInputs), -1, 1), c.compute);
    const std::vector<float> below_weights =
        rounded(random_values(static_cast<size_t>(c.in_features * kBelowInputs), -0.3f, 0.3f), c.compute);
    const std::vector<float> below_bias = random_values(static_cast<size_t>(c.in_features), -0.1f, 0.1f);
    std::vector<float> inputs[2] = {input, input};  // each side's (its own forward's, with forward_below)
    TrainState initial{};
    initial.loss_scale = 1024.0f;
    initial.found_inf = 1;  // as a skipped step leaves it: the step's head must clear it

    std::vector<float> logits[2], logits_grads[2], input_grads[2], maxima[2];
    std::vector<double> metrics[2];
    TrainState states[2];
    bool taken[2] = {false, false};
    std::vector<uint8_t> below_mask;  // the candidate's forward below wrote it, where it wrote one
    Backend* backends[2] = {&reference, &candidate};
#if defined(MPTRAIN_WITH_CUDA)
    const bool counted = candidate.kind() == BackendKind::cuda;
    uint64_t fused_before = 0;
#endif
    // The candidate runs twice, each time over new buffers, and the second run is compared: a shape's
    // first run on CUDA may grow the backend's fp32 scratch (planning an unfused backward), which issues
    // the ops recorded before it one by one, unfused. A training step's later runs find it grown.
    for (int run = 0; run < 3; ++run) {
        const int b = run == 0 ? 0 : 1;
#if defined(MPTRAIN_WITH_CUDA)
        if (run == 2 && counted) fused_before = cuda_backend_op_paths(candidate).head_layers_in_cluster;
#endif
        Backend& backend = *backends[b];
        WorkspaceBuffer workspace(backend);
        Buffer input_buffer =
            c.forward_below ? poisoned(backend, c.compute, input.size()) : upload(backend, c.compute, input);
        Buffer below_input_buffer = upload(backend, c.compute, below_input);
        Buffer below_weight_buffer = upload(backend, c.compute, below_weights);
        Buffer below_bias_buffer = upload(backend, c.compute, below_bias);
        const size_t mask_bytes = backend.relu_mask_bytes(c.rows, c.in_features);
        Buffer mask_buffer = upload_raw(backend, std::vector<uint8_t>(std::max<size_t>(mask_bytes, 1), 0xa5));
        Buffer dropped_buffer = upload(backend, c.compute, dropped);
        Buffer weight_buffer = upload(backend, c.compute, weights);
        Buffer bias_buffer = upload(backend, DType::fp32, bias);
        Buffer logits_buffer = poisoned(backend, DType::fp32, static_cast<size_t>(c.rows * c.width));
        Buffer labels_buffer = upload_raw(backend, labels);
        Buffer targets_buffer = upload(backend, DType::fp32, targets);
        Buffer class_weight_buffer = upload(backend, DType::fp32, class_weights);
        Buffer row_weight_buffer = upload(backend, DType::fp32, row_weights);
        Buffer logits_grad = poisoned(backend, c.compute, static_cast<size_t>(c.rows * c.width));
        Buffer input_grad = poisoned(backend, input_grad_dtype, static_cast<size_t>(c.rows * c.in_features));
        Buffer maxima_buffer = poisoned(backend, DType::fp32, 3);
        Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
        Buffer metric = upload_raw(backend, std::vector<double>{1.5, 2.0, 3.0, 4.0});
        HeadLayerTask task{};
        task.backend = &backend;
        if (c.forward_below) {
            DenseForwardArgs& below = task.below;
            below.input = below_input_buffer.data();
            below.weights = below_weight_buffer.data();
            below.bias = below_bias_buffer.data();
            below.output = input_buffer.data();
            below.relu_mask = mask_bytes ? mask_buffer.data() : nullptr;
            below.rows = c.rows;
            below.in_features = kBelowInputs;
            below.out_features = below.valid_out = c.in_features;
            below.activation = Activation::relu;
            below.compute_dtype = below.bias_dtype = below.output_dtype = c.compute;
            below.workspace = workspace.workspace();
        }
        DenseForwardArgs& forward = task.forward;
        forward.input = c.dropped_input ? dropped_buffer.data() : input_buffer.data();
        forward.weights = weight_buffer.data();
        forward.bias = bias_buffer.data();
        forward.output = logits_buffer.data();
        forward.rows = c.rows;
        forward.in_features = c.in_features;
        forward.out_features = c.width;
        forward.valid_out = c.classes;
        forward.activation = Activation::linear;
        forward.compute_dtype = c.compute;
        forward.bias_dtype = DType::fp32;
        forward.output_dtype = DType::fp32;
        forward.workspace = workspace.workspace();
        LossHeadArgs& head = task.head;
        head.logits = logits_buffer.as<float>();
        head.labels = sparse ? labels_buffer.as<int32_t>() : nullptr;
        head.targets = sparse ? nullptr : targets_buffer.as<float>();
        head.logits_grad = logits_grad.data();
        head.state = state.as<TrainState>();
        head.metrics = metric.as<double>();
        head.rows = c.rows;
        head.width = c.width;
        head.classes = c.classes;
        head.activation = c.activation;
        head.loss = c.loss;
        head.label_smoothing = c.label_smoothing;
        head.huber_delta = 0.5f;
        head.class_weights = c.with_class_weights ? class_weight_buffer.as<float>() : nullptr;
        head.row_weights = c.row_weights ? row_weight_buffer.as<float>() : nullptr;
        head.logits_grad_dtype = c.compute;
        DenseBackwardDataArgs& data = task.data;
        data.output_grad = logits_grad.data();
        data.weights = weight_buffer.data();
        data.input = input_buffer.data();
        data.input_grad = input_grad.data();
        data.rows = c.rows;
        data.in_features = c.in_features;
        data.out_features = c.width;
        data.input_activation = c.previous;
        data.compute_dtype = c.compute;
        data.input_grad_dtype = input_grad_dtype;
        data.workspace = workspace.workspace();
        data.relu_mask = task.below.relu_mask;
        if (c.maxima) {
            data.input_grad_max_abs = maxima_buffer.as<float>();
            data.input_max_abs = maxima_buffer.as<float>() + 1;
            head.logits_grad_max_abs = maxima_buffer.as<float>() + 2;  // every head takes it
        }
        backend.scheduler().submit(Lane::compute, &run_head_layer_task, &task);
        backend.scheduler().synchronize();
        logits[b] = download(backend, logits_buffer, DType::fp32, static_cast<size_t>(c.rows * c.width));
        logits_grads[b] = download(backend, logits_grad, c.compute, static_cast<size_t>(c.rows * c.width));
        input_grads[b] = download(backend, input_grad, input_grad_dtype, static_cast<size_t>(c.rows * c.in_features));
        maxima[b] = download(backend, maxima_buffer, DType::fp32, 3);
        metrics[b] = download_raw<double>(backend, metric, kMetricsCount);
        states[b] = download_raw<TrainState>(backend, state, 1)[0];
        taken[b] = task.maxima_taken;
        if (c.forward_below) inputs[b] = download(backend, input_buffer, c.compute, input.size());
        if (c.forward_below && mask_bytes) below_mask = download_raw<uint8_t>(backend, mask_buffer, mask_bytes);
    }
#if defined(MPTRAIN_WITH_CUDA)
    if (counted) {
        CHECK(cuda_backend_op_paths(candidate).head_layers_in_cluster == fused_before + (fused ? 1u : 0u));
        // The launch takes the maxima wherever asked (the DRELU plan alone takes none).
        if (fused && c.maxima) CHECK(taken[1]);
        // Its input gradient exactly as its order of sums gives it from the logits gradient it wrote (in
        // the compute dtype; every block's the same): a thread's fused multiply-adds over the outputs in
        // order, ReLU's derivative selecting, rounded once. ReLU's derivative is the forward's mask bit
        // where it wrote a mask (a pre-activation within 2^-25 above 0 is stored as an output of 0 but
        // keeps its bit), else whether the output is positive. (Below ReLU or a linear layer: another
        // activation's derivative may round otherwise on the device, whose compiler contracts it.)
        if (fused && (c.previous == Activation::relu || c.previous == Activation::linear)) {
            const int64_t mask_ld_bits = relu_mask_ld_bits(c.in_features);
            std::vector<float> expected(input_grads[1].size());
            for (int64_t r = 0; r < c.rows; ++r)
                for (int64_t k = 0; k < c.in_features; ++k) {
                    float sum = 0.0f;
                    for (int64_t o = 0; o < c.width; ++o)
                        sum = std::fma(logits_grads[1][static_cast<size_t>(r * c.width + o)],
                                       weights[static_cast<size_t>(o * c.in_features + k)], sum);
                    const float output = inputs[1][static_cast<size_t>(r * c.in_features + k)];
                    const int64_t bit = small_batch_mma::mask_bit(k, r, mask_ld_bits);  // cuBLASLt's format
                    const bool positive = below_mask.empty()
                                              ? output > 0.0f
                                              : ((below_mask[static_cast<size_t>(bit / 8)] >> (bit % 8)) & 1) != 0;
                    const float value = c.previous == Activation::linear || positive ? sum : 0.0f;
                    expected[static_cast<size_t>(r * c.in_features + k)] = rounded({value}, input_grad_dtype)[0];
                }
            size_t differing = 0;
            for (size_t i = 0; i < expected.size(); ++i) differing += expected[i] == input_grads[1][i] ? 0 : 1;
            CHECK(differing == 0);
        }
    }
#else
    (void)fused;
#endif
    CHECK(normalised_error(logits[1], logits[0]) <= error_bound(DType::fp32));
    CHECK(normalised_error(logits_grads[1], logits_grads[0]) <= error_bound(c.compute));
    // The input gradient comes from the logits gradient in the compute dtype: where the two sides'
    // logits differ in their last bit, an element of it may round the other way.
    CHECK(normalised_error(input_grads[1], input_grads[0]) <= error_bound(c.compute));
    CHECK(metrics[1][kMetricLossSum] == doctest::Approx(metrics[0][kMetricLossSum]).epsilon(1e-4));
    CHECK(metrics[1][kMetricBatchLoss] == doctest::Approx(metrics[0][kMetricBatchLoss]).epsilon(1e-4));
    CHECK(metrics[1][kMetricCounted] == metrics[0][kMetricCounted]);
    CHECK(std::abs(metrics[1][kMetricCorrect] - metrics[0][kMetricCorrect]) <= 1.0);  // a near tie may go either way
    CHECK(states[0].found_inf == 0);  // finite logits, and the step's head cleared it
    CHECK(states[1].found_inf == states[0].found_inf);
    // Each side's maxima are its own arrays' largest magnitudes, exactly (as max_abs would give them):
    // the logits gradient's always (the head's, in the cluster's launch or its own), the others where
    // the backward took them.
    for (int b = 0; b < 2 && c.maxima; ++b) {
        CAPTURE(b);
        float logits_grad_largest = 0.0f;
        for (float value : logits_grads[b]) logits_grad_largest = std::max(logits_grad_largest, std::fabs(value));
        CHECK(maxima[b][2] == logits_grad_largest);
        if (!taken[b]) continue;
        float gradient_largest = 0.0f, input_largest = 0.0f;
        for (float value : input_grads[b]) gradient_largest = std::max(gradient_largest, std::fabs(value));
        for (float value : inputs[b]) input_largest = std::max(input_largest, std::fabs(value));
        CHECK(maxima[b][0] == gradient_largest);
        CHECK(maxima[b][1] == input_largest);
    }
}

}  // namespace

namespace mpt::testing {

void compare_loss_head_cases(Backend& reference, Backend& candidate) {
    for (DType dtype : kDTypes) {
        compare_loss_head(reference, candidate,
                          {Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, dtype, true, false});
        compare_loss_head(reference, candidate,
                          {Activation::linear, LossKind::sparse_categorical_crossentropy, 40, 16, 10, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::softmax, LossKind::categorical_crossentropy, 33, 8, 5, dtype, false, true});
        compare_loss_head(reference, candidate,
                          {Activation::sigmoid, LossKind::categorical_crossentropy, 33, 8, 5, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::sigmoid, LossKind::binary_crossentropy, 50, 8, 3, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::softmax, LossKind::binary_crossentropy, 50, 8, 3, dtype, false, true});
        compare_loss_head(reference, candidate,
                          {Activation::tanh, LossKind::binary_crossentropy, 20, 8, 4, dtype, false, false});
        compare_loss_head(reference, candidate,
                          {Activation::linear, LossKind::mean_squared_error, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::softmax, LossKind::mean_squared_error, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::sigmoid, LossKind::mean_squared_error, 31, 8, 1, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::linear, LossKind::mean_absolute_error, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::tanh, LossKind::mean_absolute_error, 31, 8, 1, dtype, true, false});
        compare_loss_head(reference, candidate, {Activation::linear, LossKind::huber, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate, {Activation::softmax, LossKind::huber, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate, {Activation::sigmoid, LossKind::huber, 31, 8, 1, dtype, false, true});
        // The activations without an epilogue, as the last layer: applied and differentiated in the head.
        compare_loss_head(reference, candidate,
                          {Activation::softplus, LossKind::mean_squared_error, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate, {Activation::elu, LossKind::huber, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::selu, LossKind::mean_absolute_error, 31, 8, 3, dtype, true, false});
        compare_loss_head(reference, candidate,
                          {Activation::leaky_relu, LossKind::mean_squared_error, 31, 8, 1, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::softsign, LossKind::binary_crossentropy, 20, 8, 4, dtype, false, false});
    }
    // Rows wider than a warp (more than 32 columns), where a lane loops over its classes: every
    // head case, in one block (32 rows at most) and in several.
    compare_loss_head(
        reference, candidate,
        {Activation::softmax, LossKind::sparse_categorical_crossentropy, 29, 48, 40, DType::bf16, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::sigmoid, LossKind::categorical_crossentropy, 45, 40, 33, DType::fp16, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::sigmoid, LossKind::binary_crossentropy, 20, 40, 36, DType::fp32, true, false});
    compare_loss_head(reference, candidate,
                      {Activation::tanh, LossKind::binary_crossentropy, 40, 64, 50, DType::bf16, false, true});
    compare_loss_head(reference, candidate,
                      {Activation::linear, LossKind::mean_squared_error, 31, 72, 65, DType::fp32, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::huber, 37, 40, 40, DType::fp16, true, true});
    // Label smoothing in every cross-entropy form (logits, renormalised, softplus, clipped).
    for (const HeadCase& smoothed :
         {HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, DType::bf16, true, true, 0.1f},
          HeadCase{Activation::linear, LossKind::categorical_crossentropy, 33, 8, 5, DType::fp16, true, false, 0.2f},
          HeadCase{Activation::sigmoid, LossKind::categorical_crossentropy, 33, 8, 5, DType::fp32, true, true, 0.1f},
          HeadCase{Activation::sigmoid, LossKind::binary_crossentropy, 50, 8, 3, DType::bf16, true, true, 0.3f},
          HeadCase{Activation::tanh, LossKind::binary_crossentropy, 20, 8, 4, DType::fp32, false, false, 0.05f},
          HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 300, 104, 100, DType::fp32, true, true,
                   0.1f}})
        compare_loss_head(reference, candidate, smoothed);
    // Class weights in every categorical form, with and without smoothing.
    for (const HeadCase& weighted :
         {HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, DType::bf16, true, true, 0.0f, true},
          HeadCase{Activation::linear, LossKind::sparse_categorical_crossentropy, 40, 16, 10, DType::fp16, true, false, 0.1f, true},
          HeadCase{Activation::softmax, LossKind::categorical_crossentropy, 33, 8, 5, DType::fp32, true, true, 0.0f, true},
          HeadCase{Activation::sigmoid, LossKind::categorical_crossentropy, 33, 8, 5, DType::bf16, true, true, 0.2f, true},
          HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 300, 104, 100, DType::fp32, true, false,
                   0.0f, true}})
        compare_loss_head(reference, candidate, weighted);
    // Row weights (a weighted dataset's) with every loss, alone and after class weights.
    for (HeadCase row_weighted :
         {HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, DType::bf16, true, true},
          HeadCase{Activation::linear, LossKind::categorical_crossentropy, 40, 16, 10, DType::fp16, true, false, 0.1f, true},
          HeadCase{Activation::sigmoid, LossKind::categorical_crossentropy, 33, 8, 5, DType::fp32, true, true, 0.0f, true},
          HeadCase{Activation::sigmoid, LossKind::binary_crossentropy, 50, 8, 3, DType::bf16, true, true},
          HeadCase{Activation::tanh, LossKind::binary_crossentropy, 20, 8, 4, DType::fp32, false, false},
          HeadCase{Activation::linear, LossKind::mean_squared_error, 31, 8, 7, DType::fp16, true, true},
          HeadCase{Activation::linear, LossKind::mean_absolute_error, 31, 8, 7, DType::bf16, true, true},
          HeadCase{Activation::linear, LossKind::huber, 31, 8, 7, DType::fp32, true, true},
          HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 300, 104, 100, DType::fp32, true, false,
                   0.0f, true}}) {
        row_weighted.with_row_weights = true;
        compare_loss_head(reference, candidate, row_weighted);
    }
    // Micro-batches' heads (gradient accumulation): the mean over their whole batch's rows, the batch
    // loss set by the first and added to by the others.
    for (HeadCase micro :
         {HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, DType::bf16, true, true},
          HeadCase{Activation::linear, LossKind::mean_squared_error, 31, 8, 7, DType::fp16, true, true},
          HeadCase{Activation::sigmoid, LossKind::binary_crossentropy, 50, 8, 3, DType::fp32, true, false, 0.1f}}) {
        micro.mean_rows = 3 * micro.rows + 5;
        for (bool continues : {false, true}) {
            micro.continues_batch = continues;
            compare_loss_head(reference, candidate, micro);
        }
    }
    // Wide heads (several classes per lane) and many rows (several blocks).
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::sparse_categorical_crossentropy, 300, 104, 100, DType::bf16, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::sparse_categorical_crossentropy, 4096, 16, 10, DType::fp16, true, false});
    // Past 2048 rows with a ragged class count (33 in 40 padded units), and 1000 classes (32 a lane).
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::sparse_categorical_crossentropy, 2100, 40, 33, DType::fp16, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::linear, LossKind::categorical_crossentropy, 2100, 40, 33, DType::bf16, true, false, 0.1f});
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::sparse_categorical_crossentropy, 2050, 1000, 1000, DType::bf16, true,
                       true, 0.0f, true});
}

// The cases, each with whether MPTRAIN_CUDA_HEAD_LAYER_CLUSTER's launch takes it on a device whose
// clusters hold `max_blocks` blocks (8 with clusters, 1 without): the seed MLP's last layer at batch
// 32 (8 blocks of 128 inputs, the last of 104) with its maxima, other heads (sigmoid with binary
// cross-entropy, a regression through a linear output of one column, label smoothing with class
// weights, row weights) over other layers below, a single row, a dropout below (the forward reading
// the dropped copy, the derivative the outputs) with the layer below in fp32, 33 to 64 rows (a warp's
// several rows in the head), 32 classes, the layer below run in the task (its ReLU mask read); and the
// shapes it does not take (fp32, 65 rows, 40 padded
// outputs, inputs not a multiple of 8, 9 blocks' worth), which run as before.
void compare_head_layer_cases(Backend& reference, Backend& candidate, int max_blocks) {
    const auto takes = [max_blocks](const HeadLayerCase& c) {
        return c.compute != DType::fp32 && c.rows <= kHeadLayerMaxRows && c.width <= kHeadLayerMaxWidth &&
               c.in_features % 8 == 0 && head_layer_blocks(c.in_features) <= max_blocks;
    };
    const auto compare = [&](const HeadLayerCase& c) { compare_head_layer(reference, candidate, c, takes(c)); };
    const Activation softmax = Activation::softmax, relu = Activation::relu;
    const LossKind sparse = LossKind::sparse_categorical_crossentropy;
    for (DType dtype : kDTypes) {
        HeadLayerCase seed{softmax, sparse, relu, 32, 1000, 16, 10, dtype};
        seed.maxima = true;
        compare(seed);
        compare({Activation::sigmoid, LossKind::binary_crossentropy, Activation::tanh, 17, 40, 8, 3, dtype});
        HeadLayerCase regression{
            Activation::linear, LossKind::mean_squared_error, Activation::linear, 9, 40, 1, 1, dtype};
        regression.maxima = true;
        compare(regression);
        compare({softmax, sparse, relu, 1, 200, 16, 10, dtype});
        compare({softmax, sparse, relu, 24, 1000, 16, 10, dtype, 0.0f, false, true, true});
        compare({Activation::sigmoid, LossKind::binary_crossentropy, relu, 40, 72, 8, 2, dtype});
        HeadLayerCase weighted{softmax, sparse, relu, 64, 1000, 16, 10, dtype, 0.1f, true};
        weighted.row_weights = true;
        weighted.maxima = true;
        compare(weighted);
        compare(
            {softmax, LossKind::categorical_crossentropy, Activation::leaky_relu, 5, 72, 16, 12, dtype, 0.1f, true});
        compare({softmax, sparse, Activation::elu, 48, 256, 32, 32, dtype});
        HeadLayerCase masked{softmax, sparse, relu, 32, 1000, 16, 10, dtype};
        masked.forward_below = true;
        compare(masked);
        masked.maxima = true;
        masked.rows = 20;
        compare(masked);
    }
    // 5 blocks, the last share 8 inputs.
    compare({softmax, sparse, relu, 24, 520, 16, 10, DType::bf16});
    compare({Activation::sigmoid, LossKind::binary_crossentropy, Activation::tanh, 7, 520, 4, 4, DType::fp16});
    compare({softmax, sparse, relu, 65, 1000, 16, 10, DType::bf16});
    compare({softmax, sparse, relu, 32, 64, 40, 10, DType::bf16});
    compare({softmax, sparse, relu, 32, 1036, 16, 10, DType::bf16});
    compare({softmax, sparse, relu, 32, 1032, 16, 10, DType::bf16});
}

}  // namespace mpt::testing

TEST_CASE("the CUDA loss head matches the CPU for every activation and loss") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_loss_head_cases(*cpu, *cuda);
}

#if defined(MPTRAIN_WITH_CUDA)
// MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1: a recorded step's last layer (forward and input gradient) in its
// loss head's launch, K split across a cluster's blocks, the step's begin_step folded into it, against
// the CPU issuing the ops (compare_head_layer_cases: the seed MLP's last layer in 8 blocks, other heads
// and layers below, 1 to 64 rows, the maxima; and the shapes it leaves to the separate launches). On a
// device without clusters only the layers of at most 128 inputs take it.
TEST_CASE(
    "CUDA head layer in a cluster matches the CPU, and leaves the shapes it does not take to the separate launches") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    cuda_backend_set_graphs(*cuda, true);
    cuda_backend_set_head_layer_cluster(*cuda, true);
    const int max_blocks = cuda_backend_head_layer_max_blocks(*cuda);
    MESSAGE("the head layer's clusters hold " << max_blocks << " block(s) here");
    compare_head_layer_cases(*cpu, *cuda, max_blocks);
}
#endif
