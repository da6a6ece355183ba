// test_checkpoint: files refused before anything changes: bad, mismatched and unwritable
// checkpoints, any one bit of a header flipped, old files without a header checksum, a loss scale,
// counters or options a trainer cannot take, each refusal naming what differs.
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/harness.h"
#include "support/edited_header.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

using namespace mpt_test::checkpoint;

TEST_CASE("bad, mismatched and unwritable checkpoints fail with a clear status and change nothing") {
    TempDir directory;
    const std::string path = (directory.path / "good.safetensors").string();
    Run run(Options{});
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const std::vector<float> before = run.weights();
    const Run::Scaler scaler_before = run.scaler();

    const std::string bytes = mpt_test::file_bytes(path);
    auto write = [&](const std::string& name, const std::string& content) {
        const std::string file = (directory.path / name).string();
        std::ofstream(file, std::ios::binary).write(content.data(), static_cast<std::streamsize>(content.size()));
        return file;
    };
    const std::string truncated = bytes.substr(0, bytes.size() / 2);
    std::string flipped = bytes;
    flipped[flipped.size() - 5] ^= 0x40;  // inside the last tensor: its checksum no longer matches
    CHECK(mpt_trainer_load_checkpoint(run.trainer, write("truncated", truncated).c_str()) == MPT_STATUS_CORRUPT_DATA);
    CHECK(mpt_trainer_load_checkpoint(run.trainer, write("flipped", flipped).c_str()) == MPT_STATUS_CORRUPT_DATA);
    CHECK(std::strlen(mpt_last_error()) > 0);
    CHECK(mpt_trainer_load_checkpoint(run.trainer, (directory.path / "missing").c_str()) == MPT_STATUS_IO_ERROR);

    // Other options, other architecture.
    Run other(options_for(MPT_PRECISION_MIXED_BF16, MPT_OPTIMIZER_ADAM, 16777216.0f));
    CHECK(mpt_trainer_load_checkpoint(other.trainer, path.c_str()) == MPT_STATUS_INVALID_ARGUMENT);
    mpt_model_t* wider = nullptr;
    REQUIRE(mpt_model_create(run.context, kFeatures, &wider) == MPT_STATUS_OK);
    mpt_model_add_dense(wider, 21, MPT_ACTIVATION_RELU);
    mpt_model_add_dense(wider, kClasses, MPT_ACTIVATION_SOFTMAX);
    mpt_trainer_t* wider_trainer = nullptr;
    REQUIRE(mpt_trainer_create(wider, nullptr, &wider_trainer) == MPT_STATUS_OK);
    CHECK(mpt_trainer_load_checkpoint(wider_trainer, path.c_str()) == MPT_STATUS_SHAPE_MISMATCH);
    mpt_trainer_destroy(wider_trainer);
    mpt_model_destroy(wider);

    // Unwritable destinations leave the previous checkpoint intact.
    CHECK(mpt_trainer_save_checkpoint(run.trainer, (directory.path / "no-such-dir" / "x.safetensors").c_str()) ==
          MPT_STATUS_IO_ERROR);
    // A checkpoint directory that is missing, or a file, is refused when set; one that goes away
    // after stops fit at its first checkpoint.
    CHECK(mpt_trainer_set_checkpointing(run.trainer, (directory.path / "no-such-dir").c_str(), 1, 0, 1) ==
          MPT_STATUS_IO_ERROR);
    CHECK(mpt_trainer_set_checkpointing(run.trainer, path.c_str(), 1, 0, 1) == MPT_STATUS_IO_ERROR);
    const std::filesystem::path going = directory.path / "going-away";
    std::filesystem::create_directory(going);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, going.c_str(), 1, 0, 1) == MPT_STATUS_OK);
    std::filesystem::remove(going);
    CHECK(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_IO_ERROR);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, nullptr, 0, 0, 0) == MPT_STATUS_OK);

    // Nothing above changed the trainer that refused the files... except the one step before the
    // failed automatic checkpoint; reloading the good checkpoint restores it exactly.
    REQUIRE(mpt_trainer_load_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const std::vector<float> after = run.weights();
    CHECK(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0);
    CHECK(run.scaler() == scaler_before);
}

