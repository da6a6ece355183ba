// test_checkpoint: automatic checkpoints: only the newest files kept, and an epoch whose checkpoint
// fails still gets its epoch-end callback, fit returning the failure.
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/harness.h"
#include "support/temp_dir.h"

using namespace mpt_test::checkpoint;

TEST_CASE("automatic checkpoints keep only the newest files") {
    TempDir directory;
    Run run(Options{});
    // Every 5 steps with 10 steps per epoch: steps 5, 10 (an epoch's last step), 15, 20.
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 5, 0, 100) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 2, kBatch, 1) == MPT_STATUS_OK);
    auto names_in = [&] {
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(directory.path))
            names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    };
    CHECK(names_in() ==
          std::vector<std::string>{"checkpoint-000000000005.safetensors", "checkpoint-000000000010.safetensors",
                                   "checkpoint-000000000015.safetensors", "checkpoint-000000000020.safetensors"});
    fs::remove_all(directory.path);
    fs::create_directory(directory.path);
    // Every 3 steps and every epoch, keeping 2: the newest are step 30 (epoch end) and step 27.
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 3, 1, 2) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
    CHECK(names_in() ==
          std::vector<std::string>{"checkpoint-000000000027.safetensors", "checkpoint-000000000030.safetensors"});
    fs::remove_all(directory.path);
    fs::create_directory(directory.path);
    // Every 2nd epoch of the trainer's life: three are done, so of the next four epochs the 4th and
    // 6th end due, at steps 40 and 60.
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 0, 2, 100) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 4, kBatch, 1) == MPT_STATUS_OK);
    CHECK(names_in() ==
          std::vector<std::string>{"checkpoint-000000000040.safetensors", "checkpoint-000000000060.safetensors"});
    CHECK(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 0, 0, 1) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(mpt_trainer_set_checkpointing(run.trainer, nullptr, 0, 0, 0) == MPT_STATUS_OK);
}

TEST_CASE("an epoch whose end-of-epoch checkpoint fails still gets its epoch-end callback; fit returns the failure") {
    TempDir directory;
    Run run(Options{});
    struct EpochEnds {
        std::vector<int64_t> epochs;
    } ends;
    REQUIRE(mpt_trainer_set_callbacks(
                run.trainer, nullptr,
                [](int64_t epoch, float, float, void* user_data) {
                    static_cast<EpochEnds*>(user_data)->epochs.push_back(epoch);
                    return 0;
                },
                &ends) == MPT_STATUS_OK);
    const fs::path going = directory.path / "going-away";
    fs::create_directory(going);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, going.c_str(), 0, 1, 1) == MPT_STATUS_OK);  // at epoch ends
    fs::remove(going);
    CHECK(mpt_trainer_fit(run.trainer, run.dataset, 3, kBatch, 1) == MPT_STATUS_IO_ERROR);
    CHECK(ends.epochs == std::vector<int64_t>{0});
    int64_t epochs = 0;
    REQUIRE(mpt_trainer_get_progress(run.trainer, nullptr, &epochs) == MPT_STATUS_OK);
    CHECK(epochs == 1);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, nullptr, 0, 0, 0) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 2, kBatch, 1) == MPT_STATUS_OK);
    CHECK(ends.epochs == std::vector<int64_t>{0, 1, 2});
}
