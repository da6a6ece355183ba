// See inference.h. The executor is planned per call: inference outside training is not a hot loop,
// and keeping no state makes the model safe to save, load and share.
#include "nn/inference.h"

#include <algorithm>

#include "core/error.h"
#include "nn/executor.h"

namespace mpt {

void predict_fp32(Model& model, const float* inputs, int64_t rows, float* outputs) {
    require(rows > 0, MPT_STATUS_INVALID_ARGUMENT, "rows must be positive");
    model.build();
    // Mean squared error makes the head report act(z) unchanged (no from-logits softmax).
    Executor executor(model, PrecisionPolicy{MPT_PRECISION_FP32, DType::fp32}, ExecutionMode::inference,
                      LossConfig{LossKind::mean_squared_error, 0.0f, {}}, OptimizerConfig{}, LossScalerConfig{});
    const int64_t batch_rows = std::min<int64_t>(rows, 1024);
    executor.reserve_rows(batch_rows);
    const int64_t features = model.input_features(), classes = model.output_features();
    for (int64_t first = 0; first < rows; first += batch_rows) {
        const int64_t count = std::min(batch_rows, rows - first);
        executor.load_inputs(inputs + first * features, count, 0);
        executor.forward(0, count);
        executor.loss_head(0, count, Executor::HeadMode::predict);
        executor.read_outputs(outputs + first * classes, count);
    }
}

}  // namespace mpt
