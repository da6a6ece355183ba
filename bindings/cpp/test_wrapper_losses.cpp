// Losses through the C++ wrapper: label smoothing and class weights against a cross-entropy in double,
// and the regression losses (mean absolute error, Huber and its delta) fitting a line with outliers.

#include "wrapper_test_support.h"

#include <cmath>
#include <limits>
#include <optional>

namespace {

/** Mean over the rows of the cross-entropy of `probabilities` ([rows, kClasses]) towards the labels
 *  smoothed by s, in double as mptrain.h defines it: (1 - s) (-log p_label) + s mean_c(-log p_c). */
double smoothed_cross_entropy(const std::vector<float>& probabilities, const std::vector<int32_t>& labels, double s) {
    double sum = 0.0;
    for (size_t row = 0; row < labels.size(); ++row) {
        const float* p = &probabilities[row * kClasses];
        double towards_uniform = 0.0;
        for (int64_t c = 0; c < kClasses; ++c) towards_uniform -= std::log(static_cast<double>(p[c])) / kClasses;
        sum += (1.0 - s) * -std::log(static_cast<double>(p[labels[row]])) + s * towards_uniform;
    }
    return sum / static_cast<double>(labels.size());
}

/** Mean over the rows of the cross-entropy -sum_c t_c log p_c of `probabilities` ([rows, kClasses])
 *  towards `targets` (same shape), each row's multiplied by weights[c], c its first largest target, in
 *  double as mptrain.h defines class weights (an empty `weights`: every weight 1). */
double weighted_cross_entropy(const std::vector<float>& probabilities, const std::vector<float>& targets,
                              const std::vector<float>& weights) {
    const size_t rows = targets.size() / kClasses;
    double sum = 0.0;
    for (size_t row = 0; row < rows; ++row) {
        const float* p = &probabilities[row * kClasses];
        const float* t = &targets[row * kClasses];
        double loss = 0.0;
        int64_t first_largest = 0;
        for (int64_t c = 0; c < kClasses; ++c) {
            if (t[c] != 0.0f) loss -= static_cast<double>(t[c]) * std::log(static_cast<double>(p[c]));
            if (t[c] > t[first_largest]) first_largest = c;
        }
        sum += (weights.empty() ? 1.0 : static_cast<double>(weights[first_largest])) * loss;
    }
    return sum / static_cast<double>(rows);
}

std::vector<float> one_hot(const std::vector<int32_t>& labels) {
    std::vector<float> targets(labels.size() * kClasses, 0.0f);
    for (size_t row = 0; row < labels.size(); ++row) targets[row * kClasses + labels[row]] = 1.0f;
    return targets;
}

}  // namespace

TEST_CASE("label smoothing set through the wrapper makes evaluate's loss the smoothed cross-entropy of the predictions") {
    constexpr float kSmoothing = 0.1f;
    auto context = cpu_context();
    auto model = mlp(context);
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(90, 51, labels);
    auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    auto options = [](float smoothing) {
        return std::move(adam().precision(MPT_PRECISION_FP32).label_smoothing(smoothing));
    };
    mptrain::Trainer plain(model, options(0.0f));
    mptrain::Trainer smoothed(model, options(kSmoothing));

    const std::vector<float> probabilities = plain.predict(samples);
    const double towards_label = smoothed_cross_entropy(probabilities, labels, 0.0);
    const double expected = smoothed_cross_entropy(probabilities, labels, kSmoothing);
    REQUIRE(std::fabs(expected - towards_label) > 1e-3 * towards_label);  // the two can be told apart

    const mptrain::Evaluation without = plain.evaluate(data), with = smoothed.evaluate(data);
    CHECK(without.loss == doctest::Approx(towards_label).epsilon(1e-5));
    CHECK(with.loss == doctest::Approx(expected).epsilon(1e-5));
    CHECK(with.accuracy == without.accuracy);  // the metric reads the given labels

    // Training follows the smoothed targets too: a step's loss is the smoothed one of its batch, and
    // one step from equal weights ends elsewhere than without smoothing.
    auto step_from_start = [&](float smoothing) {
        auto own_context = cpu_context(3);
        auto own_model = mlp(own_context);
        auto own_data = mptrain::Dataset::from_f32(own_context, samples, kFeatures, labels, kClasses);
        mptrain::Trainer trainer(own_model, options(smoothing));
        const std::vector<int32_t> batch_labels(labels.begin(), labels.begin() + 30);
        const std::vector<float> batch(samples.begin(), samples.begin() + 30 * kFeatures);
        const double batch_expected = smoothed_cross_entropy(trainer.predict(batch), batch_labels, smoothing);
        CHECK(trainer.step(own_data, 0, 30) == doctest::Approx(batch_expected).epsilon(1e-5));
        return weight_bits(own_model);
    };
    const std::vector<uint32_t> plain_weights = step_from_start(0.0f);
    CHECK(step_from_start(kSmoothing) != plain_weights);
}

