// A dataset: rows [first, first + rows) of a DatasetStorage, with int32 labels or float targets and
// how its samples are normalised, and optionally a weight per row (from a storage of their own).
// Made from the caller's rows, as a slice of another dataset (mpt_dataset_create_slice), or as
// another dataset's rows with weights (mpt_dataset_create_weighted); both share the source's rows.
// A subset (mpt_dataset_create_subset) copies the rows it picks into a storage of its own.
// Batches are gathered and normalised from it by the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/context.h"
#include "core/dtype.h"
#include "data/dataset_storage.h"
#include "data/feature_standardization.h"

namespace mpt {

// Which rows a dataset reads (its storage and first row, not its weights), kept without keeping
// them alive: whether a later dataset reads the same rows (Dataset::reads_rows_of).
struct DatasetRows {
    std::weak_ptr<const DatasetStorage> storage;
    int64_t first = -1;  // -1: unknown rows
    int64_t rows = 0;
    bool known() const { return first >= 0; }
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
    // Rows [first, first + rows) of `source`, sharing its storage (nothing is copied); a slice of a
    // slice counts from that slice's first row.
    static std::shared_ptr<Dataset> slice(const Dataset& source, int64_t first, int64_t rows);
    // `source`'s rows with `weights[r]` for row r (rows() of them, finite and >= 0; copied), in place of
    // any it had: Keras's sample_weight.
    static std::shared_ptr<Dataset> weighted(const Dataset& source, const float* weights, int64_t count);
    // Copies of `source`'s rows indices[0], ..., indices[count - 1] (each in [0, rows()); repeats
    // allowed), in that order, with their labels or targets and weights, and `source`'s
    // normalisation: a fold's training rows, a stratified split, a bootstrap sample.
    static std::shared_ptr<Dataset> subset(const Dataset& source, const int64_t* indices, int64_t count);
    // `source`'s rows (shared) whose samples are standardized feature by feature after the
    // normalisation: (x * scale + offset - mean[f]) / max(stddev[f], 1e-7) (Keras's Normalization
    // layer; `count` = features, each finite, stddev >= 0; copied), in place of any standardization
    // `source` had.
    static std::shared_ptr<Dataset> standardized(const Dataset& source, const float* mean, const float* stddev,
                                                 int64_t count);
    // Each feature's mean and standard deviation (the population's: divided by rows) over this
    // dataset's rows of the values its batches hold before any rounding to a low precision
    // (standardized ones, for a standardized dataset), summed in double: Keras's Normalization.adapt.
    void feature_statistics(float* mean, float* stddev) const;

    const std::shared_ptr<Context>& context() const { return storage_->context(); }
    int64_t rows() const { return rows_; }
    int64_t features() const { return features_; }
    // Where this dataset's rows start in its storage (0 unless it is a slice).
    int64_t first_row() const { return first_; }
    bool is_u8() const { return storage_->is_u8(); }
    bool has_labels() const { return !storage_->labels.empty(); }
    int32_t num_classes() const { return num_classes_; }
    int64_t target_width() const { return target_width_; }
    float scale() const { return scale_; }
    float offset() const { return offset_; }
    bool standardized() const { return standardization_ != nullptr; }
    const std::shared_ptr<const FeatureStandardization>& standardization() const { return standardization_; }
    // Whether every value a batch of this dataset holds in `dtype` is one whose max decides the update
    // as no max at all (input_max_decides_as_none: 0, or a magnitude in [2^-40, 1]): uint8 samples
    // without a standardization, each of a byte's 256 values checked as the gathers compute it (CIFAR-10
    // at 1/255: [0, 1]). The update's finiteness proof then needs no pass over such a batch.
    bool batch_values_decide_as_none(DType dtype) const {
        return batch_values_decide_as_none_[static_cast<int>(dtype)];
    }
    // This dataset's rows' labels (rows() of them), or null without labels.
    const int32_t* labels() const { return has_labels() ? storage_->labels.data() + first_ : nullptr; }
    // Every target of this dataset's rows lies in [0, 1] (what binary cross-entropy needs); false
    // without targets.
    bool targets_in_unit_interval() const { return targets_in_unit_interval_; }
    bool has_row_weights() const { return weights_ != nullptr; }
    DatasetRows rows_read() const { return DatasetRows{storage_, first_, rows_}; }
    // Whether this dataset reads the rows `rows` describes (a weighted view of them does too).
    // A weak pointer keeps its control block, so a storage freed since never compares equal to a new one.
    bool reads_rows_of(const DatasetRows& rows) const {
        return !rows.storage.owner_before(storage_) && !storage_.owner_before(rows.storage) && rows.first == first_ &&
               rows.rows == rows_;
    }
    // This dataset's rows' weights (rows() of them), or null without weights.
    const float* row_weights() const { return weights_ ? weights_->row_weights.data() + weights_first_ : nullptr; }

    // This dataset's rows in the context's backend memory: its storage's view (see
    // DatasetStorage::device_view; a slice on a GPU places all of its storage) from row first_row(),
    // with its row weights' (placed the same way, and only when the rows are). Should the rows be
    // placed and not their weights, both are read from host memory: a view is resident or streamed
    // as a whole. A standardization's values are in backend memory either way.
    DatasetView device_view() const;
    // The bytes of the storage this dataset shares: a slice's are its source's, held once.
    size_t storage_bytes() const { return storage_->bytes(); }
    // Whether device_view() streams (false before its first call and on the CPU): the rows or their
    // weights could not be placed.
    bool streamed() const { return storage_->streamed() || (weights_ && weights_->streamed()); }

private:
    Dataset(std::shared_ptr<const DatasetStorage> storage, int64_t first, int64_t rows, int64_t features)
        : storage_(std::move(storage)), first_(first), rows_(rows), features_(features) {}
    void validate_labels() const;
    void find_targets_in_unit_interval();
    void find_batch_values_decide_as_none();  // after the normalisation is set

    std::shared_ptr<const DatasetStorage> storage_;
    std::shared_ptr<const DatasetStorage> weights_;  // row weights only; null: unweighted
    std::shared_ptr<const FeatureStandardization> standardization_;  // null: none
    int64_t weights_first_ = 0;                      // this dataset's first row in weights_
    int64_t first_;
    int64_t rows_;
    int64_t features_;
    int32_t num_classes_ = 0;
    int64_t target_width_ = 0;
    bool targets_in_unit_interval_ = false;
    bool batch_values_decide_as_none_[4] = {};  // by DType's value
    float scale_ = 1.0f;
    float offset_ = 0.0f;
};

}  // namespace mpt
