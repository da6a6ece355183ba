// test_capi_errors: a model's state and its handles' lifetimes: layers and dtypes fixed once it is
// built, a model without layers, softmax only last, handles destroyed in any order, and the CUDA
// backend asked for where there is no device.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "capi_errors/harness.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

using namespace mpt_test::capi_errors;

TEST_CASE(
    "layers cannot be added nor dtypes changed once the model is built (by a trainer, predict or weight access)") {
    Session session;
    const Blobs& blobs = session.blobs;
    for (int how = 0; how < 3; ++how) {
        CAPTURE(how);
        mpt_model_t* model = nullptr;
        REQUIRE_OK(mpt_model_create(session.context, kFeatures, &model));
        REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX));
        REQUIRE_OK(mpt_model_set_layer_dtype(model, 0, MPT_DTYPE_FP32));  // allowed before the build
        mpt_trainer_t* trainer = nullptr;
        float out[kClasses];
        float bias[kClasses];
        if (how == 0) trainer = new_trainer(model);
        if (how == 1) REQUIRE_OK(mpt_model_predict(model, blobs.x.data(), 1, out, kClasses));
        if (how == 2) REQUIRE_OK(mpt_model_get_weights(model, 1, nullptr, 0, bias, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_model_add_dense(model, 4, MPT_ACTIVATION_RELU));
        CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_model_set_layer_dtype(model, 0, MPT_DTYPE_DEFAULT));
        int64_t layers = 0, outputs = 0;
        REQUIRE_OK(mpt_model_get_layer_count(model, &layers));
        REQUIRE_OK(mpt_model_get_output_features(model, &outputs));
        CHECK(layers == 2);
        CHECK(outputs == kClasses);
        if (!trainer) trainer = new_trainer(model);
        require_trains_to_accuracy(trainer, session.dataset, 0.95f);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
    }
    require_usable(session);
}

TEST_CASE("a model without layers cannot be trained or run (INVALID_STATE)") {
    Session session;
    mpt_model_t* empty = nullptr;
    REQUIRE_OK(mpt_model_create(session.context, kFeatures, &empty));
    mpt_trainer_t* trainer = sentinel_handle<mpt_trainer_t>();
    int64_t outputs = -7;
    float out[kClasses];
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_create(empty, nullptr, &trainer));
    CHECK(trainer == sentinel_handle<mpt_trainer_t>());
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_model_get_output_features(empty, &outputs));
    CHECK(outputs == -7);
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_model_predict(empty, session.blobs.x.data(), 1, out, kClasses));
    // Adding layers afterwards still works: the failed calls did not build it.
    REQUIRE_OK(mpt_model_add_dense(empty, kClasses, MPT_ACTIVATION_SOFTMAX));
    trainer = new_trainer(empty);
    require_trains_to_accuracy(trainer, session.dataset, 0.9f);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(empty);
    require_usable(session);
}

TEST_CASE("softmax is allowed on the last layer only") {
    Session session;
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(session.context, kFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_SOFTMAX));
    const mpt_status status = mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX);
    CHECK(status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(mpt_last_error()).find("softmax") != std::string::npos);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_RELU));
    int64_t layers = 0;
    REQUIRE_OK(mpt_model_get_layer_count(model, &layers));
    CHECK(layers == 1);
    mpt_model_destroy(model);

    // The same stack with softmax last is fine.
    REQUIRE_OK(mpt_model_create(session.context, kFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_TANH));
    REQUIRE_OK(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX));
    mpt_trainer_t* trainer = new_trainer(model);
    require_trains_to_accuracy(trainer, session.dataset, 0.95f);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    require_usable(session);
}

