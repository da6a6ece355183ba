// A dataset kept as the caller gave it (uint8 samples stay uint8: CIFAR-10 is 150 MB, not 600),
// with int32 labels or float targets. Batches are gathered and normalised from it by the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/context.h"

namespace mpt {

// Where the backend reads a dataset from: host memory on the CPU, device memory on a GPU when the
// dataset is resident there, host memory when it is streamed (too large for its device budget).
struct DatasetView {
    const void* samples;
    const int32_t* labels;
    const float* targets;
    bool streamed;
};

class Dataset {
public:
    static std::shared_ptr<Dataset> from_u8(std::shared_ptr<Context> context, const uint8_t* samples, int64_t rows,
                                            int64_t features, const int32_t* labels, int32_t num_classes, float scale,
                                            float offset);
    static std::shared_ptr<Dataset> from_f32(std::shared_ptr<Context> context, const float* samples, int64_t rows,
                                             int64_t features, const int32_t* labels, int32_t num_classes,
                                             bool check_finite);
    static std::shared_ptr<Dataset> from_f32_targets(std::shared_ptr<Context> context, const float* samples,
                                                     int64_t rows, int64_t features, const float* targets,
                                                     int64_t target_width, bool check_finite);
    // Takes ownership of already validated uint8 storage (used by the CIFAR-10 loader).
    static std::shared_ptr<Dataset> adopt_u8(std::shared_ptr<Context> context, std::vector<uint8_t> samples,
                                             std::vector<int32_t> labels, int64_t features, int32_t num_classes,
                                             float scale, float offset);
    ~Dataset();

    const std::shared_ptr<Context>& context() const { return context_; }
    int64_t rows() const { return rows_; }
    int64_t features() const { return features_; }
    bool is_u8() const { return !u8_.empty(); }
    bool has_labels() const { return !labels_.empty(); }
    int32_t num_classes() const { return num_classes_; }
    int64_t target_width() const { return target_width_; }
    float scale() const { return scale_; }
    float offset() const { return offset_; }
    const std::vector<int32_t>& labels() const { return labels_; }
    const std::vector<float>& targets() const { return targets_; }
    // Every target lies in [0, 1] (what binary cross-entropy needs); false without targets.
    bool targets_in_unit_interval() const { return targets_in_unit_interval_; }

    // The dataset in the context's backend memory, uploaded on first use on a GPU when it fits the
    // context's dataset device budget, its memory budget and the device; otherwise a streamed view
    // of host memory. Thread-safe.
    DatasetView device_view() const;
    size_t storage_bytes() const;  // samples, labels and targets
    // Whether device_view() chose to stream (false before its first call and on the CPU).
    bool streamed() const {
        std::lock_guard<std::mutex> lock(upload_mutex_);
        return streamed_;
    }

private:
    Dataset(std::shared_ptr<Context> context, int64_t rows, int64_t features);
    void validate_labels() const;
    // With upload_mutex_ held. Returns what to log ("" for nothing), which the caller logs after
    // letting the mutex go: a log callback must not run under it.
    std::string place_on_device() const;
    const void* host_samples() const;  // uint8 or fp32 storage, whichever this dataset holds
    size_t sample_bytes() const;

    std::shared_ptr<Context> context_;
    int64_t rows_;
    int64_t features_;
    std::vector<uint8_t> u8_;
    std::vector<float> f32_;
    std::vector<int32_t> labels_;
    std::vector<float> targets_;
    int32_t num_classes_ = 0;
    int64_t target_width_ = 0;
    bool targets_in_unit_interval_ = false;
    float scale_ = 1.0f;
    float offset_ = 0.0f;

    mutable std::mutex upload_mutex_;
    mutable bool placed_ = false;     // residency decided (on the first device_view)
    mutable bool streamed_ = false;
    mutable size_t reserved_bytes_ = 0;  // held in the context's memory tracker while resident
    mutable void* device_samples_ = nullptr;
    mutable void* device_labels_ = nullptr;
    mutable void* device_targets_ = nullptr;
};

}  // namespace mpt
