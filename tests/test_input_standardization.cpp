// Models that standardize their inputs through the C API (mpt_model_set_input_standardization):
// such a model trains, steps, validates, evaluates and predicts on raw datasets bit for bit as a
// plain model does on the same rows standardized into float datasets, for every kind of dataset and
// precision; its predictions from raw inputs (mpt_model_predict, mpt_trainer_predict) are a plain
// model's from standardized ones; model files and checkpoints keep the standardization, and a
// checkpoint restores its values; and the refusals: a standardized dataset (twice), a change
// while fitting, bad arguments, each leaving the model as it was.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/dataset_run.h"
#include "support/standardized_blobs.h"
#include "support/temp_dir.h"

namespace {

using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::Blobs;
using mpt_test::kBlobClasses;
using mpt_test::kBlobFeatures;
using mpt_test::Kind;
using mpt_test::make_dataset;
using mpt_test::same_bits;
using namespace mpt_test::standardizing;

void standardize_inputs(mpt_model_t* model, const Statistics& by) {
    REQUIRE_OK(mpt_model_set_input_standardization(model, by.mean.data(), by.stddev.data(), kBlobFeatures));
}

// The model learns the training rows' statistics (Keras's adapt); both sets stay raw.
mpt_dataset_t* split_raw(const BlobTrainer& trainer, const Blobs& blobs, Kind kind, mpt_dataset_t** validation) {
    mpt_dataset_t* whole = make_dataset(trainer, blobs, kind);
    mpt_dataset_t* training = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(whole, 0, kTrainingRows, &training));
    REQUIRE_OK(mpt_dataset_create_slice(whole, kTrainingRows, kRows - kTrainingRows, validation));
    standardize_inputs(trainer.model, statistics_of(training));
    mpt_dataset_destroy(whole);
    return training;
}

// `blobs`' raw features standardized by the statistics of their first kTrainingRows as a dataset of
// `kind` (what split_raw's model standardizes its inputs by).
Blobs raw_standardized_by_training_rows(const Blobs& blobs, Kind kind) {
    BlobTrainer helper{BlobTrainerSetup{}};
    mpt_dataset_t* whole = make_dataset(helper, blobs, kind);
    mpt_dataset_t* training = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(whole, 0, kTrainingRows, &training));
    const Statistics statistics = statistics_of(training);
    mpt_dataset_destroy(training);
    mpt_dataset_destroy(whole);
    return standardized_copy(blobs, Kind::f32_labels, statistics);  // the raw values, not quantised
}

struct Standardization {
    int standardizes = -1;
    Statistics values;
};

Standardization standardization_of(const mpt_model_t* model) {
    Standardization result;
    REQUIRE_OK(mpt_model_get_input_standardization(model, result.values.mean.data(), result.values.stddev.data(),
                                                   kBlobFeatures, &result.standardizes));
    return result;
}

std::vector<float> model_predict(mpt_model_t* model, const std::vector<float>& inputs) {
    const int64_t rows = static_cast<int64_t>(inputs.size()) / kBlobFeatures;
    std::vector<float> out(static_cast<size_t>(rows * kBlobClasses));
    REQUIRE_OK(mpt_model_predict(model, inputs.data(), rows, out.data(), static_cast<int64_t>(out.size())));
    return out;
}

// Statistics unlike a data set's own, so that standardizing by them is visible.
Statistics arbitrary_statistics(float shift) {
    Statistics statistics;
    for (int64_t f = 0; f < kBlobFeatures; ++f) {
        statistics.mean[static_cast<size_t>(f)] = shift + 0.25f * static_cast<float>(f);
        statistics.stddev[static_cast<size_t>(f)] = 0.5f + static_cast<float>(f);
    }
    return statistics;
}

}  // namespace

TEST_CASE("a model that standardizes its inputs trains and predicts bit for bit as a plain one on standardized floats") {
    // Also its predictions of raw inputs (mpt_trainer_predict) against the plain model's of the
    // standardized inputs. u8 quantises x * 16 + 128 into [0, 255]: these blobs stay near 0.
    mpt_test::check_runs_as_copies(mpt_test::make_blobs(kRows, 41, 1.2), split_raw, split_copied,
                                   raw_standardized_by_training_rows);
}

