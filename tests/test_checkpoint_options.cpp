// A run resumed from its checkpoint alone: the model (mpt_model_load) and the trainer's options
// (mpt_trainer_options_create_from_checkpoint) read from the file, then the checkpoint loaded. The
// resumed run must end bit for bit as the run that went on, which also has the loader check every
// option read against the file's. Options are read back resolved (precision, loss scaling), and
// files that are no checkpoint, damaged, or whose options no trainer takes are refused.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/edited_header.h"
#include "support/temp_dir.h"

namespace {

using mpt_test::Blobs;
using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::float_bits_text;
using mpt_test::same_bits;

constexpr int64_t kBatch = 15;

// One run's options, and what it feeds: labels, or one-hot targets for a regression loss.
struct Recipe {
    const char* name;
    BlobTrainerSetup setup;
    bool targets = false;
};

mpt_dataset_t* data_for(mpt_context_t* context, const Recipe& recipe, const Blobs& blobs) {
    return recipe.targets ? mpt_test::blob_one_hot_rows(context, blobs) : mpt_test::blob_labels(context, blobs);
}

std::vector<Recipe> recipes() {
    std::vector<Recipe> all;
    {
        // fp16 with the default (dynamic) scaling starting at 2^24, so that steps overflow and the
        // scale moves; a schedule, label smoothing, class weights, clipping and averaging.
        BlobTrainerSetup setup;
        setup.precision = MPT_PRECISION_MIXED_FP16;
        setup.optimizer = MPT_OPTIMIZER_ADAM;
        setup.learning_rate = 0.02f;
        setup.initial_scale = 16777216.0f;
        setup.lr_schedule = MPT_LR_SCHEDULE_COSINE;
        setup.warmup_steps = 3;
        setup.decay_steps = 40;
        setup.label_smoothing = 0.1f;
        setup.class_weights = {0.5f, 2.0f, 1.25f};
        setup.global_clipnorm = 0.5f;
        setup.ema_momentum = 0.9f;
        setup.hidden_dropout = 0.25f;
        all.push_back({"fp16 Adam, everything", setup});
    }
    {
        BlobTrainerSetup setup;
        setup.optimizer = MPT_OPTIMIZER_SGD;
        setup.momentum = 0.8f;
        setup.nesterov = true;
        setup.weight_decay = 0.01f;
        setup.configure = [](mpt_trainer_options_t* options) {
            REQUIRE_OK(mpt_trainer_options_set_lr_schedule(options, MPT_LR_SCHEDULE_STEP, 2, 5, 0.5f));
        };
        all.push_back({"fp32 Nesterov SGD, decay, step schedule", setup});
    }
    {
        BlobTrainerSetup setup;
        setup.precision = MPT_PRECISION_MIXED_BF16;
        setup.optimizer = MPT_OPTIMIZER_RMSPROP;
        setup.rho = 0.8f;
        setup.rmsprop_centered = true;
        setup.momentum = 0.5f;
        setup.loss_scaling = MPT_LOSS_SCALING_STATIC;
        setup.initial_scale = 128.0f;
        setup.configure = [](mpt_trainer_options_t* options) {
            REQUIRE_OK(mpt_trainer_options_set_loss_scaler_dynamics(options, 4.0f, 0.25f, 7, 2.0f, 4096.0f));
        };
        all.push_back({"bf16 centered RMSprop, static scaling", setup});
    }
    {
        BlobTrainerSetup setup;
        setup.optimizer = MPT_OPTIMIZER_ADAMW;  // its default decay
        all.push_back({"AdamW", setup});
    }
    {
        BlobTrainerSetup setup;
        setup.optimizer = MPT_OPTIMIZER_LION;  // its default betas
        setup.learning_rate = 0.003f;
        setup.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
        all.push_back({"fp32 Lion, dynamic scaling", setup});
    }
    {
        BlobTrainerSetup setup;
        setup.loss = MPT_LOSS_HUBER;
        setup.head = MPT_ACTIVATION_LINEAR;
        setup.configure = [](mpt_trainer_options_t* options) {
            REQUIRE_OK(mpt_trainer_options_set_huber_delta(options, 0.3f));
        };
        all.push_back({"Huber loss", setup, true});
    }
    return all;
}

// What a created-from-checkpoint options handle must hold: `trainer`'s options, but for the
// precision and loss scaling it resolved and the micro-batch size no checkpoint records.
void check_read_options(const mpt_trainer_options_t* read, mpt_trainer_t* trainer) {
    mpt_trainer_options_t* expected = nullptr;
    REQUIRE_OK(mpt_trainer_get_options(trainer, &expected));
    mpt_precision precision{}, read_precision{};
    REQUIRE_OK(mpt_trainer_get_precision(trainer, &precision));
    REQUIRE_OK(mpt_trainer_options_get_precision(read, &read_precision));
    CHECK(read_precision == precision);
    int64_t micro = -1;
    REQUIRE_OK(mpt_trainer_options_get_micro_batch_size(read, &micro));
    CHECK(micro == 0);
    mpt_loss_scaling mode{};
    REQUIRE_OK(mpt_trainer_options_get_loss_scaling(read, &mode, nullptr));
    CHECK(mode != MPT_LOSS_SCALING_DEFAULT);
    // Everything else, getter by getter, as the trainer's own copy has it.
    const auto same_float = [&](auto getter, const char* name) {
        float a = -1.0f, b = -2.0f;
        REQUIRE_OK(getter(read, &a));
        REQUIRE_OK(getter(expected, &b));
        CHECK_MESSAGE(a == b, name << ": " << a << " read, the trainer's " << b);
    };
    same_float(mpt_trainer_options_get_learning_rate, "learning_rate");
    same_float(mpt_trainer_options_get_weight_decay, "weight_decay");
    same_float(mpt_trainer_options_get_label_smoothing, "label_smoothing");
    same_float(mpt_trainer_options_get_global_clipnorm, "global_clipnorm");
    same_float(mpt_trainer_options_get_ema, "ema");
    mpt_optimizer optimizer{}, expected_optimizer{};
    mpt_loss loss{}, expected_loss{};
    REQUIRE_OK(mpt_trainer_options_get_optimizer(read, &optimizer));
    REQUIRE_OK(mpt_trainer_options_get_optimizer(expected, &expected_optimizer));
    REQUIRE_OK(mpt_trainer_options_get_loss(read, &loss));
    REQUIRE_OK(mpt_trainer_options_get_loss(expected, &expected_loss));
    CHECK(optimizer == expected_optimizer);
    CHECK(loss == expected_loss);
    float beta[2][3], momentum[2];
    int nesterov[2];
    for (int i = 0; i < 2; ++i) {
        const mpt_trainer_options_t* options = i == 0 ? read : expected;
        REQUIRE_OK(mpt_trainer_options_get_adam(options, &beta[i][0], &beta[i][1], &beta[i][2]));
        REQUIRE_OK(mpt_trainer_options_get_momentum(options, &momentum[i], &nesterov[i]));
    }
    CHECK(std::vector<float>(beta[0], beta[0] + 3) == std::vector<float>(beta[1], beta[1] + 3));
    CHECK(momentum[0] == momentum[1]);
    CHECK(nesterov[0] == nesterov[1]);
    int64_t weights[2] = {-1, -1};
    REQUIRE_OK(mpt_trainer_options_get_class_weights(read, nullptr, 0, &weights[0]));
    REQUIRE_OK(mpt_trainer_options_get_class_weights(expected, nullptr, 0, &weights[1]));
    CHECK(weights[0] == weights[1]);
    mpt_trainer_options_destroy(expected);
}

// The file with its options' text edited: `from` (which must be there) replaced by `to`.
std::string with_options_edit(const mpt_test::TempDir& directory, const std::string& path, const std::string& from,
                              const std::string& to) {
    mpt_test::FileParts parts = mpt_test::split_file(path);
    const size_t at = parts.header.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, from << " not in " << parts.header);
    parts.header.replace(at, from.size(), to);
    return mpt_test::write_parts(directory.path / "edited.safetensors", parts.header, parts.data);
}

