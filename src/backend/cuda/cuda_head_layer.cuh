// The last dense layer around its loss head in one launch: the layer's forward (linear, fp32
// logits), the head (loss, scaled logits gradient, metrics, found_inf) and the layer's input gradient
// (dZ_prev = (dZ W) * act'(A_prev)), for batches of at most 64 rows. Why: at batch 32 on an H200 these
// are three launches of latency around little work (the seed MLP's 1000 -> 16 layer: cuBLASLt's
// split-K forward with its reduction and bias kernels, the head's one block, 9.0 us, and the DRELU
// GEMM). An earlier fusion of the three into the head's one block of warps, a warp a row on CUDA
// cores, measured 1.46x slower (161 against 109 us a step, 2026-12-05): one SM summed 1 M products in
// dependent chains. Here K is split across the blocks of a thread-block cluster instead (128 inputs a
// block, 8 blocks for the seed's 1000; head_layer_case.h): each block sums its share of every logit
// in 4 x 4 register tiles, reads the others' sums through distributed shared memory in block order
// (the same logits in every block), runs the head on them itself and computes its own share of the
// input gradient from the logits gradient it holds. Block 0 alone writes the logits, their gradient,
// the metrics and found_inf. Chosen by MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 (or the backend's setter)
// until a GPU has measured it.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/head_layer_case.h"

namespace mpt {

// The most blocks a launch may put in its cluster on the current device: kHeadLayerMaxBlocks where
// the device and this build's code for it have clusters (compute capability 9.0) and can place one
// of that many of every instance's blocks, else 1 (K of at most kHeadLayerShareK). Asked once, when
// the backend is made.
int head_layer_cluster_capacity();

// The three ops as head_layer_fusable (head_layer_case.h) takes them, with `max_blocks` from
// head_layer_cluster_capacity. `read_mask`: ReLU's derivative from data.relu_mask (cuBLASLt's bits, as
// the backward's plan would read it), else from data.input. `write_maxima`: also max |x| of the input
// gradient it writes and of data.input, into data.input_grad_max_abs and data.input_max_abs where
// set (as max_abs would). `starts_step`: found_inf is cleared before the head's own check (the step's
// begin_step folded into it).
void run_head_layer(const DenseForwardArgs& forward, const LossHeadArgs& head, const DenseBackwardDataArgs& data,
                    bool read_mask, bool write_maxima, bool starts_step, cudaStream_t stream);

}  // namespace mpt
