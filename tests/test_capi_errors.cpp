// Misuse of the C API (include/mptrain/mptrain.h), through libmptrain.so only: every entry point
// answers with its documented status and a message in mpt_last_error(), writes no out-parameter on
// failure, and leaves every handle usable, which each case proves by training and evaluating again.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/temp_dir.h"

namespace {

// ---- helpers ---------------------------------------------------------------------------------

// An enum value that is no enumerator (cast through int, as a foreign caller would pass it).
template <typename Enum>
Enum bad_enum(int value) {
    return static_cast<Enum>(value);
}

using mpt_test::Blobs;
using mpt_test::make_blobs;
using mpt_test::TestRng;
constexpr int64_t kFeatures = mpt_test::kBlobFeatures;
constexpr int32_t kClasses = mpt_test::kBlobClasses;

mpt_context_t* new_context(uint64_t seed = 7, size_t budget = 0) {
    return mpt_test::create_context(MPT_BACKEND_CPU, seed, budget);
}

// 4 -> 8 relu -> 3 softmax.
mpt_model_t* new_model(mpt_context_t* context) {
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, kFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX));
    return model;
}

mpt_trainer_options_t* new_trainer_options(mpt_optimizer optimizer = MPT_OPTIMIZER_SGD, float learning_rate = 0.1f) {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(options, optimizer));
    REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, learning_rate));
    return options;
}

mpt_trainer_t* new_trainer(mpt_model_t* model, mpt_optimizer optimizer = MPT_OPTIMIZER_SGD) {
    mpt_trainer_options_t* options = new_trainer_options(optimizer);
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_options_destroy(options);
    return trainer;
}

mpt_dataset_t* new_dataset(mpt_context_t* context, const Blobs& blobs) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(context, blobs.x.data(), static_cast<int64_t>(blobs.y.size()), kFeatures,
                                      blobs.y.data(), kClasses, 1, &dataset));
    return dataset;
}

// All layers' weights and biases, concatenated; `shapes` lists each layer's {units, inputs}.
std::vector<float> weights_of(mpt_model_t* model, const std::vector<std::pair<int64_t, int64_t>>& shapes) {
    std::vector<float> all;
    for (size_t layer = 0; layer < shapes.size(); ++layer) {
        const int64_t units = shapes[layer].first, inputs = shapes[layer].second;
        std::vector<float> w(static_cast<size_t>(units * inputs)), b(static_cast<size_t>(units));
        REQUIRE_OK(mpt_model_get_weights(model, static_cast<int64_t>(layer), w.data(), units * inputs, b.data(), units));
        all.insert(all.end(), w.begin(), w.end());
        all.insert(all.end(), b.begin(), b.end());
    }
    return all;
}

const std::vector<std::pair<int64_t, int64_t>> kSmallShapes = {{8, kFeatures}, {kClasses, 8}};

using mpt_test::same_bits;

// A context, a 4-8-3 model, a blob dataset and an fp32 SGD trainer; destroyed in reverse.
struct Session {
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;
    Blobs blobs;

    explicit Session(uint64_t seed = 7) : blobs(make_blobs(96, 1234)) {
        context = new_context(seed);
        model = new_model(context);
        dataset = new_dataset(context, blobs);
        trainer = new_trainer(model);
    }
    ~Session() {
        mpt_trainer_destroy(trainer);
        mpt_dataset_destroy(dataset);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
};

// Proves the session still works: a step, a short fit, evaluate and both predicts succeed with
// finite results, and the weights move.
void require_usable(Session& session) {
    const std::vector<float> before = weights_of(session.model, kSmallShapes);
    float loss = -1.0f;
    REQUIRE_OK(mpt_trainer_step(session.trainer, session.dataset, 0, 16, &loss));
    REQUIRE(std::isfinite(loss));
    REQUIRE(loss >= 0.0f);
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 2, 16, 1));
    float eval_loss = -1.0f, accuracy = -1.0f;
    REQUIRE_OK(mpt_trainer_evaluate(session.trainer, session.dataset, 32, &eval_loss, &accuracy));
    REQUIRE(std::isfinite(eval_loss));
    REQUIRE(accuracy >= 0.0f);
    REQUIRE(accuracy <= 1.0f);
    std::vector<float> out(2 * kClasses, -1.0f);
    REQUIRE_OK(mpt_trainer_predict(session.trainer, session.blobs.x.data(), 2, out.data(), 2 * kClasses));
    REQUIRE_OK(mpt_model_predict(session.model, session.blobs.x.data(), 2, out.data(), 2 * kClasses));
    for (float p : out) REQUIRE(std::isfinite(p));
    REQUIRE_FALSE(same_bits(before, weights_of(session.model, kSmallShapes)));
}

// A fresh context + model + trainer trains the blobs to high accuracy (the handles were not harmed).
void require_trains_to_accuracy(mpt_trainer_t* trainer, mpt_dataset_t* dataset, float minimum) {
    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 10, 16, 1));
    float accuracy = -1.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 0, nullptr, &accuracy));
    CHECK(accuracy >= minimum);
}

// A distinct address for "not written" checks on handle out-parameters.
template <typename Handle>
Handle* sentinel_handle() {
    static char storage[16];
    return reinterpret_cast<Handle*>(storage);
}

}  // namespace

// ---- status codes, version ------------------------------------------------------------------

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

// ---- NULL handles, NULL pointers, NULL out-parameters ---------------------------------------

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

// ---- invalid values -------------------------------------------------------------------------

TEST_CASE("enum values that are no enumerator are rejected with INVALID_ARGUMENT and change nothing") {
    Session session;
    mpt_context_options_t* context_options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&context_options));
    mpt_trainer_options_t* options = new_trainer_options();
    for (int bad : {99, -1, 4, 5}) {
        CAPTURE(bad);
        if (bad != 4 && bad != 5) {
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_options_set_backend(context_options, bad_enum<mpt_backend>(bad)));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_options_set_log_level(context_options, bad_enum<mpt_log_level>(bad)));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_precision(options, bad_enum<mpt_precision>(bad)));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss(options, bad_enum<mpt_loss>(bad)));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaling(options, bad_enum<mpt_loss_scaling>(bad), 8.0f));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_dtype(session.model, 0, bad_enum<mpt_dtype>(bad)));
        }
        if (bad != 4)  // MPT_OPTIMIZER_LION
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_optimizer(options, bad_enum<mpt_optimizer>(bad)));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_trainer_options_set_lr_schedule(options, bad_enum<mpt_lr_schedule>(bad), 0, 10, 0.5f));
        mpt_precision resolved = MPT_PRECISION_MIXED_BF16;
        if (bad != 4 && bad != 5) {
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_context_resolve_precision(session.context, bad_enum<mpt_precision>(bad), &resolved));
        }
        CHECK(resolved == MPT_PRECISION_MIXED_BF16);
    }
    mpt_context_options_destroy(context_options);

    // A layer with an unknown activation is not appended.
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(session.context, kFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_TANH));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_add_dense(model, 8, bad_enum<mpt_activation>(99)));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_add_dense(model, 8, bad_enum<mpt_activation>(-1)));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_add_dense(model, 8, bad_enum<mpt_activation>(10)));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_dtype(model, 0, bad_enum<mpt_dtype>(4)));
    int64_t layers = -1;
    REQUIRE_OK(mpt_model_get_layer_count(model, &layers));
    CHECK(layers == 1);
    REQUIRE_OK(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX));

    // The options kept their last valid values: fp32, SGD, sparse cross-entropy.
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_precision precision = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_trainer_get_precision(trainer, &precision));
    CHECK(precision == MPT_PRECISION_FP32);
    require_trains_to_accuracy(trainer, session.dataset, 0.95f);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_trainer_options_destroy(options);
    require_usable(session);
}

