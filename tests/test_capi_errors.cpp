// Misuse of the C API (include/mptrain/mptrain.h), through libmptrain.so only: every entry point
// answers with its documented status and a message in mpt_last_error(), writes no out-parameter on
// failure, and leaves every handle usable, which each case proves by training and evaluating again.
// This file: status codes and the version, NULL handles, pointers and out-parameters, and
// mpt_last_error per thread; the same program's other cases, by subject, are in tests/capi_errors/
// (invalid values and shapes, datasets, model state and lifetimes, callbacks, the memory budget).
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "capi_errors/harness.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

using namespace mpt_test::capi_errors;

TEST_CASE("status codes keep their pinned values and each has its own static name") {
    const std::pair<mpt_status, const char*> expected[] = {
        {MPT_STATUS_OK, "MPT_STATUS_OK"},
        {MPT_STATUS_INVALID_ARGUMENT, "MPT_STATUS_INVALID_ARGUMENT"},
        {MPT_STATUS_SHAPE_MISMATCH, "MPT_STATUS_SHAPE_MISMATCH"},
        {MPT_STATUS_OUT_OF_MEMORY, "MPT_STATUS_OUT_OF_MEMORY"},
        {MPT_STATUS_IO_ERROR, "MPT_STATUS_IO_ERROR"},
        {MPT_STATUS_CORRUPT_DATA, "MPT_STATUS_CORRUPT_DATA"},
        {MPT_STATUS_INVALID_STATE, "MPT_STATUS_INVALID_STATE"},
        {MPT_STATUS_NON_FINITE, "MPT_STATUS_NON_FINITE"},
        {MPT_STATUS_CANCELLED, "MPT_STATUS_CANCELLED"},
        {MPT_STATUS_BACKEND_UNAVAILABLE, "MPT_STATUS_BACKEND_UNAVAILABLE"},
        {MPT_STATUS_BACKEND_ERROR, "MPT_STATUS_BACKEND_ERROR"},
        {MPT_STATUS_UNSUPPORTED, "MPT_STATUS_UNSUPPORTED"},
        {MPT_STATUS_INTERNAL, "MPT_STATUS_INTERNAL"},
    };
    for (int value = 0; value < 13; ++value) {
        CAPTURE(value);
        CHECK(static_cast<int>(expected[value].first) == value);  // pinned forever
        const char* name = mpt_status_string(expected[value].first);
        REQUIRE(name != nullptr);
        CHECK(std::string(name) == expected[value].second);
        CHECK(mpt_status_string(expected[value].first) == name);  // static storage, same pointer
    }
    for (int unknown : {13, 14, 99, -1, 1 << 20}) {
        CAPTURE(unknown);
        const char* name = mpt_status_string(bad_enum<mpt_status>(unknown));
        REQUIRE(name != nullptr);
        CHECK(std::string(name) == "MPT_STATUS_UNKNOWN");
    }
}

TEST_CASE("mpt_version matches the header's version macros") {
    const std::string expected = std::to_string(MPT_VERSION_MAJOR) + "." + std::to_string(MPT_VERSION_MINOR) + "." +
                                 std::to_string(MPT_VERSION_PATCH);
    REQUIRE(mpt_version() != nullptr);
    CHECK(std::string(mpt_version()) == expected);
}

TEST_CASE("destroying NULL is a no-op for every handle type") {
    mpt_context_options_destroy(nullptr);
    mpt_context_destroy(nullptr);
    mpt_model_destroy(nullptr);
    mpt_dataset_destroy(nullptr);
    mpt_trainer_options_destroy(nullptr);
    mpt_trainer_destroy(nullptr);
    Session session;
    require_usable(session);
}

