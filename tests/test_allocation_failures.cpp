// Every heap allocation made while saving and loading a model or a checkpoint, or while fitting,
// can fail: the call then returns OUT_OF_MEMORY (or succeeds, when the library could do without
// it), the process goes on, nothing is left half-changed, and the next undisturbed call works (a fit
// called again trains exactly what an undisturbed one does). The allocations are made to fail one at
// a time, the first, then the second, ..., until the calls make no more.
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "support/capi_fixture.h"
#include "support/failing_allocator.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;

namespace {

constexpr int64_t kRows = 64, kFeatures = 6, kHidden = 8, kClasses = 3;


struct Run {
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;

    // `micro_batch` > 0 runs each step's batch in micro-batches of that many rows; `clipnorm` > 0
    // clips the gradients by their global norm.
    explicit Run(bool fit_first = true, int64_t micro_batch = 0, float clipnorm = 0.0f) {
        mpt_test::TestRng rng(5);
        std::vector<float> samples(kRows * kFeatures);
        std::vector<int32_t> labels(kRows);
        for (int64_t r = 0; r < kRows; ++r) {
            labels[r] = static_cast<int32_t>(r % kClasses);
            for (int64_t f = 0; f < kFeatures; ++f)
                samples[r * kFeatures + f] = static_cast<float>(rng.normal()) + (f % kClasses == labels[r] ? 2.0f : 0.0f);
        }
        mpt_context_options_t* options = nullptr;
        REQUIRE_OK(mpt_context_options_create(&options));
        REQUIRE_OK(mpt_context_options_set_backend(options, MPT_BACKEND_CPU));
        REQUIRE_OK(mpt_context_options_set_threads(options, 1));  // the same allocations in every run
        REQUIRE_OK(mpt_context_create(options, &context));
        mpt_context_options_destroy(options);
        REQUIRE_OK(mpt_model_create(context, kFeatures, &model));
        REQUIRE_OK(mpt_model_add_dense(model, kHidden, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX));
        REQUIRE_OK(mpt_dataset_create_f32(context, samples.data(), kRows, kFeatures, labels.data(), kClasses, 1, &dataset));
        mpt_trainer_options_t* trainer_options = nullptr;
        REQUIRE_OK(mpt_trainer_options_create(&trainer_options));
        REQUIRE_OK(mpt_trainer_options_set_precision(trainer_options, MPT_PRECISION_MIXED_FP16));
        REQUIRE_OK(mpt_trainer_options_set_optimizer(trainer_options, MPT_OPTIMIZER_ADAM));
        if (micro_batch > 0) REQUIRE_OK(mpt_trainer_options_set_micro_batch_size(trainer_options, micro_batch));
        REQUIRE_OK(mpt_trainer_options_set_global_clipnorm(trainer_options, clipnorm));
        REQUIRE_OK(mpt_trainer_create(model, trainer_options, &trainer));
        mpt_trainer_options_destroy(trainer_options);
        if (fit_first) REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 16, 1));
    }
    ~Run() {
        mpt_trainer_destroy(trainer);
        mpt_dataset_destroy(dataset);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
};

std::vector<float> weights(mpt_model_t* model) { return mpt_test::two_layer_weights(model, kFeatures, kHidden, kClasses); }

using mpt_test::same_bits;

constexpr int64_t kFitEpochs = 2;

// `call` (returning a status) with the n-th allocation from now on made to fail; its status and
// whether that allocation was reached.
struct Outcome {
    mpt_status status;
    bool failed;
};
template <typename Call>
Outcome with_allocation_failing(uint64_t n, Call call) {
    mpt::testing::fail_allocation(n);
    const mpt_status status = call();
    mpt::testing::stop_failing_allocations();
    return {status, mpt::testing::allocation_failed()};
}

// The epoch-end callback's means, by epoch. Fixed arrays: the callback runs while allocations are
// being made to fail, and must make none of its own.
struct EpochMeans {
    float loss[kFitEpochs] = {};
    float accuracy[kFitEpochs] = {};
    bool seen[kFitEpochs] = {};

