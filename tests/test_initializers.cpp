// Weight initializers through the C API (mpt_model_set_layer_initializer): each draws Keras's
// distribution (its bounds, mean and variance scale / n from the right fans), one seed draws one set
// of weights, what it refuses, and the use it exists for: SELU layers from LeCun-normal keep unit
// variance through depth.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/temp_dir.h"

namespace {

using mpt_test::same_bits;

struct Expected {
    mpt_initializer initializer;
    const char* name;
    double scale;
    bool fan_average;  // Glorot: n = (fan_in + fan_out) / 2; else n = fan_in
    bool normal;
};

const Expected kInitializers[] = {
    {MPT_INITIALIZER_GLOROT_UNIFORM, "glorot_uniform", 1.0, true, false},
    {MPT_INITIALIZER_GLOROT_NORMAL, "glorot_normal", 1.0, true, true},
    {MPT_INITIALIZER_HE_UNIFORM, "he_uniform", 2.0, false, false},
    {MPT_INITIALIZER_HE_NORMAL, "he_normal", 2.0, false, true},
    {MPT_INITIALIZER_LECUN_UNIFORM, "lecun_uniform", 1.0, false, false},
    {MPT_INITIALIZER_LECUN_NORMAL, "lecun_normal", 1.0, false, true},
};

// A model of `inputs` -> widths... (linear layers), every layer drawn by `initializer`.
mpt_model_t* model_of(mpt_context_t* context, int64_t inputs, const std::vector<int64_t>& widths,
                      mpt_activation activation, mpt_initializer initializer) {
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, inputs, &model));
    for (size_t i = 0; i < widths.size(); ++i) {
        REQUIRE_OK(mpt_model_add_dense(model, widths[i], activation));
        REQUIRE_OK(mpt_model_set_layer_initializer(model, static_cast<int64_t>(i), initializer));
    }
    return model;
}

std::vector<float> layer_weights(mpt_model_t* model, int64_t layer, int64_t count, std::vector<float>* bias = nullptr,
                                 int64_t units = 0) {
    std::vector<float> weights(static_cast<size_t>(count));
    std::vector<float> ignored(static_cast<size_t>(std::max<int64_t>(units, 1)));
    std::vector<float>& b = bias ? *bias : ignored;
    if (bias) b.resize(static_cast<size_t>(units));
    REQUIRE_OK(mpt_model_get_weights(model, layer, weights.data(), count, bias ? b.data() : nullptr, bias ? units : 0));
    return weights;
}

}  // namespace

TEST_CASE("each initializer draws Keras's distribution: its bounds, mean 0 and variance scale / n from the right fans") {
    // 600 inputs and 400 units: fan_in, the fans' mean and twice either give variances 20% or more
    // apart, and 240,000 draws pin a variance to about 0.3%.
    const int64_t inputs = 600, units = 400, count = inputs * units;
    for (const Expected& expected : kInitializers) {
        const std::string name = expected.name;
        CAPTURE(name);
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 3);
        mpt_model_t* model = model_of(context, inputs, {units, 10}, MPT_ACTIVATION_LINEAR, expected.initializer);
        mpt_initializer reported = MPT_INITIALIZER_GLOROT_UNIFORM;
        REQUIRE_OK(mpt_model_get_layer_initializer(model, 0, &reported));
        CHECK(reported == expected.initializer);
        std::vector<float> bias;
        const std::vector<float> weights = layer_weights(model, 0, count, &bias, units);
        CHECK(std::all_of(bias.begin(), bias.end(), [](float b) { return b == 0.0f; }));

        const double n = expected.fan_average ? (inputs + units) / 2.0 : static_cast<double>(inputs);
        const double variance = expected.scale / n;
        double sum = 0.0, squares = 0.0, largest = 0.0;
        int64_t beyond_one_stddev = 0;
        for (float w : weights) {
            sum += w;
            squares += static_cast<double>(w) * w;
            largest = std::max(largest, std::fabs(static_cast<double>(w)));
            beyond_one_stddev += std::fabs(w) > std::sqrt(variance);
        }
        const double mean = sum / count, sample_variance = squares / count - mean * mean;
        CHECK(std::fabs(mean) <= 4.0 * std::sqrt(variance / count));
        // The variance's standard error is 0.2-0.25% here: 1% is four of them, and catches a 20% error
        // in the fans or a truncated normal whose width misses the correction by 2%.
        CHECK(sample_variance == doctest::Approx(variance).epsilon(0.01).scale(0));
        const double share_beyond = static_cast<double>(beyond_one_stddev) / count;
        if (expected.normal) {
            // N(0, s) truncated to 2 s, s = sqrt(variance) / 0.8796: nothing beyond 2 s, draws close to
            // it, and P(|w| > sqrt(variance)) = P(0.8796 < |z| < 2) / P(|z| < 2) = 0.3495 (a uniform
            // draw's is 0.4226, an untruncated normal's 0.3173).
            const double cut = 2.0 * std::sqrt(variance) / 0.87962566103423978;
            CHECK(largest <= cut * (1 + 1e-6));
            CHECK(largest >= 0.995 * cut);  // some 270 of the draws are expected beyond
            CHECK(share_beyond == doctest::Approx(0.3495).epsilon(0.03).scale(0));
        } else {
            // Uniform in [-limit, limit), limit = sqrt(3 variance): P(|w| > sqrt(variance)) = 1 - 1/sqrt(3).
            const double limit = std::sqrt(3.0 * variance);
            CHECK(largest < limit * (1 + 1e-6));
            CHECK(largest >= 0.999 * limit);
            CHECK(share_beyond == doctest::Approx(1.0 - 1.0 / std::sqrt(3.0)).epsilon(0.03).scale(0));
        }
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
}

