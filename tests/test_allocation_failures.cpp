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
#include "support/temp_dir.h"

namespace fs = std::filesystem;

namespace {

constexpr int64_t kRows = 64, kFeatures = 6, kHidden = 8, kClasses = 3;


struct Run {
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;

    explicit Run(bool fit_first = true) {
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

std::vector<float> weights(mpt_model_t* model) {
    std::vector<float> all;
    for (int64_t layer = 0; layer < 2; ++layer) {
        const int64_t units = layer == 0 ? kHidden : kClasses, inputs = layer == 0 ? kFeatures : kHidden;
        std::vector<float> w(static_cast<size_t>(units * inputs)), b(static_cast<size_t>(units));
        REQUIRE_OK(mpt_model_get_weights(model, layer, w.data(), units * inputs, b.data(), units));
        all.insert(all.end(), w.begin(), w.end());
        all.insert(all.end(), b.begin(), b.end());
    }
    return all;
}

using mpt_test::same_bits;

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
    // A fresh trainer: the fit plans its arenas, fills its first epoch order, grows its GEMM scratch.
    constexpr int64_t kEpochs = 2;
    std::vector<float> undisturbed;
    int64_t undisturbed_steps = 0;
    {
        Run reference(false);
        REQUIRE_OK(mpt_trainer_fit(reference.trainer, reference.dataset, kEpochs, 16, 1));
        undisturbed = weights(reference.model);
        REQUIRE_OK(mpt_trainer_get_progress(reference.trainer, &undisturbed_steps, nullptr));
        REQUIRE(undisturbed_steps == kEpochs * (kRows / 16));
    }
    // The step count (the host's, read without waiting for the device) counts every step that ran
    // once, failed fits included: a failed step must not count, nor a step run again.
    auto steps_of = [](const Run& run) {
        int64_t steps = -1;
        REQUIRE_OK(mpt_trainer_get_progress(run.trainer, &steps, nullptr));
        return steps;
    };
    uint64_t failures = 0;
    for (uint64_t n = 1;; ++n) {
        Run run(false);
        mpt::testing::fail_allocation(n);
        const mpt_status status = mpt_trainer_fit(run.trainer, run.dataset, kEpochs, 16, 1);
        const std::string message = mpt_last_error();
        mpt::testing::stop_failing_allocations();
        if (!mpt::testing::allocation_failed()) {
            CHECK(status == MPT_STATUS_OK);
            CHECK(same_bits(weights(run.model), undisturbed));
            CHECK(steps_of(run) == undisturbed_steps);
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
            REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, kEpochs - epochs, 16, 1));
        }
        CHECK(same_bits(weights(run.model), undisturbed));
        CHECK(steps_of(run) == undisturbed_steps);
    }
    CHECK(failures > 0);
}
