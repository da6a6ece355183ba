// See dataset.h.
#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "amp/loss_scaler.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/finite_values.h"
#include "core/limits.h"

namespace mpt {

namespace {

void check_shape(int64_t rows, int64_t features) {
    require(rows > 0, MPT_STATUS_INVALID_ARGUMENT, "rows must be positive");
    require(features > 0, MPT_STATUS_INVALID_ARGUMENT, "features must be positive");
    require(rows <= (int64_t{1} << 31) - 1, MPT_STATUS_INVALID_ARGUMENT, "at most 2^31 - 1 rows are supported");
    checked_elements(rows, features, "the dataset (rows * features)");
}

}  // namespace

void Dataset::validate_labels() const {
    require(num_classes_ > 0, MPT_STATUS_INVALID_ARGUMENT, "num_classes must be positive");
    const std::vector<int32_t>& all = storage_->labels;
    for (size_t i = 0; i < all.size(); ++i)
        if (all[i] < 0 || all[i] >= num_classes_)
            fail(MPT_STATUS_INVALID_ARGUMENT, "label " + std::to_string(all[i]) + " at row " + std::to_string(i) +
                                                  " is outside [0, " + std::to_string(num_classes_) + ")");
}

void Dataset::find_targets_in_unit_interval() {
    // Once here, not at every step that checks it (NaN fails the comparison too).
    const float* begin = storage_->targets.data() + first_ * target_width_;
    targets_in_unit_interval_ =
        std::all_of(begin, begin + rows_ * target_width_, [](float t) { return t >= 0.0f && t <= 1.0f; });
}

void Dataset::find_batch_values_decide_as_none() {
    // Once per dataset, not per gathered batch: 256 values per dtype.
    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        bool all = is_u8() && !standardization_;
        for (int byte = 0; byte < 256 && all; ++byte) {
            // As the backends' gathers compute it: an fp32 multiply and add, each rounded (no FMA;
            // this library is built with -ffp-contract=off), then rounded to the batch's dtype.
            const float value = round_to(dtype, static_cast<float>(byte) * scale_ + offset_);
            all = input_max_decides_as_none(std::fabs(value));
        }
        batch_values_decide_as_none_[static_cast<int>(dtype)] = all;
    }
}

std::shared_ptr<Dataset> Dataset::from_u8(std::shared_ptr<Context> context, const uint8_t* samples, int64_t rows,
                                          int64_t features, const int32_t* labels, int32_t num_classes, float scale,
                                          float offset) {
    check_shape(rows, features);
    require(std::isfinite(scale) && std::isfinite(offset), MPT_STATUS_INVALID_ARGUMENT, "scale and offset must be finite");
    std::vector<uint8_t> copy(samples, samples + rows * features);
    std::vector<int32_t> label_copy(labels, labels + rows);
    return adopt_u8(std::move(context), std::move(copy), std::move(label_copy), features, num_classes, scale, offset);
}

std::shared_ptr<Dataset> Dataset::adopt_u8(std::shared_ptr<Context> context, std::vector<uint8_t> samples,
                                           std::vector<int32_t> labels, int64_t features, int32_t num_classes,
                                           float scale, float offset) {
    const int64_t rows = static_cast<int64_t>(labels.size());
    check_shape(rows, features);
    auto storage = std::make_shared<DatasetStorage>(std::move(context));
    storage->u8 = std::move(samples);
    storage->labels = std::move(labels);
    std::shared_ptr<Dataset> dataset(new Dataset(std::move(storage), 0, rows, features));
    dataset->num_classes_ = num_classes;
    dataset->scale_ = scale;
    dataset->offset_ = offset;
    dataset->find_batch_values_decide_as_none();
    dataset->validate_labels();
    return dataset;
}

std::shared_ptr<Dataset> Dataset::from_f32(std::shared_ptr<Context> context, const float* samples, int64_t rows,
                                           int64_t features, const int32_t* labels, int32_t num_classes,
                                           bool check_finite) {
    check_shape(rows, features);
    if (check_finite) require_finite(samples, rows, features, "sample");
    auto storage = std::make_shared<DatasetStorage>(std::move(context));
    storage->f32.assign(samples, samples + rows * features);
    storage->labels.assign(labels, labels + rows);
    std::shared_ptr<Dataset> dataset(new Dataset(std::move(storage), 0, rows, features));
    dataset->num_classes_ = num_classes;
    dataset->validate_labels();
    return dataset;
}