void check_refused(const std::string& path, mpt_status expected) {
    mpt_trainer_options_t* options = nullptr;
    CHECK_FAILS(expected, mpt_trainer_options_create_from_checkpoint(path.c_str(), &options));
    CHECK(options == nullptr);
    mpt_trainer_options_destroy(options);
}

}  // namespace

TEST_CASE("a run resumes from its checkpoint alone, the model and the options read from the file, bit for bit") {
    const Blobs blobs = mpt_test::make_blobs(90, 6, 1.0);
    mpt_test::TempDir directory("mptrain-checkpoint-options");
    for (const Recipe& recipe : recipes()) {
        CAPTURE(recipe.name);
        const std::string path = (directory.path / "run.safetensors").string();
        BlobTrainer original(recipe.setup);
        mpt_dataset_t* data = data_for(original.context, recipe, blobs);
        REQUIRE_OK(mpt_trainer_fit(original.trainer, data, 2, kBatch, 1));
        float rate = 0.0f;  // the run's base rate changed since its options: the file's is the run's
        REQUIRE_OK(mpt_trainer_get_learning_rate(original.trainer, &rate));
        REQUIRE_OK(mpt_trainer_set_learning_rate(original.trainer, rate * 0.5f));
        REQUIRE_OK(mpt_trainer_save_checkpoint(original.trainer, path.c_str()));

        // Another seed: what the resumed run has, it has from the file.
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 99);
        mpt_model_t* model = nullptr;
        mpt_trainer_options_t* options = nullptr;
        mpt_trainer_t* resumed = nullptr;
        REQUIRE_OK(mpt_model_load(context, path.c_str(), &model));
        REQUIRE_OK(mpt_trainer_options_create_from_checkpoint(path.c_str(), &options));
        check_read_options(options, original.trainer);
        REQUIRE_OK(mpt_trainer_create(model, options, &resumed));
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed, path.c_str()));
        int64_t saved_batch = 0;  // the batch size too: the resumed run fits on in the file's
        REQUIRE_OK(mpt_trainer_get_batch_size(resumed, &saved_batch));
        CHECK(saved_batch == kBatch);

        REQUIRE_OK(mpt_trainer_fit(original.trainer, data, 2, kBatch, 1));
        mpt_dataset_t* resumed_data = data_for(context, recipe, blobs);
        REQUIRE_OK(mpt_trainer_fit(resumed, resumed_data, 2, saved_batch, 1));
        CHECK(same_bits(mpt_test::blob_model_weights(model, original.hidden, original.outputs), original.weights()));
        float scales[2] = {0, 0};
        int64_t skipped[2] = {-1, -1};
        REQUIRE_OK(mpt_trainer_get_loss_scale(original.trainer, &scales[0], nullptr, &skipped[0]));
        REQUIRE_OK(mpt_trainer_get_loss_scale(resumed, &scales[1], nullptr, &skipped[1]));
        CHECK(scales[0] == scales[1]);
        CHECK(skipped[0] == skipped[1]);
        mpt_dataset_destroy(resumed_data);
        mpt_dataset_destroy(data);
        mpt_trainer_destroy(resumed);
        mpt_trainer_options_destroy(options);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
}

