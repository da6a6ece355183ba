// Names of activations for logs, errors and saved model metadata.
#include "nn/activation.h"

namespace mpt {

const char* activation_name(Activation activation) {
    switch (activation) {
        case Activation::linear: return "linear";
        case Activation::relu: return "relu";
        case Activation::sigmoid: return "sigmoid";
        case Activation::tanh: return "tanh";
        case Activation::softmax: return "softmax";
        case Activation::leaky_relu: return "leaky_relu";
        case Activation::elu: return "elu";
        case Activation::selu: return "selu";
        case Activation::softplus: return "softplus";
        case Activation::softsign: return "softsign";
    }
    return "unknown";
}

}  // namespace mpt
