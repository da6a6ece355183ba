// Shared by the test suites of datasets made from other datasets' rows (slices, subsets): the blobs
// as each kind of dataset, and one run (fit with validation from the epoch-end callback, steps,
// evaluations, predictions) whose results two ways of making the same rows must reproduce bit for
// bit.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace mpt_test {

// Rows [first, first + rows) of `blobs`, copied.
inline Blobs rows_of(const Blobs& blobs, int64_t first, int64_t rows) {
    Blobs part;
    part.x.assign(blobs.x.begin() + first * kBlobFeatures, blobs.x.begin() + (first + rows) * kBlobFeatures);
    part.y.assign(blobs.y.begin() + first, blobs.y.begin() + first + rows);
    return part;
}

// The three kinds of storage a dataset can have.
enum class Kind { u8_labels, f32_labels, f32_targets };

inline const char* kind_name(Kind kind) {
    return kind == Kind::u8_labels ? "u8 labels" : kind == Kind::f32_labels ? "f32 labels" : "f32 one-hot targets";
}

// `blobs` as a dataset of `kind`: uint8 samples quantise the features (x = (q - 128) / 16).
inline mpt_dataset_t* make_dataset(const BlobTrainer& trainer, const Blobs& blobs, Kind kind) {
    if (kind == Kind::f32_labels) return trainer.labels(blobs);
    if (kind == Kind::f32_targets) return trainer.one_hot(blobs);
    std::vector<uint8_t> quantised(blobs.x.size());
    for (size_t i = 0; i < blobs.x.size(); ++i)
        quantised[i] = static_cast<uint8_t>(std::clamp(std::lround(blobs.x[i] * 16.0f + 128.0f), 0L, 255L));
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_u8(trainer.context, quantised.data(), blobs.rows(), kBlobFeatures, blobs.y.data(),
                                     kBlobClasses, 1.0f / 16, -8.0f, &dataset));
    return dataset;
}

struct Evaluation {
    float loss = NAN, accuracy = NAN;
};

inline Evaluation evaluate(const BlobTrainer& trainer, const mpt_dataset_t* dataset, int64_t batch = 16) {
    Evaluation result;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, batch, &result.loss, &result.accuracy));
    return result;
}

// What a run on one dataset left: weights, step losses, evaluations (also from the epoch-end
// callback, as validation) and the loss scaler's state.
struct Run {
    std::vector<float> weights;
    std::vector<float> losses;
    std::vector<float> validation;
    float scale = 0;
    int64_t skipped = -1;
};

inline bool same_run(const Run& a, const Run& b) {
    return same_bits(a.weights, b.weights) && same_bits(a.losses, b.losses) && same_bits(a.validation, b.validation) &&
           a.scale == b.scale && a.skipped == b.skipped;
}

struct ValidationLog {
    mpt_trainer_t* trainer;
    const mpt_dataset_t* validation;
    std::vector<float>* values;
};

inline int validate_each_epoch(int64_t /*epoch*/, float loss, float accuracy, void* user_data) {
    auto* log = static_cast<ValidationLog*>(user_data);
    float validation_loss = NAN, validation_accuracy = NAN;
    if (mpt_trainer_evaluate(log->trainer, log->validation, 0, &validation_loss, &validation_accuracy) != MPT_STATUS_OK)
        return 1;
    log->values->insert(log->values->end(), {loss, accuracy, validation_loss, validation_accuracy});
    return 0;
}

// Fits `train` for 3 shuffled epochs with `validation` evaluated from the epoch-end callback, takes
// two steps, evaluates both sets and predicts.
// Makes a training set of `blobs` as `kind` for `trainer`, and its validation set in *validation.
using MakeSplit = mpt_dataset_t* (*)(const BlobTrainer&, const Blobs&, Kind, mpt_dataset_t** validation);

inline Run train(const BlobTrainerSetup& setup, Kind kind, const Blobs& blobs, MakeSplit make_train,
                 const Blobs& predicted) {
    BlobTrainer trainer(setup);
    mpt_dataset_t* validation = nullptr;
    mpt_dataset_t* training = make_train(trainer, blobs, kind, &validation);
    Run run;
    ValidationLog log{trainer.trainer, validation, &run.validation};
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, validate_each_epoch, &log));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, training, 3, 16, 1));
    for (int64_t first : {int64_t{5}, int64_t{40}}) {
        float loss = NAN;
        REQUIRE_OK(mpt_trainer_step(trainer.trainer, training, first, 16, &loss));
        run.losses.push_back(loss);
    }
    for (const mpt_dataset_t* dataset : {training, validation}) {
        const Evaluation evaluation = evaluate(trainer, dataset);
        run.losses.insert(run.losses.end(), {evaluation.loss, evaluation.accuracy});
    }
    run.weights = trainer.weights();
    const std::vector<float> predictions = trainer.predict(predicted);
    run.weights.insert(run.weights.end(), predictions.begin(), predictions.end());
    int64_t growth = 0;
    REQUIRE_OK(mpt_trainer_get_loss_scale(trainer.trainer, &run.scale, &growth, &run.skipped));
    mpt_dataset_destroy(training);
    mpt_dataset_destroy(validation);
    return run;
}