TEST_CASE("handles may be destroyed in any order: children keep their parents alive") {
    SUBCASE("the context first, then everything still trains, evaluates and predicts") {
        Session session;
        mpt_context_destroy(session.context);
        session.context = nullptr;
        require_usable(session);
        // A new trainer can still be made from the model of the destroyed context.
        mpt_trainer_t* second = new_trainer(session.model);
        require_trains_to_accuracy(second, session.dataset, 0.95f);
        mpt_trainer_destroy(second);
    }
    SUBCASE("the model before its trainer") {
        Session session;
        mpt_model_destroy(session.model);
        session.model = nullptr;
        float loss = -1.0f, accuracy = -1.0f;
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 10, 16, 1));
        REQUIRE_OK(mpt_trainer_evaluate(session.trainer, session.dataset, 0, &loss, &accuracy));
        CHECK(accuracy >= 0.95f);
        std::vector<float> out(4 * kClasses);
        REQUIRE_OK(mpt_trainer_predict(session.trainer, session.blobs.x.data(), 4, out.data(), 4 * kClasses));
        for (int r = 0; r < 4; ++r)
            CHECK(out[r * kClasses] + out[r * kClasses + 1] + out[r * kClasses + 2] ==
                  doctest::Approx(1.0).epsilon(1e-5));
    }
    SUBCASE("the context, then the dataset, then the model, then the trainer still works alone") {
        Session session;
        mpt_context_destroy(session.context);
        session.context = nullptr;
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 2, 16, 1));
        mpt_dataset_destroy(session.dataset);
        session.dataset = nullptr;
        mpt_model_destroy(session.model);
        session.model = nullptr;
        std::vector<float> out(2 * kClasses);
        REQUIRE_OK(mpt_trainer_predict(session.trainer, session.blobs.x.data(), 2, out.data(), 2 * kClasses));
        float progress_scale = 0.0f;
        REQUIRE_OK(mpt_trainer_get_loss_scale(session.trainer, &progress_scale, nullptr, nullptr));
        CHECK(progress_scale == 1.0f);  // fp32: no loss scaling
    }
    SUBCASE("the trainer first: the model trains again with a new trainer") {
        Session session;
        mpt_trainer_destroy(session.trainer);
        session.trainer = new_trainer(session.model);
        require_usable(session);
    }
    SUBCASE("options are not retained: destroyed right after use") {
        mpt_context_options_t* context_options = nullptr;
        REQUIRE_OK(mpt_context_options_create(&context_options));
        REQUIRE_OK(mpt_context_options_set_backend(context_options, MPT_BACKEND_CPU));
        REQUIRE_OK(mpt_context_options_set_threads(context_options, 2));
        mpt_context_t* context = nullptr;
        REQUIRE_OK(mpt_context_create(context_options, &context));
        mpt_context_options_destroy(context_options);
        mpt_model_t* model = new_model(context);
        mpt_trainer_options_t* options = new_trainer_options(MPT_OPTIMIZER_ADAM, 0.01f);
        mpt_trainer_t* trainer = nullptr;
        REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
        mpt_trainer_options_destroy(options);
        mpt_dataset_t* dataset = new_dataset(context, make_blobs(96, 4));
        mpt_context_destroy(context);
        require_trains_to_accuracy(trainer, dataset, 0.95f);
        mpt_model_destroy(model);
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
    }
}

TEST_CASE("requesting the CUDA backend without a device gives BACKEND_UNAVAILABLE; AUTO falls back to the CPU") {
    if (mpt_cuda_device_count() > 0) {
        MESSAGE("skipped: this machine has a CUDA device, so CUDA is available");
        return;
    }
    mpt_context_options_t* options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&options));
    REQUIRE_OK(mpt_context_options_set_backend(options, MPT_BACKEND_CUDA));
    mpt_context_t* context = sentinel_handle<mpt_context_t>();
    CHECK_FAILS(MPT_STATUS_BACKEND_UNAVAILABLE, mpt_context_create(options, &context));
    CHECK(context == sentinel_handle<mpt_context_t>());
    REQUIRE_OK(mpt_context_options_set_device(options, 3));
    CHECK_FAILS(MPT_STATUS_BACKEND_UNAVAILABLE, mpt_context_create(options, &context));
    CHECK(context == sentinel_handle<mpt_context_t>());

    // The same options, switched to AUTO, give a working CPU context whose AUTO precision is the
    // CPU's: mixed-bf16 where AMX multiplies bf16 natively, else fp32 (test_autocast checks which).
    REQUIRE_OK(mpt_context_options_set_backend(options, MPT_BACKEND_AUTO));
    REQUIRE_OK(mpt_context_options_set_device(options, 0));
    REQUIRE_OK(mpt_context_options_set_threads(options, 2));
    REQUIRE_OK(mpt_context_create(options, &context));
    mpt_context_options_destroy(options);
    mpt_backend backend = MPT_BACKEND_AUTO;
    REQUIRE_OK(mpt_context_get_backend(context, &backend));
    CHECK(backend == MPT_BACKEND_CPU);
    mpt_precision auto_precision = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_context_resolve_precision(context, MPT_PRECISION_AUTO, &auto_precision));
    CHECK((auto_precision == MPT_PRECISION_FP32 || auto_precision == MPT_PRECISION_MIXED_BF16));
    mpt_precision precision = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_context_resolve_precision(context, MPT_PRECISION_MIXED_FP16, &precision));
    CHECK(precision == MPT_PRECISION_MIXED_FP16);
    mpt_model_t* model = new_model(context);
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, nullptr, &trainer));  // default options: AUTO precision
    REQUIRE_OK(mpt_trainer_get_precision(trainer, &precision));
    CHECK(precision == auto_precision);
    mpt_dataset_t* dataset = new_dataset(context, make_blobs(96, 8));
    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 16, 1));
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}
