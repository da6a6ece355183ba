// Element-wise activations and their derivatives, expressed through the activation's OUTPUT so
// that backward needs only the stored forward output (the ReLU mask is output > 0). So only
// activations whose derivative is a function of their output belong here; those that branch at 0
// (ReLU, leaky ReLU, ELU, SELU) have output > 0 exactly where input > 0, and at 0 itself each takes
// its left derivative (ReLU 0, leaky 0.2, SELU 1.7581, as PyTorch; TensorFlow's SELU takes 1.0507).
// GELU and SiLU dip below 0 and come back, so one output has two inputs of different slopes: they
// would need the pre-activation kept as well.
//
// From outputs rounded to bf16, the derivatives near a saturation value (tanh's and softsign's
// +-1, ELU's -1, SELU's -1.7581) lose digits to cancellation: a few 1e-3 absolute at worst, as
// tanh's always did.
//
// The parameterised ones use Keras's defaults for the activation strings ("leaky_relu" has slope
// 0.2, "elu" alpha 1, "selu" the self-normalising constants), so Dense(units, activation="elu")
// there is MPT_ACTIVATION_ELU here.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace mpt {

enum class Activation : uint8_t {
    linear = 0,
    relu = 1,
    sigmoid = 2,
    tanh = 3,
    softmax = 4,
    leaky_relu = 5,
    elu = 6,
    selu = 7,
    softplus = 8,
    softsign = 9
};

// Every activation, for the model file's parser and for tests that cover them all.
constexpr Activation kActivations[] = {Activation::linear,     Activation::relu, Activation::sigmoid,
                                       Activation::tanh,       Activation::softmax, Activation::leaky_relu,
                                       Activation::elu,        Activation::selu, Activation::softplus,
                                       Activation::softsign};

constexpr float kLeakyReluSlope = 0.2f;
// SELU's constants (Klambauer et al. 2017, as Keras and PyTorch round them to float).
constexpr float kSeluAlpha = 1.67326324235437728481f;
constexpr float kSeluScale = 1.05070098735548049342f;

const char* activation_name(Activation activation);

MPT_HOST_DEVICE float activation_forward(Activation activation, float z) {
    switch (activation) {
        case Activation::relu: return z > 0.0f ? z : 0.0f;
        case Activation::sigmoid: return 1.0f / (1.0f + expf(-z));
        case Activation::tanh: return tanhf(z);
        case Activation::leaky_relu: return z > 0.0f ? z : kLeakyReluSlope * z;
        case Activation::elu: return z > 0.0f ? z : expm1f(z);
        case Activation::selu: return kSeluScale * (z > 0.0f ? z : kSeluAlpha * expm1f(z));
        // log(1 + e^z) without overflow: max(z, 0) + log1p(e^-|z|); NaN stays NaN through the log.
        case Activation::softplus: return fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z)));
        case Activation::softsign: return z / (1.0f + fabsf(z));
        default: return z;  // linear; softmax is applied row-wise by the loss head
    }
}

// d(output)/d(input) given the output y = activation(z).
MPT_HOST_DEVICE float activation_derivative_from_output(Activation activation, float y) {
    switch (activation) {
        case Activation::relu: return y > 0.0f ? 1.0f : 0.0f;
        case Activation::sigmoid: return y * (1.0f - y);
        case Activation::tanh: return 1.0f - y * y;
        case Activation::leaky_relu: return y > 0.0f ? 1.0f : kLeakyReluSlope;
        case Activation::elu: return y > 0.0f ? 1.0f : y + 1.0f;  // e^z = y + 1 below 0
        case Activation::selu: return y > 0.0f ? kSeluScale : y + kSeluScale * kSeluAlpha;
        // sigmoid(z), with e^z = e^y - 1: 1 - e^-y, as -expm1(-y) so that small y keep their digits.
        case Activation::softplus: return -expm1f(-y);
        case Activation::softsign: {  // 1 / (1 + |z|)^2, and 1 / (1 + |z|) = 1 - |y|
            const float gap = 1.0f - fabsf(y);
            return gap * gap;
        }
        default: return 1.0f;
    }
}

}  // namespace mpt
