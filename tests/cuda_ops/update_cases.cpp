// test_cuda_ops: the optimizer updates (dense_update for every optimizer, plain SGD into the
// masters, fused SGD and its 32-row, bulk-copy and grouped launches), the global norm's clip
// factor and the weight average, CUDA against the CPU; and a skipped step writing nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_ops/comparisons.h"
#include "cuda_ops/harness.h"
#include "support/normalised_error.h"
#include "support/skip_without_gpu.h"
#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace {

using namespace mpt;
using namespace mpt::testing;
using mpt_test::normalised_error;

// How many elements of a and b differ by more than `tolerance`.
int64_t count_differing(const std::vector<float>& a, const std::vector<float>& b, float tolerance) {
    int64_t count = 0;
    for (size_t i = 0; i < a.size(); ++i) count += !(std::fabs(a[i] - b[i]) <= tolerance);
    return count;
}

struct UpdateCase {
    int64_t rows, in_features, out_features;
    DType dtype;
    OptimizerConfig optimizer;
    bool skipped;  // found_inf already set: nothing may change
    // In parts, as a clipped step runs it: UpdatePart::gradient, then UpdatePart::apply times this
    // factor (device memory). 0: whole.
    float gradient_factor = 0.0f;
    // In parts, as gradient accumulation runs them: this many UpdatePart::accumulate between the
    // gradient and the apply, each adding the gradient of another batch (the first's times 1 - k/4).
    int accumulations = 0;
    // A skipped step's dZ and A_prev with inf and NaN in them, as an overflowing fp16 step leaves them.
    bool non_finite_inputs = false;
};

// Plain SGD with the weight decay the update cases use: a rate times 0.05 off every weight a step.
OptimizerConfig decayed_sgd() {
    OptimizerConfig optimizer;
    optimizer.weight_decay = 0.05f;
    return optimizer;
}

// One layer's dense_update, twice in a row (so optimizer state carries over), from the same masters,
// gradients and state on both backends: the change of the masters, the optimizer state, the
// low-precision copies compared; a skipped update must leave every byte as it was.
void compare_dense_update(Backend& reference, Backend& candidate, const UpdateCase& c) {
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.out_features);
    CAPTURE(std::string(dtype_name(c.dtype)));
    CAPTURE(static_cast<int>(c.optimizer.kind));
    CAPTURE(c.optimizer.momentum);
    CAPTURE(c.optimizer.nesterov);
    CAPTURE(c.optimizer.centered);
    CAPTURE(c.optimizer.weight_decay);
    CAPTURE(c.skipped);
    CAPTURE(c.gradient_factor);
    CAPTURE(c.accumulations);
    CAPTURE(c.non_finite_inputs);
    const int64_t weight_count = c.out_features * c.in_features;
    const bool parts = c.gradient_factor != 0.0f;
    TrainState initial{};
    initial.loss_scale = 512.0f;
    initial.found_inf = c.skipped ? 1 : 0;
    initial.applied_steps = 3;
    std::vector<float> output_grad = random_values(static_cast<size_t>(c.rows * c.out_features), -1, 1);
    for (float& g : output_grad) g *= initial.loss_scale / static_cast<float>(c.rows);  // scaled, as from the head
    output_grad = rounded(output_grad, c.dtype);
    std::vector<float> input = rounded(random_values(static_cast<size_t>(c.rows * c.in_features), 0, 1), c.dtype);
    if (c.non_finite_inputs) {
        REQUIRE(c.skipped);
        output_grad.front() = INFINITY;
        output_grad[output_grad.size() / 2] = NAN;
        input[1] = NAN;
        input.back() = -INFINITY;
    }
    const std::vector<float> weights = random_values(static_cast<size_t>(weight_count), -0.5f, 0.5f);
    const std::vector<float> bias = random_values(static_cast<size_t>(c.out_features), -0.1f, 0.1f);
    const int states = optimizer_state_count(c.optimizer);
    const bool plain_sgd = is_plain_sgd(c.optimizer);
    const bool low = c.dtype != DType::fp32;

    std::vector<float> weight_results[2], bias_results[2], state_results[2][kMaxOptimizerStates],
        bias_state_results[2][kMaxOptimizerStates],
        low_weight_results[2], low_bias_results[2];
    Backend* backends[2] = {&reference, &candidate};
    for (int b = 0; b < 2; ++b) {
        Backend& backend = *backends[b];
        Buffer output_grad_buffer = upload(backend, c.dtype, output_grad);
        Buffer input_buffer = upload(backend, c.dtype, input);
        Buffer weight_buffer = upload(backend, DType::fp32, weights);
        Buffer bias_buffer = upload(backend, DType::fp32, bias);
        Buffer low_weights = poisoned(backend, c.dtype, static_cast<size_t>(weight_count));
        Buffer low_bias = poisoned(backend, c.dtype, static_cast<size_t>(c.out_features));
        Buffer scratch = poisoned(backend, DType::fp32, static_cast<size_t>(weight_count + 256 + c.out_features));
        const std::vector<float> zeros(static_cast<size_t>(weight_count), 0.0f);
        const std::vector<float> bias_zeros(static_cast<size_t>(c.out_features), 0.0f);
        Buffer weight_states[kMaxOptimizerStates] = {upload(backend, DType::fp32, zeros), upload(backend, DType::fp32, zeros),
                                                     upload(backend, DType::fp32, zeros)};
        Buffer bias_states[kMaxOptimizerStates] = {upload(backend, DType::fp32, bias_zeros),
                                                   upload(backend, DType::fp32, bias_zeros),
                                                   upload(backend, DType::fp32, bias_zeros)};
        Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
        Buffer factor = upload(backend, DType::fp32, std::vector<float>{c.gradient_factor});
        const WorkspaceBuffer workspace(backend);
        DenseUpdateArgs args{};
        args.output_grad = output_grad_buffer.data();
        args.input = input_buffer.data();
        args.weights = weight_buffer.as<float>();
        args.bias = bias_buffer.as<float>();
        args.low_weights = low ? low_weights.data() : nullptr;
        args.low_bias = low ? low_bias.data() : nullptr;
        args.weight_grad = plain_sgd && !parts ? nullptr : scratch.as<float>();
        args.bias_grad = plain_sgd && !parts ? nullptr : scratch.as<float>() + weight_count + 256;
        for (int k = 0; k < kMaxOptimizerStates; ++k) {
            args.weight_state[k] = k < states ? weight_states[k].as<float>() : nullptr;
            args.bias_state[k] = k < states ? bias_states[k].as<float>() : nullptr;
        }
        args.rows = c.rows;
        args.in_features = c.in_features;
        args.out_features = c.out_features;
        args.compute_dtype = c.dtype;
        args.state = state.as<TrainState>();
        args.workspace = workspace.workspace();
        for (int update = 0; update < 2; ++update) {
            if (parts) {
                args.part = UpdatePart::gradient;
                args.gradient_factor = nullptr;
                backend.dense_update(args, c.optimizer);
                for (int k = 1; k <= c.accumulations; ++k) {
                    std::vector<float> other = output_grad;
                    for (float& g : other) g *= 1.0f - static_cast<float>(k) / 4.0f;
                    Buffer other_buffer = upload(backend, c.dtype, rounded(other, c.dtype));
                    args.output_grad = other_buffer.data();
                    args.part = UpdatePart::accumulate;
                    backend.dense_update(args, c.optimizer);
                    args.output_grad = output_grad_buffer.data();
                }
                args.part = UpdatePart::apply;
                args.gradient_factor = factor.as<float>();
            }
            backend.dense_update(args, c.optimizer);
        }
        weight_results[b] = download(backend, weight_buffer, DType::fp32, static_cast<size_t>(weight_count));
        bias_results[b] = download(backend, bias_buffer, DType::fp32, static_cast<size_t>(c.out_features));
        for (int k = 0; k < states; ++k) {
            state_results[b][k] = download(backend, weight_states[k], DType::fp32, static_cast<size_t>(weight_count));
            bias_state_results[b][k] = download(backend, bias_states[k], DType::fp32, static_cast<size_t>(c.out_features));
        }
        if (low) {
            low_weight_results[b] = download(backend, low_weights, c.dtype, static_cast<size_t>(weight_count));
            low_bias_results[b] = download(backend, low_bias, c.dtype, static_cast<size_t>(c.out_features));
        }
    }
    if (c.skipped) {
        for (int b = 0; b < 2; ++b) {
            CHECK(std::memcmp(weight_results[b].data(), weights.data(), weights.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(bias_results[b].data(), bias.data(), bias.size() * sizeof(float)) == 0);
            const auto zero = [](float v) { return v == 0.0f; };
            for (int k = 0; k < states; ++k) {
                CHECK(std::all_of(state_results[b][k].begin(), state_results[b][k].end(), zero));
                CHECK(std::all_of(bias_state_results[b][k].begin(), bias_state_results[b][k].end(), zero));
            }
            if (low) {  // still the poison: not a byte written
                const auto poison = [](float v) { return std::isnan(v); };
                CHECK(std::all_of(low_weight_results[b].begin(), low_weight_results[b].end(), poison));
                CHECK(std::all_of(low_bias_results[b].begin(), low_bias_results[b].end(), poison));
            }
        }
        return;
    }
    // What the update changed, compared (the masters themselves would hide a wrong small step).
    const OptimizerKind kind = c.optimizer.kind;
    if (kind == OptimizerKind::lion || kind == OptimizerKind::adam || kind == OptimizerKind::adamw ||
        kind == OptimizerKind::rmsprop) {
        // Every Lion step is the rate times a sign (and decay), and so, nearly, are Adam's and
        // RMSprop's first steps from zero state (g / (|g| + eps)): the same steps, but where a
        // gradient (or Lion's interpolation) lies within rounding of 0 the backends' sums, taken in
        // another order, may give it other signs. At most one parameter in 1,000 may differ.
        const float tolerance = 1e-3f * c.optimizer.learning_rate;
        CHECK(count_differing(weight_results[1], weight_results[0], tolerance) <= weight_count / 1000 + 1);
        CHECK(count_differing(bias_results[1], bias_results[0], tolerance) <= 1);
    } else {
        CHECK(normalised_error(difference(weight_results[1], weights), difference(weight_results[0], weights)) <= 1e-3);
        CHECK(normalised_error(difference(bias_results[1], bias), difference(bias_results[0], bias)) <= 1e-3);
        // (Not for the sign-like steps: one flipped sign moves its weight by twice the rate, some 1e-4
        // of the norm.)
        CHECK(normalised_error(weight_results[1], weight_results[0]) <= error_bound(DType::fp32));
    }
    for (int k = 0; k < states; ++k) {
        CHECK(normalised_error(state_results[1][k], state_results[0][k]) <= 1e-4);
        CHECK(normalised_error(bias_state_results[1][k], bias_state_results[0][k]) <= 1e-4);
    }
    if (low) {
        CHECK(normalised_error(low_weight_results[1], low_weight_results[0]) <= error_bound(c.dtype));
        CHECK(normalised_error(low_bias_results[1], low_bias_results[0]) <= error_bound(c.dtype));
    }
}

