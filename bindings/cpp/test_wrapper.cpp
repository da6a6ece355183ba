// The header-only C++ wrapper (include/mptrain/mptrain.hpp) over libmptrain.so: model files,
// training checkpoints, learning-rate schedules, label smoothing, class weights, gradient clipping,
// weight averaging, RMSprop, Lion, dropout, the regression losses (Huber's delta), dataset slices, subsets,
// row weights, standardization (of datasets and of a model's inputs) and trainer options read back
// through it, errors arriving as mptrain::Error with the C status.
#include <doctest/doctest.h>

#include <mptrain/mptrain.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace {

constexpr int64_t kFeatures = 4, kClasses = 3;

struct TempDir {
    fs::path path;
    TempDir() {
        char pattern[] = "/tmp/mptrain-cpp-XXXXXX";
        path = mkdtemp(pattern);
    }
    ~TempDir() { fs::remove_all(path); }
    std::string file(const std::string& name) const { return (path / name).string(); }
};

mptrain::Context cpu_context(uint64_t seed = 7) {
    return mptrain::Context(mptrain::ContextOptions().backend(MPT_BACKEND_CPU).threads(1).seed(seed));
}

mptrain::Model mlp(const mptrain::Context& context) {
    mptrain::Model model(context, kFeatures);
    model.add_dense(16, MPT_ACTIVATION_RELU).add_dense(8, MPT_ACTIVATION_TANH).add_dense(kClasses, MPT_ACTIVATION_SOFTMAX);
    return model;
}

mptrain::TrainerOptions adam() { return std::move(mptrain::TrainerOptions().optimizer(MPT_OPTIMIZER_ADAM).learning_rate(0.01f)); }

/** `rows` samples around one of three centres, labels 0..2. */
std::vector<float> blob_samples(int64_t rows, unsigned seed, std::vector<int32_t>& labels) {
    std::mt19937 generator(seed);
    std::normal_distribution<float> noise(0.0f, 0.6f);
    std::vector<float> samples;
    labels.clear();
    for (int64_t row = 0; row < rows; ++row) {
        const int32_t label = static_cast<int32_t>(row % kClasses);
        for (int64_t feature = 0; feature < kFeatures; ++feature)
            samples.push_back((feature % kClasses == label ? 2.5f : 0.0f) + noise(generator));
        labels.push_back(label);
    }
    return samples;
}

mptrain::Dataset blobs(const mptrain::Context& context, int64_t rows, unsigned seed) {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(rows, seed, labels);
    return mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
}

/** Every layer's weights and biases as bit patterns: equal only when bit-identical. */
std::vector<uint32_t> weight_bits(mptrain::Model& model) {
    std::vector<uint32_t> bits;
    for (int64_t layer = 0; layer < model.layer_count(); ++layer) {
        auto [weights, bias] = model.weights(layer);
        for (const auto* values : {&weights, &bias})
            for (float value : *values) {
                uint32_t word;
                std::memcpy(&word, &value, sizeof word);
                bits.push_back(word);
            }
    }
    return bits;
}

std::vector<uint32_t> bits_of(const std::vector<float>& values) {
    std::vector<uint32_t> bits(values.size());
    std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
    return bits;
}

void truncate_copy(const std::string& source, const std::string& target) {
    std::ifstream in(source, std::ios::binary);
    std::vector<char> content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size() * 2 / 3));
}

std::vector<int64_t> saved_steps(const fs::path& directory) {
    std::vector<int64_t> steps;
    for (const auto& entry : fs::directory_iterator(directory)) {
        const std::string name = entry.path().filename().string();
        const std::string prefix = "checkpoint-", suffix = ".safetensors";
        REQUIRE(name.rfind(prefix, 0) == 0);
        REQUIRE(name.size() > prefix.size() + suffix.size());
        REQUIRE(name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0);
        steps.push_back(std::stoll(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size())));
    }
    std::sort(steps.begin(), steps.end());
    return steps;
}

template <typename Call>
mpt_status status_of(Call&& call) {
    try {
        call();
    } catch (const mptrain::Error& error) {
        CHECK(!error.message().empty());
        return error.status();
    }
    return MPT_STATUS_OK;
}

/** The factor on the base rate at `step` as mptrain.h defines each schedule, in double: the reference
 *  for the library's float evaluation. */
