// Model files and training checkpoints through the C++ wrapper: a loaded model predicts and a resumed run
// ends bit-identically, automatic checkpoints keep the newest, and bad files throw with their status.

#include "wrapper_test_support.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>

namespace {

void truncate_copy(const std::string& source, const std::string& target) {
    std::ifstream in(source, std::ios::binary);
    std::vector<char> content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size() * 2 / 3));
}

std::vector<int64_t> saved_steps(const fs::path& directory) {
    std::vector<int64_t> steps;
    for (const auto& entry : fs::directory_iterator(directory)) {
        const std::string name = entry.path().filename().string();
        const std::string prefix = "checkpoint-", suffix = ".safetensors";
        REQUIRE(name.rfind(prefix, 0) == 0);
        REQUIRE(name.size() > prefix.size() + suffix.size());
        REQUIRE(name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0);
        steps.push_back(std::stoll(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size())));
    }
    std::sort(steps.begin(), steps.end());
    return steps;
}

}  // namespace

TEST_CASE("a saved model loads through the wrapper and predicts bit-identically") {
    TempDir directory;
    auto context = cpu_context();
    auto model = mlp(context);
    model.set_layer_dtype(1, MPT_DTYPE_BF16);
    auto data = blobs(context, 120, 11);
    mptrain::Trainer(model, adam()).fit(data, 2, 16);
    const std::string path = directory.file("model.safetensors");
    model.save(path);
    model.save(path);  // overwrites

    auto other = cpu_context(99);
    auto loaded = mptrain::Model::load(other, path);
    CHECK(loaded.layer_count() == 3);
    CHECK(loaded.input_features() == kFeatures);
    CHECK(loaded.output_features() == kClasses);
    CHECK(loaded.parameter_count() == model.parameter_count());
    CHECK(weight_bits(loaded) == weight_bits(model));
    // The architecture reads back from the library, layer by layer (mlp: 16 relu, 8 tanh, softmax).
    CHECK(loaded.layer_units(0) == 16);
    CHECK(loaded.layer_units(1) == 8);
    CHECK(loaded.layer_units(2) == kClasses);
    CHECK(loaded.layer_activation(0) == MPT_ACTIVATION_RELU);
    CHECK(loaded.layer_activation(1) == MPT_ACTIVATION_TANH);
    CHECK(loaded.layer_activation(2) == MPT_ACTIVATION_SOFTMAX);
    CHECK(loaded.layer_dtype(0) == MPT_DTYPE_DEFAULT);
    CHECK(loaded.layer_dtype(1) == MPT_DTYPE_BF16);
    for (int64_t layer : {int64_t{-1}, int64_t{3}}) {
        CHECK(status_of([&] { static_cast<void>(loaded.layer_activation(layer)); }) == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(status_of([&] { static_cast<void>(loaded.layer_dtype(layer)); }) == MPT_STATUS_INVALID_ARGUMENT);
    }
    CHECK(status_of([&] { static_cast<void>(loaded.layer_units(-1)); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { static_cast<void>(loaded.layer_units(3)); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { static_cast<void>(loaded.weights(3)); }) == MPT_STATUS_INVALID_ARGUMENT);
    std::vector<int32_t> labels;
    const std::vector<float> points = blob_samples(30, 12, labels);
    CHECK(bits_of(loaded.predict(points)) == bits_of(model.predict(points)));
    mptrain::Trainer(loaded, adam()).fit(blobs(other, 60, 13), 1, 20);  // it trains like any other
}

TEST_CASE("a run resumed from a checkpoint through the wrapper ends bit-identical") {
    TempDir directory;
    const std::string path = directory.file("checkpoint.safetensors");
    auto context = cpu_context();
    auto data = blobs(context, 200, 21);  // 6 steps of 32 per epoch
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    trainer.fit(data, 1, 32);
    trainer.save_checkpoint(path);
    trainer.fit(data, 2, 32);
    const std::vector<uint32_t> uninterrupted = weight_bits(model);

    auto resumed_model = mlp(context);  // fresh initial weights: only the checkpoint can make them equal
    CHECK(weight_bits(resumed_model) != uninterrupted);
    mptrain::Trainer resumed(resumed_model, adam());
    CHECK(resumed.batch_size() == 0);  // before any training batch
    resumed.load_checkpoint(path);
    CHECK(resumed.progress() == std::pair<int64_t, int64_t>{6, 1});
    CHECK(resumed.batch_size() == 32);  // the saved run's, restored
    resumed.fit(data, 2, resumed.batch_size());
    CHECK(weight_bits(resumed_model) == uninterrupted);
    CHECK(resumed.progress() == trainer.progress());
    CHECK(resumed.loss_scale().scale == trainer.loss_scale().scale);

    auto from_checkpoint = mptrain::Model::load(context, path);  // a checkpoint holds the model too
    CHECK(from_checkpoint.layer_count() == 3);
    CHECK(from_checkpoint.weights(1).first.size() == 8 * 16);
}

TEST_CASE("an epoch cancelled mid-way is the unfinished epoch, which a checkpoint keeps and fit finishes") {
    TempDir directory;
    const std::string path = directory.file("mid-epoch.safetensors");
    auto context = cpu_context();
    auto data = blobs(context, 200, 31);  // 6 steps of 32 per epoch
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    auto same = [](const mptrain::UnfinishedEpoch& epoch, int64_t steps, int64_t rows, int64_t batch_size) {
        return epoch.steps == steps && epoch.rows == rows && epoch.batch_size == batch_size;
    };
    CHECK(same(trainer.unfinished_epoch(), 0, 0, 0));
    trainer.set_callbacks([](const mptrain::Progress& p) { return p.step == 4; });
    CHECK(status_of([&] { trainer.fit(data, 1, 32); }) == MPT_STATUS_CANCELLED);
    CHECK(same(trainer.unfinished_epoch(), 4, 200, 32));
    trainer.save_checkpoint(path);
    trainer.set_callbacks(nullptr);

    auto resumed_model = mlp(context);
    mptrain::Trainer resumed(resumed_model, adam());
    resumed.load_checkpoint(path);
    CHECK(same(resumed.unfinished_epoch(), 4, 200, 32));
    resumed.fit(data, 1, 32);  // finishes it: 2 steps
    CHECK(resumed.progress() == std::pair<int64_t, int64_t>{6, 1});
    CHECK(same(resumed.unfinished_epoch(), 0, 0, 0));
}

TEST_CASE("a learning rate halved from the epoch-end callback is saved and restored by a checkpoint") {
    TempDir directory;
    const std::string path = directory.file("decayed.safetensors");
    auto context = cpu_context();
    auto data = blobs(context, 200, 41);
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    CHECK(trainer.learning_rate() == 0.01f);
    trainer.set_callbacks(nullptr, [&](int64_t, float, float) {
        trainer.set_learning_rate(trainer.learning_rate() / 2);
        return false;
    });
    trainer.fit(data, 2, 32);
    CHECK(trainer.learning_rate() == 0.0025f);
    trainer.save_checkpoint(path);
    trainer.set_callbacks(nullptr);
    trainer.fit(data, 1, 32);

    auto resumed_model = mlp(context);
    mptrain::Trainer resumed(resumed_model, adam());
    resumed.set_learning_rate(0.5f);
    resumed.load_checkpoint(path);
    CHECK(resumed.learning_rate() == 0.0025f);  // the checkpoint's
    resumed.fit(data, 1, 32);
    CHECK(weight_bits(resumed_model) == weight_bits(model));
    CHECK(status_of([&] { trainer.set_learning_rate(0.0f); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(trainer.learning_rate() == 0.0025f);
}

TEST_CASE("automatic checkpoints through the wrapper keep the newest and can be turned off") {
    TempDir directory;
    auto context = cpu_context();
    auto data = blobs(context, 200, 31);
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    trainer.set_checkpointing(directory.path.string(), 5, 0, 2);
    trainer.fit(data, 3, 32);  // 18 steps: checkpoints at 5, 10, 15
    CHECK(saved_steps(directory.path) == std::vector<int64_t>{10, 15});
    auto other_model = mlp(context);
    mptrain::Trainer other(other_model, adam());
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(directory.path)) names.push_back(entry.path().string());
    other.load_checkpoint(*std::max_element(names.begin(), names.end()));
    CHECK(other.progress().first == 15);

    trainer.set_checkpointing(std::nullopt);
    trainer.fit(data, 1, 32);
    CHECK(saved_steps(directory.path) == std::vector<int64_t>{10, 15});
    trainer.set_checkpointing(directory.path.string(), 0, 1, 5);
    trainer.fit(data, 1, 32);
    CHECK(saved_steps(directory.path) == std::vector<int64_t>{10, 15, 30});
    trainer.set_checkpointing(directory.path.string());  // every epoch, keeping the newest
    trainer.fit(data, 1, 32);
    CHECK(saved_steps(directory.path) == std::vector<int64_t>{36});
}

TEST_CASE("missing, damaged and mismatched files throw mptrain::Error with their status") {
    TempDir directory;
    auto context = cpu_context();
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    const std::string missing = directory.file("missing.safetensors");
    CHECK(status_of([&] { mptrain::Model::load(context, missing); }) == MPT_STATUS_IO_ERROR);
    CHECK(status_of([&] { trainer.load_checkpoint(missing); }) == MPT_STATUS_IO_ERROR);

    const std::string model_file = directory.file("model.safetensors");
    const std::string checkpoint = directory.file("checkpoint.safetensors");
    const std::string truncated = directory.file("truncated.safetensors");
    model.save(model_file);
    trainer.save_checkpoint(checkpoint);
    truncate_copy(model_file, truncated);
    CHECK(status_of([&] { mptrain::Model::load(context, truncated); }) == MPT_STATUS_CORRUPT_DATA);
    truncate_copy(checkpoint, truncated);
    CHECK(status_of([&] { trainer.load_checkpoint(truncated); }) == MPT_STATUS_CORRUPT_DATA);
    CHECK(status_of([&] { mptrain::Model::load(context, truncated); }) == MPT_STATUS_CORRUPT_DATA);

    mptrain::Model narrow(context, kFeatures);
    narrow.add_dense(kClasses, MPT_ACTIVATION_SOFTMAX);
    mptrain::Trainer narrow_trainer(narrow, adam());
    CHECK(status_of([&] { narrow_trainer.load_checkpoint(checkpoint); }) == MPT_STATUS_SHAPE_MISMATCH);
    mptrain::Trainer sgd_trainer(model);
    CHECK(status_of([&] { sgd_trainer.load_checkpoint(checkpoint); }) == MPT_STATUS_INVALID_ARGUMENT);

    CHECK(status_of([&] { model.save(directory.file("no-such-directory/model.safetensors")); }) == MPT_STATUS_IO_ERROR);
    const std::string with_nul("bad\0path", 8);
    CHECK(status_of([&] { model.save(with_nul); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { mptrain::Model::load(context, with_nul); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.set_checkpointing(directory.path.string(), 1, 0, 0); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.set_checkpointing(directory.path.string(), 0, 0); }) == MPT_STATUS_INVALID_ARGUMENT);

    auto data = blobs(context, 64, 41);
    // Refused when set, not at the first checkpoint.
    CHECK(status_of([&] { trainer.set_checkpointing(directory.file("no-such-directory"), 1); }) == MPT_STATUS_IO_ERROR);
    const std::string going = directory.file("going-away");
    std::filesystem::create_directory(going);
    trainer.set_checkpointing(going, 1);
    std::filesystem::remove(going);
    CHECK(status_of([&] { trainer.fit(data, 1, 32); }) == MPT_STATUS_IO_ERROR);
    // ...and everything still works afterwards.
    trainer.set_checkpointing(std::nullopt);
    trainer.fit(data, 1, 32);
    trainer.load_checkpoint(checkpoint);
    CHECK(mptrain::Model::load(context, model_file).layer_count() == 3);
}
