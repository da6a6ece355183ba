// The regression losses through the C API (MPT_LOSS_MEAN_SQUARED_ERROR, MPT_LOSS_MEAN_ABSOLUTE_ERROR,
// MPT_LOSS_HUBER with mpt_trainer_options_set_huber_delta): what they refuse, that the robust ones
// fit a line through outliers that pull the squared error away, that evaluate reports Keras's loss
// and the one-output accuracy, and that Huber's delta is an option checkpoints record. Their
// gradients against finite differences are in test_gradients.cpp, the CUDA head in cuda_ops/loss_head_cases.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

namespace {

constexpr int64_t kRows = 200;

// y = 2x + 1 on x in [-1, 1], every fifth row's target 20 higher (outliers).
struct Line {
    std::vector<float> x, t;
};

Line line_with_outliers() {
    Line line;
    mpt_test::TestRng rng(21);
    for (int64_t r = 0; r < kRows; ++r) {
        const float x = static_cast<float>(rng.uniform(-1.0, 1.0));
        line.x.push_back(x);
        line.t.push_back(2.0f * x + 1.0f + (r % 5 == 0 ? 20.0f : 0.0f));
    }
    return line;
}

// A context, a 1 -> 1 linear model and an Adam trainer of `loss` (Huber's `delta`), destroyed together.
struct Regression : mpt_test::Handles {
    Regression(mpt_loss loss, float delta, const Line& line) {
        context = mpt_test::create_context(MPT_BACKEND_CPU, 3);
        REQUIRE_OK(mpt_model_create(context, 1, &model));
        REQUIRE_OK(mpt_model_add_dense(model, 1, MPT_ACTIVATION_LINEAR));
        mpt_trainer_options_t* options = nullptr;
        REQUIRE_OK(mpt_trainer_options_create(&options));
        REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
        REQUIRE_OK(mpt_trainer_options_set_loss(options, loss));
        REQUIRE_OK(mpt_trainer_options_set_huber_delta(options, delta));
        REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_ADAM));
        REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, 0.05f));
        REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
        mpt_trainer_options_destroy(options);
        REQUIRE_OK(mpt_dataset_create_f32_targets(context, line.x.data(), kRows, 1, line.t.data(), 1, 1, &dataset));
    }

    // (slope, intercept)
    std::pair<float, float> line() const {
        float w = 0.0f, b = 0.0f;
        REQUIRE_OK(mpt_model_get_weights(model, 0, &w, 1, &b, 1));
        return {w, b};
    }
};

// The mean over rows of Keras's term for one output (y the prediction, t the target).
double keras_loss(mpt_loss loss, float delta, const std::vector<float>& y, const std::vector<float>& t) {
    double total = 0.0;
    for (size_t r = 0; r < y.size(); ++r) {
        const double d = static_cast<double>(y[r]) - t[r], size = std::abs(d);
        if (loss == MPT_LOSS_MEAN_SQUARED_ERROR) total += d * d;
        else if (loss == MPT_LOSS_MEAN_ABSOLUTE_ERROR) total += size;
        else total += size <= delta ? 0.5 * d * d : delta * size - 0.5 * static_cast<double>(delta) * delta;
    }
    return total / static_cast<double>(y.size());
}

}  // namespace