TEST_CASE("options read from a checkpoint are the ones the trainer ran, each set: AUTO and DEFAULT resolved") {
    mpt_test::TempDir directory("mptrain-checkpoint-options");
    const std::string path = (directory.path / "run.safetensors").string();
    struct Case {
        mpt_precision precision;
        mpt_loss_scaling scaling;
        mpt_loss_scaling expected_scaling;  // MPT_LOSS_SCALING_DEFAULT: whatever the precision resolved to
    };
    for (const Case& c : {Case{MPT_PRECISION_MIXED_FP16, MPT_LOSS_SCALING_DEFAULT, MPT_LOSS_SCALING_DYNAMIC},
                          Case{MPT_PRECISION_MIXED_BF16, MPT_LOSS_SCALING_DEFAULT, MPT_LOSS_SCALING_OFF},
                          Case{MPT_PRECISION_FP32, MPT_LOSS_SCALING_DEFAULT, MPT_LOSS_SCALING_OFF},
                          Case{MPT_PRECISION_FP32, MPT_LOSS_SCALING_STATIC, MPT_LOSS_SCALING_STATIC},
                          Case{MPT_PRECISION_AUTO, MPT_LOSS_SCALING_OFF, MPT_LOSS_SCALING_OFF}}) {
        CAPTURE(c.precision);
        CAPTURE(c.scaling);
        BlobTrainerSetup setup;
        setup.precision = c.precision;
        setup.loss_scaling = c.scaling;
        setup.optimizer = MPT_OPTIMIZER_ADAMW;
        setup.micro_batch_size = 4;
        BlobTrainer trainer(setup);
        REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, path.c_str()));
        mpt_trainer_options_t* options = nullptr;
        REQUIRE_OK(mpt_trainer_options_create_from_checkpoint(path.c_str(), &options));
        mpt_precision ran{}, read{};
        mpt_loss_scaling scaling{};
        REQUIRE_OK(mpt_trainer_get_precision(trainer.trainer, &ran));
        REQUIRE_OK(mpt_trainer_options_get_precision(options, &read));
        REQUIRE_OK(mpt_trainer_options_get_loss_scaling(options, &scaling, nullptr));
        CHECK(read == ran);
        CHECK(read != MPT_PRECISION_AUTO);
        CHECK(scaling == c.expected_scaling);
        check_read_options(options, trainer.trainer);
        // Every value is set: AdamW's decay stays when the optimizer changes, unlike a default.
        REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_SGD));
        float decay = -1.0f;
        REQUIRE_OK(mpt_trainer_options_get_weight_decay(options, &decay));
        CHECK(decay == 0.004f);
        mpt_trainer_options_destroy(options);
    }
}