TEST_CASE("label smoothing outside [0, 1), with mean squared error or unlike a checkpoint's throws INVALID_ARGUMENT") {
    TempDir directory;
    auto context = cpu_context();
    auto model = mlp(context);
    auto data = blobs(context, 60, 52);

    // A refused value leaves the options as they were (0.2 here): the trainer's loss is that of 0.2.
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_FP32).label_smoothing(0.2f);
    for (float refused : {-0.01f, 1.0f, 1.5f, std::nanf("")})
        CHECK(status_of([&] { options.label_smoothing(refused); }) == MPT_STATUS_INVALID_ARGUMENT);
    mptrain::Trainer kept(model, options);
    mptrain::Trainer at_two_tenths(model, mptrain::TrainerOptions().precision(MPT_PRECISION_FP32).label_smoothing(0.2f));
    CHECK(kept.evaluate(data).loss == at_two_tenths.evaluate(data).loss);

    auto mean_squared_error = [] { return std::move(mptrain::TrainerOptions().loss(MPT_LOSS_MEAN_SQUARED_ERROR)); };
    mptrain::Trainer(model, mean_squared_error().label_smoothing(0.0f));  // 0 is no smoothing: accepted
    CHECK(status_of([&] { mptrain::Trainer(model, mean_squared_error().label_smoothing(0.1f)); }) ==
          MPT_STATUS_INVALID_ARGUMENT);

    const std::string checkpoint = directory.file("smoothed.safetensors");
    mptrain::Trainer smoothed(model, adam().label_smoothing(0.1f));
    smoothed.step(data, 0, 20);
    smoothed.save_checkpoint(checkpoint);
    mptrain::Trainer plain(model, adam());
    try {
        plain.load_checkpoint(checkpoint);
        FAIL("a trainer without label smoothing loaded a checkpoint written with 0.1");
    } catch (const mptrain::Error& error) {
        CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(error.message().find("label_smoothing 0.1 (this trainer: 0)") != std::string::npos);
    }
    mptrain::Trainer(model, adam().label_smoothing(0.1f)).load_checkpoint(checkpoint);  // a matching one loads it
}

TEST_CASE("class weights of 2 through the wrapper train one SGD step as twice the learning rate, bit for bit") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(30, 61, labels);
    // Every weight 2 doubles each row's loss and gradient, exactly in fp32; so does doubling the rate.
    auto one_step = [&](float learning_rate, const std::vector<float>& weights, float& loss) {
        const SgdStep step = one_sgd_step(samples, labels, learning_rate, weights, {});
        REQUIRE(step.after != step.before);  // the step moves the weights
        loss = step.loss;
        return step.after;
    };
    float unweighted_loss = 0.0f, doubled_rate_loss = 0.0f, weighted_loss = 0.0f;
    const std::vector<uint32_t> unweighted = one_step(0.05f, {}, unweighted_loss);
    const std::vector<uint32_t> doubled_rate = one_step(2.0f * 0.05f, {}, doubled_rate_loss);
    const std::vector<uint32_t> weighted = one_step(0.05f, {2.0f, 2.0f, 2.0f}, weighted_loss);
    CHECK(weighted == doubled_rate);
    CHECK(weighted != unweighted);
    CHECK(doubled_rate_loss == unweighted_loss);  // the loss is that of the weights before the step
    CHECK(weighted_loss == 2.0f * unweighted_loss);
}