TEST_CASE("out-of-range option values are rejected with INVALID_ARGUMENT") {
    Session session;
    mpt_context_options_t* context_options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&context_options));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_options_set_threads(context_options, -1));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_options_set_device(context_options, -1));
    mpt_context_options_destroy(context_options);

    mpt_trainer_options_t* options = new_trainer_options();
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (float lr : {0.0f, -0.1f, nan, inf}) CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_learning_rate(options, lr));
    for (float m : {-0.1f, 1.0f, 1.5f, nan}) CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_momentum(options, m, 0));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_adam(options, 1.0f, 0.999f, 1e-7f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_adam(options, 0.9f, 1.0f, 1e-7f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_adam(options, -0.1f, 0.999f, 1e-7f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_adam(options, 0.9f, 0.999f, 0.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_adam(options, 0.9f, 0.999f, nan));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_weight_decay(options, -0.1f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_weight_decay(options, nan));
    for (float scale : {0.0f, -1.0f, nan, inf})
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_trainer_options_set_loss_scaling(options, MPT_LOSS_SCALING_STATIC, scale));
    // growth > 1, backoff in (0, 1), interval >= 1, 1 <= min <= max.
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaler_dynamics(options, 1.0f, 0.5f, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaler_dynamics(options, nan, 0.5f, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 1.0f, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.0f, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, nan, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 0, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 10, 0.5f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 10, 64.0f, 32.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 10, nan, 32.0f));

    // Schedules: warm-up >= 0; a constant one has no decay; the others decay over >= 1 step to a
    // factor in [0, 1] (linear, cosine) or by one in (0, 1] (step).
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_CONSTANT, -1, 0, 1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_CONSTANT, 0, 10, 1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_CONSTANT, 0, 0, 0.5f));
    for (mpt_lr_schedule kind : {MPT_LR_SCHEDULE_LINEAR, MPT_LR_SCHEDULE_COSINE, MPT_LR_SCHEDULE_STEP}) {
        CAPTURE(static_cast<int>(kind));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, kind, -5, 10, 0.5f));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, kind, 0, 0, 0.5f));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, kind, 0, -10, 0.5f));
        for (float factor : {-0.1f, 1.5f, nan, inf})
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, kind, 0, 10, factor));
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_STEP, 0, 10, 0.0f));

    // Models and datasets: non-positive sizes.
    mpt_model_t* model = sentinel_handle<mpt_model_t>();
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(session.context, 0, &model));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(session.context, -3, &model));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(session.context, (int64_t{1} << 24) + 1, &model));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(session.context, INT64_MAX, &model));  // found by fuzz_capi
    CHECK(model == sentinel_handle<mpt_model_t>());
    REQUIRE_OK(mpt_model_create(session.context, kFeatures, &model));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_add_dense(model, 0, MPT_ACTIVATION_RELU));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_add_dense(model, -8, MPT_ACTIVATION_RELU));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_add_dense(model, (int64_t{1} << 24) + 1, MPT_ACTIVATION_RELU));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_add_dense(model, INT64_MAX, MPT_ACTIVATION_RELU));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_dtype(model, 0, MPT_DTYPE_FP32));  // no layer 0 yet
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_RELU));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_dtype(model, 1, MPT_DTYPE_FP32));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_dtype(model, -1, MPT_DTYPE_FP32));
    REQUIRE_OK(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX));

    // The trainer options still hold their valid values (fp32 SGD lr 0.1, constant) and train.
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    float rate = 0.0f;
    REQUIRE_OK(mpt_trainer_get_scheduled_learning_rate(trainer, &rate));
    CHECK(rate == 0.1f);
    require_trains_to_accuracy(trainer, session.dataset, 0.95f);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_trainer_options_destroy(options);
    require_usable(session);
}

TEST_CASE("calls with out-of-range counts, rows or batches are rejected and write nothing") {
    Session session;
    float loss = -7.0f, accuracy = -7.0f;
    int64_t rows = 0;
    REQUIRE_OK(mpt_dataset_get_rows(session.dataset, &rows));
    CHECK(rows == 96);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(session.trainer, session.dataset, -1, 16, 0));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(session.trainer, session.dataset, 1, 0, 0));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(session.trainer, session.dataset, 1, -16, 0));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(session.trainer, session.dataset, -1, 16, &loss));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(session.trainer, session.dataset, 90, 16, &loss));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(session.trainer, session.dataset, 0, 0, &loss));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(session.trainer, session.dataset, 0, 97, &loss));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_evaluate(session.trainer, session.dataset, -1, &loss, &accuracy));
    CHECK(loss == -7.0f);
    CHECK(accuracy == -7.0f);
    float out[2 * kClasses];
    std::fill(out, out + 2 * kClasses, -7.0f);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict(session.trainer, session.blobs.x.data(), 0, out, 0));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(session.model, session.blobs.x.data(), 0, out, 0));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(session.model, session.blobs.x.data(), -2, out, -6));
    // Row counts whose input or output sizes overflow (found by fuzz_capi) are refused before any
    // size is computed from them.
    for (int64_t rows : {INT64_MAX, INT64_MAX / kClasses + 1, (int64_t{1} << 40) / kFeatures + 1}) {
        CAPTURE(rows);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(session.model, session.blobs.x.data(), rows, out, 2 * kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_trainer_predict(session.trainer, session.blobs.x.data(), rows, out, 2 * kClasses));
    }
    for (float value : out) CHECK(value == -7.0f);
    // An epoch count of zero is valid and trains nothing.
    const std::vector<float> before = weights_of(session.model, kSmallShapes);
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 0, 16, 1));
    CHECK(same_bits(before, weights_of(session.model, kSmallShapes)));
    require_usable(session);
}

// ---- shapes ---------------------------------------------------------------------------------

