// Lion through the C API (MPT_OPTIMIZER_LION, mpt_trainer_options_set_lion): what it refuses, its
// betas' defaults and the order of the setters, that it trains, and checkpoints (its one state
// array resumed bit for bit, the betas options a checkpoint must match). Its update rule against
// Keras's is in training/loss_and_optimizer_cases.cpp, its CUDA kernel against the CPU's in cuda_ops/update_cases.cpp.
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

BlobTrainerSetup lion_setup() {
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_LION;
    setup.learning_rate = 0.003f;
    return setup;
}

// The weights after `steps` steps from the start of the blobs.
std::vector<float> weights_after(const BlobTrainerSetup& setup, const Blobs& blobs, int steps) {
    const BlobTrainer trainer(setup);
    mpt_test::take_blob_steps(trainer, blobs, 0, steps, kBatch);
    return trainer.weights();
}

// The blobs' steps [first, first + steps) in batches of kBatch.
void take_steps(const BlobTrainer& trainer, const Blobs& blobs, int first, int steps) {
    mpt_test::take_blob_steps(trainer, blobs, first, steps, kBatch);
}

}  // namespace

TEST_CASE("Lion refuses betas outside [0, 1) and a NULL options handle") {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (float beta : {-0.1f, 1.0f, 1.5f, nan, std::numeric_limits<float>::infinity()}) {
        CAPTURE(beta);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lion(options, beta, 0.99f));
        CHECK(std::string(mpt_last_error()).find("beta1") != std::string::npos);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lion(options, 0.9f, beta));
        CHECK(std::string(mpt_last_error()).find("beta2") != std::string::npos);
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lion(nullptr, 0.9f, 0.99f));
    REQUIRE_OK(mpt_trainer_options_set_lion(options, 0.0f, 0.0f));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_LION));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_optimizer(options, static_cast<mpt_optimizer>(MPT_OPTIMIZER_LION + 1)));
    mpt_trainer_options_destroy(options);
}

TEST_CASE("fit with Lion trains the blobs, in every precision") {
    const Blobs blobs = mpt_test::make_blobs(240, 71, 0.8);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(precision);
        BlobTrainerSetup setup = lion_setup();
        setup.precision = precision;
        mpt_test::check_fit_learns_blobs(BlobTrainer(setup), blobs, 10);
    }
}

TEST_CASE("Lion's betas are Keras's 0.9 and 0.99 unless set, by mpt_trainer_options_set_lion or _adam, in either order") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 72, 1.0);
    constexpr int kSteps = 4;
    const auto with = [](const std::function<void(mpt_trainer_options_t*)>& configure) {
        BlobTrainerSetup setup = lion_setup();
        setup.configure = configure;
        return setup;
    };
    const auto lion_betas = [&](float beta1, float beta2) {
        return with([=](mpt_trainer_options_t* options) { REQUIRE_OK(mpt_trainer_options_set_lion(options, beta1, beta2)); });
    };
    const std::vector<float> keras_defaults = weights_after(lion_betas(0.9f, 0.99f), blobs, kSteps);
    CHECK(same_bits(weights_after(lion_setup(), blobs, kSteps), keras_defaults));
    // Adam's beta2 would be another run (the betas matter over these steps).
    const std::vector<float> adam_beta2 = weights_after(lion_betas(0.9f, 0.999f), blobs, kSteps);
    CHECK_FALSE(same_bits(adam_beta2, keras_defaults));
    CHECK_FALSE(same_bits(weights_after(lion_betas(0.5f, 0.99f), blobs, kSteps), keras_defaults));

    SUBCASE("betas set before the optimizer are kept") {
        CHECK(same_bits(weights_after(with([](mpt_trainer_options_t* options) {
                                          REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_SGD));
                                          REQUIRE_OK(mpt_trainer_options_set_lion(options, 0.9f, 0.999f));
                                          REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_LION));
                                      }),
                                      blobs, kSteps),
                        adam_beta2));
    }
    SUBCASE("Adam's betas are Lion's too: the last call's, kept when Lion is chosen after them") {
        CHECK(same_bits(weights_after(with([](mpt_trainer_options_t* options) {
                                          REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_ADAM));
                                          REQUIRE_OK(mpt_trainer_options_set_adam(options, 0.9f, 0.999f, 1e-3f));
                                          REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_LION));
                                      }),
                                      blobs, kSteps),
                        adam_beta2));
    }
    SUBCASE("Adam after Lion takes Adam's default beta2 back") {
        BlobTrainerSetup adam;
        adam.optimizer = MPT_OPTIMIZER_ADAM;
        adam.learning_rate = 0.003f;
        BlobTrainerSetup lion_then_adam = adam;
        lion_then_adam.configure = [](mpt_trainer_options_t* options) {
            REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_LION));
            REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_ADAM));
        };
        CHECK(same_bits(weights_after(lion_then_adam, blobs, kSteps), weights_after(adam, blobs, kSteps)));
    }
    SUBCASE("Lion ignores the momentum, as Adam does") {
        BlobTrainerSetup momentum = lion_setup();
        momentum.momentum = 0.9f;
        momentum.nesterov = true;
        CHECK(same_bits(weights_after(momentum, blobs, kSteps), keras_defaults));
    }
}