TEST_CASE("class weights through the wrapper weight step's loss by each row's class and leave evaluate's unweighted") {
    const std::vector<float> weights = {0.5f, 2.0f, 1.25f};
    auto context = cpu_context(9);
    auto model = mlp(context);
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(30, 62, labels);
    auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    auto options = [] { return std::move(adam().precision(MPT_PRECISION_FP32)); };
    mptrain::Trainer weighted(model, options().class_weights(weights));
    mptrain::Trainer plain(model, options());

    const std::vector<float> probabilities = weighted.predict(samples);
    const double unweighted_loss = weighted_cross_entropy(probabilities, one_hot(labels), {});
    const double expected = weighted_cross_entropy(probabilities, one_hot(labels), weights);
    REQUIRE(std::fabs(expected - unweighted_loss) > 1e-3 * unweighted_loss);  // the two can be told apart
    const mptrain::Evaluation evaluation = weighted.evaluate(data);
    CHECK(evaluation.loss == doctest::Approx(unweighted_loss).epsilon(1e-5));  // evaluate: unweighted
    CHECK(evaluation.loss == plain.evaluate(data).loss);
    CHECK(weighted.step(data, 0, 30) == doctest::Approx(expected).epsilon(1e-5));

    // Float targets weigh a row by its first largest target: row 0 ties classes 1 and 2 (weight 2).
    auto targets_context = cpu_context(9);
    auto targets_model = mlp(targets_context);
    std::vector<float> targets = one_hot(labels);
    targets[0] = 0.0f, targets[1] = 0.5f, targets[2] = 0.5f;
    targets[3] = 0.2f, targets[4] = 0.3f, targets[5] = 0.5f;
    auto target_data = mptrain::Dataset::from_f32_targets(targets_context, samples, kFeatures, targets, kClasses);
    mptrain::Trainer categorical(targets_model, options().loss(MPT_LOSS_CATEGORICAL_CROSSENTROPY).class_weights(weights));
    const std::vector<float> target_probabilities = categorical.predict(samples);
    const double expected_for_targets = weighted_cross_entropy(target_probabilities, targets, weights);
    std::vector<float> tie_to_the_last = targets;  // the same loss with row 0 weighed as class 2 (1.25)
    tie_to_the_last[2] = 0.5000001f;
    REQUIRE(std::fabs(weighted_cross_entropy(target_probabilities, tie_to_the_last, weights) - expected_for_targets) >
            1e-4 * expected_for_targets);
    CHECK(categorical.step(target_data, 0, 30) == doctest::Approx(expected_for_targets).epsilon(1e-5));
}