namespace {

// Loads copies of the file at `path` with each bit of its header (length included) flipped in turn,
// through `load` (a path -> status); returns how many were not refused as CORRUPT_DATA, printing
// the first few.
template <typename Load>
int header_flips_not_refused(const std::string& path, const std::filesystem::path& directory, Load load) {
    const std::string good = mpt_test::file_bytes(path);
    const size_t header_end = 8 + split_file(path).header.size();
    const std::string damaged_path = (directory / "damaged.safetensors").string();
    int accepted = 0;
    for (size_t position = 0; position < header_end; ++position) {
        for (int bit = 0; bit < 8; ++bit) {
            std::string damaged = good;
            damaged[position] = static_cast<char>(damaged[position] ^ (1 << bit));
            std::ofstream(damaged_path, std::ios::binary).write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
            const mpt_status status = load(damaged_path);
            if (status != MPT_STATUS_CORRUPT_DATA && ++accepted <= 5) MESSAGE("position ", position, " bit ", bit, ": ", status);
        }
    }
    return accepted;
}

}  // namespace

TEST_CASE("a checkpoint with any one bit of its header flipped (metadata, tensor table, length) is refused and changes nothing") {
    TempDir directory;
    const std::string path = (directory.path / "good.safetensors").string();
    Run run(Options{});
    stop_inside_second_epoch(run);
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const std::vector<float> before = run.weights();
    const Run::Scaler scaler_before = run.scaler();
    CHECK(header_flips_not_refused(path, directory.path, [&](const std::string& damaged) {
              return mpt_trainer_load_checkpoint(run.trainer, damaged.c_str());
          }) == 0);
    CHECK(same_bits(run.weights(), before));
    CHECK(run.scaler() == scaler_before);
}

TEST_CASE("a model file with any one bit of its header flipped is refused as corrupt") {
    TempDir directory;
    const std::string path = (directory.path / "model.safetensors").string();
    Run run(Options{});
    REQUIRE(mpt_model_save(run.model, path.c_str()) == MPT_STATUS_OK);
    CHECK(header_flips_not_refused(path, directory.path, [&](const std::string& damaged) {
              mpt_model_t* loaded = nullptr;
              const mpt_status status = mpt_model_load(run.context, damaged.c_str(), &loaded);
              mpt_model_destroy(loaded);
              return status;
          }) == 0);
}

TEST_CASE("files written before headers had a checksum still load, unless their header holds an entry mptrain never wrote") {
    TempDir directory;
    Run run(Options{});
    stop_inside_second_epoch(run);
    const std::string checkpoint = (directory.path / "checkpoint.safetensors").string();
    const std::string model = (directory.path / "model.safetensors").string();
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, checkpoint.c_str()) == MPT_STATUS_OK);
    REQUIRE(mpt_model_save(run.model, model.c_str()) == MPT_STATUS_OK);
    const std::vector<float> saved = run.weights();
    const Run::Scaler saved_scaler = run.scaler();

    const FileParts checkpoint_parts = split_file(checkpoint), model_parts = split_file(model);
    const std::string old_checkpoint =
        write_parts(directory.path / "old-checkpoint.safetensors", without_header_checksum(checkpoint_parts.header),
                    checkpoint_parts.data);
    const std::string old_model =
        write_parts(directory.path / "old-model.safetensors", without_header_checksum(model_parts.header), model_parts.data);

    Run resumed(Options{});
    REQUIRE(load_checkpoint(resumed, old_checkpoint).status == MPT_STATUS_OK);
    CHECK(same_bits(resumed.weights(), saved));
    CHECK(resumed.scaler() == saved_scaler);
    mpt_model_t* loaded = nullptr;
    REQUIRE(mpt_model_load(run.context, old_model.c_str(), &loaded) == MPT_STATUS_OK);
    mpt_model_destroy(loaded);

    // A damaged key in an old file (or in the new one's checksum key, which makes it look old).
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"\"mptrain.precision\"", "\"mptrain.precisiom\""}, {"\"mptrain.crc32c.__metadata__\"", "\"mptrain.crc32b.__metadata__\""}}) {
        CAPTURE(to);
        std::string header = to.find("crc32b") != std::string::npos ? checkpoint_parts.header
                                                                     : without_header_checksum(checkpoint_parts.header);
        const size_t at = header.find(from);
        REQUIRE(at != std::string::npos);
        header.replace(at, from.size(), to);
        const std::string edited = write_parts(directory.path / "edited.safetensors", header, checkpoint_parts.data);
        const Refusal refusal = load_checkpoint(resumed, edited);
        CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
        CHECK(refusal.message.find("no checksum") != std::string::npos);
        CHECK(mpt_model_load(run.context, edited.c_str(), &loaded) == MPT_STATUS_CORRUPT_DATA);
    }
}