#if defined(MPTRAIN_WITH_CUDA)
// A step's updates as a compute task: fused SGD of each layer in turn, as the trainer issues them,
// and with `finish` the step's finish_step after them.
struct UpdateLayersTask {
    Backend* backend;
    std::vector<DenseUpdateArgs> layers;
    OptimizerConfig optimizer;
    bool finish;
    TrainState* state;
    LossScalerConfig scaler;
    const double* metrics;
    double* committed_metrics;
    // Optional, before the updates: a max_abs pass over `decision_inputs` into `maxima` and the
    // decide_update that reads its 2 * decision_layers results.
    std::vector<MaxAbsInput> decision_inputs;
    float* maxima = nullptr;
    int decision_layers = 0;
};

void run_update_layers_task(void* argument) {
    const UpdateLayersTask& task = *static_cast<const UpdateLayersTask*>(argument);
    if (task.maxima) {
        task.backend->max_abs(task.decision_inputs.data(), static_cast<int>(task.decision_inputs.size()), task.maxima);
        task.backend->decide_update(task.maxima, task.decision_layers, task.layers.front().rows, task.state);
    }
    for (const DenseUpdateArgs& args : task.layers) task.backend->dense_update(args, task.optimizer);
    if (task.finish) task.backend->finish_step(task.state, task.scaler, task.metrics, task.committed_metrics);
}

// One backend's copy of the layers' operands and parameters.
struct UpdateLayersOperands {
    std::vector<Buffer> buffers;  // per layer: dZ, A, masters, bias, low weights, low bias
    std::unique_ptr<Buffer> state, metrics, committed_metrics;
    UpdateLayersTask task{};
};

struct UpdateShape {
    int64_t in_features, out_features;
};

// Random operands of plain SGD updates of `shapes` at `rows` rows: per layer dZ (scaled as a loss
// scale of `initial` makes it), A, masters and bias, the same for every backend given them.
std::vector<std::vector<std::vector<float>>> update_layer_values(const std::vector<UpdateShape>& shapes, int64_t rows,
                                                                 DType dtype, const TrainState& initial) {
    std::vector<std::vector<std::vector<float>>> values;
    for (const UpdateShape& shape : shapes) {
        std::vector<float> output_grad = random_values(static_cast<size_t>(rows * shape.out_features), -1, 1);
        for (float& g : output_grad) g *= initial.loss_scale / static_cast<float>(rows);
        values.push_back({rounded(output_grad, dtype),
                          rounded(random_values(static_cast<size_t>(rows * shape.in_features), 0, 1), dtype),
                          random_values(static_cast<size_t>(shape.in_features * shape.out_features), -0.5f, 0.5f),
                          random_values(static_cast<size_t>(shape.out_features), -0.1f, 0.1f)});
    }
    return values;
}