TEST_CASE("micro-batched steps of a model that standardizes its inputs are a plain model's on standardized floats") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 41, 1.2);
    BlobTrainerSetup setup;
    setup.micro_batch_size = 6;  // 16-row batches in passes of 6, 6 and 4
    for (Kind kind : {Kind::u8_labels, Kind::f32_labels}) {
        CAPTURE(mpt_test::kind_name(kind));
        const mpt_test::Run run = mpt_test::train(setup, kind, blobs, split_raw, blobs);
        const mpt_test::Run reference =
            mpt_test::train(setup, kind, blobs, split_copied, raw_standardized_by_training_rows(blobs, kind));
        CHECK(mpt_test::same_run(run, reference));
    }
}

TEST_CASE("mpt_model_predict standardizes, and a saved model standardizes after loading as before") {
    const Blobs blobs = offset_blobs(62);
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    BlobTrainer trainer(setup);
    mpt_dataset_t* dataset = trainer.labels(blobs);
    const Statistics statistics = statistics_of(dataset);
    standardize_inputs(trainer.model, statistics);
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 5, 16, 1));
    float loss = NAN, accuracy = NAN;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 0, &loss, &accuracy));
    CHECK(accuracy > 0.9f);

    const std::vector<float> predicted = model_predict(trainer.model, blobs.x);
    const Blobs copy = standardized_copy(blobs, Kind::f32_labels, statistics);
    // The trainer's predictions over the raw dataset (the gather standardizes) are its predictions
    // of the raw rows (the host does), in one batch as mpt_trainer_predict's.
    std::vector<float> over_dataset(predicted.size()), of_rows(predicted.size());
    REQUIRE_OK(mpt_trainer_predict_dataset(trainer.trainer, dataset, kRows, over_dataset.data(),
                                           static_cast<int64_t>(over_dataset.size())));
    REQUIRE_OK(mpt_trainer_predict(trainer.trainer, blobs.x.data(), kRows, of_rows.data(),
                                   static_cast<int64_t>(of_rows.size())));
    CHECK(same_bits(over_dataset, of_rows));
    // A finite input that standardizing makes infinite is refused as a non-finite one is.
    std::vector<float> huge(blobs.x.begin(), blobs.x.begin() + kBlobFeatures);
    huge[1] = 3e38f;
    Statistics narrow = statistics;
    narrow.stddev[1] = 1e-3f;
    standardize_inputs(trainer.model, narrow);
    std::vector<float> one(kBlobClasses, 42.0f);
    CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_model_predict(trainer.model, huge.data(), 1, one.data(), kBlobClasses));
    CHECK(std::string(mpt_last_error()).find("element 1") != std::string::npos);
    CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_predict(trainer.trainer, huge.data(), 1, one.data(), kBlobClasses));
    CHECK(one == std::vector<float>(kBlobClasses, 42.0f));
    standardize_inputs(trainer.model, statistics);
    REQUIRE_OK(mpt_model_set_input_standardization(trainer.model, nullptr, nullptr, 0));  // removed
    CHECK(standardization_of(trainer.model).standardizes == 0);
    CHECK(same_bits(model_predict(trainer.model, copy.x), predicted));
    CHECK(!same_bits(model_predict(trainer.model, blobs.x), predicted));
    standardize_inputs(trainer.model, statistics);

    mpt_test::TempDir directory;
    const std::string path = directory.file("standardizing.safetensors");
    REQUIRE_OK(mpt_model_save(trainer.model, path.c_str()));
    mpt_model_t* loaded = nullptr;
    REQUIRE_OK(mpt_model_load(trainer.context, path.c_str(), &loaded));
    const Standardization kept = standardization_of(loaded);
    CHECK(kept.standardizes == 1);
    CHECK(same_bits(kept.values.mean, statistics.mean));
    CHECK(same_bits(kept.values.stddev, statistics.stddev));
    CHECK(same_bits(model_predict(loaded, blobs.x), predicted));
    mpt_model_destroy(loaded);

    // A plain model's file has no standardization, and loads as plain.
    REQUIRE_OK(mpt_model_set_input_standardization(trainer.model, nullptr, nullptr, 0));
    REQUIRE_OK(mpt_model_save(trainer.model, path.c_str()));
    REQUIRE_OK(mpt_model_load(trainer.context, path.c_str(), &loaded));
    CHECK(standardization_of(loaded).standardizes == 0);
    CHECK(same_bits(model_predict(loaded, copy.x), predicted));
    mpt_model_destroy(loaded);
    mpt_dataset_destroy(dataset);
}

