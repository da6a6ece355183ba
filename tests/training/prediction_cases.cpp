// test_training: predictions and evaluation: a layer kept in fp32 under mixed-bf16, mixed-bf16's
// probabilities against fp32's, evaluate's partial last batch, and padded units that never leak.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "training/harness.h"
#include "training/reference_network.h"

using namespace mpt_test::training;

TEST_CASE("a layer kept in fp32 under mixed-bf16 trains, and its predictions differ from an all-bf16 model's only within bf16 rounding") {
    const Task train = make_blobs(512, 8, 3, 1.5, 0.6, 41), test = make_blobs(256, 8, 3, 1.5, 0.6, 42);
    const std::vector<LayerSpec> specs = {{32, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    mpt_context_t* context = new_context(5);
    mpt_model_t* mixed = new_model(context, 8, specs);
    REQUIRE_OK(mpt_model_set_layer_dtype(mixed, 0, MPT_DTYPE_FP32));
    mpt_model_t* all_bf16 = new_model(context, 8, specs);
    TrainerSetup setup;
    setup.precision = MPT_PRECISION_MIXED_BF16;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    mpt_trainer_t* mixed_trainer = new_trainer(mixed, setup);
    mpt_trainer_t* bf16_trainer = new_trainer(all_bf16, setup);
    mpt_dataset_t* dataset = labels_dataset(context, train);
    REQUIRE_OK(mpt_trainer_fit(mixed_trainer, dataset, 10, 32, 1));
    const std::vector<float> mixed_predictions = trainer_predict(mixed_trainer, test);
    CHECK(accuracy_of(mixed_predictions, test) >= 0.95);

    // The same weights in the all-bf16 model.
    const auto weights = read_weights(mixed, 8, specs);
    for (size_t i = 0; i < weights.size(); ++i)
        REQUIRE_OK(mpt_model_set_weights(all_bf16, static_cast<int64_t>(i), weights[i].first.data(),
                                         static_cast<int64_t>(weights[i].first.size()), weights[i].second.data(),
                                         static_cast<int64_t>(weights[i].second.size())));
    const std::vector<float> bf16_predictions = trainer_predict(bf16_trainer, test);
    const std::vector<float> exact = model_predict(mixed, test);
    const RefNet net = read_net(mixed, 8, specs);
    CHECK_FALSE(same_bits(mixed_predictions, bf16_predictions));
    // Probabilities from logits with a relative error of a few u: within 8u of each other.
    double largest_difference = 0, mixed_error = 0, bf16_error = 0;
    for (int64_t r = 0; r < test.rows; ++r) {
        const std::vector<double> reference = forward(net, test.x.data() + r * 8).outputs.back();
        for (int64_t c = 0; c < 3; ++c) {
            const size_t i = static_cast<size_t>(r * 3 + c);
            largest_difference = std::max(largest_difference, static_cast<double>(std::fabs(mixed_predictions[i] - bf16_predictions[i])));
            mixed_error += std::fabs(mixed_predictions[i] - reference[static_cast<size_t>(c)]);
            bf16_error += std::fabs(bf16_predictions[i] - reference[static_cast<size_t>(c)]);
            CHECK(exact[i] == doctest::Approx(reference[static_cast<size_t>(c)]).epsilon(1e-5).scale(0.1));
        }
    }
    CHECK(largest_difference > 0);
    CHECK(largest_difference <= 8 * kBf16Roundoff);
    // Keeping the first layer in fp32 removes its rounding: closer to the exact forward pass on average.
    CHECK(mixed_error < bf16_error);
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(bf16_trainer);
    mpt_trainer_destroy(mixed_trainer);
    mpt_model_destroy(all_bf16);
    mpt_model_destroy(mixed);
    mpt_context_destroy(context);
}

// ---- (7) predict and evaluate -------------------------------------------------------------------------

TEST_CASE("mixed-bf16 trainer predictions are probabilities summing to 1 and agree with fp32 model predictions within bf16 rounding") {
    const Task test = make_blobs(300, 8, 5, 1.0, 0.8, 51);  // 300 rows: more than one internal batch of 256
    const std::vector<LayerSpec> specs = {{24, MPT_ACTIVATION_TANH}, {5, MPT_ACTIVATION_SOFTMAX}};
    mpt_context_t* context = new_context(6);
    mpt_model_t* model = new_model(context, 8, specs);
    randomise_weights(model, 8, specs, 52, 0.4, 0.2);
    TrainerSetup setup;
    setup.precision = MPT_PRECISION_MIXED_BF16;
    mpt_trainer_t* trainer = new_trainer(model, setup);
    const std::vector<float> low = trainer_predict(trainer, test);
    const std::vector<float> fp32 = model_predict(model, test);
    const RefNet net = read_net(model, 8, specs);
    double largest_difference = 0;
    for (int64_t r = 0; r < test.rows; ++r) {
        CAPTURE(r);
        double sum = 0;
        const std::vector<double> reference = forward(net, test.x.data() + r * 8).outputs.back();
        for (int64_t c = 0; c < 5; ++c) {
            const size_t i = static_cast<size_t>(r * 5 + c);
            CHECK(low[i] >= 0.0f);
            CHECK(low[i] <= 1.0f);
            sum += low[i];
            largest_difference = std::max(largest_difference, static_cast<double>(std::fabs(low[i] - fp32[i])));
            CHECK(fp32[i] == doctest::Approx(reference[static_cast<size_t>(c)]).epsilon(1e-5).scale(0.1));
        }
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));  // the softmax head runs in fp32
    }
    CHECK(largest_difference > 0);  // the trainer really predicts in bf16
    CHECK(largest_difference <= 8 * kBf16Roundoff);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("evaluate counts every row when the batch size does not divide the dataset (known weights, hand-computed answer)") {
    // Two inputs, two classes, identity weights: the prediction is the larger input. Rows 0..6 are
    // labelled correctly, rows 7..9 (at the end, in the last partial batch) wrongly: accuracy 7/10.
    const float x[10][2] = {{2, 0}, {0, 2}, {3, 1}, {1, 3}, {0.5f, 0}, {0, 0.5f}, {4, -1}, {2, 1}, {1, 2}, {3, 0}};
    const int32_t labels[10] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    mpt_context_t* context = new_context(1);
    mpt_model_t* model = new_model(context, 2, {{2, MPT_ACTIVATION_SOFTMAX}});
    const float identity[4] = {1, 0, 0, 1}, zero[2] = {0, 0};
    REQUIRE_OK(mpt_model_set_weights(model, 0, identity, 4, zero, 2));
    double expected_loss = 0;
    for (int r = 0; r < 10; ++r) {
        const double z0 = x[r][0], z1 = x[r][1];
        const double lse = std::log(std::exp(z0) + std::exp(z1));
        expected_loss += lse - (labels[r] == 0 ? z0 : z1);
    }
    expected_loss /= 10;
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(context, &x[0][0], 10, 2, labels, 2, 1, &dataset));
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        TrainerSetup setup;
        setup.precision = precision;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        for (int64_t batch : {1, 3, 4, 7, 9, 10, 64, 0}) {
            const std::string precision_label = precision_name(precision);
        CAPTURE(precision_label);
            CAPTURE(batch);
            float loss = -1.0f, accuracy = -1.0f;
            REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, batch, &loss, &accuracy));
            CHECK(accuracy == doctest::Approx(0.7).epsilon(1e-6));
            // Inputs and identity weights are exact in bf16, so the loss is exact to fp32 rounding.
            CHECK(loss == doctest::Approx(expected_loss).epsilon(1e-5));
        }
        mpt_trainer_destroy(trainer);
    }
    mpt_dataset_destroy(dataset);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