TEST_CASE("a dataset whose width differs from the model's inputs gives SHAPE_MISMATCH in fit, step and evaluate") {
    Session session;
    const Blobs wide = make_blobs(32, 5);  // reinterpret 4-wide rows as 2-wide: 64 rows of 2 features
    std::vector<int32_t> labels(64, 1);
    mpt_dataset_t* narrow = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(session.context, wide.x.data(), 64, 2, labels.data(), kClasses, 1, &narrow));
    int64_t features = 0;
    REQUIRE_OK(mpt_dataset_get_features(narrow, &features));
    CHECK(features == 2);
    const std::vector<float> before = weights_of(session.model, kSmallShapes);
    float loss = -7.0f, accuracy = -7.0f;
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_fit(session.trainer, narrow, 1, 16, 1));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_step(session.trainer, narrow, 0, 16, &loss));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_evaluate(session.trainer, narrow, 16, &loss, &accuracy));
    CHECK(loss == -7.0f);
    CHECK(accuracy == -7.0f);
    CHECK(same_bits(before, weights_of(session.model, kSmallShapes)));
    mpt_dataset_destroy(narrow);

    // More classes than outputs.
    std::vector<int32_t> many(32);
    for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int32_t>(i % 5);
    mpt_dataset_t* five = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(session.context, wide.x.data(), 32, kFeatures, many.data(), 5, 1, &five));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_fit(session.trainer, five, 1, 16, 0));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_step(session.trainer, five, 0, 16, nullptr));
    mpt_dataset_destroy(five);
    require_usable(session);
}

namespace {

// The session's 96 labels as one-hot float targets.
std::vector<float> one_hot_targets(const Blobs& blobs) {
    std::vector<float> one_hot(96 * kClasses, 0.0f);
    for (size_t r = 0; r < 96; ++r) one_hot[r * kClasses + static_cast<size_t>(blobs.y[r])] = 1.0f;
    return one_hot;
}

// The session's samples with `targets` of `width` per row.
mpt_dataset_t* targets_dataset(const Session& session, const std::vector<float>& targets, int64_t width, int check_finite) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32_targets(session.context, session.blobs.x.data(), 96, kFeatures, targets.data(), width,
                                              check_finite, &dataset));
    return dataset;
}

}  // namespace

TEST_CASE("the loss and the dataset's kind of targets must agree (SHAPE_MISMATCH)") {
    Session session;
    const Blobs& blobs = session.blobs;
    // Float targets for a sparse-label loss.
    const std::vector<float> one_hot = one_hot_targets(blobs);
    mpt_dataset_t* targets = targets_dataset(session, one_hot, kClasses, 1);
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_fit(session.trainer, targets, 1, 16, 0));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_evaluate(session.trainer, targets, 16, nullptr, nullptr));

    // Integer labels or the wrong target width for a loss on float targets.
    mpt_trainer_options_t* options = new_trainer_options();
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_CATEGORICAL_CROSSENTROPY));
    mpt_trainer_t* categorical = nullptr;
    REQUIRE_OK(mpt_trainer_create(session.model, options, &categorical));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_fit(categorical, session.dataset, 1, 16, 0));
    mpt_dataset_t* narrow_targets = targets_dataset(session, one_hot, 2, 1);
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_step(categorical, narrow_targets, 0, 16, nullptr));
    REQUIRE_OK(mpt_trainer_fit(categorical, targets, 2, 16, 1));  // the right kind trains
    mpt_trainer_destroy(categorical);
    mpt_trainer_options_destroy(options);
    mpt_dataset_destroy(narrow_targets);
    mpt_dataset_destroy(targets);
    require_usable(session);
}

TEST_CASE("binary cross-entropy refuses targets outside [0, 1] (INVALID_ARGUMENT); other losses take them") {
    Session session;
    std::vector<float> targets = one_hot_targets(session.blobs);
    mpt_dataset_t* in_range = targets_dataset(session, targets, kClasses, 1);
    targets[5 * kClasses] = 2.0f;  // one target of one row
    mpt_dataset_t* outside = targets_dataset(session, targets, kClasses, 1);
    targets[5 * kClasses] = std::numeric_limits<float>::quiet_NaN();  // not checked for finiteness here
    mpt_dataset_t* not_a_number = targets_dataset(session, targets, kClasses, 0);

    mpt_trainer_options_t* options = new_trainer_options();
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_BINARY_CROSSENTROPY));
    mpt_trainer_t* binary = nullptr;
    REQUIRE_OK(mpt_trainer_create(session.model, options, &binary));
    for (const mpt_dataset_t* bad : {outside, not_a_number}) {
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(binary, bad, 1, 16, 0));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(binary, bad, 0, 16, nullptr));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_evaluate(binary, bad, 16, nullptr, nullptr));
    }
    REQUIRE_OK(mpt_trainer_fit(binary, in_range, 1, 16, 1));
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_MEAN_SQUARED_ERROR));
    mpt_trainer_t* squared = nullptr;
    REQUIRE_OK(mpt_trainer_create(session.model, options, &squared));
    REQUIRE_OK(mpt_trainer_fit(squared, outside, 1, 16, 1));
    mpt_trainer_destroy(squared);
    mpt_trainer_destroy(binary);
    mpt_trainer_options_destroy(options);
    mpt_dataset_destroy(not_a_number);
    mpt_dataset_destroy(outside);
    mpt_dataset_destroy(in_range);
    require_usable(session);
}

TEST_CASE("NaN or Inf in a prediction's inputs gives NON_FINITE and leaves the outputs untouched") {
    Session session;
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        std::vector<float> x(session.blobs.x.begin(), session.blobs.x.begin() + 3 * kFeatures);
        x[2 * kFeatures + 1] = bad;  // row 2
        std::vector<float> out(3 * kClasses, -7.0f);
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_model_predict(session.model, x.data(), 3, out.data(), 3 * kClasses));
        CHECK(std::string(mpt_last_error()).find("row 2") != std::string::npos);
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_predict(session.trainer, x.data(), 3, out.data(), 3 * kClasses));
        for (float value : out) CHECK(value == -7.0f);
    }
    require_usable(session);
}

TEST_CASE("NaN or Inf in weights or biases given to set_weights gives NON_FINITE and changes nothing") {
    Session session;
    const int64_t last = 1, units = kClasses, inputs = 8;  // new_model's last layer
    std::vector<float> weights(static_cast<size_t>(units * inputs)), bias(static_cast<size_t>(units));
    REQUIRE_OK(mpt_model_get_weights(session.model, last, weights.data(), units * inputs, bias.data(), units));
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        std::vector<float> bad_weights(weights.size(), 0.5f), bad_bias(bias.size(), 0.25f);
        bad_weights[static_cast<size_t>(inputs + 1)] = bad;  // row 1, element 1
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_model_set_weights(session.model, last, bad_weights.data(),
                                                                 units * inputs, bad_bias.data(), units));
        CHECK(std::string(mpt_last_error()).find("weight row 1, element 1") != std::string::npos);
        bad_weights[static_cast<size_t>(inputs + 1)] = 0.5f;
        bad_bias.back() = bad;
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_model_set_weights(session.model, last, bad_weights.data(),
                                                                 units * inputs, bad_bias.data(), units));
        std::vector<float> weights_now(weights.size()), bias_now(bias.size());
        REQUIRE_OK(mpt_model_get_weights(session.model, last, weights_now.data(), units * inputs, bias_now.data(), units));
        CHECK(weights_now == weights);
        CHECK(bias_now == bias);
    }
    require_usable(session);
}