// The sign does not see the loss scale, but the momentum does: it must average unscaled gradients,
// or a scale that changes mixes gradients of different sizes in it. Doubling by powers of two is
// exact in fp32, so a scale that doubles every step trains the bits of no scaling.
TEST_CASE("Lion's momentum holds unscaled gradients: a loss scale doubling every step trains the bits of no scaling") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 74, 1.0);
    BlobTrainerSetup unscaled = lion_setup();
    unscaled.loss_scaling = MPT_LOSS_SCALING_OFF;
    BlobTrainerSetup doubling = lion_setup();
    doubling.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
    doubling.initial_scale = 1.0f;
    doubling.configure = [](mpt_trainer_options_t* options) {
        REQUIRE_OK(mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 1, 1.0f, 16777216.0f));
    };
    const BlobTrainer scaled(doubling);
    take_steps(scaled, blobs, 0, 8);
    float scale = 0.0f;
    REQUIRE_OK(mpt_trainer_get_loss_scale(scaled.trainer, &scale, nullptr, nullptr));
    CHECK(scale == 256.0f);  // it did double every step
    CHECK(same_bits(scaled.weights(), weights_after(unscaled, blobs, 8)));
}

TEST_CASE("a Lion run resumes from a checkpoint bit for bit; its betas are options the checkpoint must match") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 73, 1.0);
    const mpt_test::TempDir directory;
    const std::string path = directory.file("lion.safetensors");
    BlobTrainerSetup setup = lion_setup();
    setup.weight_decay = 0.1f;
    BlobTrainer original(setup), resumed(setup);
    take_steps(original, blobs, 0, 2);
    REQUIRE_OK(mpt_trainer_save_checkpoint(original.trainer, path.c_str()));
    CHECK(file_contains(path, "optimizer.0.layers.1.bias"));  // its one state array: the momentum
    CHECK_FALSE(file_contains(path, "optimizer.1."));
    take_steps(original, blobs, 2, 3);
    REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
    take_steps(resumed, blobs, 2, 3);
    CHECK(same_bits(original.weights(), resumed.weights()));

    BlobTrainerSetup other_beta2 = setup;
    other_beta2.lion_beta1 = 0.9f;
    other_beta2.lion_beta2 = 0.98f;
    BlobTrainer refusing(other_beta2);
    const std::vector<float> before = refusing.weights();
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(refusing.trainer, path.c_str()));
    CHECK_MESSAGE(std::string(mpt_last_error()).find("beta2 0.99 (this trainer: 0.98)") != std::string::npos,
                  mpt_last_error());
    CHECK(same_bits(before, refusing.weights()));

    // -0 is 0: a trainer given beta1 -0 resumes a file of beta1 0.
    BlobTrainerSetup zero = setup, negative_zero = setup;
    zero.lion_beta1 = 0.0f;
    zero.lion_beta2 = 0.99f;
    negative_zero.lion_beta1 = -0.0f;
    negative_zero.lion_beta2 = 0.99f;
    BlobTrainer zero_trainer(zero), negative_zero_trainer(negative_zero);
    take_steps(zero_trainer, blobs, 0, 2);
    const std::string zero_path = directory.file("beta1-zero.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(zero_trainer.trainer, zero_path.c_str()));
    REQUIRE_OK(mpt_trainer_load_checkpoint(negative_zero_trainer.trainer, zero_path.c_str()));
    CHECK(same_bits(zero_trainer.weights(), negative_zero_trainer.weights()));

    // Another optimizer's trainer refuses the file by the optimizer's name, and a Lion trainer an Adam file.
    BlobTrainerSetup adam = setup;
    adam.optimizer = MPT_OPTIMIZER_ADAM;
    BlobTrainer adam_trainer(adam);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(adam_trainer.trainer, path.c_str()));
    CHECK_MESSAGE(std::string(mpt_last_error()).find("optimizer lion (this trainer: adam)") != std::string::npos,
                  mpt_last_error());
    const std::string adam_path = directory.file("adam.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(adam_trainer.trainer, adam_path.c_str()));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(original.trainer, adam_path.c_str()));
    CHECK_MESSAGE(std::string(mpt_last_error()).find("optimizer adam (this trainer: lion)") != std::string::npos,
                  mpt_last_error());
}
