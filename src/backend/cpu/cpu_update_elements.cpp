// See cpu_update_elements.h. Each instantiation calls the shared element rule on a copy of the
// options whose discrete choices are constants (the kind, Nesterov, centered) or promised to the
// compiler (whether momentum and weight decay are 0): the rule's switch and ifs fold away, and with
// __restrict arrays and -fno-math-errno (sqrtf without its errno path) the loop is straight-line
// arithmetic, which GCC vectorises. -ffp-contract=off keeps each product and sum rounded as the rule
// writes them, so the vector lanes compute what the scalar rule would.
#include "backend/cpu/cpu_update_elements.h"

namespace mpt {

namespace {

template <OptimizerKind kKind, bool kMomentum, bool kNesterov, bool kCentered, bool kDecay>
void update_range(const OptimizerConfig& options, const OptimizerStepScalars& scalars, float* __restrict master,
                  const float* __restrict gradient, float* __restrict state1, float* __restrict state2,
                  float* __restrict state3, int64_t begin, int64_t end) {
    OptimizerConfig config = options;
    config.kind = kKind;
    config.nesterov = kNesterov;
    config.centered = kCentered;
    if (!kMomentum) config.momentum = 0.0f;
    if (!kDecay) config.weight_decay = 0.0f;
    // The dispatch chose kMomentum and kDecay from these very values.
    if ((config.momentum != 0.0f) != kMomentum || (config.weight_decay != 0.0f) != kDecay) __builtin_unreachable();
    const int states = optimizer_state_count(config);
    for (int64_t i = begin; i < end; ++i) {
        float s1 = states > 0 ? state1[i] : 0.0f;
        float s2 = states > 1 ? state2[i] : 0.0f;
        float s3 = states > 2 ? state3[i] : 0.0f;
        master[i] = optimizer_update_element(config, scalars, master[i], gradient[i], s1, s2, s3);
        if (states > 0) state1[i] = s1;
        if (states > 1) state2[i] = s2;
        if (states > 2) state3[i] = s3;
    }
}

using UpdateRange = void (*)(const OptimizerConfig&, const OptimizerStepScalars&, float*, const float*, float*, float*,
                             float*, int64_t, int64_t);

template <OptimizerKind kKind, bool kMomentum, bool kNesterov, bool kCentered>
UpdateRange with_decay(bool decay) {
    return decay ? &update_range<kKind, kMomentum, kNesterov, kCentered, true>
                 : &update_range<kKind, kMomentum, kNesterov, kCentered, false>;
}

// The instantiation for `optimizer`'s choices; options a rule does not read are fixed (Adam's
// and Lion's momentum and Nesterov, SGD's centered, RMSprop's Nesterov: the trainer refuses it with
// momentum).
UpdateRange update_range_for(const OptimizerConfig& optimizer) {
    const bool momentum = optimizer.momentum != 0.0f, decay = optimizer.weight_decay != 0.0f;
    switch (optimizer.kind) {
        case OptimizerKind::sgd:
            if (!momentum) return with_decay<OptimizerKind::sgd, false, false, false>(decay);
            return optimizer.nesterov ? with_decay<OptimizerKind::sgd, true, true, false>(decay)
                                      : with_decay<OptimizerKind::sgd, true, false, false>(decay);
        case OptimizerKind::rmsprop:
            if (momentum)
                return optimizer.centered ? with_decay<OptimizerKind::rmsprop, true, false, true>(decay)
                                          : with_decay<OptimizerKind::rmsprop, true, false, false>(decay);
            return optimizer.centered ? with_decay<OptimizerKind::rmsprop, false, false, true>(decay)
                                      : with_decay<OptimizerKind::rmsprop, false, false, false>(decay);
        case OptimizerKind::adam: return with_decay<OptimizerKind::adam, false, false, false>(decay);
        case OptimizerKind::adamw: return with_decay<OptimizerKind::adamw, false, false, false>(decay);
        case OptimizerKind::lion: return with_decay<OptimizerKind::lion, false, false, false>(decay);
    }
    return nullptr;
}

}  // namespace

void update_elements(const OptimizerConfig& optimizer, const OptimizerStepScalars& scalars, float* master,
                     const float* gradient, float* const* states, int64_t begin, int64_t end) {
    update_range_for(optimizer)(optimizer, scalars, master, gradient, states[0], states[1], states[2], begin, end);
}

}  // namespace mpt