TEST_CASE("every entry point rejects a NULL handle with INVALID_ARGUMENT and a message") {
    Session session;
    mpt_trainer_t* trainer = session.trainer;
    mpt_dataset_t* dataset = session.dataset;
    float w[32] = {}, b[8] = {}, x[kFeatures] = {}, out[kClasses] = {};
    const int32_t labels[1] = {0};
    const uint8_t bytes[kFeatures] = {};
    int64_t count = 0;
    size_t used = 0, peak = 0;
    float scale = 0.0f;
    mpt_initializer initializer = MPT_INITIALIZER_GLOROT_UNIFORM;
    mpt_activation activation = MPT_ACTIVATION_LINEAR;
    mpt_dtype dtype = MPT_DTYPE_DEFAULT;
    mpt_backend backend = MPT_BACKEND_AUTO;
    mpt_precision precision = MPT_PRECISION_AUTO;
    mpt_model_t* model_out = nullptr;
    mpt_dataset_t* dataset_out = nullptr;
    mpt_trainer_t* trainer_out = nullptr;

    const std::vector<std::pair<const char*, std::function<mpt_status()>>> calls = {
        {"context_options_set_backend", [&] { return mpt_context_options_set_backend(nullptr, MPT_BACKEND_CPU); }},
        {"context_options_set_threads", [&] { return mpt_context_options_set_threads(nullptr, 2); }},
        {"context_options_set_seed", [&] { return mpt_context_options_set_seed(nullptr, 1); }},
        {"context_options_set_device", [&] { return mpt_context_options_set_device(nullptr, 0); }},
        {"context_options_set_log_callback", [&] { return mpt_context_options_set_log_callback(nullptr, nullptr, nullptr); }},
        {"context_options_set_log_level", [&] { return mpt_context_options_set_log_level(nullptr, MPT_LOG_LEVEL_INFO); }},
        {"context_options_set_memory_budget", [&] { return mpt_context_options_set_memory_budget(nullptr, 0); }},
        {"context_get_backend", [&] { return mpt_context_get_backend(nullptr, &backend); }},
        {"context_resolve_precision", [&] { return mpt_context_resolve_precision(nullptr, MPT_PRECISION_AUTO, &precision); }},
        {"context_get_memory", [&] { return mpt_context_get_memory(nullptr, &used, &peak); }},
        {"context_describe", [&] { return mpt_context_describe(nullptr, nullptr, 0, &used); }},
        {"model_create", [&] { return mpt_model_create(nullptr, 4, &model_out); }},
        {"model_add_dense", [&] { return mpt_model_add_dense(nullptr, 4, MPT_ACTIVATION_RELU); }},
        {"model_set_layer_dtype", [&] { return mpt_model_set_layer_dtype(nullptr, 0, MPT_DTYPE_FP32); }},
        {"model_set_layer_dropout", [&] { return mpt_model_set_layer_dropout(nullptr, 0, 0.5f); }},
        {"model_get_layer_dropout", [&] { return mpt_model_get_layer_dropout(nullptr, 0, &scale); }},
        {"model_get_layer_units", [&] { return mpt_model_get_layer_units(nullptr, 0, &count); }},
        {"model_get_layer_dtype", [&] { return mpt_model_get_layer_dtype(nullptr, 0, &dtype); }},
        {"model_get_layer_activation", [&] { return mpt_model_get_layer_activation(nullptr, 0, &activation); }},
        {"model_set_input_dropout", [&] { return mpt_model_set_input_dropout(nullptr, 0.5f); }},
        {"model_get_input_dropout", [&] { return mpt_model_get_input_dropout(nullptr, &scale); }},
        {"model_set_input_standardization",
         [&] { return mpt_model_set_input_standardization(nullptr, x, w, kFeatures); }},
        {"model_get_input_standardization", [&] {
             int standardizes = 0;
             return mpt_model_get_input_standardization(nullptr, x, w, kFeatures, &standardizes);
         }},
        {"model_set_layer_initializer",
         [&] { return mpt_model_set_layer_initializer(nullptr, 0, MPT_INITIALIZER_HE_NORMAL); }},
        {"model_get_layer_initializer", [&] { return mpt_model_get_layer_initializer(nullptr, 0, &initializer); }},
        {"model_get_layer_count", [&] { return mpt_model_get_layer_count(nullptr, &count); }},
        {"model_get_input_features", [&] { return mpt_model_get_input_features(nullptr, &count); }},
        {"model_get_output_features", [&] { return mpt_model_get_output_features(nullptr, &count); }},
        {"model_get_parameter_count", [&] { return mpt_model_get_parameter_count(nullptr, &count); }},
        {"model_get_weights", [&] { return mpt_model_get_weights(nullptr, 0, w, 32, b, 8); }},
        {"model_set_weights", [&] { return mpt_model_set_weights(nullptr, 0, w, 32, b, 8); }},
        {"model_predict", [&] { return mpt_model_predict(nullptr, x, 1, out, kClasses); }},
        {"dataset_create_u8", [&] { return mpt_dataset_create_u8(nullptr, bytes, 1, kFeatures, labels, 3, 1.0f, 0.0f, &dataset_out); }},
        {"dataset_create_f32", [&] { return mpt_dataset_create_f32(nullptr, x, 1, kFeatures, labels, 3, 1, &dataset_out); }},
        {"dataset_create_f32_targets", [&] { return mpt_dataset_create_f32_targets(nullptr, x, 1, kFeatures, out, kClasses, 1, &dataset_out); }},
        {"dataset_load_cifar10", [&] { return mpt_dataset_load_cifar10(nullptr, "/tmp", 0, 1, &dataset_out); }},
        {"dataset_get_rows", [&] { return mpt_dataset_get_rows(nullptr, &count); }},
        {"dataset_get_features", [&] { return mpt_dataset_get_features(nullptr, &count); }},
        {"dataset_create_slice", [&] { return mpt_dataset_create_slice(nullptr, 0, 1, &dataset_out); }},
        {"dataset_create_weighted", [&] { return mpt_dataset_create_weighted(nullptr, w, 1, &dataset_out); }},
        {"dataset_create_standardized",
         [&] { return mpt_dataset_create_standardized(nullptr, x, w, kFeatures, &dataset_out); }},
        {"dataset_get_feature_statistics", [&] { return mpt_dataset_get_feature_statistics(nullptr, x, w, kFeatures); }},
        {"dataset_get_labels", [&] { int32_t label = 0; return mpt_dataset_get_labels(nullptr, &label, 1); }},
        {"trainer_predict_dataset", [&] { return mpt_trainer_predict_dataset(nullptr, nullptr, 0, out, kClasses); }},
        {"trainer_options_set_precision", [&] { return mpt_trainer_options_set_precision(nullptr, MPT_PRECISION_FP32); }},
        {"trainer_options_set_loss", [&] { return mpt_trainer_options_set_loss(nullptr, MPT_LOSS_MEAN_SQUARED_ERROR); }},
        {"trainer_options_set_huber_delta", [&] { return mpt_trainer_options_set_huber_delta(nullptr, 1.0f); }},
        {"trainer_options_set_optimizer", [&] { return mpt_trainer_options_set_optimizer(nullptr, MPT_OPTIMIZER_ADAM); }},
        {"trainer_options_set_learning_rate", [&] { return mpt_trainer_options_set_learning_rate(nullptr, 0.1f); }},
        {"trainer_options_set_momentum", [&] { return mpt_trainer_options_set_momentum(nullptr, 0.9f, 0); }},
        {"trainer_options_set_adam", [&] { return mpt_trainer_options_set_adam(nullptr, 0.9f, 0.999f, 1e-7f); }},
        {"trainer_options_set_rmsprop_centered", [&] { return mpt_trainer_options_set_rmsprop_centered(nullptr, 1); }},
        {"trainer_options_set_weight_decay", [&] { return mpt_trainer_options_set_weight_decay(nullptr, 0.01f); }},
        {"trainer_options_set_label_smoothing", [&] { return mpt_trainer_options_set_label_smoothing(nullptr, 0.1f); }},
        {"trainer_options_set_class_weights", [&] { const float one = 1.0f; return mpt_trainer_options_set_class_weights(nullptr, &one, 1); }},
        {"trainer_options_set_lr_schedule", [&] { return mpt_trainer_options_set_lr_schedule(nullptr, MPT_LR_SCHEDULE_COSINE, 0, 10, 0.0f); }},
        {"trainer_options_set_loss_scaling", [&] { return mpt_trainer_options_set_loss_scaling(nullptr, MPT_LOSS_SCALING_STATIC, 8.0f); }},
        {"trainer_options_set_loss_scaler_dynamics", [&] { return mpt_trainer_options_set_loss_scaler_dynamics(nullptr, 2.0f, 0.5f, 10, 1.0f, 1024.0f); }},
        {"trainer_options_get_precision", [&] { return mpt_trainer_options_get_precision(nullptr, &precision); }},
        {"trainer_options_get_loss", [&] { mpt_loss loss = MPT_LOSS_HUBER; return mpt_trainer_options_get_loss(nullptr, &loss); }},
        {"trainer_options_get_huber_delta", [&] { return mpt_trainer_options_get_huber_delta(nullptr, &scale); }},
        {"trainer_options_get_label_smoothing", [&] { return mpt_trainer_options_get_label_smoothing(nullptr, &scale); }},
        {"trainer_options_get_class_weights", [&] { return mpt_trainer_options_get_class_weights(nullptr, w, 32, &count); }},
        {"trainer_options_get_optimizer", [&] { mpt_optimizer optimizer = MPT_OPTIMIZER_LION; return mpt_trainer_options_get_optimizer(nullptr, &optimizer); }},
        {"trainer_options_get_learning_rate", [&] { return mpt_trainer_options_get_learning_rate(nullptr, &scale); }},
        {"trainer_options_get_momentum", [&] { int nesterov = 0; return mpt_trainer_options_get_momentum(nullptr, &scale, &nesterov); }},
        {"trainer_options_get_adam", [&] { return mpt_trainer_options_get_adam(nullptr, &scale, &scale, &scale); }},
        {"trainer_options_get_lion", [&] { return mpt_trainer_options_get_lion(nullptr, &scale, &scale); }},
        {"trainer_options_get_rmsprop", [&] { return mpt_trainer_options_get_rmsprop(nullptr, &scale, &scale); }},
        {"trainer_options_get_rmsprop_centered", [&] { int centered = 0; return mpt_trainer_options_get_rmsprop_centered(nullptr, &centered); }},
        {"trainer_options_get_weight_decay", [&] { return mpt_trainer_options_get_weight_decay(nullptr, &scale); }},
        {"trainer_options_get_global_clipnorm", [&] { return mpt_trainer_options_get_global_clipnorm(nullptr, &scale); }},
        {"trainer_options_get_ema", [&] { return mpt_trainer_options_get_ema(nullptr, &scale); }},
        {"trainer_options_get_micro_batch_size", [&] { return mpt_trainer_options_get_micro_batch_size(nullptr, &count); }},
        {"trainer_options_get_lr_schedule", [&] { return mpt_trainer_options_get_lr_schedule(nullptr, nullptr, &count, &count, &scale); }},
        {"trainer_options_get_loss_scaling", [&] { return mpt_trainer_options_get_loss_scaling(nullptr, nullptr, &scale); }},
        {"trainer_options_get_loss_scaler_dynamics", [&] { return mpt_trainer_options_get_loss_scaler_dynamics(nullptr, &scale, &scale, &count, &scale, &scale); }},
        {"trainer_create", [&] { return mpt_trainer_create(nullptr, nullptr, &trainer_out); }},
        {"trainer_set_callbacks", [&] { return mpt_trainer_set_callbacks(nullptr, nullptr, nullptr, nullptr); }},
        {"trainer_fit (trainer)", [&] { return mpt_trainer_fit(nullptr, dataset, 1, 16, 0); }},
        {"trainer_fit (dataset)", [&] { return mpt_trainer_fit(trainer, nullptr, 1, 16, 0); }},
        {"trainer_step (trainer)", [&] { return mpt_trainer_step(nullptr, dataset, 0, 16, &scale); }},
        {"trainer_step (dataset)", [&] { return mpt_trainer_step(trainer, nullptr, 0, 16, &scale); }},
        {"trainer_evaluate (trainer)", [&] { return mpt_trainer_evaluate(nullptr, dataset, 16, &scale, &scale); }},
        {"trainer_evaluate (dataset)", [&] { return mpt_trainer_evaluate(trainer, nullptr, 16, &scale, &scale); }},
        {"trainer_predict", [&] { return mpt_trainer_predict(nullptr, x, 1, out, kClasses); }},
        {"trainer_get_precision", [&] { return mpt_trainer_get_precision(nullptr, &precision); }},
        {"trainer_set_learning_rate", [&] { return mpt_trainer_set_learning_rate(nullptr, 0.1f); }},
        {"trainer_get_learning_rate", [&] { return mpt_trainer_get_learning_rate(nullptr, &scale); }},
        {"trainer_get_options", [&] { mpt_trainer_options_t* options_out = nullptr; return mpt_trainer_get_options(nullptr, &options_out); }},
        {"trainer_get_scheduled_learning_rate", [&] { return mpt_trainer_get_scheduled_learning_rate(nullptr, &scale); }},
        {"trainer_get_loss_scale", [&] { return mpt_trainer_get_loss_scale(nullptr, &scale, &count, &count); }},
        {"trainer_get_progress", [&] { return mpt_trainer_get_progress(nullptr, &count, &count); }},
        {"trainer_get_batch_size", [&] { return mpt_trainer_get_batch_size(nullptr, &count); }},
        {"trainer_get_unfinished_epoch", [&] { return mpt_trainer_get_unfinished_epoch(nullptr, &count, &count, &count); }},
        {"trainer_get_memory", [&] { return mpt_trainer_get_memory(nullptr, &used, &peak); }},
    };
    for (const auto& [name, call] : calls) {
        CAPTURE(name);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, call());
    }
    CHECK(model_out == nullptr);
    CHECK(dataset_out == nullptr);
    CHECK(trainer_out == nullptr);
    CHECK(backend == MPT_BACKEND_AUTO);
    CHECK(precision == MPT_PRECISION_AUTO);
    CHECK(count == 0);
    CHECK(scale == 0.0f);
    CHECK(used == 0);
    CHECK(peak == 0);
    require_usable(session);
}