    static int record(int64_t epoch, float loss, float accuracy, void* user_data) {
        EpochMeans& means = *static_cast<EpochMeans*>(user_data);
        if (epoch >= 0 && epoch < kFitEpochs) {
            means.loss[epoch] = loss;
            means.accuracy[epoch] = accuracy;
            means.seen[epoch] = true;
        }
        return 0;
    }
};

void check_same_means(const EpochMeans& actual, const EpochMeans& expected) {
    for (int64_t epoch = 0; epoch < kFitEpochs; ++epoch) {
        CAPTURE(epoch);
        REQUIRE(expected.seen[epoch]);
        CHECK(actual.seen[epoch]);
        CHECK(same_bits(std::vector<float>{actual.loss[epoch], actual.accuracy[epoch]},
                        std::vector<float>{expected.loss[epoch], expected.accuracy[epoch]}));
    }
}

const char* const kCalls[] = {"mpt_model_save", "mpt_model_load", "mpt_trainer_save_checkpoint",
                              "mpt_trainer_load_checkpoint"};

}  // namespace

TEST_CASE("a failed allocation anywhere in saving or loading a model or checkpoint is OUT_OF_MEMORY, never an abort") {
    mpt_test::TempDir directory("mptrain-allocation-failures");
    const std::string model_path = (directory.path / "model.safetensors").string();
    const std::string checkpoint_path = (directory.path / "checkpoint.safetensors").string();
    Run run;
    REQUIRE_OK(mpt_model_save(run.model, model_path.c_str()));  // loads in a run whose save fails find this one
    REQUIRE_OK(mpt_trainer_save_checkpoint(run.trainer, checkpoint_path.c_str()));
    const std::vector<float> saved = weights(run.model);
    // The thread-local error message has its buffer before the first failure (as in any process that
    // has seen an error), so the counts below do not depend on which failure comes first.
    mpt_model_t* none = nullptr;
    CHECK(mpt_model_load(run.context, (directory.path / "absent-absent-absent-absent-absent-absent").c_str(), &none) ==
          MPT_STATUS_IO_ERROR);

    uint64_t failures = 0, allocations_in_a_run = 0;
    for (uint64_t n = 1;; ++n) {
        mpt_status statuses[4];
        mpt_model_t* loaded = nullptr;
        mpt::testing::fail_allocation(n);
        statuses[0] = mpt_model_save(run.model, model_path.c_str());
        statuses[1] = mpt_model_load(run.context, model_path.c_str(), &loaded);
        statuses[2] = mpt_trainer_save_checkpoint(run.trainer, checkpoint_path.c_str());
        statuses[3] = mpt_trainer_load_checkpoint(run.trainer, checkpoint_path.c_str());
        const uint64_t counted = mpt::testing::stop_failing_allocations();
        const bool failed = mpt::testing::allocation_failed();
        if (!failed) {
            allocations_in_a_run = counted;
            for (mpt_status status : statuses) CHECK(status == MPT_STATUS_OK);
            mpt_model_destroy(loaded);
            break;
        }
        CAPTURE(n);
        int not_ok = 0;
        for (int call = 0; call < 4; ++call) {
            if (statuses[call] == MPT_STATUS_OK) continue;
            ++not_ok;
            INFO(kCalls[call], " -> ", mpt_status_string(statuses[call]));
            CHECK(statuses[call] == MPT_STATUS_OUT_OF_MEMORY);
        }
        CHECK(not_ok <= 1);  // one allocation failed, so one call at most
        failures += not_ok;
        CHECK((loaded != nullptr) == (statuses[1] == MPT_STATUS_OK));
        if (loaded != nullptr) CHECK(same_bits(weights(loaded), saved));
        mpt_model_destroy(loaded);
        CHECK(same_bits(weights(run.model), saved));  // a failed load changed nothing, a good one restored the same
    }
    MESSAGE(allocations_in_a_run, " allocations in one save and load of each; ", failures, " of their failures failed a call");
    CHECK(allocations_in_a_run > 100);
    CHECK(failures > 0);

    // Undisturbed, everything works as before.
    REQUIRE_OK(mpt_model_save(run.model, model_path.c_str()));
    mpt_model_t* loaded = nullptr;
    REQUIRE_OK(mpt_model_load(run.context, model_path.c_str(), &loaded));
    CHECK(same_bits(weights(loaded), saved));
    mpt_model_destroy(loaded);
    REQUIRE_OK(mpt_trainer_save_checkpoint(run.trainer, checkpoint_path.c_str()));
    REQUIRE_OK(mpt_trainer_load_checkpoint(run.trainer, checkpoint_path.c_str()));
    CHECK(same_bits(weights(run.model), saved));
    REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 1, 16, 1));
}

