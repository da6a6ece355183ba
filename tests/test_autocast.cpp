// The autocast policy: which dtype each op runs in, emulated on the CPU by rounding, checked against
// an independent rounding written here with frexp/ldexp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "amp/precision_policy.h"
#include "backend/cpu/amx_gemm.h"
#include "nn/trainer.h"

using namespace mpt;

namespace {

// Round to `bits` significant bits, ties to even (the default floating-point rounding mode).
double round_significand(double value, int bits) {
    if (value == 0.0 || !std::isfinite(value)) return value;
    int exponent;
    const double fraction = std::frexp(value, &exponent);
    return std::ldexp(std::nearbyint(std::ldexp(fraction, bits)), exponent - bits);
}
double reference_bf16(double value) { return round_significand(value, 8); }

std::shared_ptr<Context> cpu_context() {
    ContextConfig config;
    config.backend = MPT_BACKEND_CPU;
    config.threads = 1;
    return std::make_shared<Context>(config);
}

}  // namespace

// ctest runs this file once more with MPTRAIN_CPU_AMX=0 and MPTRAIN_CPU_BF16_DOT=0, where auto must
// be fp32 on any CPU.
TEST_CASE(
    "auto resolves to bf16 on a CPU that multiplies it natively (AMX, AVX512-BF16), else fp32; explicit "
    "policies map to their dtypes") {
    auto context = cpu_context();
    const bool native_bf16 = native_gemm_available(DType::bf16);
    INFO("native bf16 GEMM: " << (native_bf16 ? "available" : native_gemm_unavailable_reason(DType::bf16)));
    CHECK(resolve_precision(MPT_PRECISION_AUTO, context->backend()).compute_dtype ==
          (native_bf16 ? DType::bf16 : DType::fp32));
    CHECK(resolve_precision(MPT_PRECISION_AUTO, context->backend()).precision ==
          (native_bf16 ? MPT_PRECISION_MIXED_BF16 : MPT_PRECISION_FP32));
    const char* amx = std::getenv("MPTRAIN_CPU_AMX");
    const char* dot_products = std::getenv("MPTRAIN_CPU_BF16_DOT");
    if (amx && std::string(amx) == "0" && dot_products && std::string(dot_products) == "0") CHECK_FALSE(native_bf16);
    CHECK(resolve_precision(MPT_PRECISION_MIXED_FP16, context->backend()).compute_dtype == DType::fp16);
    CHECK(resolve_precision(MPT_PRECISION_MIXED_BF16, context->backend()).compute_dtype == DType::bf16);
}

TEST_CASE("layer overrides apply and loss scaling defaults to dynamic only where fp16 computes") {
    auto context = cpu_context();
    Model model(context, 16);
    model.add_dense(8, Activation::relu);
    model.add_dense(4, Activation::softmax);
    model.set_layer_dtype(1, DType::fp32);
    const auto bf16 = layer_compute_dtypes(model, resolve_precision(MPT_PRECISION_MIXED_BF16, context->backend()));
    CHECK(bf16 == std::vector<DType>{DType::bf16, DType::fp32});
    CHECK(default_loss_scaling(bf16) == LossScaling::off);
    const auto fp16 = layer_compute_dtypes(model, resolve_precision(MPT_PRECISION_MIXED_FP16, context->backend()));
    CHECK(default_loss_scaling(fp16) == LossScaling::dynamic);
    CHECK(default_loss_scaling({DType::fp32, DType::fp32}) == LossScaling::off);
}

TEST_CASE("mixed-bf16 forward rounds GEMM inputs and hidden outputs to bf16 and keeps fp32 logits") {
    auto context = cpu_context();
    auto model = std::make_shared<Model>(context, 12);
    model->add_dense(9, Activation::tanh);   // 9 units: padded to 16 internally
    model->add_dense(5, Activation::linear);
    model->build();
    std::mt19937 generator(9);
    std::normal_distribution<float> normal(0.0f, 0.7f);
    std::vector<float> w1(9 * 12), b1(9), w2(5 * 9), b2(5), x(7 * 12);
    for (auto* values : {&w1, &b1, &w2, &b2, &x})
        for (float& v : *values) v = normal(generator);
    model->set_weights(0, w1.data(), b1.data());
    model->set_weights(1, w2.data(), b2.data());

    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    config.loss.kind = LossKind::mean_squared_error;  // the head reports the linear outputs unchanged
    Trainer trainer(model, config);
    std::vector<float> got(7 * 5);
    trainer.predict(x.data(), 7, got.data());

    for (int r = 0; r < 7; ++r) {
        double hidden[9];
        for (int h = 0; h < 9; ++h) {
            double sum = 0;
            for (int i = 0; i < 12; ++i) sum += reference_bf16(w1[h * 12 + i]) * reference_bf16(x[r * 12 + i]);
            hidden[h] = reference_bf16(std::tanh(sum + reference_bf16(b1[h])));
        }
        for (int o = 0; o < 5; ++o) {
            double sum = 0;
            for (int h = 0; h < 9; ++h) sum += reference_bf16(w2[o * 9 + h]) * hidden[h];
            const double logit = sum + b2[o];  // last layer: fp32 bias and fp32 output
            CHECK(got[r * 5 + o] == doctest::Approx(logit).epsilon(1e-5));
        }
    }
    // fp32 logits: not all of them are bf16-representable.
    int not_bf16 = 0;
    for (float value : got) not_bf16 += reference_bf16(value) != static_cast<double>(value);
    CHECK(not_bf16 > 0);
}

