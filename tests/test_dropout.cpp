// Dropout through the C API (mpt_model_set_layer_dropout, mpt_model_set_input_dropout): what it
// refuses, that it trains in every precision, that evaluation and prediction use every output, that
// one seed drops the same values in every run and every resume, and model files. The masks and the
// steps through them against a double-precision reference are in test_dropout_masks.cpp, the CUDA
// kernel in test_cuda_ops (cuda_ops/step_cases.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/temp_dir.h"

namespace {

using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::Blobs;
using mpt_test::same_bits;

constexpr int64_t kRows = 96, kBatch = 16;

BlobTrainerSetup dropout_setup(float rate, uint64_t seed = 7) {
    BlobTrainerSetup setup;
    setup.hidden_dropout = rate;
    setup.learning_rate = 0.1f;
    setup.seed = seed;
    return setup;
}

void fit(const BlobTrainer& trainer, const Blobs& blobs, int64_t epochs) {
    mpt_dataset_t* dataset = trainer.labels(blobs);
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, epochs, kBatch, 1));
    mpt_dataset_destroy(dataset);
}

// In fit's batches, whether the trainer fitted or not (batch 0 would be 256 for one that did not, and
// OpenBLAS may sum other batch sizes in other orders).
float evaluate_loss(const BlobTrainer& trainer, const Blobs& blobs, float* accuracy = nullptr) {
    mpt_dataset_t* dataset = trainer.labels(blobs);
    float loss = 0.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, kBatch, &loss, accuracy));
    mpt_dataset_destroy(dataset);
    return loss;
}

// `target`'s model takes `source`'s weights.
void copy_weights(const BlobTrainer& source, const BlobTrainer& target) {
    for (int64_t layer = 0; layer < 2; ++layer) {
        const int64_t units = layer == 0 ? source.hidden : source.outputs;
        const int64_t inputs = layer == 0 ? mpt_test::kBlobFeatures : source.hidden;
        std::vector<float> w(static_cast<size_t>(units * inputs)), b(static_cast<size_t>(units));
        REQUIRE_OK(mpt_model_get_weights(source.model, layer, w.data(), units * inputs, b.data(), units));
        REQUIRE_OK(mpt_model_set_weights(target.model, layer, w.data(), units * inputs, b.data(), units));
    }
}

// `base` (its dropout) trains the blobs of `seed` in every precision; the same weights in a model
// without dropout evaluate and predict alike, bit for bit, and predicting twice gives the same
// outputs (no mask is drawn), through the trainer and through the model's own inference executor.
void check_trains_and_inference_drops_nothing(BlobTrainerSetup base, uint64_t seed) {
    const Blobs blobs = mpt_test::make_blobs(kRows, seed), held_out = mpt_test::make_blobs(60, seed + 1);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
        CAPTURE(precision);
        BlobTrainerSetup setup = base;
        setup.precision = precision;
        const BlobTrainer dropping(setup);
        fit(dropping, blobs, 15);
        float accuracy = 0.0f;
        const float loss = evaluate_loss(dropping, held_out, &accuracy);
        CHECK(accuracy > 0.9f);

        setup.hidden_dropout = 0.0f;
        setup.input_dropout = 0.0f;
        const BlobTrainer plain(setup);
        copy_weights(dropping, plain);
        CHECK(evaluate_loss(plain, held_out) == loss);
        const std::vector<float> predicted = dropping.predict(held_out);
        CHECK(same_bits(predicted, plain.predict(held_out)));
        CHECK(same_bits(predicted, dropping.predict(held_out)));
        std::vector<float> model_predicted(predicted.size()), plain_predicted(predicted.size());
        REQUIRE_OK(mpt_model_predict(dropping.model, held_out.x.data(), held_out.rows(), model_predicted.data(),
                                     static_cast<int64_t>(model_predicted.size())));
        REQUIRE_OK(mpt_model_predict(plain.model, held_out.x.data(), held_out.rows(), plain_predicted.data(),
                                     static_cast<int64_t>(plain_predicted.size())));
        CHECK(same_bits(model_predicted, plain_predicted));
    }
}

}  // namespace