TEST_CASE("class weights refused by the wrapper's setter or at construction throw, and a checkpoint must match them") {
    TempDir directory;
    auto context = cpu_context();
    auto model = mlp(context);
    auto data = blobs(context, 60, 63);

    // A refused array leaves the options as they were (two weights here, which the 3-output model refuses).
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_FP32).class_weights({1.0f, 2.0f});
    const float inf = std::numeric_limits<float>::infinity();
    for (const std::vector<float>& refused : std::vector<std::vector<float>>{
             {1.0f, -0.5f, 1.0f}, {1.0f, std::nanf(""), 1.0f}, {inf, 1.0f, 1.0f}, {0.0f, 0.0f, 0.0f}})
        CHECK(status_of([&] { options.class_weights(refused); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { mptrain::Trainer(model, options); }) == MPT_STATUS_SHAPE_MISMATCH);
    mptrain::Trainer(model, options.class_weights({}));  // an empty array removes them
    mptrain::Trainer(model, options.class_weights({0.0f, 1.0f, 0.0f}));  // some zeros are fine

    auto with_loss = [](mpt_loss loss) { return std::move(mptrain::TrainerOptions().loss(loss)); };
    for (mpt_loss loss : {MPT_LOSS_BINARY_CROSSENTROPY, MPT_LOSS_MEAN_SQUARED_ERROR}) {
        mptrain::Trainer(model, with_loss(loss));  // accepted without class weights
        CHECK(status_of([&] { mptrain::Trainer(model, with_loss(loss).class_weights({1.0f, 2.0f, 3.0f})); }) ==
              MPT_STATUS_INVALID_ARGUMENT);
    }

    const std::string checkpoint = directory.file("weighted.safetensors");
    mptrain::Trainer weighted(model, adam().class_weights({1.0f, 2.0f, 3.0f}));
    weighted.step(data, 0, 20);
    weighted.save_checkpoint(checkpoint);
    mptrain::Trainer plain(model, adam());
    try {
        plain.load_checkpoint(checkpoint);
        FAIL("a trainer without class weights loaded a checkpoint written with [1, 2, 3]");
    } catch (const mptrain::Error& error) {
        CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(error.message().find("class_weights [1, 2, 3] (this trainer: none)") != std::string::npos);
    }
    mptrain::Trainer(model, adam().class_weights({1.0f, 2.0f, 3.0f})).load_checkpoint(checkpoint);  // a matching one loads it
}

namespace {

constexpr int64_t kLineRows = 100;

/** kLineRows points x evenly in [-1, 1] on y = 2x + 1, every tenth target 20 above it. */
void line_with_outliers(std::vector<float>& xs, std::vector<float>& targets) {
    xs.clear();
    targets.clear();
    for (int64_t row = 0; row < kLineRows; ++row) {
        const float x = -1.0f + 2.0f * static_cast<float>(row) / static_cast<float>(kLineRows - 1);
        xs.push_back(x);
        targets.push_back(2.0f * x + 1.0f + (row % 10 == 3 ? 20.0f : 0.0f));
    }
}

/** One output's loss as mptrain.h defines it, in double: (y - t)^2, |y - t|, or Huber's
 *  (y - t)^2 / 2 up to |y - t| = delta, then delta (|y - t| - delta / 2). */
double regression_term(mpt_loss loss, double difference, double delta) {
    const double size = std::fabs(difference);
    if (loss == MPT_LOSS_MEAN_SQUARED_ERROR) return difference * difference;
    if (loss == MPT_LOSS_MEAN_ABSOLUTE_ERROR) return size;
    return size <= delta ? 0.5 * difference * difference : delta * (size - 0.5 * delta);
}

struct LineFit {
    float slope = 0.0f, intercept = 0.0f;
    float evaluated = 0.0f;  // evaluate()'s loss
    double expected = 0.0;   // the mean loss of the predictions, in double
};

/** One input, one linear output fitted by fp32 Adam (rate 0.05, seed 5) to line_with_outliers under
 *  `loss` (and Huber's delta, when given). */
LineFit fit_line(mpt_loss loss, std::optional<float> huber_delta = std::nullopt) {
    std::vector<float> xs, targets;
    line_with_outliers(xs, targets);
    auto context = cpu_context(5);
    mptrain::Model model(context, 1);
    model.add_dense(1, MPT_ACTIVATION_LINEAR);
    const auto data = mptrain::Dataset::from_f32_targets(context, xs, 1, targets, 1);
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_FP32).loss(loss).optimizer(MPT_OPTIMIZER_ADAM).learning_rate(0.05f);
    if (huber_delta) options.huber_delta(*huber_delta);
    mptrain::Trainer trainer(model, options);
    trainer.fit(data, 200, 20);
    LineFit fit;
    const auto [weights, bias] = model.weights(0);
    fit.slope = weights.at(0);
    fit.intercept = bias.at(0);
    fit.evaluated = trainer.evaluate(data).loss;
    const std::vector<float> predictions = model.predict(xs);
    for (int64_t row = 0; row < kLineRows; ++row)
        fit.expected += regression_term(loss, static_cast<double>(predictions[row]) - targets[row],
                                        huber_delta.value_or(1.0f));
    fit.expected /= static_cast<double>(kLineRows);
    return fit;
}

