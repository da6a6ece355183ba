// A checkpoint's weight averages (averages.layers.*) as the loader validates them: real checkpoints
// rewritten with valid checksums (which the C API tests cannot make) whose averages are missing,
// misshapen, or present in a file whose options keep none. Each is corrupt data, refused before
// the trainer changes.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/error.h"
#include "data/dataset.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/model.h"
#include "nn/trainer.h"
#include "support/temp_dir.h"

namespace {

constexpr int64_t kFeatures = 6, kRows = 40, kBatch = 8;

// A CPU trainer of a 6-5-3 model, averaging its weights when `ema_momentum` is not 0, with its data.
struct AveragingTrainer {
    std::shared_ptr<mpt::Context> context;
    std::shared_ptr<mpt::Dataset> dataset;
    std::unique_ptr<mpt::Trainer> trainer;

    explicit AveragingTrainer(float ema_momentum) {
        mpt::ContextConfig config;
        config.backend = MPT_BACKEND_CPU;
        config.threads = 1;
        config.seed = 7;
        context = std::make_shared<mpt::Context>(config);
        std::vector<float> samples(kRows * kFeatures);
        std::vector<int32_t> labels(kRows);
        for (int64_t r = 0; r < kRows; ++r) {
            labels[r] = static_cast<int32_t>(r % 3);
            for (int64_t f = 0; f < kFeatures; ++f)
                samples[r * kFeatures + f] = static_cast<float>(f % 3 == labels[r]) + 0.1f * static_cast<float>((r + f) % 4);
        }
        dataset = mpt::Dataset::from_f32(context, samples.data(), kRows, kFeatures, labels.data(), 3, true);
        auto model = std::make_shared<mpt::Model>(context, kFeatures);
        model->add_dense(5, mpt::Activation::relu);
        model->add_dense(3, mpt::Activation::softmax);
        model->build();
        mpt::TrainerConfig trainer_config;
        trainer_config.precision = MPT_PRECISION_FP32;
        trainer_config.optimizer.ema_momentum = ema_momentum;
        trainer = std::make_unique<mpt::Trainer>(model, trainer_config);
    }

    std::vector<float> masters() const {
        std::vector<float> block(static_cast<size_t>(trainer->model()->parameter_block_elements()));
        trainer->model()->read_master_block(block.data());
        return block;
    }
};

// Writes `source`'s metadata (less its checksums, which the writer makes again) and the tensors
// `keep` accepts to `destination`, then whatever `add` adds.
void rewrite(const std::string& source, const std::string& destination,
             const std::function<bool(const std::string&)>& keep,
             const std::function<void(mpt::SafetensorsWriter&)>& add = {}) {
    const mpt::SafetensorsReader reader = mpt::SafetensorsReader::open(source, true);
    mpt::SafetensorsWriter writer;
    const std::string checksum_prefix = mpt::safetensors_checksum_key("");
    for (const auto& [key, value] : reader.metadata())
        if (key.compare(0, checksum_prefix.size(), checksum_prefix) != 0) writer.set_metadata(key, value);
    for (const auto& [name, view] : reader.tensors())
        if (keep(name)) writer.add(name, view.dtype, view.shape, view.data, view.bytes);
    if (add) add(writer);
    writer.write(destination);
}

bool is_average(const std::string& name) { return name.compare(0, 9, "averages.") == 0; }

// Loading `path` into a fresh trainer is refused as corrupt data, with `expected` in the message,
// and changes none of its weights.
void check_refused(float ema_momentum, const std::string& path, const std::string& expected) {
    AveragingTrainer fresh(ema_momentum);
    const std::vector<float> before = fresh.masters();
    try {
        mpt::load_checkpoint(*fresh.trainer, path);
        FAIL("loaded " << path);
    } catch (const mpt::Error& error) {
        CHECK(error.status() == MPT_STATUS_CORRUPT_DATA);
        CHECK_MESSAGE(std::string(error.what()).find(expected) != std::string::npos, error.what());
    }
    CHECK(before == fresh.masters());
}

}  // namespace

TEST_CASE("a checkpoint's averages must be all there, shaped as the layers, and only where its options keep them") {
    const mpt_test::TempDir directory("mptrain-checkpoint-averages");
    AveragingTrainer averaging(0.9f), plain(0.0f);
    for (int step = 0; step < 3; ++step) {
        averaging.trainer->step(*averaging.dataset, kBatch * step, kBatch);
        plain.trainer->step(*plain.dataset, kBatch * step, kBatch);
    }
    const std::string averaged = directory.file("averaged"), unaveraged = directory.file("plain");
    mpt::save_checkpoint(*averaging.trainer, averaged);
    mpt::save_checkpoint(*plain.trainer, unaveraged);
    {  // The files as written load (the rewriting itself changes nothing).
        AveragingTrainer fresh(0.9f);
        const std::string copy = directory.file("copy");
        rewrite(averaged, copy, [](const std::string&) { return true; });
        mpt::load_checkpoint(*fresh.trainer, copy);
        CHECK(fresh.masters() == averaging.masters());
    }

    const std::string missing = directory.file("missing");
    rewrite(averaged, missing, [](const std::string& name) { return !is_average(name); });
    check_refused(0.9f, missing, "averages.layers.0.weight");

    const std::string misshapen = directory.file("misshapen");
    rewrite(averaged, misshapen, [](const std::string& name) { return name != "averages.layers.1.bias"; },
            [](mpt::SafetensorsWriter& writer) {
                const float zeros[4] = {};
                writer.add("averages.layers.1.bias", "F32", {4}, zeros, sizeof zeros);
            });
    check_refused(0.9f, misshapen, "averages.layers.1.bias");

    // Averages in a file whose options keep none: all of them, or a single one.
    const mpt::SafetensorsReader averaged_reader = mpt::SafetensorsReader::open(averaged, true);
    const std::string stray_all = directory.file("stray-all");
    rewrite(unaveraged, stray_all, [](const std::string&) { return true; }, [&](mpt::SafetensorsWriter& writer) {
        for (const auto& [name, view] : averaged_reader.tensors())
            if (is_average(name)) writer.add(name, view.dtype, view.shape, view.data, view.bytes);
    });
    check_refused(0.0f, stray_all, "its options keep none");
    const std::string stray_one = directory.file("stray-one");
    rewrite(unaveraged, stray_one, [](const std::string&) { return true; }, [](mpt::SafetensorsWriter& writer) {
        const float zeros[3] = {};
        writer.add("averages.layers.1.bias", "F32", {3}, zeros, sizeof zeros);
    });
    check_refused(0.0f, stray_one, "averages.layers.1.bias");
}
