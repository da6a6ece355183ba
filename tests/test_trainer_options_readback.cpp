// Reading trainer options back: each getter against the header's documented defaults and the values
// set, the optimizer's own defaults (AdamW's decay, Lion's beta2) as they follow it, refused values
// leaving what was held, and mpt_trainer_get_options' copy of a trainer's options, which must create
// a trainer that trains bit for bit as the original.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace {

using mpt_test::Blobs;
using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;

// Every value the options hold, by name, through the getters (floats and integers are exact in a double).
using OptionValues = std::vector<std::pair<std::string, double>>;

OptionValues option_values(const mpt_trainer_options_t* options) {
    mpt_precision precision{};
    mpt_loss loss{};
    mpt_optimizer optimizer{};
    mpt_lr_schedule schedule{};
    mpt_loss_scaling scaling{};
    float huber = 0, smoothing = 0, rate = 0, momentum = 0, beta1 = 0, beta2 = 0, epsilon = 0, lion1 = 0, lion2 = 0,
          rho = 0, rms_epsilon = 0, decay = 0, clipnorm = 0, ema = 0, factor = 0, initial = 0, growth = 0,
          backoff = 0, low = 0, high = 0;
    int nesterov = -1, centered = -1;
    int64_t micro = -1, warmup = -1, decay_steps = -1, interval = -1, weights = -1;
    REQUIRE_OK(mpt_trainer_options_get_precision(options, &precision));
    REQUIRE_OK(mpt_trainer_options_get_loss(options, &loss));
    REQUIRE_OK(mpt_trainer_options_get_huber_delta(options, &huber));
    REQUIRE_OK(mpt_trainer_options_get_label_smoothing(options, &smoothing));
    REQUIRE_OK(mpt_trainer_options_get_class_weights(options, nullptr, 0, &weights));
    REQUIRE_OK(mpt_trainer_options_get_optimizer(options, &optimizer));
    REQUIRE_OK(mpt_trainer_options_get_learning_rate(options, &rate));
    REQUIRE_OK(mpt_trainer_options_get_momentum(options, &momentum, &nesterov));
    REQUIRE_OK(mpt_trainer_options_get_adam(options, &beta1, &beta2, &epsilon));
    REQUIRE_OK(mpt_trainer_options_get_lion(options, &lion1, &lion2));
    REQUIRE_OK(mpt_trainer_options_get_rmsprop(options, &rho, &rms_epsilon));
    REQUIRE_OK(mpt_trainer_options_get_rmsprop_centered(options, &centered));
    REQUIRE_OK(mpt_trainer_options_get_weight_decay(options, &decay));
    REQUIRE_OK(mpt_trainer_options_get_global_clipnorm(options, &clipnorm));
    REQUIRE_OK(mpt_trainer_options_get_ema(options, &ema));
    REQUIRE_OK(mpt_trainer_options_get_micro_batch_size(options, &micro));
    REQUIRE_OK(mpt_trainer_options_get_lr_schedule(options, &schedule, &warmup, &decay_steps, &factor));
    REQUIRE_OK(mpt_trainer_options_get_loss_scaling(options, &scaling, &initial));
    REQUIRE_OK(mpt_trainer_options_get_loss_scaler_dynamics(options, &growth, &backoff, &interval, &low, &high));
    return {{"precision", precision},     {"loss", loss},
            {"huber_delta", huber},       {"label_smoothing", smoothing},
            {"class weights", double(weights)}, {"optimizer", optimizer},
            {"learning_rate", rate},      {"momentum", momentum},
            {"nesterov", nesterov},       {"beta1", beta1},
            {"beta2", beta2},             {"epsilon", epsilon},
            {"lion beta1", lion1},        {"lion beta2", lion2},
            {"rho", rho},                 {"rmsprop epsilon", rms_epsilon},
            {"centered", centered},       {"weight_decay", decay},
            {"global_clipnorm", clipnorm}, {"ema", ema},
            {"micro_batch_size", double(micro)}, {"schedule", schedule},
            {"warmup_steps", double(warmup)}, {"decay_steps", double(decay_steps)},
            {"factor", factor},           {"loss_scaling", scaling},
            {"initial_scale", initial},   {"growth_factor", growth},
            {"backoff_factor", backoff},  {"growth_interval", double(interval)},
            {"min_scale", low},           {"max_scale", high}};
}

