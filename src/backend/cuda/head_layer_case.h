// When the CUDA backend may run the last dense layer's forward, its loss head and its input gradient
// as one launch (the head layer in a cluster, cuda_head_layer.cuh), and how that launch shares the
// work out: plain functions that the backend and the kernel call and a CPU test
// (tests/test_head_layer_case.cpp) checks.
//
// The launch splits the layer's inputs (K) across the blocks of one thread-block cluster, at most
// kHeadLayerShareK of them a block: each block sums its share of every logit, the blocks read each
// other's sums (distributed shared memory), and each then runs the head on the whole logits itself
// and computes the input gradient of its own share of K. So besides the shapes, the buffers must be
// apart: one block may write the logits while another writes the input gradient, so whatever the
// launch writes (the logits, their gradient, the input gradient, the metrics, the train state) shares
// no byte with another such buffer or with an operand, but where the three ops pass one buffer along
// (the forward's output is the head's logits, the head's logits gradient the backward's, both read
// the same weights). The executor's arena gives buffers whose lifetimes do not overlap the same
// bytes; it keeps the logits live until the input gradient below them is written
// (Executor::reserve_rows), and this check holds for any other caller.
#pragma once

#include <algorithm>
#include <cstdint>

#include "amp/loss_scaler.h"
#include "backend/backend.h"
#include "backend/byte_range.h"
#include "core/dtype.h"
#include "core/host_device.h"

