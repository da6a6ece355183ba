// RMSprop through the C API (MPT_OPTIMIZER_RMSPROP, mpt_trainer_options_set_rmsprop, centered
// through mpt_trainer_options_set_rmsprop_centered): what it refuses, that it trains, and
// checkpoints (its state arrays resumed bit for bit, rho and centered options a checkpoint must
// match; a forged record of it is refused in test_checkpoint_arrays.cpp). Its update rule against Keras's is in training/loss_and_optimizer_cases.cpp, its CUDA kernel
// against the CPU's in cuda_ops/update_cases.cpp.
#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

namespace {

using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::Blobs;
using mpt_test::file_contains;
using mpt_test::same_bits;

constexpr int64_t kRows = 48, kBatch = 16;

BlobTrainerSetup rmsprop_setup() {
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_RMSPROP;
    setup.learning_rate = 0.01f;
    setup.momentum = 0.5f;  // both state arrays
    setup.rho = 0.8f;
    return setup;
}

// The blobs' steps [first, first + steps) in batches of kBatch.
void take_steps(const BlobTrainer& trainer, const Blobs& blobs, int first, int steps) {
    mpt_test::take_blob_steps(trainer, blobs, first, steps, kBatch);
}

}  // namespace

TEST_CASE("RMSprop refuses rho outside [0, 1), a non-positive or non-finite epsilon, and Nesterov momentum") {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (float rho : {-0.1f, 1.0f, 1.5f, nan}) {
        CAPTURE(rho);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_rmsprop(options, rho, 1e-7f));
        CHECK(std::string(mpt_last_error()).find("rho") != std::string::npos);
    }
    for (float epsilon : {0.0f, -1e-7f, nan, inf}) {
        CAPTURE(epsilon);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_rmsprop(options, 0.9f, epsilon));
        CHECK(std::string(mpt_last_error()).find("epsilon") != std::string::npos);
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_rmsprop(nullptr, 0.9f, 1e-7f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_rmsprop_centered(nullptr, 1));
    REQUIRE_OK(mpt_trainer_options_set_rmsprop(options, 0.0f, 1e-3f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_optimizer(options, static_cast<mpt_optimizer>(MPT_OPTIMIZER_LION + 1)));
    mpt_trainer_options_destroy(options);

    // Nesterov is SGD's: an RMSprop trainer asked for it is refused at creation.
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, mpt_test::kBlobFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, mpt_test::kBlobClasses, MPT_ACTIVATION_SOFTMAX));
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_RMSPROP));
    REQUIRE_OK(mpt_trainer_options_set_momentum(options, 0.9f, 1));
    mpt_trainer_t* trainer = nullptr;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_create(model, options, &trainer));
    CHECK(std::string(mpt_last_error()).find("Nesterov") != std::string::npos);
    CHECK(trainer == nullptr);
    REQUIRE_OK(mpt_trainer_options_set_momentum(options, 0.9f, 0));
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_destroy(trainer);
    // Without momentum the Nesterov flag asks for nothing: accepted.
    REQUIRE_OK(mpt_trainer_options_set_momentum(options, 0.0f, 1));
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_destroy(trainer);
    mpt_trainer_options_destroy(options);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("fit with RMSprop, centered or not, trains the blobs, in every precision") {
    const Blobs blobs = mpt_test::make_blobs(240, 61, 0.8);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
      for (bool centered : {false, true}) {
        CAPTURE(precision);
        CAPTURE(centered);
        BlobTrainerSetup setup = rmsprop_setup();
        setup.precision = precision;
        setup.rmsprop_centered = centered;
        mpt_test::check_fit_learns_blobs(BlobTrainer(setup), blobs, 10);
      }
    }
}

TEST_CASE("an RMSprop run resumes from a checkpoint bit for bit; rho is an option the checkpoint must match") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 62, 1.0);
    const mpt_test::TempDir directory;
    const std::string path = directory.file("rmsprop.safetensors");
    const BlobTrainerSetup setup = rmsprop_setup();
    BlobTrainer original(setup), resumed(setup);
    take_steps(original, blobs, 0, 2);
    REQUIRE_OK(mpt_trainer_save_checkpoint(original.trainer, path.c_str()));
    CHECK(file_contains(path, "optimizer.1.layers.1.bias"));  // the momentum's array, beside the average's
    take_steps(original, blobs, 2, 3);
    REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
    take_steps(resumed, blobs, 2, 3);
    CHECK(same_bits(original.weights(), resumed.weights()));

    BlobTrainerSetup other_rho = setup;
    other_rho.rho = 0.9f;
    BlobTrainer refusing(other_rho);
    const std::vector<float> before = refusing.weights();
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(refusing.trainer, path.c_str()));
    CHECK_MESSAGE(std::string(mpt_last_error()).find("rho 0.8 (this trainer: 0.9)") != std::string::npos, mpt_last_error());
    CHECK(same_bits(before, refusing.weights()));

    // -0 is 0: a trainer given rho -0 (and momentum -0) resumes a file of rho 0, bit for bit.
    BlobTrainerSetup zero = setup;
    zero.rho = 0.0f;
    zero.momentum = 0.0f;
    BlobTrainerSetup negative_zero = zero;
    negative_zero.rho = -0.0f;
    negative_zero.momentum = -0.0f;
    BlobTrainer zero_trainer(zero), negative_zero_trainer(negative_zero);
    take_steps(zero_trainer, blobs, 0, 2);
    const std::string zero_path = directory.file("rho-zero.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(zero_trainer.trainer, zero_path.c_str()));
    REQUIRE_OK(mpt_trainer_load_checkpoint(negative_zero_trainer.trainer, zero_path.c_str()));
    CHECK(same_bits(zero_trainer.weights(), negative_zero_trainer.weights()));

    // Another optimizer's file records no rho, and refuses an RMSprop trainer by the optimizer's name.
    BlobTrainerSetup adam = setup;
    adam.optimizer = MPT_OPTIMIZER_ADAM;
    adam.momentum = 0.0f;
    BlobTrainer adam_trainer(adam), rmsprop_trainer(setup);
    const std::string adam_path = directory.file("adam.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(adam_trainer.trainer, adam_path.c_str()));
    CHECK_FALSE(file_contains(adam_path, "\"rho\""));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(rmsprop_trainer.trainer, adam_path.c_str()));
    CHECK_MESSAGE(std::string(mpt_last_error()).find("optimizer adam (this trainer: rmsprop)") != std::string::npos,
                  mpt_last_error());
}

