// Loss functions and the accuracy metric that the fused loss head computes in fp32.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace mpt {

enum class LossKind : uint8_t {
    sparse_categorical_crossentropy = 0,  // int32 labels
    categorical_crossentropy = 1,         // one-hot (or soft) float targets
    binary_crossentropy = 2,              // float targets in [0, 1], mean over outputs
    mean_squared_error = 3,               // float targets, mean over outputs
    mean_absolute_error = 4,              // float targets, mean over outputs
    huber = 5                             // float targets, mean over outputs (LossConfig::huber_delta)
};

// Keras's backend epsilon: probabilities are clipped to [eps, 1 - eps] before a log.
constexpr float kProbabilityEpsilon = 1e-7f;
// The largest finite float (FLT_MAX): a batch loss beyond it, as the float it is reported as, is not
// finite (the heads sum in double, so a weighted loss can pass it while its sum stays finite).
constexpr double kLargestFloat = 3.4028234663852886e38;

const char* loss_name(LossKind loss);
inline bool loss_uses_labels(LossKind loss) { return loss == LossKind::sparse_categorical_crossentropy; }
// The regression losses: an elementwise distance between each output and its float target.
MPT_HOST_DEVICE bool is_regression(LossKind loss) {
    return loss == LossKind::mean_squared_error || loss == LossKind::mean_absolute_error || loss == LossKind::huber;
}
// Label smoothing applies to the cross-entropy losses (Keras's categorical and binary ones, PyTorch's
// CrossEntropyLoss with class indices); a regression has no labels to smooth.
inline bool loss_takes_label_smoothing(LossKind loss) { return !is_regression(loss); }
// Huber's delta: finite and positive (0 would make the loss and every gradient 0).
inline bool valid_huber_delta(float delta) { return std::isfinite(delta) && delta > 0.0f; }
// The label smoothing a loss head accepts: in [0, 1), and 0 for a loss that takes none.
inline bool valid_label_smoothing(LossKind loss, float smoothing) {
    return smoothing >= 0.0f && smoothing < 1.0f && (smoothing == 0.0f || loss_takes_label_smoothing(loss));
}

// The loss a trainer computes: its kind, and the label smoothing s in [0, 1) of a cross-entropy,
// which trains towards t (1 - s) + s / n instead of the target t: n is the model's outputs for the
// categorical losses (sparse labels as one-hot rows over them; PyTorch's C, Keras's last dimension),
// 2 for binary cross-entropy (each output is a two-class problem). s = 0 trains towards t exactly.
struct LossConfig {
    LossKind kind = LossKind::sparse_categorical_crossentropy;
    float label_smoothing = 0.0f;
    // Keras's class_weight, for the categorical losses: in training (fit, step), each row's loss
    // and gradient are multiplied by the weight of its class (its label, or the first largest of its
    // targets), still averaged over the batch's rows. Empty: none. Evaluation is unweighted.
    std::vector<float> class_weights;
    // Huber's (LossKind::huber): where |y - t| exceeds it the loss grows linearly (Keras's `delta`).
    float huber_delta = 1.0f;
};

inline bool loss_takes_class_weights(LossKind loss) {
    return loss == LossKind::sparse_categorical_crossentropy || loss == LossKind::categorical_crossentropy;
}
// Finite, >= 0, and not all 0 (which would train nothing).
inline bool valid_class_weights(const float* weights, int64_t count) {
    bool any_positive = false;
    for (int64_t i = 0; i < count; ++i) {
        if (!(std::isfinite(weights[i]) && weights[i] >= 0.0f)) return false;
        any_positive |= weights[i] > 0.0f;
    }
    return any_positive;
}

// s / n above: what smoothing adds to every target of a row of `classes` outputs.
MPT_HOST_DEVICE float label_smoothing_share(LossKind loss, float smoothing, int64_t classes) {
    const float n = loss == LossKind::binary_crossentropy ? 2.0f : static_cast<float>(classes);
    return smoothing / n;
}

// The target a loss trains towards: t (1 - s) + share, rounded after each operation on every
// backend (nvcc would fuse them into one FMA; the core builds with -ffp-contract=off). With s = 0
// and share = 0 it is exactly t.
MPT_HOST_DEVICE float smoothed_target(float target, float smoothing, float share) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(__fmul_rn(target, 1.0f - smoothing), share);
#else
    return target * (1.0f - smoothing) + share;
#endif
}

// One output's term of a regression loss, d = y - t over `classes` outputs (inverse_classes = 1 /
// classes): the loss (in double) and dloss/dy. Keras's formulas: squared d^2; absolute |d|; Huber
// d^2 / 2 up to |d| = delta, then delta (|d| - delta / 2). Where |d| has no derivative (d = 0) the
// gradient is 0, as TensorFlow's; a NaN d gives a NaN gradient. One definition for every backend.
struct RegressionTerm {
    double loss;
    float gradient;
};
MPT_HOST_DEVICE RegressionTerm regression_term(LossKind loss, float y, float t, float delta, float inverse_classes) {
    const float difference = y - t;
    const double d = static_cast<double>(difference);
    if (loss == LossKind::mean_squared_error) return {d * d * inverse_classes, 2.0f * difference * inverse_classes};
    const double size = d < 0.0 ? -d : d;
    // The sign's gradient: +-1, 0 at 0, NaN for NaN.
    const float sign = difference > 0.0f ? 1.0f : difference < 0.0f ? -1.0f : difference;
    if (loss == LossKind::mean_absolute_error) return {size * inverse_classes, sign * inverse_classes};
    if (size <= delta) return {0.5 * d * d * inverse_classes, difference * inverse_classes};
    return {static_cast<double>(delta) * (size - 0.5 * delta) * inverse_classes, sign * delta * inverse_classes};
}

}  // namespace mpt
