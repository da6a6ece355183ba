// See initializer.h.
#include "nn/initializer.h"

#include <cmath>

namespace mpt {

namespace {

// The standard deviation of a standard normal truncated to [-2, 2] (Keras's constant).
constexpr double kTruncatedStddev = 0.87962566103423978;
constexpr double kTwoPi = 6.283185307179586476925286766559;

}  // namespace

WeightDistribution::WeightDistribution(Initializer initializer, int64_t fan_in, int64_t fan_out) {
    double scale = 1.0, n = static_cast<double>(fan_in);
    switch (initializer) {
        case Initializer::glorot_uniform:
        case Initializer::glorot_normal: n = static_cast<double>(fan_in + fan_out) / 2.0; break;
        case Initializer::he_uniform:
        case Initializer::he_normal: scale = 2.0; break;
        case Initializer::lecun_uniform:
        case Initializer::lecun_normal: break;
    }
    normal_ = initializer == Initializer::glorot_normal || initializer == Initializer::he_normal ||
              initializer == Initializer::lecun_normal;
    width_ = normal_ ? static_cast<float>(std::sqrt(scale / n) / kTruncatedStddev)
                     : static_cast<float>(std::sqrt(3.0 * scale / n));
    // Glorot-uniform's limit as mptrain always computed it, sqrt(6 / (fan_in + fan_out)) in float,
    // so that default-initialised models keep their exact initial weights.
    if (initializer == Initializer::glorot_uniform)
        width_ = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
}

float WeightDistribution::draw(Rng& rng) const {
    if (!normal_) return (2.0f * rng.next_unit_float() - 1.0f) * width_;
    // Box-Muller from two 24-bit uniforms (1 - u in (0, 1], so the log is finite), redrawn outside
    // 2 stddev as a truncated normal is.
    for (;;) {
        const double radius = std::sqrt(-2.0 * std::log(1.0 - static_cast<double>(rng.next_unit_float())));
        const double z = radius * std::cos(kTwoPi * static_cast<double>(rng.next_unit_float()));
        if (std::fabs(z) <= 2.0) return static_cast<float>(z * width_);
    }
}

}  // namespace mpt
