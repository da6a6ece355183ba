// The optimizer's options through the C++ wrapper: learning-rate schedules, global_clipnorm and
// gradient_norm(), the weights' moving average (EMA), RMSprop and Lion, each with its refusals.

#include "wrapper_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace {

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

}  // namespace

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