// For every kind of dataset and precision (Adam): the run on `made`'s datasets is the run on
// `copied`'s (the same rows, copied), bit for bit, and its validation set was learnt from the rest.
// Both runs predict `blobs`; the copied run predicts copied_predicted(blobs, kind) instead when
// given (what `made`'s model makes of its inputs).
using PredictedCopy = Blobs (*)(const Blobs& blobs, Kind kind);
inline void check_runs_as_copies(const Blobs& blobs, MakeSplit made, MakeSplit copied,
                                 PredictedCopy copied_predicted = nullptr) {
    for (Kind kind : {Kind::u8_labels, Kind::f32_labels, Kind::f32_targets}) {
        for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
            CAPTURE(kind_name(kind));
            CAPTURE(static_cast<int>(precision));
            BlobTrainerSetup setup;
            setup.precision = precision;
            setup.optimizer = MPT_OPTIMIZER_ADAM;
            setup.learning_rate = 0.01f;
            if (kind == Kind::f32_targets) setup.loss = MPT_LOSS_CATEGORICAL_CROSSENTROPY;
            const Run run = train(setup, kind, blobs, made, blobs);
            const Run reference = train(setup, kind, blobs, copied, copied_predicted ? copied_predicted(blobs, kind) : blobs);
            REQUIRE(run.validation.size() == 12);  // 3 epochs x (loss, accuracy, validation's)
            CHECK(same_run(run, reference));
            CHECK(run.validation[11] > 0.9f);  // the blobs are well separated
        }
    }
}

// A binary cross-entropy trainer (one sigmoid output) and 40 rows of the blobs whose targets are
// probabilities but for row 30's (2, a count), as one dataset: which rows' targets decide whether
// binary cross-entropy takes a dataset made from it.
struct BinaryTargets {
    static constexpr int64_t kRows = 40;
    static constexpr int64_t kCountRow = 30;
    Blobs blobs;
    BlobTrainer trainer;
    mpt_dataset_t* whole = nullptr;

    static BlobTrainerSetup setup() {
        BlobTrainerSetup setup;
        setup.loss = MPT_LOSS_BINARY_CROSSENTROPY;
        setup.head = MPT_ACTIVATION_SIGMOID;
        setup.outputs = 1;
        return setup;
    }
    explicit BinaryTargets(uint64_t seed) : blobs(make_blobs(kRows, seed)), trainer(setup()) {
        std::vector<float> targets(static_cast<size_t>(kRows));
        for (int64_t r = 0; r < kRows; ++r) targets[static_cast<size_t>(r)] = blobs.y[static_cast<size_t>(r)] == 0 ? 1.0f : 0.0f;
        targets[kCountRow] = 2.0f;
        REQUIRE_OK(mpt_dataset_create_f32_targets(trainer.context, blobs.x.data(), kRows, kBlobFeatures, targets.data(), 1,
                                                  1, &whole));
        // The whole dataset is refused: row 30's target is no probability.
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(trainer.trainer, whole, 1, 10, 1));
    }
    ~BinaryTargets() { mpt_dataset_destroy(whole); }

    // Datasets made from `whole`: one without row 30, which trains and evaluates, and one with it,
    // which training and evaluation refuse. Both are destroyed.
    void check_judged_by_own_rows(mpt_dataset_t* clean, mpt_dataset_t* with_count) const {
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(trainer.trainer, with_count, 1, 1, 1));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_evaluate(trainer.trainer, with_count, 10, nullptr, nullptr));
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, clean, 2, 10, 1));
        CHECK(std::isfinite(evaluate(trainer, clean).loss));
        mpt_dataset_destroy(clean);
        mpt_dataset_destroy(with_count);
    }
    BinaryTargets(const BinaryTargets&) = delete;
    BinaryTargets& operator=(const BinaryTargets&) = delete;
};

}  // namespace mpt_test