// `actual` holds `expected`'s values, name by name, bit for bit (a -0 is not a 0).
void check_values(const OptionValues& actual, const OptionValues& expected) {
    REQUIRE(actual.size() == expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
        CHECK(actual[i].first == expected[i].first);
        CHECK_MESSAGE(actual[i].second == expected[i].second,
                      actual[i].first << " reads " << actual[i].second << ", expected " << expected[i].second);
        CHECK_MESSAGE(std::signbit(actual[i].second) == std::signbit(expected[i].second),
                      actual[i].first << " reads " << actual[i].second << " with the wrong sign");
    }
}

// `values` with the ones named in `changes` replaced.
OptionValues with(OptionValues values, const OptionValues& changes) {
    for (const auto& change : changes) {
        bool found = false;
        for (auto& value : values)
            if (value.first == change.first) value.second = change.second, found = true;
        REQUIRE_MESSAGE(found, "no option named " << change.first);
    }
    return values;
}

// The defaults as mpt_trainer_options_create documents them, written out here.
const OptionValues& documented_defaults() {
    static const OptionValues defaults = {
        {"precision", MPT_PRECISION_AUTO},  {"loss", MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
        {"huber_delta", 1.0},              {"label_smoothing", 0.0},
        {"class weights", 0.0},            {"optimizer", MPT_OPTIMIZER_SGD},
        {"learning_rate", double(0.01f)},  {"momentum", 0.0},
        {"nesterov", 0.0},                 {"beta1", double(0.9f)},
        {"beta2", double(0.999f)},         {"epsilon", double(1e-7f)},
        {"lion beta1", double(0.9f)},      {"lion beta2", double(0.999f)},
        {"rho", double(0.9f)},             {"rmsprop epsilon", double(1e-7f)},
        {"centered", 0.0},                 {"weight_decay", 0.0},
        {"global_clipnorm", 0.0},          {"ema", 0.0},
        {"micro_batch_size", 0.0},         {"schedule", MPT_LR_SCHEDULE_CONSTANT},
        {"warmup_steps", 0.0},             {"decay_steps", 0.0},
        {"factor", 1.0},                   {"loss_scaling", MPT_LOSS_SCALING_DEFAULT},
        {"initial_scale", 32768.0},        {"growth_factor", 2.0},
        {"backoff_factor", 0.5},           {"growth_interval", 2000.0},
        {"min_scale", 1.0},                {"max_scale", 16777216.0}};
    return defaults;
}

struct Options {
    mpt_trainer_options_t* handle = nullptr;
    Options() { REQUIRE_OK(mpt_trainer_options_create(&handle)); }
    ~Options() { mpt_trainer_options_destroy(handle); }
    Options(const Options&) = delete;
    Options& operator=(const Options&) = delete;
};

// Sets a value other than the default of every option (loss and optimizer chosen so that the
// trainer reads them all that it can: Adam with clipping, averaging, a schedule and class weights).
void set_every_option(mpt_trainer_options_t* options) {
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_MIXED_BF16));
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_CATEGORICAL_CROSSENTROPY));
    REQUIRE_OK(mpt_trainer_options_set_huber_delta(options, 2.5f));
    REQUIRE_OK(mpt_trainer_options_set_label_smoothing(options, 0.125f));
    const float weights[3] = {0.5f, 2.0f, 1.25f};
    REQUIRE_OK(mpt_trainer_options_set_class_weights(options, weights, 3));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_ADAM));
    REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, 0.03f));
    REQUIRE_OK(mpt_trainer_options_set_momentum(options, 0.75f, 1));
    REQUIRE_OK(mpt_trainer_options_set_adam(options, 0.8f, 0.95f, 1e-5f));
    REQUIRE_OK(mpt_trainer_options_set_rmsprop(options, 0.7f, 1e-6f));  // its epsilon is Adam's too
    REQUIRE_OK(mpt_trainer_options_set_rmsprop_centered(options, 1));
    REQUIRE_OK(mpt_trainer_options_set_weight_decay(options, 0.01f));
    REQUIRE_OK(mpt_trainer_options_set_global_clipnorm(options, 0.9f));
    REQUIRE_OK(mpt_trainer_options_set_ema(options, 0.5f));
    REQUIRE_OK(mpt_trainer_options_set_micro_batch_size(options, 5));
    REQUIRE_OK(mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_COSINE, 3, 40, 0.25f));
    REQUIRE_OK(mpt_trainer_options_set_loss_scaling(options, MPT_LOSS_SCALING_DYNAMIC, 64.0f));
    REQUIRE_OK(mpt_trainer_options_set_loss_scaler_dynamics(options, 4.0f, 0.25f, 3, 2.0f, 1024.0f));
}

