// Gradient checks: every activation and every loss head of the CPU reference backend against
// central finite differences of an independent double-precision forward pass written here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

using namespace mpt;

namespace {

constexpr int64_t kRows = 3, kInputs = 5, kHidden = 4, kOutputs = 3;
constexpr int64_t kPad = 8;  // every width padded to 8 as the executor does

struct Net {
    std::vector<double> w1 = std::vector<double>(kHidden * kInputs), b1 = std::vector<double>(kHidden);
    std::vector<double> w2 = std::vector<double>(kOutputs * kHidden), b2 = std::vector<double>(kOutputs);
    std::vector<double> x = std::vector<double>(kRows * kInputs);
    std::vector<int32_t> labels = std::vector<int32_t>(kRows);
    std::vector<double> targets = std::vector<double>(kRows * kOutputs);
};

double act(Activation a, double z) {
    switch (a) {
        case Activation::relu: return z > 0 ? z : 0;
        case Activation::sigmoid: return 1 / (1 + std::exp(-z));
        case Activation::tanh: return std::tanh(z);
        case Activation::leaky_relu: return z > 0 ? z : 0.2 * z;
        case Activation::elu: return z > 0 ? z : std::expm1(z);
        case Activation::selu: return 1.0507009873554805 * (z > 0 ? z : 1.6732632423543772 * std::expm1(z));
        case Activation::softplus: return z > 30 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
        case Activation::softsign: return z / (1 + std::abs(z));
        default: return z;
    }
}

// Every activation a hidden layer may have (all but softmax).
std::vector<Activation> hidden_activations() {
    std::vector<Activation> activations;
    for (Activation activation : kActivations)
        if (activation != Activation::softmax) activations.push_back(activation);
    return activations;
}

double clip(double p) { return std::min(std::max(p, 1e-7), 1 - 1e-7); }

// Mean loss over the batch in double precision, written from the loss definitions (Keras semantics).
// With label smoothing s, every target t becomes t (1 - s) + s / n: n classes, or 2 for binary.
// With class weights, each row's loss is multiplied by its class's weight (the label, or the first
// largest target).
// Huber's delta in these tests: outputs and targets a few tenths apart take both of its branches.
constexpr float kHuberDelta = 0.3f;

double reference_loss(const Net& net, Activation hidden, Activation head, LossKind loss, double smoothing = 0.0,
                      const std::vector<float>& class_weights = {}) {
    double total = 0;
    for (int64_t r = 0; r < kRows; ++r) {
        double a1[kHidden], z[kOutputs], y[kOutputs], t[kOutputs];
        for (int64_t h = 0; h < kHidden; ++h) {
            double sum = net.b1[h];
            for (int64_t i = 0; i < kInputs; ++i) sum += net.w1[h * kInputs + i] * net.x[r * kInputs + i];
            a1[h] = act(hidden, sum);
        }
        for (int64_t o = 0; o < kOutputs; ++o) {
            double sum = net.b2[o];
            for (int64_t h = 0; h < kHidden; ++h) sum += net.w2[o * kHidden + h] * a1[h];
            z[o] = sum;
            t[o] = loss == LossKind::sparse_categorical_crossentropy ? (net.labels[r] == o ? 1.0 : 0.0)
                                                                      : net.targets[r * kOutputs + o];
            t[o] = t[o] * (1 - smoothing) + smoothing / (loss == LossKind::binary_crossentropy ? 2.0 : kOutputs);
        }
        if (head == Activation::softmax || head == Activation::linear) {
            double m = z[0];
            for (double v : z) m = std::max(m, v);
            double s = 0;
            for (double v : z) s += std::exp(v - m);
            for (int64_t o = 0; o < kOutputs; ++o) y[o] = head == Activation::softmax ? std::exp(z[o] - m) / s : z[o];
        } else {
            for (int64_t o = 0; o < kOutputs; ++o) y[o] = act(head, z[o]);
        }
        const double total_before_row = total;
        const bool categorical =
            loss == LossKind::sparse_categorical_crossentropy || loss == LossKind::categorical_crossentropy;
        if (categorical && (head == Activation::softmax || head == Activation::linear)) {
            double m = z[0];
            for (double v : z) m = std::max(m, v);
            double s = 0;
            for (double v : z) s += std::exp(v - m);
            for (int64_t o = 0; o < kOutputs; ++o) total += t[o] * (m + std::log(s) - z[o]);
        } else if (categorical) {
            double s = 0;
            for (double v : y) s += v;
            for (int64_t o = 0; o < kOutputs; ++o) total -= t[o] * std::log(clip(y[o] / s));
        } else if (loss == LossKind::binary_crossentropy) {
            for (int64_t o = 0; o < kOutputs; ++o) {
                const double p = clip(y[o]);
                total -= (t[o] * std::log(p) + (1 - t[o]) * std::log(1 - p)) / kOutputs;
            }
        } else if (loss == LossKind::mean_absolute_error) {
            for (int64_t o = 0; o < kOutputs; ++o) total += std::abs(y[o] - t[o]) / kOutputs;
        } else if (loss == LossKind::huber) {
            const double delta = kHuberDelta;
            for (int64_t o = 0; o < kOutputs; ++o) {
                const double d = std::abs(y[o] - t[o]);
                total += (d <= delta ? 0.5 * d * d : delta * d - 0.5 * delta * delta) / kOutputs;
            }
        } else {
            for (int64_t o = 0; o < kOutputs; ++o) total += (y[o] - t[o]) * (y[o] - t[o]) / kOutputs;
        }
        if (!class_weights.empty()) {
            int64_t expected = net.labels[r];
            if (loss != LossKind::sparse_categorical_crossentropy) {
                expected = 0;
                for (int64_t o = 1; o < kOutputs; ++o)
                    if (net.targets[r * kOutputs + o] > net.targets[r * kOutputs + expected]) expected = o;
            }
            total = total_before_row + (total - total_before_row) * class_weights[static_cast<size_t>(expected)];
        }
    }
    return total / kRows;
}

std::vector<float> padded(const std::vector<double>& values, int64_t rows, int64_t columns, int64_t padded_columns) {
    std::vector<float> out(static_cast<size_t>(rows * padded_columns), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < columns; ++c) out[r * padded_columns + c] = static_cast<float>(values[r * columns + c]);
    return out;
}

struct Gradients {
    std::vector<float> w1, b1, w2, b2;  // padded layouts
    double loss;
};

// One fp32 training step through the backend, returning the gradients the update saw.
Gradients backend_gradients(Backend& backend, const Net& net, Activation hidden, Activation head, LossKind loss,
                            float smoothing, const std::vector<float>& class_weights) {
    std::vector<float> x = padded(net.x, kRows, kInputs, kPad);
    std::vector<float> w1 = padded(net.w1, kHidden, kInputs, kPad), w2 = padded(net.w2, kOutputs, kHidden, kPad);
    w1.resize(kPad * kPad, 0.0f);
    w2.resize(kPad * kPad, 0.0f);
    std::vector<float> b1 = padded(net.b1, 1, kHidden, kPad), b2 = padded(net.b2, 1, kOutputs, kPad);
    std::vector<float> targets(net.targets.begin(), net.targets.end());
    std::vector<float> a1(kRows * kPad), logits(kRows * kPad), dlogits(kRows * kPad), dz1(kRows * kPad);
    double metrics[kMetricsCount] = {};
    TrainState state = initial_train_state(LossScalerConfig{});

    DenseForwardArgs f1{x.data(), w1.data(), b1.data(), a1.data(), nullptr, kRows, kPad, kPad, kHidden, hidden,
                        DType::fp32, DType::fp32, DType::fp32, GemmWorkspace{}};
    backend.dense_forward(f1);
    DenseForwardArgs f2{a1.data(), w2.data(), b2.data(), logits.data(), nullptr, kRows, kPad, kPad, kOutputs,
                        Activation::linear, DType::fp32, DType::fp32, DType::fp32, GemmWorkspace{}};
    backend.dense_forward(f2);
    LossHeadArgs h{};
    h.logits = logits.data();
    h.labels = loss == LossKind::sparse_categorical_crossentropy ? net.labels.data() : nullptr;
    h.targets = loss == LossKind::sparse_categorical_crossentropy ? nullptr : targets.data();
    h.logits_grad = dlogits.data();
    h.state = &state;
    h.metrics = metrics;
    h.rows = kRows;
    h.width = kPad;
    h.classes = kOutputs;
    h.activation = head;
    h.loss = loss;
    h.label_smoothing = smoothing;
    h.huber_delta = kHuberDelta;
    h.class_weights = class_weights.empty() ? nullptr : class_weights.data();
    h.logits_grad_dtype = DType::fp32;
    backend.loss_head(h);
    DenseBackwardDataArgs d{dlogits.data(), w2.data(), a1.data(), nullptr, dz1.data(), kRows, kPad, kPad, hidden,
                            DType::fp32, DType::fp32, GemmWorkspace{}};
    backend.dense_backward_data(d);

    // SGD with momentum keeps the gradient in the scratch buffers: read them after the update.
    OptimizerConfig optimizer;
    optimizer.momentum = 0.5f;
    Gradients result;
    result.loss = metrics[kMetricBatchLoss];
    auto update = [&](const float* dz, const float* input, std::vector<float>& w, std::vector<float>& b,
                      std::vector<float>& gw, std::vector<float>& gb) {
        gw.assign(kPad * kPad, NAN);
        gb.assign(kPad, NAN);
        std::vector<float> vw(kPad * kPad, 0.0f), vb(kPad, 0.0f);
        DenseUpdateArgs u{};
        u.output_grad = dz;
        u.input = input;
        u.weights = w.data();
        u.bias = b.data();
        u.weight_grad = gw.data();
        u.bias_grad = gb.data();
        u.weight_state[0] = vw.data();
        u.bias_state[0] = vb.data();
        u.rows = kRows;
        u.in_features = kPad;
        u.out_features = kPad;
        u.compute_dtype = DType::fp32;
        u.state = &state;
        backend.dense_update(u, optimizer);
    };
    update(dlogits.data(), a1.data(), w2, b2, result.w2, result.b2);
    update(dz1.data(), x.data(), w1, b1, result.w1, result.b1);
    return result;
}

void check_against_finite_differences(Activation hidden, Activation head, LossKind loss, float smoothing = 0.0f,
                                      const std::vector<float>& class_weights = {}) {
    std::mt19937 generator(11);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    Net net;
    for (auto* values : {&net.w1, &net.b1, &net.w2, &net.b2, &net.x})
        for (double& v : *values) v = uniform(generator);
    for (auto& label : net.labels) label = static_cast<int32_t>(generator() % kOutputs);
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t o = 0; o < kOutputs; ++o) {
            double& t = net.targets[r * kOutputs + o];
            if (loss == LossKind::categorical_crossentropy) t = (o == net.labels[r]) ? 1.0 : 0.0;
            else if (loss == LossKind::binary_crossentropy) t = (uniform(generator) + 1) / 2;
            else t = uniform(generator);
        }
    auto backend = create_cpu_backend(1);
    const Gradients analytic = backend_gradients(*backend, net, hidden, head, loss, smoothing, class_weights);
    CHECK(analytic.loss ==
          doctest::Approx(reference_loss(net, hidden, head, loss, smoothing, class_weights)).epsilon(1e-5));