TEST_CASE("a model file, a missing, damaged or future file gives no options and says why") {
    mpt_test::TempDir directory("mptrain-checkpoint-options");
    BlobTrainer trainer(BlobTrainerSetup{});
    const std::string model_path = (directory.path / "model.safetensors").string();
    const std::string path = (directory.path / "run.safetensors").string();
    REQUIRE_OK(mpt_model_save(trainer.model, model_path.c_str()));
    REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, path.c_str()));
    check_refused(model_path, MPT_STATUS_INVALID_ARGUMENT);
    check_refused((directory.path / "missing.safetensors").string(), MPT_STATUS_IO_ERROR);
    const std::string bytes = mpt_test::file_bytes(path);
    const std::string truncated = (directory.path / "truncated.safetensors").string();
    std::ofstream(truncated, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    check_refused(truncated, MPT_STATUS_CORRUPT_DATA);
    const std::string version = "\"mptrain.version\":\"";
    mpt_test::FileParts parts = mpt_test::split_file(path);
    const size_t at = parts.header.find(version);
    REQUIRE(at != std::string::npos);
    parts.header.replace(at + version.size(), 1, "9");
    check_refused(mpt_test::write_parts(directory.path / "future.safetensors", parts.header, parts.data),
                  MPT_STATUS_UNSUPPORTED);
    mpt_trainer_options_t* options = nullptr;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_create_from_checkpoint(nullptr, &options));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_create_from_checkpoint(path.c_str(), nullptr));
    CHECK(options == nullptr);
    REQUIRE_OK(mpt_trainer_options_create_from_checkpoint(path.c_str(), &options));  // the file itself is fine
    mpt_trainer_options_destroy(options);
}

