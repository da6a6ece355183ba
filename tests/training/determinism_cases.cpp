// test_training: initial weights from the context's seed, bit-identical runs, the rows each epoch
// visits with and without shuffling, and uint8 data sets against the floats of their bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "training/harness.h"

using namespace mpt_test::training;

TEST_CASE("initial weights are Glorot-uniform drawn from the context's seed, with zero biases") {
    const std::vector<LayerSpec> specs = {{128, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    auto initial = [&](uint64_t seed) {
        mpt_context_t* context = new_context(seed);
        mpt_model_t* model = new_model(context, 64, specs);
        auto weights = read_weights(model, 64, specs);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        return weights;
    };
    const auto first = initial(42), again = initial(42), other = initial(43);
    int64_t fan_in = 64;
    for (size_t layer = 0; layer < specs.size(); ++layer) {
        CAPTURE(layer);
        const std::vector<float>& w = first[layer].first;
        const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + specs[layer].units));
        double sum = 0.0, sum_squares = 0.0, largest = 0.0;
        for (float value : w) {
            sum += value;
            sum_squares += static_cast<double>(value) * value;
            largest = std::max(largest, std::fabs(static_cast<double>(value)));
        }
        const double count = static_cast<double>(w.size());
        CHECK(largest <= limit * (1.0 + 1e-6));  // the library computes the limit in float
        CHECK(largest > 0.95 * limit);  // spread over the whole interval, not a narrower one
        CHECK(std::fabs(sum / count) < 4.0 * limit / std::sqrt(3.0 * count));  // mean 0 within 4 sigma
        CHECK(sum_squares / count == doctest::Approx(limit * limit / 3.0).epsilon(0.1));  // U(-l, l) variance
        for (float bias : first[layer].second) CHECK(bias == 0.0f);
        CHECK(same_bits(w, again[layer].first));
        CHECK_FALSE(same_bits(w, other[layer].first));
        fan_in = specs[layer].units;
    }
}

TEST_CASE("two runs with the same seed and thread count give bit-identical weights; another seed does not") {
    // 64 -> 256 -> 64 -> 10 at batch 128: the first GEMM is large enough to be split across threads.
    const Task task = make_blobs(1024, 64, 10, 0.5, 1.0, 31);
    const std::vector<LayerSpec> specs = {{256, MPT_ACTIVATION_RELU}, {64, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
        const std::string precision_label = precision_name(precision);
        CAPTURE(precision_label);
        std::vector<std::vector<float>> runs;
        for (uint64_t seed : {42u, 42u, 43u}) {
            mpt_context_t* context = new_context(seed);
            mpt_model_t* model = new_model(context, 64, specs);
            TrainerSetup setup;
            setup.precision = precision;
            setup.optimizer = MPT_OPTIMIZER_ADAM;
            setup.learning_rate = 0.001f;
            mpt_trainer_t* trainer = new_trainer(model, setup);
            mpt_dataset_t* dataset = labels_dataset(context, task);
            REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 2, 128, 1));  // shuffled from the seed
            runs.push_back(flat_weights(model, 64, specs));
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
        CHECK(same_bits(runs[0], runs[1]));
        CHECK_FALSE(same_bits(runs[0], runs[2]));
    }
}

namespace {

int record_epoch_loss(int64_t, float loss, float, void* user_data) {
    static_cast<std::vector<float>*>(user_data)->push_back(loss);
    return 0;
}

}  // namespace