TEST_CASE("a checkpoint restores the input standardization's values and must agree on whether there is one") {
    const Blobs blobs = offset_blobs(63);
    const Statistics saved = arbitrary_statistics(1.0f), other = arbitrary_statistics(-2.0f);
    mpt_test::TempDir directory;
    const std::string path = directory.file("checkpoint.safetensors");
    std::vector<float> weights;
    {
        BlobTrainer trainer(BlobTrainerSetup{});
        mpt_dataset_t* dataset = trainer.labels(blobs);
        standardize_inputs(trainer.model, saved);
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 1, 16, 1));
        REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, path.c_str()));
        weights = trainer.weights();
        mpt_dataset_destroy(dataset);
    }
    {  // Another standardization's values are replaced by the checkpoint's, with the weights.
        BlobTrainer trainer(BlobTrainerSetup{});
        standardize_inputs(trainer.model, other);
        REQUIRE_OK(mpt_trainer_load_checkpoint(trainer.trainer, path.c_str()));
        const Standardization restored = standardization_of(trainer.model);
        CHECK(restored.standardizes == 1);
        CHECK(same_bits(restored.values.mean, saved.mean));
        CHECK(same_bits(restored.values.stddev, saved.stddev));
        CHECK(same_bits(trainer.weights(), weights));
    }
    {  // A plain model is another architecture: refused, and it stays plain with its own weights.
        BlobTrainer trainer(BlobTrainerSetup{});
        const std::vector<float> own = trainer.weights();
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_load_checkpoint(trainer.trainer, path.c_str()));
        CHECK(standardization_of(trainer.model).standardizes == 0);
        CHECK(same_bits(trainer.weights(), own));
        // And a plain model's checkpoint is refused by a standardizing model, which keeps its values.
        const std::string plain = directory.file("plain.safetensors");
        REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, plain.c_str()));
        BlobTrainer standardizing(BlobTrainerSetup{});
        standardize_inputs(standardizing.model, other);
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_load_checkpoint(standardizing.trainer, plain.c_str()));
        CHECK(same_bits(standardization_of(standardizing.model).values.mean, other.mean));
    }
    {  // The model inside the checkpoint loads with it.
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
        mpt_model_t* loaded = nullptr;
        REQUIRE_OK(mpt_model_load(context, path.c_str(), &loaded));
        CHECK(same_bits(standardization_of(loaded).values.stddev, saved.stddev));
        mpt_model_destroy(loaded);
        mpt_context_destroy(context);
    }
}

namespace {

struct DuringFit {
    const BlobTrainer* trainer;
    mpt_trainer_t* another;  // of the same model: the fitting trainer itself is in use
    const char* checkpoint;
    Statistics other;
    std::vector<mpt_status> statuses;
    bool weights_kept = true;
};

int change_standardization(int64_t, float, float, void* user_data) {
    auto* during = static_cast<DuringFit*>(user_data);
    mpt_model_t* model = during->trainer->model;
    const std::vector<float> weights = during->trainer->weights();
    during->statuses.push_back(mpt_model_set_input_standardization(model, during->other.mean.data(),
                                                                   during->other.stddev.data(), kBlobFeatures));
    during->statuses.push_back(mpt_model_set_input_standardization(model, nullptr, nullptr, 0));
    during->statuses.push_back(mpt_trainer_load_checkpoint(during->another, during->checkpoint));
    during->weights_kept = during->weights_kept && same_bits(during->trainer->weights(), weights);
    return 0;
}

}  // namespace

