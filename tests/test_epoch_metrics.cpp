// An epoch's running loss and accuracy (the sums its progress and epoch-end callbacks and its
// checkpoints read) hold the epoch's finished steps and nothing else: the caller's own steps and
// evaluations between two parts of an interrupted epoch leave them as they were, failed ones too.
// (Failures partway through fit, step or evaluate, at each allocation: test_allocation_failures.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "support/tiny_trainer.h"

namespace {

using mpt_test::kTinyBatch;
using mpt_test::kTinyRows;
using mpt_test::TinyTrainer;

constexpr int64_t kStepsPerEpoch = kTinyRows / kTinyBatch;

int stop_after_two_steps(int64_t, int64_t step, int64_t, float, float, void*) { return step == 2 ? 1 : 0; }
int note_epoch_end(int64_t, float, float, void* ended) {
    *static_cast<bool*>(ended) = true;
    return 0;
}

struct Metrics {
    double values[mpt::kMetricsCount];
    explicit Metrics(const mpt::Trainer& trainer) {
        const mpt::TrainerSnapshot snapshot = trainer.snapshot();
        std::memcpy(values, snapshot.metrics, sizeof values);
    }
    bool operator==(const Metrics& other) const { return std::memcmp(values, other.values, sizeof values) == 0; }
};

// A trainer stopped by its progress callback 2 steps into its first epoch.
void stop_inside_an_epoch(mpt::Trainer& trainer, const mpt::Dataset& dataset) {
    trainer.set_callbacks(mpt::TrainerCallbacks{&stop_after_two_steps, nullptr, nullptr});
    CHECK_THROWS(trainer.fit(dataset, 1, kTinyBatch, true));
    trainer.set_callbacks(mpt::TrainerCallbacks{});
    REQUIRE(trainer.snapshot().steps_into_epoch == 2);
}

// A tiny trainer in `precision` (micro-batches of `micro_batch` rows; 0: none) stopped inside its
// first epoch.
TinyTrainer interrupted_trainer(mpt_precision precision, int64_t micro_batch = 0) {
    mpt::TrainerConfig config;
    config.precision = precision;
    config.micro_batch_size = micro_batch;
    TinyTrainer tiny(config);
    stop_inside_an_epoch(*tiny.trainer, *tiny.dataset);
    return tiny;
}

}  // namespace

TEST_CASE("a step of the caller's inside an interrupted epoch leaves the epoch's running loss and accuracy as they were") {
    for (const int64_t micro_batch : {int64_t{0}, int64_t{3}}) {
        CAPTURE(micro_batch);
        TinyTrainer tiny = interrupted_trainer(MPT_PRECISION_FP32, micro_batch);
        mpt::Trainer& trainer = *tiny.trainer;
        const Metrics before(trainer);
        CHECK(before.values[mpt::kMetricCounted] == 2 * kTinyBatch);
        const float loss = trainer.step(*tiny.dataset, 0, kTinyBatch);
        CHECK(std::isfinite(loss));
        CHECK(loss > 0.0f);
        CHECK(Metrics(trainer) == before);
        CHECK(trainer.snapshot().steps_into_epoch == 2);  // still resumable
        // Fit finishes the epoch (not abandoned: the step is not part of it), counting its own steps.
        bool ended = false;
        trainer.set_callbacks(mpt::TrainerCallbacks{nullptr, &note_epoch_end, &ended});
        trainer.fit(*tiny.dataset, 1, kTinyBatch, true);
        CHECK(ended);
        CHECK(trainer.snapshot().epochs_completed == 1);
        CHECK(Metrics(trainer).values[mpt::kMetricCounted] == kStepsPerEpoch * kTinyBatch);
    }
}

TEST_CASE("a non-finite step of the caller's inside an interrupted epoch leaves the epoch's running loss and accuracy as they were") {
    // fp32 without loss scaling: the step runs to its end (its loss NaN or Inf in the sums it leaves),
    // is skipped, and step() fails with NON_FINITE.
    TinyTrainer tiny = interrupted_trainer(MPT_PRECISION_FP32);
    mpt::Trainer& trainer = *tiny.trainer;
    const Metrics before(trainer);
    trainer.set_learning_rate(1e30f);
    int non_finite = 0;
    for (int i = 0; i < 6; ++i) {
        CAPTURE(i);
        try {
            trainer.step(*tiny.dataset, 0, kTinyBatch);
        } catch (const mpt::Error& error) {
            CHECK(error.status() == MPT_STATUS_NON_FINITE);
            ++non_finite;
        }
        CHECK(Metrics(trainer) == before);
    }
    CHECK(non_finite > 0);
}

TEST_CASE("an evaluation inside an interrupted epoch leaves the epoch's running loss and accuracy as they were") {
    TinyTrainer tiny = interrupted_trainer(MPT_PRECISION_MIXED_BF16);
    mpt::Trainer& trainer = *tiny.trainer;
    const Metrics before(trainer);
    for (const int64_t batch : {int64_t{0}, int64_t{7}, kTinyRows}) {
        CAPTURE(batch);
        const mpt::EvaluationResult result = trainer.evaluate(*tiny.dataset, batch);
        CHECK(std::isfinite(result.loss));
        CHECK(Metrics(trainer) == before);
    }
}

TEST_CASE("the running metrics count each finished step of an epoch once, and start from zero in the next") {
    TinyTrainer tiny = interrupted_trainer(MPT_PRECISION_FP32);
    mpt::Trainer& trainer = *tiny.trainer;
    trainer.fit(*tiny.dataset, 1, kTinyBatch, true);
    CHECK(Metrics(trainer).values[mpt::kMetricCounted] == kStepsPerEpoch * kTinyBatch);
    stop_inside_an_epoch(trainer, *tiny.dataset);  // the next epoch
    CHECK(Metrics(trainer).values[mpt::kMetricCounted] == 2 * kTinyBatch);
}