// `backend`'s copy of those operands (poisoned low-precision copies), its state and metrics, and the
// task that updates every layer with `sgd` and finishes the step.
void upload_update_layers(Backend& backend, UpdateLayersOperands& own, const std::vector<UpdateShape>& shapes,
                          const std::vector<std::vector<std::vector<float>>>& values, int64_t rows, DType dtype,
                          const OptimizerConfig& sgd, const TrainState& initial, const LossScalerConfig& scaler) {
    own.state = std::make_unique<Buffer>(upload_raw(backend, std::vector<TrainState>{initial}));
    own.metrics = std::make_unique<Buffer>(upload_raw(backend, std::vector<double>{1.5, 20.0, 32.0, 0.25}));
    own.committed_metrics = std::make_unique<Buffer>(poisoned(backend, DType::fp32, 2 * kMetricsCount));
    own.task.backend = &backend;
    own.task.optimizer = sgd;
    own.task.finish = true;
    own.task.state = own.state->as<TrainState>();
    own.task.scaler = scaler;
    own.task.metrics = own.metrics->as<double>();
    own.task.committed_metrics = own.committed_metrics->as<double>();
    own.buffers.reserve(6 * shapes.size());  // the args below point into them
    for (size_t l = 0; l < shapes.size(); ++l) {
        const UpdateShape& shape = shapes[l];
        own.buffers.push_back(upload(backend, dtype, values[l][0]));
        own.buffers.push_back(upload(backend, dtype, values[l][1]));
        own.buffers.push_back(upload(backend, DType::fp32, values[l][2]));
        own.buffers.push_back(upload(backend, DType::fp32, values[l][3]));
        const bool low = dtype != DType::fp32;
        own.buffers.push_back(poisoned(backend, dtype, static_cast<size_t>(shape.in_features * shape.out_features)));
        own.buffers.push_back(poisoned(backend, dtype, static_cast<size_t>(shape.out_features)));
        const Buffer* layer = &own.buffers[own.buffers.size() - 6];
        DenseUpdateArgs args{};
        args.output_grad = layer[0].data();
        args.input = layer[1].data();
        args.weights = layer[2].as<float>();
        args.bias = layer[3].as<float>();
        args.low_weights = low ? layer[4].data() : nullptr;
        args.low_bias = low ? layer[5].data() : nullptr;
        args.rows = rows;
        args.in_features = shape.in_features;
        args.out_features = shape.out_features;
        args.compute_dtype = dtype;
        args.state = own.state->as<TrainState>();
        own.task.layers.push_back(args);
    }
}

// Every layer's masters, bias and their low-precision copies, as floats, in layer order.
std::vector<float> download_update_layers(Backend& backend, const UpdateLayersOperands& own,
                                          const std::vector<UpdateShape>& shapes, DType dtype) {
    std::vector<float> results;
    for (size_t l = 0; l < shapes.size(); ++l) {
        const Buffer* layer = &own.buffers[6 * l];
        const size_t weights = static_cast<size_t>(shapes[l].in_features * shapes[l].out_features);
        const size_t bias = static_cast<size_t>(shapes[l].out_features);
        for (const std::vector<float>& part :
             {download(backend, layer[2], DType::fp32, weights), download(backend, layer[3], DType::fp32, bias),
              download(backend, layer[4], dtype, weights), download(backend, layer[5], dtype, bias)})
            results.insert(results.end(), part.begin(), part.end());
    }
    return results;
}
#endif

}  // namespace

namespace mpt::testing {

void compare_dense_update_cases(Backend& reference, Backend& candidate) {
    OptimizerConfig sgd;
    OptimizerConfig momentum;
    momentum.momentum = 0.9f;
    OptimizerConfig nesterov = momentum;
    nesterov.nesterov = true;
    OptimizerConfig adam;
    adam.kind = OptimizerKind::adam;
    adam.learning_rate = 1e-3f;
    OptimizerConfig adamw = adam;
    adamw.kind = OptimizerKind::adamw;
    adamw.weight_decay = 0.01f;
    OptimizerConfig rmsprop;
    rmsprop.kind = OptimizerKind::rmsprop;
    rmsprop.learning_rate = 1e-3f;
    OptimizerConfig rmsprop_momentum = rmsprop;
    rmsprop_momentum.momentum = 0.9f;
    rmsprop_momentum.rho = 0.8f;
    // Keras's weight decay under the other rules: plain SGD keeps its fused kernel with it (and the
    // CPU reference its one GEMM, beta the factor decay leaves), past 64 rows GEMM then update.
    OptimizerConfig sgd_decay = decayed_sgd();
    // Centered: the gradients' average is the second state array, or the third after momentum's.
    OptimizerConfig rmsprop_centered = rmsprop;
    rmsprop_centered.centered = true;
    OptimizerConfig rmsprop_centered_momentum = rmsprop_momentum;
    rmsprop_centered_momentum.centered = true;
    OptimizerConfig rmsprop_decay = rmsprop;
    rmsprop_decay.weight_decay = 0.05f;
    OptimizerConfig lion;  // Keras's defaults, as the C API sets them
    lion.kind = OptimizerKind::lion;
    lion.learning_rate = 1e-3f;
    lion.beta2 = 0.99f;
    OptimizerConfig lion_decay = lion;
    lion_decay.weight_decay = 0.1f;
    lion_decay.beta1 = 0.5f;
    for (DType dtype : kDTypes) {
        compare_dense_update(reference, candidate, {37, 136, 64, dtype, sgd_decay, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, rmsprop_decay, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, rmsprop_centered, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, rmsprop_centered_momentum, false});
        compare_dense_update(reference, candidate, {16, 100, 13, dtype, rmsprop_centered_momentum, false});  // bias tail: one by one
        compare_dense_update(reference, candidate, {64, 200, 72, dtype, sgd_decay, false});  // fused, partial tiles
        compare_dense_update(reference, candidate, {96, 136, 64, dtype, sgd_decay, false});  // GEMM, then update
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, sgd_decay, true});  // skipped: no decay either
        compare_dense_update(reference, candidate, {37, 136, 64, dtype, sgd, false});   // fused SGD (rows <= 64)
        compare_dense_update(reference, candidate, {64, 200, 72, dtype, sgd, false});   // fused, partial tiles
        compare_dense_update(reference, candidate, {33, 101, 45, dtype, sgd, false});   // fused, columns one by one
        compare_dense_update(reference, candidate, {96, 136, 64, dtype, sgd, false});   // GEMM, then update
        compare_dense_update(reference, candidate, {64, 48, 16, dtype, momentum, false});
        compare_dense_update(reference, candidate, {16, 64, 24, dtype, nesterov, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, adam, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, adamw, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, rmsprop, false});
        compare_dense_update(reference, candidate, {24, 72, 32, dtype, rmsprop_momentum, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, lion, false});
        compare_dense_update(reference, candidate, {16, 100, 13, dtype, lion_decay, false});  // bias tail: one by one
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, lion, true});
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, sgd, true});
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, adam, true});
        // In parts (a clipped step): plain SGD keeps its gradient too, and the factor scales it.
        compare_dense_update(reference, candidate, {37, 136, 64, dtype, sgd, false, 0.37f});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, adamw, false, 0.37f});
        compare_dense_update(reference, candidate, {64, 48, 16, dtype, momentum, false, 1.0f});
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, momentum, true, 0.5f});
        // Accumulated (micro-batches): cuBLASLt with beta 1 and the bias sums added to, unfused.
        compare_dense_update(reference, candidate, {37, 136, 64, dtype, sgd, false, 1.0f, 1});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, adamw, false, 0.37f, 3});
        compare_dense_update(reference, candidate, {16, 100, 13, dtype, rmsprop_centered_momentum, false, 1.0f, 2});
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, adam, true, 1.0f, 2});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, lion_decay, false, 0.37f, 2});
    }
    // 1.5 M weights: past one pass of the update kernel's grid (8 blocks per SM, about 1 M elements
    // on an H200), so later grid-stride passes run and the bias group starts in the second.
    compare_dense_update(reference, candidate, {96, 3072, 512, DType::bf16, adam, false});
    // Fused SGD on the seed MLP's first layer: more row tiles than resident blocks, so each block
    // walks several (9 on an H200), the next tile's masters and dZ loaded while the current one is
    // summed; then the masters one by one (a row of 3001 columns is no whole number of float4s),
    // 6 tiles a block.
    compare_dense_update(reference, candidate, {32, 3072, 3000, DType::bf16, sgd, false});
    compare_dense_update(reference, candidate, {33, 3001, 2000, DType::fp16, sgd_decay, false});
}

