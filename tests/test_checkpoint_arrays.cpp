// A checkpoint's per-parameter arrays (optimizer.<n>.layers.*, averages.layers.*) as the loader
// validates them: real checkpoints rewritten with valid checksums (which the C API tests cannot
// make) whose arrays are missing, misshapen, or more than the options and architecture keep, or
// whose record of the options that decide the arrays (centered RMSprop's) is forged. Each is
// corrupt data, refused before the trainer changes.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "support/rewritten_file.h"
#include "support/temp_dir.h"
#include "support/tiny_trainer.h"

namespace {

using mpt_test::kTinyBatch;
using mpt_test::rewrite_file;

// A tiny trainer (tests/support/tiny_trainer.h) in fp32 with SGD momentum (one state array),
// averaging its weights when `ema_momentum` is not 0.
mpt_test::TinyTrainer averaging_trainer(float ema_momentum) {
    mpt::TrainerConfig config;
    config.precision = MPT_PRECISION_FP32;
    config.optimizer.momentum = 0.9f;
    config.optimizer.ema_momentum = ema_momentum;
    return mpt_test::TinyTrainer(config);
}

bool is_average(const std::string& name) { return name.compare(0, 9, "averages.") == 0; }

// A tiny trainer with centered RMSprop and momentum: three state arrays.
mpt_test::TinyTrainer centered_rmsprop_trainer() {
    mpt::TrainerConfig config;
    config.precision = MPT_PRECISION_FP32;
    config.optimizer.kind = mpt::OptimizerKind::rmsprop;
    config.optimizer.learning_rate = 0.01f;
    config.optimizer.momentum = 0.5f;
    config.optimizer.centered = true;
    return mpt_test::TinyTrainer(config);
}

// Loading `path` into `fresh` is refused as corrupt data, with `expected` in the message, and
// changes none of its weights.
void check_refused_by(mpt_test::TinyTrainer& fresh, const std::string& path, const std::string& expected) {
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

void check_refused(float ema_momentum, const std::string& path, const std::string& expected) {
    mpt_test::TinyTrainer fresh = averaging_trainer(ema_momentum);
    check_refused_by(fresh, path, expected);
}

}  // namespace

TEST_CASE("a checkpoint's optimizer state and averages must be all there, shaped as the layers, and no more than its options keep") {
    const mpt_test::TempDir directory("mptrain-checkpoint-arrays");
    mpt_test::TinyTrainer averaging = averaging_trainer(0.9f), plain = averaging_trainer(0.0f);
    for (int step = 0; step < 3; ++step) {
        averaging.trainer->step(*averaging.dataset, kTinyBatch * step, kTinyBatch);
        plain.trainer->step(*plain.dataset, kTinyBatch * step, kTinyBatch);
    }
    const std::string averaged = directory.file("averaged"), unaveraged = directory.file("plain");
    mpt::save_checkpoint(*averaging.trainer, averaged);
    mpt::save_checkpoint(*plain.trainer, unaveraged);
    {  // The files as written load (the rewriting itself changes nothing).
        mpt_test::TinyTrainer fresh = averaging_trainer(0.9f);
        const std::string copy = directory.file("copy");
        rewrite_file(averaged, copy, mpt_test::all_tensors);
        mpt::load_checkpoint(*fresh.trainer, copy);
        CHECK(fresh.masters() == averaging.masters());
    }

    const std::string missing = directory.file("missing");
    rewrite_file(averaged, missing, [](const std::string& name) { return !is_average(name); });
    check_refused(0.9f, missing, "averages.layers.0.weight");

    const std::string misshapen = directory.file("misshapen");
    rewrite_file(averaged, misshapen, [](const std::string& name) { return name != "averages.layers.1.bias"; },
            [](mpt::SafetensorsWriter& writer) {
                const float zeros[4] = {};
                writer.add("averages.layers.1.bias", "F32", {4}, zeros, sizeof zeros);
            });
    check_refused(0.9f, misshapen, "averages.layers.1.bias");

    // Averages in a file whose options keep none: all of them, or a single one.
    const mpt::SafetensorsReader averaged_reader = mpt::SafetensorsReader::open(averaged, true);
    const std::string stray_all = directory.file("stray-all");
    rewrite_file(unaveraged, stray_all, mpt_test::all_tensors, [&](mpt::SafetensorsWriter& writer) {
        for (const auto& [name, view] : averaged_reader.tensors())
            if (is_average(name)) writer.add(name, view.dtype, view.shape, view.data, view.bytes);
    });
    check_refused(0.0f, stray_all, "does not keep");
    const std::string stray_one = directory.file("stray-one");
    rewrite_file(unaveraged, stray_one, mpt_test::all_tensors, [](mpt::SafetensorsWriter& writer) {
        const float zeros[3] = {};
        writer.add("averages.layers.1.bias", "F32", {3}, zeros, sizeof zeros);
    });
    check_refused(0.0f, stray_one, "averages.layers.1.bias");

    // Arrays beyond what the options and the architecture keep: a second optimizer state array
    // (SGD momentum keeps one), averages of a layer the model lacks.
    const std::string stray_state = directory.file("stray-state");
    rewrite_file(averaged, stray_state, mpt_test::all_tensors, [](mpt::SafetensorsWriter& writer) {
        const float zeros[3] = {};
        writer.add("optimizer.1.layers.1.bias", "F32", {3}, zeros, sizeof zeros);
    });
    check_refused(0.9f, stray_state, "optimizer.1.layers.1.bias");
    const std::string stray_layer = directory.file("stray-layer");
    rewrite_file(averaged, stray_layer, mpt_test::all_tensors, [](mpt::SafetensorsWriter& writer) {
        const float zeros[3] = {};
        writer.add("averages.layers.7.bias", "F32", {3}, zeros, sizeof zeros);
    });
    check_refused(0.9f, stray_layer, "averages.layers.7.bias");
}

TEST_CASE("centered RMSprop is recorded only as true, and its gradients' average must be in the file") {
    const mpt_test::TempDir directory("mptrain-checkpoint-centered");
    mpt_test::TinyTrainer centered = centered_rmsprop_trainer();
    for (int step = 0; step < 2; ++step) centered.trainer->step(*centered.dataset, kTinyBatch * step, kTinyBatch);
    const std::string path = directory.file("centered");
    mpt::save_checkpoint(*centered.trainer, path);
    // The file as written, rewritten unchanged, loads: the rewriting itself breaks nothing.
    const std::string same = directory.file("same");
    rewrite_file(path, same, mpt_test::all_tensors);
    mpt_test::TinyTrainer loading = centered_rmsprop_trainer();
    mpt::load_checkpoint(*loading.trainer, same);
    CHECK(loading.masters() == centered.masters());

    for (const char* forged : {"false", "null", "1", "\"true\""}) {
        CAPTURE(forged);
        const std::string forged_path = directory.file("forged");
        rewrite_file(path, forged_path, mpt_test::all_tensors, {}, [&](const std::string& key, const std::string& value) {
            if (key != "mptrain.trainer.options") return value;
            const std::string recorded = "\"rmsprop_centered\":true";
            std::string edited = value;
            REQUIRE(edited.find(recorded) != std::string::npos);
            edited.replace(edited.find(recorded), recorded.size(), std::string("\"rmsprop_centered\":") + forged);
            return edited;
        });
        mpt_test::TinyTrainer fresh = centered_rmsprop_trainer();
        check_refused_by(fresh, forged_path, "rmsprop_centered");
    }
    // Without the third array (the gradients' average) the state is incomplete.
    const std::string missing = directory.file("missing");
    rewrite_file(path, missing, [](const std::string& name) { return name.compare(0, 12, "optimizer.2.") != 0; });
    mpt_test::TinyTrainer fresh = centered_rmsprop_trainer();
    check_refused_by(fresh, missing, "optimizer.2.");

    // Recorded under another optimizer (SGD with momentum, one state array), which no mptrain writes:
    // corrupt data, not a trainer of other options.
    mpt_test::TinyTrainer momentum = averaging_trainer(0.0f);
    momentum.trainer->step(*momentum.dataset, 0, kTinyBatch);
    const std::string momentum_path = directory.file("momentum");
    mpt::save_checkpoint(*momentum.trainer, momentum_path);
    const std::string stray_centered = directory.file("stray-centered");
    rewrite_file(momentum_path, stray_centered, mpt_test::all_tensors, {},
                 [&](const std::string& key, const std::string& value) {
                     if (key != "mptrain.trainer.options") return value;
                     REQUIRE(value.find("rmsprop_centered") == std::string::npos);
                     REQUIRE(value.back() == '}');
                     return value.substr(0, value.size() - 1) + ",\"rmsprop_centered\":true}";
                 });
    mpt_test::TinyTrainer fresh_momentum = averaging_trainer(0.0f);
    check_refused_by(fresh_momentum, stray_centered, "rmsprop_centered recorded for optimizer kind 0");
}