TEST_CASE("predict and weight access with wrong counts give SHAPE_MISMATCH and leave the buffers untouched") {
    Session session;
    std::vector<float> out(3 * kClasses + 1, -7.0f);
    const float* x = session.blobs.x.data();
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_predict(session.model, x, 3, out.data(), 3 * kClasses - 1));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_predict(session.model, x, 3, out.data(), 3 * kClasses + 1));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_predict(session.trainer, x, 3, out.data(), 3 * kClasses - 1));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_predict(session.trainer, x, 3, out.data(), 3 * kClasses + 1));
    for (float value : out) CHECK(value == -7.0f);

    std::vector<float> w(8 * kFeatures + 1, -7.0f), b(9, -7.0f);
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_get_weights(session.model, 0, w.data(), 8 * kFeatures - 1, b.data(), 8));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_get_weights(session.model, 0, w.data(), 8 * kFeatures + 1, b.data(), 8));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_get_weights(session.model, 0, w.data(), 8 * kFeatures, b.data(), 7));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_get_weights(session.model, 0, nullptr, 0, b.data(), 9));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_get_weights(session.model, 1, w.data(), 8 * kFeatures, nullptr, 0));
    for (float value : w) CHECK(value == -7.0f);
    for (float value : b) CHECK(value == -7.0f);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_weights(session.model, 2, w.data(), 8 * kFeatures, b.data(), 8));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_weights(session.model, -1, w.data(), 8 * kFeatures, b.data(), 8));
    for (float value : w) CHECK(value == -7.0f);

    // A refused set_weights changes nothing, not even the part whose count was right.
    const std::vector<float> before = weights_of(session.model, kSmallShapes);
    std::vector<float> zeros(8 * kFeatures + 1, 0.0f);
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_set_weights(session.model, 0, zeros.data(), 8 * kFeatures, zeros.data(), 7));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_set_weights(session.model, 0, zeros.data(), 8 * kFeatures + 1, zeros.data(), 8));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_weights(session.model, 2, zeros.data(), 8 * kFeatures, zeros.data(), 8));
    CHECK(same_bits(before, weights_of(session.model, kSmallShapes)));
    require_usable(session);
}

// ---- datasets -------------------------------------------------------------------------------

TEST_CASE("labels outside [0, num_classes) and empty shapes are rejected at dataset creation") {
    Session session;
    const Blobs blobs = make_blobs(8, 3);
    const std::vector<uint8_t> bytes(8 * kFeatures, 100);
    mpt_dataset_t* dataset = sentinel_handle<mpt_dataset_t>();
    for (int32_t bad : {-1, kClasses, kClasses + 7, std::numeric_limits<int32_t>::min()}) {
        CAPTURE(bad);
        for (size_t row : {size_t{0}, size_t{7}}) {
            std::vector<int32_t> labels = blobs.y;
            labels[row] = bad;
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures,
                                                                            labels.data(), kClasses, 1, &dataset));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_dataset_create_u8(session.context, bytes.data(), 8, kFeatures, labels.data(), kClasses,
                                              1.0f / 255.0f, 0.0f, &dataset));
        }
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures, blobs.y.data(), 0, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, blobs.x.data(), 0, kFeatures, blobs.y.data(), kClasses, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, blobs.x.data(), 8, 0, blobs.y.data(), kClasses, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, blobs.x.data(), -8, kFeatures, blobs.y.data(), kClasses, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_f32_targets(session.context, blobs.x.data(), 8, kFeatures,
                                                                            blobs.x.data(), 0, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_u8(session.context, bytes.data(), 8, kFeatures, blobs.y.data(), kClasses,
                                      std::numeric_limits<float>::quiet_NaN(), 0.0f, &dataset));
    CHECK(dataset == sentinel_handle<mpt_dataset_t>());

    // The boundary labels 0 and num_classes - 1 are fine.
    std::vector<int32_t> edge(8, 0);
    edge[3] = kClasses - 1;
    REQUIRE_OK(mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures, edge.data(), kClasses, 1, &dataset));
    mpt_dataset_destroy(dataset);
    require_usable(session);
}

TEST_CASE("NaN and Inf in samples or targets fail dataset creation with NON_FINITE when check_finite is set") {
    Session session;
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (float bad : {nan, inf, -inf}) {
        CAPTURE(bad);
        Blobs blobs = make_blobs(8, 3);
        blobs.x[5 * kFeatures + 2] = bad;
        std::vector<float> targets(8, 0.5f);
        mpt_dataset_t* dataset = sentinel_handle<mpt_dataset_t>();
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures,
                                                                  blobs.y.data(), kClasses, 1, &dataset));
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_dataset_create_f32_targets(session.context, blobs.x.data(), 8, kFeatures,
                                                                          targets.data(), 1, 1, &dataset));
        const Blobs clean = make_blobs(8, 3);
        targets[6] = bad;
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_dataset_create_f32_targets(session.context, clean.x.data(), 8, kFeatures,
                                                                          targets.data(), 1, 1, &dataset));
        CHECK(dataset == sentinel_handle<mpt_dataset_t>());
        // Without the check the same data is accepted.
        REQUIRE_OK(mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures, blobs.y.data(), kClasses, 0,
                                          &dataset));
        mpt_dataset_destroy(dataset);
    }
    require_usable(session);
}

TEST_CASE("without check_finite, a NaN or Inf batch makes fp32 step and fit return NON_FINITE and leaves the weights unchanged") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (mpt_optimizer optimizer : {MPT_OPTIMIZER_SGD, MPT_OPTIMIZER_ADAM}) {
        for (float bad : {nan, inf}) {
            CAPTURE(optimizer);
            CAPTURE(bad);
            Session session;
            mpt_trainer_destroy(session.trainer);
            session.trainer = new_trainer(session.model, optimizer);
            Blobs poisoned = session.blobs;
            poisoned.x[0] = bad;  // row 0: in the first batch of an unshuffled epoch
            mpt_dataset_t* dataset = nullptr;
            REQUIRE_OK(mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures, poisoned.y.data(),
                                              kClasses, 0, &dataset));
            const std::vector<float> before = weights_of(session.model, kSmallShapes);
            float loss = -7.0f;
            CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_step(session.trainer, dataset, 0, 16, &loss));
            CHECK(loss == -7.0f);
            CHECK(same_bits(before, weights_of(session.model, kSmallShapes)));
            CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, dataset, 1, 16, 0));
            CHECK(same_bits(before, weights_of(session.model, kSmallShapes)));
            // A batch without the bad row trains.
            REQUIRE_OK(mpt_trainer_step(session.trainer, dataset, 16, 16, &loss));
            CHECK(std::isfinite(loss));
            const std::vector<float> after_clean_step = weights_of(session.model, kSmallShapes);
            CHECK_FALSE(same_bits(before, after_clean_step));
            for (float value : after_clean_step) CHECK(std::isfinite(value));

            // The refused steps left no trace in the optimizer: the same clean step on a fresh model
            // from the same seed gives bit-identical weights.
            mpt_context_t* context = new_context(7);
            mpt_model_t* model = new_model(context);
            mpt_trainer_t* trainer = new_trainer(model, optimizer);
            mpt_dataset_t* clean = new_dataset(context, session.blobs);
            REQUIRE_OK(mpt_trainer_step(trainer, clean, 16, 16, nullptr));
            CHECK(same_bits(after_clean_step, weights_of(model, kSmallShapes)));
            mpt_dataset_destroy(clean);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);

            mpt_dataset_destroy(dataset);
            require_usable(session);
        }
    }
}