namespace mpt {

// Batches of at most kHeadLayerMaxRows rows (the fused SGD kernel's and the small-batch kernels'
// limit: past it the GEMMs' tensor cores win), outputs of at most kHeadLayerMaxWidth padded columns
// (a lane a column in the head), inputs of at most kHeadLayerShareK a block and kHeadLayerMaxBlocks
// blocks (the portable cluster size).
constexpr int kHeadLayerMaxRows = 64;
constexpr int kHeadLayerMaxWidth = 32;
constexpr int kHeadLayerShareK = 128;
constexpr int kHeadLayerMaxBlocks = 8;
constexpr int kHeadLayerThreads = 256;
// The forward's and the backward's work item: 4 batch rows by 4 outputs (the forward's features, the
// backward's input features), the 16 sums a thread keeps in registers.
constexpr int kHeadLayerItemRows = 4;
constexpr int kHeadLayerItemColumns = 4;
constexpr int kHeadLayerItemSums = kHeadLayerItemRows * kHeadLayerItemColumns;
constexpr int kHeadLayerMaxSlices = 8;        // the forward's slices of a block's share (16 k each when whole)
constexpr int kHeadLayerElementsPerLoad = 8;  // 16 bytes of 16-bit elements

MPT_HOST_DEVICE constexpr int64_t head_layer_divide_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The blocks along K for `in_features` inputs: one a share of kHeadLayerShareK.
MPT_HOST_DEVICE constexpr int head_layer_blocks(int64_t in_features) {
    return static_cast<int>(head_layer_divide_up(in_features, kHeadLayerShareK));
}
// Block `block`'s share of K: [begin, end).
MPT_HOST_DEVICE constexpr int64_t head_layer_share_begin(int block) { return int64_t{block} * kHeadLayerShareK; }
MPT_HOST_DEVICE constexpr int64_t head_layer_share_end(int block, int64_t in_features) {
    return head_layer_share_begin(block) + kHeadLayerShareK < in_features
               ? head_layer_share_begin(block) + kHeadLayerShareK
               : in_features;
}

// The forward's work items: 4 x 4 tiles of the logits (rows by features), each summed over a share of
// K in `slices` slices, one thread a (tile, slice); the slices are the most that keep every tile's
// slices on the block's threads (a power of 2, at most kHeadLayerMaxSlices), and each is a whole
// number of 16-byte loads.
struct HeadLayerForwardSplit {
    int row_tiles;
    int feature_tiles;
    int slices;
    int64_t slice_k;  // a multiple of kHeadLayerElementsPerLoad
};
MPT_HOST_DEVICE constexpr HeadLayerForwardSplit head_layer_forward_split(int64_t rows, int64_t width) {
    HeadLayerForwardSplit split{static_cast<int>(head_layer_divide_up(rows, kHeadLayerItemRows)),
                                static_cast<int>(head_layer_divide_up(width, kHeadLayerItemColumns)), 1, 0};
    const int tiles = split.row_tiles * split.feature_tiles;
    while (split.slices < kHeadLayerMaxSlices && 2 * split.slices * tiles <= kHeadLayerThreads) split.slices *= 2;
    split.slice_k =
        head_layer_divide_up(head_layer_divide_up(kHeadLayerShareK, split.slices), kHeadLayerElementsPerLoad) *
        kHeadLayerElementsPerLoad;
    return split;
}
// Where thread `thread`'s 16 forward sums stand in the block's slice sums (kHeadLayerItemSums a
// thread, in thread order), and the place of sum (i, j) of tile `tile`'s slice `slice` among them.
MPT_HOST_DEVICE constexpr int head_layer_slice_sum(int tile, int slice, int slices, int i, int j) {
    return (tile * slices + slice) * kHeadLayerItemSums + i * kHeadLayerItemColumns + j;
}

// The backward's work items: 4 batch rows by 4 consecutive inputs of the block's share (an 8-byte
// load of each row of W).
MPT_HOST_DEVICE constexpr int64_t head_layer_backward_items(int64_t rows, int64_t share) {
    return head_layer_divide_up(rows, kHeadLayerItemRows) * head_layer_divide_up(share, kHeadLayerItemColumns);
}

// Whether the three ops are a linear layer with fp32 logits, its training head and its input
// gradient, each passing the next its operand, in the shapes and dtypes the launch takes (16-bit
// inputs and weights, K a multiple of 8 for 16-byte loads), with `max_blocks` blocks at most in a
// cluster on this device (1 where it has no clusters).
inline bool head_layer_shapes_fit(const DenseForwardArgs& forward, const LossHeadArgs& head,
                                  const DenseBackwardDataArgs& data, int max_blocks) {
    const bool sixteen_bit = forward.compute_dtype == DType::fp16 || forward.compute_dtype == DType::bf16;
    return head.rows > 0 && head.rows <= kHeadLayerMaxRows && forward.rows == head.rows && data.rows == head.rows &&
           sixteen_bit && forward.in_features > 0 && forward.in_features % kHeadLayerElementsPerLoad == 0 &&
           head_layer_blocks(forward.in_features) <= std::min(max_blocks, kHeadLayerMaxBlocks) &&
           forward.activation == Activation::linear && forward.bias != nullptr && forward.output == head.logits &&
           forward.output_dtype == DType::fp32 && forward.out_features == head.width &&
           forward.out_features <= kHeadLayerMaxWidth && forward.valid_out <= forward.out_features &&
           head.probabilities == nullptr && head.logits_grad != nullptr && data.output_grad == head.logits_grad &&
           head.logits_grad_dtype == data.compute_dtype && data.weights == forward.weights &&
           data.compute_dtype == forward.compute_dtype && data.out_features == forward.out_features &&
           data.in_features == forward.in_features && data.input_activation != Activation::softmax &&
           (data.input_grad_dtype == data.compute_dtype || data.input_grad_dtype == DType::fp32);
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
        bytes_of(head.metrics, kMetricsCount, sizeof(double)),
        bytes_of(head.state, 1, sizeof(TrainState)),
        bytes_of(data.input_grad_max_abs, 1, sizeof(float)),
        bytes_of(data.input_max_abs, 1, sizeof(float)),
        bytes_of(head.logits_grad_max_abs, 1, sizeof(float)),
    };
    const ByteRange read[] = {
        bytes_of(forward.input, rows * inputs, compute),
        bytes_of(forward.weights, outputs * inputs, compute),
        bytes_of(forward.bias, outputs, dtype_size(forward.bias_dtype)),
        bytes_of(data.input, rows * inputs, compute),
        bytes_of(data.relu_mask, rows * head_layer_divide_up(inputs, 128) * 16,
                 1),  // cuBLASLt's bits, rows padded to 128
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
                               const DenseBackwardDataArgs& data, int max_blocks) {
    return head_layer_shapes_fit(forward, head, data, max_blocks) && head_layer_buffers_apart(forward, head, data);
}

}  // namespace mpt
