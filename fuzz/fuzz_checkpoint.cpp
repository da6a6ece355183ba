// libFuzzer target for loading training checkpoints: past the file format (fuzz_safetensors) to what
// the loader believes of a file, the options, progress and tensors it restores. The input is read
// as a safetensors file without its checksums and written again with correct ones, so mutations of
// the options and progress JSON, the tensors and their shapes reach the checks behind the checksums.
// The file is loaded into fresh trainers of the architecture the seeds were written by, one with
// default options (Adam at a constant rate) and one with the options a checkpoint records only when
// set (a cosine schedule, label smoothing, class weights, gradient clipping, weight averaging,
// centered RMSprop, with momentum: three optimizer state arrays; a model that standardizes its
// inputs). Any load
// must succeed or be refused with a status a bad file may give, and a refused load must leave the
// trainer as it was (weights, averages, input standardization, scaler, step count); after a load that
// succeeds, the options the file records must be read and make a trainer that takes the file too, and
// fit and evaluate must run or fail with such a status. Reading the options alone must succeed or
// be refused so as well.
//
// The seeds (corpus/checkpoint/seed-*) are this target's trainers' own checkpoints inside an epoch:
// MPTRAIN_FUZZ_CHECKPOINT_SEEDS=DIR fuzz_replay_checkpoint FILE writes them to DIR.
// fuzz-options: -max_len=16384 -dict=fuzz/safetensors.dict
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <stdlib.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "support/tiny_trainer.h"

namespace {

using mpt_test::kTinyBatch;

// A tiny trainer (tests/support/tiny_trainer.h) of the seeds' options: a load that succeeds changes
// it, so every input gets a fresh one.
struct Fixture : mpt_test::TinyTrainer {
    explicit Fixture(bool optioned) : TinyTrainer(config(optioned)) {
        if (!optioned) return;
        std::vector<float> mean(mpt_test::kTinyFeatures), stddev(mpt_test::kTinyFeatures);
        for (size_t f = 0; f < mean.size(); ++f) {
            mean[f] = 0.25f * static_cast<float>(f) - 0.5f;
            stddev[f] = 0.5f + static_cast<float>(f);
        }
        trainer->model()->set_input_standardization(mean.data(), stddev.data(), mpt_test::kTinyFeatures);
    }

    static mpt::TrainerConfig config(bool optioned) {
        mpt::TrainerConfig trainer_config;
        trainer_config.precision = MPT_PRECISION_MIXED_FP16;  // a loss scaler with state to restore
        trainer_config.optimizer.kind = mpt::OptimizerKind::adam;
        if (optioned) {
            trainer_config.optimizer.kind = mpt::OptimizerKind::rmsprop;
            trainer_config.optimizer.momentum = 0.5f;
            trainer_config.optimizer.centered = true;
            trainer_config.loss.label_smoothing = 0.1f;
            trainer_config.loss.class_weights = {0.5f, 2.0f, 1.0f};
            trainer_config.optimizer.global_clipnorm = 0.5f;
            trainer_config.optimizer.ema_momentum = 0.9f;
            mpt::LrSchedule& schedule = trainer_config.optimizer.schedule;
            schedule.kind = mpt::LrScheduleKind::cosine;
            schedule.warmup_steps = 3;
            schedule.decay_steps = 10;
            schedule.decay_factor = 0.1f;
        }
        return trainer_config;
    }