namespace {

constexpr int64_t kCifarRecords = 10000, kCifarPixels = 3072, kCifarRecordBytes = 3073;

// Record r: label r % 2; pixel 0 is 128 for label 1 and 127 for label 0 (so x0 = 128/255 or
// 127/255 lies just above or below 0.5 only when scaled by 1/255); other pixels vary.
std::vector<uint8_t> cifar_bytes() {
    std::vector<uint8_t> bytes(static_cast<size_t>(kCifarRecords * kCifarRecordBytes));
    for (int64_t r = 0; r < kCifarRecords; ++r) {
        uint8_t* record = bytes.data() + r * kCifarRecordBytes;
        record[0] = static_cast<uint8_t>(r % 2);
        record[1] = record[0] ? 128 : 127;
        for (int64_t p = 1; p < kCifarPixels; ++p) record[1 + p] = static_cast<uint8_t>((r * 7 + p) % 256);
    }
    return bytes;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    REQUIRE(file.good());
    file.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    REQUIRE(file.good());
}

}  // namespace

TEST_CASE("the CIFAR-10 loader: missing files give IO_ERROR, wrong sizes and bad labels CORRUPT_DATA, a valid file loads") {
    Session session;
    mpt_test::TempDir dir("mptrain_cifar");
    mpt_dataset_t* dataset = sentinel_handle<mpt_dataset_t>();
    CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, (dir.path.string() + "/missing").c_str(), 0, 0, &dataset));
    CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, (dir.path.string() + "/missing").c_str(), 1, 0, &dataset));
    CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
    CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 1, 10, &dataset));
    CHECK(dataset == sentinel_handle<mpt_dataset_t>());

    std::vector<uint8_t> bytes = cifar_bytes();
    const std::string test_batch = dir.file("test_batch.bin");
    SUBCASE("truncated and oversized files are CORRUPT_DATA, even when a limit would not reach the end") {
        for (size_t size : {size_t{0}, size_t{kCifarRecordBytes * 100}, bytes.size() - 1}) {
            CAPTURE(size);
            write_file(test_batch, bytes.data(), size);
            CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
            CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 10, &dataset));
        }
        bytes.push_back(0);
        write_file(test_batch, bytes.data(), bytes.size());
        CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
        CHECK(dataset == sentinel_handle<mpt_dataset_t>());
    }
    SUBCASE("a label byte of 10 (first or last record) is CORRUPT_DATA") {
        for (int64_t record : {int64_t{0}, kCifarRecords - 1}) {
            CAPTURE(record);
            std::vector<uint8_t> bad = bytes;
            bad[static_cast<size_t>(record * kCifarRecordBytes)] = 10;
            write_file(test_batch, bad.data(), bad.size());
            CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
        }
        bytes[0] = 255;
        write_file(test_batch, bytes.data(), bytes.size());
        CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
        CHECK(dataset == sentinel_handle<mpt_dataset_t>());
    }
    SUBCASE("a valid file loads with its labels, scaled by 1/255, and limit keeps the first records") {
        write_file(test_batch, bytes.data(), bytes.size());
        mpt_dataset_t* full = nullptr;
        REQUIRE_OK(mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &full));
        int64_t rows = 0, features = 0;
        REQUIRE_OK(mpt_dataset_get_rows(full, &rows));
        REQUIRE_OK(mpt_dataset_get_features(full, &features));
        CHECK(rows == kCifarRecords);
        CHECK(features == kCifarPixels);
        mpt_dataset_t* first = nullptr;
        REQUIRE_OK(mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 100, &first));
        REQUIRE_OK(mpt_dataset_get_rows(first, &rows));
        CHECK(rows == 100);

        // The training split reads data_batch_1.bin first; with a limit inside it, the others are
        // not needed, without one the missing data_batch_2.bin is an IO_ERROR.
        write_file(dir.file("data_batch_1.bin"), bytes.data(), bytes.size());
        mpt_dataset_t* train = nullptr;
        REQUIRE_OK(mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 1, 50, &train));
        REQUIRE_OK(mpt_dataset_get_rows(train, &rows));
        CHECK(rows == 50);
        CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 1, 0, &dataset));
        CHECK(dataset == sentinel_handle<mpt_dataset_t>());

        // A 3072 -> 10 linear model that predicts class 1 exactly when x0 > 0.5 (z1 = x0, z0 = 0.5,
        // the rest -30): accuracy 1 needs the labels and the 1/255 scaling. Loss by hand in double.
        mpt_model_t* model = nullptr;
        REQUIRE_OK(mpt_model_create(session.context, kCifarPixels, &model));
        REQUIRE_OK(mpt_model_add_dense(model, 10, MPT_ACTIVATION_SOFTMAX));
        std::vector<float> w(10 * kCifarPixels, 0.0f), b(10, -30.0f);
        w[1 * kCifarPixels + 0] = 1.0f;
        b[0] = 0.5f;
        b[1] = 0.0f;
        REQUIRE_OK(mpt_model_set_weights(model, 0, w.data(), static_cast<int64_t>(w.size()), b.data(), 10));
        mpt_trainer_t* trainer = new_trainer(model);
        float loss = -1.0f, accuracy = -1.0f;
        REQUIRE_OK(mpt_trainer_evaluate(trainer, first, 64, &loss, &accuracy));
        CHECK(accuracy == 1.0f);
        double expected = 0.0;
        for (int r = 0; r < 100; ++r) {
            const double x0 = (r % 2 ? 128.0 : 127.0) / 255.0;
            double z[10] = {0.5, x0, -30, -30, -30, -30, -30, -30, -30, -30};
            double sum = 0.0;
            for (double v : z) sum += std::exp(v);
            expected += std::log(sum) - z[r % 2];
        }
        expected /= 100.0;
        CHECK(loss == doctest::Approx(expected).epsilon(1e-5));
        REQUIRE_OK(mpt_trainer_evaluate(trainer, train, 64, nullptr, &accuracy));
        CHECK(accuracy == 1.0f);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_dataset_destroy(train);
        mpt_dataset_destroy(first);
        mpt_dataset_destroy(full);
    }
    require_usable(session);
}

TEST_CASE("a dataset from another context is refused") {
    Session session;
    mpt_context_t* other = new_context(7);
    mpt_dataset_t* foreign = new_dataset(other, session.blobs);
    const mpt_status status = mpt_trainer_fit(session.trainer, foreign, 1, 16, 0);
    CHECK(status != MPT_STATUS_OK);
    CHECK(std::string(mpt_last_error()) != "");
    mpt_dataset_destroy(foreign);
    mpt_context_destroy(other);
    require_usable(session);
}