TEST_CASE("the default is Glorot-uniform, one seed draws one set of weights, and a layer's initializer changes no other layer's") {
    const int64_t inputs = 30, hidden = 11, outputs = 3;
    auto weights_with = [&](uint64_t seed, const std::vector<int>& initializers) {
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, seed);
        mpt_model_t* model = nullptr;
        REQUIRE_OK(mpt_model_create(context, inputs, &model));
        REQUIRE_OK(mpt_model_add_dense(model, hidden, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, outputs, MPT_ACTIVATION_SOFTMAX));
        for (size_t layer = 0; layer < initializers.size(); ++layer)
            if (initializers[layer] >= 0)
                REQUIRE_OK(mpt_model_set_layer_initializer(model, static_cast<int64_t>(layer),
                                                           static_cast<mpt_initializer>(initializers[layer])));
        std::vector<std::vector<float>> layers = {layer_weights(model, 0, inputs * hidden),
                                                  layer_weights(model, 1, hidden * outputs)};
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        return layers;
    };
    const auto unset = weights_with(5, {});
    // The first weights of each layer, as mptrain drew them before initializers could be chosen
    // (sqrtf(6 / 41) and sqrtf(6 / 14) in float: a double limit would differ; reproduced by
    // replaying xoshiro256** in Python). Default models keep their initial weights bit for bit.
    auto bits_of = [](float value) {
        uint32_t bits = 0;
        std::memcpy(&bits, &value, sizeof bits);
        return bits;
    };
    CHECK(bits_of(unset[0][0]) == 0xbe25c528u);
    CHECK(bits_of(unset[0][1]) == 0x3d9ff422u);
    CHECK(bits_of(unset[0][2]) == 0x3dea5372u);
    CHECK(bits_of(unset[1][0]) == 0x3e84b12cu);
    CHECK(bits_of(unset[1][1]) == 0x3e8ce05cu);
    CHECK(bits_of(unset[1][2]) == 0xbe3db179u);
    const auto glorot = weights_with(5, {MPT_INITIALIZER_GLOROT_UNIFORM, MPT_INITIALIZER_GLOROT_UNIFORM});
    CHECK(same_bits(unset[0], glorot[0]));
    CHECK(same_bits(unset[1], glorot[1]));
    const auto he = weights_with(5, {MPT_INITIALIZER_HE_NORMAL, -1});
    CHECK(same_bits(he[0], weights_with(5, {MPT_INITIALIZER_HE_NORMAL, -1})[0]));  // one seed, one draw
    CHECK_FALSE(same_bits(he[0], weights_with(6, {MPT_INITIALIZER_HE_NORMAL, -1})[0]));
    CHECK_FALSE(same_bits(he[0], unset[0]));
    // Another initializer for one layer leaves the other's weights as they were, normal ones (which
    // take a varying count of random numbers) included.
    CHECK(same_bits(he[1], unset[1]));
    const auto second = weights_with(5, {-1, MPT_INITIALIZER_LECUN_UNIFORM});
    CHECK(same_bits(second[0], unset[0]));
    CHECK_FALSE(same_bits(second[1], unset[1]));
    const auto both = weights_with(5, {MPT_INITIALIZER_GLOROT_NORMAL, MPT_INITIALIZER_LECUN_NORMAL});
    CHECK(same_bits(both[1], weights_with(5, {-1, MPT_INITIALIZER_LECUN_NORMAL})[1]));
}