// clip_factor over gradients as a step leaves them (times the loss scale): an empty set, one value,
// a ragged misaligned count, and 4 M values (past the first pass of the grid), with the bound below
// and above the norm, and a skipped step. The norm and factor it records in the TrainState against
// the host's own double-precision norm, and the factor exactly 1 when the bound is not exceeded.
void compare_clip_factor(Backend& reference, Backend& candidate) {
    struct ClipCase {
        int64_t count, offset;  // offset: elements into the buffer, so 1 is not 16-byte aligned
        float loss_scale, bound_over_norm;
        bool skipped;
    };
    const ClipCase cases[] = {{0, 0, 1.0f, 0.5f, false},        {1, 0, 1.0f, 0.5f, false},
                              {4999, 1, 512.0f, 0.25f, false},  {4999, 0, 512.0f, 2.0f, false},
                              {(int64_t{4} << 20) + 3, 0, 32768.0f, 0.1f, false},
                              {1000, 3, 65536.0f, 1.5f, false}, {1000, 0, 512.0f, 0.5f, true}};
    for (const ClipCase& c : cases) {
        CAPTURE(c.count);
        CAPTURE(c.offset);
        CAPTURE(c.loss_scale);
        CAPTURE(c.bound_over_norm);
        CAPTURE(c.skipped);
        // One more value past the end, large enough to show should it be read.
        std::vector<float> gradients = random_values(static_cast<size_t>(c.count + c.offset + 1), -1, 1);
        for (float& g : gradients) g *= c.loss_scale * 1e-2f;
        gradients.back() = 1e30f;
        double sum = 0.0;
        for (int64_t i = c.offset; i < c.offset + c.count; ++i)
            sum += static_cast<double>(gradients[static_cast<size_t>(i)]) * gradients[static_cast<size_t>(i)];
        const double norm = std::sqrt(sum) / c.loss_scale;
        // An empty set's norm is 0: any positive bound is above it.
        const float bound = c.count == 0 ? 1.0f : static_cast<float>(norm * c.bound_over_norm);
        // (A bound at the norm itself could round either way: the cases keep clear of it.)
        const double expected = c.count == 0 || c.bound_over_norm > 1.0f ? 1.0 : bound / norm;
        TrainState state = initial_train_state(LossScalerConfig{});
        state.loss_scale = c.loss_scale;
        state.found_inf = c.skipped ? 1 : 0;
        state.gradient_norm = 123.0f;  // poison: each case writes its own
        state.clip_factor = 123.0f;
        TrainState results[2];
        Backend* backends[2] = {&reference, &candidate};
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            Buffer values = upload(backend, DType::fp32, gradients);
            Buffer state_buffer = upload_raw(backend, std::vector<TrainState>{state});
            backend.clip_factor(values.as<float>() + c.offset, c.count, bound, state_buffer.as<TrainState>());
            results[b] = download_raw<TrainState>(backend, state_buffer, 1)[0];
        }
        for (const TrainState& result : results) {
            if (c.skipped) {  // no norm, and a factor no update reads
                CHECK(std::isnan(result.gradient_norm));
                CHECK(result.clip_factor == 1.0f);
                continue;
            }
            CHECK(result.gradient_norm == doctest::Approx(norm).epsilon(1e-6));
            CHECK(result.clip_factor == doctest::Approx(expected).epsilon(1e-6));
            if (expected == 1.0) CHECK(result.clip_factor == 1.0f);
            CHECK(result.steps == state.steps);  // the rest of the state as it was
            CHECK(result.loss_scale == state.loss_scale);
        }
    }
}

// average_weights against Keras's formula (exact: both backends round each product and the sum
// once) and swap_values, on ragged and misaligned counts, with a value past the end that neither
// may touch; the first applied step copies and a skipped step leaves the averages; momentum 0 (a
// frozen layer's) copies, whatever the step.
void compare_weight_averaging(Backend& reference, Backend& candidate) {
    struct AverageCase {
        int64_t count, offset;
        float momentum;
        int64_t applied_steps;
        bool skipped;
    };
    const AverageCase cases[] = {{0, 0, 0.9f, 3, false},      {1, 0, 0.9f, 3, false},     {4999, 1, 0.999f, 3, false},
                                 {4999, 3, 0.5f, 0, false},   {4999, 0, 0.75f, 7, true},
                                 {(int64_t{4} << 20) + 3, 0, 0.999f, 1, false}, {4999, 1, 0.0f, 3, false},
                                 {4999, 2, 0.0f, 3, true}};
    for (const AverageCase& c : cases) {
        CAPTURE(c.count);
        CAPTURE(c.offset);
        CAPTURE(c.momentum);
        CAPTURE(c.applied_steps);
        CAPTURE(c.skipped);
        const size_t size = static_cast<size_t>(c.count + c.offset + 1);
        const std::vector<float> masters = random_values(size, -2, 2);
        const std::vector<float> averages = random_values(size, -2, 2);
        std::vector<float> expected = averages;
        const bool copies = c.momentum == 0.0f;
        for (int64_t i = c.offset; i < c.offset + c.count && (!c.skipped || copies); ++i) {
            const size_t k = static_cast<size_t>(i);
            expected[k] = c.applied_steps == 0 || copies ? masters[k] : averaged_weight(averages[k], masters[k], c.momentum);
        }
        TrainState state = initial_train_state(LossScalerConfig{});
        state.applied_steps = c.applied_steps;
        state.steps = c.applied_steps + (c.skipped ? 1 : 0);
        state.found_inf = c.skipped ? 1 : 0;
        Backend* backends[2] = {&reference, &candidate};
        for (Backend* backend : backends) {
            Buffer master_buffer = upload(*backend, DType::fp32, masters);
            Buffer average_buffer = upload(*backend, DType::fp32, averages);
            Buffer state_buffer = upload_raw(*backend, std::vector<TrainState>{state});
            backend->average_weights(master_buffer.as<float>() + c.offset, average_buffer.as<float>() + c.offset, c.count,
                                     c.momentum, state_buffer.as<TrainState>());
            CHECK(download(*backend, average_buffer, DType::fp32, size) == expected);
            CHECK(download(*backend, master_buffer, DType::fp32, size) == masters);
            // And the exchange: each array takes the other's values, and nothing past the end.
            backend->swap_values(master_buffer.as<float>() + c.offset, average_buffer.as<float>() + c.offset, c.count);
            std::vector<float> swapped_masters = masters, swapped_averages = expected;
            for (int64_t i = c.offset; i < c.offset + c.count; ++i)
                std::swap(swapped_masters[static_cast<size_t>(i)], swapped_averages[static_cast<size_t>(i)]);
            CHECK(download(*backend, master_buffer, DType::fp32, size) == swapped_masters);
            CHECK(download(*backend, average_buffer, DType::fp32, size) == swapped_averages);
        }
    }
}

