// Gradient accumulation (mpt_trainer_options_set_micro_batch_size): a step over a batch in
// micro-batches must be the step over the whole batch in one pass, but for rounding, whatever the
// precision, optimizer, loss, clipping, dropout, weighting and averaging; a micro-batch size at or
// above the batch must change no bit; an overflow in any one micro-batch must skip the whole step
// and leave nothing behind for the next; the step's memory must be planned for the micro-batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/temp_dir.h"

namespace {

using mpt_test::Blobs;
using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::kBlobClasses;
using mpt_test::kBlobFeatures;

constexpr int64_t kBatch = 48;
constexpr int64_t kSteps = 4;

// max |a - b| / max |b|: how far apart two weight vectors are, next to their size.
double normalised_distance(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double largest = 0.0, difference = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        largest = std::max(largest, std::fabs(static_cast<double>(b[i])));
        difference = std::max(difference, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    }
    return largest > 0.0 ? difference / largest : difference;
}

// How each case's data reaches the trainer.
enum class Data { labels, one_hot, weighted_labels, regression };

mpt_dataset_t* make_dataset(const BlobTrainer& trainer, const Blobs& blobs, Data data) {
    switch (data) {
        case Data::labels: return trainer.labels(blobs);
        case Data::one_hot:
        case Data::regression: return trainer.one_hot(blobs);
        case Data::weighted_labels: {
            mpt_dataset_t* plain = trainer.labels(blobs);
            std::vector<float> weights;
            for (int64_t r = 0; r < blobs.rows(); ++r) weights.push_back(0.25f + 0.5f * static_cast<float>(r % 5));
            mpt_dataset_t* weighted = nullptr;
            REQUIRE_OK(mpt_dataset_create_weighted(plain, weights.data(), blobs.rows(), &weighted));
            mpt_dataset_destroy(plain);
            return weighted;
        }
    }
    return nullptr;
}

// kSteps steps of `setup` over consecutive batches of kBatch rows: the weights after, each step's
// loss, and the skipped steps.
struct Run {
    std::vector<float> weights;
    std::vector<float> averages;  // the weights' moving averages, where the setup keeps them
    std::vector<float> losses;
    int64_t skipped = 0;
};
Run run_steps(const BlobTrainerSetup& setup, const Blobs& blobs, Data data) {
    BlobTrainer trainer(setup);
    mpt_dataset_t* dataset = make_dataset(trainer, blobs, data);
    Run run;
    for (int64_t s = 0; s < kSteps; ++s) {
        float loss = 0.0f;
        REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, s * kBatch, kBatch, &loss));
        run.losses.push_back(loss);
    }
    REQUIRE_OK(mpt_trainer_get_loss_scale(trainer.trainer, nullptr, nullptr, &run.skipped));
    mpt_dataset_destroy(dataset);
    run.weights = trainer.weights();
    if (setup.ema_momentum > 0.0f) {
        int holds = 0;
        REQUIRE_OK(mpt_trainer_swap_ema_weights(trainer.trainer, &holds));
        REQUIRE(holds == 1);
        run.averages = trainer.weights();
        REQUIRE_OK(mpt_trainer_swap_ema_weights(trainer.trainer, &holds));
    }
    return run;
}

struct Case {
    const char* name;
    BlobTrainerSetup setup;
    Data data = Data::labels;
};