TEST_CASE("an initializer is set before the model is built, for a layer it has, from the enum; a loaded model reports the default") {
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 5);
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, 4, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, 3, MPT_ACTIVATION_SOFTMAX));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_initializer(model, 2, MPT_INITIALIZER_HE_NORMAL));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_initializer(model, -1, MPT_INITIALIZER_HE_NORMAL));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_model_set_layer_initializer(model, 0, static_cast<mpt_initializer>(MPT_INITIALIZER_LECUN_NORMAL + 1)));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_initializer(model, 0, static_cast<mpt_initializer>(-1)));
    mpt_initializer out = MPT_INITIALIZER_LECUN_NORMAL;
    REQUIRE_OK(mpt_model_get_layer_initializer(model, 0, &out));
    CHECK(out == MPT_INITIALIZER_GLOROT_UNIFORM);  // the refusals changed nothing
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_layer_initializer(model, 2, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_layer_initializer(model, 0, nullptr));
    REQUIRE_OK(mpt_model_set_layer_initializer(model, 0, MPT_INITIALIZER_HE_UNIFORM));
    REQUIRE_OK(mpt_model_set_layer_initializer(model, 1, MPT_INITIALIZER_LECUN_NORMAL));

    // Building draws the weights; after that the initializer is history.
    const std::vector<float> drawn = layer_weights(model, 0, 4 * 8);
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_model_set_layer_initializer(model, 0, MPT_INITIALIZER_GLOROT_UNIFORM));
    CHECK(same_bits(drawn, layer_weights(model, 0, 4 * 8)));
    REQUIRE_OK(mpt_model_get_layer_initializer(model, 1, &out));
    CHECK(out == MPT_INITIALIZER_LECUN_NORMAL);

    // A trainer builds a model too; a refused build (dropout on the last layer) leaves it settable.
    {
        mpt_model_t* other = nullptr;
        REQUIRE_OK(mpt_model_create(context, 4, &other));
        REQUIRE_OK(mpt_model_add_dense(other, 8, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(other, 3, MPT_ACTIVATION_SOFTMAX));
        REQUIRE_OK(mpt_model_set_layer_dropout(other, 1, 0.5f));
        mpt_trainer_options_t* options = nullptr;
        REQUIRE_OK(mpt_trainer_options_create(&options));
        mpt_trainer_t* trainer = nullptr;
        CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_create(other, options, &trainer));
        REQUIRE_OK(mpt_model_set_layer_initializer(other, 0, MPT_INITIALIZER_HE_NORMAL));
        REQUIRE_OK(mpt_model_set_layer_dropout(other, 1, 0.0f));
        REQUIRE_OK(mpt_trainer_create(other, options, &trainer));
        CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_model_set_layer_initializer(other, 0, MPT_INITIALIZER_LECUN_NORMAL));
        mpt_initializer kept = MPT_INITIALIZER_GLOROT_UNIFORM;
        REQUIRE_OK(mpt_model_get_layer_initializer(other, 0, &kept));
        CHECK(kept == MPT_INITIALIZER_HE_NORMAL);
        mpt_trainer_destroy(trainer);
        mpt_trainer_options_destroy(options);
        mpt_model_destroy(other);
    }

    // A model file holds the weights, not how they were drawn.
    mpt_test::TempDir directory;
    const std::string path = (directory.path / "model.safetensors").string();
    REQUIRE_OK(mpt_model_save(model, path.c_str()));
    mpt_model_t* loaded = nullptr;
    REQUIRE_OK(mpt_model_load(context, path.c_str(), &loaded));
    REQUIRE_OK(mpt_model_get_layer_initializer(loaded, 0, &out));
    CHECK(out == MPT_INITIALIZER_GLOROT_UNIFORM);
    CHECK(same_bits(drawn, layer_weights(loaded, 0, 4 * 8)));
    mpt_model_destroy(loaded);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

// The self-normalising property SELU was designed with (Klambauer et al. 2017): with LeCun-normal
// weights, unit-variance inputs stay near mean 0 and variance 1 through any depth. He-normal's
// doubled variance compounds instead.
TEST_CASE("eight SELU layers from LeCun-normal keep unit-variance inputs near variance 1; from He-normal the variance grows") {
    const int64_t width = 256, rows = 256, depth = 8;
    std::vector<float> inputs(static_cast<size_t>(rows * width));
    uint64_t state = 12345;
    for (size_t i = 0; i + 1 < inputs.size(); i += 2) {  // Box-Muller on a 64-bit LCG: standard normals
        auto uniform = [&] {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            return (static_cast<double>(state >> 11) + 0.5) / 9007199254740992.0;
        };
        const double radius = std::sqrt(-2.0 * std::log(uniform())), angle = 6.283185307179586 * uniform();
        inputs[i] = static_cast<float>(radius * std::cos(angle));
        inputs[i + 1] = static_cast<float>(radius * std::sin(angle));
    }
    auto output_variance = [&](mpt_initializer initializer) {
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 9);
        mpt_model_t* model =
            model_of(context, width, std::vector<int64_t>(static_cast<size_t>(depth), width), MPT_ACTIVATION_SELU,
                     initializer);
        std::vector<float> outputs(inputs.size());
        REQUIRE_OK(mpt_model_predict(model, inputs.data(), rows, outputs.data(), static_cast<int64_t>(outputs.size())));
        double sum = 0.0, squares = 0.0;
        for (float y : outputs) {
            sum += y;
            squares += static_cast<double>(y) * y;
        }
        const double mean = sum / static_cast<double>(outputs.size());
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        MESSAGE("SELU x" << depth << " from initializer " << initializer << ": mean " << mean << ", variance "
                         << squares / static_cast<double>(outputs.size()) - mean * mean);
        return std::make_pair(mean, squares / static_cast<double>(outputs.size()) - mean * mean);
    };
    const auto [lecun_mean, lecun_variance] = output_variance(MPT_INITIALIZER_LECUN_NORMAL);
    CHECK(std::fabs(lecun_mean) < 0.2);
    CHECK(lecun_variance == doctest::Approx(1.0).epsilon(0.2).scale(0));
    CHECK(output_variance(MPT_INITIALIZER_HE_NORMAL).second > 2.0 * lecun_variance);
}