const OptionValues& every_option_set() {
    static const OptionValues values = with(
        documented_defaults(),
        {{"precision", MPT_PRECISION_MIXED_BF16}, {"loss", MPT_LOSS_CATEGORICAL_CROSSENTROPY},
         {"huber_delta", 2.5},                   {"label_smoothing", 0.125},
         {"class weights", 3.0},                 {"optimizer", MPT_OPTIMIZER_ADAM},
         {"learning_rate", double(0.03f)},       {"momentum", 0.75},
         {"nesterov", 1.0},                      {"beta1", double(0.8f)},
         {"beta2", double(0.95f)},               {"epsilon", double(1e-6f)},
         {"lion beta1", double(0.8f)},           {"lion beta2", double(0.95f)},
         {"rho", double(0.7f)},                  {"rmsprop epsilon", double(1e-6f)},
         {"centered", 1.0},                      {"weight_decay", double(0.01f)},
         {"global_clipnorm", double(0.9f)},      {"ema", 0.5},
         {"micro_batch_size", 5.0},              {"schedule", MPT_LR_SCHEDULE_COSINE},
         {"warmup_steps", 3.0},                  {"decay_steps", 40.0},
         {"factor", 0.25},                       {"loss_scaling", MPT_LOSS_SCALING_DYNAMIC},
         {"initial_scale", 64.0},                {"growth_factor", 4.0},
         {"backoff_factor", 0.25},               {"growth_interval", 3.0},
         {"min_scale", 2.0},                     {"max_scale", 1024.0}});
    return values;
}

float weight_decay_of(const mpt_trainer_options_t* options) {
    float decay = -1.0f;
    REQUIRE_OK(mpt_trainer_options_get_weight_decay(options, &decay));
    return decay;
}

std::pair<float, float> betas_of(const mpt_trainer_options_t* options) {
    float beta1 = -1.0f, beta2 = -1.0f;
    REQUIRE_OK(mpt_trainer_options_get_lion(options, &beta1, &beta2));
    return {beta1, beta2};
}

// A copy of `trainer`'s options, destroyed with it.
struct CopiedOptions {
    mpt_trainer_options_t* handle = nullptr;
    explicit CopiedOptions(const mpt_trainer_t* trainer) { REQUIRE_OK(mpt_trainer_get_options(trainer, &handle)); }
    ~CopiedOptions() { mpt_trainer_options_destroy(handle); }
    CopiedOptions(const CopiedOptions&) = delete;
    CopiedOptions& operator=(const CopiedOptions&) = delete;
};

}  // namespace

TEST_CASE("fresh trainer options read back the defaults the header documents") {
    Options options;
    check_values(option_values(options.handle), documented_defaults());
}