    const double step = 1e-5;
    auto check_parameter = [&](std::vector<double>& values, const std::vector<float>& grads, int64_t columns) {
        for (size_t i = 0; i < values.size(); ++i) {
            const double saved = values[i];
            values[i] = saved + step;
            const double up = reference_loss(net, hidden, head, loss, smoothing, class_weights);
            values[i] = saved - step;
            const double down = reference_loss(net, hidden, head, loss, smoothing, class_weights);
            values[i] = saved;
            const double numeric = (up - down) / (2 * step);
            const int64_t row = static_cast<int64_t>(i) / columns, column = static_cast<int64_t>(i) % columns;
            const double got = grads[static_cast<size_t>(row * kPad + column)];
            CHECK(got == doctest::Approx(numeric).epsilon(2e-3).scale(1e-3));
        }
    };
    check_parameter(net.w2, analytic.w2, kHidden);
    check_parameter(net.b2, analytic.b2, kOutputs);
    check_parameter(net.w1, analytic.w1, kInputs);
    check_parameter(net.b1, analytic.b1, kHidden);
    // Padded rows and columns carry exactly zero gradient, so padded weights stay zero.
    for (int64_t o = 0; o < kPad; ++o)
        for (int64_t h = 0; h < kPad; ++h)
            if (o >= kOutputs || h >= kHidden) CHECK(analytic.w2[o * kPad + h] == 0.0f);
    for (int64_t o = kOutputs; o < kPad; ++o) CHECK(analytic.b2[o] == 0.0f);
}

}  // namespace