TEST_CASE("options a checkpoint holds that no trainer takes, or that no mptrain writes, are corrupt data") {
    mpt_test::TempDir directory("mptrain-checkpoint-options");
    const std::string path = (directory.path / "run.safetensors").string();
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.lr_schedule = MPT_LR_SCHEDULE_LINEAR;
    setup.decay_steps = 10;
    setup.label_smoothing = 0.1f;
    BlobTrainer trainer(setup);
    REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, path.c_str()));
    const auto field = [](const std::string& name) { return "\\\"" + name + "\\\":"; };
    const std::string beta1 = field("beta1") + float_bits_text(0.9f);
    // The untouched text, written again, is taken: the edits below are what is refused.
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create_from_checkpoint(with_options_edit(directory, path, beta1, beta1).c_str(), &options));
    mpt_trainer_options_destroy(options);
    const std::string loss = field("loss") + "\\\"sparse_categorical_crossentropy\\\"";
    const std::string precision = field("precision") + "\\\"fp32\\\"";
    const std::string kind = field("kind") + "1";
    const std::string mode = field("mode") + "1";
    const std::string epsilon = field("epsilon") + float_bits_text(1e-7f);
    const std::string schedule = field("schedule") + "1";
    const std::vector<std::pair<std::string, std::string>> forgeries = {
        // Values no setter takes.
        {beta1, field("beta1") + float_bits_text(1.5f)},
        {beta1, field("beta1") + float_bits_text(std::nanf(""))},
        {epsilon, field("epsilon") + float_bits_text(0.0f)},
        {field("growth_interval") + "2000", field("growth_interval") + "0"},
        {field("min_scale") + float_bits_text(1.0f), field("min_scale") + float_bits_text(0.5f)},
        {field("decay_factor") + float_bits_text(0.0f), field("decay_factor") + float_bits_text(2.0f)},
        {field("decay_steps") + "10", field("decay_steps") + "0"},  // a linear decay over no steps
        {loss, field("loss") + "\\\"mean_squared_error\\\""},  // label smoothing with a loss that takes none
        // Values no mptrain writes.
        {precision, field("precision") + "\\\"auto\\\""},
        {precision, field("precision") + "\\\"fp64\\\""},
        {loss, field("loss") + "\\\"hinge\\\""},
        {kind, field("kind") + "9"},
        {mode, field("mode") + "0"},
        {schedule, field("schedule") + "7"},
        {beta1, field("beta1") + "0.9"},  // a JSON number, not a float's bits
        {loss, field("huber_delta") + float_bits_text(1.0f) + "," + loss},  // Huber's delta without the Huber loss
        {loss, field("label_smoothing") + float_bits_text(0.0f) + "," + loss},  // written only when not 0
        {loss, field("rmsprop_centered") + "true," + loss},  // only for RMSprop
        {loss, field("unknown_option") + "1," + loss},
    };
    for (const auto& [from, to] : forgeries) {
        CAPTURE(to);
        check_refused(with_options_edit(directory, path, from, to), MPT_STATUS_CORRUPT_DATA);
    }
}

TEST_CASE("a -0 that a file holds where the setters take -0 as 0 reads as 0, and loads into trainers of 0") {
    // mptrain wrote a schedule's factor and class weights of -0 before its setters took -0 as 0.
    mpt_test::TempDir directory("mptrain-checkpoint-options");
    const std::string path = (directory.path / "run.safetensors").string();
    BlobTrainerSetup setup;
    setup.lr_schedule = MPT_LR_SCHEDULE_COSINE;  // decaying to a factor of 0
    setup.decay_steps = 10;
    setup.class_weights = {1.0f, 0.0f, 2.0f};
    BlobTrainer trainer(setup);
    REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, path.c_str()));
    mpt_test::FileParts parts = mpt_test::split_file(path);
    const std::string factor = "\\\"decay_factor\\\":" + float_bits_text(0.0f);
    REQUIRE(parts.header.find(factor) != std::string::npos);
    parts.header.replace(parts.header.find(factor), factor.size(), "\\\"decay_factor\\\":" + float_bits_text(-0.0f));
    const float negative_weights[3] = {1.0f, -0.0f, 2.0f};
    mpt_test::replace_tensor_bytes(parts, "trainer.class_weights",
                                   std::string(reinterpret_cast<const char*>(negative_weights), sizeof negative_weights));
    const std::string forged = mpt_test::write_parts(directory.path / "negative.safetensors", parts.header, parts.data);

    REQUIRE_OK(mpt_trainer_load_checkpoint(trainer.trainer, forged.c_str()));
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create_from_checkpoint(forged.c_str(), &options));
    float read_factor = -1.0f, weights[3] = {-1.0f, -1.0f, -1.0f};
    int64_t count = 0;
    REQUIRE_OK(mpt_trainer_options_get_lr_schedule(options, nullptr, nullptr, nullptr, &read_factor));
    REQUIRE_OK(mpt_trainer_options_get_class_weights(options, weights, 3, &count));
    CHECK(read_factor == 0.0f);
    CHECK_FALSE(std::signbit(read_factor));
    CHECK_FALSE(std::signbit(weights[1]));
    // Options set to -0 now (taken as 0) load it too.
    BlobTrainerSetup negative = setup;
    negative.class_weights = {1.0f, -0.0f, 2.0f};
    negative.configure = [](mpt_trainer_options_t* set) {
        REQUIRE_OK(mpt_trainer_options_set_lr_schedule(set, MPT_LR_SCHEDULE_COSINE, 0, 10, -0.0f));
    };
    BlobTrainer negative_trainer(negative);
    REQUIRE_OK(mpt_trainer_load_checkpoint(negative_trainer.trainer, forged.c_str()));
    mpt_trainer_options_destroy(options);
}

