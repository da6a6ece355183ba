// C API: datasets. Argument checks and translation only.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "capi_internal.h"
#include "data/cifar10.h"

using mpt::capi::impl_of;
using mpt::capi::require_pointer;

extern "C" {

mpt_status mpt_dataset_create_u8(mpt_context_t* context, const uint8_t* samples, int64_t rows, int64_t features,
                                 const int32_t* labels, int32_t num_classes, float scale, float offset,
                                 mpt_dataset_t** out) {
    MPT_API_BEGIN
    impl_of(context, "context");
    require_pointer(samples, "samples");
    require_pointer(labels, "labels");
    require_pointer(out, "out");
    auto dataset = mpt::Dataset::from_u8(context->impl, samples, rows, features, labels, num_classes, scale, offset);
    *out = new mpt_dataset{std::move(dataset)};
    MPT_API_END
}

mpt_status mpt_dataset_create_f32(mpt_context_t* context, const float* samples, int64_t rows, int64_t features,
                                  const int32_t* labels, int32_t num_classes, int check_finite, mpt_dataset_t** out) {
    MPT_API_BEGIN
    impl_of(context, "context");
    require_pointer(samples, "samples");
    require_pointer(labels, "labels");
    require_pointer(out, "out");
    auto dataset =
        mpt::Dataset::from_f32(context->impl, samples, rows, features, labels, num_classes, check_finite != 0);
    *out = new mpt_dataset{std::move(dataset)};
    MPT_API_END
}

mpt_status mpt_dataset_create_f32_targets(mpt_context_t* context, const float* samples, int64_t rows,
                                          int64_t features, const float* targets, int64_t target_width,
                                          int check_finite, mpt_dataset_t** out) {
    MPT_API_BEGIN
    impl_of(context, "context");
    require_pointer(samples, "samples");
    require_pointer(targets, "targets");
    require_pointer(out, "out");
    auto dataset = mpt::Dataset::from_f32_targets(context->impl, samples, rows, features, targets, target_width,
                                                  check_finite != 0);
    *out = new mpt_dataset{std::move(dataset)};
    MPT_API_END
}

mpt_status mpt_dataset_load_cifar10(mpt_context_t* context, const char* directory, int train, int64_t limit,
                                    mpt_dataset_t** out) {
    MPT_API_BEGIN
    impl_of(context, "context");
    require_pointer(directory, "directory");
    require_pointer(out, "out");
    auto dataset = mpt::load_cifar10(context->impl, directory, train != 0, limit);
    *out = new mpt_dataset{std::move(dataset)};
    MPT_API_END
}

void mpt_dataset_destroy(mpt_dataset_t* dataset) {
    mpt::DeviceScope device_scope;  // freeing GPU memory makes the backend's device current
    mpt::capi::destroy_holding_context(dataset);
}

mpt_status mpt_dataset_get_rows(const mpt_dataset_t* dataset, int64_t* out) {
    MPT_API_BEGIN
    const mpt::Dataset& impl = impl_of(dataset, "dataset");
    require_pointer(out, "out");
    *out = impl.rows();
    MPT_API_END
}

mpt_status mpt_dataset_get_features(const mpt_dataset_t* dataset, int64_t* out) {
    MPT_API_BEGIN
    const mpt::Dataset& impl = impl_of(dataset, "dataset");
    require_pointer(out, "out");
    *out = impl.features();
    MPT_API_END
}

mpt_status mpt_dataset_get_labels(const mpt_dataset_t* dataset, int32_t* out, int64_t count) {
    MPT_API_BEGIN
    const mpt::Dataset& impl = impl_of(dataset, "dataset");
    require_pointer(out, "out");
    if (!impl.has_labels())
        mpt::fail(MPT_STATUS_INVALID_ARGUMENT, "the dataset has float targets, not integer labels");
    if (count != impl.rows())
        mpt::fail(MPT_STATUS_SHAPE_MISMATCH,
             "label count is " + std::to_string(count) + ", the dataset has " + std::to_string(impl.rows()) + " rows");
    std::memcpy(out, impl.labels(), static_cast<size_t>(count) * sizeof(int32_t));
    MPT_API_END
}

mpt_status mpt_dataset_create_slice(const mpt_dataset_t* dataset, int64_t first, int64_t rows, mpt_dataset_t** out) {
    MPT_API_BEGIN
    const mpt::Dataset& impl = impl_of(dataset, "dataset");
    require_pointer(out, "out");
    auto slice = mpt::Dataset::slice(impl, first, rows);
    *out = new mpt_dataset{std::move(slice)};
    MPT_API_END
}

mpt_status mpt_dataset_create_weighted(const mpt_dataset_t* dataset, const float* weights, int64_t count,
                                       mpt_dataset_t** out) {
    MPT_API_BEGIN
    const mpt::Dataset& impl = impl_of(dataset, "dataset");
    if (count > 0) require_pointer(weights, "weights");  // none for none: the count's mismatch is the error
    require_pointer(out, "out");
    auto weighted = mpt::Dataset::weighted(impl, weights, count);
    *out = new mpt_dataset{std::move(weighted)};
    MPT_API_END
}

mpt_status mpt_dataset_create_subset(const mpt_dataset_t* dataset, const int64_t* rows, int64_t count,
                                     mpt_dataset_t** out) {
    MPT_API_BEGIN
    const mpt::Dataset& impl = impl_of(dataset, "dataset");
    require_pointer(rows, "rows");
    require_pointer(out, "out");
    auto subset = mpt::Dataset::subset(impl, rows, count);
    *out = new mpt_dataset{std::move(subset)};
    MPT_API_END
}

mpt_status mpt_dataset_create_standardized(const mpt_dataset_t* dataset, const float* mean, const float* stddev,
                                           int64_t count, mpt_dataset_t** out) {
    MPT_API_BEGIN
    const mpt::Dataset& impl = impl_of(dataset, "dataset");
    require_pointer(mean, "mean");
    require_pointer(stddev, "stddev");
    require_pointer(out, "out");
    auto standardized = mpt::Dataset::standardized(impl, mean, stddev, count);
    *out = new mpt_dataset{std::move(standardized)};
    MPT_API_END
}

mpt_status mpt_dataset_get_feature_statistics(const mpt_dataset_t* dataset, float* mean, float* stddev,
                                              int64_t count) {
    MPT_API_BEGIN
    const mpt::Dataset& impl = impl_of(dataset, "dataset");
    if (count != impl.features())
        mpt::fail(MPT_STATUS_SHAPE_MISMATCH, "feature statistics take one value per feature: " +
                                                 std::to_string(impl.features()) + ", not " + std::to_string(count));
    // Into copies, so that a failure leaves the caller's arrays as they were.
    std::vector<float> means(static_cast<size_t>(count));
    std::vector<float> deviations(static_cast<size_t>(count));
    impl.feature_statistics(means.data(), deviations.data());
    if (mean) std::copy(means.begin(), means.end(), mean);
    if (stddev) std::copy(deviations.begin(), deviations.end(), stddev);
    MPT_API_END
}

}  // extern "C"
