// When the CUDA backend may run the last dense layer's forward, its loss head and its input gradient
// as one launch (the fused head layer, cuda_loss_head.cuh): plain functions that the backend calls
// and a CPU test (tests/test_head_layer_case.cpp) checks.
//
// The launch runs the three ops' phases a warp a row, one after another, with no barrier between
// the warps: a warp may write its rows' input gradient while another still reads its own rows'
// logits. So besides the shapes, the buffers must be apart: whatever one phase writes (the logits,
// their gradient, the input gradient, the head's outputs) shares no byte with another operand, but
// where the three ops pass one buffer along (the forward's output is the head's logits, the head's
// logits gradient the backward's, both use the same weights). The executor's arena gives buffers
// whose lifetimes do not overlap the same bytes; it keeps the logits live until the input gradient
// below them is written (Executor::reserve_rows), and this check holds for any other caller.
#pragma once

#include <cstdint>

#include "amp/loss_scaler.h"
#include "backend/backend.h"
#include "backend/byte_range.h"
#include "core/dtype.h"

namespace mpt {

// Batches of at most kHeadLayerMaxRows rows (a warp a row, on CUDA cores: past that the GEMMs'
// tensor cores win), outputs of at most kHeadLayerMaxWidth (padded) columns.
constexpr int kHeadLayerMaxRows = 256;
constexpr int kHeadLayerMaxWidth = 16;

// Whether the three ops are a linear layer with fp32 logits, its head and its input gradient, each
// passing the next its operand, in the shapes the launch takes.
inline bool head_layer_shapes_fit(const DenseForwardArgs& forward, const LossHeadArgs& head,
                                  const DenseBackwardDataArgs& data) {
    return head.rows > 0 && head.rows <= kHeadLayerMaxRows && forward.rows == head.rows && data.rows == head.rows &&
           forward.activation == Activation::linear && forward.output == head.logits &&
           forward.output_dtype == DType::fp32 && forward.out_features == head.width &&
           forward.out_features <= kHeadLayerMaxWidth && forward.valid_out <= forward.out_features &&
           head.logits_grad != nullptr && data.output_grad == head.logits_grad &&
           head.logits_grad_dtype == data.compute_dtype && data.weights == forward.weights &&
           data.compute_dtype == forward.compute_dtype && data.out_features == forward.out_features &&
           data.in_features == forward.in_features && data.input_activation != Activation::softmax;
}

// Whether no buffer the launch writes shares a byte with another it writes or reads (for ops whose
// shapes fit).
inline bool head_layer_buffers_apart(const DenseForwardArgs& forward, const LossHeadArgs& head,
                                     const DenseBackwardDataArgs& data) {
    const int64_t rows = head.rows, inputs = forward.in_features, outputs = forward.out_features;
    const size_t compute = dtype_size(forward.compute_dtype);
    const ByteRange written[] = {
        bytes_of(head.logits, rows * head.width, sizeof(float)),
        bytes_of(head.logits_grad, rows * head.width, dtype_size(head.logits_grad_dtype)),
        bytes_of(data.input_grad, rows * inputs, dtype_size(data.input_grad_dtype)),
        bytes_of(head.probabilities, rows * head.width, sizeof(float)),
        bytes_of(head.metrics, kMetricsCount, sizeof(double)),
        bytes_of(head.state, 1, sizeof(TrainState)),
    };
    const ByteRange read[] = {
        bytes_of(forward.input, rows * inputs, compute),
        bytes_of(forward.weights, outputs * inputs, compute),
        bytes_of(forward.bias, outputs, dtype_size(forward.bias_dtype)),
        bytes_of(data.input, rows * inputs, compute),
        bytes_of(head.labels, rows, sizeof(int32_t)),
        bytes_of(head.targets, rows * head.classes, sizeof(float)),
        bytes_of(head.class_weights, head.classes, sizeof(float)),
        bytes_of(head.row_weights, rows, sizeof(float)),
    };
    for (size_t w = 0; w < sizeof(written) / sizeof(written[0]); ++w) {
        for (size_t other = w + 1; other < sizeof(written) / sizeof(written[0]); ++other)
            if (written[w].overlaps(written[other])) return false;
        for (const ByteRange& operand : read)
            if (written[w].overlaps(operand)) return false;
    }
    return true;
}

// Whether the three ops may run as one launch.
inline bool head_layer_fusable(const DenseForwardArgs& forward, const LossHeadArgs& head,
                               const DenseBackwardDataArgs& data) {
    return head_layer_shapes_fit(forward, head, data) && head_layer_buffers_apart(forward, head, data);
}

}  // namespace mpt
