// What tests/test_capi_errors.cpp and its cases in tests/capi_errors/ share: a CPU context, the 4-8-3
// model, an fp32 trainer and a blob dataset built through the C API, a session of the four, the proof
// that a session is still usable after a refused call, and values no well-behaved caller passes.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace mpt_test::capi_errors {

// An enum value that is no enumerator (cast through int, as a foreign caller would pass it).
template <typename Enum>
Enum bad_enum(int value) {
    return static_cast<Enum>(value);
}

using mpt_test::Blobs;
using mpt_test::make_blobs;
using mpt_test::TestRng;
inline constexpr int64_t kFeatures = mpt_test::kBlobFeatures;
inline constexpr int32_t kClasses = mpt_test::kBlobClasses;

inline mpt_context_t* new_context(uint64_t seed = 7, size_t budget = 0) {
    return mpt_test::create_context(MPT_BACKEND_CPU, seed, budget);
}

// 4 -> 8 relu -> 3 softmax.
inline mpt_model_t* new_model(mpt_context_t* context) {
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, kFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX));
    return model;
}

inline mpt_trainer_options_t* new_trainer_options(mpt_optimizer optimizer = MPT_OPTIMIZER_SGD,
                                                  float learning_rate = 0.1f) {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(options, optimizer));
    REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, learning_rate));
    return options;
}

inline mpt_trainer_t* new_trainer(mpt_model_t* model, mpt_optimizer optimizer = MPT_OPTIMIZER_SGD) {
    mpt_trainer_options_t* options = new_trainer_options(optimizer);
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_options_destroy(options);
    return trainer;
}

inline mpt_dataset_t* new_dataset(mpt_context_t* context, const Blobs& blobs) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(context, blobs.x.data(), static_cast<int64_t>(blobs.y.size()), kFeatures,
                                      blobs.y.data(), kClasses, 1, &dataset));
    return dataset;
}

// All layers' weights and biases, concatenated; `shapes` lists each layer's {units, inputs}.
inline std::vector<float> weights_of(mpt_model_t* model, const std::vector<std::pair<int64_t, int64_t>>& shapes) {
    std::vector<float> all;
    for (size_t layer = 0; layer < shapes.size(); ++layer) {
        const int64_t units = shapes[layer].first, inputs = shapes[layer].second;
        std::vector<float> w(static_cast<size_t>(units * inputs)), b(static_cast<size_t>(units));
        REQUIRE_OK(
            mpt_model_get_weights(model, static_cast<int64_t>(layer), w.data(), units * inputs, b.data(), units));
        all.insert(all.end(), w.begin(), w.end());
        all.insert(all.end(), b.begin(), b.end());
    }
    return all;
}

inline const std::vector<std::pair<int64_t, int64_t>> kSmallShapes = {{8, kFeatures}, {kClasses, 8}};

using mpt_test::same_bits;

// A context, a 4-8-3 model, a blob dataset and an fp32 SGD trainer; destroyed in reverse.
struct Session : mpt_test::Handles {
    Blobs blobs;

    explicit Session(uint64_t seed = 7) : blobs(make_blobs(96, 1234)) {
        context = new_context(seed);
        model = new_model(context);
        dataset = new_dataset(context, blobs);
        trainer = new_trainer(model);
    }
};

// Proves the session still works: a step, a short fit, evaluate and both predicts succeed with
// finite results, and the weights move.
inline void require_usable(Session& session) {
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
inline void require_trains_to_accuracy(mpt_trainer_t* trainer, mpt_dataset_t* dataset, float minimum) {
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

}  // namespace mpt_test::capi_errors