TEST_CASE("the input standardization stays as it is while a trainer fits, and no dataset is standardized twice") {
    const Blobs blobs = offset_blobs(64);
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* dataset = trainer.labels(blobs);
    const Statistics statistics = statistics_of(dataset);
    mpt_test::TempDir directory;
    const std::string checkpoint = directory.file("other.safetensors");
    {  // A checkpoint of other values: loading it would change the standardization too.
        BlobTrainer saver(BlobTrainerSetup{});
        standardize_inputs(saver.model, arbitrary_statistics(3.0f));
        REQUIRE_OK(mpt_trainer_save_checkpoint(saver.trainer, checkpoint.c_str()));
    }
    standardize_inputs(trainer.model, statistics);
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    mpt_trainer_t* another = nullptr;
    REQUIRE_OK(mpt_trainer_create(trainer.model, options, &another));
    mpt_trainer_options_destroy(options);
    DuringFit during{&trainer, another, checkpoint.c_str(), arbitrary_statistics(5.0f), {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, change_standardization, &during));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 2, 16, 1));
    CHECK(during.statuses == std::vector<mpt_status>(6, MPT_STATUS_INVALID_STATE));
    CHECK(during.weights_kept);  // not the checkpoint's
    mpt_trainer_destroy(another);
    const Standardization kept = standardization_of(trainer.model);
    CHECK(same_bits(kept.values.mean, statistics.mean));
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, nullptr, nullptr));

    mpt_dataset_t* view = nullptr;
    REQUIRE_OK(mpt_dataset_create_standardized(dataset, statistics.mean.data(), statistics.stddev.data(),
                                               kBlobFeatures, &view));
    float value = NAN, accuracy = NAN;
    std::vector<float> out(static_cast<size_t>(kRows * kBlobClasses));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(trainer.trainer, view, 1, 16, 1));
    CHECK(std::string(mpt_last_error()).find("twice") != std::string::npos);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(trainer.trainer, view, 0, 16, &value));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_evaluate(trainer.trainer, view, 16, &value, &accuracy));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict_dataset(trainer.trainer, view, 16, out.data(),
                                                                         static_cast<int64_t>(out.size())));
    // The trainer is usable as it was: the raw dataset trains.
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 1, 16, 1));
    mpt_dataset_destroy(view);
    mpt_dataset_destroy(dataset);
}

namespace {

struct LoadDuringFit {
    mpt_trainer_t* another;  // of the fitting trainer's model
    const char* checkpoint;
    std::vector<mpt_status> statuses;
};

int load_checkpoint_of_another(int64_t, float, float, void* user_data) {
    auto* load = static_cast<LoadDuringFit*>(user_data);
    load->statuses.push_back(mpt_trainer_load_checkpoint(load->another, load->checkpoint));
    return 0;
}

}  // namespace

