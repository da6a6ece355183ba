// See dataset_storage.h.
#include "data/dataset_storage.h"

#include "core/error.h"

namespace mpt {

DatasetStorage::~DatasetStorage() {
    Backend& backend = context_->backend();
    if (device_samples_) backend.release(device_samples_);
    if (device_labels_) backend.release(device_labels_);
    if (device_targets_) backend.release(device_targets_);
    if (device_row_weights_) backend.release(device_row_weights_);
    context_->memory().unreserve(reserved_bytes_);
}

const void* DatasetStorage::host_samples() const {
    return is_u8() ? static_cast<const void*>(u8.data()) : static_cast<const void*>(f32.data());
}

size_t DatasetStorage::sample_bytes() const { return u8.size() + f32.size() * sizeof(float); }

size_t DatasetStorage::bytes() const {
    return sample_bytes() + labels.size() * sizeof(int32_t) + (targets.size() + row_weights.size()) * sizeof(float);
}

DatasetView DatasetStorage::host_view() const {
    return DatasetView{sample_bytes() ? host_samples() : nullptr, labels.empty() ? nullptr : labels.data(),
                       targets.empty() ? nullptr : targets.data(), row_weights.empty() ? nullptr : row_weights.data(),
                       false};
}

DatasetView DatasetStorage::device_view() const {
    Backend& backend = context_->backend();
    if (backend.kind() == BackendKind::cpu) return host_view();
    DatasetView view = host_view();
    std::string note;
    {
        std::lock_guard<std::mutex> lock(upload_mutex_);
        if (!placed_) note = place_on_device();
        if (streamed_)
            view.streamed = true;
        else
            view = DatasetView{device_samples_, static_cast<const int32_t*>(device_labels_),
                               static_cast<const float*>(device_targets_), static_cast<const float*>(device_row_weights_),
                               false};
    }
    if (!note.empty()) context_->log(MPT_LOG_LEVEL_INFO, note);
    return view;
}

std::string DatasetStorage::place_on_device() const {
    Backend& backend = context_->backend();
    const size_t total = bytes();
    const size_t budget = context_->config().dataset_device_budget;
    auto stream = [&](const std::string& why) {
        streamed_ = true;
        placed_ = true;
        return "dataset: " + std::to_string(total >> 20) + " MiB streamed from host memory (" + why + ")";
    };
    if (total > budget && !always_placed_)
        return stream("over the dataset device budget of " + std::to_string(budget) + " bytes");
    try {
        context_->memory().reserve(total);
    } catch (const Error& error) {
        if (always_placed_) throw;
        return stream(error.what());
    }
    reserved_bytes_ = total;
    auto upload = [&](void*& device, const void* host, size_t size) {
        if (size == 0) return;
        device = backend.allocate(size);
        backend.copy_to_device(device, host, size);
    };
    try {
        upload(device_samples_, host_samples(), sample_bytes());
        upload(device_labels_, labels.data(), labels.size() * sizeof(int32_t));
        upload(device_targets_, targets.data(), targets.size() * sizeof(float));
        upload(device_row_weights_, row_weights.data(), row_weights.size() * sizeof(float));
    } catch (const Error& error) {
        for (void** device : {&device_samples_, &device_labels_, &device_targets_, &device_row_weights_}) {
            backend.release(*device);
            *device = nullptr;
        }
        context_->memory().unreserve(reserved_bytes_);
        reserved_bytes_ = 0;
        if (error.status() != MPT_STATUS_OUT_OF_MEMORY || always_placed_) throw;
        return stream("the device is out of memory");
    }
    placed_ = true;
    return std::string();
}

}  // namespace mpt
