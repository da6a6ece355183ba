// test_capi_errors: values no entry point takes (enum values that are no enumerator, options out of
// their range, counts, rows and batches out of range) and shapes that do not agree (a dataset's
// width, the loss and its targets, predictions and weights of the wrong counts, NaN or Inf given).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "capi_errors/harness.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

using namespace mpt_test::capi_errors;

TEST_CASE("enum values that are no enumerator are rejected with INVALID_ARGUMENT and change nothing") {
    Session session;
    mpt_context_options_t* context_options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&context_options));
    mpt_trainer_options_t* options = new_trainer_options();
    for (int bad : {99, -1, 4, 5}) {
        CAPTURE(bad);
        if (bad != 4 && bad != 5) {
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_context_options_set_backend(context_options, bad_enum<mpt_backend>(bad)));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_context_options_set_log_level(context_options, bad_enum<mpt_log_level>(bad)));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_trainer_options_set_precision(options, bad_enum<mpt_precision>(bad)));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss(options, bad_enum<mpt_loss>(bad)));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_trainer_options_set_loss_scaling(options, bad_enum<mpt_loss_scaling>(bad), 8.0f));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_model_set_layer_dtype(session.model, 0, bad_enum<mpt_dtype>(bad)));
        }
        if (bad != 4)  // MPT_OPTIMIZER_LION
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_trainer_options_set_optimizer(options, bad_enum<mpt_optimizer>(bad)));
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
    for (float lr : {0.0f, -0.1f, nan, inf})
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_learning_rate(options, lr));
    for (float m : {-0.1f, 1.0f, 1.5f, nan})
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_momentum(options, m, 0));
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
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(options, 1.0f, 0.5f, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(options, nan, 0.5f, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 1.0f, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.0f, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, nan, 10, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 0, 1.0f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 10, 0.5f, 1024.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 10, 64.0f, 32.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 10, nan, 32.0f));

    // Schedules: warm-up >= 0; a constant one has no decay; the others decay over >= 1 step to a
    // factor in [0, 1] (linear, cosine) or by one in (0, 1] (step).
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_CONSTANT, -1, 0, 1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_CONSTANT, 0, 10, 1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_CONSTANT, 0, 0, 0.5f));
    for (mpt_lr_schedule kind : {MPT_LR_SCHEDULE_LINEAR, MPT_LR_SCHEDULE_COSINE, MPT_LR_SCHEDULE_STEP}) {
        CAPTURE(static_cast<int>(kind));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, kind, -5, 10, 0.5f));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, kind, 0, 0, 0.5f));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, kind, 0, -10, 0.5f));
        for (float factor : {-0.1f, 1.5f, nan, inf})
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(options, kind, 0, 10, factor));
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_STEP, 0, 10, 0.0f));

    // Models and datasets: non-positive sizes.
    mpt_model_t* model = sentinel_handle<mpt_model_t>();
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(session.context, 0, &model));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(session.context, -3, &model));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(session.context, (int64_t{1} << 24) + 1, &model));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_model_create(session.context, INT64_MAX, &model));  // found by fuzz_capi
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
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_evaluate(session.trainer, session.dataset, -1, &loss, &accuracy));
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
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_model_predict(session.model, session.blobs.x.data(), rows, out, 2 * kClasses));
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
mpt_dataset_t* targets_dataset(const Session& session, const std::vector<float>& targets, int64_t width,
                               int check_finite) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32_targets(session.context, session.blobs.x.data(), 96, kFeatures, targets.data(),
                                              width, check_finite, &dataset));
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
        REQUIRE_OK(
            mpt_model_get_weights(session.model, last, weights_now.data(), units * inputs, bias_now.data(), units));
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
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH,
                mpt_model_get_weights(session.model, 0, w.data(), 8 * kFeatures - 1, b.data(), 8));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH,
                mpt_model_get_weights(session.model, 0, w.data(), 8 * kFeatures + 1, b.data(), 8));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH,
                mpt_model_get_weights(session.model, 0, w.data(), 8 * kFeatures, b.data(), 7));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_model_get_weights(session.model, 0, nullptr, 0, b.data(), 9));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH,
                mpt_model_get_weights(session.model, 1, w.data(), 8 * kFeatures, nullptr, 0));
    for (float value : w) CHECK(value == -7.0f);
    for (float value : b) CHECK(value == -7.0f);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_model_get_weights(session.model, 2, w.data(), 8 * kFeatures, b.data(), 8));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_model_get_weights(session.model, -1, w.data(), 8 * kFeatures, b.data(), 8));
    for (float value : w) CHECK(value == -7.0f);

    // A refused set_weights changes nothing, not even the part whose count was right.
    const std::vector<float> before = weights_of(session.model, kSmallShapes);
    std::vector<float> zeros(8 * kFeatures + 1, 0.0f);
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH,
                mpt_model_set_weights(session.model, 0, zeros.data(), 8 * kFeatures, zeros.data(), 7));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH,
                mpt_model_set_weights(session.model, 0, zeros.data(), 8 * kFeatures + 1, zeros.data(), 8));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_model_set_weights(session.model, 2, zeros.data(), 8 * kFeatures, zeros.data(), 8));
    CHECK(same_bits(before, weights_of(session.model, kSmallShapes)));
    require_usable(session);
}