TEST_CASE("a failed allocation anywhere in fit is OUT_OF_MEMORY, and fit called again trains what an undisturbed fit does") {
    // A fresh trainer: the fit plans its arenas, fills its first epoch order, grows its GEMM scratch,
    // all in the first step of its first epoch, which a failure restarts (the next case fails steps
    // inside an epoch).
    struct Setup {
        int64_t micro_batch;  // 6: micro-batches of 6, 6 and 4 rows
        float clipnorm;       // clipping reserves its scratch after the loss
    };
    for (const Setup setup : {Setup{0, 0.0f}, Setup{6, 0.0f}, Setup{0, 1.0f}, Setup{6, 1.0f}}) {
        const int64_t micro_batch = setup.micro_batch;
        CAPTURE(micro_batch);
        CAPTURE(setup.clipnorm);
        std::vector<float> undisturbed;
        int64_t undisturbed_steps = 0;
        EpochMeans undisturbed_means;
        {
            Run reference(false, micro_batch, setup.clipnorm);
            REQUIRE_OK(mpt_trainer_set_callbacks(reference.trainer, nullptr, &EpochMeans::record, &undisturbed_means));
            REQUIRE_OK(mpt_trainer_fit(reference.trainer, reference.dataset, kFitEpochs, 16, 1));
            undisturbed = weights(reference.model);
            REQUIRE_OK(mpt_trainer_get_progress(reference.trainer, &undisturbed_steps, nullptr));
            REQUIRE(undisturbed_steps == kFitEpochs * (kRows / 16));
        }
        // The step count (the host's, read without waiting for the device) counts every step that
        // ran once, failed fits included: a failed step must not count, nor a step run again.
        auto steps_of = [](const Run& run) {
            int64_t steps = -1;
            REQUIRE_OK(mpt_trainer_get_progress(run.trainer, &steps, nullptr));
            return steps;
        };
        uint64_t failures = 0;
        for (uint64_t n = 1;; ++n) {
            Run run(false, micro_batch, setup.clipnorm);
            EpochMeans means;
            REQUIRE_OK(mpt_trainer_set_callbacks(run.trainer, nullptr, &EpochMeans::record, &means));
            mpt::testing::fail_allocation(n);
            const mpt_status status = mpt_trainer_fit(run.trainer, run.dataset, kFitEpochs, 16, 1);
            const std::string message = mpt_last_error();
            mpt::testing::stop_failing_allocations();
            if (!mpt::testing::allocation_failed()) {
                CHECK(status == MPT_STATUS_OK);
                CHECK(same_bits(weights(run.model), undisturbed));
                CHECK(steps_of(run) == undisturbed_steps);
                check_same_means(means, undisturbed_means);
                MESSAGE((n - 1), " allocations in a first fit; ", failures, " of their failures failed it");
                CHECK(n > 10);
                break;
            }
            CAPTURE(n);
            if (status != MPT_STATUS_OK) {
                INFO(message);
                CHECK(status == MPT_STATUS_OUT_OF_MEMORY);
                ++failures;
                // An epoch the failed fit left unfinished is finished first and counts as one of its epochs.
                int64_t epochs = 0;
                REQUIRE_OK(mpt_trainer_get_progress(run.trainer, nullptr, &epochs));
                REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, kFitEpochs - epochs, 16, 1));
            }
            CHECK(same_bits(weights(run.model), undisturbed));
            CHECK(steps_of(run) == undisturbed_steps);
            check_same_means(means, undisturbed_means);
        }
        CHECK(failures > 0);
    }
}