// ---- model state ------------------------------------------------------------------------------

TEST_CASE("layers cannot be added nor dtypes changed once the model is built (by a trainer, predict or weight access)") {
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

// ---- callbacks --------------------------------------------------------------------------------

namespace {

struct CallbackLog {
    mpt_trainer_t* trainer = nullptr;
    int64_t cancel_at_call = -1;  // progress call (1-based) that returns 1; -1 never
    int64_t stop_at_epoch_end = -1;
    int64_t progress_calls = 0;
    int64_t epoch_end_calls = 0;
    int64_t last_step = 0;
    int64_t steps_per_epoch = 0;
    bool nested_call_ok = true;
    bool arguments_ok = true;
};

int on_progress(int64_t epoch, int64_t step, int64_t steps_per_epoch, float loss, float accuracy, void* user_data) {
    CallbackLog& log = *static_cast<CallbackLog*>(user_data);
    ++log.progress_calls;
    log.arguments_ok &= epoch >= 0 && step >= 1 && step <= steps_per_epoch && std::isfinite(loss) && loss >= 0.0f &&
                        accuracy >= 0.0f && accuracy <= 1.0f;
    log.last_step = step;
    log.steps_per_epoch = steps_per_epoch;
    // Other mptrain functions may be called from a callback.
    int64_t steps = -1;
    log.nested_call_ok &= mpt_trainer_get_progress(log.trainer, &steps, nullptr) == MPT_STATUS_OK && steps >= 1;
    return log.progress_calls == log.cancel_at_call ? 1 : 0;
}

int on_epoch_end(int64_t epoch, float loss, float accuracy, void* user_data) {
    CallbackLog& log = *static_cast<CallbackLog*>(user_data);
    ++log.epoch_end_calls;
    log.arguments_ok &= epoch >= 0 && std::isfinite(loss) && accuracy >= 0.0f && accuracy <= 1.0f;
    return log.epoch_end_calls == log.stop_at_epoch_end ? 1 : 0;
}

}  // namespace

TEST_CASE("a progress callback that returns non-zero cancels fit with CANCELLED, and fit works again afterwards") {
    Session session;
    CallbackLog log;
    log.trainer = session.trainer;
    log.cancel_at_call = 3;
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, on_progress, on_epoch_end, &log));
    int64_t steps_before = 0;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps_before, nullptr));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 5, 16, 1));
    CHECK(log.progress_calls == 3);
    CHECK(log.epoch_end_calls == 0);
    int64_t steps = 0, epochs = -1;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
    CHECK(steps - steps_before == 3);  // the cancelled fit stopped right after the third step
    CHECK(epochs == 0);

    // The same trainer fits again; the callbacks see every step of both epochs. (Another batch size,
    // so that the interrupted epoch is not resumed but abandoned: two whole epochs follow.)
    log.cancel_at_call = -1;
    log.progress_calls = 0;
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 2, 32, 1));
    CHECK(log.progress_calls == 2 * (96 / 32));
    CHECK(log.steps_per_epoch == 96 / 32);
    CHECK(log.last_step == 96 / 32);
    CHECK(log.epoch_end_calls == 2);
    CHECK(log.arguments_ok);
    CHECK(log.nested_call_ok);
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, nullptr, &epochs));
    CHECK(epochs == 2);

    // Clearing the callbacks stops the calls.
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, nullptr, nullptr, nullptr));
    require_usable(session);
    CHECK(log.progress_calls == 2 * (96 / 32));
}

TEST_CASE("a failure at an epoch's last step closes that epoch: the next fit trains a whole new one") {
    // 96 rows, batch 16: 6 steps an epoch. Every step of the failing epoch ran, so nothing is left to
    // resume; the next fit(1) must train 6 steps, not "finish" an epoch that has none left.
    SUBCASE("NaN in the last batch of an unshuffled epoch") {
        Session session;
        Blobs poisoned = session.blobs;
        poisoned.x[95 * kFeatures] = std::numeric_limits<float>::quiet_NaN();
        mpt_dataset_t* dataset = nullptr;
        REQUIRE_OK(mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures, poisoned.y.data(),
                                          kClasses, 0, &dataset));
        // The epoch is complete: its epoch-end callback and checkpoint come before the failure.
        CallbackLog log;
        log.trainer = session.trainer;
        REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, nullptr, on_epoch_end, &log));
        mpt_test::TempDir checkpoints("mptrain-last-step");
        REQUIRE_OK(mpt_trainer_set_checkpointing(session.trainer, checkpoints.path.c_str(), 0, 1, 1));
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, dataset, 1, 16, 0));
        CHECK(log.epoch_end_calls == 1);
        CHECK(std::filesystem::exists(checkpoints.path / "checkpoint-000000000006.safetensors"));
        REQUIRE_OK(mpt_trainer_set_checkpointing(session.trainer, nullptr, 0, 0, 0));
        int64_t steps = 0, epochs = -1;
        REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
        CHECK(steps == 6);
        CHECK(epochs == 1);
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 0));
        REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
        CHECK(steps == 12);
        CHECK(epochs == 2);
        mpt_dataset_destroy(dataset);
        require_usable(session);
    }
    SUBCASE("a progress callback cancelling at the last step") {
        Session session;
        CallbackLog log;
        log.trainer = session.trainer;
        log.cancel_at_call = 6;
        REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, on_progress, on_epoch_end, &log));
        CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 1));
        CHECK(log.epoch_end_calls == 1);  // the epoch is complete: its callback is owed, as in Keras
        int64_t steps = 0, epochs = -1;
        REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
        CHECK(steps == 6);
        CHECK(epochs == 1);
        log.cancel_at_call = -1;
        log.progress_calls = 0;
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 1));
        CHECK(log.progress_calls == 6);
        CHECK(log.epoch_end_calls == 2);
        REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
        CHECK(steps == 12);
        CHECK(epochs == 2);
    }
    SUBCASE("the trainer destroyed by the progress callback of the last step: no epoch-end callback") {
        Session session;
        struct Destroying {
            mpt_trainer_t* trainer;
            int epoch_end_calls = 0;
        } state{session.trainer};
        auto destroy_at_last_step = [](int64_t, int64_t step, int64_t steps_per_epoch, float, float, void* user) -> int {
            if (step == steps_per_epoch) mpt_trainer_destroy(static_cast<Destroying*>(user)->trainer);
            return 0;
        };
        auto count_epoch_end = [](int64_t, float, float, void* user) -> int {
            ++static_cast<Destroying*>(user)->epoch_end_calls;
            return 0;
        };
        REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, destroy_at_last_step, count_epoch_end, &state));
        CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 2, 16, 1));
        session.trainer = nullptr;  // freed as fit returned
        CHECK(state.epoch_end_calls == 0);
    }
}