TEST_CASE("the Huber delta must be finite and above 0, and the regression losses take no smoothing or class weights") {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (float delta : {0.0f, -0.0f, -1.0f, nan, inf}) {
        CAPTURE(delta);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_huber_delta(options, delta));
        CHECK(std::string(mpt_last_error()).find("Huber delta") != std::string::npos);
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_huber_delta(nullptr, 1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss(options, static_cast<mpt_loss>(MPT_LOSS_HUBER + 1)));
    REQUIRE_OK(mpt_trainer_options_set_huber_delta(options, 1e-3f));
    mpt_trainer_options_destroy(options);

    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 3);
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, 2, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 3, MPT_ACTIVATION_LINEAR));
    for (mpt_loss loss : {MPT_LOSS_MEAN_ABSOLUTE_ERROR, MPT_LOSS_HUBER}) {
        CAPTURE(loss);
        const auto refused = [&](auto configure, const char* phrase) {
            mpt_trainer_options_t* refused_options = nullptr;
            REQUIRE_OK(mpt_trainer_options_create(&refused_options));
            REQUIRE_OK(mpt_trainer_options_set_loss(refused_options, loss));
            configure(refused_options);
            mpt_trainer_t* trainer = nullptr;
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_create(model, refused_options, &trainer));
            CHECK_MESSAGE(std::string(mpt_last_error()).find(phrase) != std::string::npos, mpt_last_error());
            CHECK(trainer == nullptr);
            mpt_trainer_options_destroy(refused_options);
        };
        refused([](mpt_trainer_options_t* o) { REQUIRE_OK(mpt_trainer_options_set_label_smoothing(o, 0.1f)); },
                "has no labels to smooth");
        refused([](mpt_trainer_options_t* o) {
            const float weights[3] = {1.0f, 2.0f, 1.0f};
            REQUIRE_OK(mpt_trainer_options_set_class_weights(o, weights, 3));
        }, "class weights apply to the categorical");
    }
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("mean absolute error and Huber fit a line through outliers that pull the squared error away") {
    const Line line = line_with_outliers();
    Regression squared(MPT_LOSS_MEAN_SQUARED_ERROR, 1.0f, line), absolute(MPT_LOSS_MEAN_ABSOLUTE_ERROR, 1.0f, line),
        huber(MPT_LOSS_HUBER, 1.0f, line);
    for (const Regression* run : {&squared, &absolute, &huber})
        REQUIRE_OK(mpt_trainer_fit(run->trainer, run->dataset, 150, 20, 1));
    const auto [squared_slope, squared_intercept] = squared.line();
    const auto [absolute_slope, absolute_intercept] = absolute.line();
    const auto [huber_slope, huber_intercept] = huber.line();
    MESSAGE("intercepts (the line's is 1, the mean target's 5): squared " << squared_intercept << ", absolute "
                                                                          << absolute_intercept << ", Huber " << huber_intercept);
    // The squared error's minimum is the least-squares line, its intercept raised by a fifth of 20.
    CHECK(squared_intercept == doctest::Approx(5.0).epsilon(0.05));
    // The absolute error's is the median line, through the 80% of rows on the line; Huber's bounds
    // each outlier's pull at delta, which raises its intercept a little (below 0.5 here).
    CHECK(std::abs(absolute_intercept - 1.0f) < 0.1f);
    CHECK(std::abs(absolute_slope - 2.0f) < 0.2f);
    CHECK(huber_intercept > 1.0f);
    CHECK(huber_intercept < 1.5f);
    CHECK(std::abs(huber_slope - 2.0f) < 0.3f);

    // A smaller delta bounds the outliers' pull further: closer to the line.
    Regression tight(MPT_LOSS_HUBER, 0.1f, line);
    REQUIRE_OK(mpt_trainer_fit(tight.trainer, tight.dataset, 150, 20, 1));
    CHECK(tight.line().second < huber_intercept);
}

TEST_CASE("evaluate reports Keras's regression loss and, for one output, the share on the targets' side of 0.5") {
    const Line line = line_with_outliers();
    for (mpt_loss loss : {MPT_LOSS_MEAN_SQUARED_ERROR, MPT_LOSS_MEAN_ABSOLUTE_ERROR, MPT_LOSS_HUBER}) {
        CAPTURE(loss);
        const float delta = 0.7f;
        Regression run(loss, delta, line);
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 5, 20, 1));
        std::vector<float> predicted(kRows);
        REQUIRE_OK(mpt_trainer_predict(run.trainer, line.x.data(), kRows, predicted.data(), kRows));
        float evaluated = 0.0f, accuracy = 0.0f;
        REQUIRE_OK(mpt_trainer_evaluate(run.trainer, run.dataset, 0, &evaluated, &accuracy));
        CHECK(evaluated == doctest::Approx(keras_loss(loss, delta, predicted, line.t)).epsilon(1e-5));
        int64_t same_side = 0;
        for (int64_t r = 0; r < kRows; ++r) same_side += (predicted[r] > 0.5f) == (line.t[r] > 0.5f);
        CHECK(accuracy == doctest::Approx(static_cast<double>(same_side) / kRows).epsilon(1e-6));
    }
}

TEST_CASE("Huber's delta is an option a checkpoint records, and files of other losses hold none") {
    const mpt_test::TempDir directory("mptrain-regression-losses");
    const Line line = line_with_outliers();
    Regression huber(MPT_LOSS_HUBER, 0.5f, line);
    REQUIRE_OK(mpt_trainer_fit(huber.trainer, huber.dataset, 1, 20, 1));
    const std::string path = directory.file("huber.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(huber.trainer, path.c_str()));
    CHECK(mpt_test::file_contains(path, "huber_delta"));

    Regression same(MPT_LOSS_HUBER, 0.5f, line);
    REQUIRE_OK(mpt_trainer_load_checkpoint(same.trainer, path.c_str()));
    CHECK(same.line() == huber.line());
    Regression other_delta(MPT_LOSS_HUBER, 1.0f, line);
    const auto before = other_delta.line();
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(other_delta.trainer, path.c_str()));
    CHECK(std::string(mpt_last_error()).find("huber_delta") != std::string::npos);
    CHECK(other_delta.line() == before);
    Regression absolute(MPT_LOSS_MEAN_ABSOLUTE_ERROR, 0.5f, line);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(absolute.trainer, path.c_str()));

    // A squared error's checkpoint records no delta (whatever its options say: only Huber reads it).
    Regression squared(MPT_LOSS_MEAN_SQUARED_ERROR, 0.5f, line);
    const std::string squared_path = directory.file("squared.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(squared.trainer, squared_path.c_str()));
    CHECK_FALSE(mpt_test::file_contains(squared_path, "huber_delta"));
    Regression squared_other(MPT_LOSS_MEAN_SQUARED_ERROR, 2.0f, line);
    REQUIRE_OK(mpt_trainer_load_checkpoint(squared_other.trainer, squared_path.c_str()));
}