TEST_CASE("every hidden activation's gradient matches finite differences") {
    for (Activation hidden : hidden_activations()) {
        CAPTURE(activation_name(hidden));
        check_against_finite_differences(hidden, Activation::softmax, LossKind::sparse_categorical_crossentropy);
    }
}

TEST_CASE("sparse categorical cross-entropy gradients match finite differences for softmax and logits heads") {
    check_against_finite_differences(Activation::tanh, Activation::softmax, LossKind::sparse_categorical_crossentropy);
    check_against_finite_differences(Activation::tanh, Activation::linear, LossKind::sparse_categorical_crossentropy);
}

TEST_CASE("categorical cross-entropy gradients match finite differences, renormalised for non-softmax heads") {
    check_against_finite_differences(Activation::tanh, Activation::softmax, LossKind::categorical_crossentropy);
    check_against_finite_differences(Activation::tanh, Activation::sigmoid, LossKind::categorical_crossentropy);
}

TEST_CASE("binary cross-entropy gradients match finite differences for sigmoid and clipped heads") {
    check_against_finite_differences(Activation::sigmoid, Activation::sigmoid, LossKind::binary_crossentropy);
    check_against_finite_differences(Activation::tanh, Activation::softmax, LossKind::binary_crossentropy);
}

TEST_CASE("mean squared error gradients match finite differences through every head activation") {
    for (Activation head : kActivations) {
        CAPTURE(activation_name(head));
        check_against_finite_differences(Activation::sigmoid, head, LossKind::mean_squared_error);
    }
}

