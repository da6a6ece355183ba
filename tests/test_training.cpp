// End-to-end training through the C API (libmptrain.so only). This file: models learn in every
// precision and activation, mixed precision ends where fp32 does, and the CPU says when it emulates
// low-precision GEMMs. The same program's other cases, by subject, are in tests/training/ (losses and
// optimizers, schedules, loss scaling, determinism, predictions, weight words, callbacks). References
// are written there, in double precision, from the definitions (Keras semantics), sharing no code
// with the library (training/reference_network.h).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "training/harness.h"
#include "training/reference_network.h"

using namespace mpt_test::training;

namespace {

// Trains specs on the XOR-of-signs rule and checks >= 0.95 held-out accuracy, from the trainer's
// outputs (in its precision), the fp32 model's and evaluate's.
void check_learns_xor(const std::vector<LayerSpec>& specs, mpt_precision precision) {
    const Task train = make_xor(1024, 1), test = make_xor(512, 2);
    const std::string precision_label = precision_name(precision);
    CAPTURE(precision_label);
    mpt_context_t* context = new_context(42);
    mpt_model_t* model = new_model(context, 4, specs);
    TrainerSetup setup;
    setup.precision = precision;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    mpt_trainer_t* trainer = new_trainer(model, setup);
    mpt_precision actual = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_trainer_get_precision(trainer, &actual));
    CHECK(actual == precision);
    mpt_dataset_t* train_set = labels_dataset(context, train);
    mpt_dataset_t* test_set = labels_dataset(context, test);
    REQUIRE_OK(mpt_trainer_fit(trainer, train_set, 30, 32, 1));

    const double trainer_accuracy = accuracy_of(trainer_predict(trainer, test), test);
    const double fp32_accuracy = accuracy_of(model_predict(model, test), test);
    CHECK(trainer_accuracy >= 0.95);
    CHECK(fp32_accuracy >= 0.95);
    float evaluated = -1.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer, test_set, 0, nullptr, &evaluated));
    CHECK(std::fabs(evaluated - trainer_accuracy) <= 2.0 / 512);  // a borderline row or two may flip
    mpt_dataset_destroy(test_set);
    mpt_dataset_destroy(train_set);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

}  // namespace

TEST_CASE("an MLP learns the XOR-of-signs rule to >= 0.95 held-out accuracy in fp32, mixed-fp16 and mixed-bf16") {
    const std::vector<LayerSpec> specs = {{32, MPT_ACTIVATION_RELU}, {32, MPT_ACTIVATION_RELU}, {2, MPT_ACTIVATION_SOFTMAX}};
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16})
        check_learns_xor(specs, precision);
}

// Their derivatives come from the stored outputs, rounded to bf16 or fp16 in mixed precision.
TEST_CASE("leaky ReLU, ELU, SELU, softplus and softsign hidden layers learn the XOR-of-signs rule in mixed-bf16 and mixed-fp16") {
    for (mpt_activation hidden : {MPT_ACTIVATION_LEAKY_RELU, MPT_ACTIVATION_ELU, MPT_ACTIVATION_SELU,
                                  MPT_ACTIVATION_SOFTPLUS, MPT_ACTIVATION_SOFTSIGN}) {
        CAPTURE(hidden);
        const std::vector<LayerSpec> specs = {{32, hidden}, {32, hidden}, {2, MPT_ACTIVATION_SOFTMAX}};
        for (mpt_precision precision : {MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16})
            check_learns_xor(specs, precision);
    }
}