double schedule_factor(mpt_lr_schedule schedule, int64_t warmup_steps, int64_t decay_steps, double factor,
                       int64_t step) {
    if (step < warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
    const double decayed = static_cast<double>(step - warmup_steps);
    const double progress = decay_steps > 0 ? std::min(1.0, decayed / static_cast<double>(decay_steps)) : 0.0;
    switch (schedule) {
        case MPT_LR_SCHEDULE_CONSTANT: return 1.0;
        case MPT_LR_SCHEDULE_LINEAR: return factor + (1 - factor) * (1 - progress);
        case MPT_LR_SCHEDULE_COSINE: return factor + (1 - factor) * (1 + std::cos(3.14159265358979323846 * progress)) / 2;
        case MPT_LR_SCHEDULE_STEP: return std::pow(factor, std::floor(decayed / static_cast<double>(decay_steps)));
    }
    return -1.0;
}

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

TEST_CASE("a saved model loads through the wrapper and predicts bit-identically") {
    TempDir directory;
    auto context = cpu_context();
    auto model = mlp(context);
    model.set_layer_dtype(1, MPT_DTYPE_BF16);
    auto data = blobs(context, 120, 11);
    mptrain::Trainer(model, adam()).fit(data, 2, 16);
    const std::string path = directory.file("model.safetensors");
    model.save(path);
    model.save(path);  // overwrites

    auto other = cpu_context(99);
    auto loaded = mptrain::Model::load(other, path);
    CHECK(loaded.layer_count() == 3);
    CHECK(loaded.input_features() == kFeatures);
    CHECK(loaded.output_features() == kClasses);
    CHECK(loaded.parameter_count() == model.parameter_count());
    CHECK(weight_bits(loaded) == weight_bits(model));
    // The architecture reads back from the library, layer by layer (mlp: 16 relu, 8 tanh, softmax).
    CHECK(loaded.layer_units(0) == 16);
    CHECK(loaded.layer_units(1) == 8);
    CHECK(loaded.layer_units(2) == kClasses);
    CHECK(loaded.layer_activation(0) == MPT_ACTIVATION_RELU);
    CHECK(loaded.layer_activation(1) == MPT_ACTIVATION_TANH);
    CHECK(loaded.layer_activation(2) == MPT_ACTIVATION_SOFTMAX);
    CHECK(loaded.layer_dtype(0) == MPT_DTYPE_DEFAULT);
    CHECK(loaded.layer_dtype(1) == MPT_DTYPE_BF16);
    for (int64_t layer : {int64_t{-1}, int64_t{3}}) {
        CHECK(status_of([&] { static_cast<void>(loaded.layer_activation(layer)); }) == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(status_of([&] { static_cast<void>(loaded.layer_dtype(layer)); }) == MPT_STATUS_INVALID_ARGUMENT);
    }
    CHECK(status_of([&] { static_cast<void>(loaded.layer_units(-1)); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { static_cast<void>(loaded.layer_units(3)); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { static_cast<void>(loaded.weights(3)); }) == MPT_STATUS_INVALID_ARGUMENT);
    std::vector<int32_t> labels;
    const std::vector<float> points = blob_samples(30, 12, labels);
    CHECK(bits_of(loaded.predict(points)) == bits_of(model.predict(points)));
    mptrain::Trainer(loaded, adam()).fit(blobs(other, 60, 13), 1, 20);  // it trains like any other
}

TEST_CASE("a run resumed from a checkpoint through the wrapper ends bit-identical") {
    TempDir directory;
    const std::string path = directory.file("checkpoint.safetensors");
    auto context = cpu_context();
    auto data = blobs(context, 200, 21);  // 6 steps of 32 per epoch
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    trainer.fit(data, 1, 32);
    trainer.save_checkpoint(path);
    trainer.fit(data, 2, 32);
    const std::vector<uint32_t> uninterrupted = weight_bits(model);

    auto resumed_model = mlp(context);  // fresh initial weights: only the checkpoint can make them equal
    CHECK(weight_bits(resumed_model) != uninterrupted);
    mptrain::Trainer resumed(resumed_model, adam());
    CHECK(resumed.batch_size() == 0);  // before any training batch
    resumed.load_checkpoint(path);
    CHECK(resumed.progress() == std::pair<int64_t, int64_t>{6, 1});
    CHECK(resumed.batch_size() == 32);  // the saved run's, restored
    resumed.fit(data, 2, resumed.batch_size());
    CHECK(weight_bits(resumed_model) == uninterrupted);
    CHECK(resumed.progress() == trainer.progress());
    CHECK(resumed.loss_scale().scale == trainer.loss_scale().scale);

    auto from_checkpoint = mptrain::Model::load(context, path);  // a checkpoint holds the model too
    CHECK(from_checkpoint.layer_count() == 3);
    CHECK(from_checkpoint.weights(1).first.size() == 8 * 16);
}

TEST_CASE("an epoch cancelled mid-way is the unfinished epoch, which a checkpoint keeps and fit finishes") {
    TempDir directory;
    const std::string path = directory.file("mid-epoch.safetensors");
    auto context = cpu_context();
    auto data = blobs(context, 200, 31);  // 6 steps of 32 per epoch
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    auto same = [](const mptrain::UnfinishedEpoch& epoch, int64_t steps, int64_t rows, int64_t batch_size) {
        return epoch.steps == steps && epoch.rows == rows && epoch.batch_size == batch_size;
    };
    CHECK(same(trainer.unfinished_epoch(), 0, 0, 0));
    trainer.set_callbacks([](const mptrain::Progress& p) { return p.step == 4; });
    CHECK(status_of([&] { trainer.fit(data, 1, 32); }) == MPT_STATUS_CANCELLED);
    CHECK(same(trainer.unfinished_epoch(), 4, 200, 32));
    trainer.save_checkpoint(path);
    trainer.set_callbacks(nullptr);

    auto resumed_model = mlp(context);
    mptrain::Trainer resumed(resumed_model, adam());
    resumed.load_checkpoint(path);
    CHECK(same(resumed.unfinished_epoch(), 4, 200, 32));
    resumed.fit(data, 1, 32);  // finishes it: 2 steps
    CHECK(resumed.progress() == std::pair<int64_t, int64_t>{6, 1});
    CHECK(same(resumed.unfinished_epoch(), 0, 0, 0));
}

TEST_CASE("a learning rate halved from the epoch-end callback is saved and restored by a checkpoint") {
    TempDir directory;
    const std::string path = directory.file("decayed.safetensors");
    auto context = cpu_context();
    auto data = blobs(context, 200, 41);
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    CHECK(trainer.learning_rate() == 0.01f);
    trainer.set_callbacks(nullptr, [&](int64_t, float, float) {
        trainer.set_learning_rate(trainer.learning_rate() / 2);
        return false;
    });
    trainer.fit(data, 2, 32);
    CHECK(trainer.learning_rate() == 0.0025f);
    trainer.save_checkpoint(path);
    trainer.set_callbacks(nullptr);
    trainer.fit(data, 1, 32);

    auto resumed_model = mlp(context);
    mptrain::Trainer resumed(resumed_model, adam());
    resumed.set_learning_rate(0.5f);
    resumed.load_checkpoint(path);
    CHECK(resumed.learning_rate() == 0.0025f);  // the checkpoint's
    resumed.fit(data, 1, 32);
    CHECK(weight_bits(resumed_model) == weight_bits(model));
    CHECK(status_of([&] { trainer.set_learning_rate(0.0f); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(trainer.learning_rate() == 0.0025f);
}

TEST_CASE("a learning-rate schedule set through the wrapper gives each step the rate of the header's formula") {
    struct Case {
        mpt_lr_schedule schedule;
        int64_t warmup_steps, decay_steps;
        float factor;
    };
    const Case cases[] = {
        {MPT_LR_SCHEDULE_COSINE, 3, 5, 0.25f},   // warm-up, half a cosine, then the floor
        {MPT_LR_SCHEDULE_CONSTANT, 4, 0, 1.0f},  // a warm-up alone
        {MPT_LR_SCHEDULE_LINEAR, 2, 4, 0.5f},
        {MPT_LR_SCHEDULE_STEP, 1, 3, 0.5f},
    };
    auto context = cpu_context();
    auto data = blobs(context, 200, 43);
    for (const Case& c : cases) {
        CAPTURE(static_cast<int>(c.schedule));
        auto model = mlp(context);
        mptrain::Trainer trainer(model, adam().lr_schedule(c.schedule, c.warmup_steps, c.decay_steps, c.factor));
        for (int64_t step = 0; step < 11; ++step) {
            CAPTURE(step);
            REQUIRE(trainer.progress().first == step);
            const double expected = 0.01 * schedule_factor(c.schedule, c.warmup_steps, c.decay_steps, c.factor, step);
            const double rate = trainer.scheduled_learning_rate();
            CAPTURE(rate);
            CAPTURE(expected);
            CHECK(std::fabs(rate - expected) <= 1e-6 * expected);
            trainer.step(data, (step * 20) % 200, 20);
        }
        CHECK(trainer.learning_rate() == 0.01f);  // the schedule multiplies the base rate, never changes it
    }

    mptrain::TrainerOptions options;
    CHECK(status_of([&] { options.lr_schedule(MPT_LR_SCHEDULE_COSINE, 2, 0, 0.0f); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { options.lr_schedule(MPT_LR_SCHEDULE_LINEAR, 0, 10, 1.5f); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { options.lr_schedule(MPT_LR_SCHEDULE_CONSTANT, 0, 5); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { options.lr_schedule(MPT_LR_SCHEDULE_STEP, -1, 3, 0.5f); }) == MPT_STATUS_INVALID_ARGUMENT);
    auto model = mlp(context);
    mptrain::Trainer unscheduled(model, options.learning_rate(0.05f));  // the refusals left no schedule
    unscheduled.step(data, 0, 20);
    CHECK(unscheduled.scheduled_learning_rate() == 0.05f);
}

TEST_CASE("a schedule without a factor decays to rate 0 (linear, cosine) or by a tenth (step); a factor given is kept") {
    struct Case {
        mpt_lr_schedule schedule;
        std::optional<float> given;
        double factor;  // the one the header's formula must then follow
    };
    const Case cases[] = {
        {MPT_LR_SCHEDULE_COSINE, std::nullopt, 0.0},  // Keras's CosineDecay, PyTorch's CosineAnnealingLR
        {MPT_LR_SCHEDULE_LINEAR, std::nullopt, 0.0},  // Hugging Face's linear schedule
        {MPT_LR_SCHEDULE_STEP, std::nullopt, 0.1},    // PyTorch StepLR's gamma
        {MPT_LR_SCHEDULE_COSINE, 1.0f, 1.0},          // 1 given is the caller's
        {MPT_LR_SCHEDULE_STEP, 1.0f, 1.0},
    };
    auto context = cpu_context();
    auto data = blobs(context, 200, 43);
    for (const Case& c : cases) {
        CAPTURE(static_cast<int>(c.schedule));
        CAPTURE(c.factor);
        auto model = mlp(context);
        mptrain::TrainerOptions options = adam();
        if (c.given) options.lr_schedule(c.schedule, 0, 4, *c.given);
        else options.lr_schedule(c.schedule, 0, 4);
        mptrain::Trainer trainer(model, options);
        std::vector<float> rates;
        for (int64_t step = 0; step < 10; ++step) {
            CAPTURE(step);
            rates.push_back(trainer.scheduled_learning_rate());
            const double expected = 0.01 * schedule_factor(c.schedule, 0, 4, c.factor, step);
            CHECK(std::fabs(rates.back() - expected) <= 1e-6 * expected);
            trainer.step(data, (step * 20) % 200, 20);
        }
        if (c.factor == 1.0) {
            CHECK(std::count(rates.begin(), rates.end(), 0.01f) == 10);
        } else if (c.schedule == MPT_LR_SCHEDULE_STEP) {
            CHECK(std::fabs(rates[4] - 0.001) <= 1e-6 * 0.001);
            CHECK(std::fabs(rates[8] - 0.0001) <= 1e-6 * 0.0001);
        } else {
            CHECK(rates[2] > 0.0f);
            CHECK(rates[2] < 0.01f);
            CHECK(std::count(rates.begin() + 4, rates.end(), 0.0f) == 6);  // from decay_steps on, exactly 0
        }
    }
}

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

namespace {

// One fp32 plain-SGD step over every row from seed 5, with class weights and row weights (empty:
// none) and a global_clipnorm (0: not set): the weights' bits before and after it, its loss, and the
// trainer's gradient_norm() before and after it.
struct SgdStep {
    std::vector<uint32_t> before, after;
    float loss;
    float gradient_norm_before, gradient_norm;
};
SgdStep one_sgd_step(const std::vector<float>& samples, const std::vector<int32_t>& labels, float learning_rate,
                     const std::vector<float>& class_weights, const std::vector<float>& row_weights,
                     float global_clipnorm = 0.0f) {
    auto context = cpu_context(5);
    auto model = mlp(context);
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_SGD).learning_rate(learning_rate).momentum(0.0f);
    if (!class_weights.empty()) options.class_weights(class_weights);
    if (global_clipnorm != 0.0f) options.global_clipnorm(global_clipnorm);
    mptrain::Trainer trainer(model, options);
    SgdStep step;
    step.before = weight_bits(model);
    step.gradient_norm_before = trainer.gradient_norm();
    const int64_t rows = static_cast<int64_t>(labels.size());
    step.loss = row_weights.empty() ? trainer.step(data, 0, rows) : trainer.step(data.weighted(row_weights), 0, rows);
    step.after = weight_bits(model);
    step.gradient_norm = trainer.gradient_norm();
    return step;
}

}  // namespace

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

/** The L2 norm of a step's change of all weights and biases, in double. */
double change_norm(const SgdStep& step) {
    double sum = 0.0;
    for (size_t i = 0; i < step.before.size(); ++i) {
        float before = 0.0f, after = 0.0f;
        std::memcpy(&before, &step.before[i], sizeof before);
        std::memcpy(&after, &step.after[i], sizeof after);
        const double change = static_cast<double>(after) - static_cast<double>(before);
        sum += change * change;
    }
    return std::sqrt(sum);
}

}  // namespace

TEST_CASE("global_clipnorm through the wrapper scales a step's gradient to the bound; one far above the norm changes nothing, bit for bit") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(30, 71, labels);
    constexpr float kRate = 0.05f, kBound = 1e-3f;
    // One plain SGD step: the norm of its change over the rate is that of the gradient it applied.
    const SgdStep unclipped = one_sgd_step(samples, labels, kRate, {}, {});
    const SgdStep clipped = one_sgd_step(samples, labels, kRate, {}, {}, kBound);
    REQUIRE(change_norm(unclipped) / kRate > 100.0 * kBound);  // so that the bound clips
    CHECK(change_norm(clipped) / kRate == doctest::Approx(kBound).epsilon(1e-3));
    CHECK(clipped.after != unclipped.after);

    // A bound far above the norm: three momentum SGD steps as without clipping, bit for bit.
    auto momentum_steps = [&](std::optional<float> bound) {
        auto context = cpu_context(5);
        auto model = mlp(context);
        const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
        mptrain::TrainerOptions options;
        options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_SGD).learning_rate(kRate).momentum(0.9f);
        if (bound) options.global_clipnorm(*bound);
        mptrain::Trainer trainer(model, options);
        for (int64_t step = 0; step < 3; ++step) trainer.step(data, 10 * step, 10);
        return weight_bits(model);
    };
    const std::vector<uint32_t> plain = momentum_steps(std::nullopt);
    CHECK(plain != unclipped.before);  // the steps move the weights (from seed 5's, as one_sgd_step's)
    CHECK(momentum_steps(1e30f) == plain);
}

TEST_CASE("gradient_norm() through the wrapper is the last step's norm before clipping, and NaN where none was taken") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(30, 71, labels);
    constexpr float kRate = 0.05f, kBound = 1e-3f;
    // One plain SGD step: the norm of its change over the rate is that of the gradient it applied.
    const SgdStep unclipped = one_sgd_step(samples, labels, kRate, {}, {});
    const SgdStep clipped = one_sgd_step(samples, labels, kRate, {}, {}, kBound);
    CHECK(std::isnan(clipped.gradient_norm_before));  // before the first step
    CHECK(clipped.gradient_norm == doctest::Approx(change_norm(unclipped) / kRate).epsilon(1e-4));
    CHECK(clipped.gradient_norm > kBound);  // so that step was clipped
    CHECK(std::isnan(unclipped.gradient_norm));  // no clipping: none taken

    // From a progress callback of a clipping fit (one epoch of three batches of 10, unshuffled): each
    // reported step's norm, finite and as step by step, with the same weights after it.
    auto clipped_steps = [&](bool by_fit, std::vector<float>& norms) {
        auto context = cpu_context(5);
        auto model = mlp(context);
        const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
        mptrain::TrainerOptions options;
        options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_SGD).learning_rate(kRate).momentum(0.0f);
        options.global_clipnorm(kBound);
        mptrain::Trainer trainer(model, options);
        if (by_fit) {
            trainer.set_callbacks([&](const mptrain::Progress&) {
                norms.push_back(trainer.gradient_norm());
                return false;
            });
            trainer.fit(data, 1, 10, false);
        } else {
            for (int64_t step = 0; step < 3; ++step) {
                trainer.step(data, 10 * step, 10);
                norms.push_back(trainer.gradient_norm());
            }
        }
        return weight_bits(model);
    };
    std::vector<float> step_norms, fit_norms;
    const std::vector<uint32_t> stepped = clipped_steps(false, step_norms);
    CHECK(clipped_steps(true, fit_norms) == stepped);
    REQUIRE(fit_norms.size() == 3);
    for (float norm : fit_norms) CHECK((std::isfinite(norm) && norm > kBound));
    CHECK(fit_norms == step_norms);
    CHECK((fit_norms[0] != fit_norms[1] && fit_norms[1] != fit_norms[2]));  // each step's own
}

TEST_CASE("a negative, NaN or infinite global_clipnorm throws INVALID_ARGUMENT from the wrapper's setter") {
    mptrain::TrainerOptions options;
    for (float refused : {-1.0f, -1e-30f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
        try {
            options.global_clipnorm(refused);
            FAIL("global_clipnorm accepted " << refused);
        } catch (const mptrain::Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(error.message().find("global_clipnorm") != std::string::npos);
        }
    }
    options.global_clipnorm(0.0f);  // 0 is no clipping: accepted
}

TEST_CASE("swap_ema_weights() through the wrapper exchanges the weights with Keras's moving average of them and back, bit for bit") {
    auto context = cpu_context(5);
    auto model = mlp(context);
    const auto data = blobs(context, 30, 73);
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_SGD).learning_rate(0.05f).momentum(0.0f);
    options.ema_momentum(0.5f);
    mptrain::Trainer trainer(model, options);
    // Before any step the averages are the weights: the exchange changes no value.
    const std::vector<uint32_t> initial = weight_bits(model);
    CHECK(trainer.swap_ema_weights());
    CHECK(weight_bits(model) == initial);
    CHECK_FALSE(trainer.swap_ema_weights());

    // The averages after each step, as Keras computes them (the first step copies the weights); with
    // momentum 0.5 each product is exact, so float arithmetic here rounds as the library's.
    std::vector<float> expected;
    for (int64_t step = 0; step < 3; ++step) {
        trainer.step(data, 10 * step, 10);
        std::vector<uint32_t> bits = weight_bits(model);
        std::vector<float> weights(bits.size());
        std::memcpy(weights.data(), bits.data(), bits.size() * sizeof(float));
        if (step == 0) expected = weights;
        else
            for (size_t i = 0; i < weights.size(); ++i) expected[i] = 0.5f * expected[i] + 0.5f * weights[i];
    }
    const std::vector<uint32_t> trained = weight_bits(model);
    const float trained_loss = trainer.evaluate(data).loss;
    CHECK(trainer.swap_ema_weights());
    const std::vector<uint32_t> averaged = weight_bits(model);
    CHECK(averaged != trained);
    CHECK(averaged == bits_of(expected));
    CHECK(trainer.evaluate(data).loss != trained_loss);  // evaluate sees the averages

    // Meanwhile training and checkpoints are refused, and change nothing.
    TempDir directory;
    CHECK(status_of([&] { trainer.step(data, 0, 10); }) == MPT_STATUS_INVALID_STATE);
    CHECK(status_of([&] { trainer.fit(data, 1, 10); }) == MPT_STATUS_INVALID_STATE);
    CHECK(status_of([&] { trainer.save_checkpoint(directory.file("refused.safetensors")); }) ==
          MPT_STATUS_INVALID_STATE);
    CHECK(weight_bits(model) == averaged);

    CHECK_FALSE(trainer.swap_ema_weights());
    CHECK(weight_bits(model) == trained);
    CHECK(trainer.evaluate(data).loss == trained_loss);
    trainer.step(data, 0, 10);  // trains again

    // A trainer without averages (of another model) refuses the exchange.
    auto plain_model = mlp(context);
    mptrain::Trainer plain(plain_model, adam());
    const std::vector<uint32_t> plain_weights = weight_bits(plain_model);
    CHECK(status_of([&] { plain.swap_ema_weights(); }) == MPT_STATUS_INVALID_STATE);
    CHECK(weight_bits(plain_model) == plain_weights);
}

TEST_CASE("an ema_momentum outside (0, 1) throws INVALID_ARGUMENT from the wrapper's setter; 0 is none") {
    mptrain::TrainerOptions options;
    for (float refused : {1.5f, 1.0f, -0.5f, std::nanf("")}) {
        try {
            options.ema_momentum(refused);
            FAIL("ema_momentum accepted " << refused);
        } catch (const mptrain::Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(error.message().find("ema momentum") != std::string::npos);
        }
    }
    options.ema_momentum(0.0f);  // 0 keeps no average: accepted, and the trainer has none to exchange
    auto context = cpu_context();
    auto model = mlp(context);
    mptrain::Trainer trainer(model, options);
    CHECK(status_of([&] { trainer.swap_ema_weights(); }) == MPT_STATUS_INVALID_STATE);
}

TEST_CASE("RMSprop through the wrapper lowers the loss, with and without momentum") {
    auto context = cpu_context();
    const auto data = blobs(context, 240, 61);
    for (float momentum : {0.0f, 0.5f}) {
        CAPTURE(momentum);
        auto model = mlp(context);
        mptrain::TrainerOptions options;
        options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_RMSPROP).learning_rate(0.01f).momentum(momentum);
        options.rmsprop(0.9f, 1e-7f);
        mptrain::Trainer trainer(model, options);
        const mptrain::Evaluation before = trainer.evaluate(data);
        trainer.fit(data, 5, 16);
        const mptrain::Evaluation after = trainer.evaluate(data);
        CHECK(after.loss < 0.5f * before.loss);
        CHECK(after.accuracy >= 0.95f);
    }
}

TEST_CASE("RMSprop's rho and centered set through the wrapper change the steps: the same options give the same weights") {
    const auto train = [](float rho, bool centered = false) {
        auto context = cpu_context(5);  // one seed: the same initial weights
        auto model = mlp(context);
        const auto data = blobs(context, 30, 73);
        mptrain::TrainerOptions options;
        options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_RMSPROP).learning_rate(0.01f).rmsprop(rho, 1e-7f);
        options.rmsprop_centered(centered);
        mptrain::Trainer trainer(model, options);
        const std::vector<uint32_t> initial = weight_bits(model);
        for (int64_t step = 0; step < 3; ++step) trainer.step(data, 10 * step, 10);
        CHECK(weight_bits(model) != initial);  // the steps moved the weights
        return weight_bits(model);
    };
    const std::vector<uint32_t> rho_08 = train(0.8f);
    CHECK(train(0.8f) == rho_08);
    CHECK(train(0.5f) != rho_08);
    const std::vector<uint32_t> centered = train(0.8f, true);
    CHECK(centered != rho_08);
    CHECK(train(0.8f, true) == centered);
}

TEST_CASE("RMSprop's rho outside [0, 1) or a non-positive epsilon throws INVALID_ARGUMENT; Nesterov with it throws at construction") {
    mptrain::TrainerOptions options;
    const std::pair<float, float> refused[] = {
        {1.5f, 1e-7f}, {1.0f, 1e-7f}, {-0.1f, 1e-7f}, {0.9f, 0.0f}, {0.9f, -1e-7f}, {0.9f, std::nanf("")}};
    for (const auto& [rho, epsilon] : refused) {
        CAPTURE(rho);
        CAPTURE(epsilon);
        try {
            options.rmsprop(rho, epsilon);
            FAIL("rmsprop accepted rho " << rho << ", epsilon " << epsilon);
        } catch (const mptrain::Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(error.message().find(epsilon > 0.0f ? "rho" : "epsilon") != std::string::npos);
        }
    }
    options.rmsprop(0.0f, 1e-3f);  // rho 0 is in range

    auto context = cpu_context();
    auto model = mlp(context);
    options.optimizer(MPT_OPTIMIZER_RMSPROP).momentum(0.9f, true);
    try {
        mptrain::Trainer trainer(model, options);
        FAIL("an RMSprop trainer with Nesterov momentum was created");
    } catch (const mptrain::Error& error) {
        CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(error.message().find("Nesterov") != std::string::npos);
    }
    options.momentum(0.9f, false);  // plain momentum is RMSprop's too
    mptrain::Trainer trainer(model, options);
    CHECK(std::isfinite(trainer.step(blobs(context, 10, 73), 0, 10)));
}

namespace {

/** The weights' bits after three fp32 Lion steps at rate 0.001 from seed 5, with these betas (none:
 *  the library's defaults). */
std::vector<uint32_t> lion_steps(std::optional<std::pair<float, float>> betas) {
    auto context = cpu_context(5);
    auto model = mlp(context);
    const auto data = blobs(context, 30, 73);
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_LION).learning_rate(0.001f);
    if (betas) options.lion(betas->first, betas->second);
    mptrain::Trainer trainer(model, options);
    const std::vector<uint32_t> initial = weight_bits(model);
    for (int64_t step = 0; step < 3; ++step) CHECK(std::isfinite(trainer.step(data, 10 * step, 10)));
    CHECK(weight_bits(model) != initial);
    return weight_bits(model);
}

}  // namespace

TEST_CASE("Lion through the wrapper lowers the loss; unset betas are Keras's 0.9 and 0.99") {
    auto context = cpu_context();
    const auto data = blobs(context, 240, 61);
    auto model = mlp(context);
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_LION).learning_rate(0.003f).lion(0.9f, 0.99f);
    mptrain::Trainer trainer(model, options);
    const mptrain::Evaluation before = trainer.evaluate(data);
    trainer.fit(data, 3, 16);
    const mptrain::Evaluation after = trainer.evaluate(data);
    CHECK(std::isfinite(after.loss));
    CHECK(after.loss < before.loss);

    const std::vector<uint32_t> defaults = lion_steps(std::nullopt);
    CHECK(lion_steps(std::make_pair(0.9f, 0.99f)) == defaults);
    CHECK(lion_steps(std::make_pair(0.9f, 0.999f)) != defaults);  // Adam's beta2 is not Lion's default
}