namespace {

int64_t batch_size_of(const mpt_trainer_t* trainer) {
    int64_t rows = -1;
    REQUIRE_OK(mpt_trainer_get_batch_size(trainer, &rows));
    return rows;
}

// Reads the batch size from fit's progress callback and, on the second step, saves a checkpoint
// and stops fit: an epoch left unfinished.
struct MidEpoch {
    const mpt_trainer_t* trainer = nullptr;
    std::string checkpoint;
    std::vector<int64_t> seen;
    static int progress(int64_t, int64_t, int64_t, float, float, void* user_data) {
        auto* self = static_cast<MidEpoch*>(user_data);
        self->seen.push_back(batch_size_of(self->trainer));
        if (self->seen.size() < 2) return 0;
        REQUIRE_OK(mpt_trainer_save_checkpoint(const_cast<mpt_trainer_t*>(self->trainer), self->checkpoint.c_str()));
        return 1;
    }
};

}  // namespace

TEST_CASE("mpt_trainer_get_batch_size: the last training batch, whole, as a checkpoint restores it") {
    const Blobs blobs = mpt_test::make_blobs(90, 8, 1.0);
    mpt_test::TempDir directory("mptrain-batch-size");
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* data = trainer.labels(blobs);
    CHECK(batch_size_of(trainer.trainer) == 0);  // before any
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, data, 0, nullptr, nullptr));
    CHECK(batch_size_of(trainer.trainer) == 0);  // evaluating trains nothing
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, data, 1, 16, 1));
    CHECK(batch_size_of(trainer.trainer) == 16);
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, data, 3, 10, nullptr));
    CHECK(batch_size_of(trainer.trainer) == 10);
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, data, 1, 500, 1));
    CHECK(batch_size_of(trainer.trainer) == 90);  // the data set's rows, fewer than a batch
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(trainer.trainer, data, 1, 0, 1));
    CHECK(batch_size_of(trainer.trainer) == 90);  // a refused fit changes nothing
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, data, 0, 8, 1));
    CHECK(batch_size_of(trainer.trainer) == 90);  // nor one of no epochs, which issues no step
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_get_batch_size(trainer.trainer, nullptr));

    // Whole batches in micro-batches, and a checkpoint of a finished epoch restores the last step's rows.
    BlobTrainerSetup micro;
    micro.micro_batch_size = 4;
    BlobTrainer parts(micro);
    mpt_dataset_t* parts_data = parts.labels(blobs);
    REQUIRE_OK(mpt_trainer_fit(parts.trainer, parts_data, 1, 16, 1));
    CHECK(batch_size_of(parts.trainer) == 16);
    REQUIRE_OK(mpt_trainer_step(parts.trainer, parts_data, 0, 12, nullptr));
    const std::string finished = (directory.path / "finished.safetensors").string();
    REQUIRE_OK(mpt_trainer_save_checkpoint(parts.trainer, finished.c_str()));
    BlobTrainer finished_resumed(micro);
    CHECK(batch_size_of(finished_resumed.trainer) == 0);
    REQUIRE_OK(mpt_trainer_load_checkpoint(finished_resumed.trainer, finished.c_str()));
    CHECK(batch_size_of(finished_resumed.trainer) == 12);

    // Inside fit, from the progress callback: fit's. An epoch left unfinished keeps its batch size in
    // the checkpoint, whatever step ran since, since resuming it takes that size.
    MidEpoch mid;
    mid.trainer = trainer.trainer;
    mid.checkpoint = (directory.path / "mid-epoch.safetensors").string();
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, &MidEpoch::progress, nullptr, &mid));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(trainer.trainer, data, 1, 8, 1));
    CHECK(mid.seen == std::vector<int64_t>{8, 8});
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, data, 0, 20, nullptr));
    CHECK(batch_size_of(trainer.trainer) == 20);
    const std::string after_step = (directory.path / "after-step.safetensors").string();
    REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, after_step.c_str()));
    for (const std::string& path : {mid.checkpoint, after_step}) {
        CAPTURE(path);
        BlobTrainer resumed(BlobTrainerSetup{});
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
        CHECK(batch_size_of(resumed.trainer) == 8);
    }
    mpt_dataset_destroy(parts_data);
    mpt_dataset_destroy(data);
}