TEST_CASE("layer dropout takes rates in [0, 1) on existing layers before the model is built") {
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, mpt_test::kBlobFeatures, &model));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_dropout(model, 0, 0.5f));  // no layer yet
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, mpt_test::kBlobClasses, MPT_ACTIVATION_SOFTMAX));
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (float rate : {1.0f, 1.5f, -0.1f, nan, inf, -inf}) {
        CAPTURE(rate);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_dropout(model, 0, rate));
        CHECK(std::string(mpt_last_error()).find("dropout rate") != std::string::npos);
    }
    for (int64_t layer : {int64_t{-1}, int64_t{2}}) {
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_dropout(model, layer, 0.5f));
        float rate = 0.0f;
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_layer_dropout(model, layer, &rate));
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_dropout(nullptr, 0, 0.5f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_layer_dropout(model, 0, nullptr));
    float rate = -1.0f;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_layer_dropout(nullptr, 0, &rate));
    CHECK(rate == -1.0f);  // out-parameters are written only on success

    REQUIRE_OK(mpt_model_get_layer_dropout(model, 0, &rate));
    CHECK(rate == 0.0f);  // the default
    REQUIRE_OK(mpt_model_set_layer_dropout(model, 0, 0.25f));
    REQUIRE_OK(mpt_model_get_layer_dropout(model, 0, &rate));
    CHECK(rate == 0.25f);
    REQUIRE_OK(mpt_model_set_layer_dropout(model, 0, -0.0f));
    REQUIRE_OK(mpt_model_get_layer_dropout(model, 0, &rate));
    CHECK(rate == 0.0f);
    CHECK_FALSE(std::signbit(rate));  // -0 as 0

    // The last layer's outputs are the model's: a model that would drop them does not build, and is
    // usable again once its rate is 0.
    REQUIRE_OK(mpt_model_set_layer_dropout(model, 0, 0.5f));
    REQUIRE_OK(mpt_model_set_layer_dropout(model, 1, 0.5f));
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    mpt_trainer_t* trainer = nullptr;
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_create(model, options, &trainer));
    CHECK(std::string(mpt_last_error()).find("last layer has dropout") != std::string::npos);
    CHECK(trainer == nullptr);
    std::vector<float> bias(mpt_test::kBlobClasses);
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_model_get_weights(model, 1, nullptr, 0, bias.data(), 3));
    REQUIRE_OK(mpt_model_set_layer_dropout(model, 1, 0.0f));
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    // Built now: the rates are the architecture's.
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_model_set_layer_dropout(model, 0, 0.1f));
    REQUIRE_OK(mpt_model_get_layer_dropout(model, 0, &rate));
    CHECK(rate == 0.5f);
    mpt_trainer_destroy(trainer);
    mpt_trainer_options_destroy(options);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("dropout trains in every precision, and evaluation and prediction use every output") {
    check_trains_and_inference_drops_nothing(dropout_setup(0.5f), 31);
}

TEST_CASE("one seed drops the same values in every run, and dropout changes the run") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 33);
    const BlobTrainer first(dropout_setup(0.4f)), second(dropout_setup(0.4f)), plain(dropout_setup(0.0f));
    fit(first, blobs, 3);
    fit(second, blobs, 3);
    fit(plain, blobs, 3);
    CHECK(same_bits(first.weights(), second.weights()));
    CHECK_FALSE(same_bits(first.weights(), plain.weights()));
}

TEST_CASE("a checkpoint resumes dropout bit for bit, even in a context of another seed") {
    const mpt_test::TempDir directory("mptrain-dropout-capi");
    const Blobs blobs = mpt_test::make_blobs(kRows, 34);
    const BlobTrainer straight(dropout_setup(0.4f));
    fit(straight, blobs, 4);

    const BlobTrainer first_half(dropout_setup(0.4f));
    fit(first_half, blobs, 2);
    const std::string path = directory.file("half.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(first_half.trainer, path.c_str()));
    const BlobTrainer resumed(dropout_setup(0.4f, 1234));
    REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
    fit(resumed, blobs, 2);
    CHECK(same_bits(resumed.weights(), straight.weights()));

    // The rate is the architecture's: a model of another rate refuses the checkpoint, unchanged.
    const BlobTrainer other_rate(dropout_setup(0.2f));
    const std::vector<float> before = other_rate.weights();
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_load_checkpoint(other_rate.trainer, path.c_str()));
    CHECK(same_bits(before, other_rate.weights()));
}

TEST_CASE("a saved model keeps its layers' dropout") {
    const mpt_test::TempDir directory("mptrain-dropout-model");
    const BlobTrainer trainer(dropout_setup(0.3f));
    const std::string path = directory.file("model.safetensors");
    REQUIRE_OK(mpt_model_save(trainer.model, path.c_str()));
    mpt_model_t* loaded = nullptr;
    REQUIRE_OK(mpt_model_load(trainer.context, path.c_str(), &loaded));
    float rate = 0.0f;
    REQUIRE_OK(mpt_model_get_layer_dropout(loaded, 0, &rate));
    CHECK(rate == 0.3f);
    REQUIRE_OK(mpt_model_get_layer_dropout(loaded, 1, &rate));
    CHECK(rate == 0.0f);
    mpt_model_destroy(loaded);
}