TEST_CASE("Lion's betas outside [0, 1) throw INVALID_ARGUMENT; a checkpoint must match them") {
    mptrain::TrainerOptions options;
    const std::pair<float, float> refused[] = {{1.0f, 0.99f}, {std::nanf(""), 0.99f}, {-0.1f, 0.99f},
                                               {0.9f, 1.0f},  {0.9f, std::nanf("")}};
    for (const auto& [beta1, beta2] : refused) {
        CAPTURE(beta1);
        CAPTURE(beta2);
        try {
            options.lion(beta1, beta2);
            FAIL("lion accepted beta1 " << beta1 << ", beta2 " << beta2);
        } catch (const mptrain::Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(error.message().find(beta2 == 0.99f ? "beta1" : "beta2") != std::string::npos);
        }
    }
    options.lion(0.0f, 0.0f);  // 0 is in range

    TempDir directory;
    auto context = cpu_context();
    auto model = mlp(context);
    const auto data = blobs(context, 20, 52);
    const auto lion = [](float beta1, float beta2) {
        return std::move(mptrain::TrainerOptions().optimizer(MPT_OPTIMIZER_LION).learning_rate(0.001f).lion(beta1, beta2));
    };
    const std::string checkpoint = directory.file("lion.safetensors");
    mptrain::Trainer saved(model, lion(0.8f, 0.95f));
    saved.step(data, 0, 20);
    saved.save_checkpoint(checkpoint);
    mptrain::Trainer resumed(model, lion(0.8f, 0.95f));
    resumed.load_checkpoint(checkpoint);  // the same betas: loads
    CHECK(resumed.progress().first == 1);
    CHECK(std::isfinite(resumed.step(data, 0, 20)));
    mptrain::Trainer other(model, lion(0.8f, 0.98f));
    try {
        other.load_checkpoint(checkpoint);
        FAIL("a Lion trainer with beta2 0.98 loaded a checkpoint written with 0.95");
    } catch (const mptrain::Error& error) {
        CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(error.message().find("beta2 0.95 (this trainer: 0.98)") != std::string::npos);
    }
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

TEST_CASE("an initializer set through the wrapper chains, reads back, draws the weights and is fixed once they are drawn") {
    auto drawn = [](mpt_initializer initializer) {
        auto context = cpu_context(4);
        auto model = mlp(context);
        CHECK(model.layer_initializer(1) == MPT_INITIALIZER_GLOROT_UNIFORM);
        CHECK(&model.set_layer_initializer(1, initializer) == &model);
        CHECK(model.layer_initializer(1) == initializer);
        CHECK(model.layer_initializer(0) == MPT_INITIALIZER_GLOROT_UNIFORM);
        auto weights = model.weights(1).first;
        CHECK(status_of([&] { model.set_layer_initializer(1, MPT_INITIALIZER_HE_NORMAL); }) == MPT_STATUS_INVALID_STATE);
        return weights;
    };
    CHECK(bits_of(drawn(MPT_INITIALIZER_HE_UNIFORM)) == bits_of(drawn(MPT_INITIALIZER_HE_UNIFORM)));
    CHECK(bits_of(drawn(MPT_INITIALIZER_HE_UNIFORM)) != bits_of(drawn(MPT_INITIALIZER_GLOROT_UNIFORM)));
    auto context = cpu_context();
    auto model = mlp(context);
    CHECK(status_of([&] { model.set_layer_initializer(3, MPT_INITIALIZER_HE_NORMAL); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { model.set_layer_initializer(0, static_cast<mpt_initializer>(6)); }) ==
          MPT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("an input dropout rate set through the wrapper chains and reads back; a built model's is fixed") {
    auto context = cpu_context();
    auto model = mlp(context);
    CHECK(model.input_dropout() == 0.0f);
    CHECK(&model.set_input_dropout(0.125f) == &model);
    CHECK(model.input_dropout() == 0.125f);
    CHECK(status_of([&] { model.set_input_dropout(1.0f); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(model.input_dropout() == 0.125f);
    mptrain::Trainer trainer(model, adam());
    CHECK(status_of([&] { model.set_input_dropout(0.0f); }) == MPT_STATUS_INVALID_STATE);
}

TEST_CASE("a dropout rate set through the wrapper reads back on its layer alone, -0 as 0") {
    auto context = cpu_context();
    auto model = mlp(context);
    for (int64_t layer = 0; layer < 3; ++layer) CHECK(model.layer_dropout(layer) == 0.0f);  // none by default
    CHECK(&model.set_layer_dropout(1, 0.25f) == &model);  // chains, as set_layer_dtype
    CHECK(model.layer_dropout(0) == 0.0f);
    CHECK(model.layer_dropout(1) == 0.25f);
    CHECK(model.layer_dropout(2) == 0.0f);
    model.set_layer_dropout(0, 0.5f).set_layer_dropout(1, -0.0f);
    CHECK(model.layer_dropout(0) == 0.5f);
    CHECK(bits_of({model.layer_dropout(1)}) == bits_of({0.0f}));  // +0, not -0
    const float largest = std::nextafter(1.0f, 0.0f);  // the largest rate below 1 is in range
    model.set_layer_dropout(1, largest);
    CHECK(model.layer_dropout(1) == largest);
}

TEST_CASE("a dropout rate outside [0, 1) or a layer out of range throws INVALID_ARGUMENT, the rate unchanged") {
    auto context = cpu_context();
    auto model = mlp(context);
    model.set_layer_dropout(0, 0.25f);
    for (float refused : {1.0f, -0.1f, std::nanf(""), 1.5f, std::numeric_limits<float>::infinity()}) {
        CAPTURE(refused);
        CHECK(status_of([&] { model.set_layer_dropout(0, refused); }) == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(model.layer_dropout(0) == 0.25f);
    }
    for (int64_t layer : {int64_t{-1}, int64_t{3}, std::numeric_limits<int64_t>::max()}) {
        CAPTURE(layer);
        CHECK(status_of([&] { model.set_layer_dropout(layer, 0.5f); }) == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(status_of([&] { static_cast<void>(model.layer_dropout(layer)); }) == MPT_STATUS_INVALID_ARGUMENT);
    }
    mptrain::Trainer trainer(model, adam());  // the refusals left a model that builds
}

TEST_CASE("dropout on the last layer makes building throw INVALID_STATE; rate 0 builds; a built model's rates are fixed") {
    auto context = cpu_context();
    auto model = mlp(context);
    model.set_layer_dropout(2, 0.5f);  // accepted: only building refuses it
    CHECK(model.layer_dropout(2) == 0.5f);
    try {
        mptrain::Trainer trainer(model, adam());
        FAIL("a trainer was created for a model whose last layer has dropout");
    } catch (const mptrain::Error& error) {
        CHECK(error.status() == MPT_STATUS_INVALID_STATE);
        CHECK(error.message().find("last layer") != std::string::npos);
    }
    CHECK(status_of([&] { model.predict(std::vector<float>(kFeatures, 1.0f)); }) == MPT_STATUS_INVALID_STATE);
    model.set_layer_dropout(2, 0.0f);  // the refused builds left the model unbuilt
    mptrain::Trainer trainer(model, adam());
    CHECK(status_of([&] { model.set_layer_dropout(0, 0.25f); }) == MPT_STATUS_INVALID_STATE);
    CHECK(model.layer_dropout(0) == 0.0f);
}

TEST_CASE("a fit with dropout on a hidden layer learns and trains otherwise; evaluate and predict use every output") {
    std::vector<int32_t> labels;
    const std::vector<float> points = blob_samples(30, 83, labels);
    const auto options = [] { return std::move(adam().precision(MPT_PRECISION_FP32)); };
    auto context = cpu_context(5), plain_context = cpu_context(5);  // one seed: the same initial weights
    auto model = mlp(context), plain = mlp(plain_context);
    model.set_layer_dropout(0, 0.5f);
    mptrain::Trainer trainer(model, options()), plain_trainer(plain, options());
    CHECK(weight_bits(model) == weight_bits(plain));
    const auto data = blobs(context, 240, 81);
    trainer.fit(data, 5, 16);
    plain_trainer.fit(blobs(plain_context, 240, 81), 5, 16);
    CHECK(weight_bits(model) != weight_bits(plain));  // the dropped outputs changed the steps
    const mptrain::Evaluation evaluation = trainer.evaluate(data, 16);
    CHECK(evaluation.accuracy >= 0.9f);

    // The trained weights in a model without dropout: every evaluation and prediction the same, bit for
    // bit. The same batches: a trainer that never fitted evaluates in batches of 256 by default, whose
    // sums OpenBLAS may round otherwise (its Haswell kernels do).
    auto copy_context = cpu_context(9);
    auto copy = mlp(copy_context);
    for (int64_t layer = 0; layer < 3; ++layer) {
        auto [weights, bias] = model.weights(layer);
        copy.set_weights(layer, weights, bias);
    }
    mptrain::Trainer copy_trainer(copy, options());
    const mptrain::Evaluation copy_evaluation = copy_trainer.evaluate(blobs(copy_context, 240, 81), 16);
    CHECK(bits_of({evaluation.loss, evaluation.accuracy}) == bits_of({copy_evaluation.loss, copy_evaluation.accuracy}));
    CHECK(bits_of(model.predict(points)) == bits_of(copy.predict(points)));
    CHECK(bits_of(trainer.predict(points)) == bits_of(copy_trainer.predict(points)));
    CHECK(bits_of(model.predict(points)) == bits_of(model.predict(points)));  // no mask at inference
}

TEST_CASE("a layer frozen through the wrapper keeps its weights while the others train; thawed, it trains") {
    auto context = cpu_context();
    auto model = mlp(context);
    for (int64_t layer = 0; layer < 3; ++layer) CHECK(model.layer_trainable(layer));  // the default
    CHECK(&model.set_layer_trainable(1, false) == &model);  // chains
    CHECK(!model.layer_trainable(1));
    mptrain::Trainer trainer(model, adam());
    const auto data = blobs(context, 240, 81);
    auto layer_bits = [&](int64_t layer) {
        auto [weights, bias] = model.weights(layer);
        weights.insert(weights.end(), bias.begin(), bias.end());
        return bits_of(weights);
    };
    const auto frozen = layer_bits(1), first = layer_bits(0);
    trainer.fit(data, 1, 16);
    CHECK(layer_bits(1) == frozen);
    CHECK(layer_bits(0) != first);
    model.set_layer_trainable(1, true);
    trainer.fit(data, 1, 16);
    CHECK(layer_bits(1) != frozen);
    CHECK(status_of([&] { model.set_layer_trainable(3, false); }) == MPT_STATUS_INVALID_ARGUMENT);
    for (int64_t layer = 0; layer < 3; ++layer) model.set_layer_trainable(layer, false);
    CHECK(status_of([&] { trainer.fit(data, 1, 16); }) == MPT_STATUS_INVALID_STATE);
}

TEST_CASE("a model saved with dropout, and a checkpoint's model, load with the same rates") {
    TempDir directory;
    auto context = cpu_context();
    auto model = mlp(context);
    model.set_layer_dropout(0, 0.25f).set_layer_dropout(1, 0.5f);
    mptrain::Trainer trainer(model, adam());
    trainer.fit(blobs(context, 60, 11), 1, 16);
    const std::string path = directory.file("dropout.safetensors"), checkpoint = directory.file("checkpoint.safetensors");
    model.save(path);
    trainer.save_checkpoint(checkpoint);

    auto other = cpu_context(99);
    for (const std::string& file : {path, checkpoint}) {
        CAPTURE(file);
        auto loaded = mptrain::Model::load(other, file);
        CHECK(loaded.layer_dropout(0) == 0.25f);
        CHECK(loaded.layer_dropout(1) == 0.5f);
        CHECK(loaded.layer_dropout(2) == 0.0f);
        CHECK(weight_bits(loaded) == weight_bits(model));
        CHECK(status_of([&] { loaded.set_layer_dropout(0, 0.0f); }) == MPT_STATUS_INVALID_STATE);  // loaded: built
    }
    auto plain = mlp(context);
    plain.save(path);  // overwritten without dropout: the rates are the file's
    auto reloaded = mptrain::Model::load(other, path);
    for (int64_t layer = 0; layer < 3; ++layer) CHECK(reloaded.layer_dropout(layer) == 0.0f);
}

TEST_CASE("automatic checkpoints through the wrapper keep the newest and can be turned off") {
    TempDir directory;
    auto context = cpu_context();
    auto data = blobs(context, 200, 31);
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    trainer.set_checkpointing(directory.path.string(), 5, 0, 2);
    trainer.fit(data, 3, 32);  // 18 steps: checkpoints at 5, 10, 15
    CHECK(saved_steps(directory.path) == std::vector<int64_t>{10, 15});
    auto other_model = mlp(context);
    mptrain::Trainer other(other_model, adam());
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(directory.path)) names.push_back(entry.path().string());
    other.load_checkpoint(*std::max_element(names.begin(), names.end()));
    CHECK(other.progress().first == 15);

    trainer.set_checkpointing(std::nullopt);
    trainer.fit(data, 1, 32);
    CHECK(saved_steps(directory.path) == std::vector<int64_t>{10, 15});
    trainer.set_checkpointing(directory.path.string(), 0, 1, 5);
    trainer.fit(data, 1, 32);
    CHECK(saved_steps(directory.path) == std::vector<int64_t>{10, 15, 30});
    trainer.set_checkpointing(directory.path.string());  // every epoch, keeping the newest
    trainer.fit(data, 1, 32);
    CHECK(saved_steps(directory.path) == std::vector<int64_t>{36});
}

TEST_CASE("missing, damaged and mismatched files throw mptrain::Error with their status") {
    TempDir directory;
    auto context = cpu_context();
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    const std::string missing = directory.file("missing.safetensors");
    CHECK(status_of([&] { mptrain::Model::load(context, missing); }) == MPT_STATUS_IO_ERROR);
    CHECK(status_of([&] { trainer.load_checkpoint(missing); }) == MPT_STATUS_IO_ERROR);

    const std::string model_file = directory.file("model.safetensors");
    const std::string checkpoint = directory.file("checkpoint.safetensors");
    const std::string truncated = directory.file("truncated.safetensors");
    model.save(model_file);
    trainer.save_checkpoint(checkpoint);
    truncate_copy(model_file, truncated);
    CHECK(status_of([&] { mptrain::Model::load(context, truncated); }) == MPT_STATUS_CORRUPT_DATA);
    truncate_copy(checkpoint, truncated);
    CHECK(status_of([&] { trainer.load_checkpoint(truncated); }) == MPT_STATUS_CORRUPT_DATA);
    CHECK(status_of([&] { mptrain::Model::load(context, truncated); }) == MPT_STATUS_CORRUPT_DATA);

    mptrain::Model narrow(context, kFeatures);
    narrow.add_dense(kClasses, MPT_ACTIVATION_SOFTMAX);
    mptrain::Trainer narrow_trainer(narrow, adam());
    CHECK(status_of([&] { narrow_trainer.load_checkpoint(checkpoint); }) == MPT_STATUS_SHAPE_MISMATCH);
    mptrain::Trainer sgd_trainer(model);
    CHECK(status_of([&] { sgd_trainer.load_checkpoint(checkpoint); }) == MPT_STATUS_INVALID_ARGUMENT);

    CHECK(status_of([&] { model.save(directory.file("no-such-directory/model.safetensors")); }) == MPT_STATUS_IO_ERROR);
    const std::string with_nul("bad\0path", 8);
    CHECK(status_of([&] { model.save(with_nul); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { mptrain::Model::load(context, with_nul); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.set_checkpointing(directory.path.string(), 1, 0, 0); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.set_checkpointing(directory.path.string(), 0, 0); }) == MPT_STATUS_INVALID_ARGUMENT);

    auto data = blobs(context, 64, 41);
    // Refused when set, not at the first checkpoint.
    CHECK(status_of([&] { trainer.set_checkpointing(directory.file("no-such-directory"), 1); }) == MPT_STATUS_IO_ERROR);
    const std::string going = directory.file("going-away");
    std::filesystem::create_directory(going);
    trainer.set_checkpointing(going, 1);
    std::filesystem::remove(going);
    CHECK(status_of([&] { trainer.fit(data, 1, 32); }) == MPT_STATUS_IO_ERROR);
    // ...and everything still works afterwards.
    trainer.set_checkpointing(std::nullopt);
    trainer.fit(data, 1, 32);
    trainer.load_checkpoint(checkpoint);
    CHECK(mptrain::Model::load(context, model_file).layer_count() == 3);
}

TEST_CASE("a callback may replace the callbacks: the running one stays alive and the new ones apply from the next call") {
    auto context = cpu_context();
    auto model = mlp(context);
    auto data = blobs(context, 120, 51);  // 15 steps of 8
    mptrain::Trainer trainer(model, adam());
    std::vector<std::string> seen;
    std::vector<int64_t> later_steps;
    int later_epoch_ends = 0;
    // Longer than std::function's small buffer: the callable lives on the heap, where ASan sees it
    // freed if set_callbacks destroys it while it runs.
    const std::string tag = "the first progress callback, still running";
    trainer.set_callbacks(
        [&, tag](const mptrain::Progress&) {
            trainer.set_callbacks(
                [&](const mptrain::Progress& progress) {
                    later_steps.push_back(progress.step);
                    return false;
                },
                [&](int64_t, float, float) {
                    ++later_epoch_ends;
                    return false;
                });
            seen.push_back(tag);  // reads this callable's capture after it was replaced
            return false;
        },
        [&](int64_t, float, float) {
            seen.push_back("the first epoch-end callback");
            return false;
        });
    trainer.fit(data, 1, 8);
    CHECK(seen == std::vector<std::string>{"the first progress callback, still running"});
    std::vector<int64_t> expected_steps;
    for (int64_t step = 2; step <= 120 / 8; ++step) expected_steps.push_back(step);
    CHECK(later_steps == expected_steps);
    CHECK(later_epoch_ends == 1);
}

TEST_CASE("an epoch-end callback may evaluate a validation set: the numbers of evaluations between one-epoch fits") {
    struct Run {
        mptrain::Context context = cpu_context(17);  // one seed: the same initial weights and shuffles
        mptrain::Model model = mlp(context);
        mptrain::Trainer trainer{model, adam()};
        mptrain::Dataset training = blobs(context, 160, 61);  // 10 steps of 16
        mptrain::Dataset validation = blobs(context, 70, 62);
    };
    Run validated;
    std::vector<mptrain::Evaluation> during_fit;
    std::optional<mpt_status> from_progress;
    validated.trainer.set_callbacks(
        [&](const mptrain::Progress& progress) {
            if (progress.step == 2 && !from_progress)
                from_progress = status_of([&] { validated.trainer.evaluate(validated.validation); });
            return false;
        },
        [&](int64_t, float, float) {
            during_fit.push_back(validated.trainer.evaluate(validated.validation));
            return false;
        });
    validated.trainer.fit(validated.training, 3, 16);
    CHECK(validated.trainer.progress() == std::pair<int64_t, int64_t>{30, 3});
    REQUIRE(from_progress.has_value());
    CHECK(*from_progress == MPT_STATUS_INVALID_STATE);  // mid-epoch: refused by the library
    REQUIRE(during_fit.size() == 3);

    Run between;
    for (size_t epoch = 0; epoch < 3; ++epoch) {
        CAPTURE(epoch);
        between.trainer.fit(between.training, 1, 16);
        const mptrain::Evaluation evaluation = between.trainer.evaluate(between.validation);
        CHECK(bits_of({evaluation.loss, evaluation.accuracy}) ==
              bits_of({during_fit[epoch].loss, during_fit[epoch].accuracy}));
    }
    CHECK(during_fit[2].loss < during_fit[0].loss);
}

TEST_CASE("a validation split of slices trains and validates as datasets of copied rows, bit for bit") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(160, 63, labels);
    const int64_t held_out = 40, kept = 160 - held_out;  // Keras's validation_split 0.25: the last rows
    auto run = [&](bool sliced) {
        auto context = cpu_context(19);
        auto model = mlp(context);
        mptrain::Trainer trainer(model, adam());
        std::optional<mptrain::Dataset> training, validation;
        if (sliced) {
            const auto whole = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
            training = whole.slice(0, kept);
            validation = whole.slice(kept, held_out);
        } else {  // the slices outlive `whole` above; these are copies of the same rows
            auto rows = [&](int64_t first, int64_t count) {
                return mptrain::Dataset::from_f32(
                    context, std::vector<float>(samples.begin() + first * kFeatures, samples.begin() + (first + count) * kFeatures),
                    kFeatures, std::vector<int32_t>(labels.begin() + first, labels.begin() + first + count), kClasses);
            };
            training = rows(0, kept);
            validation = rows(kept, held_out);
        }
        std::vector<float> metrics;
        trainer.set_callbacks(nullptr, [&](int64_t, float loss, float accuracy) {
            const mptrain::Evaluation evaluation = trainer.evaluate(*validation);
            metrics.insert(metrics.end(), {loss, accuracy, evaluation.loss, evaluation.accuracy});
            return false;
        });
        trainer.fit(*training, 3, 16);
        CHECK(training->rows() == kept);
        CHECK(validation->rows() == held_out);
        return std::make_pair(weight_bits(model), bits_of(metrics));
    };
    const auto sliced = run(true), copied = run(false);
    CHECK(sliced.first == copied.first);
    REQUIRE(sliced.second.size() == 12);
    CHECK(sliced.second == copied.second);
}

TEST_CASE("row weights of 2 through the wrapper train one SGD step as twice the learning rate, bit for bit") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(30, 65, labels);
    auto one_step = [&](float learning_rate, const std::vector<float>& row_weights, float& loss) {
        const SgdStep step = one_sgd_step(samples, labels, learning_rate, {}, row_weights);
        loss = step.loss;
        return step.after;
    };
    float plain_loss = 0.0f, doubled_rate_loss = 0.0f, weighted_loss = 0.0f;
    const std::vector<uint32_t> plain = one_step(0.05f, {}, plain_loss);
    const std::vector<uint32_t> doubled_rate = one_step(0.1f, {}, doubled_rate_loss);
    const std::vector<uint32_t> weighted = one_step(0.05f, std::vector<float>(30, 2.0f), weighted_loss);
    CHECK(weighted == doubled_rate);
    CHECK(weighted != plain);
    CHECK(weighted_loss == 2.0f * plain_loss);
}

TEST_CASE("row weights of the wrong count or value throw with the library's status") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 66);
    CHECK(status_of([&] { data.weighted(std::vector<float>(29, 1.0f)); }) == MPT_STATUS_SHAPE_MISMATCH);
    std::vector<float> negative(30, 1.0f);
    negative[4] = -1.0f;
    CHECK(status_of([&] { data.weighted(negative); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(data.weighted(std::vector<float>(30, 0.5f)).slice(10, 5).rows() == 5);
}

TEST_CASE("predictions over a dataset and its labels through the wrapper give evaluate's accuracy") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(90, 67, labels);
    auto context = cpu_context(3);
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    trainer.fit(data, 4, 16);
    CHECK(data.labels() == labels);
    CHECK(data.slice(30, 10).labels() == std::vector<int32_t>(labels.begin() + 30, labels.begin() + 40));
    const std::vector<float> probabilities = trainer.predict(data, 90);
    CHECK(bits_of(probabilities) == bits_of(trainer.predict(samples)));  // one batch: bit for bit
    int64_t correct = 0;
    for (size_t r = 0; r < labels.size(); ++r) {
        const auto row = probabilities.begin() + static_cast<std::ptrdiff_t>(r * kClasses);
        correct += std::max_element(row, row + kClasses) - row == labels[r];
    }
    CHECK(static_cast<double>(correct) / 90.0 == doctest::Approx(trainer.evaluate(data).accuracy).epsilon(1e-6));
    const auto targets = mptrain::Dataset::from_f32_targets(context, samples, kFeatures, std::vector<float>(90 * kClasses, 0.0f),
                                                            kClasses);
    CHECK(status_of([&] { targets.labels(); }) == MPT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("a slice out of its dataset's rows throws INVALID_ARGUMENT") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 64);
    CHECK(status_of([&] { data.slice(0, 31); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(-1, 5); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(30, 1); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(10, 0); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(data.slice(29, 1).rows() == 1);
}

TEST_CASE("a subset of a slice has the listed rows in order, repeats included: their labels and predictions") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(30, 68, labels);
    auto context = cpu_context();
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    const auto subset = data.slice(10, 12).subset({5, 0, 5, 2});  // rows 15, 10, 15, 12 of `data`
    std::vector<float> copied_samples;
    std::vector<int32_t> copied_labels;
    for (int64_t row : {15, 10, 15, 12}) {
        copied_samples.insert(copied_samples.end(), samples.begin() + row * kFeatures, samples.begin() + (row + 1) * kFeatures);
        copied_labels.push_back(labels[static_cast<size_t>(row)]);
    }
    const auto copies = mptrain::Dataset::from_f32(context, copied_samples, kFeatures, copied_labels, kClasses);
    CHECK(subset.rows() == 4);
    CHECK(subset.labels() == copied_labels);
    CHECK(bits_of(trainer.predict(subset)) == bits_of(trainer.predict(copies)));
}

TEST_CASE("a subset of an index out of its dataset's rows or of no rows throws INVALID_ARGUMENT") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 69);
    CHECK(status_of([&] { data.subset({0, 1, 30}); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(20, 10).subset({-1}); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(20, 10).subset({10}); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.subset({}); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(data.subset({29}).rows() == 1);
}

namespace {

/** Blobs with feature f scaled by 3 (f + 1) and moved by 5 f - 4: features far from mean 0, stddev 1. */
std::vector<float> scaled_blob_samples(int64_t rows, unsigned seed, std::vector<int32_t>& labels) {
    std::vector<float> samples = blob_samples(rows, seed, labels);
    for (size_t i = 0; i < samples.size(); ++i) {
        const auto feature = static_cast<float>(static_cast<int64_t>(i) % kFeatures);
        samples[i] = samples[i] * 3.0f * (feature + 1.0f) + 5.0f * feature - 4.0f;
    }
    return samples;
}

}  // namespace

TEST_CASE("a dataset standardized by its own feature statistics has features of mean 0 and stddev 1, and trains") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = scaled_blob_samples(90, 70, labels);
    auto context = cpu_context();
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    const mptrain::FeatureStatistics raw = data.feature_statistics();
    REQUIRE(raw.mean.size() == static_cast<size_t>(kFeatures));
    REQUIRE(raw.stddev.size() == static_cast<size_t>(kFeatures));
    for (int64_t f = 0; f < kFeatures; ++f) {  // the population's, against a double reference
        double sum = 0.0, squares = 0.0;
        for (int64_t r = 0; r < 90; ++r) sum += samples[static_cast<size_t>(r * kFeatures + f)];
        const double mean = sum / 90.0;
        for (int64_t r = 0; r < 90; ++r) {
            const double d = samples[static_cast<size_t>(r * kFeatures + f)] - mean;
            squares += d * d;
        }
        CHECK(raw.mean[static_cast<size_t>(f)] == doctest::Approx(mean).epsilon(1e-6));
        CHECK(raw.stddev[static_cast<size_t>(f)] == doctest::Approx(std::sqrt(squares / 90.0)).epsilon(1e-6));
        CHECK(std::fabs(raw.stddev[static_cast<size_t>(f)] - 1.0f) > 0.5f);  // far from standardized
    }
    const auto standardized = data.standardized(raw.mean, raw.stddev);
    CHECK(standardized.rows() == 90);
    CHECK(standardized.labels() == labels);
    const mptrain::FeatureStatistics after = standardized.feature_statistics();
    for (size_t f = 0; f < static_cast<size_t>(kFeatures); ++f) {
        CHECK(std::fabs(after.mean[f]) < 1e-5f);
        CHECK(std::fabs(after.stddev[f] - 1.0f) < 1e-5f);
    }
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    trainer.fit(standardized, 3, 16);
    CHECK(trainer.progress().second == 3);
    CHECK(std::isfinite(trainer.evaluate(standardized).loss));
}

TEST_CASE("standardizing by a mean or stddev of the wrong size throws SHAPE_MISMATCH; a negative stddev INVALID_ARGUMENT") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 71);
    const std::vector<float> ones(kFeatures, 1.0f), zeros(kFeatures, 0.0f);
    CHECK(status_of([&] { data.standardized(std::vector<float>(kFeatures - 1, 0.0f), std::vector<float>(kFeatures - 1, 1.0f)); }) ==
          MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { data.standardized(std::vector<float>(kFeatures + 1, 0.0f), ones); }) == MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { data.standardized(zeros, std::vector<float>(kFeatures - 1, 1.0f)); }) == MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { data.standardized({}, {}); }) == MPT_STATUS_SHAPE_MISMATCH);
    std::vector<float> negative = ones;
    negative[2] = -1.0f;
    CHECK(status_of([&] { data.standardized(zeros, negative); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(data.standardized(zeros, ones).slice(10, 5).rows() == 5);
}

TEST_CASE("a model standardizing its inputs by a dataset's statistics trains on the raw rows and predicts from raw inputs as a plain copy from standardized ones") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = scaled_blob_samples(90, 72, labels);
    auto context = cpu_context();
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    const mptrain::FeatureStatistics statistics = data.feature_statistics();
    auto model = mlp(context);
    CHECK(!model.input_standardization().has_value());
    CHECK(&model.set_input_standardization(statistics.mean, statistics.stddev) == &model);
    const std::optional<mptrain::FeatureStatistics> read = model.input_standardization();
    REQUIRE(read.has_value());
    CHECK(bits_of(read->mean) == bits_of(statistics.mean));
    CHECK(bits_of(read->stddev) == bits_of(statistics.stddev));
    mptrain::Trainer trainer(model, adam());
    trainer.fit(data, 5, 16);
    CHECK(trainer.evaluate(data).accuracy > 0.9f);

    // The header's (x - mean) / stddev, each operation in float, for a plain model of the same weights.
    std::vector<float> standardized(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
        const size_t f = i % static_cast<size_t>(kFeatures);
        const float centred = samples[i] - statistics.mean[f];
        standardized[i] = centred / statistics.stddev[f];
    }
    auto plain = mlp(context);
    for (int64_t layer = 0; layer < model.layer_count(); ++layer) {
        const auto [weights, bias] = model.weights(layer);
        plain.set_weights(layer, weights, bias);
    }
    const std::vector<float> predicted = model.predict(samples);
    CHECK(bits_of(predicted) == bits_of(plain.predict(standardized)));
    CHECK(bits_of(predicted) != bits_of(plain.predict(samples)));
}

TEST_CASE("a model's input standardization is saved with it; cleared, it reads back as none and is not saved") {
    auto context = cpu_context();
    auto model = mlp(context);
    const std::vector<float> mean{0.5f, -1.25f, 3.0f, 0.0f}, stddev{2.0f, 0.75f, 1.5f, 0.0f};
    model.set_input_standardization(mean, stddev);
    std::vector<int32_t> labels;
    const std::vector<float> inputs = blob_samples(12, 73, labels);
    const std::vector<float> predicted = model.predict(inputs);
    TempDir directory;
    const std::string path = directory.file("standardizing.safetensors");
    model.save(path);
    {
        auto loaded = mptrain::Model::load(context, path);
        const auto kept = loaded.input_standardization();
        REQUIRE(kept.has_value());
        CHECK(bits_of(kept->mean) == bits_of(mean));
        CHECK(bits_of(kept->stddev) == bits_of(stddev));  // as set: the 0 not floored
        CHECK(bits_of(loaded.predict(inputs)) == bits_of(predicted));
    }
    CHECK(&model.clear_input_standardization() == &model);
    CHECK(!model.input_standardization().has_value());
    CHECK(bits_of(model.predict(inputs)) != bits_of(predicted));
    model.clear_input_standardization();  // none to remove: still none
    CHECK(!model.input_standardization().has_value());
    model.save(path);
    CHECK(!mptrain::Model::load(context, path).input_standardization().has_value());
}

TEST_CASE("a model's input standardization of the wrong size throws SHAPE_MISMATCH, a NaN mean or negative stddev INVALID_ARGUMENT, the model unchanged") {
    auto context = cpu_context();
    auto model = mlp(context);
    const std::vector<float> ones(kFeatures, 1.0f), zeros(kFeatures, 0.0f);
    model.set_input_standardization(zeros, ones);
    CHECK(status_of([&] {
              model.set_input_standardization(std::vector<float>(kFeatures - 1, 0.0f), std::vector<float>(kFeatures - 1, 1.0f));
          }) == MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { model.set_input_standardization(std::vector<float>(kFeatures + 1, 0.0f), ones); }) ==
          MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { model.set_input_standardization(zeros, std::vector<float>(kFeatures - 1, 1.0f)); }) ==
          MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { model.set_input_standardization({}, {}); }) == MPT_STATUS_SHAPE_MISMATCH);  // not a clear
    std::vector<float> nan_mean = zeros, negative = ones;
    nan_mean[1] = std::numeric_limits<float>::quiet_NaN();
    negative[2] = -1.0f;
    CHECK(status_of([&] { model.set_input_standardization(nan_mean, ones); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { model.set_input_standardization(zeros, negative); }) == MPT_STATUS_INVALID_ARGUMENT);
    const auto kept = model.input_standardization();
    REQUIRE(kept.has_value());
    CHECK(kept->mean == zeros);
    CHECK(kept->stddev == ones);
}

TEST_CASE("fitting a model that standardizes its inputs on a standardized dataset throws INVALID_ARGUMENT") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 74);
    const mptrain::FeatureStatistics statistics = data.feature_statistics();
    auto model = mlp(context);
    model.set_input_standardization(statistics.mean, statistics.stddev);
    mptrain::Trainer trainer(model, adam());
    const auto standardized = data.standardized(statistics.mean, statistics.stddev);
    CHECK(status_of([&] { trainer.fit(standardized, 1, 16); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(trainer.progress().second == 0);
    trainer.fit(data, 1, 16);  // the raw rows train
    CHECK(trainer.progress().second == 1);
}

TEST_CASE("a trainer destroyed by its own callback stops fit, which throws CANCELLED") {
    auto context = cpu_context();
    auto model = mlp(context);
    auto data = blobs(context, 120, 52);
    std::optional<mptrain::Trainer> trainer(std::in_place, model, adam());
    int calls = 0;
    trainer->set_callbacks([&](const mptrain::Progress&) {
        if (++calls == 2) trainer.reset();
        return false;
    });
    CHECK(status_of([&] { trainer->fit(data, 3, 8); }) == MPT_STATUS_CANCELLED);
    CHECK(calls == 2);  // none after the trainer was gone
    CHECK(!trainer.has_value());
    mptrain::Trainer other(model, adam());  // the model lives on and trains
    other.fit(data, 1, 8);
    CHECK(other.progress() == std::pair<int64_t, int64_t>{120 / 8, 1});
}

TEST_CASE("a moved-from trainer throws mptrain::Error from every call") {
    auto context = cpu_context();
    auto model = mlp(context);
    auto data = blobs(context, 120, 53);
    mptrain::Trainer trainer(model, adam());
    mptrain::Trainer owner = std::move(trainer);
    CHECK(status_of([&] { trainer.fit(data, 1, 8); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.set_callbacks([](const mptrain::Progress&) { return false; }); }) ==
          MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.progress(); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.evaluate(data); }) == MPT_STATUS_INVALID_ARGUMENT);
    owner.fit(data, 1, 8);  // the new owner has the handle and the callbacks
    CHECK(owner.progress() == std::pair<int64_t, int64_t>{120 / 8, 1});
}

TEST_CASE("load_cifar10 refuses a directory path holding NUL") {
    TempDir directory;  // exists but holds no CIFAR-10 files
    auto context = cpu_context();
    CHECK(status_of([&] { mptrain::Dataset::load_cifar10(context, directory.path.string(), true); }) ==
          MPT_STATUS_IO_ERROR);
    // C would stop reading at the NUL and fail on the bare directory, as above.
    const std::string with_nul = directory.path.string() + std::string(1, '\0') + "/cifar-10-batches-bin";
    CHECK(status_of([&] { mptrain::Dataset::load_cifar10(context, with_nul, true); }) == MPT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("buffers beyond the library's limit or any memory throw mptrain::Error, not std::bad_alloc") {
    auto context = cpu_context();
    // One 2^24 x 2^24 layer: 2^48 floats, more than any address space.
    mptrain::Model huge(context, int64_t{1} << 24);
    huge.add_dense(int64_t{1} << 24);
    CHECK(status_of([&] { huge.weights(0); }) == MPT_STATUS_OUT_OF_MEMORY);

    // 2^21 rows of 2^20 outputs are 2^41 floats, over the library's 2^40: refused as the library
    // refuses them (it checks the rows before the output count), before the output is allocated.
    mptrain::Model wide(context, 1);
    wide.add_dense(int64_t{1} << 20);
    const std::vector<float> inputs(size_t{1} << 21);
    float out = 0.0f;
    REQUIRE(mpt_model_predict(wide.get(), inputs.data(), static_cast<int64_t>(inputs.size()), &out, 1) ==
            MPT_STATUS_INVALID_ARGUMENT);
    const std::string library = mpt_last_error();
    CHECK(library == "the outputs (rows * output features) would hold more than 2^40 elements");
    mptrain::Trainer trainer(wide);
    for (const auto& predict : {std::function<void()>([&] { wide.predict(inputs); }),
                                std::function<void()>([&] { trainer.predict(inputs); })}) {
        try {
            predict();
            FAIL("predict accepted 2^41 outputs");
        } catch (const mptrain::Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(error.message() == library);
        }
    }

    // 4 rows of 2^62 + 1 features overflow int64_t (and wrapped to the 4 values given).
    const int64_t features = (int64_t{1} << 62) + 1;
    CHECK(status_of([&] {
              mptrain::Dataset::from_f32(context, std::vector<float>(4), features, std::vector<int32_t>(4), 2);
          }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { mptrain::Dataset::from_f32_targets(context, std::vector<float>(4), 1, std::vector<float>(4), features); }) ==
          MPT_STATUS_SHAPE_MISMATCH);
}

namespace {

// Every option set away from its default, the optimizer `optimizer` (RMSprop refuses Nesterov's momentum).
mptrain::TrainerOptions every_option(mpt_optimizer optimizer) {
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_MIXED_FP16)
        .loss(MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY)
        .huber_delta(2.5f)
        .label_smoothing(0.125f)
        .class_weights({0.5f, 2.0f, 1.25f})
        .learning_rate(0.03f)
        .momentum(0.75f, optimizer != MPT_OPTIMIZER_RMSPROP)
        .adam(0.8f, 0.95f, 1e-5f)
        .rmsprop(0.7f, 1e-6f)
        .rmsprop_centered(true)
        .weight_decay(0.01f)
        .global_clipnorm(0.9f)
        .ema_momentum(0.5f)
        .micro_batch_size(5)
        .lr_schedule(MPT_LR_SCHEDULE_COSINE, 3, 40, 0.25f)
        .loss_scaling(MPT_LOSS_SCALING_DYNAMIC, 64.0f)
        .loss_scaler_dynamics(4.0f, 0.25f, 3, 2.0f, 1024.0f)
        .optimizer(optimizer);
    return options;
}

}  // namespace

TEST_CASE("trainer options read back through the wrapper: the defaults, each value set, and a trainer's own") {
    const mptrain::TrainerOptions defaults;
    CHECK(defaults.precision() == MPT_PRECISION_AUTO);
    CHECK(defaults.optimizer() == MPT_OPTIMIZER_SGD);
    CHECK(defaults.learning_rate() == 0.01f);
    CHECK(defaults.class_weights().empty());
    CHECK(defaults.adam().beta2 == 0.999f);
    CHECK(defaults.lr_schedule().factor == 1.0f);
    CHECK(defaults.loss_scaler_dynamics().max_scale == 16777216.0f);
    CHECK(mptrain::TrainerOptions().optimizer(MPT_OPTIMIZER_ADAMW).weight_decay() == 0.004f);

    const mptrain::Context context = cpu_context();
    mptrain::Model model = mlp(context);
    mptrain::Trainer trainer(model, every_option(MPT_OPTIMIZER_ADAM));
    trainer.set_learning_rate(0.125f);
    const mptrain::TrainerOptions read = trainer.options();
    CHECK(read.precision() == MPT_PRECISION_MIXED_FP16);
    CHECK(read.loss() == MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
    CHECK(read.huber_delta() == 2.5f);
    CHECK(read.label_smoothing() == 0.125f);
    CHECK(read.class_weights() == std::vector<float>{0.5f, 2.0f, 1.25f});
    CHECK(read.optimizer() == MPT_OPTIMIZER_ADAM);
    CHECK(read.learning_rate() == 0.125f);
    CHECK(read.momentum().momentum == 0.75f);
    CHECK(read.momentum().nesterov);
    CHECK(read.adam().beta1 == 0.8f);
    CHECK(read.adam().beta2 == 0.95f);
    CHECK(read.adam().epsilon == 1e-6f);  // RMSprop's, set last: the two share it
    CHECK(read.lion().beta1 == 0.8f);
    CHECK(read.lion().beta2 == 0.95f);
    CHECK(read.rmsprop().rho == 0.7f);
    CHECK(read.rmsprop_centered());
    CHECK(read.weight_decay() == 0.01f);
    CHECK(read.global_clipnorm() == 0.9f);
    CHECK(read.ema_momentum() == 0.5f);
    CHECK(read.micro_batch_size() == 5);
    CHECK(read.lr_schedule().schedule == MPT_LR_SCHEDULE_COSINE);
    CHECK(read.lr_schedule().warmup_steps == 3);
    CHECK(read.lr_schedule().decay_steps == 40);
    CHECK(read.lr_schedule().factor == 0.25f);
    CHECK(read.loss_scaling().mode == MPT_LOSS_SCALING_DYNAMIC);
    CHECK(read.loss_scaling().initial_scale == 64.0f);
    CHECK(read.loss_scaler_dynamics().growth_factor == 4.0f);
    CHECK(read.loss_scaler_dynamics().backoff_factor == 0.25f);
    CHECK(read.loss_scaler_dynamics().growth_interval == 3);
    CHECK(read.loss_scaler_dynamics().min_scale == 2.0f);
    CHECK(read.loss_scaler_dynamics().max_scale == 1024.0f);
}

TEST_CASE("a trainer created from another's options through the wrapper trains bit for bit as that one") {
    for (mpt_optimizer optimizer : {MPT_OPTIMIZER_ADAMW, MPT_OPTIMIZER_RMSPROP}) {
        CAPTURE(optimizer);
        // Three contexts of one seed: the same initial weights, each trainer its own data set.
        const mptrain::Context contexts[3] = {cpu_context(), cpu_context(), cpu_context()};
        mptrain::Model first = mlp(contexts[0]), second = mlp(contexts[1]), plain = mlp(contexts[2]);
        mptrain::Trainer original(first, every_option(optimizer));
        mptrain::Trainer recreated(second, original.options());
        mptrain::Trainer untuned(plain);
        REQUIRE(weight_bits(second) == weight_bits(first));
        mptrain::Trainer* trainers[3] = {&original, &recreated, &untuned};
        for (int i = 0; i < 3; ++i) trainers[i]->fit(blobs(contexts[i], 90, 5), 3, 15);
        CHECK(weight_bits(second) == weight_bits(first));
        CHECK(weight_bits(plain) != weight_bits(first));
    }
}

TEST_CASE("a run resumes through the wrapper from its checkpoint alone, bit for bit; a model file gives no options") {
    TempDir directory;
    const std::string path = directory.file("run.safetensors");
    const mptrain::Context context = cpu_context();
    mptrain::Model model = mlp(context);
    mptrain::Trainer original(model, every_option(MPT_OPTIMIZER_ADAMW).micro_batch_size(0));
    const mptrain::Dataset data = blobs(context, 90, 5);
    original.fit(data, 2, 15);
    original.set_learning_rate(0.0125f);  // the run's rate, not its options': the file's
    original.save_checkpoint(path);

    const mptrain::Context elsewhere = cpu_context(99);  // another seed: everything from the file
    mptrain::Model resumed_model = mptrain::Model::load(elsewhere, path);
    const mptrain::TrainerOptions read = mptrain::TrainerOptions::from_checkpoint(path);
    CHECK(read.precision() == MPT_PRECISION_MIXED_FP16);
    CHECK(read.learning_rate() == 0.0125f);
    CHECK(read.weight_decay() == 0.01f);
    CHECK(read.class_weights() == std::vector<float>{0.5f, 2.0f, 1.25f});
    mptrain::Trainer resumed(resumed_model, read);
    resumed.load_checkpoint(path);
    original.fit(data, 2, 15);
    resumed.fit(blobs(elsewhere, 90, 5), 2, 15);
    CHECK(weight_bits(resumed_model) == weight_bits(model));

    const std::string model_path = directory.file("model.safetensors");
    model.save(model_path);
    CHECK(status_of([&] { mptrain::TrainerOptions::from_checkpoint(model_path); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { mptrain::TrainerOptions::from_checkpoint(directory.file("missing")); }) == MPT_STATUS_IO_ERROR);
}