std::vector<Case> cases() {
    std::vector<Case> all;
    auto add = [&](const char* name, BlobTrainerSetup setup, Data data = Data::labels) {
        setup.hidden = 32;
        all.push_back(Case{name, setup, data});
    };
    BlobTrainerSetup plain;
    add("plain SGD", plain);
    BlobTrainerSetup decayed = plain;
    decayed.weight_decay = 0.1f;
    decayed.lr_schedule = MPT_LR_SCHEDULE_COSINE;
    decayed.decay_steps = 6;
    add("plain SGD with weight decay and a cosine schedule", decayed);
    BlobTrainerSetup nesterov = plain;
    nesterov.momentum = 0.9f;
    nesterov.nesterov = true;
    nesterov.global_clipnorm = 0.3f;  // binds: the blobs' first gradients are larger
    add("Nesterov momentum, clipped", nesterov);
    BlobTrainerSetup adam = plain;
    adam.optimizer = MPT_OPTIMIZER_ADAMW;
    adam.learning_rate = 0.01f;
    adam.ema_momentum = 0.9f;
    add("AdamW with weight averaging, on weighted rows", adam, Data::weighted_labels);
    BlobTrainerSetup rmsprop = plain;
    rmsprop.optimizer = MPT_OPTIMIZER_RMSPROP;
    rmsprop.learning_rate = 0.005f;
    rmsprop.momentum = 0.5f;
    rmsprop.rmsprop_centered = true;
    rmsprop.class_weights = {1.0f, 2.0f, 0.5f};
    add("centered RMSprop with momentum and class weights", rmsprop);
    BlobTrainerSetup dropout = plain;
    dropout.hidden_dropout = 0.3f;
    dropout.input_dropout = 0.2f;
    add("dropout on the inputs and the hidden layer", dropout);
    BlobTrainerSetup smoothed = plain;
    smoothed.loss = MPT_LOSS_CATEGORICAL_CROSSENTROPY;
    smoothed.label_smoothing = 0.1f;
    add("one-hot cross-entropy with label smoothing", smoothed, Data::one_hot);
    BlobTrainerSetup regression = plain;
    regression.loss = MPT_LOSS_MEAN_SQUARED_ERROR;
    regression.head = MPT_ACTIVATION_LINEAR;
    add("mean squared error", regression, Data::regression);
    BlobTrainerSetup absolute = regression;
    absolute.loss = MPT_LOSS_MEAN_ABSOLUTE_ERROR;
    add("mean absolute error", absolute, Data::regression);
    BlobTrainerSetup huber = regression;
    huber.loss = MPT_LOSS_HUBER;
    add("Huber", huber, Data::regression);
    BlobTrainerSetup binary = plain;
    binary.loss = MPT_LOSS_BINARY_CROSSENTROPY;
    binary.head = MPT_ACTIVATION_SIGMOID;
    add("binary cross-entropy on sigmoid outputs", binary, Data::one_hot);
    BlobTrainerSetup adam_plain = plain;
    adam_plain.optimizer = MPT_OPTIMIZER_ADAM;
    adam_plain.learning_rate = 0.01f;
    add("Adam", adam_plain);
    return all;
}

// How far a run in micro-batches may be from the run in one pass: the sums' order only, in fp32;
// in 16 bits, also a rounding of a copy or activation that such a difference tips over.
double tolerance(mpt_precision precision) { return precision == MPT_PRECISION_FP32 ? 1e-6 : 1e-5; }

}  // namespace

TEST_CASE("a step in micro-batches is the step over the whole batch in one pass") {
    const Blobs blobs = mpt_test::make_blobs(kBatch * kSteps, 31);
    for (const mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
        for (const Case& c : cases()) {
            BlobTrainerSetup setup = c.setup;
            setup.precision = precision;
            const Run whole = run_steps(setup, blobs, c.data);
            // 16 rows: three even micro-batches; 20: 20, 20 and 8.
            for (const int64_t micro : {int64_t{16}, int64_t{20}}) {
                const std::string name = c.name;
                CAPTURE(name);
                CAPTURE(precision);
                CAPTURE(micro);
                setup.micro_batch_size = micro;
                const Run parts = run_steps(setup, blobs, c.data);
                setup.micro_batch_size = 0;
                CHECK(parts.skipped == whole.skipped);
                const double distance = normalised_distance(parts.weights, whole.weights);
                CHECK_MESSAGE(distance <= tolerance(precision), "weights apart by " << distance);
                // The average advances once a step, from the step's weights, not once a micro-batch
                // (nor not at all): its distance from one pass's is the weights' again.
                REQUIRE(parts.averages.size() == whole.averages.size());
                if (!whole.averages.empty()) {
                    const double averages_apart = normalised_distance(parts.averages, whole.averages);
                    CHECK_MESSAGE(averages_apart <= tolerance(precision), "averages apart by " << averages_apart);
                    CHECK(normalised_distance(whole.averages, whole.weights) > 10 * tolerance(precision));
                }
                for (int64_t s = 0; s < kSteps; ++s)
                    CHECK(parts.losses[s] == doctest::Approx(whole.losses[s]).epsilon(tolerance(precision)).scale(0));
                // The runs really train: a step in micro-batches that did nothing would be "close".
                CHECK(normalised_distance(whole.weights, BlobTrainer(setup).weights()) > 10 * tolerance(precision));
            }
        }
    }
}

