// Names of losses for logs, errors and saved model metadata.
#include "nn/loss.h"

namespace mpt {

const char* loss_name(LossKind loss) {
    switch (loss) {
        case LossKind::sparse_categorical_crossentropy: return "sparse_categorical_crossentropy";
        case LossKind::categorical_crossentropy: return "categorical_crossentropy";
        case LossKind::binary_crossentropy: return "binary_crossentropy";
        case LossKind::mean_squared_error: return "mean_squared_error";
        case LossKind::mean_absolute_error: return "mean_absolute_error";
        case LossKind::huber: return "huber";
    }
    return "unknown";
}

}  // namespace mpt
