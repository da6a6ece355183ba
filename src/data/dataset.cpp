// See dataset.h.
#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <string>

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

Dataset::Dataset(std::shared_ptr<Context> context, int64_t rows, int64_t features)
    : context_(std::move(context)), rows_(rows), features_(features) {}

Dataset::~Dataset() {
    Backend& backend = context_->backend();
    if (device_samples_) backend.release(device_samples_);
    if (device_labels_) backend.release(device_labels_);
    if (device_targets_) backend.release(device_targets_);
    context_->memory().unreserve(reserved_bytes_);
}

const void* Dataset::host_samples() const {
    return is_u8() ? static_cast<const void*>(u8_.data()) : static_cast<const void*>(f32_.data());
}

size_t Dataset::sample_bytes() const { return u8_.size() + f32_.size() * sizeof(float); }

size_t Dataset::storage_bytes() const {
    return sample_bytes() + labels_.size() * sizeof(int32_t) + targets_.size() * sizeof(float);
}

void Dataset::validate_labels() const {
    require(num_classes_ > 0, MPT_STATUS_INVALID_ARGUMENT, "num_classes must be positive");
    for (size_t i = 0; i < labels_.size(); ++i)
        if (labels_[i] < 0 || labels_[i] >= num_classes_)
            fail(MPT_STATUS_INVALID_ARGUMENT, "label " + std::to_string(labels_[i]) + " at row " + std::to_string(i) +
                                                  " is outside [0, " + std::to_string(num_classes_) + ")");
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
    std::shared_ptr<Dataset> dataset(new Dataset(std::move(context), rows, features));
    dataset->u8_ = std::move(samples);
    dataset->labels_ = std::move(labels);
    dataset->num_classes_ = num_classes;
    dataset->scale_ = scale;
    dataset->offset_ = offset;
    dataset->validate_labels();
    return dataset;
}

std::shared_ptr<Dataset> Dataset::from_f32(std::shared_ptr<Context> context, const float* samples, int64_t rows,
                                           int64_t features, const int32_t* labels, int32_t num_classes,
                                           bool check_finite) {
    check_shape(rows, features);
    if (check_finite) require_finite(samples, rows, features, "sample");
    std::shared_ptr<Dataset> dataset(new Dataset(std::move(context), rows, features));
    dataset->f32_.assign(samples, samples + rows * features);
    dataset->labels_.assign(labels, labels + rows);
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
    std::shared_ptr<Dataset> dataset(new Dataset(std::move(context), rows, features));
    dataset->f32_.assign(samples, samples + rows * features);
    dataset->targets_.assign(targets, targets + rows * target_width);
    dataset->target_width_ = target_width;
    // Once here, not at every step that checks it (NaN fails the comparison too).
    dataset->targets_in_unit_interval_ =
        std::all_of(dataset->targets_.begin(), dataset->targets_.end(), [](float t) { return t >= 0.0f && t <= 1.0f; });
    return dataset;
}

DatasetView Dataset::device_view() const {
    Backend& backend = context_->backend();
    DatasetView host{host_samples(), has_labels() ? labels_.data() : nullptr,
                     targets_.empty() ? nullptr : targets_.data(), false};
    if (backend.kind() == BackendKind::cpu) return host;
    DatasetView view = host;
    std::string note;
    {
        std::lock_guard<std::mutex> lock(upload_mutex_);
        if (!placed_) note = place_on_device();
        if (streamed_)
            view.streamed = true;
        else
            view = DatasetView{device_samples_, static_cast<const int32_t*>(device_labels_),
                               static_cast<const float*>(device_targets_), false};
    }
    if (!note.empty()) context_->log(MPT_LOG_LEVEL_INFO, note);
    return view;
}

std::string Dataset::place_on_device() const {
    Backend& backend = context_->backend();
    const size_t bytes = storage_bytes();
    const size_t budget = context_->config().dataset_device_budget;
    auto stream = [&](const std::string& why) {
        streamed_ = true;
        placed_ = true;
        return "dataset: " + std::to_string(bytes >> 20) + " MiB streamed from host memory (" + why + ")";
    };
    if (bytes > budget) return stream("over the dataset device budget of " + std::to_string(budget) + " bytes");
    try {
        context_->memory().reserve(bytes);
    } catch (const Error& error) {
        return stream(error.what());
    }
    reserved_bytes_ = bytes;
    auto upload = [&](void*& device, const void* host, size_t size) {
        if (size == 0) return;
        device = backend.allocate(size);
        backend.copy_to_device(device, host, size);
    };
    try {
        upload(device_samples_, host_samples(), sample_bytes());
        upload(device_labels_, labels_.data(), labels_.size() * sizeof(int32_t));
        upload(device_targets_, targets_.data(), targets_.size() * sizeof(float));
    } catch (const Error& error) {
        for (void** device : {&device_samples_, &device_labels_, &device_targets_}) {
            backend.release(*device);
            *device = nullptr;
        }
        context_->memory().unreserve(reserved_bytes_);
        reserved_bytes_ = 0;
        if (error.status() != MPT_STATUS_OUT_OF_MEMORY) throw;
        return stream("the device is out of memory");
    }
    placed_ = true;
    return std::string();
}

}  // namespace mpt