TEST_CASE("every option reads back the value set, and a refused value leaves the one held") {
    Options options;
    set_every_option(options.handle);
    check_values(option_values(options.handle), every_option_set());

    // Each refusal below is one its setter documents; none may change anything held.
    mpt_trainer_options_t* held = options.handle;
    const float negative_weights[3] = {1.0f, -1.0f, 1.0f};
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_precision(held, static_cast<mpt_precision>(99)));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss(held, static_cast<mpt_loss>(-1)));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_huber_delta(held, 0.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_label_smoothing(held, 1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_class_weights(held, negative_weights, 3));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_optimizer(held, static_cast<mpt_optimizer>(5)));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_learning_rate(held, NAN));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_momentum(held, 1.0f, 0));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_adam(held, 0.5f, 0.5f, 0.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lion(held, 0.5f, 1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_rmsprop(held, -0.5f, 1e-3f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_weight_decay(held, 1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_global_clipnorm(held, INFINITY));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_ema(held, 1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_micro_batch_size(held, -1));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_lr_schedule(held, MPT_LR_SCHEDULE_STEP, 0, 10, 0.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_loss_scaling(held, MPT_LOSS_SCALING_STATIC, -1.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_trainer_options_set_loss_scaler_dynamics(held, 2.0f, 0.5f, 10, 8.0f, 4.0f));
    check_values(option_values(held), every_option_set());
}

TEST_CASE("a -0 set reads back as 0, and the optimizer's defaults follow it until a decay or betas are set") {
    Options options;
    mpt_trainer_options_t* held = options.handle;
    REQUIRE_OK(mpt_trainer_options_set_momentum(held, -0.0f, 0));
    REQUIRE_OK(mpt_trainer_options_set_rmsprop(held, -0.0f, 1e-7f));
    REQUIRE_OK(mpt_trainer_options_set_global_clipnorm(held, -0.0f));
    REQUIRE_OK(mpt_trainer_options_set_ema(held, -0.0f));
    REQUIRE_OK(mpt_trainer_options_set_lion(held, -0.0f, 0.99f));
    REQUIRE_OK(mpt_trainer_options_set_label_smoothing(held, -0.0f));
    REQUIRE_OK(mpt_trainer_options_set_lr_schedule(held, MPT_LR_SCHEDULE_COSINE, 0, 10, -0.0f));
    check_values(option_values(held),
                 with(documented_defaults(), {{"rho", 0.0}, {"beta1", 0.0}, {"lion beta1", 0.0},
                                              {"beta2", double(0.99f)}, {"lion beta2", double(0.99f)},
                                              {"schedule", MPT_LR_SCHEDULE_COSINE}, {"decay_steps", 10.0},
                                              {"factor", 0.0}}));
    const float weights[3] = {1.0f, -0.0f, 2.0f};
    REQUIRE_OK(mpt_trainer_options_set_class_weights(held, weights, 3));
    float read[3] = {};
    int64_t count = 0;
    REQUIRE_OK(mpt_trainer_options_get_class_weights(held, read, 3, &count));
    CHECK(count == 3);
    CHECK_FALSE(std::signbit(read[1]));

    Options unset;
    REQUIRE_OK(mpt_trainer_options_set_optimizer(unset.handle, MPT_OPTIMIZER_ADAMW));
    CHECK(weight_decay_of(unset.handle) == 0.004f);
    REQUIRE_OK(mpt_trainer_options_set_optimizer(unset.handle, MPT_OPTIMIZER_LION));
    CHECK(weight_decay_of(unset.handle) == 0.0f);
    CHECK(betas_of(unset.handle) == std::make_pair(0.9f, 0.99f));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(unset.handle, MPT_OPTIMIZER_ADAM));
    CHECK(betas_of(unset.handle) == std::make_pair(0.9f, 0.999f));

    // Set before the optimizer or after, a decay of 0 and Adam's betas stay.
    Options chosen;
    REQUIRE_OK(mpt_trainer_options_set_weight_decay(chosen.handle, -0.0f));
    REQUIRE_OK(mpt_trainer_options_set_adam(chosen.handle, 0.9f, 0.999f, 1e-7f));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(chosen.handle, MPT_OPTIMIZER_ADAMW));
    CHECK(weight_decay_of(chosen.handle) == 0.0f);
    CHECK_FALSE(std::signbit(weight_decay_of(chosen.handle)));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(chosen.handle, MPT_OPTIMIZER_LION));
    CHECK(betas_of(chosen.handle) == std::make_pair(0.9f, 0.999f));
}

TEST_CASE("class weights read back through a capacity, and a short one writes nothing") {
    Options options;
    const float weights[4] = {1.5f, 0.0f, 2.0f, 0.25f};
    REQUIRE_OK(mpt_trainer_options_set_class_weights(options.handle, weights, 4));
    int64_t count = -1;
    REQUIRE_OK(mpt_trainer_options_get_class_weights(options.handle, nullptr, 0, &count));
    CHECK(count == 4);

    std::vector<float> read(6, -7.0f);
    count = -1;
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_options_get_class_weights(options.handle, read.data(), 3, &count));
    CHECK(count == -1);
    CHECK(read == std::vector<float>(6, -7.0f));
    REQUIRE_OK(mpt_trainer_options_get_class_weights(options.handle, read.data(), 6, &count));
    CHECK(count == 4);
    CHECK(read == std::vector<float>{1.5f, 0.0f, 2.0f, 0.25f, -7.0f, -7.0f});

    REQUIRE_OK(mpt_trainer_options_set_class_weights(options.handle, nullptr, 0));
    REQUIRE_OK(mpt_trainer_options_get_class_weights(options.handle, read.data(), 0, &count));
    CHECK(count == 0);
}