// Overlapping blobs (accuracy well below 1, so it can move). The same seed, data and shuffles are
// trained in fp32 and in each mixed precision. bf16 has an 8-bit significand (u = 2^-8): every
// GEMM input rounds with relative error <= u, so logits carry a relative error of a few u, and the
// final mean loss, an average of such perturbed terms, moves by a small multiple of u. We allow
// 8u (about 0.031) relative on the final loss and 8u absolute on the final accuracy (about 8 of
// 1024 rows changing side). fp16 (11-bit significand) is held to the same bound.
TEST_CASE("mixed-bf16 and mixed-fp16 end within 8 bf16 roundoffs (8 * 2^-8) of fp32's final loss and accuracy") {
    const Task train = make_blobs(1024, 8, 4, 1.0, 1.0, 11), test = make_blobs(1024, 8, 4, 1.0, 1.0, 12);
    const std::vector<LayerSpec> specs = {{32, MPT_ACTIVATION_RELU}, {4, MPT_ACTIVATION_SOFTMAX}};
    float loss[3] = {}, accuracy[3] = {};
    const mpt_precision precisions[3] = {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16};
    std::vector<float> fp32_weights;
    for (int p = 0; p < 3; ++p) {
        mpt_context_t* context = new_context(7);
        mpt_model_t* model = new_model(context, 8, specs);
        TrainerSetup setup;
        setup.precision = precisions[p];
        setup.learning_rate = 0.05f;
        setup.momentum = 0.9f;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* train_set = labels_dataset(context, train);
        REQUIRE_OK(mpt_trainer_fit(trainer, train_set, 8, 32, 1));
        // Both judged in fp32 on held-out data, loss and accuracy computed here.
        const RefNet net = read_net(model, 8, specs);
        loss[p] = static_cast<float>(reference_mean_loss(net, test, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY));
        accuracy[p] = static_cast<float>(accuracy_of(model_predict(model, test), test));
        const std::vector<float> weights = flat_weights(model, 8, specs);
        if (p == 0) fp32_weights = weights;
        else CHECK_FALSE(same_bits(weights, fp32_weights));  // the mixed run really ran in low precision
        mpt_dataset_destroy(train_set);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    INFO("final held-out loss fp32 " << loss[0] << ", bf16 " << loss[1] << ", fp16 " << loss[2] << "; accuracy "
                                         << accuracy[0] << ", " << accuracy[1] << ", " << accuracy[2]);
    CHECK(accuracy[0] > 0.6f);  // learned something, and not trivially perfect
    CHECK(accuracy[0] < 0.99f);
    for (int p = 1; p < 3; ++p) {
        const std::string precision_label = precision_name(precisions[p]);
        CAPTURE(precision_label);
        CHECK(std::fabs(loss[p] - loss[0]) <= 8 * kBf16Roundoff * loss[0]);
        CHECK(std::fabs(accuracy[p] - accuracy[0]) <= 8 * kBf16Roundoff);
    }
}

// Exactly where the CPU emulates a low dtype's GEMMs (every CPU without AMX tiles or AVX512-BF16,
// fp16 on AVX512-BF16 without AMX; ctest also runs this file with both turned off), a mixed trainer in
// it says so once; where the CPU multiplies it natively, nothing is said.
TEST_CASE("a mixed-precision trainer warns, once, exactly when the CPU emulates its low-precision GEMMs") {
    std::vector<std::string> warnings;
    const mpt_log_fn collect = [](mpt_log_level level, const char* message, void* user_data) {
        if (level == MPT_LOG_LEVEL_WARNING) static_cast<std::vector<std::string>*>(user_data)->push_back(message);
    };
    mpt_context_options_t* context_options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&context_options));
    REQUIRE_OK(mpt_context_options_set_backend(context_options, MPT_BACKEND_CPU));
    REQUIRE_OK(mpt_context_options_set_log_callback(context_options, collect, &warnings));
    REQUIRE_OK(mpt_context_options_set_log_level(context_options, MPT_LOG_LEVEL_WARNING));
    mpt_context_t* context = nullptr;
    REQUIRE_OK(mpt_context_create(context_options, &context));
    mpt_context_options_destroy(context_options);
    warnings.clear();  // what the context says of its own set-up is not this case's subject
    struct Expectation {
        mpt_precision precision;
        const char* dtype;
    };
    for (const Expectation& expectation : {Expectation{MPT_PRECISION_FP32, nullptr},
                                           Expectation{MPT_PRECISION_MIXED_BF16, "bf16"},
                                           Expectation{MPT_PRECISION_MIXED_FP16, "fp16"}}) {
        CAPTURE(expectation.precision);
        mpt_model_t* model = new_model(context, 4, {{8, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}});
        TrainerSetup setup;
        setup.precision = expectation.precision;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        if (expectation.dtype && !cpu_multiplies_natively(expectation.precision)) {
            REQUIRE(warnings.size() == 1);
            CHECK(warnings[0].find(std::string(expectation.dtype) + " GEMMs are emulated in fp32") != std::string::npos);
        } else {
            CHECK(warnings.empty());
        }
        warnings.clear();
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
    }
    mpt_context_destroy(context);
}
