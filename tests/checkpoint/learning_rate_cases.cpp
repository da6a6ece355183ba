// test_checkpoint: the learning rate: the run's, changed from a callback or between fits, saved in
// checkpoints (the end-of-epoch one written after the epoch-end callback's change, also when it stops
// fit) and restored by them bit-identically.
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/harness.h"
#include "support/edited_header.h"
#include "support/temp_dir.h"

using namespace mpt_test::checkpoint;

namespace {

float learning_rate_of(const Run& run) {
    float rate = 0.0f;
    REQUIRE(mpt_trainer_get_learning_rate(run.trainer, &rate) == MPT_STATUS_OK);
    return rate;
}

// Halves the rate at every epoch's end: 0.01, 0.005, 0.0025, ... (exact in binary).
int halve_rate_at_epoch_end(int64_t, float, float, void* user) {
    mpt_trainer_t* trainer = static_cast<mpt_trainer_t*>(user);
    float rate = 0.0f;
    return mpt_trainer_get_learning_rate(trainer, &rate) != MPT_STATUS_OK ||
           mpt_trainer_set_learning_rate(trainer, rate / 2) != MPT_STATUS_OK;
}

float halved_rate(int64_t epochs_completed) { return std::ldexp(0.01f, -static_cast<int>(epochs_completed)); }

}  // namespace

TEST_CASE("a run whose epoch-end callback halves the rate resumes bit-identically from checkpoints that restore it") {
    TempDir directory;
    const Options options;  // learning rate 0.01
    std::vector<float> uninterrupted;
    {
        Run run(options);
        REQUIRE(mpt_trainer_set_callbacks(run.trainer, nullptr, halve_rate_at_epoch_end, run.trainer) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 7, 1, 100) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 3, kBatch, 1) == MPT_STATUS_OK);
        CHECK(learning_rate_of(run) == halved_rate(3));
        uninterrupted = run.weights();
    }
    {  // the schedule changed the run: the same fit at a constant rate ends elsewhere
        Run constant(options);
        REQUIRE(mpt_trainer_fit(constant.trainer, constant.dataset, 3, kBatch, 1) == MPT_STATUS_OK);
        CHECK_FALSE(same_bits(constant.weights(), uninterrupted));
    }
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(directory.path)) checkpoints.push_back(entry.path());
    // Steps 7, 14, 21, 28 inside epochs 0, 1, 2, 2; 10, 20, 30 at the ends of epochs 0, 1, 2.
    REQUIRE(checkpoints.size() == 7);
    for (const fs::path& checkpoint : checkpoints) {
        CAPTURE(checkpoint.string());
        Options other = options;
        other.learning_rate = 0.5f;  // the checkpoint's rate replaces the options'
        Run resumed(other);
        REQUIRE(load_checkpoint(resumed, checkpoint.string()).status == MPT_STATUS_OK);
        const Run::Scaler at = resumed.scaler();
        CHECK(learning_rate_of(resumed) == halved_rate(at.epochs));
        REQUIRE(mpt_trainer_set_callbacks(resumed.trainer, nullptr, halve_rate_at_epoch_end, resumed.trainer) ==
                MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(resumed.trainer, resumed.dataset, 3 - at.epochs, kBatch, 1) == MPT_STATUS_OK);
        CHECK(same_bits(resumed.weights(), uninterrupted));
    }
}