TEST_CASE("NULL data pointers are rejected with INVALID_ARGUMENT") {
    Session session;
    const Blobs& blobs = session.blobs;
    const std::vector<uint8_t> bytes(kFeatures * 4, 1);
    float out[kClasses] = {};
    mpt_dataset_t* dataset = sentinel_handle<mpt_dataset_t>();
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, nullptr, 4, kFeatures, blobs.y.data(), kClasses, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, blobs.x.data(), 4, kFeatures, nullptr, kClasses, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_u8(session.context, nullptr, 4, kFeatures, blobs.y.data(),
                                                                   kClasses, 1.0f, 0.0f, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_u8(session.context, bytes.data(), 4, kFeatures, nullptr,
                                                                   kClasses, 1.0f, 0.0f, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32_targets(session.context, nullptr, 4, kFeatures, blobs.x.data(), 1, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32_targets(session.context, blobs.x.data(), 4, kFeatures, nullptr, 1, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_load_cifar10(session.context, nullptr, 0, 1, &dataset));
    CHECK(dataset == sentinel_handle<mpt_dataset_t>());

    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(session.model, nullptr, 1, out, kClasses));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(session.model, blobs.x.data(), 1, nullptr, kClasses));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict(session.trainer, nullptr, 1, out, kClasses));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict(session.trainer, blobs.x.data(), 1, nullptr, kClasses));
    require_usable(session);
}

