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
    }
    return "unknown";
}

}  // namespace mpt
