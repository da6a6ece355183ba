// The update's finiteness proof (Executor::decide_from_bounds) needs max|x| of each layer's input.
// For a gathered batch whose every value decides the update as no max at all would (uint8 samples
// normalised into [-1, 1] without a standardization: 0, or a magnitude in [2^-40, 1]), it reads
// nothing: at batch 4096 on a GPU that pass was CIFAR-10's 25 MB of bf16 inputs. Training must come
// out bit for bit as with the pass (the same batches given as float samples, which are measured),
// skipped steps and the loss scale included; the CPU backend's description counts the elements the
// passes read ("max_abs_elements"), which shows which inputs were measured (and which tensors the
// backward took the maxima of instead: Backend::dense_backward_data).
#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace {

constexpr int64_t kFeatures = 64, kHidden = 32, kClasses = 3, kRows = 96, kBatch = 32, kEpochs = 10;
constexpr int64_t kSteps = kEpochs * (kRows / kBatch);

struct Bytes {
    std::vector<uint8_t> samples;
    std::vector<int32_t> labels;
};

// Bytes whose mean depends on the label, so that the model learns something.
Bytes make_bytes() {
    mpt_test::TestRng rng(11);
    Bytes bytes;
    for (int64_t r = 0; r < kRows; ++r) {
        const int32_t label = static_cast<int32_t>(r % kClasses);
        for (int64_t f = 0; f < kFeatures; ++f)
            bytes.samples.push_back(static_cast<uint8_t>((rng.next() % 128) + (f % kClasses == label ? 127 : 0)));
        bytes.labels.push_back(label);
    }
    return bytes;
}

enum class Given { bytes, floats };

struct Setup {
    Given given = Given::bytes;
    float scale = 1.0f / 255.0f, offset = 0.0f;
    bool model_standardizes = false;
    bool first_layer_frozen = false;
    float input_dropout = 0.0f;
    mpt_precision precision = MPT_PRECISION_MIXED_FP16;
};

struct Outcome {
    std::vector<float> weights;
    float scale = 0.0f;
    int64_t skipped = 0;
    uint64_t max_abs_elements = 0;
};

uint64_t max_abs_elements(const mpt_context_t* context) {
    size_t length = 0;
    REQUIRE_OK(mpt_context_describe(context, nullptr, 0, &length));
    std::string text(length + 1, '\0');
    REQUIRE_OK(mpt_context_describe(context, text.data(), text.size(), &length));
    text.resize(length);
    return nlohmann::json::parse(text).at("max_abs_elements").get<uint64_t>();
}

// Trains kEpochs of the bytes, given as bytes normalised by the backend or as the floats that
// normalisation makes (float(byte) * scale + offset, as the gathers compute it), with dynamic loss
// scaling from 2^24: its first steps overflow in fp16 and are skipped.
Outcome train(const Setup& setup) {
    const Bytes bytes = make_bytes();
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 5);
    mpt_dataset_t* dataset = nullptr;
    if (setup.given == Given::bytes) {
        REQUIRE_OK(mpt_dataset_create_u8(context, bytes.samples.data(), kRows, kFeatures, bytes.labels.data(),
                                         static_cast<int32_t>(kClasses), setup.scale, setup.offset, &dataset));
    } else {
        std::vector<float> floats;
        for (const uint8_t byte : bytes.samples)
            floats.push_back(static_cast<float>(byte) * setup.scale + setup.offset);
        REQUIRE_OK(mpt_dataset_create_f32(context, floats.data(), kRows, kFeatures, bytes.labels.data(),
                                          static_cast<int32_t>(kClasses), 1, &dataset));
    }
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, kFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, kHidden, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX));
    REQUIRE_OK(mpt_model_set_input_dropout(model, setup.input_dropout));
    if (setup.first_layer_frozen) REQUIRE_OK(mpt_model_set_layer_trainable(model, 0, 0));
    if (setup.model_standardizes) {
        // Mean 0 and deviation 1: the values stay as they are, but a standardization may widen them.
        const std::vector<float> mean(kFeatures, 0.0f), deviation(kFeatures, 1.0f);
        REQUIRE_OK(mpt_model_set_input_standardization(model, mean.data(), deviation.data(), kFeatures));
    }
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, setup.precision));
    REQUIRE_OK(mpt_trainer_options_set_loss_scaling(options, MPT_LOSS_SCALING_DYNAMIC, 16777216.0f));
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_options_destroy(options);

    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, kEpochs, kBatch, 1));
    Outcome outcome;
    outcome.weights = mpt_test::two_layer_weights(model, kFeatures, kHidden, kClasses);
    REQUIRE_OK(mpt_trainer_get_loss_scale(trainer, &outcome.scale, nullptr, &outcome.skipped));
    outcome.max_abs_elements = max_abs_elements(context);

    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_dataset_destroy(dataset);
    mpt_context_destroy(context);
    return outcome;
}

}  // namespace

