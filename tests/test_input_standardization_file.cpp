// How model files and checkpoints hold a model's input standardization: "input_standardization":
// true in the architecture and the tensors input.mean and input.stddev ([input features], F32).
// Files that record anything else no mptrain wrote: the flag without the tensors, the tensors
// without the flag (read as plain, the model would predict from unstandardized inputs), a flag
// other than true, tensors of another shape or dtype, values mpt_model_set_input_standardization
// refuses. Each is corrupt data, and a checkpoint refused so leaves the trainer as it was.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/model_file.h"
#include "support/file_contents.h"
#include "support/rewritten_file.h"
#include "support/temp_dir.h"
#include "support/tiny_trainer.h"

namespace {

using mpt_test::kTinyFeatures;

std::vector<float> tiny_means() {
    std::vector<float> mean(kTinyFeatures);
    for (int64_t f = 0; f < kTinyFeatures; ++f) mean[static_cast<size_t>(f)] = 0.1f * static_cast<float>(f);
    return mean;
}

std::vector<float> tiny_deviations() { return std::vector<float>(kTinyFeatures, 0.5f); }

void standardize(mpt::Model& model) {
    model.set_input_standardization(tiny_means().data(), tiny_deviations().data(), kTinyFeatures);
}

// A forgery of `path`: its tensors but those `drop` names, then what `add` adds, and its architecture
// through `edit_architecture` when given.
struct Forgery {
    std::string name;
    std::function<bool(const std::string&)> keep;
    std::function<void(mpt::SafetensorsWriter&)> add;
    std::function<std::string(const std::string&)> edit_architecture;
};

bool keep_all(const std::string&) { return true; }
bool not_input_tensors(const std::string& name) { return name != "input.mean" && name != "input.stddev"; }

std::string without_flag(const std::string& architecture) {
    const std::string flag = "\"input_standardization\":true,";
    std::string edited = architecture;
    REQUIRE(edited.find(flag) != std::string::npos);
    return edited.erase(edited.find(flag), flag.size());
}

std::string flag_as(const std::string& architecture, const std::string& value) {
    const std::string flag = "\"input_standardization\":true";
    std::string edited = architecture;
    REQUIRE(edited.find(flag) != std::string::npos);
    return edited.replace(edited.find(flag), flag.size(), "\"input_standardization\":" + value);
}

// input.mean and input.stddev as `mean` and `stddev` (kTinyFeatures each unless given otherwise).
std::function<void(mpt::SafetensorsWriter&)> input_tensors(std::vector<float> mean, std::vector<float> stddev,
                                                           const char* dtype = "F32") {
    return [mean = std::move(mean), stddev = std::move(stddev), dtype](mpt::SafetensorsWriter& writer) {
        writer.add("input.mean", dtype, {static_cast<int64_t>(mean.size())}, mean.data(), mean.size() * sizeof(float));
        writer.add("input.stddev", dtype, {static_cast<int64_t>(stddev.size())}, stddev.data(),
                   stddev.size() * sizeof(float));
    };
}

// The forgeries of a file written by a model that standardizes by tiny_means/tiny_deviations, and
// what each refusal's message names.
std::vector<std::pair<Forgery, std::string>> forgeries() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> nan_mean = tiny_means(), negative = tiny_deviations();
    nan_mean[2] = nan;
    negative[3] = -1.0f;
    std::vector<float> short_mean = tiny_means();
    short_mean.pop_back();
    return {
        {{"flag without tensors", not_input_tensors, {}, {}}, "input.mean"},
        {{"tensors without flag", keep_all, {}, without_flag}, "no input standardization"},
        {{"flag false", keep_all, {}, [](const std::string& a) { return flag_as(a, "false"); }}, "input_standardization"},
        {{"flag 1", keep_all, {}, [](const std::string& a) { return flag_as(a, "1"); }}, "input_standardization"},
        {{"NaN mean", not_input_tensors, input_tensors(nan_mean, tiny_deviations()), {}}, "feature 2"},
        {{"negative deviation", not_input_tensors, input_tensors(tiny_means(), negative), {}}, "feature 3"},
        {{"short mean", not_input_tensors, input_tensors(short_mean, tiny_deviations()), {}}, "input.mean"},
        {{"I32 tensors", not_input_tensors, input_tensors(tiny_means(), tiny_deviations(), "I32"), {}}, "input.mean"},
    };
}

void forge(const std::string& source, const std::string& destination, const Forgery& forgery) {
    mpt_test::rewrite_file(source, destination, forgery.keep, forgery.add,
                           [&](const std::string& key, const std::string& value) {
                               if (key != "mptrain.architecture" || !forgery.edit_architecture) return value;
                               return forgery.edit_architecture(value);
                           });
}

void check_corrupt(const std::function<void()>& load, const std::string& named) {
    try {
        load();
        FAIL("loaded the forgery");
    } catch (const mpt::Error& error) {
        CHECK(error.status() == MPT_STATUS_CORRUPT_DATA);
        CHECK_MESSAGE(std::string(error.what()).find(named) != std::string::npos, error.what());
    }
}

}  // namespace

TEST_CASE("a model file records its input standardization as a flag and two tensors, and forgeries are corrupt") {
    mpt_test::TempDir directory("mptrain-standardization-file");
    mpt_test::TinyTrainer tiny(mpt::TrainerConfig{});
    mpt::Model& model = *tiny.trainer->model();
    standardize(model);
    const std::string path = directory.file("model");
    mpt::save_model(model, path, "fp32");
    REQUIRE(mpt_test::file_contains(path, "\\\"input_standardization\\\":true"));
    const auto loaded = mpt::load_model(tiny.context, path);
    REQUIRE(loaded->input_standardization());
    CHECK(loaded->input_standardization()->mean() == tiny_means());
    CHECK(loaded->input_standardization()->stddev() == tiny_deviations());

    for (const auto& [forgery, named] : forgeries()) {
        CAPTURE(forgery.name);
        const std::string forged = directory.file("forged");
        forge(path, forged, forgery);
        check_corrupt([&] { mpt::load_model(tiny.context, forged); }, named);
    }
}

TEST_CASE("a checkpoint forged the same ways is corrupt, and the trainer it was refused by is as it was") {
    mpt_test::TempDir directory("mptrain-standardization-checkpoint");
    mpt_test::TinyTrainer saver(mpt::TrainerConfig{});
    standardize(*saver.trainer->model());
    saver.trainer->fit(*saver.dataset, 1, mpt_test::kTinyBatch, true);
    const std::string path = directory.file("checkpoint");
    mpt::save_checkpoint(*saver.trainer, path);

    for (const auto& [forgery, named] : forgeries()) {
        CAPTURE(forgery.name);
        const std::string forged = directory.file("forged");
        forge(path, forged, forgery);
        mpt_test::TinyTrainer loader(mpt::TrainerConfig{});
        mpt::Model& model = *loader.trainer->model();
        std::vector<float> own_mean = tiny_means();
        own_mean[0] = 7.0f;  // values of its own, which a load that succeeds would replace
        // The tensors-without-flag forgery records a plain model: a plain loader reads it.
        if (forgery.name != "tensors without flag")
            model.set_input_standardization(own_mean.data(), tiny_deviations().data(), kTinyFeatures);
        const std::vector<float> masters = loader.masters();
        check_corrupt([&] { mpt::load_checkpoint(*loader.trainer, forged); }, named);
        CHECK(loader.masters() == masters);
        if (forgery.name != "tensors without flag") CHECK(model.input_standardization()->mean() == own_mean);
        CHECK(loader.trainer->steps_taken() == 0);
    }
}