TEST_CASE("getters of several values write only those asked for; a NULL out or handle is refused") {
    Options options;
    set_every_option(options.handle);
    float beta2 = -1.0f, factor = -1.0f, max_scale = -1.0f, initial = -1.0f, epsilon = -1.0f;
    int nesterov = -1;
    REQUIRE_OK(mpt_trainer_options_get_adam(options.handle, nullptr, &beta2, nullptr));
    REQUIRE_OK(mpt_trainer_options_get_momentum(options.handle, nullptr, &nesterov));
    REQUIRE_OK(mpt_trainer_options_get_rmsprop(options.handle, nullptr, &epsilon));
    REQUIRE_OK(mpt_trainer_options_get_lr_schedule(options.handle, nullptr, nullptr, nullptr, &factor));
    REQUIRE_OK(mpt_trainer_options_get_loss_scaling(options.handle, nullptr, &initial));
    REQUIRE_OK(mpt_trainer_options_get_loss_scaler_dynamics(options.handle, nullptr, nullptr, nullptr, nullptr,
                                                            &max_scale));
    CHECK(beta2 == 0.95f);
    CHECK(nesterov == 1);
    CHECK(epsilon == 1e-6f);
    CHECK(factor == 0.25f);
    CHECK(initial == 64.0f);
    CHECK(max_scale == 1024.0f);

    float value = -1.0f;
    int64_t count = -1;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_get_learning_rate(options.handle, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_get_class_weights(options.handle, &value, 1, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_get_learning_rate(nullptr, &value));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_get_class_weights(nullptr, nullptr, 0, &count));
    CHECK(value == -1.0f);
    CHECK(count == -1);
    mpt_trainer_options_t* out = nullptr;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_get_options(nullptr, &out));
    CHECK(out == nullptr);
}

TEST_CASE("a trainer's options read back as created, with its base rate now, and outlive it") {
    BlobTrainerSetup setup;
    setup.configure = [](mpt_trainer_options_t* options) {
        set_every_option(options);
        // Sparse labels, which the blob data set has; the precision left to the trainer.
        REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY));
        REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_AUTO));
    };
    const OptionValues given =
        with(every_option_set(), {{"loss", MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY}, {"precision", MPT_PRECISION_AUTO}});
    auto trainer = std::make_unique<BlobTrainer>(setup);
    {
        CopiedOptions copy(trainer->trainer);
        check_values(option_values(copy.handle), given);
    }
    mpt_trainer_options_t* copy = nullptr;
    REQUIRE_OK(mpt_trainer_set_learning_rate(trainer->trainer, 0.125f));
    REQUIRE_OK(mpt_trainer_get_options(trainer->trainer, &copy));
    trainer.reset();  // the copy is the caller's own
    check_values(option_values(copy), with(given, {{"learning_rate", 0.125}}));
    mpt_trainer_options_destroy(copy);
}

TEST_CASE("a trainer created from another's options trains bit for bit as that one") {
    const Blobs blobs = mpt_test::make_blobs(90, 4, 1.0);
    for (mpt_optimizer optimizer : {MPT_OPTIMIZER_ADAMW, MPT_OPTIMIZER_LION, MPT_OPTIMIZER_RMSPROP, MPT_OPTIMIZER_SGD}) {
        CAPTURE(optimizer);
        BlobTrainerSetup setup;
        setup.configure = [optimizer](mpt_trainer_options_t* options) {
            set_every_option(options);
            REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY));
            REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_MIXED_FP16));
            REQUIRE_OK(mpt_trainer_options_set_momentum(options, 0.75f, 0));  // RMSprop refuses Nesterov's
            REQUIRE_OK(mpt_trainer_options_set_optimizer(options, optimizer));
        };
        BlobTrainer original(setup);
        BlobTrainerSetup plain;  // the same seed, so the same model weights
        BlobTrainer recreated(plain);
        mpt_trainer_destroy(recreated.trainer);
        recreated.trainer = nullptr;
        {
            CopiedOptions copy(original.trainer);
            REQUIRE_OK(mpt_trainer_create(recreated.model, copy.handle, &recreated.trainer));
        }
        REQUIRE(recreated.weights() == original.weights());
        for (BlobTrainer* trainer : {&original, &recreated}) {
            mpt_dataset_t* dataset = trainer->labels(blobs);
            REQUIRE_OK(mpt_trainer_fit(trainer->trainer, dataset, 3, 15, 1));
            mpt_dataset_destroy(dataset);
        }
        CHECK(recreated.weights() == original.weights());
        float original_scale = 0, recreated_scale = 0;
        REQUIRE_OK(mpt_trainer_get_loss_scale(original.trainer, &original_scale, nullptr, nullptr));
        REQUIRE_OK(mpt_trainer_get_loss_scale(recreated.trainer, &recreated_scale, nullptr, nullptr));
        CHECK(recreated_scale == original_scale);
        BlobTrainer plain_trainer(plain);  // the options matter: without them the run differs
        mpt_dataset_t* dataset = plain_trainer.labels(blobs);
        REQUIRE_OK(mpt_trainer_fit(plain_trainer.trainer, dataset, 3, 15, 1));
        mpt_dataset_destroy(dataset);
        CHECK(plain_trainer.weights() != original.weights());
    }
}

