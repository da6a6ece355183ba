// A model's per-layer settings through the C++ wrapper: initializers, input and layer dropout rates (set,
// refused, trained with, saved and loaded) and frozen layers.

#include "wrapper_test_support.h"

#include <cmath>
#include <limits>

TEST_CASE("an initializer set through the wrapper chains, reads back, draws the weights and is fixed once they are drawn") {
    auto drawn = [](mpt_initializer initializer) {
        auto context = cpu_context(4);
        auto model = mlp(context);
        CHECK(model.layer_initializer(1) == MPT_INITIALIZER_GLOROT_UNIFORM);
        CHECK(&model.set_layer_initializer(1, initializer) == &model);
        CHECK(model.layer_initializer(1) == initializer);
        CHECK(model.layer_initializer(0) == MPT_INITIALIZER_GLOROT_UNIFORM);
        auto weights = model.weights(1).first;
        CHECK(status_of([&] { model.set_layer_initializer(1, MPT_INITIALIZER_HE_NORMAL); }) == MPT_STATUS_INVALID_STATE);
        return weights;
    };
    CHECK(bits_of(drawn(MPT_INITIALIZER_HE_UNIFORM)) == bits_of(drawn(MPT_INITIALIZER_HE_UNIFORM)));
    CHECK(bits_of(drawn(MPT_INITIALIZER_HE_UNIFORM)) != bits_of(drawn(MPT_INITIALIZER_GLOROT_UNIFORM)));
    auto context = cpu_context();
    auto model = mlp(context);
    CHECK(status_of([&] { model.set_layer_initializer(3, MPT_INITIALIZER_HE_NORMAL); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { model.set_layer_initializer(0, static_cast<mpt_initializer>(6)); }) ==
          MPT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("an input dropout rate set through the wrapper chains and reads back; a built model's is fixed") {
    auto context = cpu_context();
    auto model = mlp(context);
    CHECK(model.input_dropout() == 0.0f);
    CHECK(&model.set_input_dropout(0.125f) == &model);
    CHECK(model.input_dropout() == 0.125f);
    CHECK(status_of([&] { model.set_input_dropout(1.0f); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(model.input_dropout() == 0.125f);
    mptrain::Trainer trainer(model, adam());
    CHECK(status_of([&] { model.set_input_dropout(0.0f); }) == MPT_STATUS_INVALID_STATE);
}

TEST_CASE("a dropout rate set through the wrapper reads back on its layer alone, -0 as 0") {
    auto context = cpu_context();
    auto model = mlp(context);
    for (int64_t layer = 0; layer < 3; ++layer) CHECK(model.layer_dropout(layer) == 0.0f);  // none by default
    CHECK(&model.set_layer_dropout(1, 0.25f) == &model);  // chains, as set_layer_dtype
    CHECK(model.layer_dropout(0) == 0.0f);
    CHECK(model.layer_dropout(1) == 0.25f);
    CHECK(model.layer_dropout(2) == 0.0f);
    model.set_layer_dropout(0, 0.5f).set_layer_dropout(1, -0.0f);
    CHECK(model.layer_dropout(0) == 0.5f);
    CHECK(bits_of({model.layer_dropout(1)}) == bits_of({0.0f}));  // +0, not -0
    const float largest = std::nextafter(1.0f, 0.0f);  // the largest rate below 1 is in range
    model.set_layer_dropout(1, largest);
    CHECK(model.layer_dropout(1) == largest);
}

TEST_CASE("a dropout rate outside [0, 1) or a layer out of range throws INVALID_ARGUMENT, the rate unchanged") {
    auto context = cpu_context();
    auto model = mlp(context);
    model.set_layer_dropout(0, 0.25f);
    for (float refused : {1.0f, -0.1f, std::nanf(""), 1.5f, std::numeric_limits<float>::infinity()}) {
        CAPTURE(refused);
        CHECK(status_of([&] { model.set_layer_dropout(0, refused); }) == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(model.layer_dropout(0) == 0.25f);
    }
    for (int64_t layer : {int64_t{-1}, int64_t{3}, std::numeric_limits<int64_t>::max()}) {
        CAPTURE(layer);
        CHECK(status_of([&] { model.set_layer_dropout(layer, 0.5f); }) == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(status_of([&] { static_cast<void>(model.layer_dropout(layer)); }) == MPT_STATUS_INVALID_ARGUMENT);
    }
    mptrain::Trainer trainer(model, adam());  // the refusals left a model that builds
}

TEST_CASE("dropout on the last layer makes building throw INVALID_STATE; rate 0 builds; a built model's rates are fixed") {
    auto context = cpu_context();
    auto model = mlp(context);
    model.set_layer_dropout(2, 0.5f);  // accepted: only building refuses it
    CHECK(model.layer_dropout(2) == 0.5f);
    try {
        mptrain::Trainer trainer(model, adam());
        FAIL("a trainer was created for a model whose last layer has dropout");
    } catch (const mptrain::Error& error) {
        CHECK(error.status() == MPT_STATUS_INVALID_STATE);
        CHECK(error.message().find("last layer") != std::string::npos);
    }
    CHECK(status_of([&] { model.predict(std::vector<float>(kFeatures, 1.0f)); }) == MPT_STATUS_INVALID_STATE);
    model.set_layer_dropout(2, 0.0f);  // the refused builds left the model unbuilt
    mptrain::Trainer trainer(model, adam());
    CHECK(status_of([&] { model.set_layer_dropout(0, 0.25f); }) == MPT_STATUS_INVALID_STATE);
    CHECK(model.layer_dropout(0) == 0.0f);
}

TEST_CASE("a fit with dropout on a hidden layer learns and trains otherwise; evaluate and predict use every output") {
    std::vector<int32_t> labels;
    const std::vector<float> points = blob_samples(30, 83, labels);
    const auto options = [] { return std::move(adam().precision(MPT_PRECISION_FP32)); };
    auto context = cpu_context(5), plain_context = cpu_context(5);  // one seed: the same initial weights
    auto model = mlp(context), plain = mlp(plain_context);
    model.set_layer_dropout(0, 0.5f);
    mptrain::Trainer trainer(model, options()), plain_trainer(plain, options());
    CHECK(weight_bits(model) == weight_bits(plain));
    const auto data = blobs(context, 240, 81);
    trainer.fit(data, 5, 16);
    plain_trainer.fit(blobs(plain_context, 240, 81), 5, 16);
    CHECK(weight_bits(model) != weight_bits(plain));  // the dropped outputs changed the steps
    const mptrain::Evaluation evaluation = trainer.evaluate(data, 16);
    CHECK(evaluation.accuracy >= 0.9f);

    // The trained weights in a model without dropout: every evaluation and prediction the same, bit for
    // bit. The same batches: a trainer that never fitted evaluates in batches of 256 by default, whose
    // sums OpenBLAS may round otherwise (its Haswell kernels do).
    auto copy_context = cpu_context(9);
    auto copy = mlp(copy_context);
    for (int64_t layer = 0; layer < 3; ++layer) {
        auto [weights, bias] = model.weights(layer);
        copy.set_weights(layer, weights, bias);
    }
    mptrain::Trainer copy_trainer(copy, options());
    const mptrain::Evaluation copy_evaluation = copy_trainer.evaluate(blobs(copy_context, 240, 81), 16);
    CHECK(bits_of({evaluation.loss, evaluation.accuracy}) == bits_of({copy_evaluation.loss, copy_evaluation.accuracy}));
    CHECK(bits_of(model.predict(points)) == bits_of(copy.predict(points)));
    CHECK(bits_of(trainer.predict(points)) == bits_of(copy_trainer.predict(points)));
    CHECK(bits_of(model.predict(points)) == bits_of(model.predict(points)));  // no mask at inference
}

TEST_CASE("a layer frozen through the wrapper keeps its weights while the others train; thawed, it trains") {
    auto context = cpu_context();
    auto model = mlp(context);
    for (int64_t layer = 0; layer < 3; ++layer) CHECK(model.layer_trainable(layer));  // the default
    CHECK(&model.set_layer_trainable(1, false) == &model);  // chains
    CHECK(!model.layer_trainable(1));
    mptrain::Trainer trainer(model, adam());
    const auto data = blobs(context, 240, 81);
    auto layer_bits = [&](int64_t layer) {
        auto [weights, bias] = model.weights(layer);
        weights.insert(weights.end(), bias.begin(), bias.end());
        return bits_of(weights);
    };
    const auto frozen = layer_bits(1), first = layer_bits(0);
    trainer.fit(data, 1, 16);
    CHECK(layer_bits(1) == frozen);
    CHECK(layer_bits(0) != first);
    model.set_layer_trainable(1, true);
    trainer.fit(data, 1, 16);
    CHECK(layer_bits(1) != frozen);
    CHECK(status_of([&] { model.set_layer_trainable(3, false); }) == MPT_STATUS_INVALID_ARGUMENT);
    for (int64_t layer = 0; layer < 3; ++layer) model.set_layer_trainable(layer, false);
    CHECK(status_of([&] { trainer.fit(data, 1, 16); }) == MPT_STATUS_INVALID_STATE);
}

TEST_CASE("a model saved with dropout, and a checkpoint's model, load with the same rates") {
    TempDir directory;
    auto context = cpu_context();
    auto model = mlp(context);
    model.set_layer_dropout(0, 0.25f).set_layer_dropout(1, 0.5f);
    mptrain::Trainer trainer(model, adam());
    trainer.fit(blobs(context, 60, 11), 1, 16);
    const std::string path = directory.file("dropout.safetensors"), checkpoint = directory.file("checkpoint.safetensors");
    model.save(path);
    trainer.save_checkpoint(checkpoint);

    auto other = cpu_context(99);
    for (const std::string& file : {path, checkpoint}) {
        CAPTURE(file);
        auto loaded = mptrain::Model::load(other, file);
        CHECK(loaded.layer_dropout(0) == 0.25f);
        CHECK(loaded.layer_dropout(1) == 0.5f);
        CHECK(loaded.layer_dropout(2) == 0.0f);
        CHECK(weight_bits(loaded) == weight_bits(model));
        CHECK(status_of([&] { loaded.set_layer_dropout(0, 0.0f); }) == MPT_STATUS_INVALID_STATE);  // loaded: built
    }
    auto plain = mlp(context);
    plain.save(path);  // overwritten without dropout: the rates are the file's
    auto reloaded = mptrain::Model::load(other, path);
    for (int64_t layer = 0; layer < 3; ++layer) CHECK(reloaded.layer_dropout(layer) == 0.0f);
}