namespace {

int stop_after_two_steps(int64_t, int64_t step, int64_t, float, float, void*) { return step == 2 ? 1 : 0; }
int stop_after_three_steps(int64_t, int64_t step, int64_t, float, float, void*) { return step == 3 ? 1 : 0; }

// A checkpoint of `setup`'s trainer 2 steps into its first epoch of 4, for a trainer that has run
// nothing yet: its first step and its first evaluate plan their memory and grow their scratch
// partway through, after the epoch's running loss and accuracy (which it restores) have been
// added to.
struct MidEpochCheckpoint {
    int64_t micro_batch;
    float clipnorm;
    std::string path;

    void save() const {
        Run run(false, micro_batch, clipnorm);
        REQUIRE_OK(mpt_trainer_set_callbacks(run.trainer, &stop_after_two_steps, nullptr, nullptr));
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, 16, 1) == MPT_STATUS_CANCELLED);
        REQUIRE_OK(mpt_trainer_save_checkpoint(run.trainer, path.c_str()));
    }
    void load_into(Run& run, EpochMeans& means) const {
        REQUIRE_OK(mpt_trainer_load_checkpoint(run.trainer, path.c_str()));
        REQUIRE_OK(mpt_trainer_set_callbacks(run.trainer, nullptr, &EpochMeans::record, &means));
    }
    // What the run it was taken from ends with, neither stopped nor resumed: its weights and epoch
    // means, which a disturbed run must end with too.
    struct Uninterrupted {
        std::vector<float> weights;
        EpochMeans means;
        void check(const Run& run, const EpochMeans& run_means) const {
            CHECK(same_bits(::weights(run.model), weights));
            check_same_means(run_means, means);
        }
    };
    Uninterrupted run_uninterrupted() const {
        Uninterrupted result;
        Run run(false, micro_batch, clipnorm);
        REQUIRE_OK(mpt_trainer_set_callbacks(run.trainer, nullptr, &EpochMeans::record, &result.means));
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, kFitEpochs, 16, 1));
        result.weights = weights(run.model);
        return result;
    }
};

}  // namespace

TEST_CASE("a fit that fails partway through a step takes that step's loss back out of the epoch's means") {
    mpt_test::TempDir directory("mptrain-allocation-failures");
    struct Setup {
        int64_t micro_batch;  // 6: micro-batches of 6, 6 and 4 rows
        float clipnorm;
    };
    for (const Setup setup : {Setup{0, 0.0f}, Setup{6, 0.0f}, Setup{0, 1.0f}, Setup{6, 1.0f}}) {
        CAPTURE(setup.micro_batch);
        CAPTURE(setup.clipnorm);
        const MidEpochCheckpoint checkpoint{setup.micro_batch, setup.clipnorm,
                                            (directory.path / "mid-epoch.safetensors").string()};
        checkpoint.save();
        const auto undisturbed = checkpoint.run_uninterrupted();
        uint64_t failures = 0;
        for (uint64_t n = 1;; ++n) {
            CAPTURE(n);
            Run run(false, setup.micro_batch, setup.clipnorm);
            EpochMeans means;
            checkpoint.load_into(run, means);
            const auto [status, failed] =
                with_allocation_failing(n, [&] { return mpt_trainer_fit(run.trainer, run.dataset, kFitEpochs, 16, 1); });
            if (status != MPT_STATUS_OK) {
                REQUIRE(status == MPT_STATUS_OUT_OF_MEMORY);
                ++failures;
                int64_t epochs = 0;
                REQUIRE_OK(mpt_trainer_get_progress(run.trainer, nullptr, &epochs));
                REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, kFitEpochs - epochs, 16, 1));
            }
            undisturbed.check(run, means);
            if (!failed) break;
        }
        MESSAGE(failures, " failed fits resuming an epoch in a new trainer");
        CHECK(failures > 0);
    }
}