TEST_CASE("a rate set between fits or from a progress callback trains as a trainer created with it") {
    // fp32 SGD with momentum: every step is applied (no fp16 overflow skips the first ones).
    const Options sgd = options_for(MPT_PRECISION_FP32, MPT_OPTIMIZER_SGD, 1.0f);
    std::vector<float> created_fast;
    {
        Options fast = sgd;
        fast.learning_rate = 0.04f;
        Run run(fast);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        created_fast = run.weights();
    }
    {
        Run run(sgd);
        REQUIRE(mpt_trainer_set_learning_rate(run.trainer, 0.04f) == MPT_STATUS_OK);
        CHECK(learning_rate_of(run) == 0.04f);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        CHECK(same_bits(run.weights(), created_fast));
    }
    {  // a warm-up from the progress callback: 0.04 from the first step's report on, so from step 2
        Run run(sgd);
        auto warm_up = [](int64_t, int64_t step, int64_t, float, float, void* user) -> int {
            return step == 1 &&
                   mpt_trainer_set_learning_rate(static_cast<mpt_trainer_t*>(user), 0.04f) != MPT_STATUS_OK;
        };
        REQUIRE(mpt_trainer_set_callbacks(run.trainer, warm_up, nullptr, run.trainer) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        CHECK(learning_rate_of(run) == 0.04f);
        const std::vector<float> warmed = run.weights();
        CHECK_FALSE(same_bits(warmed, created_fast));  // its first step ran at 0.01
        Run slow(sgd);
        REQUIRE(mpt_trainer_fit(slow.trainer, slow.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        CHECK_FALSE(same_bits(warmed, slow.weights()));
    }
    Run run(sgd);
    for (float bad : {0.0f, -0.01f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        CHECK(mpt_trainer_set_learning_rate(run.trainer, bad) == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(learning_rate_of(run) == 0.01f);
    }
    CHECK(mpt_trainer_set_learning_rate(nullptr, 0.1f) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(mpt_trainer_get_learning_rate(run.trainer, nullptr) == MPT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("an end-of-epoch checkpoint is written after the epoch-end callback, also when it stops fit") {
    TempDir directory;
    Run run(Options{});
    struct Seen {
        mpt_trainer_t* trainer;
        fs::path directory;
        bool file_seen = false;
    } seen{run.trainer, directory.path};
    auto halve_and_stop = [](int64_t, float, float, void* user) -> int {
        auto* state = static_cast<Seen*>(user);
        state->file_seen = !fs::is_empty(state->directory);
        return halve_rate_at_epoch_end(0, 0, 0, state->trainer) == 0 ? 1 : 2;  // stop
    };
    REQUIRE(mpt_trainer_set_callbacks(run.trainer, nullptr, halve_and_stop, &seen) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 0, 1, 1) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 3, kBatch, 1) == MPT_STATUS_CANCELLED);
    CHECK_FALSE(seen.file_seen);  // the callback came first
    CHECK(learning_rate_of(run) == halved_rate(1));
    Run resumed(Options{});
    REQUIRE(load_checkpoint(resumed, (directory.path / "checkpoint-000000000010.safetensors").string()).status ==
            MPT_STATUS_OK);
    CHECK(learning_rate_of(resumed) == halved_rate(1));  // the rate the callback set for epoch 1
    CHECK(resumed.scaler() == run.scaler());
    CHECK(same_bits(resumed.weights(), run.weights()));
}

TEST_CASE("a checkpoint written when the learning rate was one of the options loads with that rate") {
    TempDir directory;
    const std::string path = (directory.path / "new.safetensors").string();
    Run run(Options{});
    REQUIRE(mpt_trainer_set_learning_rate(run.trainer, 0.25f) == MPT_STATUS_OK);
    stop_inside_second_epoch(run);
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const FileParts parts = split_file(path);
    // The older layout: the rate among the optimizer's options (in key order, after "kind"), none in
    // the progress.
    const std::string rate_entry = "\\\"learning_rate\\\":" + float_bits_text(0.25f) + ",";
    std::string older = parts.header;
    const size_t in_progress = older.find(rate_entry);
    REQUIRE(in_progress != std::string::npos);
    older.erase(in_progress, rate_entry.size());
    const std::string kind = "\\\"kind\\\":1,";  // Adam
    const size_t in_options = older.find(kind);
    REQUIRE(in_options != std::string::npos);
    older.insert(in_options + kind.size(), rate_entry);
    const std::string older_path = write_parts(directory.path / "older.safetensors", older, parts.data);

    Run resumed(Options{});
    REQUIRE(load_checkpoint(resumed, older_path).status == MPT_STATUS_OK);
    CHECK(learning_rate_of(resumed) == 0.25f);
    CHECK(resumed.scaler() == run.scaler());
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(resumed.trainer, resumed.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
    CHECK(same_bits(resumed.weights(), run.weights()));

    // Neither layout (the rate missing), both at once, or an options' rate that is no float's bits.
    std::string neither = parts.header;
    neither.erase(neither.find(rate_entry), rate_entry.size());
    std::string both = parts.header;
    both.insert(both.find(kind) + kind.size(), rate_entry);
    std::string null_rate = neither;
    null_rate.insert(null_rate.find(kind) + kind.size(), "\\\"learning_rate\\\":null,");
    Run refused(Options{});
    for (const auto& [name, header, named] :
         {std::make_tuple("neither", neither, "'/learning_rate' is missing"),
          std::make_tuple("both", both, "learning_rate is both among the options and in the progress"),
          std::make_tuple("null", null_rate, "the options' learning_rate must be a float's bit pattern, not null")}) {
        CAPTURE(name);
        const Refusal refusal = load_checkpoint(
            refused, write_parts(directory.path / (std::string(name) + ".safetensors"), header, parts.data));
        CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
        CHECK(refusal.message.find(named) != std::string::npos);
        CHECK(learning_rate_of(refused) == 0.01f);
    }
}
