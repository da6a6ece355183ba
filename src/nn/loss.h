// Loss functions and the accuracy metric that the fused loss head computes in fp32.
#pragma once

#include <cstdint>

namespace mpt {

enum class LossKind : uint8_t {
    sparse_categorical_crossentropy = 0,  // int32 labels
    categorical_crossentropy = 1,         // one-hot (or soft) float targets
    binary_crossentropy = 2,              // float targets in [0, 1], mean over outputs
    mean_squared_error = 3                // float targets, mean over outputs
};

// Keras's backend epsilon: probabilities are clipped to [eps, 1 - eps] before a log.
constexpr float kProbabilityEpsilon = 1e-7f;

const char* loss_name(LossKind loss);
inline bool loss_uses_labels(LossKind loss) { return loss == LossKind::sparse_categorical_crossentropy; }

}  // namespace mpt