/** The weights after three fp32 SGD steps (rate 0.1, batches of 20, seed 5) of one linear output on
 *  line_with_outliers under `options`. */
std::vector<uint32_t> line_steps(mptrain::TrainerOptions& options) {
    std::vector<float> xs, targets;
    line_with_outliers(xs, targets);
    auto context = cpu_context(5);  // one seed: the same initial weights
    mptrain::Model model(context, 1);
    model.add_dense(1, MPT_ACTIVATION_LINEAR);
    const auto data = mptrain::Dataset::from_f32_targets(context, xs, 1, targets, 1);
    options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_SGD).learning_rate(0.1f);
    mptrain::Trainer trainer(model, options);
    const std::vector<uint32_t> initial = weight_bits(model);
    for (int64_t step = 0; step < 3; ++step) trainer.step(data, 20 * step, 20);
    CHECK(weight_bits(model) != initial);  // the steps moved the weights
    return weight_bits(model);
}

std::vector<uint32_t> huber_steps(std::optional<float> delta) {
    mptrain::TrainerOptions options;
    options.loss(MPT_LOSS_HUBER);
    if (delta) options.huber_delta(*delta);
    return line_steps(options);
}

}  // namespace

TEST_CASE("mean absolute error and Huber through the wrapper fit the line where mean squared error is pulled to the outliers") {
    const LineFit squared = fit_line(MPT_LOSS_MEAN_SQUARED_ERROR);
    const LineFit absolute = fit_line(MPT_LOSS_MEAN_ABSOLUTE_ERROR);
    const LineFit huber = fit_line(MPT_LOSS_HUBER);
    for (const LineFit* fit : {&squared, &absolute, &huber})  // the loss each value stands for
        CHECK(fit->evaluated == doctest::Approx(fit->expected).epsilon(1e-5));
    // The least-squares intercept is 1 + 20 / 10 (the outliers' mean pull); the median's is 1, and
    // Huber's (delta 1) 1 + 10 / 90 (each outlier pulls with delta against 90 points on the line).
    CHECK(squared.intercept > 2.5f);
    for (const LineFit* fit : {&absolute, &huber}) {
        CAPTURE(fit->intercept);
        CAPTURE(fit->slope);
        CHECK(std::fabs(fit->intercept - 1.0f) < 0.25f);
        CHECK(std::fabs(fit->slope - 2.0f) < 0.1f);
        CHECK(std::fabs(fit->intercept - 1.0f) < std::fabs(squared.intercept - 1.0f));
    }
}

TEST_CASE("Huber's delta set through the wrapper changes what Huber trains; it defaults to 1") {
    const std::vector<uint32_t> delta_1 = huber_steps(1.0f);
    CHECK(huber_steps(std::nullopt) == delta_1);  // the library's default
    CHECK(huber_steps(0.25f) != delta_1);
    // A delta above every residual leaves Huber quadratic: pulled to the outliers as mean squared error.
    CHECK(fit_line(MPT_LOSS_HUBER, 100.0f).intercept > 2.5f);
}

TEST_CASE("a Huber delta of 0, negative, NaN or infinite throws INVALID_ARGUMENT from the wrapper's setter, the options unchanged") {
    mptrain::TrainerOptions options;
    options.loss(MPT_LOSS_HUBER).huber_delta(0.25f);
    const float inf = std::numeric_limits<float>::infinity();
    for (float refused : {0.0f, -0.0f, -1.0f, std::nanf(""), inf, -inf}) {
        CAPTURE(refused);
        try {
            options.huber_delta(refused);
            FAIL("huber_delta accepted " << refused);
        } catch (const mptrain::Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(error.message().find("Huber delta") != std::string::npos);
        }
    }
    CHECK(line_steps(options) == huber_steps(0.25f));  // still 0.25
    options.huber_delta(1e-3f);  // any finite delta above 0: accepted
}