TEST_CASE("NULL out-pointers are rejected with INVALID_ARGUMENT and nothing is created") {
    Session session;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_options_create(nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_create(nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_create(nullptr, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_get_backend(session.context, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_resolve_precision(session.context, MPT_PRECISION_AUTO, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_describe(session.context, nullptr, 0, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(session.context, kFeatures, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_layer_count(session.model, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_input_features(session.model, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_output_features(session.model, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_parameter_count(session.model, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_get_rows(session.dataset, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_get_features(session.dataset, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_get_precision(session.trainer, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_get_learning_rate(session.trainer, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_get_scheduled_learning_rate(session.trainer, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, session.blobs.x.data(), 4, kFeatures, session.blobs.y.data(),
                                       kClasses, 1, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32_targets(session.context, session.blobs.x.data(), 4, kFeatures,
                                               session.blobs.x.data(), 1, 1, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_load_cifar10(session.context, "/nonexistent", 0, 1, nullptr));

    // A trainer that was refused must not have planned or allocated anything.
    size_t used_before = 0, used_after = 0;
    REQUIRE_OK(mpt_context_get_memory(session.context, &used_before, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_create(session.model, nullptr, nullptr));
    REQUIRE_OK(mpt_context_get_memory(session.context, &used_after, nullptr));
    CHECK(used_after == used_before);
    require_usable(session);
}

TEST_CASE("optional outputs may all be NULL") {
    Session session;
    REQUIRE_OK(mpt_trainer_get_loss_scale(session.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_get_memory(session.trainer, nullptr, nullptr));
    REQUIRE_OK(mpt_context_get_memory(session.context, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_evaluate(session.trainer, session.dataset, 16, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_step(session.trainer, session.dataset, 0, 16, nullptr));
    REQUIRE_OK(mpt_model_get_weights(session.model, 0, nullptr, 0, nullptr, 0));
    require_usable(session);
}

TEST_CASE("mpt_last_error is thread-local") {
    mpt_model_t* model = nullptr;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(nullptr, kFeatures, &model));
    const std::string main_message = mpt_last_error();
    REQUIRE_FALSE(main_message.empty());

    std::string fresh_thread_message = "unset", other_message;
    mpt_status other_status = MPT_STATUS_OK;
    // No REQUIRE on the other threads: a failing one would throw outside doctest's reach.
    std::thread other([&] {
        fresh_thread_message = mpt_last_error();  // nothing failed on this thread yet
        mpt_trainer_options_t* options = nullptr;
        if (mpt_trainer_options_create(&options) != MPT_STATUS_OK) return;
        other_status = mpt_trainer_options_set_learning_rate(options, -1.0f);
        other_message = mpt_last_error();
        mpt_trainer_options_destroy(options);
    });
    other.join();
    CHECK(fresh_thread_message.empty());
    CHECK(other_status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_FALSE(other_message.empty());
    CHECK(other_message != main_message);
    // This thread's message is unchanged by the other thread's failure (no mptrain call in between).
    CHECK(std::string(mpt_last_error()) == main_message);

    // Two threads training on their own contexts at once both succeed.
    float accuracies[2] = {0.0f, 0.0f};
    std::thread workers[2];
    for (int t = 0; t < 2; ++t) {
        workers[t] = std::thread([t, &accuracies] {
            mpt_context_options_t* options = nullptr;
            mpt_context_t* context = nullptr;
            if (mpt_context_options_create(&options) != MPT_STATUS_OK) return;
            mpt_context_options_set_backend(options, MPT_BACKEND_CPU);
            mpt_context_options_set_threads(options, 2);
            mpt_context_options_set_seed(options, static_cast<uint64_t>(11 + t));
            const mpt_status created = mpt_context_create(options, &context);
            mpt_context_options_destroy(options);
            if (created != MPT_STATUS_OK) return;
            const Blobs blobs = make_blobs(96, 99);
            mpt_model_t* thread_model = nullptr;
            mpt_trainer_t* trainer = nullptr;
            mpt_dataset_t* dataset = nullptr;
            mpt_trainer_options_t* trainer_options = nullptr;
            if (mpt_trainer_options_create(&trainer_options) != MPT_STATUS_OK) return;
            mpt_trainer_options_set_learning_rate(trainer_options, 0.1f);
            if (mpt_model_create(context, kFeatures, &thread_model) == MPT_STATUS_OK &&
                mpt_model_add_dense(thread_model, 8, MPT_ACTIVATION_RELU) == MPT_STATUS_OK &&
                mpt_model_add_dense(thread_model, kClasses, MPT_ACTIVATION_SOFTMAX) == MPT_STATUS_OK &&
                mpt_trainer_create(thread_model, trainer_options, &trainer) == MPT_STATUS_OK &&
                mpt_dataset_create_f32(context, blobs.x.data(), 96, kFeatures, blobs.y.data(), kClasses, 1, &dataset) ==
                    MPT_STATUS_OK &&
                mpt_trainer_fit(trainer, dataset, 20, 16, 1) == MPT_STATUS_OK)
                mpt_trainer_evaluate(trainer, dataset, 0, nullptr, &accuracies[t]);
            mpt_trainer_options_destroy(trainer_options);
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(thread_model);
            mpt_context_destroy(context);
        });
    }
    for (std::thread& worker : workers) worker.join();
    CHECK(accuracies[0] >= 0.95f);
    CHECK(accuracies[1] >= 0.95f);
}