TEST_CASE("a micro-batch size at or above the batch changes no bit") {
    const Blobs blobs = mpt_test::make_blobs(kBatch * kSteps, 5);
    for (const mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        BlobTrainerSetup setup;
        setup.precision = precision;
        setup.optimizer = MPT_OPTIMIZER_ADAM;
        setup.hidden_dropout = 0.25f;
        const Run whole = run_steps(setup, blobs, Data::labels);
        for (const int64_t micro : {kBatch, kBatch + 1, int64_t{1000}}) {
            CAPTURE(micro);
            setup.micro_batch_size = micro;
            const Run same = run_steps(setup, blobs, Data::labels);
            CHECK(mpt_test::same_bits(same.weights, whole.weights));
            CHECK(mpt_test::same_bits(same.losses, whole.losses));
        }
    }
}

// Sets the blob model's weights so that a row with feature 0 at x gives hidden activations of x
// (every hidden unit copies it) and logits small enough to stay finite, yet apart, so that
// softmax's gradient is 1 in size on every row not of class 2.
void set_copying_weights(const BlobTrainer& trainer) {
    std::vector<float> w1(static_cast<size_t>(trainer.hidden * kBlobFeatures), 0.0f), b1(static_cast<size_t>(trainer.hidden), 0.0f);
    for (int64_t unit = 0; unit < trainer.hidden; ++unit) w1[static_cast<size_t>(unit * kBlobFeatures)] = 1.0f;
    REQUIRE_OK(mpt_model_set_weights(trainer.model, 0, w1.data(), trainer.hidden * kBlobFeatures, b1.data(), trainer.hidden));
    std::vector<float> w2(static_cast<size_t>(kBlobClasses * trainer.hidden)), b2(kBlobClasses, 0.0f);
    for (int64_t k = 0; k < kBlobClasses; ++k)
        for (int64_t unit = 0; unit < trainer.hidden; ++unit)
            w2[static_cast<size_t>(k * trainer.hidden + unit)] = 1e-30f * static_cast<float>(k + 1);
    REQUIRE_OK(mpt_model_set_weights(trainer.model, 1, w2.data(), kBlobClasses * trainer.hidden, b2.data(), kBlobClasses));
}

TEST_CASE("an overflow in one micro-batch skips the whole step, and the next step is whole again") {
    // Rows 16-31 of the first batch, its second micro-batch of three, have hidden activations of
    // 3.3e38 (finite) and logits gradients of 1/48: their layer's weight gradient sums past FLT_MAX
    // over the whole batch (48 rows x 1/48 x 3.3e38), not over their 16 rows alone, which the
    // step's finiteness proof must see. The other rows and the second batch are ordinary.
    Blobs blobs = mpt_test::make_blobs(kBatch * 2, 11);
    for (int64_t r = 16; r < 32; ++r) blobs.x[static_cast<size_t>(r * kBlobFeatures)] = 3.3e38f;
    for (const mpt_loss_scaling scaling : {MPT_LOSS_SCALING_OFF, MPT_LOSS_SCALING_DYNAMIC}) {
        CAPTURE(scaling);
        BlobTrainerSetup setup;
        setup.optimizer = MPT_OPTIMIZER_ADAM;
        setup.loss_scaling = scaling;
        std::vector<float> after_clean_step[2], start;
        for (const int64_t micro : {int64_t{0}, int64_t{16}}) {
            CAPTURE(micro);
            setup.micro_batch_size = micro;
            BlobTrainer trainer(setup);
            set_copying_weights(trainer);
            mpt_dataset_t* dataset = trainer.labels(blobs);
            start = trainer.weights();
            float scale_before = 0.0f, scale_after = 0.0f;
            REQUIRE_OK(mpt_trainer_get_loss_scale(trainer.trainer, &scale_before, nullptr, nullptr));
            const mpt_status status = mpt_trainer_step(trainer.trainer, dataset, 0, kBatch, nullptr);
            // Without loss scaling a skipped step is an error; the dynamic scaler takes it as news.
            CHECK(status == (scaling == MPT_LOSS_SCALING_OFF ? MPT_STATUS_NON_FINITE : MPT_STATUS_OK));
            int64_t skipped = 0, steps = 0;
            REQUIRE_OK(mpt_trainer_get_loss_scale(trainer.trainer, &scale_after, nullptr, &skipped));
            REQUIRE_OK(mpt_trainer_get_progress(trainer.trainer, &steps, nullptr));
            CHECK(skipped == 1);
            CHECK(steps == 1);
            CHECK(mpt_test::same_bits(trainer.weights(), start));
            if (scaling == MPT_LOSS_SCALING_DYNAMIC) CHECK(scale_after == scale_before / 2.0f);
            // The next batch starts its sums afresh: nothing of the skipped step's is left in them.
            REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, kBatch, kBatch, nullptr));
            after_clean_step[micro == 0 ? 0 : 1] = trainer.weights();
            mpt_dataset_destroy(dataset);
        }
        CHECK(normalised_distance(after_clean_step[1], after_clean_step[0]) <= tolerance(MPT_PRECISION_FP32));
        CHECK(normalised_distance(after_clean_step[0], start) > 1e-3);
    }
}