TEST_CASE("a batch of bytes normalised into [0, 1] trains as its floats do, without the pass over its values") {
    for (const mpt_precision precision : {MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_FP32}) {
        CAPTURE(precision);
        Setup bytes;
        bytes.precision = precision;
        Setup floats = bytes;
        floats.given = Given::floats;
        const Outcome unmeasured = train(bytes), measured = train(floats);
        CHECK(mpt_test::same_bits(unmeasured.weights, measured.weights));
        CHECK(unmeasured.scale == measured.scale);
        CHECK(unmeasured.skipped == measured.skipped);
        if (precision == MPT_PRECISION_MIXED_FP16) CHECK(measured.skipped > 0);  // the proof had steps to skip
        // Every step's pass over the inputs, and nothing else, left out.
        CHECK(measured.max_abs_elements - unmeasured.max_abs_elements == uint64_t{kSteps * kBatch * kFeatures});
        // Nothing is left to read: the logits' gradient has its maximum taken by the loss head that
        // writes it, the hidden layer's gradient and outputs theirs by the backward that writes the
        // gradient.
        CHECK(unmeasured.max_abs_elements == 0);
    }
}

TEST_CASE("only batches whose every value decides as no max leave their pass out") {
    Setup reference;
    reference.given = Given::floats;
    reference.precision = MPT_PRECISION_MIXED_BF16;
    const uint64_t measured = train(reference).max_abs_elements;
    const uint64_t unmeasured = measured - uint64_t{kSteps * kBatch * kFeatures};

    SUBCASE("bytes into [-0.5, 0.5], or all 0: left out") {
        Setup centred = reference;
        centred.given = Given::bytes;
        centred.offset = -0.5f;
        CHECK(train(centred).max_abs_elements == unmeasured);
        Setup zero = reference;
        zero.given = Given::bytes;
        zero.scale = 0.0f;
        CHECK(train(zero).max_abs_elements == unmeasured);
    }
    SUBCASE("bytes into [0, 2]: measured (max|A| above 1 widens the proof's bound)") {
        Setup wide = reference;
        wide.given = Given::bytes;
        wide.scale = 2.0f / 255.0f;
        CHECK(train(wide).max_abs_elements == measured);
    }
    SUBCASE("bytes into [0, 2.55e-11]: measured (batch-based clipping scales a max below 2^-40), but not in fp16") {
        Setup tiny = reference;
        tiny.given = Given::bytes;
        tiny.scale = 1e-13f;
        CHECK(train(tiny).max_abs_elements == measured);
        // fp16 rounds every such value to 0: the batch's dtype decides, not the samples' floats.
        tiny.precision = MPT_PRECISION_MIXED_FP16;
        CHECK(train(tiny).max_abs_elements == unmeasured);
    }
    SUBCASE("a frozen first layer: its input is no gradient's, and the next layer's input is measured") {
        Setup frozen = reference;
        frozen.first_layer_frozen = true;
        Setup frozen_bytes = frozen;
        frozen_bytes.given = Given::bytes;
        const uint64_t floats_frozen = train(frozen).max_abs_elements;
        // The first layer's dZ and inputs: neither read. The hidden layer's outputs (the last
        // layer's input) are read by the pass now: no backward through the last layer writes dZ
        // below it, which would take their maximum (the unmeasured run's pass reads only the logits'
        // gradient).
        CHECK(floats_frozen == unmeasured + uint64_t{kSteps * kBatch * kHidden});
        CHECK(train(frozen_bytes).max_abs_elements == floats_frozen);
    }
    SUBCASE("a model that standardizes its inputs, or drops some: measured") {
        Setup standardized = reference;
        standardized.given = Given::bytes;
        standardized.model_standardizes = true;
        CHECK(train(standardized).max_abs_elements == measured);
        Setup dropped = reference;
        dropped.given = Given::bytes;
        dropped.input_dropout = 0.25f;
        CHECK(train(dropped).max_abs_elements == measured);
    }
}