// On a backend that takes the gradients' norm from the batch (clips_from_batch), that norm against
// the norm of the gradients its dense updates write (clip_factor over them), for three layers in
// every dtype: moderate values; inputs of 1e20 and gradients of 1e-25 (beyond what fp32 Gram
// matrices hold unscaled); and rows that cancel (pairs of equal inputs with opposite gradients).
void compare_clip_paths(Backend& backend) {
    const int64_t rows = 37;
    if (!backend.clips_from_batch(rows)) {
        MESSAGE("this backend takes no gradient norm from the batch");
        return;
    }
    struct Shape {
        int64_t in_features, out_features;
    };
    const Shape shapes[] = {{136, 64}, {64, 24}, {24, 8}};
    enum class Values { moderate, extreme, cancelling };
    for (Values values : {Values::moderate, Values::extreme, Values::cancelling}) {
        for (DType dtype : kDTypes) {
            CAPTURE(static_cast<int>(values));
            CAPTURE(std::string(dtype_name(dtype)));
            // Extreme values are fp32's: fp16 and bf16 would round them to infinity or zero.
            if (values == Values::extreme && dtype != DType::fp32) continue;
            TrainState initial = initial_train_state(LossScalerConfig{});
            initial.loss_scale = 512.0f;
            std::vector<Buffer> buffers;
            std::vector<DenseUpdateArgs> layers;
            std::vector<DenseUpdateShape> reserved;
            std::vector<float> bounds;
            int64_t gradient_elements = 0;
            for (const Shape& shape : shapes) gradient_elements += shape.out_features * shape.in_features + shape.out_features;
            Buffer gradients = poisoned(backend, DType::fp32, static_cast<size_t>(gradient_elements));
            int64_t offset = 0;
            Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
            for (const Shape& shape : shapes) {
                std::vector<float> output_grad = random_values(static_cast<size_t>(rows * shape.out_features), -1, 1);
                std::vector<float> input = random_values(static_cast<size_t>(rows * shape.in_features), 0, 1);
                for (float& g : output_grad) g *= initial.loss_scale / static_cast<float>(rows);
                if (values == Values::extreme) {
                    for (float& g : output_grad) g *= 1e-25f;
                    for (float& a : input) a *= 1e20f;
                }
                if (values == Values::cancelling) {
                    for (int64_t r = 1; r < rows; r += 2)
                        for (int64_t k = 0; k < shape.in_features; ++k)
                            input[static_cast<size_t>(r * shape.in_features + k)] = input[static_cast<size_t>((r - 1) * shape.in_features + k)];
                    for (int64_t r = 1; r < rows; r += 2)
                        for (int64_t k = 0; k < shape.out_features; ++k)
                            output_grad[static_cast<size_t>(r * shape.out_features + k)] = -output_grad[static_cast<size_t>((r - 1) * shape.out_features + k)];
                }
                output_grad = rounded(output_grad, dtype);
                input = rounded(input, dtype);
                const auto largest = [](const std::vector<float>& v) {
                    float m = 0.0f;
                    for (float x : v) m = std::max(m, std::fabs(x));
                    return m;
                };
                bounds.insert(bounds.end(), {largest(output_grad), largest(input)});
                buffers.push_back(upload(backend, dtype, output_grad));
                buffers.push_back(upload(backend, dtype, input));
                DenseUpdateArgs args{};
                args.output_grad = buffers[buffers.size() - 2].data();
                args.input = buffers.back().data();
                args.weight_grad = gradients.as<float>() + offset;
                args.bias_grad = gradients.as<float>() + offset + shape.out_features * shape.in_features;
                offset += shape.out_features * shape.in_features + shape.out_features;
                args.rows = rows;
                args.in_features = shape.in_features;
                args.out_features = shape.out_features;
                args.compute_dtype = dtype;
                args.state = state.as<TrainState>();
                args.part = UpdatePart::gradient;
                layers.push_back(args);
                reserved.push_back({shape.in_features, shape.out_features, dtype});
            }
            Buffer bounds_buffer = upload(backend, DType::fp32, bounds);
            backend.reserve_update_scratch(reserved.data(), static_cast<int>(reserved.size()), rows, true);
            for (const DenseUpdateArgs& args : layers) backend.dense_update(args, OptimizerConfig{});
            const float clipnorm = 1e-30f;  // far below: the factor is clipnorm / norm
            backend.clip_factor(gradients.as<float>(), gradient_elements, clipnorm, state.as<TrainState>());
            const TrainState written = download_raw<TrainState>(backend, state, 1)[0];
            backend.clip_factor_from_batch(layers.data(), static_cast<int>(layers.size()), bounds_buffer.as<float>(),
                                           clipnorm, state.as<TrainState>());
            const TrainState from_batch = download_raw<TrainState>(backend, state, 1)[0];
            CHECK(std::isfinite(written.gradient_norm));
            CHECK(from_batch.gradient_norm >= 0.0f);
            if (values == Values::cancelling) {
                // What is left of the weights' gradient is the odd row out and the rounding of the
                // pairs' cancellation: the batch's norm agrees only to the pairs' size times fp32's
                // rounding, and may not come out negative or NaN.
                CHECK(from_batch.gradient_norm == doctest::Approx(written.gradient_norm).epsilon(1e-2));
            } else {
                CHECK(from_batch.gradient_norm == doctest::Approx(written.gradient_norm).epsilon(1e-5));
                CHECK(from_batch.clip_factor == doctest::Approx(written.clip_factor).epsilon(1e-5));
            }
        }
    }
}

}  // namespace mpt::testing

TEST_CASE("CUDA dense_update matches the CPU for every optimizer and skips a non-finite step") {
    SKIP_WITHOUT_GPU();
    compare_fused_and_unfused(compare_dense_update_cases);
}