TEST_CASE("a checkpoint whose loss scale or growth tracker the trainer's loss scaler cannot reach is refused, naming the field") {
    struct Edit {
        const char* field;
        std::string value;
    };
    struct Setup {
        Options options;
        std::vector<Edit> edits;
    };
    const float inf = std::numeric_limits<float>::infinity();
    Options static_scaling;
    static_scaling.loss_scaling = MPT_LOSS_SCALING_STATIC;
    static_scaling.initial_scale = 1024.0f;
    const std::vector<Setup> setups = {
        // mixed-fp16: dynamic between min_scale 1 and max_scale 2^24, growth_interval 4.
        {Options{}, {{"loss_scale", float_bits_text(inf)}, {"loss_scale", float_bits_text(std::nanf(""))},
                     {"loss_scale", float_bits_text(33554432.0f)}, {"loss_scale", float_bits_text(0.5f)},
                     {"loss_scale", float_bits_text(-2.0f)}, {"growth_tracker", "4"}, {"growth_tracker", "99999"}}},
        // fp32: scaling off, the scale stays 1 and the tracker 0.
        {options_for(MPT_PRECISION_FP32, MPT_OPTIMIZER_SGD, 1.0f), {{"loss_scale", float_bits_text(2.0f)}, {"growth_tracker", "1"}}},
        // static: the scale stays what it was set to.
        {static_scaling, {{"loss_scale", float_bits_text(2048.0f)}, {"growth_tracker", "1"}}},
    };
    for (const Setup& setup : setups) {
        CAPTURE(setup.options.precision);
        TempDir directory;
        const std::string path = (directory.path / "good.safetensors").string();
        Run run(setup.options);
        stop_inside_second_epoch(run);
        REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
        const std::vector<float> before = run.weights();
        const Run::Scaler scaler_before = run.scaler();
        const FileParts parts = split_file(path);
        // The edit itself breaks nothing: the values as saved, written back the same way, load.
        const std::string same = write_parts(directory.path / "same.safetensors",
                                             with_metadata_field(parts.header, "loss_scale", float_bits_text(scaler_before.scale)),
                                             parts.data);
        REQUIRE(load_checkpoint(run, same).status == MPT_STATUS_OK);
        for (const Edit& edit : setup.edits) {
            INFO(edit.field, " := ", edit.value);
            const std::string edited =
                write_parts(directory.path / "edited.safetensors", with_metadata_field(parts.header, edit.field, edit.value), parts.data);
            const Refusal refusal = load_checkpoint(run, edited);
            CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
            CHECK(refusal.message.find(edit.field) != std::string::npos);
        }
        CHECK(same_bits(run.weights(), before));
        CHECK(run.scaler() == scaler_before);
    }
}