namespace {

// What the fit cases train: 230 rows in batches of 30, 7 steps an epoch (20 rows dropped), each of
// micro-batches of 8, 8, 8 and 6 (setup_for_fit(8)), shuffled every epoch, by SGD with momentum
// through dropout.
constexpr int64_t kFitRows = 230;
BlobTrainerSetup setup_for_fit(int64_t micro_batch_size) {
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_SGD;
    setup.momentum = 0.9f;
    setup.hidden_dropout = 0.2f;
    setup.micro_batch_size = micro_batch_size;
    return setup;
}

}  // namespace

TEST_CASE("fit in micro-batches trains as fit in one pass, and a checkpoint resumes with any micro-batch size") {
    const Blobs blobs = mpt_test::make_blobs(kFitRows, 17);
    BlobTrainerSetup setup = setup_for_fit(0);
    auto fit = [&](int64_t micro, int64_t epochs, std::vector<float>* weights, float* loss) {
        setup.micro_batch_size = micro;
        BlobTrainer trainer(setup);
        mpt_dataset_t* dataset = trainer.labels(blobs);
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, epochs, 30, 1));
        int64_t steps = 0;
        REQUIRE_OK(mpt_trainer_get_progress(trainer.trainer, &steps, nullptr));
        CHECK(steps == 7 * epochs);
        REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 0, loss, nullptr));
        *weights = trainer.weights();
        mpt_dataset_destroy(dataset);
    };
    std::vector<float> whole, parts;
    float whole_loss = 0.0f, parts_loss = 0.0f;
    fit(0, 3, &whole, &whole_loss);
    fit(8, 3, &parts, &parts_loss);
    CHECK(normalised_distance(parts, whole) <= 1e-5);
    CHECK(parts_loss == doctest::Approx(whole_loss).epsilon(1e-5).scale(0));

    // A checkpoint taken after a step in micro-batches loads into a trainer that takes its steps in
    // one pass, and the other way round: the micro-batch size is how a step runs, not what it is.
    mpt_test::TempDir directory;
    const std::string path = (directory.path / "run.safetensors").string();
    std::vector<float> resumed[2];
    for (const int64_t first_micro : {int64_t{8}, int64_t{0}}) {
        setup.micro_batch_size = first_micro;
        {
            BlobTrainer trainer(setup);
            mpt_dataset_t* dataset = trainer.labels(blobs);
            REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, 30, nullptr));
            REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, path.c_str()));
            mpt_dataset_destroy(dataset);
        }
        setup.micro_batch_size = first_micro == 0 ? 8 : 0;
        BlobTrainer trainer(setup);
        mpt_dataset_t* dataset = trainer.labels(blobs);
        REQUIRE_OK(mpt_trainer_load_checkpoint(trainer.trainer, path.c_str()));
        REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 30, 30, nullptr));
        resumed[first_micro == 0 ? 0 : 1] = trainer.weights();
        mpt_dataset_destroy(dataset);
    }
    CHECK(normalised_distance(resumed[1], resumed[0]) <= 1e-5);
}