#if defined(MPTRAIN_WITH_CUDA)
// MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1: plain SGD's whole updates that fused SGD does not take (over
// 64 rows) as one GEMM into the masters, alpha and beta from the device. Against the CPU, whose plain
// SGD is the same GEMM: with and without weight decay, the copies four at a time and one by one, the
// seed MLP's first layer at batch 256, and skipped steps that must leave every master and copy as it
// was, also with inf and NaN in dZ and A_prev (0 * inf would be NaN: the skip zeroes them first).
// Then with every fused plan refused when it runs: each op planned again with the plain GEMM and the
// column-sum kernel for the bias gradient, after its start kernel had run once already.
TEST_CASE("CUDA plain SGD into the masters matches the CPU, and a skipped step leaves them, inf in dZ or not") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    std::unique_ptr<Backend> cuda = make_cuda_under("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", "1");
    OptimizerConfig sgd;
    OptimizerConfig sgd_decay = decayed_sgd();
    for (DType dtype : kDTypes) {
        compare_dense_update(*cpu, *cuda, {96, 136, 64, dtype, sgd, false});
        compare_dense_update(*cpu, *cuda, {96, 136, 64, dtype, sgd_decay, false});
        compare_dense_update(*cpu, *cuda, {65, 102, 45, dtype, sgd, false});      // copies one by one: 4,590 weights
        compare_dense_update(*cpu, *cuda, {96, 64, 16, dtype, sgd_decay, true});  // skipped: no decay either
        compare_dense_update(*cpu, *cuda, {96, 64, 16, dtype, sgd, true, 0.0f, 0, true});
        compare_dense_update(*cpu, *cuda, {37, 136, 64, dtype, sgd, false});  // fused SGD's still
    }
    compare_dense_update(*cpu, *cuda, {256, 3072, 3000, DType::bf16, sgd, false});
    const CudaOpPaths paths = cuda_backend_op_paths(*cuda);
    CHECK(paths.gradient_into_masters > 0);
    CHECK(paths.fused_sgd > 0);
    CHECK(paths.weight_gradient_fused + paths.weight_gradient_unfused == 0);
    // The bias gradient in the GEMM (BGRADB with device scalars), or the column-sum kernel after it:
    // the same numbers; the summary reads which.
    MESSAGE("plain SGD into the masters: fused plans refused "
            << cuda_backend_refused_epilogue_plans(*cuda)
            << (cuda_backend_refused_epilogue_plans(*cuda)
                    ? " (last: " + cuda_backend_last_refused_epilogue(*cuda) + ")"
                    : std::string()));

    std::unique_ptr<Backend> refusing = make_cuda_under("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", "1");
    cuda_backend_refuse_fused_runs(*refusing, true);
    for (DType dtype : kDTypes) {
        compare_dense_update(*cpu, *refusing, {96, 136, 64, dtype, sgd_decay, false});
        compare_dense_update(*cpu, *refusing, {96, 64, 16, dtype, sgd, true, 0.0f, 0, true});
    }
    CHECK(cuda_backend_refused_epilogue_plans(*refusing) > 0);  // when run, or by the heuristic already
    CHECK(cuda_backend_op_paths(*refusing).gradient_into_masters > 0);
}
#endif

#if defined(MPTRAIN_WITH_CUDA)
// The fused SGD kernel compiled for exactly 32 rows, against the CPU: whole tiles and the edges of
// every kind (a partial last strip and tile, columns one by one where in_features is no multiple of
// 4, which takes the kernel for any rows), with weight decay, skipped, and the seed MLP's first layer.
TEST_CASE("MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1: CUDA fused SGD for 32 rows matches the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    std::unique_ptr<Backend> cuda = make_cuda_under("MPTRAIN_CUDA_FUSED_SGD_32_ROWS", "1");
    OptimizerConfig sgd;
    OptimizerConfig sgd_decay = decayed_sgd();
    for (DType dtype : kDTypes) {
        compare_dense_update(*cpu, *cuda, {32, 256, 64, dtype, sgd, false});        // whole tiles only
        compare_dense_update(*cpu, *cuda, {32, 200, 72, dtype, sgd_decay, false});  // partial strip and tile
        compare_dense_update(*cpu, *cuda, {32, 101, 45, dtype, sgd, false});        // any rows' kernel
        compare_dense_update(*cpu, *cuda, {32, 64, 16, dtype, sgd, true});
        // Several tiles a block (64 row tiles of 8 strips on an H200's 264 blocks: 2 each), so that a
        // whole next tile is prefetched unchecked.
        compare_dense_update(*cpu, *cuda, {32, 1024, 2048, dtype, sgd_decay, false});
    }
    compare_dense_update(*cpu, *cuda, {32, 3072, 3000, DType::bf16, sgd, false});
    CHECK(cuda_backend_op_paths(*cuda).fused_sgd_32_rows > 0);
}