// Sigmoid and softplus are not 0 at 0, so a padded unit's output would be nonzero if not masked.
TEST_CASE("padded units never leak: 13 sigmoid or softplus hidden units and 10 or 3 outputs match a double-precision forward pass, before and after training") {
    struct Case {
        int64_t outputs;
        mpt_activation head;
        mpt_loss loss;
        mpt_activation hidden;
    };
    const Case cases[] = {
        {10, MPT_ACTIVATION_SOFTMAX, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
        {3, MPT_ACTIVATION_SOFTMAX, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
        {3, MPT_ACTIVATION_LINEAR, MPT_LOSS_MEAN_SQUARED_ERROR, MPT_ACTIVATION_SIGMOID},
        {3, MPT_ACTIVATION_SIGMOID, MPT_LOSS_BINARY_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
        {3, MPT_ACTIVATION_SOFTPLUS, MPT_LOSS_MEAN_SQUARED_ERROR, MPT_ACTIVATION_SOFTPLUS},
    };
    for (const Case& c : cases) {
        for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
            CAPTURE(c.outputs);
            CAPTURE(c.head);
            CAPTURE(c.hidden);
            const std::string precision_label = precision_name(precision);
            CAPTURE(precision_label);
            const int64_t inputs = 11;  // padded to 16
            Task task = make_blobs(200, inputs, c.outputs, 1.0, 0.7, 61);
            if (c.loss != MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
                TestRng rng(62);
                for (int64_t i = 0; i < task.rows * c.outputs; ++i) task.targets.push_back(static_cast<float>(rng.uniform(0.1, 0.9)));
            }
            const std::vector<LayerSpec> specs = {{13, c.hidden}, {c.outputs, c.head}};
            mpt_context_t* context = new_context(8);
            mpt_model_t* model = new_model(context, inputs, specs);
            randomise_weights(model, inputs, specs, 63);
            auto check_against_reference = [&](const char* when) {
                const std::string moment = when;
                CAPTURE(moment);
                const RefNet net = read_net(model, inputs, specs);
                const std::vector<float> predicted = model_predict(model, task);
                double worst = 0;
                for (int64_t r = 0; r < task.rows; ++r) {
                    const std::vector<double> reference = forward(net, task.x.data() + r * inputs).outputs.back();
                    for (int64_t k = 0; k < c.outputs; ++k) {
                        const double expected = reference[static_cast<size_t>(k)];
                        const double error = std::fabs(predicted[static_cast<size_t>(r * c.outputs + k)] - expected) /
                                             std::max(std::fabs(expected), 0.1);
                        worst = std::max(worst, error);
                    }
                }
                CHECK(worst <= 1e-5);
            };
            check_against_reference("initial weights");
            TrainerSetup setup;
            setup.precision = precision;
            setup.loss = c.loss;
            setup.optimizer = MPT_OPTIMIZER_ADAM;
            setup.learning_rate = 0.01f;
            mpt_trainer_t* trainer = new_trainer(model, setup);
            mpt_dataset_t* dataset = dataset_for(context, task, c.loss);
            REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 3, 20, 1));
            check_against_reference("after training");
            if (precision == MPT_PRECISION_FP32) {
                // The trainer's own forward pass in fp32 matches the reference too.
                const RefNet net = read_net(model, inputs, specs);
                const std::vector<float> predicted = trainer_predict(trainer, task);
                for (int64_t r = 0; r < 20; ++r) {
                    const std::vector<double> reference = forward(net, task.x.data() + r * inputs).outputs.back();
                    for (int64_t k = 0; k < c.outputs; ++k)
                        CHECK(predicted[static_cast<size_t>(r * c.outputs + k)] ==
                              doctest::Approx(reference[static_cast<size_t>(k)]).epsilon(1e-5).scale(0.1));
                }
            }
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
    }
}
