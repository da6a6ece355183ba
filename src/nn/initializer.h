// How a Dense layer's weights start: Keras's variance-scaling initializers (Glorot, He, LeCun; each
// uniform or truncated normal). Biases start at 0 whatever the initializer, as Keras's do.
#pragma once

#include <cstdint>

#include "core/rng.h"

namespace mpt {

enum class Initializer : uint8_t {
    glorot_uniform = 0,  // Keras's default for Dense
    glorot_normal = 1,
    he_uniform = 2,
    he_normal = 3,
    lecun_uniform = 4,
    lecun_normal = 5
};

// One initializer for one layer's fan-in and fan-out: Keras's VarianceScaling(scale, mode,
// distribution), whose draws have variance scale / n, n the fan-in (He, LeCun) or the fans' mean
// (Glorot). Uniform draws lie in [-limit, limit) with limit = sqrt(3 scale / n); normal ones are
// N(0, stddev) truncated to 2 stddev, stddev = sqrt(scale / n) / 0.8796... so that the truncated
// distribution keeps the variance.
class WeightDistribution {
public:
    WeightDistribution(Initializer initializer, int64_t fan_in, int64_t fan_out);

    float draw(Rng& rng) const;
    bool normal() const { return normal_; }
    // limit for uniform draws, stddev before truncation for normal ones.
    float width() const { return width_; }

private:
    bool normal_ = false;
    float width_ = 0.0f;
};

}  // namespace mpt
