// The loss head. Softmax + cross-entropy and sigmoid + binary cross-entropy use the logits directly
// (log-sum-exp and softplus forms: exact and stable). Other pairs follow Keras: clip probabilities to
// [eps, 1 - eps] (renormalising non-softmax outputs for categorical cross-entropy), and chain the
// loss gradient through the activation's Jacobian.
#include "backend/cpu/cpu_loss_head.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_max_abs.h"

namespace mpt {

namespace {

struct RowResult {
    double loss;
    int64_t correct;
    int64_t counted;
};

int64_t argmax(const float* values, int64_t count) {
    int64_t best = 0;
    for (int64_t c = 1; c < count; ++c)
        if (values[c] > values[best]) best = c;
    return best;
}

// Activation output y (row-wise softmax or element-wise) into `y`.
void activate_row(Activation activation, const float* z, float* y, int64_t classes) {
    if (activation == Activation::softmax) {
        float max_z = z[0];
        for (int64_t c = 1; c < classes; ++c) max_z = std::max(max_z, z[c]);
        float sum = 0.0f;
        for (int64_t c = 0; c < classes; ++c) {
            y[c] = std::exp(z[c] - max_z);
            sum += y[c];
        }
        for (int64_t c = 0; c < classes; ++c) y[c] /= sum;
        return;
    }
    for (int64_t c = 0; c < classes; ++c) y[c] = activation_forward(activation, z[c]);
}

// dL/dz from dL/dy (in `grad`, overwritten) through the activation.
void chain_activation(Activation activation, const float* y, float* grad, int64_t classes) {
    if (activation == Activation::softmax) {
        float dot = 0.0f;
        for (int64_t c = 0; c < classes; ++c) dot += grad[c] * y[c];
        for (int64_t c = 0; c < classes; ++c) grad[c] = y[c] * (grad[c] - dot);
        return;
    }
    for (int64_t c = 0; c < classes; ++c) grad[c] *= activation_derivative_from_output(activation, y[c]);
}

float clip_probability(float p) { return std::min(std::max(p, kProbabilityEpsilon), 1.0f - kProbabilityEpsilon); }
bool inside_clip(float p) { return p > kProbabilityEpsilon && p < 1.0f - kProbabilityEpsilon; }

// One row: y (activation output), grad = dL_row/dz (unscaled), returns the row's loss and metric.
RowResult head_row(const LossHeadArgs& args, int64_t row, float* y, float* grad) {
    const int64_t classes = args.classes;
    const float* z = args.logits + row * args.width;
    const float* t = args.targets ? args.targets + row * classes : nullptr;
    const int32_t label = args.labels ? args.labels[row] : -1;
    activate_row(args.activation, z, y, classes);
    RowResult result{0.0, 0, 1};
    const bool categorical = args.loss == LossKind::sparse_categorical_crossentropy ||
                             args.loss == LossKind::categorical_crossentropy;
    // The targets trained towards (smoothed); the metric reads the given ones (`t`, `label`).
    const float share = label_smoothing_share(args.loss, args.label_smoothing, classes);
    auto given = [&](int64_t c) -> float { return args.labels ? (c == label ? 1.0f : 0.0f) : t[c]; };
    auto target = [&](int64_t c) -> float { return smoothed_target(given(c), args.label_smoothing, share); };

    if (categorical && (args.activation == Activation::softmax || args.activation == Activation::linear)) {
        // From logits: loss = sum_c t_c (lse - z_c); dz = p * sum(t) - t. A linear last layer is
        // treated as logits (from_logits=True), and y is reported as the softmax.
        if (args.activation == Activation::linear) activate_row(Activation::softmax, z, y, classes);
        float max_z = z[0];
        for (int64_t c = 1; c < classes; ++c) max_z = std::max(max_z, z[c]);
        double sum_exp = 0.0;
        for (int64_t c = 0; c < classes; ++c) sum_exp += std::exp(static_cast<double>(z[c] - max_z));
        const double lse = max_z + std::log(sum_exp);
        // The smoothed targets' sum from the given ones' ((1 - s) sum + s): exactly 1 for labels and
        // one-hot rows whatever the order the sum runs in, as on the GPU.
        float given_sum = 0.0f;
        for (int64_t c = 0; c < classes; ++c) {
            const float tc = target(c);
            given_sum += given(c);
            if (tc != 0.0f) result.loss += tc * (lse - z[c]);
        }
        const float target_sum = smoothed_target(given_sum, args.label_smoothing, args.label_smoothing);
        for (int64_t c = 0; c < classes; ++c) grad[c] = y[c] * target_sum - target(c);
    } else if (categorical) {
        // Keras: renormalise the outputs to sum 1, clip, -sum t log p.
        float sum = 0.0f;
        for (int64_t c = 0; c < classes; ++c) sum += y[c];
        const float safe_sum = std::max(sum, 1e-30f);
        float weighted = 0.0f;  // sum_c g_c p_c with g = dL/dp
        for (int64_t c = 0; c < classes; ++c) {
            const float p = y[c] / safe_sum, q = clip_probability(p), tc = target(c);
            if (tc != 0.0f) result.loss -= tc * std::log(static_cast<double>(q));
            grad[c] = inside_clip(p) ? -tc / q : 0.0f;
            weighted += grad[c] * p;
        }
        for (int64_t c = 0; c < classes; ++c) grad[c] = (grad[c] - weighted) / safe_sum;
        chain_activation(args.activation, y, grad, classes);
    } else if (args.loss == LossKind::binary_crossentropy) {
        const float inverse_classes = 1.0f / static_cast<float>(classes);
        for (int64_t c = 0; c < classes; ++c) {
            const float tc = target(c);
            if (args.activation == Activation::sigmoid) {
                const float zc = z[c];
                result.loss += (std::max(zc, 0.0f) - zc * tc + std::log1p(std::exp(-std::fabs(zc)))) * inverse_classes;
                grad[c] = (y[c] - tc) * inverse_classes;
            } else {
                const float q = clip_probability(y[c]);
                result.loss -= (tc * std::log(q) + (1.0f - tc) * std::log(1.0f - q)) * inverse_classes;
                grad[c] = inside_clip(y[c]) ? (-tc / q + (1.0f - tc) / (1.0f - q)) * inverse_classes : 0.0f;
            }
        }
        if (args.activation != Activation::sigmoid) chain_activation(args.activation, y, grad, classes);
    } else {  // a regression (never smoothed: loss_takes_label_smoothing)
        const float inverse_classes = 1.0f / static_cast<float>(classes);
        for (int64_t c = 0; c < classes; ++c) {
            const RegressionTerm term = regression_term(args.loss, y[c], t[c], args.huber_delta, inverse_classes);
            result.loss += term.loss;
            grad[c] = term.gradient;
        }
        chain_activation(args.activation, y, grad, classes);
    }

    // Accuracy: per output for binary targets (Keras binary_accuracy), else arg-max match.
    float weight = 1.0f;
    const bool binary = args.loss == LossKind::binary_crossentropy || (is_regression(args.loss) && classes == 1);
    if (binary) {
        result.counted = classes;
        for (int64_t c = 0; c < classes; ++c) result.correct += (y[c] > 0.5f) == (t[c] > 0.5f);
    } else {
        const int64_t predicted = argmax(y, classes);
        const int64_t expected = args.labels ? label : argmax(t, classes);
        result.correct = predicted == expected;
        if (args.class_weights) weight = args.class_weights[expected];  // categorical losses only
    }
    // The row's weight: its class's, times its own (a weighted dataset's). A weight of 1 changes no bit.
    if (args.row_weights) weight *= args.row_weights[row];
    if (args.class_weights || args.row_weights) {
        result.loss *= weight;
        for (int64_t c = 0; c < classes; ++c) grad[c] *= weight;
    }
    return result;
}

}  // namespace

void cpu_loss_head(const LossHeadArgs& args) {
    const float loss_scale = args.state ? args.state->loss_scale : 1.0f;
    const float gradient_factor = loss_scale / static_cast<float>(loss_mean_rows(args));
    // Scratch rows live on the stack for ordinary heads; wide heads (rare) use their output buffers.
    constexpr int64_t kStackClasses = 256;
    float stack_y[kStackClasses], stack_grad[kStackClasses];
    std::vector<float> heap_y, heap_grad;
    if (args.classes > kStackClasses) {
        heap_y.resize(static_cast<size_t>(args.classes));
        heap_grad.resize(static_cast<size_t>(args.classes));
    }
    float* y = args.classes > kStackClasses ? heap_y.data() : stack_y;
    float* grad = args.classes > kStackClasses ? heap_grad.data() : stack_grad;

    double loss_sum = 0.0;
    int64_t correct = 0, counted = 0;
    float gradient_largest = 0.0f;  // of the rows' rounded gradients, as max_abs takes it
    for (int64_t row = 0; row < args.rows; ++row) {
        const RowResult result = head_row(args, row, y, grad);
        loss_sum += result.loss;
        correct += result.correct;
        counted += result.counted;
        if (args.probabilities) {
            float* out = args.probabilities + row * args.width;
            std::copy(y, y + args.classes, out);
            std::fill(out + args.classes, out + args.width, 0.0f);
        }
        if (args.logits_grad) {
            float* out = static_cast<float*>(args.logits_grad) + row * args.width;
            for (int64_t c = 0; c < args.classes; ++c) out[c] = round_to(args.logits_grad_dtype, grad[c] * gradient_factor);
            std::fill(out + args.classes, out + args.width, 0.0f);
            if (args.logits_grad_max_abs)
                gradient_largest = std::max(gradient_largest, max_abs_range(out, 0, args.classes));
        }
    }
    if (args.logits_grad && args.logits_grad_max_abs) *args.logits_grad_max_abs = gradient_largest;
    const double batch_loss = head_batch_loss(args, loss_sum);
    // Non-finite as the float it is reported as: a weighted loss can pass FLT_MAX in double.
    if (args.state && !(std::fabs(batch_loss) <= kLargestFloat)) args.state->found_inf = 1;
    if (args.metrics) {
        args.metrics[kMetricLossSum] += loss_sum;
        args.metrics[kMetricCorrect] += static_cast<double>(correct);
        args.metrics[kMetricCounted] += static_cast<double>(counted);
        args.metrics[kMetricBatchLoss] = batch_loss;
    }
}

}  // namespace mpt