TEST_CASE("mean absolute error and Huber gradients match finite differences through every head activation") {
    for (LossKind loss : {LossKind::mean_absolute_error, LossKind::huber}) {
        for (Activation head : {Activation::linear, Activation::relu, Activation::sigmoid, Activation::tanh, Activation::softmax}) {
            CAPTURE(loss_name(loss));
            CAPTURE(activation_name(head));
            check_against_finite_differences(Activation::tanh, head, loss);
        }
    }
}

// Far from 0 the naive forms fail where the ones in activation.h do not: log(1 + e^z) overflows above
// 88.7, e^z - 1 and 1 - e^-y lose every digit near 0. Each activation and its derivative from its own
// fp32 output against double precision, over [-100, 100], at the signed zeros, and through Inf and NaN.
TEST_CASE("every activation and its derivative from its output hold to fp32 precision over [-100, 100], at 0 and at Inf and NaN") {
    auto derivative = [](Activation a, double z) {
        switch (a) {
            case Activation::relu: return z > 0 ? 1.0 : 0.0;
            case Activation::sigmoid: return 1 / (1 + std::exp(-z)) / (1 + std::exp(z));
            case Activation::tanh: return 1 / (std::cosh(z) * std::cosh(z));
            case Activation::leaky_relu: return z > 0 ? 1.0 : 0.2;
            case Activation::elu: return z > 0 ? 1.0 : std::exp(z);
            case Activation::selu: return z > 0 ? 1.0507009873554805 : 1.0507009873554805 * 1.6732632423543772 * std::exp(z);
            case Activation::softplus: return 1 / (1 + std::exp(-z));
            case Activation::softsign: return 1 / ((1 + std::abs(z)) * (1 + std::abs(z)));
            default: return 1.0;
        }
    };
    for (Activation a : hidden_activations()) {
        const std::string name = activation_name(a);
        CAPTURE(name);
        for (double z = -100.0; z <= 100.0; z += 0.37) {
            CAPTURE(z);
            const float y = activation_forward(a, static_cast<float>(z));
            const double exact = act(a, static_cast<double>(static_cast<float>(z)));
            CHECK(y == doctest::Approx(exact).epsilon(1e-6).scale(1e-30));
            // The output is rounded to fp32, so the derivative from it carries that rounding (relative
            // 6e-8 of y, absolute where the derivative is 1 - y^2 or y + 1 near saturation).
            const double expected = derivative(a, z);
            CHECK(std::fabs(activation_derivative_from_output(a, y) - expected) <= 1e-5 * std::fabs(expected) + 2e-7);
        }
        // Small inputs: e^z - 1 and 1 - e^-y keep their digits.
        for (double z : {1e-3, -1e-3, 1e-6, -1e-6, 1e-20, -1e-20}) {
            CAPTURE(z);
            const float y = activation_forward(a, static_cast<float>(z));
            CHECK(y == doctest::Approx(act(a, z)).epsilon(1e-6).scale(1e-30));
        }
        // Far below 0, sigmoid's and softplus's outputs are tiny and so are their slopes, which keep
        // their digits (1 - e^-y in float would be 0 there).
        if (a == Activation::sigmoid || a == Activation::softplus)
            for (double z : {-20.0, -40.0, -80.0}) {
                CAPTURE(z);
                const float y = activation_forward(a, static_cast<float>(z));
                CHECK(activation_derivative_from_output(a, y) == doctest::Approx(derivative(a, z)).epsilon(1e-5).scale(0));
            }
        // At 0 the branching ones take their left derivative, and the outputs keep their sign bit
        // where the activation is the identity or a multiple there.
        const float at_zero = activation_derivative_from_output(a, activation_forward(a, 0.0f));
        const float at_minus_zero = activation_derivative_from_output(a, activation_forward(a, -0.0f));
        CHECK(at_zero == at_minus_zero);
        CHECK(at_zero == doctest::Approx(a == Activation::linear       ? 1.0
                                         : a == Activation::relu       ? 0.0
                                         : a == Activation::leaky_relu ? 0.2
                                         : a == Activation::elu        ? 1.0
                                         : a == Activation::selu       ? 1.0507009873554805 * 1.6732632423543772
                                         : derivative(a, 0.0)));
        CHECK(std::isnan(activation_forward(a, NAN)) == (a != Activation::relu));  // ReLU maps NaN to 0
        const float inf = std::numeric_limits<float>::infinity();
        if (a != Activation::softsign) {  // Inf / (1 + Inf) is NaN, as Keras's x / (|x| + 1)
            const double limit = act(a, 1e300);  // 1 for sigmoid and tanh; the others grow without bound
            CHECK(activation_forward(a, inf) == (limit > 1e30 ? inf : static_cast<float>(limit)));
            CHECK(std::isfinite(activation_derivative_from_output(a, activation_forward(a, -inf))));
        }
    }
}