TEST_CASE("input dropout takes rates in [0, 1) before the model is built, -0 as 0") {
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, mpt_test::kBlobFeatures, &model));
    float rate = -1.0f;
    REQUIRE_OK(mpt_model_get_input_dropout(model, &rate));
    CHECK(rate == 0.0f);  // the default, before any layer too
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (float refused : {1.0f, 1.5f, -0.1f, nan, inf, -inf}) {
        CAPTURE(refused);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_input_dropout(model, refused));
        CHECK(std::string(mpt_last_error()).find("dropout rate") != std::string::npos);
    }
    REQUIRE_OK(mpt_model_get_input_dropout(model, &rate));
    CHECK(rate == 0.0f);  // the refusals changed nothing
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_input_dropout(model, nullptr));
    REQUIRE_OK(mpt_model_set_input_dropout(model, -0.0f));
    REQUIRE_OK(mpt_model_get_input_dropout(model, &rate));
    CHECK_FALSE(std::signbit(rate));
    REQUIRE_OK(mpt_model_set_input_dropout(model, 0.2f));
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, mpt_test::kBlobClasses, MPT_ACTIVATION_SOFTMAX));
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_model_set_input_dropout(model, 0.5f));  // built: the architecture's
    REQUIRE_OK(mpt_model_get_input_dropout(model, &rate));
    CHECK(rate == 0.2f);
    mpt_trainer_destroy(trainer);
    mpt_trainer_options_destroy(options);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("input dropout trains in every precision, evaluation and prediction use every input, and one seed drops alike") {
    BlobTrainerSetup dropping = dropout_setup(0.0f);
    dropping.input_dropout = 0.2f;
    check_trains_and_inference_drops_nothing(dropping, 35);
    const Blobs blobs = mpt_test::make_blobs(kRows, 35);
    BlobTrainerSetup setup = dropout_setup(0.0f);
    setup.input_dropout = 0.3f;
    const BlobTrainer first(setup), second(setup), plain(dropout_setup(0.0f));
    BlobTrainerSetup hidden_only = dropout_setup(0.3f);
    const BlobTrainer hidden(hidden_only);
    for (const BlobTrainer* trainer : {&first, &second, &plain, &hidden}) fit(*trainer, blobs, 3);
    CHECK(same_bits(first.weights(), second.weights()));
    CHECK_FALSE(same_bits(first.weights(), plain.weights()));
    CHECK_FALSE(same_bits(first.weights(), hidden.weights()));
}

TEST_CASE("a checkpoint resumes input dropout bit for bit under another seed, only into its rate; a saved model keeps it") {
    const mpt_test::TempDir directory("mptrain-input-dropout");
    const Blobs blobs = mpt_test::make_blobs(kRows, 37);
    auto input_setup = [](float rate, uint64_t seed = 7) {
        BlobTrainerSetup setup = dropout_setup(0.0f, seed);
        setup.input_dropout = rate;
        return setup;
    };
    const BlobTrainer straight(input_setup(0.3f));
    fit(straight, blobs, 4);
    const BlobTrainer first_half(input_setup(0.3f));
    fit(first_half, blobs, 2);
    const std::string path = directory.file("half.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(first_half.trainer, path.c_str()));
    const BlobTrainer resumed(input_setup(0.3f, 1234));
    REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
    fit(resumed, blobs, 2);
    CHECK(same_bits(resumed.weights(), straight.weights()));
    for (float other : {0.0f, 0.2f}) {
        CAPTURE(other);
        const BlobTrainer refusing(input_setup(other));
        const std::vector<float> before = refusing.weights();
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_load_checkpoint(refusing.trainer, path.c_str()));
        CHECK(same_bits(before, refusing.weights()));
    }

    const std::string model_path = directory.file("model.safetensors");
    REQUIRE_OK(mpt_model_save(straight.model, model_path.c_str()));
    mpt_model_t* loaded = nullptr;
    REQUIRE_OK(mpt_model_load(straight.context, model_path.c_str(), &loaded));
    float rate = 0.0f;
    REQUIRE_OK(mpt_model_get_input_dropout(loaded, &rate));
    CHECK(rate == 0.3f);
    REQUIRE_OK(mpt_model_get_layer_dropout(loaded, 0, &rate));
    CHECK(rate == 0.0f);
    mpt_model_destroy(loaded);
}