TEST_CASE("fit without shuffling steps through consecutive batches; with shuffling each epoch visits a permutation of the rows") {
    const Task task = make_blobs(256, 8, 3, 1.0, 1.0, 19);
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    auto train = [&](float learning_rate, const std::function<void(mpt_trainer_t*, mpt_dataset_t*)>& run,
                     std::vector<float>* epoch_losses = nullptr, float* evaluated_loss = nullptr) {
        mpt_context_t* context = new_context(9);
        mpt_model_t* model = new_model(context, 8, specs);
        TrainerSetup setup;
        setup.learning_rate = learning_rate;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* dataset = labels_dataset(context, task);
        if (epoch_losses) REQUIRE_OK(mpt_trainer_set_callbacks(trainer, nullptr, record_epoch_loss, epoch_losses));
        run(trainer, dataset);
        float accuracy = 0.0f;
        if (evaluated_loss) REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 0, evaluated_loss, &accuracy));
        std::vector<float> weights = flat_weights(model, 8, specs);
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        return weights;
    };
    const auto in_order = train(0.1f, [](mpt_trainer_t* t, mpt_dataset_t* d) { REQUIRE_OK(mpt_trainer_fit(t, d, 1, 32, 0)); });
    const auto stepped = train(0.1f, [](mpt_trainer_t* t, mpt_dataset_t* d) {
        for (int64_t first = 0; first < 256; first += 32) REQUIRE_OK(mpt_trainer_step(t, d, first, 32, nullptr));
    });
    const auto shuffled = train(0.1f, [](mpt_trainer_t* t, mpt_dataset_t* d) { REQUIRE_OK(mpt_trainer_fit(t, d, 1, 32, 1)); });
    CHECK(same_bits(in_order, stepped));
    CHECK_FALSE(same_bits(in_order, shuffled));  // the shuffled order reaches the batches

    // With a learning rate too small to move the weights, an epoch's mean loss is the data set's
    // mean loss exactly when the epoch visits every row once: a repeated or missed row shifts it.
    std::vector<float> epoch_losses;
    float evaluated = 0.0f;
    train(1e-30f, [](mpt_trainer_t* t, mpt_dataset_t* d) { REQUIRE_OK(mpt_trainer_fit(t, d, 3, 32, 1)); }, &epoch_losses,
          &evaluated);
    REQUIRE(epoch_losses.size() == 3);
    for (float loss : epoch_losses) CHECK(loss == doctest::Approx(evaluated).epsilon(1e-5));
}

TEST_CASE("a uint8 data set trains and evaluates bit for bit like the float data set of its bytes * scale + offset") {
    // The normalisation happens where the batch is gathered: a scale or offset dropped or applied
    // twice there would train on other inputs.
    constexpr int64_t kRows = 512, kFeatures = 16, kClasses = 4;
    const float scale = 1.0f / 255.0f, offset = -0.5f;
    TestRng rng(77);
    std::vector<uint8_t> bytes(static_cast<size_t>(kRows * kFeatures));
    std::vector<int32_t> labels(static_cast<size_t>(kRows));
    for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(rng.uniform() * 256.0);
    for (int64_t r = 0; r < kRows; ++r) {  // a learnable rule: the class of the brightest of four features
        const uint8_t* row = &bytes[static_cast<size_t>(r * kFeatures)];
        labels[static_cast<size_t>(r)] = static_cast<int32_t>(std::max_element(row, row + kClasses) - row);
    }
    std::vector<float> normalised(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) normalised[i] = static_cast<float>(bytes[i]) * scale + offset;

    const std::vector<LayerSpec> specs = {{32, MPT_ACTIVATION_RELU}, {kClasses, MPT_ACTIVATION_SOFTMAX}};
    std::vector<std::vector<float>> weights;
    std::vector<std::pair<float, float>> evaluations;
    for (bool from_bytes : {true, false}) {
        CAPTURE(from_bytes);
        mpt_context_t* context = new_context(5);
        mpt_model_t* model = new_model(context, kFeatures, specs);
        mpt_trainer_t* trainer = new_trainer(model, TrainerSetup{});
        mpt_dataset_t* dataset = nullptr;
        if (from_bytes)
            REQUIRE_OK(mpt_dataset_create_u8(context, bytes.data(), kRows, kFeatures, labels.data(), kClasses, scale,
                                             offset, &dataset));
        else
            REQUIRE_OK(mpt_dataset_create_f32(context, normalised.data(), kRows, kFeatures, labels.data(), kClasses, 1,
                                              &dataset));
        REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 20, 32, 1));
        float loss = 0.0f, accuracy = 0.0f;
        REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 64, &loss, &accuracy));
        weights.push_back(flat_weights(model, kFeatures, specs));
        evaluations.emplace_back(loss, accuracy);
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    CHECK(same_bits(weights[0], weights[1]));
    CHECK(evaluations[0].first == evaluations[1].first);
    CHECK(evaluations[0].second == evaluations[1].second);
    CHECK(evaluations[0].second > 0.9f);  // it trained: chance is 0.25
}
