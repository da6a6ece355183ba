// The rows of a dataset as the caller gave them (uint8 samples stay uint8: CIFAR-10 is 150 MB, not
// 600), shared by the dataset made from them and every slice of it (mpt_dataset_create_slice), and
// their one copy in a GPU's memory: a training set and its validation slice cost the device once.
// A weighted dataset's row weights (mpt_dataset_create_weighted) are a storage of their own.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/context.h"

namespace mpt {

// Where the backend reads a dataset from: host memory on the CPU, device memory on a GPU when the
// dataset is resident there, host memory when it is streamed (too large for its device budget).
struct DatasetView {
    const void* samples;
    const int32_t* labels;
    const float* targets;
    const float* row_weights;
    bool streamed;
    // A standardized dataset's per-feature means and divisors (Dataset::device_view), else null.
    const float* feature_mean = nullptr;
    const float* feature_divisor = nullptr;
};

class DatasetStorage {
public:
    // `always_placed`: on a GPU in device memory whatever the dataset device budget (a
    // standardization's per-feature values, which the gather kernel reads even for streamed rows);
    // out of memory for it is an error rather than streaming.
    explicit DatasetStorage(std::shared_ptr<Context> context, bool always_placed = false)
        : context_(std::move(context)), always_placed_(always_placed) {}
    ~DatasetStorage();
    DatasetStorage(const DatasetStorage&) = delete;
    DatasetStorage& operator=(const DatasetStorage&) = delete;

    // Filled once, before the storage is shared: samples (in exactly one of u8 and f32) with labels
    // or targets, or row weights alone.
    std::vector<uint8_t> u8;
    std::vector<float> f32;
    std::vector<int32_t> labels;
    std::vector<float> targets;
    std::vector<float> row_weights;

    const std::shared_ptr<Context>& context() const { return context_; }
    bool is_u8() const { return !u8.empty(); }
    size_t bytes() const;  // every vector's
    // All of it in host memory (null where a vector is empty), as the CPU backend reads it.
    DatasetView host_view() const;

    // All rows in the context's backend memory, uploaded on first use on a GPU when they fit the
    // context's dataset device budget, its memory budget and the device; otherwise a streamed view
    // of host memory. Thread-safe.
    DatasetView device_view() const;
    // Whether device_view() chose to stream (false before its first call and on the CPU).
    bool streamed() const {
        std::lock_guard<std::mutex> lock(upload_mutex_);
        return streamed_;
    }

private:
    // With upload_mutex_ held. Returns what to log ("" for nothing), which the caller logs after
    // letting the mutex go: a log callback must not run under it.
    std::string place_on_device() const;
    const void* host_samples() const;
    size_t sample_bytes() const;

    std::shared_ptr<Context> context_;
    const bool always_placed_;
    mutable std::mutex upload_mutex_;
    mutable bool placed_ = false;        // residency decided (on the first device_view)
    mutable bool streamed_ = false;
    mutable size_t reserved_bytes_ = 0;  // held in the context's memory tracker while resident
    mutable void* device_samples_ = nullptr;
    mutable void* device_labels_ = nullptr;
    mutable void* device_targets_ = nullptr;
    mutable void* device_row_weights_ = nullptr;
};

}  // namespace mpt