TEST_CASE("a checkpoint of the model's own standardization, or of none, loads while another trainer fits") {
    // What a fit gathers with stays as it is, so nothing refuses these loads (as before models
    // standardized): they replace the weights as any checkpoint load does.
    const Blobs blobs = offset_blobs(65);
    const Statistics statistics = arbitrary_statistics(0.5f);
    for (bool standardizing : {false, true}) {
        CAPTURE(standardizing);
        BlobTrainer trainer(BlobTrainerSetup{});
        mpt_dataset_t* dataset = trainer.labels(blobs);
        if (standardizing) standardize_inputs(trainer.model, statistics);
        mpt_test::TempDir directory;
        const std::string checkpoint = directory.file("own.safetensors");
        REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, checkpoint.c_str()));
        const std::vector<float> saved = trainer.weights();
        // The fitting trainer's own options: default ones would resolve AUTO to mixed-bf16 on AMX CPUs,
        // and a checkpoint of fp32 is refused there for that alone.
        mpt_trainer_options_t* options = nullptr;
        REQUIRE_OK(mpt_trainer_get_options(trainer.trainer, &options));
        mpt_trainer_t* another = nullptr;
        REQUIRE_OK(mpt_trainer_create(trainer.model, options, &another));
        mpt_trainer_options_destroy(options);
        LoadDuringFit load{another, checkpoint.c_str(), {}};
        REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, load_checkpoint_of_another, &load));
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 1, 16, 1));
        CHECK(load.statuses == std::vector<mpt_status>{MPT_STATUS_OK});
        CHECK(same_bits(trainer.weights(), saved));  // the epoch's training replaced by the checkpoint's weights
        CHECK(standardization_of(trainer.model).standardizes == (standardizing ? 1 : 0));
        mpt_trainer_destroy(another);
        mpt_dataset_destroy(dataset);
    }
}

TEST_CASE("mpt_model_set_input_standardization and its getter refuse bad arguments and change nothing") {
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_model_t* model = trainer.model;
    const Statistics good = arbitrary_statistics(0.0f);
    const float* mean = good.mean.data();
    const float* stddev = good.stddev.data();
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_input_standardization(nullptr, mean, stddev, kBlobFeatures));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_input_standardization(model, nullptr, stddev, kBlobFeatures));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_input_standardization(model, mean, nullptr, kBlobFeatures));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_input_standardization(model, nullptr, nullptr, 1));
    for (int64_t count : {int64_t{0}, kBlobFeatures - 1, kBlobFeatures + 1, int64_t{-1}})
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_set_input_standardization(model, mean, stddev, count));
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (float bad_mean : {nan, inf, -inf}) {
        Statistics bad = good;
        bad.mean[1] = bad_mean;
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_model_set_input_standardization(model, bad.mean.data(), stddev, kBlobFeatures));
        CHECK(std::string(mpt_last_error()).find("feature 1") != std::string::npos);
    }
    for (float bad_stddev : {nan, inf, -1.0f}) {
        Statistics bad = good;
        bad.stddev[2] = bad_stddev;
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_model_set_input_standardization(model, mean, bad.stddev.data(), kBlobFeatures));
    }
    // None of them standardized; the getter leaves the arrays alone then.
    Standardization none;
    none.values.mean.assign(kBlobFeatures, 42.0f);
    REQUIRE_OK(mpt_model_get_input_standardization(model, none.values.mean.data(), none.values.stddev.data(),
                                                   kBlobFeatures, &none.standardizes));
    CHECK(none.standardizes == 0);
    CHECK(none.values.mean == std::vector<float>(kBlobFeatures, 42.0f));

    standardize_inputs(model, good);
    std::vector<float> untouched(kBlobFeatures + 1, 42.0f);
    int standardizes = -1;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_model_get_input_standardization(model, untouched.data(), nullptr, kBlobFeatures, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_model_get_input_standardization(nullptr, untouched.data(), nullptr, kBlobFeatures, &standardizes));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH,
                mpt_model_get_input_standardization(model, untouched.data(), nullptr, kBlobFeatures + 1, &standardizes));
    CHECK(untouched == std::vector<float>(kBlobFeatures + 1, 42.0f));
    CHECK(standardizes == -1);
    // Either array alone, or neither (count ignored then).
    std::vector<float> stddev_only(kBlobFeatures);
    REQUIRE_OK(mpt_model_get_input_standardization(model, nullptr, stddev_only.data(), kBlobFeatures, &standardizes));
    CHECK(standardizes == 1);
    CHECK(same_bits(stddev_only, good.stddev));
    REQUIRE_OK(mpt_model_get_input_standardization(model, nullptr, nullptr, 0, &standardizes));
    CHECK(standardizes == 1);
    // A failed set leaves the standardization that was there.
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_set_input_standardization(model, mean, stddev, 1));
    CHECK(same_bits(standardization_of(model).values.mean, good.mean));
}