TEST_CASE("the step's memory is planned for the micro-batch, and evaluate takes it as its default batch") {
    const Blobs blobs = mpt_test::make_blobs(1024, 3);
    BlobTrainerSetup setup;
    setup.hidden = 1024;
    size_t planned[2] = {}, after_evaluate[2] = {};
    for (const int64_t micro : {int64_t{0}, int64_t{32}}) {
        setup.micro_batch_size = micro;
        BlobTrainer trainer(setup);
        mpt_dataset_t* dataset = trainer.labels(blobs);
        REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, 1024, nullptr));
        const int index = micro == 0 ? 0 : 1;
        REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &planned[index], nullptr));
        REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 0, nullptr, nullptr));
        REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &after_evaluate[index], nullptr));
        mpt_dataset_destroy(dataset);
    }
    // One pass keeps 1024 rows of 1024 activations (and their gradients and masks); micro-batches
    // keep 32 rows of them, and the sums (4 bytes a parameter, about 23 KB here).
    MESSAGE("planned bytes: " << planned[0] << " in one pass, " << planned[1] << " in micro-batches of 32");
    CHECK(planned[1] * 8 < planned[0]);
    CHECK(after_evaluate[0] == planned[0]);
    CHECK(after_evaluate[1] == planned[1]);  // evaluate ran in batches of 32, not of 1024
    {
        // predict_dataset's default is the micro-batch size too: no plan for 1024 rows.
        setup.micro_batch_size = 32;
        BlobTrainer trainer(setup);
        mpt_dataset_t* dataset = trainer.labels(blobs);
        REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, 1024, nullptr));
        size_t before = 0, after = 0;
        REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &before, nullptr));
        std::vector<float> outputs(static_cast<size_t>(1024 * kBlobClasses));
        REQUIRE_OK(mpt_trainer_predict_dataset(trainer.trainer, dataset, 0, outputs.data(),
                                               static_cast<int64_t>(outputs.size())));
        REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &after, nullptr));
        CHECK(after == before);
        // mpt_trainer_predict on 1024 rows runs in batches of 256 (the larger of 32 and 256): a plan
        // for 256 rows, well short of one for the 1024 of the last step's batch.
        REQUIRE_OK(mpt_trainer_predict(trainer.trainer, blobs.x.data(), 1024, outputs.data(),
                                       static_cast<int64_t>(outputs.size())));
        REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &after, nullptr));
        CHECK(after > before);
        CHECK(after * 2 < planned[0]);
        mpt_dataset_destroy(dataset);
    }

    // Micro-batches need no step memory for their gradients, whatever the optimizer's update needs
    // in one pass: plain SGD (no state, no gradient in one pass either), SGD with momentum (one
    // state) and Adam (two) then differ by their state arrays alone.
    size_t by_states[3] = {};
    for (int states = 0; states < 3; ++states) {
        setup.micro_batch_size = 32;
        setup.optimizer = states == 2 ? MPT_OPTIMIZER_ADAM : MPT_OPTIMIZER_SGD;
        setup.momentum = states == 1 ? 0.9f : 0.0f;
        BlobTrainer trainer(setup);
        mpt_dataset_t* dataset = trainer.labels(blobs);
        REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, 1024, nullptr));
        REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 0, nullptr, nullptr));
        REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &by_states[states], nullptr));
        mpt_dataset_destroy(dataset);
    }
    CHECK(by_states[1] > by_states[0]);
    CHECK(by_states[2] - by_states[1] == by_states[1] - by_states[0]);

    // Plans only grow: an evaluation's larger plan (made without gradient memory) serves the steps
    // after it, rather than a step planning again, and the next evaluation again.
    setup.micro_batch_size = 0;
    setup.optimizer = MPT_OPTIMIZER_SGD;
    setup.momentum = 0.9f;  // whole steps need a gradient in step memory
    BlobTrainer trainer(setup);
    mpt_dataset_t* dataset = trainer.labels(blobs);
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, 64, nullptr));
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 1024, nullptr, nullptr));
    size_t after_evaluation = 0, after_step = 0;
    REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &after_evaluation, nullptr));
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 64, 64, nullptr));
    REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &after_step, nullptr));
    CHECK(after_step == after_evaluation);
    mpt_dataset_destroy(dataset);

    // Plans only grow the other way round too: a plan made by an evaluation (no gradient memory)
    // that a whole step then needs gradient memory in is planned again for the evaluation's rows
    // as well, not for the step's fewer: the next evaluation plans nothing.
    BlobTrainer fresh(setup);
    dataset = fresh.labels(blobs);
    REQUIRE_OK(mpt_trainer_evaluate(fresh.trainer, dataset, 1024, nullptr, nullptr));
    size_t evaluated = 0, stepped = 0, evaluated_again = 0;
    REQUIRE_OK(mpt_trainer_get_memory(fresh.trainer, &evaluated, nullptr));
    REQUIRE_OK(mpt_trainer_step(fresh.trainer, dataset, 0, 64, nullptr));
    REQUIRE_OK(mpt_trainer_get_memory(fresh.trainer, &stepped, nullptr));
    REQUIRE_OK(mpt_trainer_evaluate(fresh.trainer, dataset, 1024, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_get_memory(fresh.trainer, &evaluated_again, nullptr));
    CHECK(stepped > evaluated);  // the gradient memory added to the 1024 rows' plan
    CHECK(evaluated_again == stepped);
    mpt_dataset_destroy(dataset);
}