    struct State {
        std::vector<float> masters;
        std::vector<float> averages;  // empty without weight averaging
        std::vector<float> input_mean, input_stddev;  // empty without an input standardization
        mpt::TrainState train_state;
        float learning_rate;
        int64_t epochs;
    };
    State state() const {
        State s;
        s.masters = masters();
        if (const float* averages = trainer->executor().averages()) {
            s.averages.resize(s.masters.size());
            context->backend().copy_to_host(s.averages.data(), averages, s.averages.size() * sizeof(float));
        }
        if (const auto& standardization = trainer->model()->input_standardization()) {
            s.input_mean = standardization->mean();
            s.input_stddev = standardization->stddev();
        }
        s.train_state = trainer->state();
        s.learning_rate = trainer->learning_rate();
        s.epochs = trainer->epochs_completed();
        return s;
    }
};

bool same(const Fixture::State& a, const Fixture::State& b) {
    return a.masters.size() == b.masters.size() &&
           std::memcmp(a.masters.data(), b.masters.data(), a.masters.size() * sizeof(float)) == 0 &&
           a.averages.size() == b.averages.size() &&
           (a.averages.empty() || std::memcmp(a.averages.data(), b.averages.data(), a.averages.size() * sizeof(float)) == 0) &&
           a.input_mean == b.input_mean && a.input_stddev == b.input_stddev &&
           std::memcmp(&a.train_state, &b.train_state, sizeof a.train_state) == 0 &&
           std::memcmp(&a.learning_rate, &b.learning_rate, sizeof a.learning_rate) == 0 && a.epochs == b.epochs;
}

// Statuses a file, or a run restored from one, may give; anything else (INTERNAL, a crash) is a bug.
bool expected_status(mpt_status status) {
    switch (status) {
        case MPT_STATUS_CORRUPT_DATA:
        case MPT_STATUS_INVALID_ARGUMENT:
        case MPT_STATUS_SHAPE_MISMATCH:
        case MPT_STATUS_UNSUPPORTED:
        case MPT_STATUS_NON_FINITE:
        case MPT_STATUS_OUT_OF_MEMORY:  // a restored epoch order is scratch the context charges
            return true;
        default:
            return false;
    }
}

const std::string& file_path() {
    static const std::string path = [] {
        char pattern[] = "/tmp/mptrain-fuzz-checkpoint-XXXXXX";
        return std::string(mkdtemp(pattern)) + "/checkpoint.safetensors";
    }();
    return path;
}

// With MPTRAIN_FUZZ_CHECKPOINT_SEEDS set: both fixtures' checkpoints, 6 steps into their second
// epoch (shuffled), into that directory.
void write_seeds_once() {
    static bool written = false;
    const char* directory = std::getenv("MPTRAIN_FUZZ_CHECKPOINT_SEEDS");
    if (written || directory == nullptr) return;
    written = true;
    for (bool optioned : {false, true}) {
        Fixture fixture(optioned);
        fixture.trainer->fit(*fixture.dataset, 1, kTinyBatch, true);
        fixture.trainer->step(*fixture.dataset, 0, kTinyBatch);  // the step count moves past the epoch's
        mpt::save_checkpoint(*fixture.trainer,
                             std::string(directory) + (optioned ? "/seed-optioned" : "/seed-constant"));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    write_seeds_once();
    std::vector<uint8_t> file;
    try {
        const mpt::SafetensorsReader reader = mpt::SafetensorsReader::parse(data, size, false);
        mpt::SafetensorsWriter writer;
        const std::string checksum_prefix = mpt::safetensors_checksum_key("");
        for (const auto& [key, value] : reader.metadata())
            if (key.compare(0, checksum_prefix.size(), checksum_prefix) != 0) writer.set_metadata(key, value);
        for (const auto& [name, view] : reader.tensors()) writer.add(name, view.dtype, view.shape, view.data, view.bytes);
        file = writer.serialize();
    } catch (const mpt::Error&) {
        return 0;  // not a file the format admits: fuzz_safetensors' business
    }
    {
        std::ofstream out(file_path(), std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
        if (!out) std::abort();
    }
    // What the file records of its trainer's options (mpt_trainer_options_create_from_checkpoint's).
    std::unique_ptr<mpt::TrainerConfig> recorded;
    try {
        recorded = std::make_unique<mpt::TrainerConfig>(mpt::read_checkpoint_options(file_path()));
    } catch (const mpt::Error& error) {
        if (!expected_status(error.status())) std::abort();
    }
    for (bool optioned : {false, true}) {
        Fixture fixture(optioned);
        const Fixture::State before = fixture.state();
        try {
            mpt::load_checkpoint(*fixture.trainer, file_path());
        } catch (const mpt::Error& error) {
            if (!expected_status(error.status())) std::abort();
            if (!same(before, fixture.state())) std::abort();  // validated before anything changed
            continue;
        }
        // A file a trainer took records options a trainer runs: read, they make a trainer that takes it.
        if (!recorded) std::abort();
        try {
            mpt::Trainer resumed(fixture.trainer->model(), *recorded);
            mpt::load_checkpoint(resumed, file_path());
        } catch (const mpt::Error&) {
            std::abort();
        }
        try {
            fixture.trainer->fit(*fixture.dataset, 1, kTinyBatch, true);
            fixture.trainer->evaluate(*fixture.dataset, kTinyBatch);
        } catch (const mpt::Error& error) {
            if (!expected_status(error.status())) std::abort();
        }
    }
    return 0;
}