TEST_CASE("a copy of a trainer's options keeps what was set: changing its optimizer follows the defaults as the original would") {
    for (bool decay_set : {false, true}) {
        CAPTURE(decay_set);
        BlobTrainerSetup setup;
        setup.optimizer = MPT_OPTIMIZER_ADAMW;
        setup.weight_decay = decay_set ? 0.004f : -1.0f;  // the same value, set or the default
        BlobTrainer trainer(setup);
        CopiedOptions copy(trainer.trainer);
        CHECK(weight_decay_of(copy.handle) == 0.004f);
        REQUIRE_OK(mpt_trainer_options_set_optimizer(copy.handle, MPT_OPTIMIZER_SGD));
        CHECK(weight_decay_of(copy.handle) == (decay_set ? 0.004f : 0.0f));
        CHECK(betas_of(copy.handle) == std::make_pair(0.9f, 0.999f));
    }
    BlobTrainerSetup lion;
    lion.optimizer = MPT_OPTIMIZER_LION;
    BlobTrainer unset(lion);
    CopiedOptions unset_copy(unset.trainer);
    CHECK(betas_of(unset_copy.handle) == std::make_pair(0.9f, 0.99f));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(unset_copy.handle, MPT_OPTIMIZER_ADAM));
    CHECK(betas_of(unset_copy.handle) == std::make_pair(0.9f, 0.999f));
    lion.lion_beta1 = 0.9f;
    lion.lion_beta2 = 0.99f;
    BlobTrainer chosen(lion);
    CopiedOptions chosen_copy(chosen.trainer);
    REQUIRE_OK(mpt_trainer_options_set_optimizer(chosen_copy.handle, MPT_OPTIMIZER_ADAM));
    CHECK(betas_of(chosen_copy.handle) == std::make_pair(0.9f, 0.99f));
}

TEST_CASE("a trainer's options read from its epoch-end callback hold the rate the callback set") {
    const Blobs blobs = mpt_test::make_blobs(60, 8);
    BlobTrainer trainer(BlobTrainerSetup{});
    struct Seen {
        mpt_trainer_t* trainer;
        std::vector<float> rates;  // read from the copy, after each epoch's halving
    } seen{trainer.trainer, {}};
    const auto on_epoch_end = [](int64_t, float, float, void* user_data) -> int {
        auto& state = *static_cast<Seen*>(user_data);
        float rate = 0.0f;
        if (mpt_trainer_get_learning_rate(state.trainer, &rate) != MPT_STATUS_OK ||
            mpt_trainer_set_learning_rate(state.trainer, rate * 0.5f) != MPT_STATUS_OK)
            return 1;
        mpt_trainer_options_t* copy = nullptr;
        if (mpt_trainer_get_options(state.trainer, &copy) != MPT_STATUS_OK) return 1;
        const mpt_status status = mpt_trainer_options_get_learning_rate(copy, &rate);
        mpt_trainer_options_destroy(copy);
        state.rates.push_back(rate);
        return status != MPT_STATUS_OK;
    };
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, on_epoch_end, &seen));
    mpt_dataset_t* dataset = trainer.labels(blobs);
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 3, 15, 1));
    mpt_dataset_destroy(dataset);
    CHECK(seen.rates == std::vector<float>{0.025f, 0.0125f, 0.00625f});  // BlobTrainerSetup's 0.05, halved
}
