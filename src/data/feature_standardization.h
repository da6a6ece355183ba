// Per-feature standardization, as Keras's Normalization layer: feature f's value x becomes
// (x - mean[f]) / max(stddev[f], 1e-7), each operation rounded in float32. A standardized dataset
// (Dataset::standardized) and a model that standardizes its inputs (Model::set_input_standardization)
// each hold one; the backend's gather reads its means and divisors from backend memory, and a
// model's predictions from host inputs apply it on the host with the same operations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "data/dataset_storage.h"

namespace mpt {

class FeatureStandardization {
public:
    // `count` values in each of `mean` and `stddev` (copied), for something of `features` features
    // that `owner` names in errors ("a standardized dataset"). Throws MPT_STATUS_SHAPE_MISMATCH for
    // another count and MPT_STATUS_INVALID_ARGUMENT for a non-finite mean or a standard deviation
    // that is not finite and >= 0, naming the first such feature.
    static std::shared_ptr<const FeatureStandardization> make(std::shared_ptr<Context> context, const float* mean,
                                                              const float* stddev, int64_t count, int64_t features,
                                                              const std::string& owner);

    int64_t features() const { return static_cast<int64_t>(stddev_.size()); }
    // As given (the divisors floor the deviations).
    const std::vector<float>& mean() const { return mean_; }
    const std::vector<float>& stddev() const { return stddev_; }
    // Bit for bit the same means and deviations.
    bool same_values(const FeatureStandardization& other) const;
    // On the host: the value the gather gives feature f's `value` (the build does not contract it).
    float apply(int64_t f, float value) const {
        const float* values = values_.f32.data();
        return (value - values[f]) / values[features() + f];
    }
    // The means and then the divisors in the context's backend memory (device memory on a GPU,
    // whatever the dataset device budget: out of memory is an error). Thread-safe.
    struct DeviceValues {
        const float* mean;
        const float* divisor;
    };
    DeviceValues device_values() const;

    FeatureStandardization(std::shared_ptr<Context> context, std::vector<float> mean, std::vector<float> stddev);

private:
    std::vector<float> mean_;
    std::vector<float> stddev_;
    DatasetStorage values_;  // f32: the means, then the divisors
};

}  // namespace mpt