TEST_CASE("mpt_trainer_get_batch_size: a fit that fails before its first step leaves it, and a checkpoint with it") {
    // Budgets from too small for anything up to enough: each fit of batch 8 that runs out of memory
    // before a step (the epoch's row order, the step buffers) must leave a fresh trainer's 0, and
    // the first that trains must give 8.
    const Blobs blobs = mpt_test::make_blobs(20000, 9, 1.0);
    mpt_test::TempDir directory("mptrain-batch-size-failed");
    const std::string path = (directory.path / "failed.safetensors").string();
    int failed_before_a_step = 0;
    bool trained = false;
    for (size_t budget = 4096; budget < (size_t{64} << 20) && !trained; budget += budget / 8) {
        CAPTURE(budget);
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 3, budget);
        mpt_model_t* model = nullptr;
        mpt_dataset_t* data = nullptr;
        mpt_trainer_options_t* options = nullptr;
        mpt_trainer_t* trainer = nullptr;
        REQUIRE_OK(mpt_trainer_options_create(&options));
        REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
        if (mpt_model_create(context, mpt_test::kBlobFeatures, &model) == MPT_STATUS_OK &&
            mpt_model_add_dense(model, 8, MPT_ACTIVATION_RELU) == MPT_STATUS_OK &&
            mpt_model_add_dense(model, mpt_test::kBlobClasses, MPT_ACTIVATION_SOFTMAX) == MPT_STATUS_OK &&
            (data = mpt_test::blob_labels(context, blobs)) != nullptr &&
            mpt_trainer_create(model, options, &trainer) == MPT_STATUS_OK) {
            const mpt_status status = mpt_trainer_fit(trainer, data, 1, 8, 1);
            int64_t steps = -1;
            REQUIRE_OK(mpt_trainer_get_progress(trainer, &steps, nullptr));
            if (status == MPT_STATUS_OK) {
                trained = true;
                CHECK(batch_size_of(trainer) == 8);
            } else if (status == MPT_STATUS_OUT_OF_MEMORY && steps == 0) {
                ++failed_before_a_step;
                CHECK(batch_size_of(trainer) == 0);
                if (mpt_trainer_save_checkpoint(trainer, path.c_str()) == MPT_STATUS_OK) {
                    REQUIRE_OK(mpt_trainer_load_checkpoint(trainer, path.c_str()));
                    CHECK(batch_size_of(trainer) == 0);
                }
            }
        }
        mpt_trainer_destroy(trainer);
        mpt_trainer_options_destroy(options);
        mpt_dataset_destroy(data);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    CHECK(trained);
    CHECK(failed_before_a_step > 0);
    MESSAGE(failed_before_a_step << " budgets failed fit before its first step");
}

namespace {

struct Unfinished {
    int64_t steps = -1, rows = -1, batch_size = -1;
    bool operator==(const Unfinished& other) const {
        return steps == other.steps && rows == other.rows && batch_size == other.batch_size;
    }
};

doctest::String toString(const Unfinished& epoch) {
    return ("{" + std::to_string(epoch.steps) + ", " + std::to_string(epoch.rows) + ", " +
            std::to_string(epoch.batch_size) + "}")
        .c_str();
}

Unfinished unfinished_epoch_of(const mpt_trainer_t* trainer) {
    Unfinished epoch;
    REQUIRE_OK(mpt_trainer_get_unfinished_epoch(trainer, &epoch.steps, &epoch.rows, &epoch.batch_size));
    return epoch;
}

// Cancels fit at its `stop_at`th step, recording what the getter says of the epoch at each step.
struct CancelAt {
    const mpt_trainer_t* trainer = nullptr;
    int64_t stop_at = 0;
    std::vector<Unfinished> seen;
    static int progress(int64_t, int64_t step, int64_t, float, float, void* user_data) {
        auto* self = static_cast<CancelAt*>(user_data);
        self->seen.push_back(unfinished_epoch_of(self->trainer));
        return step == self->stop_at ? 1 : 0;
    }
};

}  // namespace

