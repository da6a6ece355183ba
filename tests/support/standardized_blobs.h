// Shared by the standardization suites (standardized datasets, models that standardize their
// inputs): the blobs, their statistics through the C API, and the same rows standardized here, as
// the header says, into float datasets to compare with bit for bit.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/dataset_run.h"

namespace mpt_test {
namespace standardizing {

inline constexpr int64_t kRows = 120;
inline constexpr int64_t kTrainingRows = 90;  // the last 30 validate

struct Statistics {
    std::vector<float> mean = std::vector<float>(kBlobFeatures);
    std::vector<float> stddev = std::vector<float>(kBlobFeatures);
};

inline Statistics statistics_of(const mpt_dataset_t* dataset) {
    Statistics statistics;
    REQUIRE_OK(mpt_dataset_get_feature_statistics(dataset, statistics.mean.data(), statistics.stddev.data(),
                                                  kBlobFeatures));
    return statistics;
}

// The values a dataset of `kind` gives for `blobs` (make_dataset's uint8 quantisation, exactly
// representable after its scale and offset).
inline std::vector<float> given_values(const Blobs& blobs, Kind kind) {
    if (kind != Kind::u8_labels) return blobs.x;
    std::vector<float> values(blobs.x.size());
    for (size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<float>(std::clamp(std::lround(blobs.x[i] * 16.0f + 128.0f), 0L, 255L)) / 16 - 8;
    return values;
}

// The same rows with their samples standardized here as the header says, each operation in float.
inline Blobs standardized_copy(const Blobs& blobs, Kind kind, const Statistics& by) {
    Blobs copy = blobs;
    copy.x = given_values(blobs, kind);
    for (size_t i = 0; i < copy.x.size(); ++i) {
        const size_t f = i % kBlobFeatures;
        const float centred = copy.x[i] - by.mean[f];
        copy.x[i] = centred / by.stddev[f];
    }
    return copy;
}

// The same, standardized here into float datasets (scale 1, offset 0: batched as they are).
inline mpt_dataset_t* split_copied(const BlobTrainer& trainer, const Blobs& blobs, Kind kind, mpt_dataset_t** validation) {
    mpt_dataset_t* whole = make_dataset(trainer, blobs, kind);
    mpt_dataset_t* head = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(whole, 0, kTrainingRows, &head));
    const Blobs copy = standardized_copy(blobs, kind, statistics_of(head));
    mpt_dataset_destroy(head);
    mpt_dataset_destroy(whole);
    const Kind float_kind = kind == Kind::u8_labels ? Kind::f32_labels : kind;
    *validation = make_dataset(trainer, rows_of(copy, kTrainingRows, kRows - kTrainingRows), float_kind);
    return make_dataset(trainer, rows_of(copy, 0, kTrainingRows), float_kind);
}

// Blobs far from 0 and of unequal spreads, where standardizing matters.
inline Blobs offset_blobs(uint64_t seed) {
    Blobs blobs = mpt_test::make_blobs(kRows, seed, 1.0);
    for (size_t i = 0; i < blobs.x.size(); ++i) blobs.x[i] = blobs.x[i] * (1.0f + static_cast<float>(i % 4)) + 3.0f;
    return blobs;
}

}  // namespace standardizing
}  // namespace mpt_test