TEST_CASE("the regression terms are Keras's: squared, absolute and Huber's two branches, 0 at the kinks, NaN kept") {
    const float inverse = 0.25f;
    const RegressionTerm squared = regression_term(LossKind::mean_squared_error, 1.5f, 0.5f, 1.0f, inverse);
    CHECK(squared.loss == 0.25);
    CHECK(squared.gradient == 0.5f);
    const RegressionTerm absolute = regression_term(LossKind::mean_absolute_error, -1.0f, 2.0f, 1.0f, inverse);
    CHECK(absolute.loss == 0.75);
    CHECK(absolute.gradient == -0.25f);
    CHECK(regression_term(LossKind::mean_absolute_error, 2.0f, 2.0f, 1.0f, inverse).gradient == 0.0f);
    const RegressionTerm inside = regression_term(LossKind::huber, 0.5f, 0.0f, 1.0f, inverse);  // d^2 / 2
    CHECK(inside.loss == 0.125 * 0.25);
    CHECK(inside.gradient == 0.125f);
    const RegressionTerm edge = regression_term(LossKind::huber, 1.0f, 0.0f, 1.0f, inverse);  // both forms agree
    CHECK(edge.loss == 0.5 * 0.25);
    CHECK(edge.gradient == 0.25f);
    const RegressionTerm outside = regression_term(LossKind::huber, -4.0f, 0.0f, 2.0f, inverse);  // delta (|d| - delta / 2)
    CHECK(outside.loss == 2.0 * 3.0 * 0.25);
    CHECK(outside.gradient == -0.5f);
    for (LossKind loss : {LossKind::mean_squared_error, LossKind::mean_absolute_error, LossKind::huber}) {
        CAPTURE(loss_name(loss));
        const RegressionTerm nan = regression_term(loss, NAN, 0.0f, 1.0f, inverse);
        CHECK(std::isnan(nan.loss));
        CHECK(std::isnan(nan.gradient));
    }
}