TEST_CASE("the micro-batch size is refused below 0, and with no options") {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_micro_batch_size(options, -1));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_micro_batch_size(nullptr, 8));
    REQUIRE_OK(mpt_trainer_options_set_micro_batch_size(options, 0));
    REQUIRE_OK(mpt_trainer_options_set_micro_batch_size(options, 1));
    mpt_trainer_options_destroy(options);
}

TEST_CASE("fit in micro-batches, cancelled or checkpointed inside an epoch, resumes that epoch where it stopped") {
    // setup_for_fit's run, stopped at step 4 of the second epoch (from the progress callback, which
    // on the CPU sees every step as it ends), after a checkpoint there.
    const Blobs blobs = mpt_test::make_blobs(kFitRows, 17);
    BlobTrainerSetup setup = setup_for_fit(8);
    std::vector<float> uninterrupted;
    {
        BlobTrainer trainer(setup);
        mpt_dataset_t* dataset = trainer.labels(blobs);
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 3, 30, 1));
        uninterrupted = trainer.weights();
        mpt_dataset_destroy(dataset);
    }
    mpt_test::TempDir directory;
    struct Stop {
        std::string path;
        mpt_trainer_t* trainer;
    };
    auto save_and_cancel = [](int64_t epoch, int64_t step, int64_t, float, float, void* user) -> int {
        if (epoch != 1 || step != 4) return 0;
        const Stop& stop = *static_cast<const Stop*>(user);
        return mpt_trainer_save_checkpoint(stop.trainer, stop.path.c_str()) == MPT_STATUS_OK ? 1 : 0;
    };
    BlobTrainer trainer(setup);
    mpt_dataset_t* dataset = trainer.labels(blobs);
    Stop stop{(directory.path / "inside.safetensors").string(), trainer.trainer};
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, save_and_cancel, nullptr, &stop));
    CHECK(mpt_trainer_fit(trainer.trainer, dataset, 3, 30, 1) == MPT_STATUS_CANCELLED);
    int64_t steps = 0;
    REQUIRE_OK(mpt_trainer_get_progress(trainer.trainer, &steps, nullptr));
    CHECK(steps == 7 + 4);
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 2, 30, 1));  // the rest of epoch 2, then epoch 3
    REQUIRE_OK(mpt_trainer_get_progress(trainer.trainer, &steps, nullptr));
    CHECK(steps == 21);
    CHECK(mpt_test::same_bits(trainer.weights(), uninterrupted));
    mpt_dataset_destroy(dataset);

    // The checkpoint from inside the epoch, in a trainer of other micro-batches (5 rows: six a step)
    // or of none: the same run but for rounding.
    for (const int64_t micro : {int64_t{5}, int64_t{0}}) {
        CAPTURE(micro);
        setup.micro_batch_size = micro;
        BlobTrainer resumed(setup);
        mpt_dataset_t* data = resumed.labels(blobs);
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, stop.path.c_str()));
        REQUIRE_OK(mpt_trainer_fit(resumed.trainer, data, 2, 30, 1));
        REQUIRE_OK(mpt_trainer_get_progress(resumed.trainer, &steps, nullptr));
        CHECK(steps == 21);
        CHECK(normalised_distance(resumed.weights(), uninterrupted) <= 1e-5);
        mpt_dataset_destroy(data);
    }
}