TEST_CASE("an epoch-end callback that returns non-zero stops fit with CANCELLED after that epoch") {
    Session session;
    CallbackLog log;
    log.trainer = session.trainer;
    log.stop_at_epoch_end = 2;
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, nullptr, on_epoch_end, &log));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 10, 32, 1));
    CHECK(log.epoch_end_calls == 2);
    int64_t steps = 0, epochs = 0;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
    CHECK(epochs == 2);
    CHECK(steps == 2 * (96 / 32));
    log.stop_at_epoch_end = -1;
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 3, 32, 1));
    CHECK(log.epoch_end_calls == 5);
    CHECK(log.arguments_ok);
    require_usable(session);
}

// What a log callback's calls back into mptrain returned.
struct ReentryLog {
    mpt_model_t* same_context_model = nullptr;
    mpt_model_t* other_context_model = nullptr;
    int calls = 0;
    mpt_status same_context = MPT_STATUS_OK;
    std::string same_context_message;
    mpt_status other_context = MPT_STATUS_INTERNAL;
};

void log_and_call_back(mpt_log_level, const char*, void* user_data) {
    ReentryLog& log = *static_cast<ReentryLog*>(user_data);
    ++log.calls;
    int64_t layers = 0;
    log.same_context = mpt_model_get_layer_count(log.same_context_model, &layers);
    log.same_context_message = mpt_last_error();
    log.other_context = mpt_model_get_layer_count(log.other_context_model, &layers);
}

TEST_CASE("a log callback's calls back into its own context are refused (INVALID_STATE); other contexts work") {
    ReentryLog log;
    mpt_context_options_t* options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&options));
    REQUIRE_OK(mpt_context_options_set_backend(options, MPT_BACKEND_CPU));
    REQUIRE_OK(mpt_context_options_set_threads(options, 1));
    REQUIRE_OK(mpt_context_options_set_log_level(options, MPT_LOG_LEVEL_DEBUG));
    REQUIRE_OK(mpt_context_options_set_log_callback(options, log_and_call_back, &log));
    mpt_context_t* context = nullptr;
    REQUIRE_OK(mpt_context_create(options, &context));
    mpt_context_options_destroy(options);
    mpt_context_t* other = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    REQUIRE_OK(mpt_model_create(context, 4, &log.same_context_model));
    REQUIRE_OK(mpt_model_add_dense(log.same_context_model, 3, MPT_ACTIVATION_SOFTMAX));
    REQUIRE_OK(mpt_model_create(other, 4, &log.other_context_model));

    const int calls_before = log.calls;
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(log.same_context_model, nullptr, &trainer));  // logs its precision (DEBUG)
    REQUIRE(log.calls > calls_before);
    CHECK(log.same_context == MPT_STATUS_INVALID_STATE);
    CHECK(log.same_context_message.find("log callback") != std::string::npos);
    CHECK(log.other_context == MPT_STATUS_OK);

    // Outside the callback the context is usable again.
    int64_t layers = 0;
    REQUIRE_OK(mpt_model_get_layer_count(log.same_context_model, &layers));
    CHECK(layers == 1);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(log.other_context_model);
    mpt_model_destroy(log.same_context_model);
    mpt_context_destroy(other);
    mpt_context_destroy(context);
}

// ---- threads ----------------------------------------------------------------------------------

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

// ---- lifetimes --------------------------------------------------------------------------------

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
            CHECK(out[r * kClasses] + out[r * kClasses + 1] + out[r * kClasses + 2] == doctest::Approx(1.0).epsilon(1e-5));
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

// ---- backends ---------------------------------------------------------------------------------

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

// ---- memory budget ----------------------------------------------------------------------------

TEST_CASE("a tiny memory budget fails trainer creation with OUT_OF_MEMORY and the context still trains a small model") {
    constexpr size_t kBudget = 96 * 1024;
    mpt_context_t* context = new_context(7, kBudget);

    SUBCASE("a model too large for the budget") {
        // 512 x 256 fp32 weights alone are 512 KiB.
        mpt_model_t* big = nullptr;
        REQUIRE_OK(mpt_model_create(context, 512, &big));
        REQUIRE_OK(mpt_model_add_dense(big, 256, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(big, 10, MPT_ACTIVATION_SOFTMAX));
        mpt_trainer_t* trainer = sentinel_handle<mpt_trainer_t>();
        CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_create(big, nullptr, &trainer));
        CHECK(trainer == sentinel_handle<mpt_trainer_t>());
        mpt_model_destroy(big);
    }
    SUBCASE("a model that fits, with optimizer state that does not") {
        // 64 -> 128 -> 8: about 38 KiB of fp32 parameters; Adam's two moments do not fit beside them,
        // plain SGD needs no state and does.
        mpt_model_t* model = nullptr;
        REQUIRE_OK(mpt_model_create(context, 64, &model));
        REQUIRE_OK(mpt_model_add_dense(model, 128, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_SOFTMAX));
        REQUIRE_OK(mpt_model_get_weights(model, 1, nullptr, 0, nullptr, 0));  // builds the model
        mpt_trainer_options_t* adam = new_trainer_options(MPT_OPTIMIZER_ADAM, 0.01f);
        mpt_trainer_t* trainer = sentinel_handle<mpt_trainer_t>();
        CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_create(model, adam, &trainer));
        CHECK(trainer == sentinel_handle<mpt_trainer_t>());
        mpt_trainer_options_destroy(adam);
        trainer = new_trainer(model, MPT_OPTIMIZER_SGD);
        TestRng rng(3);
        std::vector<float> x(64 * 64);
        std::vector<int32_t> y(64);
        for (size_t r = 0; r < 64; ++r) {
            y[r] = static_cast<int32_t>(r % 8);
            for (size_t f = 0; f < 64; ++f) x[r * 64 + f] = static_cast<float>((f % 8 == r % 8 ? 2.0 : 0.0) + 0.3 * rng.normal());
        }
        mpt_dataset_t* dataset = nullptr;
        REQUIRE_OK(mpt_dataset_create_f32(context, x.data(), 64, 64, y.data(), 8, 1, &dataset));
        REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 2, 16, 1));
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
    }

    // The small model trains on the same context, within the budget.
    mpt_model_t* small = new_model(context);
    mpt_trainer_t* trainer = new_trainer(small);
    mpt_dataset_t* dataset = new_dataset(context, make_blobs(96, 12));
    require_trains_to_accuracy(trainer, dataset, 0.95f);
    size_t used = 0, peak = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &used, &peak));
    CHECK(used > 0);
    CHECK(used <= kBudget);
    CHECK(peak <= kBudget);
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(small);
    mpt_context_destroy(context);
}