TEST_CASE("label-smoothed cross-entropy gradients match finite differences for every head form") {
    for (float smoothing : {0.1f, 0.35f}) {
        CAPTURE(smoothing);
        check_against_finite_differences(Activation::tanh, Activation::softmax, LossKind::sparse_categorical_crossentropy,
                                         smoothing);
        check_against_finite_differences(Activation::tanh, Activation::linear, LossKind::sparse_categorical_crossentropy,
                                         smoothing);
        check_against_finite_differences(Activation::tanh, Activation::softmax, LossKind::categorical_crossentropy,
                                         smoothing);
        check_against_finite_differences(Activation::tanh, Activation::sigmoid, LossKind::categorical_crossentropy,
                                         smoothing);
        check_against_finite_differences(Activation::sigmoid, Activation::sigmoid, LossKind::binary_crossentropy,
                                         smoothing);
        check_against_finite_differences(Activation::tanh, Activation::softmax, LossKind::binary_crossentropy,
                                         smoothing);
    }
}

TEST_CASE("class-weighted categorical cross-entropy gradients match finite differences, smoothed or not") {
    const std::vector<float> weights = {0.5f, 3.0f, 1.25f};
    for (float smoothing : {0.0f, 0.2f}) {
        CAPTURE(smoothing);
        check_against_finite_differences(Activation::tanh, Activation::softmax, LossKind::sparse_categorical_crossentropy,
                                         smoothing, weights);
        check_against_finite_differences(Activation::relu, Activation::linear, LossKind::sparse_categorical_crossentropy,
                                         smoothing, weights);
        check_against_finite_differences(Activation::tanh, Activation::softmax, LossKind::categorical_crossentropy,
                                         smoothing, weights);
        check_against_finite_differences(Activation::tanh, Activation::sigmoid, LossKind::categorical_crossentropy,
                                         smoothing, weights);
    }
}

TEST_CASE("label smoothing is PyTorch's: (1 - s) times the cross-entropy plus s times the mean of -log p") {
    // An independent form of the smoothed softmax cross-entropy on integer labels, from the
    // probabilities the head reports: CrossEntropyLoss(label_smoothing=s) as PyTorch documents it.
    constexpr int64_t rows = 4, classes = 5, width = 8;
    constexpr float smoothing = 0.2f;
    std::mt19937 generator(3);
    std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
    std::vector<float> logits(rows * width, 0.0f), probabilities(rows * width, NAN);
    std::vector<int32_t> labels(rows);
    for (int64_t r = 0; r < rows; ++r) {
        labels[r] = static_cast<int32_t>(generator() % classes);
        for (int64_t c = 0; c < classes; ++c) logits[r * width + c] = uniform(generator);
    }
    double metrics[kMetricsCount] = {};
    LossHeadArgs h{};
    h.logits = logits.data();
    h.labels = labels.data();
    h.probabilities = probabilities.data();
    h.metrics = metrics;
    h.rows = rows;
    h.width = width;
    h.classes = classes;
    h.activation = Activation::softmax;
    h.loss = LossKind::sparse_categorical_crossentropy;
    h.label_smoothing = smoothing;
    h.logits_grad_dtype = DType::fp32;
    auto backend = create_cpu_backend(1);
    backend->loss_head(h);
    double expected = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        double mean_negative_log = 0.0;
        for (int64_t c = 0; c < classes; ++c) mean_negative_log -= std::log(probabilities[r * width + c]) / classes;
        expected += (1 - smoothing) * -std::log(probabilities[r * width + labels[r]]) + smoothing * mean_negative_log;
    }
    CHECK(metrics[kMetricBatchLoss] == doctest::Approx(expected / rows).epsilon(1e-5));
    // The metric compares with the given labels: smoothing changes the loss, not the accuracy.
    double unsmoothed[kMetricsCount] = {};
    h.metrics = unsmoothed;
    h.label_smoothing = 0.0f;
    backend->loss_head(h);
    CHECK(unsmoothed[kMetricCorrect] == metrics[kMetricCorrect]);
    CHECK(unsmoothed[kMetricBatchLoss] != metrics[kMetricBatchLoss]);
}
