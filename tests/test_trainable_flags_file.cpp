// A model file records a frozen layer as "trainable": false in its architecture, and nothing for a
// trainable one: a file that records anything else no mptrain wrote, and is corrupt data.
#include <doctest/doctest.h>

#include <string>

#include "core/error.h"
#include "nn/model_file.h"
#include "support/file_contents.h"
#include "support/rewritten_file.h"
#include "support/temp_dir.h"
#include "support/tiny_trainer.h"

TEST_CASE("a model file's trainable flags: false loads frozen; true, numbers, strings and null are corrupt data") {
    mpt_test::TempDir directory("mptrain-trainable-flags");
    mpt_test::TinyTrainer tiny(mpt::TrainerConfig{});
    mpt::Model& model = *tiny.trainer->model();
    model.set_layer_trainable(0, false);
    const std::string path = directory.file("model");
    mpt::save_model(model, path, "fp32");
    REQUIRE(mpt_test::file_contains(path, "\\\"trainable\\\":false"));
    const auto loaded = mpt::load_model(tiny.context, path);
    CHECK_FALSE(loaded->layers()[0].trainable);
    CHECK(loaded->layers()[1].trainable);

    for (const std::string forged : {"true", "0", "1", "\"no\"", "null"}) {
        CAPTURE(forged);
        const std::string forged_path = directory.file("forged");
        mpt_test::rewrite_file(path, forged_path, mpt_test::all_tensors, {},
                               [&](const std::string& key, const std::string& value) {
                                   if (key != "mptrain.architecture") return value;
                                   std::string edited = value;
                                   const std::string flag = "\"trainable\":false";
                                   REQUIRE(edited.find(flag) != std::string::npos);
                                   return edited.replace(edited.find(flag), flag.size(), "\"trainable\":" + forged);
                               });
        try {
            mpt::load_model(tiny.context, forged_path);
            FAIL("loaded a model whose trainable flag is " << forged);
        } catch (const mpt::Error& error) {
            CHECK(error.status() == MPT_STATUS_CORRUPT_DATA);
            CHECK_MESSAGE(std::string(error.what()).find("trainable") != std::string::npos, error.what());
        }
    }
}