TEST_CASE("a context's used bytes fall when a trainer goes, its peak keeps the high-water mark") {
    mpt_context_t* context = new_context();
    mpt_model_t* model = new_model(context);
    mpt_dataset_t* dataset = new_dataset(context, make_blobs(96, 12));
    mpt_trainer_t* trainer = new_trainer(model);
    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 32, 1));
    size_t with_trainer = 0, peak_with_trainer = 0, planned = 0, allocated = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &with_trainer, &peak_with_trainer));
    REQUIRE_OK(mpt_trainer_get_memory(trainer, &planned, &allocated));
    CHECK(allocated > 0);
    CHECK(allocated <= with_trainer);
    CHECK(peak_with_trainer >= with_trainer);
    mpt_trainer_destroy(trainer);
    size_t without_trainer = 0, peak_after = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &without_trainer, &peak_after));
    CHECK(without_trainer + allocated <= with_trainer);  // its arenas, and its row orders besides
    CHECK(peak_after == peak_with_trainer);
    CHECK(peak_after > without_trainer);
    mpt_dataset_destroy(dataset);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

// The CPU GEMMs' scratch (packed operands per thread) counts against the budget as it grows: a
// budget that holds a batch's arenas but not all of its GEMM scratch fails that call with
// OUT_OF_MEMORY, leaves every weight as it was, and a smaller batch (less scratch) trains on; the
// scratch the failed call had grown is freed with it. A few features and a large batch make the
// weight-gradient GEMMs (depth: the batch) the ones that need the most: without the update scratch
// reserved before the first layer's update, budgets in the upper half of that range failed the
// step after layer 0 was updated (plain SGD writes the weights in its GEMM). Without AMX (bf16
// emulated in fp32 GEMMs through OpenBLAS) the GEMMs keep next to no scratch: skipped.
TEST_CASE("GEMM scratch past the memory budget fails the call with OUT_OF_MEMORY, weights untouched, and smaller batches still train") {
    const int64_t rows = 4096, features = 32;
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{512, features}, {512, 512}, {10, 512}};
    std::vector<float> x(static_cast<size_t>(rows * features));
    std::vector<int32_t> y(static_cast<size_t>(rows));
    TestRng rng(5);
    for (int64_t r = 0; r < rows; ++r) {
        y[static_cast<size_t>(r)] = static_cast<int32_t>(r % 10);
        for (int64_t f = 0; f < features; ++f)
            x[static_cast<size_t>(r * features + f)] = static_cast<float>((f % 10 == r % 10 ? 2.0 : 0.0) + rng.normal());
    }
    // Mixed-bf16 (AMX's bf16 packs its operands); one step over the whole set. `arenas`: what the
    // step's arenas take (known after the unlimited run).
    const auto run = [&](size_t budget, size_t arenas, size_t& peak, size_t& scratch) {
        mpt_context_t* context = new_context(7, budget);
        mpt_model_t* model = nullptr;
        REQUIRE_OK(mpt_model_create(context, features, &model));
        REQUIRE_OK(mpt_model_add_dense(model, 512, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, 512, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, 10, MPT_ACTIVATION_SOFTMAX));
        mpt_trainer_options_t* options = new_trainer_options(MPT_OPTIMIZER_SGD, 0.05f);
        REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_MIXED_BF16));
        mpt_trainer_t* trainer = nullptr;
        REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
        mpt_trainer_options_destroy(options);
        mpt_dataset_t* dataset = nullptr;
        REQUIRE_OK(mpt_dataset_create_f32(context, x.data(), rows, features, y.data(), 10, 1, &dataset));
        const std::vector<float> before = weights_of(model, shapes);
        float loss = -1.0f;
        const mpt_status status = mpt_trainer_step(trainer, dataset, 0, rows, &loss);
        const std::string message = mpt_last_error();
        if (budget != 0) {
            CAPTURE(budget);
            CHECK(status == MPT_STATUS_OUT_OF_MEMORY);
            CHECK(message.find("GEMM scratch") != std::string::npos);
            CHECK(same_bits(before, weights_of(model, shapes)));
            size_t after_failure = 0;
            REQUIRE_OK(mpt_context_get_memory(context, &after_failure, nullptr));
            CHECK(after_failure <= arenas + 64 * 1024);  // no scratch kept (a few KiB of bias rounding at most)
            // Smaller batches pack less: they train on, within the budget.
            REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 32, 1));
            float accuracy = -1.0f;
            REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 256, &loss, &accuracy));
            CHECK(accuracy > 0.5f);
        } else {
            REQUIRE(status == MPT_STATUS_OK);
        }
        size_t used = 0;
        REQUIRE_OK(mpt_context_get_memory(context, &used, &peak));
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        REQUIRE_OK(mpt_context_get_memory(context, &scratch, nullptr));  // all that is left
        mpt_context_destroy(context);
    };
    // AUTO resolves to bf16 where bf16 runs natively, on AMX, whose GEMM packs its operands.
    mpt_context_t* probe = new_context();
    mpt_precision resolved = MPT_PRECISION_FP32;
    REQUIRE_OK(mpt_context_resolve_precision(probe, MPT_PRECISION_AUTO, &resolved));
    mpt_context_destroy(probe);
    size_t peak = 0, scratch = 0;
    run(0, 0, peak, scratch);
    if (resolved != MPT_PRECISION_MIXED_BF16) {
        MESSAGE("not tested: no AMX here, so the GEMMs keep only " << scratch << " bytes of scratch");
        return;
    }
    REQUIRE(scratch >= (size_t{1} << 20));  // what is left once all but the context is gone
    for (size_t eighths = 1; eighths <= 7; eighths += 2) {
        size_t limited_peak = 0, limited_scratch = 0;
        run(peak - scratch + scratch * eighths / 8, peak - scratch, limited_peak, limited_scratch);
    }
}

// Kept last in the file: before the fix it crashed the process rather than failing a check.
TEST_CASE("a batch whose arena exceeds the memory budget fails with OUT_OF_MEMORY and smaller batches still train") {
    constexpr size_t kBudget = 64 * 1024;
    mpt_context_t* context = new_context(7, kBudget);
    mpt_model_t* model = new_model(context);
    mpt_trainer_t* trainer = new_trainer(model);
    const Blobs blobs = make_blobs(4096, 21);
    mpt_dataset_t* dataset = new_dataset(context, blobs);
    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 16, 1));
    const std::vector<float> before = weights_of(model, kSmallShapes);
    // 4096 rows x 8 padded features x 4 bytes x 2 batch slots alone are 256 KiB.
    CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_fit(trainer, dataset, 1, 4096, 0));
    CHECK(same_bits(before, weights_of(model, kSmallShapes)));
    CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_step(trainer, dataset, 0, 4096, nullptr));
    CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_evaluate(trainer, dataset, 4096, nullptr, nullptr));
    // Smaller batches work again (the trainer must re-plan, not keep a released arena).
    float loss = -1.0f, accuracy = -1.0f;
    REQUIRE_OK(mpt_trainer_step(trainer, dataset, 0, 16, &loss));
    CHECK(std::isfinite(loss));
    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 32, 1));
    REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 64, &loss, &accuracy));
    CHECK(accuracy >= 0.95f);
    size_t used = 0, peak = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &used, &peak));
    CHECK(peak <= kBudget);
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}
