// Element-wise activations and their derivatives, expressed through the activation's OUTPUT so
// that backward needs only the stored forward output (the ReLU mask is output > 0).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace mpt {

enum class Activation : uint8_t { linear = 0, relu = 1, sigmoid = 2, tanh = 3, softmax = 4 };

const char* activation_name(Activation activation);

MPT_HOST_DEVICE float activation_forward(Activation activation, float z) {
    switch (activation) {
        case Activation::relu: return z > 0.0f ? z : 0.0f;
        case Activation::sigmoid: return 1.0f / (1.0f + expf(-z));
        case Activation::tanh: return tanhf(z);
        default: return z;  // linear; softmax is applied row-wise by the loss head
    }
}

// d(output)/d(input) given the output y = activation(z).
MPT_HOST_DEVICE float activation_derivative_from_output(Activation activation, float y) {
    switch (activation) {
        case Activation::relu: return y > 0.0f ? 1.0f : 0.0f;
        case Activation::sigmoid: return y * (1.0f - y);
        case Activation::tanh: return 1.0f - y * y;
        default: return 1.0f;
    }
}

}  // namespace mpt