std::shared_ptr<Dataset> Dataset::from_f32_targets(std::shared_ptr<Context> context, const float* samples,
                                                   int64_t rows, int64_t features, const float* targets,
                                                   int64_t target_width, bool check_finite) {
    check_shape(rows, features);
    require(target_width > 0 && target_width <= (int64_t{1} << 24), MPT_STATUS_INVALID_ARGUMENT,
            "target_width must be in [1, 2^24]");
    if (check_finite) {
        require_finite(samples, rows, features, "sample");
        require_finite(targets, rows, target_width, "target of sample");
    }
    auto storage = std::make_shared<DatasetStorage>(std::move(context));
    storage->f32.assign(samples, samples + rows * features);
    storage->targets.assign(targets, targets + rows * target_width);
    std::shared_ptr<Dataset> dataset(new Dataset(std::move(storage), 0, rows, features));
    dataset->target_width_ = target_width;
    dataset->find_targets_in_unit_interval();
    return dataset;
}

std::shared_ptr<Dataset> Dataset::slice(const Dataset& source, int64_t first, int64_t rows) {
    if (first < 0 || first >= source.rows_)
        fail(MPT_STATUS_INVALID_ARGUMENT, "a slice's first row must lie in [0, " + std::to_string(source.rows_) +
                                              "), not " + std::to_string(first));
    if (rows <= 0 || rows > source.rows_ - first)
        fail(MPT_STATUS_INVALID_ARGUMENT, "a slice from row " + std::to_string(first) + " of a dataset of " +
                                              std::to_string(source.rows_) + " rows takes 1 to " +
                                              std::to_string(source.rows_ - first) + " rows, not " + std::to_string(rows));
    std::shared_ptr<Dataset> dataset(new Dataset(source));
    dataset->first_ = source.first_ + first;
    dataset->rows_ = rows;
    dataset->weights_first_ = source.weights_first_ + first;
    // A slice can leave out the rows whose targets kept its source from binary cross-entropy.
    if (dataset->target_width_ > 0) dataset->find_targets_in_unit_interval();
    return dataset;
}

std::shared_ptr<Dataset> Dataset::weighted(const Dataset& source, const float* weights, int64_t count) {
    if (count != source.rows_)
        fail(MPT_STATUS_SHAPE_MISMATCH, "a weighted dataset takes one weight per row: " + std::to_string(source.rows_) +
                                            " weights, not " + std::to_string(count));
    for (int64_t r = 0; r < count; ++r)
        if (!(std::isfinite(weights[r]) && weights[r] >= 0.0f)) {
            char value[32];
            std::snprintf(value, sizeof value, "%g", static_cast<double>(weights[r]));  // -1e-30, not -0.000000
            fail(MPT_STATUS_INVALID_ARGUMENT, "row weights must be finite and >= 0; the weight of row " +
                                                  std::to_string(r) + " is " + value);
        }
    auto storage = std::make_shared<DatasetStorage>(source.context());
    storage->row_weights.assign(weights, weights + count);
    std::shared_ptr<Dataset> dataset(new Dataset(source));
    dataset->weights_ = std::move(storage);
    dataset->weights_first_ = 0;
    return dataset;
}

std::shared_ptr<Dataset> Dataset::subset(const Dataset& source, const int64_t* indices, int64_t count) {
    if (count <= 0) fail(MPT_STATUS_INVALID_ARGUMENT, "a subset takes at least one row, not " + std::to_string(count));
    check_shape(count, source.features_);
    for (int64_t i = 0; i < count; ++i)
        if (indices[i] < 0 || indices[i] >= source.rows_)
            fail(MPT_STATUS_INVALID_ARGUMENT, "a subset's rows must lie in [0, " + std::to_string(source.rows_) +
                                                  "); row " + std::to_string(i) + " of the list is " +
                                                  std::to_string(indices[i]));
    const DatasetStorage& from = *source.storage_;
    auto storage = std::make_shared<DatasetStorage>(source.context());
    // Appends row r (of `source`) of `width` values from `all` to `to`.
    const auto copy_rows = [&](const auto& all, auto& to, int64_t width) {
        if (all.empty()) return;
        to.reserve(static_cast<size_t>(count * width));
        for (int64_t i = 0; i < count; ++i) {
            const auto begin = all.begin() + (source.first_ + indices[i]) * width;
            to.insert(to.end(), begin, begin + width);
        }
    };
    copy_rows(from.u8, storage->u8, source.features_);
    copy_rows(from.f32, storage->f32, source.features_);
    copy_rows(from.labels, storage->labels, 1);
    copy_rows(from.targets, storage->targets, source.target_width_);
    std::shared_ptr<Dataset> dataset(new Dataset(std::move(storage), 0, count, source.features_));
    dataset->num_classes_ = source.num_classes_;
    dataset->target_width_ = source.target_width_;
    dataset->scale_ = source.scale_;
    dataset->offset_ = source.offset_;
    dataset->standardization_ = source.standardization_;
    dataset->find_batch_values_decide_as_none();
    // Its own rows' targets decide binary cross-entropy, as a slice's do.
    if (dataset->target_width_ > 0) dataset->find_targets_in_unit_interval();
    if (source.weights_) {
        auto weights = std::make_shared<DatasetStorage>(source.context());
        weights->row_weights.reserve(static_cast<size_t>(count));
        const float* all = source.weights_->row_weights.data() + source.weights_first_;
        for (int64_t i = 0; i < count; ++i) weights->row_weights.push_back(all[indices[i]]);
        dataset->weights_ = std::move(weights);
    }
    return dataset;
}