TEST_CASE("a centered RMSprop run resumes bit for bit, its gradients' average included; centered is an option the checkpoint must match") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 63, 1.0);
    const mpt_test::TempDir directory;
    for (float momentum : {0.5f, 0.0f}) {
        CAPTURE(momentum);
        BlobTrainerSetup setup = rmsprop_setup();
        setup.momentum = momentum;
        setup.rmsprop_centered = true;
        const std::string path = directory.file("centered.safetensors");
        BlobTrainer original(setup), resumed(setup), uncentered_run(rmsprop_setup());
        take_steps(original, blobs, 0, 2);
        REQUIRE_OK(mpt_trainer_save_checkpoint(original.trainer, path.c_str()));
        CHECK(file_contains(path, "rmsprop_centered"));
        // The average of the gradients follows the squares' (and the momentum's) array.
        CHECK(file_contains(path, momentum != 0.0f ? "optimizer.2.layers.1.bias" : "optimizer.1.layers.1.bias"));
        CHECK_FALSE(file_contains(path, momentum != 0.0f ? "optimizer.3." : "optimizer.2."));
        take_steps(original, blobs, 2, 3);
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
        take_steps(resumed, blobs, 2, 3);
        CHECK(same_bits(original.weights(), resumed.weights()));
        take_steps(uncentered_run, blobs, 0, 5);
        CHECK_FALSE(same_bits(original.weights(), uncentered_run.weights()));  // centering changed the steps
    }

    // Either way round, the refusal names the option; the refused trainer's weights are untouched.
    BlobTrainerSetup centered_setup = rmsprop_setup();
    centered_setup.rmsprop_centered = true;
    BlobTrainer centered(centered_setup), uncentered(rmsprop_setup());
    const std::string centered_path = directory.file("centered-0.safetensors");
    const std::string uncentered_path = directory.file("uncentered.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(centered.trainer, centered_path.c_str()));
    REQUIRE_OK(mpt_trainer_save_checkpoint(uncentered.trainer, uncentered_path.c_str()));
    CHECK_FALSE(file_contains(uncentered_path, "rmsprop_centered"));  // files of uncentered runs as before
    const std::vector<float> before = uncentered.weights();
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(uncentered.trainer, centered_path.c_str()));
    CHECK_MESSAGE(std::string(mpt_last_error()).find("rmsprop_centered true (this trainer: false)") != std::string::npos,
                  mpt_last_error());
    CHECK(same_bits(before, uncentered.weights()));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(centered.trainer, uncentered_path.c_str()));
    CHECK_MESSAGE(std::string(mpt_last_error()).find("rmsprop_centered false (this trainer: true)") != std::string::npos,
                  mpt_last_error());

}

TEST_CASE("centered asks nothing of SGD and Adam: the same steps and files as without it") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 64, 1.0);
    const mpt_test::TempDir directory;
    for (mpt_optimizer optimizer : {MPT_OPTIMIZER_SGD, MPT_OPTIMIZER_ADAM}) {
        CAPTURE(optimizer);
        BlobTrainerSetup plain;
        plain.optimizer = optimizer;
        plain.momentum = optimizer == MPT_OPTIMIZER_SGD ? 0.9f : 0.0f;
        BlobTrainerSetup asked = plain;
        asked.rmsprop_centered = true;
        BlobTrainer plain_trainer(plain), asked_trainer(asked), resumed(plain);
        take_steps(plain_trainer, blobs, 0, 3);
        take_steps(asked_trainer, blobs, 0, 3);
        CHECK(same_bits(plain_trainer.weights(), asked_trainer.weights()));
        const std::string path = directory.file("asked.safetensors");
        REQUIRE_OK(mpt_trainer_save_checkpoint(asked_trainer.trainer, path.c_str()));
        CHECK_FALSE(file_contains(path, "rmsprop_centered"));
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
    }
}
