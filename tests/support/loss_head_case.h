// A loss-head case of the CUDA op tests (test_cuda_ops against the CPU on a GPU, and
// test_cuda_emulated_kernels on emulated threads): its shape and options, random inputs for it, and
// its LossHeadArgs over buffers that hold them.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace mpt_test {

struct LossHeadCase {
    mpt::Activation activation;
    mpt::LossKind loss;
    int64_t rows, width, classes;
    mpt::DType gradient_dtype;
    bool with_state, with_probabilities;
    float label_smoothing = 0.0f;
    bool with_class_weights = false;  // categorical losses: random weights in [0, 3]
    bool with_row_weights = false;    // every loss: random weights in [0, 2] per row
    // A micro-batch's head: the mean over this many rows (0: rows), its batch loss added to the
    // metrics' when `continues_batch`.
    int64_t mean_rows = 0;
    bool continues_batch = false;
};

// What a head's buffers start as: its state's loss scale, and metrics that a head must add to.
constexpr float kLossHeadScale = 1024.0f;
constexpr double kLossHeadInitialMetrics[mpt::kMetricsCount] = {3.5, 7.0, 11.0, 99.0};

struct LossHeadInputs {
    std::vector<float> class_weights, row_weights, logits;
    std::vector<int32_t> labels;
    std::vector<float> targets;  // soft targets summing to 1 for categorical cross-entropy
};

// Logits in [-4, 4] (element `nan_index` NaN, where it is not negative), labels, targets in [0, 1],
// class weights in [0, 3] and row weights in [0, 2], drawn from `random` in that order.
inline LossHeadInputs random_loss_head_inputs(const LossHeadCase& c, std::mt19937& random, int64_t nan_index = -1) {
    const auto uniform = [&random](size_t count, float low, float high) {
        std::uniform_real_distribution<float> distribution(low, high);
        std::vector<float> values(count);
        for (float& value : values) value = distribution(random);
        return values;
    };
    LossHeadInputs in;
    in.class_weights = uniform(static_cast<size_t>(c.classes), 0, 3);
    in.row_weights = uniform(static_cast<size_t>(c.rows), 0, 2);
    in.logits = uniform(static_cast<size_t>(c.rows * c.width), -4, 4);
    if (nan_index >= 0) in.logits[static_cast<size_t>(nan_index)] = NAN;
    std::uniform_int_distribution<int32_t> label_distribution(0, static_cast<int32_t>(c.classes - 1));
    in.labels.resize(static_cast<size_t>(c.rows));
    for (int32_t& label : in.labels) label = label_distribution(random);
    in.targets = uniform(static_cast<size_t>(c.rows * c.classes), 0, 1);
    if (c.loss == mpt::LossKind::categorical_crossentropy)
        for (int64_t r = 0; r < c.rows; ++r) {
            float sum = 0.0f;
            for (int64_t k = 0; k < c.classes; ++k) sum += in.targets[static_cast<size_t>(r * c.classes + k)];
            for (int64_t k = 0; k < c.classes; ++k) in.targets[static_cast<size_t>(r * c.classes + k)] /= sum;
        }
    return in;
}

// The buffers of a head run, in the memory of the backend that runs it.
struct LossHeadBuffers {
    const float* logits;
    const int32_t* labels;
    const float* targets;
    float* probabilities;
    void* logits_grad;
    mpt::TrainState* state;
    double* metrics;
    const float* class_weights;
    const float* row_weights;
};

// The head's arguments for case `c` over `b` (the options the case leaves off as null; Huber's delta
// 0.5, so that logits in [-4, 4] and targets in [0, 1] take both of its branches).
inline mpt::LossHeadArgs loss_head_args(const LossHeadCase& c, const LossHeadBuffers& b) {
    const bool sparse = mpt::loss_uses_labels(c.loss);
    mpt::LossHeadArgs args{};
    args.logits = b.logits;
    args.labels = sparse ? b.labels : nullptr;
    args.targets = sparse ? nullptr : b.targets;
    args.probabilities = c.with_probabilities ? b.probabilities : nullptr;
    args.logits_grad = b.logits_grad;
    args.state = c.with_state ? b.state : nullptr;
    args.metrics = b.metrics;
    args.rows = c.rows;
    args.width = c.width;
    args.classes = c.classes;
    args.activation = c.activation;
    args.loss = c.loss;
    args.label_smoothing = c.label_smoothing;
    args.huber_delta = 0.5f;
    args.class_weights = c.with_class_weights ? b.class_weights : nullptr;
    args.row_weights = c.with_row_weights ? b.row_weights : nullptr;
    args.logits_grad_dtype = c.gradient_dtype;
    args.mean_rows = c.mean_rows;
    args.continues_batch = c.continues_batch;
    return args;
}

}  // namespace mpt_test