std::shared_ptr<Dataset> Dataset::standardized(const Dataset& source, const float* mean, const float* stddev,
                                               int64_t count) {
    std::shared_ptr<const FeatureStandardization> standardization =
        FeatureStandardization::make(source.context(), mean, stddev, count, source.features_, "a standardized dataset");
    std::shared_ptr<Dataset> dataset(new Dataset(source));
    dataset->standardization_ = std::move(standardization);
    dataset->find_batch_values_decide_as_none();
    return dataset;
}

void Dataset::feature_statistics(float* mean, float* stddev) const {
    const DatasetStorage& storage = *storage_;
    const FeatureStandardization* standard = standardization_.get();
    const size_t features = static_cast<size_t>(features_);
    std::vector<float> row(features);
    // Row r's values as gather_batch computes them in fp32 (the same operations, not contracted).
    const auto load_row = [&](int64_t r) {
        const size_t at = static_cast<size_t>(first_ + r) * features;
        for (size_t f = 0; f < features; ++f) {
            const float x = storage.is_u8() ? static_cast<float>(storage.u8[at + f]) : storage.f32[at + f];
            const float value = x * scale_ + offset_;
            row[f] = standard ? standard->apply(static_cast<int64_t>(f), value) : value;
        }
    };
    // Two passes (the mean, then the squared deviations from it), as a one-pass sum of squares
    // loses the variance of features far from 0 to cancellation.
    std::vector<double> sums(features, 0.0);
    for (int64_t r = 0; r < rows_; ++r) {
        load_row(r);
        for (size_t f = 0; f < features; ++f) sums[f] += row[f];
    }
    for (size_t f = 0; f < features; ++f) sums[f] /= static_cast<double>(rows_);
    std::vector<double> squares(features, 0.0);
    for (int64_t r = 0; r < rows_; ++r) {
        load_row(r);
        for (size_t f = 0; f < features; ++f) {
            const double deviation = row[f] - sums[f];
            squares[f] += deviation * deviation;
        }
    }
    for (size_t f = 0; f < features; ++f) {
        mean[f] = static_cast<float>(sums[f]);
        stddev[f] = static_cast<float>(std::sqrt(squares[f] / static_cast<double>(rows_)));
    }
}

DatasetView Dataset::device_view() const {
    DatasetView view = storage_->device_view();
    if (weights_) {
        if (view.streamed) {  // the stager reads the rows from the host: the weights too, never placed
            view.row_weights = weights_->host_view().row_weights;
        } else {
            const DatasetView weights = weights_->device_view();
            if (!weights.streamed) {
                view.row_weights = weights.row_weights;
            } else {  // the rows placed, the weights not: the stager reads both from the host
                view = storage_->host_view();
                view.row_weights = weights_->host_view().row_weights;
                view.streamed = true;
            }
        }
        view.row_weights += weights_first_;
    }
    // Storage rows, dense in both memories: the slice starts first_ rows in.
    const size_t sample_size = is_u8() ? sizeof(uint8_t) : sizeof(float);
    view.samples = static_cast<const char*>(view.samples) + static_cast<size_t>(first_ * features_) * sample_size;
    if (view.labels) view.labels += first_;
    if (view.targets) view.targets += first_ * target_width_;
    if (standardization_) {
        const FeatureStandardization::DeviceValues values = standardization_->device_values();
        view.feature_mean = values.mean;
        view.feature_divisor = values.divisor;
    }
    return view;
}

}  // namespace mpt