TEST_CASE("a checkpoint whose step, epoch and data counters contradict each other is refused, naming the field") {
    TempDir directory;
    const std::string path = (directory.path / "good.safetensors").string();
    Run run(Options{});
    stop_inside_second_epoch(run);  // 14 steps, 1 epoch, 4 steps into the next of 10, batch 16 of 160 rows
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const std::vector<float> before = run.weights();
    const Run::Scaler scaler_before = run.scaler();
    REQUIRE(scaler_before.steps == 14);
    const FileParts parts = split_file(path);
    const struct {
        const char* field;
        std::string value;
        const char* named;
    } edits[] = {
        {"applied_steps", "1000000", "applied_steps"},
        {"skipped_steps", std::to_string(scaler_before.skipped + 1), "skipped_steps"},
        {"steps", "15", "steps"},
        {"steps", "-1", "steps"},
        {"epochs_completed", "11", "epochs_completed"},  // 11 epochs and 4 steps need 15 steps
        {"steps_into_epoch", "11", "steps_into_epoch"},  // an epoch of 160 rows at 16 has 10 steps
        {"batch_size", "0", "batch_size"},
        {"batch_size", "64", "steps_into_epoch"},  // 4 steps into an epoch of 2
        {"dataset_rows", "656", "dataset_rows"},
        {"shuffle", "false", "shuffle"},  // the saved order is shuffled
        {"learning_rate", "0", "learning_rate"},
        {"learning_rate", float_bits_text(-0.01f), "learning_rate"},
        {"learning_rate", float_bits_text(std::numeric_limits<float>::quiet_NaN()), "learning_rate"},
        {"learning_rate", float_bits_text(std::numeric_limits<float>::infinity()), "learning_rate"},
        {"learning_rate", "4294967296", "learning_rate"},  // no float's bit pattern
    };
    for (const auto& edit : edits) {
        INFO(edit.field, " := ", edit.value);
        const std::string edited =
            write_parts(directory.path / "edited.safetensors", with_metadata_field(parts.header, edit.field, edit.value), parts.data);
        const Refusal refusal = load_checkpoint(run, edited);
        CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
        CHECK(refusal.message.find(edit.named) != std::string::npos);
    }
    {  // counts that agree with each other but no run reaches (a step more would overflow them)
        const int64_t steps = (int64_t{1} << 62) + 14;
        const std::string header =
            with_metadata_field(with_metadata_field(parts.header, "steps", std::to_string(steps)), "applied_steps",
                          std::to_string(steps - scaler_before.skipped));
        const Refusal refusal = load_checkpoint(run, write_parts(directory.path / "edited.safetensors", header, parts.data));
        CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
        CHECK_MESSAGE(refusal.message.find("more than 2^62 steps") != std::string::npos, refusal.message);
    }
    CHECK(same_bits(run.weights(), before));
    CHECK(run.scaler() == scaler_before);
    REQUIRE(load_checkpoint(run, path).status == MPT_STATUS_OK);
}

TEST_CASE("a checkpoint refused for other options names only the options that differ, with floats as numbers") {
    TempDir directory;
    const std::string path = (directory.path / "fp16.safetensors").string();
    {
        Run saved(Options{});
        REQUIRE(mpt_trainer_save_checkpoint(saved.trainer, path.c_str()) == MPT_STATUS_OK);
    }
    Options other;
    other.precision = MPT_PRECISION_MIXED_BF16;
    other.initial_scale = 0.5f;
    other.learning_rate = 0.05f;  // not an option that must match: the run's, restored by a load
    Run run(other);
    const Refusal refusal = load_checkpoint(run, path);
    CHECK(refusal.status == MPT_STATUS_INVALID_ARGUMENT);
    INFO(refusal.message);
    CHECK(refusal.message.find("precision mixed-fp16 (this trainer: mixed-bf16)") != std::string::npos);
    CHECK(refusal.message.find("initial_scale 16777216 (this trainer: 0.5)") != std::string::npos);
    CHECK(refusal.message.find("loss_scaling dynamic (this trainer: off)") != std::string::npos);  // DEFAULT, resolved
    for (const char* same : {"beta1", "epsilon", "optimizer", "growth_interval", "learning_rate", "loss "})
        CHECK(refusal.message.find(same) == std::string::npos);
    CHECK(refusal.message.find(std::to_string(1266679808)) == std::string::npos);  // 2^24's bit pattern
    CHECK(refusal.message.size() < 300);
}

TEST_CASE("a checkpoint refused by a trainer whose AUTO precision resolved otherwise says that AUTO resolves per machine") {
    // No machine resolves AUTO to mixed-fp16 on the CPU (bf16 with AMX, else fp32), so a checkpoint of
    // a mixed-fp16 trainer always meets a different precision here.
    TempDir directory;
    const std::string path = (directory.path / "fp16.safetensors").string();
    {
        Run saved(Options{});
        REQUIRE(mpt_trainer_save_checkpoint(saved.trainer, path.c_str()) == MPT_STATUS_OK);
    }
    Options automatic;
    automatic.precision = MPT_PRECISION_AUTO;
    Run run(automatic);
    const Refusal refusal = load_checkpoint(run, path);
    CHECK(refusal.status == MPT_STATUS_INVALID_ARGUMENT);
    INFO(refusal.message);
    CHECK(refusal.message.find("precision mixed-fp16 (this trainer: ") != std::string::npos);
    CHECK(refusal.message.find("AUTO resolves per machine") != std::string::npos);
}
