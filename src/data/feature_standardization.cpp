// See feature_standardization.h.
#include "data/feature_standardization.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace mpt {

std::shared_ptr<const FeatureStandardization> FeatureStandardization::make(std::shared_ptr<Context> context,
                                                                           const float* mean, const float* stddev,
                                                                           int64_t count, int64_t features,
                                                                           const std::string& owner) {
    if (count != features)
        fail(MPT_STATUS_SHAPE_MISMATCH, owner + " takes a mean and a standard deviation per feature: " +
                                            std::to_string(features) + " of each, not " + std::to_string(count));
    for (int64_t f = 0; f < count; ++f)
        if (!(std::isfinite(mean[f]) && std::isfinite(stddev[f]) && stddev[f] >= 0.0f)) {
            char values[64];
            std::snprintf(values, sizeof values, "mean %g, standard deviation %g", static_cast<double>(mean[f]),
                          static_cast<double>(stddev[f]));
            fail(MPT_STATUS_INVALID_ARGUMENT, "a standardization's means must be finite and its standard deviations "
                                              "finite and >= 0; feature " + std::to_string(f) + " has " + values);
        }
    return std::make_shared<const FeatureStandardization>(std::move(context), std::vector<float>(mean, mean + count),
                                                          std::vector<float>(stddev, stddev + count));
}

FeatureStandardization::FeatureStandardization(std::shared_ptr<Context> context, std::vector<float> mean,
                                               std::vector<float> stddev)
    : mean_(std::move(mean)), stddev_(std::move(stddev)), values_(std::move(context), /*always_placed=*/true) {
    values_.f32 = mean_;
    // Keras's floor on the divisor: a constant feature (standard deviation 0) becomes 0, not NaN.
    constexpr float kMinDivisor = 1e-7f;
    for (float deviation : stddev_) values_.f32.push_back(std::max(deviation, kMinDivisor));
}

bool FeatureStandardization::same_values(const FeatureStandardization& other) const {
    const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return same(mean_, other.mean_) && same(stddev_, other.stddev_);
}

FeatureStandardization::DeviceValues FeatureStandardization::device_values() const {
    const float* values = static_cast<const float*>(values_.device_view().samples);
    return DeviceValues{values, values + features()};
}

}  // namespace mpt