TEST_CASE("mpt_trainer_get_unfinished_epoch: the steps, rows and batch size of the epoch fit left, as a checkpoint keeps it") {
    const Blobs blobs = mpt_test::make_blobs(90, 8, 1.0), fewer = mpt_test::make_blobs(60, 9, 1.0);
    mpt_test::TempDir directory("mptrain-unfinished-epoch");
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* data = trainer.labels(blobs);
    mpt_dataset_t* other = trainer.labels(fewer);
    CHECK(unfinished_epoch_of(trainer.trainer) == Unfinished{0, 0, 0});  // before any fit
    REQUIRE_OK(mpt_trainer_get_unfinished_epoch(trainer.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, data, 1, 16, 1));
    CHECK(unfinished_epoch_of(trainer.trainer) == Unfinished{0, 0, 0});  // finished

    // Cancelled at the 3rd of 11 steps: from the callbacks, the epoch in progress; then 3 steps ran.
    CancelAt cancel{trainer.trainer, 3, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, &CancelAt::progress, nullptr, &cancel));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(trainer.trainer, data, 1, 8, 1));
    CHECK(cancel.seen == std::vector<Unfinished>{{1, 90, 8}, {2, 90, 8}, {3, 90, 8}});
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, nullptr, nullptr));
    CHECK(unfinished_epoch_of(trainer.trainer) == Unfinished{3, 90, 8});
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, data, 0, 20, nullptr));  // a step is no part of it
    CHECK(unfinished_epoch_of(trainer.trainer) == Unfinished{3, 90, 8});

    // A checkpoint keeps it, and the loading trainer reports it; its fit on the same data finishes it.
    const std::string path = (directory.path / "mid-epoch.safetensors").string();
    REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, path.c_str()));
    for (bool same_data : {true, false}) {
        CAPTURE(same_data);
        BlobTrainer resumed(BlobTrainerSetup{});
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
        CHECK(unfinished_epoch_of(resumed.trainer) == Unfinished{3, 90, 8});
        int64_t steps_before = 0, steps_after = 0, epochs = 0;
        REQUIRE_OK(mpt_trainer_get_progress(resumed.trainer, &steps_before, nullptr));
        mpt_dataset_t* resumed_data = same_data ? resumed.labels(blobs) : resumed.labels(fewer);
        REQUIRE_OK(mpt_trainer_fit(resumed.trainer, resumed_data, 1, 8, 1));
        REQUIRE_OK(mpt_trainer_get_progress(resumed.trainer, &steps_after, &epochs));
        // The same rows finish the epoch's 8 steps left; other rows abandon it for a new epoch of 7.
        CHECK(steps_after - steps_before == (same_data ? 8 : 7));
        CHECK(unfinished_epoch_of(resumed.trainer) == Unfinished{0, 0, 0});
        mpt_dataset_destroy(resumed_data);
    }

    // Abandoned by a fit on other data: the new epoch's, or none once that one finishes.
    CancelAt early{trainer.trainer, 2, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, &CancelAt::progress, nullptr, &early));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(trainer.trainer, other, 1, 8, 1));
    CHECK(unfinished_epoch_of(trainer.trainer) == Unfinished{2, 60, 8});
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, other, 1, 8, 1));
    CHECK(unfinished_epoch_of(trainer.trainer) == Unfinished{0, 0, 0});

    // Cancelled at an epoch's last step: every step ran, so nothing is left to finish.
    CancelAt last{trainer.trainer, 7, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, &CancelAt::progress, nullptr, &last));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(trainer.trainer, other, 2, 8, 1));
    CHECK(last.seen.back() == Unfinished{0, 0, 0});  // from the last step's callback: all ran
    CHECK(unfinished_epoch_of(trainer.trainer) == Unfinished{0, 0, 0});
    mpt_dataset_destroy(other);
    mpt_dataset_destroy(data);
}
