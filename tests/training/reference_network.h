// The training tests' reference (tests/test_training.cpp, tests/training/): the network's forward
// pass, each loss's value and gradient and a batch's parameter gradients, in double precision from
// the definitions (Keras semantics), sharing no code with the library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "training/harness.h"

namespace mpt_test::training {

struct RefLayer {
    int64_t units = 0, inputs = 0;
    mpt_activation activation = MPT_ACTIVATION_LINEAR;
    std::vector<double> w;  // [units, inputs]
    std::vector<double> b;  // [units]
};

using RefNet = std::vector<RefLayer>;

inline RefNet read_net(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs) {
    RefNet net;
    int64_t fan_in = inputs;
    const auto weights = read_weights(model, inputs, specs);
    for (size_t i = 0; i < specs.size(); ++i) {
        RefLayer layer;
        layer.units = specs[i].units;
        layer.inputs = fan_in;
        layer.activation = specs[i].activation;
        layer.w.assign(weights[i].first.begin(), weights[i].first.end());
        layer.b.assign(weights[i].second.begin(), weights[i].second.end());
        net.push_back(std::move(layer));
        fan_in = specs[i].units;
    }
    return net;
}

inline double activate(mpt_activation activation, double z) {
    switch (activation) {
        case MPT_ACTIVATION_RELU:
            return z > 0 ? z : 0;
        case MPT_ACTIVATION_SIGMOID:
            return 1 / (1 + std::exp(-z));
        case MPT_ACTIVATION_TANH:
            return std::tanh(z);
        case MPT_ACTIVATION_LEAKY_RELU:
            return z > 0 ? z : 0.2 * z;
        case MPT_ACTIVATION_ELU:
            return z > 0 ? z : std::expm1(z);
        case MPT_ACTIVATION_SELU:
            return 1.0507009873554805 * (z > 0 ? z : 1.6732632423543772 * std::expm1(z));
        case MPT_ACTIVATION_SOFTPLUS:
            return std::log1p(std::exp(z));
        case MPT_ACTIVATION_SOFTSIGN:
            return z / (1 + std::abs(z));
        default:
            return z;
    }
}

// d activation / dz, from the output y.
inline double activation_slope(mpt_activation activation, double y) {
    switch (activation) {
        case MPT_ACTIVATION_RELU:
            return y > 0 ? 1 : 0;
        case MPT_ACTIVATION_SIGMOID:
            return y * (1 - y);
        case MPT_ACTIVATION_TANH:
            return 1 - y * y;
        case MPT_ACTIVATION_LEAKY_RELU:
            return y > 0 ? 1 : 0.2;
        case MPT_ACTIVATION_ELU:
            return y > 0 ? 1 : y + 1;
        case MPT_ACTIVATION_SELU:
            return y > 0 ? 1.0507009873554805 : y + 1.0507009873554805 * 1.6732632423543772;
        case MPT_ACTIVATION_SOFTPLUS:
            return -std::expm1(-y);
        case MPT_ACTIVATION_SOFTSIGN:
            return (1 - std::abs(y)) * (1 - std::abs(y));
        default:
            return 1;
    }
}

inline std::vector<double> softmax(const std::vector<double>& z) {
    const double top = *std::max_element(z.begin(), z.end());
    std::vector<double> p(z.size());
    double sum = 0;
    for (size_t c = 0; c < z.size(); ++c) sum += (p[c] = std::exp(z[c] - top));
    for (double& v : p) v /= sum;
    return p;
}

struct RefForward {
    std::vector<std::vector<double>> outputs;  // outputs[0]: the input; outputs[i + 1]: layer i's activation
    std::vector<double> logits;                // the last layer before its activation
};

inline RefForward forward(const RefNet& net, const float* x) {
    RefForward result;
    result.outputs.emplace_back(x, x + net.front().inputs);
    for (size_t i = 0; i < net.size(); ++i) {
        const RefLayer& layer = net[i];
        const std::vector<double>& in = result.outputs.back();
        std::vector<double> z(static_cast<size_t>(layer.units));
        for (int64_t u = 0; u < layer.units; ++u) {
            double sum = layer.b[static_cast<size_t>(u)];
            for (int64_t k = 0; k < layer.inputs; ++k)
                sum += layer.w[static_cast<size_t>(u * layer.inputs + k)] * in[static_cast<size_t>(k)];
            z[static_cast<size_t>(u)] = sum;
        }
        std::vector<double> y(z.size());
        if (layer.activation == MPT_ACTIVATION_SOFTMAX) {
            y = softmax(z);
        } else {
            for (size_t u = 0; u < z.size(); ++u) y[u] = activate(layer.activation, z[u]);
        }
        if (i + 1 == net.size()) result.logits = z;
        result.outputs.push_back(std::move(y));
    }
    return result;
}

// The loss of one row and its gradient with respect to the logits, from the definitions (Keras):
//  - categorical (sparse or one-hot) with a softmax or linear head: -sum t log softmax(z) (a linear
//    head is taken as logits);
//  - categorical with another head: p = y / sum(y) (renormalised), -sum t log p;
//  - binary cross-entropy: mean over outputs of -(t log y + (1 - t) log(1 - y));
//  - mean squared error: mean over outputs of (y - t)^2.
// No target in these tests comes near the [1e-7, 1 - 1e-7] clipping.
inline double reference_head(mpt_loss loss, mpt_activation head, const RefForward& pass, const std::vector<double>& t,
                             std::vector<double>& dz) {
    const std::vector<double>& z = pass.logits;
    const std::vector<double>& y = pass.outputs.back();
    const size_t classes = z.size();
    dz.assign(classes, 0.0);
    double value = 0;
    const bool categorical =
        loss == MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY || loss == MPT_LOSS_CATEGORICAL_CROSSENTROPY;
    if (categorical && (head == MPT_ACTIVATION_SOFTMAX || head == MPT_ACTIVATION_LINEAR)) {
        const std::vector<double> p = softmax(z);
        double target_sum = 0;
        for (size_t c = 0; c < classes; ++c) {
            value -= t[c] * std::log(p[c]);
            target_sum += t[c];
        }
        for (size_t c = 0; c < classes; ++c) dz[c] = p[c] * target_sum - t[c];
    } else if (categorical) {
        double sum = 0, target_sum = 0;
        for (size_t c = 0; c < classes; ++c) {
            sum += y[c];
            target_sum += t[c];
        }
        for (size_t c = 0; c < classes; ++c) {
            value -= t[c] * std::log(y[c] / sum);
            const double dy = -t[c] / y[c] + target_sum / sum;
            dz[c] = dy * activation_slope(head, y[c]);
        }
    } else if (loss == MPT_LOSS_BINARY_CROSSENTROPY) {
        for (size_t c = 0; c < classes; ++c) {
            value -= (t[c] * std::log(y[c]) + (1 - t[c]) * std::log(1 - y[c])) / static_cast<double>(classes);
            const double dy = (-t[c] / y[c] + (1 - t[c]) / (1 - y[c])) / static_cast<double>(classes);
            dz[c] = dy * activation_slope(head, y[c]);
        }
    } else {
        for (size_t c = 0; c < classes; ++c) {
            value += (y[c] - t[c]) * (y[c] - t[c]) / static_cast<double>(classes);
            dz[c] = 2 * (y[c] - t[c]) / static_cast<double>(classes) * activation_slope(head, y[c]);
        }
    }
    return value;
}

inline std::vector<double> row_targets(const Task& task, mpt_loss loss, int64_t row) {
    std::vector<double> t(static_cast<size_t>(task.classes), 0.0);
    if (loss == MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
        t[static_cast<size_t>(task.labels[static_cast<size_t>(row)])] = 1.0;
    } else {
        for (int64_t c = 0; c < task.classes; ++c)
            t[static_cast<size_t>(c)] = task.targets[static_cast<size_t>(row * task.classes + c)];
    }
    return t;
}

// Mean loss over rows [first, first + rows) and its gradient with respect to every parameter.
struct RefGradients {
    double loss = 0;
    std::vector<std::vector<double>> w, b;
};

inline RefGradients reference_gradients(const RefNet& net, const Task& task, mpt_loss loss, int64_t first,
                                        int64_t rows) {
    RefGradients grads;
    for (const RefLayer& layer : net) {
        grads.w.emplace_back(layer.w.size(), 0.0);
        grads.b.emplace_back(layer.b.size(), 0.0);
    }
    for (int64_t r = first; r < first + rows; ++r) {
        const RefForward pass = forward(net, task.x.data() + r * task.features);
        std::vector<double> delta;
        grads.loss += reference_head(loss, net.back().activation, pass, row_targets(task, loss, r), delta) / rows;
        for (double& d : delta) d /= static_cast<double>(rows);
        for (size_t i = net.size(); i-- > 0;) {
            const RefLayer& layer = net[i];
            const std::vector<double>& in = pass.outputs[i];
            for (int64_t u = 0; u < layer.units; ++u) {
                grads.b[i][static_cast<size_t>(u)] += delta[static_cast<size_t>(u)];
                for (int64_t k = 0; k < layer.inputs; ++k)
                    grads.w[i][static_cast<size_t>(u * layer.inputs + k)] +=
                        delta[static_cast<size_t>(u)] * in[static_cast<size_t>(k)];
            }
            if (i == 0) break;
            std::vector<double> previous(static_cast<size_t>(layer.inputs), 0.0);
            for (int64_t k = 0; k < layer.inputs; ++k) {
                double sum = 0;
                for (int64_t u = 0; u < layer.units; ++u)
                    sum += layer.w[static_cast<size_t>(u * layer.inputs + k)] * delta[static_cast<size_t>(u)];
                previous[static_cast<size_t>(k)] =
                    sum * activation_slope(net[i - 1].activation, in[static_cast<size_t>(k)]);
            }
            delta = std::move(previous);
        }
    }
    return grads;
}

inline double reference_mean_loss(const RefNet& net, const Task& task, mpt_loss loss) {
    double total = 0;
    for (int64_t r = 0; r < task.rows; ++r) {
        std::vector<double> dz;
        total += reference_head(loss, net.back().activation, forward(net, task.x.data() + r * task.features),
                                row_targets(task, loss, r), dz);
    }
    return total / static_cast<double>(task.rows);
}

}  // namespace mpt_test::training