// The bulk-copy fused SGD kernel (MPTRAIN_CUDA_BULK_COPY_SGD=1: compute capability 9.0, fp16 and
// bf16) against the CPU: its three compilations (batches up to 32 rows, 33 to 64, 65 to 256, K padded
// with zeros; past 64 rows in place of the weight-gradient GEMM and the update kernel), whole tiles,
// a partial last strip and tile, weight decay, runs of several tiles a block (every stage of the ring
// refilled: the seed MLP's layers and 2048 x 4096), skipped steps (not a byte written, inf and NaN in
// the inputs or not), and shapes whose rows the bulk copies cannot take (the CUDA-core kernel then:
// in_features no multiple of 4, out_features none of 8); fp32 keeps the CUDA-core kernel. On 9.0 the
// bf16 and fp16 updates must have been planned with it.
TEST_CASE("MPTRAIN_CUDA_BULK_COPY_SGD=1: CUDA fused SGD by bulk copies matches the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    std::unique_ptr<Backend> cuda = make_cuda_under("MPTRAIN_CUDA_BULK_COPY_SGD", "1");
    OptimizerConfig sgd;
    OptimizerConfig sgd_decay = decayed_sgd();
    for (DType dtype : kDTypes) {
        compare_dense_update(*cpu, *cuda, {32, 256, 64, dtype, sgd, false});        // whole tiles only
        compare_dense_update(*cpu, *cuda, {32, 200, 72, dtype, sgd_decay, false});  // partial strip and tile
        compare_dense_update(*cpu, *cuda, {7, 136, 40, dtype, sgd, false});         // K mostly padding
        compare_dense_update(*cpu, *cuda, {33, 136, 40, dtype, sgd, false});        // the 64-row compilation
        compare_dense_update(*cpu, *cuda, {64, 200, 72, dtype, sgd_decay, false});
        compare_dense_update(*cpu, *cuda, {65, 136, 40, dtype, sgd, false});  // the 256-row compilation
        compare_dense_update(*cpu, *cuda, {256, 200, 72, dtype, sgd_decay, false});
        compare_dense_update(*cpu, *cuda, {256, 64, 16, dtype, sgd, true});
        compare_dense_update(*cpu, *cuda, {32, 101, 45, dtype, sgd, false});  // neither fits: CUDA cores
        compare_dense_update(*cpu, *cuda, {32, 100, 44, dtype, sgd, false});  // out_features: CUDA cores
        compare_dense_update(*cpu, *cuda, {32, 64, 16, dtype, sgd, true});
        compare_dense_update(*cpu, *cuda, {32, 64, 16, dtype, sgd_decay, true, 0.0f, 0, true});
    }
    for (DType dtype : {DType::fp16, DType::bf16}) {
        compare_dense_update(*cpu, *cuda, {32, 3072, 3000, dtype, sgd, false});
        compare_dense_update(*cpu, *cuda, {64, 2048, 4096, dtype, sgd_decay, false});
    }
    compare_dense_update(*cpu, *cuda, {32, 3000, 1000, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {32, 1000, 16, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {256, 3072, 3000, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {200, 1024, 2048, DType::fp16, sgd_decay, false});
    const uint64_t planned = cuda_backend_op_paths(*cuda).fused_sgd_bulk_copy;
    MESSAGE("bulk-copy fused SGD: " << planned << " updates planned with it");
    if (compute_capability_major(*cuda) >= 9)
        CHECK(planned > 0);
    else
        CHECK(planned == 0);
}

// The same kernel on layers small enough for compute-sanitizer's racecheck and synccheck, which the
// device check runs over this case (the one above takes minutes under them): each compilation, a
// partial strip and tile, several tiles a block for a ring that turns over (640 outputs: 20 tiles
// for at most a few hundred blocks), and a skipped step.
TEST_CASE("MPTRAIN_CUDA_BULK_COPY_SGD=1: fused SGD by bulk copies on small layers matches the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    std::unique_ptr<Backend> cuda = make_cuda_under("MPTRAIN_CUDA_BULK_COPY_SGD", "1");
    OptimizerConfig sgd;
    compare_dense_update(*cpu, *cuda, {32, 200, 72, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {48, 136, 40, DType::fp16, sgd, false});
    compare_dense_update(*cpu, *cuda, {100, 136, 40, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {32, 128, 640, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {32, 64, 16, DType::bf16, sgd, true});
    if (compute_capability_major(*cuda) >= 9) CHECK(cuda_backend_op_paths(*cuda).fused_sgd_bulk_copy > 0);
}
#endif

// With grouped SGD, a recorded task's consecutive fused SGD updates are one launch (up to 4 layers,
// those of one kernel variant together): each layer must come out as the launch of its own makes
// it, bit for bit, in the first sighting (eager), the capture and the replays, and a skipped step
// (found_inf set) must write nothing. Six layers: the first four are one run, of which the fourth
// (an odd width, the kernel's element-by-element variant) is launched apart; the last two are
// another. The large first layer takes nearly all of its launch's blocks, one tile each; the narrow
// second one, a few blocks that walk 16 tiles each; the third, one block. The step's finish_step
// after the sixth is taken by the last launch's last block (of dozens): the loss scaler (dynamic,
// doubled after every finite step, halved on the skipped one, and read by every block to unscale)
// and the committed metrics must come out as its own kernel leaves them.
// Then the same layer twice in a row, which must not run beside itself.
TEST_CASE("CUDA fused SGD updates recorded for several layers run as one launch, each layer as in its own") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    const std::vector<UpdateShape> shapes = {{1024, 1024}, {8, 2048}, {136, 10}, {101, 33}, {64, 16}, {512, 256}};
    struct Configuration {
        DType dtype;
        int64_t rows;
    };
    const Configuration configurations[] = {{DType::bf16, 32}, {DType::fp16, 64}, {DType::fp32, 17}};
    for (const Configuration& configuration : configurations) {
        CAPTURE(std::string(dtype_name(configuration.dtype)));
        CAPTURE(configuration.rows);
        const int64_t rows = configuration.rows;
        OptimizerConfig sgd;
        sgd.learning_rate = 0.05f;
        sgd.weight_decay = 0.01f;
        TrainState initial{};
        initial.loss_scale = 256.0f;
        initial.applied_steps = 2;
        LossScalerConfig scaler;
        scaler.mode = LossScaling::dynamic;
        scaler.growth_interval = 1;
        static_assert(kMetricsCount == 4, "the metrics uploaded below");
        // The same values for both backends.
        const auto values = update_layer_values(shapes, rows, configuration.dtype, initial);
        std::unique_ptr<Backend> backends[2] = {make_cuda(), make_cuda()};  // grouped, then each layer alone
        cuda_backend_set_grouped_sgd(*backends[0], true);
        UpdateLayersOperands operands[2];
        for (int b = 0; b < 2; ++b)
            upload_update_layers(*backends[b], operands[b], shapes, values, rows, configuration.dtype, sgd, initial,
                                 scaler);
        // Rounds 0 to 2: the first sighting, the capture, a replay; round 3 replays a skipped step.
        std::vector<float> before_skipped;
        for (int round = 0; round < 4; ++round) {
            CAPTURE(round);
            std::vector<float> results[2];
            TrainState states[2];
            std::vector<double> committed[2];
            for (int b = 0; b < 2; ++b) {
                Backend& backend = *backends[b];
                // The state as the last round's finish_step left it, with this round's verdict.
                TrainState state = download_raw<TrainState>(backend, *operands[b].state, 1)[0];
                state.found_inf = round == 3 ? 1 : 0;
                backend.copy_to_device(operands[b].state->data(), &state, sizeof state);
                backend.scheduler().submit(Lane::compute, &run_update_layers_task, &operands[b].task);
                backend.scheduler().synchronize();
                states[b] = download_raw<TrainState>(backend, *operands[b].state, 1)[0];
                committed[b] = download_raw<double>(backend, *operands[b].committed_metrics, kMetricsCount);
                results[b] = download_update_layers(backend, operands[b], shapes, configuration.dtype);
            }
            REQUIRE(results[0].size() == results[1].size());
            CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
            CHECK(std::memcmp(&states[0], &states[1], sizeof(TrainState)) == 0);
            CHECK(states[0].steps == round + 1);
            CHECK(states[0].skipped_steps == (round == 3 ? 1 : 0));
            CHECK(committed[0] == std::vector<double>{1.5, 20.0, 32.0, 0.25});
            CHECK(committed[1] == committed[0]);
            if (round == 2) before_skipped = results[0];
            if (round == 3)  // not a byte written
                CHECK(std::memcmp(results[0].data(), before_skipped.data(), results[0].size() * sizeof(float)) == 0);
        }
        // Grouped: the first three layers and the last two in the first sighting and the capture (the
        // fourth launched apart, and replays count no ops); the finish_step taken likewise.
        CHECK(cuda_backend_op_paths(*backends[0]).fused_sgd_grouped == 10);
        CHECK(cuda_backend_op_paths(*backends[0]).steps_finished_by_update == 2);
        CHECK(cuda_backend_op_paths(*backends[1]).fused_sgd_grouped == 0);
        CHECK(cuda_backend_op_paths(*backends[1]).steps_finished_by_update == 0);
        for (const auto& backend : backends) {
            INFO("last refusal: " << cuda_backend_last_graph_refusal(*backend));
            CHECK(cuda_backend_graph_refusals(*backend) == 0);
            CHECK(cuda_backend_graph_replays(*backend) == 2);
        }

        // The first layer twice, then the third: the repeat runs after the first update, and only it
        // and the third share a launch.
        std::vector<float> twice[2];
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            UpdateLayersTask task = operands[b].task;
            task.layers = {operands[b].task.layers[0], operands[b].task.layers[0], operands[b].task.layers[2]};
            task.finish = false;
            backend.copy_to_device(operands[b].state->data(), &initial, sizeof initial);
            backend.scheduler().submit(Lane::compute, &run_update_layers_task, &task);
            backend.scheduler().synchronize();
            for (int l : {0, 2}) {
                const Buffer* layer = &operands[b].buffers[static_cast<size_t>(6 * l)];
                const size_t weights = static_cast<size_t>(shapes[l].in_features * shapes[l].out_features);
                for (const std::vector<float>& part :
                     {download(backend, layer[2], DType::fp32, weights),
                      download(backend, layer[3], DType::fp32, static_cast<size_t>(shapes[l].out_features))})
                    twice[b].insert(twice[b].end(), part.begin(), part.end());
            }
        }
        CHECK(std::memcmp(twice[0].data(), twice[1].data(), twice[0].size() * sizeof(float)) == 0);
        CHECK(cuda_backend_op_paths(*backends[0]).fused_sgd_grouped == 10 + 2);
    }
#endif
}

// Where every maximum of a step's finiteness proof was taken as its tensor was written (the loss
// head's, the backward's) and the network's input decides as none, the recorded max_abs pass has
// nothing to read, and its decide_update rides in the first fused SGD update's launch instead of a
// launch of its own: each block decides before it writes, and block 0 leaves found_inf for the
// rest. Against a backend with the folds off (the pass, then decide_update): the same masters,
// copies and state bit for bit, round after round through the first sighting, the capture and the
// replays, for finite bounds, bounds whose product overflows and a non-finite maximum; the empty
// input's entry holds a stale maximum the fold must not read (the pass writes 0 there). One layer a
// launch and grouped; a batch past fused SGD's rows decides in the pass as before.
TEST_CASE("a recorded max_abs pass with nothing to read gives its decision to the first fused SGD update") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<UpdateShape> shapes = {{96, 64}, {64, 48}, {48, 16}};
    // Entries 0, 2, 3, 4, 5 as the head and the backward leave them; entry 1 (the input's) is stale.
    const std::vector<std::vector<float>> cases = {
        {1.0f, 0.0f, 2.0f, 0.5f, 3.0f, 1e10f},   // finite
        {1.0f, 0.0f, 1e30f, 1e10f, 3.0f, 2.0f},  // a product overflows
        {1.0f, 0.0f, 2.0f, 3.0f, inf, 1.0f},     // a non-finite dZ
        {1e37f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f},   // the bias gradient's bound overflows
    };
    const float stale_input_maximum = 1e38f;  // with the first case's dZ, a bound past fp32 if it were read
    struct Configuration {
        DType dtype;
        int64_t rows;
        bool fused;  // fused SGD takes the updates
    };
    const Configuration configurations[] = {{DType::bf16, 32, true}, {DType::fp16, 64, true}, {DType::bf16, 80, false}};
    for (const Configuration& configuration : configurations)
        for (const bool grouped : {false, true})
            for (const IssueMode& mode : kIssueModes) {
                CAPTURE(std::string(dtype_name(configuration.dtype)));
                CAPTURE(configuration.rows);
                CAPTURE(grouped);
                CAPTURE(mode.graphs);
                CAPTURE(mode.dependent_launch);
                const int64_t rows = configuration.rows;
                OptimizerConfig sgd;
                sgd.learning_rate = 0.05f;
                TrainState initial{};
                initial.loss_scale = 1.0f;
                LossScalerConfig scaler;
                const auto values = update_layer_values(shapes, rows, configuration.dtype, initial);
                std::unique_ptr<Backend> backends[2] = {cuda_backend_issuing(mode), cuda_backend_issuing(mode)};
                if (!backends[0]) continue;
                cuda_backend_set_step_folds(*backends[1], false);  // the pass, then decide_update
                UpdateLayersOperands operands[2];
                std::unique_ptr<Buffer> maxima[2];
                for (int b = 0; b < 2; ++b) {
                    cuda_backend_set_grouped_sgd(*backends[b], grouped);
                    upload_update_layers(*backends[b], operands[b], shapes, values, rows, configuration.dtype, sgd,
                                         initial, scaler);
                    maxima[b] = std::make_unique<Buffer>(poisoned(*backends[b], DType::fp32, 6));
                    UpdateLayersTask& task = operands[b].task;
                    task.maxima = maxima[b]->as<float>();
                    task.decision_layers = 3;
                    task.decision_inputs.assign(6, MaxAbsInput{nullptr, configuration.dtype, kMaxAbsTaken});
                    task.decision_inputs[1] = MaxAbsInput{nullptr, configuration.dtype, 0};  // decides as none
                }
                for (int round = 0; round < 8; ++round) {
                    CAPTURE(round);
                    std::vector<float> pairs = cases[static_cast<size_t>(round) % cases.size()];
                    std::vector<float> results[2];
                    TrainState states[2];
                    for (int b = 0; b < 2; ++b) {
                        Backend& backend = *backends[b];
                        TrainState state = download_raw<TrainState>(backend, *operands[b].state, 1)[0];
                        state.found_inf = 0;  // as the step's begin_step and finite loss leave it
                        backend.copy_to_device(operands[b].state->data(), &state, sizeof state);
                        // As the head and the backward write them; the input's left from another step.
                        std::vector<float> written = pairs;
                        written[1] = stale_input_maximum;
                        backend.copy_to_device(maxima[b]->data(), written.data(), written.size() * sizeof(float));
                        backend.scheduler().submit(Lane::compute, &run_update_layers_task, &operands[b].task);
                        backend.scheduler().synchronize();
                        states[b] = download_raw<TrainState>(backend, *operands[b].state, 1)[0];
                        results[b] = download_update_layers(backend, operands[b], shapes, configuration.dtype);
                        // The pass's results, its 0 for the empty input included, whichever launch wrote it.
                        CHECK(download(backend, *maxima[b], DType::fp32, 6) == pairs);
                    }
                    const bool finite = gradient_bounds_finite(pairs.data(), 3, rows);
                    CHECK(finite == (round % 4 == 0));
                    CHECK(states[0].found_inf == (finite ? 0 : 1));
                    CHECK(std::memcmp(&states[0], &states[1], sizeof(TrainState)) == 0);
                    REQUIRE(results[0].size() == results[1].size());
                    CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
                }
                // Recorded: the first sighting and the capture each fold (replays count no ops); op by
                // op, or past fused SGD's rows, the pass decides (there the first step grows the weight
                // gradient's scratch, and the second runs eagerly too).
                const bool folds = mode.graphs && configuration.fused;
                CHECK(cuda_backend_op_paths(*backends[0]).updates_deciding == (folds ? 2u : 0u));
                CHECK((cuda_backend_op_paths(*backends[0]).max_abs_deciding > 0) ==
                      (mode.graphs && !configuration.fused));
                CHECK(cuda_backend_op_paths(*backends[1]).updates_deciding == 0);
                for (const auto& backend : backends) {
                    INFO("last refusal: " << cuda_backend_last_graph_refusal(*backend));
                    CHECK(cuda_backend_graph_refusals(*backend) == 0);
                    if (configuration.fused) CHECK(cuda_backend_graph_replays(*backend) == (mode.graphs ? 6 : 0));
                }
            }
#endif
}