TEST_CASE("an evaluate that fails partway leaves an interrupted epoch's running loss and accuracy as they were") {
    // Evaluate shares the metric accumulators with training. Between the third and fourth steps of
    // an epoch (the third run after the checkpoint of the first two: the metrics as that step left
    // them), at a batch size the trainer has not run, made to fail at each of its allocations in turn,
    // it leaves the epoch's means those of a run with no evaluate at all.
    mpt_test::TempDir directory("mptrain-allocation-failures");
    const MidEpochCheckpoint checkpoint{0, 0.0f, (directory.path / "mid-epoch.safetensors").string()};
    checkpoint.save();
    auto load_and_run_a_step = [&](Run& run, EpochMeans& means) {
        checkpoint.load_into(run, means);
        REQUIRE_OK(mpt_trainer_set_callbacks(run.trainer, &stop_after_three_steps, nullptr, nullptr));
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, 16, 1) == MPT_STATUS_CANCELLED);
        REQUIRE_OK(mpt_trainer_set_callbacks(run.trainer, nullptr, &EpochMeans::record, &means));
    };
    const auto undisturbed = checkpoint.run_uninterrupted();
    uint64_t failures = 0;
    for (uint64_t n = 1;; ++n) {
        CAPTURE(n);
        Run run(false);
        EpochMeans means;
        load_and_run_a_step(run, means);
        float loss = 0.0f, accuracy = 0.0f;
        const auto [status, failed] = with_allocation_failing(
            n, [&] { return mpt_trainer_evaluate(run.trainer, run.dataset, kRows, &loss, &accuracy); });
        CHECK((status == MPT_STATUS_OK || status == MPT_STATUS_OUT_OF_MEMORY));
        if (status != MPT_STATUS_OK) ++failures;
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, kFitEpochs, 16, 1));  // the first finishes epoch 0
        undisturbed.check(run, means);
        if (!failed) break;
    }
    MESSAGE(failures, " failed evaluates");
    CHECK(failures > 0);
}

TEST_CASE("a step of the caller's that fails partway inside an interrupted epoch changes nothing, its metrics included") {
    // A fresh trainer from a checkpoint 2 steps into an epoch runs a step at a batch it has not run
    // (new scratch partway through), made to fail at each allocation in turn: the trainer's
    // checkpoint after the failure is the one before it, byte for byte (weights, state, metrics).
    mpt_test::TempDir directory("mptrain-allocation-failures");
    for (const int64_t micro_batch : {int64_t{0}, int64_t{6}}) {
        CAPTURE(micro_batch);
        const MidEpochCheckpoint checkpoint{micro_batch, 1.0f, (directory.path / "mid-epoch.safetensors").string()};
        checkpoint.save();
        const std::string before_path = (directory.path / "before.safetensors").string();
        const std::string after_path = (directory.path / "after.safetensors").string();
        uint64_t failures = 0;
        for (uint64_t n = 1;; ++n) {
            CAPTURE(n);
            Run run(false, micro_batch, 1.0f);
            EpochMeans means;
            checkpoint.load_into(run, means);
            REQUIRE_OK(mpt_trainer_save_checkpoint(run.trainer, before_path.c_str()));
            float loss = 0.0f;
            const auto [status, failed] =
                with_allocation_failing(n, [&] { return mpt_trainer_step(run.trainer, run.dataset, 0, 2 * 16, &loss); });
            if (status != MPT_STATUS_OK) {
                CHECK(status == MPT_STATUS_OUT_OF_MEMORY);
                ++failures;
                REQUIRE_OK(mpt_trainer_save_checkpoint(run.trainer, after_path.c_str()));
                CHECK(mpt_test::file_bytes(after_path) == mpt_test::file_bytes(before_path));
            }
            if (!failed) break;
        }
        MESSAGE(failures, " failed steps");
        CHECK(failures > 0);
    }
}
