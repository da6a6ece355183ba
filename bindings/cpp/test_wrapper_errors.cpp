// Misuse and limits through the C++ wrapper throw mptrain::Error with the C status: a moved-from trainer,
// buffers beyond the library's limit or any memory (never std::bad_alloc).

#include "wrapper_test_support.h"

#include <functional>

TEST_CASE("a moved-from trainer throws mptrain::Error from every call") {
    auto context = cpu_context();
    auto model = mlp(context);
    auto data = blobs(context, 120, 53);
    mptrain::Trainer trainer(model, adam());
    mptrain::Trainer owner = std::move(trainer);
    CHECK(status_of([&] { trainer.fit(data, 1, 8); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.set_callbacks([](const mptrain::Progress&) { return false; }); }) ==
          MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.progress(); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { trainer.evaluate(data); }) == MPT_STATUS_INVALID_ARGUMENT);
    owner.fit(data, 1, 8);  // the new owner has the handle and the callbacks
    CHECK(owner.progress() == std::pair<int64_t, int64_t>{120 / 8, 1});
}

TEST_CASE("buffers beyond the library's limit or any memory throw mptrain::Error, not std::bad_alloc") {
    auto context = cpu_context();
    // One 2^24 x 2^24 layer: 2^48 floats, more than any address space.
    mptrain::Model huge(context, int64_t{1} << 24);
    huge.add_dense(int64_t{1} << 24);
    CHECK(status_of([&] { huge.weights(0); }) == MPT_STATUS_OUT_OF_MEMORY);

    // 2^21 rows of 2^20 outputs are 2^41 floats, over the library's 2^40: refused as the library
    // refuses them (it checks the rows before the output count), before the output is allocated.
    mptrain::Model wide(context, 1);
    wide.add_dense(int64_t{1} << 20);
    const std::vector<float> inputs(size_t{1} << 21);
    float out = 0.0f;
    REQUIRE(mpt_model_predict(wide.get(), inputs.data(), static_cast<int64_t>(inputs.size()), &out, 1) ==
            MPT_STATUS_INVALID_ARGUMENT);
    const std::string library = mpt_last_error();
    CHECK(library == "the outputs (rows * output features) would hold more than 2^40 elements");
    mptrain::Trainer trainer(wide);
    for (const auto& predict : {std::function<void()>([&] { wide.predict(inputs); }),
                                std::function<void()>([&] { trainer.predict(inputs); })}) {
        try {
            predict();
            FAIL("predict accepted 2^41 outputs");
        } catch (const mptrain::Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(error.message() == library);
        }
    }

    // 4 rows of 2^62 + 1 features overflow int64_t (and wrapped to the 4 values given).
    const int64_t features = (int64_t{1} << 62) + 1;
    CHECK(status_of([&] {
              mptrain::Dataset::from_f32(context, std::vector<float>(4), features, std::vector<int32_t>(4), 2);
          }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { mptrain::Dataset::from_f32_targets(context, std::vector<float>(4), 1, std::vector<float>(4), features); }) ==
          MPT_STATUS_SHAPE_MISMATCH);
}

TEST_CASE("a prediction on no rows says so, in the bindings' words") {
    auto context = cpu_context();
    auto model = mlp(context);
    mptrain::Trainer trainer(model);
    for (const auto& predict : {std::function<void()>([&] { model.predict({}); }),
                                std::function<void()>([&] { trainer.predict({}); })}) {
        try {
            predict();
            FAIL("predict accepted no rows");
        } catch (const mptrain::Error& error) {
            CHECK(error.status() == MPT_STATUS_SHAPE_MISMATCH);
            CHECK(error.message() == "inputs has no rows: at least one is needed");
        }
    }
}