TEST_CASE("mixed precision keeps fp32 master weights and exactly-zero padding through training") {
    auto context = cpu_context();
    auto model = std::make_shared<Model>(context, 6);
    model->add_dense(13, Activation::sigmoid);  // sigmoid(0) = 0.5: padded units must be masked
    model->add_dense(3, Activation::softmax);
    model->build();
    std::mt19937 generator(4);
    std::vector<float> samples(64 * 6);
    std::vector<int32_t> labels(64);
    for (float& v : samples) v = std::uniform_real_distribution<float>(-1, 1)(generator);
    for (int32_t& label : labels) label = static_cast<int32_t>(generator() % 3);
    auto dataset = Dataset::from_f32(context, samples.data(), 64, 6, labels.data(), 3, true);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    config.optimizer.kind = OptimizerKind::adam;
    config.optimizer.learning_rate = 1e-3f;
    Trainer trainer(model, config);
    trainer.fit(*dataset, 3, 16, true);

    std::vector<float> block(static_cast<size_t>(model->parameter_block_elements()));
    model->read_master_block(block.data());
    int finer_than_bf16 = 0;
    for (const DenseLayer& layer : model->layers()) {
        for (int64_t unit = 0; unit < layer.padded_units; ++unit)
            for (int64_t input = 0; input < layer.padded_inputs; ++input) {
                const float w = block[static_cast<size_t>(layer.weight_offset + unit * layer.padded_inputs + input)];
                if (unit >= layer.units || input >= layer.inputs) CHECK(w == 0.0f);
                else finer_than_bf16 += reference_bf16(w) != static_cast<double>(w);
            }
        for (int64_t unit = layer.units; unit < layer.padded_units; ++unit)
            CHECK(block[static_cast<size_t>(layer.bias_offset + unit)] == 0.0f);
    }
    CHECK(finer_than_bf16 > 0);  // masters hold fp32 updates, not re-cast low-precision values
}

TEST_CASE("fp16 overflow in the forward pass is caught as a non-finite step and skipped") {
    auto context = cpu_context();
    auto model = std::make_shared<Model>(context, 4);
    model->add_dense(8, Activation::linear);
    model->add_dense(2, Activation::softmax);
    model->build();
    std::vector<float> w(8 * 4, 100.0f), b(8, 0.0f);
    model->set_weights(0, w.data(), b.data());
    std::vector<float> samples(8 * 4, 300.0f);  // 4 * 300 * 100 = 120000 > 65504: Inf in fp16
    std::vector<int32_t> labels(8, 1);
    auto dataset = Dataset::from_f32(context, samples.data(), 8, 4, labels.data(), 2, true);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_FP16;
    Trainer trainer(model, config);
    std::vector<float> before(static_cast<size_t>(model->parameter_block_elements())), after(before.size());
    model->read_master_block(before.data());
    trainer.step(*dataset, 0, 8);
    model->read_master_block(after.data());
    const TrainState state = trainer.state();
    CHECK(state.skipped_steps == 1);
    CHECK(state.loss_scale == 16384.0f);
    CHECK(before == after);
}

// The C API's training tests check that words give the bits the masters give, and go stale with
// the weights; this one that a prediction really reads them once they are made.
TEST_CASE("predictions on a few rows read the weight words, once made, instead of the fp32 masters") {
    auto context = cpu_context();
    if (context->backend().weight_words_max_rows(DType::bf16) == 0) {
        MESSAGE("weight words not tested: the CPU backend reads none here (no AMX or AVX512-BF16)");
        return;
    }
    auto model = std::make_shared<Model>(context, 40);
    model->add_dense(32, Activation::relu);
    model->add_dense(10, Activation::softmax);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    Trainer trainer(model, config);
    std::vector<float> inputs(2 * 40);
    std::mt19937 generator(5);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& v : inputs) v = uniform(generator);
    const auto predict = [&] {
        std::vector<float> outputs(2 * 10);
        trainer.predict(inputs.data(), 2, outputs.data());
        return outputs;
    };
    const std::vector<float> first = predict();
    CHECK(predict() == first);  // the second writes the words
    // Masters changed behind the model's back (CPU backend memory is host memory): a prediction that
    // reads the masters would see it, one that reads the words does not.
    float* masters = model->masters();
    for (int64_t i = 0; i < model->parameter_block_elements(); ++i) masters[i] *= -1.5f;
    CHECK(predict() == first);
    model->mark_weights_changed();
    CHECK(predict() != first);
}
