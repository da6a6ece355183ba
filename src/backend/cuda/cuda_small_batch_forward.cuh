// Dense forward for batches of at most 64 rows on the tensor cores, in one kernel: the GEMM, the
// bias, the activation, the output in its dtype and cuBLASLt's ReLU bit mask for the backward pass.
// Why: at batch 32 on an H200 cuBLASLt ran each forward layer as three kernels (a split-K GEMM, its
// reduction and a separate bias + ReLU epilogue), about 30 us for the seed MLP's three layers,
// where reading the 25 MB of bf16 weights takes about 6 us. Here each block owns 32 output
// features and a share of K, its 8 warps split the share; a warp's sums go through shared memory
// once, the blocks' that share a tile (one thread-block cluster, compute capability 9.0) through
// each other's, each in a fixed order (the sums are deterministic; their order is not cuBLASLt's).
// fp16/bf16 inputs, fp32 sums. Its first version, one block per tile and the whole of K, measured
// 13.2 + 11.7 + 6.1 us for the seed MLP's layers at batch 32 on an H200 (2026-12-05), slower than
// cuBLASLt's chain: 94, 32 and 1 blocks on 132 SMs. Chosen by MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1
// (or the backend's setter) until a GPU has measured it.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/small_batch_forward_layout.h"

namespace mpt {

// Whether the current device can run it (compute capability 8.0 and up, this build's code for it
// compiled for 8.0 or later).
bool small_batch_forward_available();

// Whether the kernel covers `args`: 1 to 64 rows, fp16/bf16 inputs, K a multiple of 8 (16-byte
// loads of every row). Output and bias in any dtype; every activation but softmax.
bool small_batch_forward_applies(const DenseForwardArgs& args);

// The blocks along K (one cluster) for `args` on the current device (split_k; one below compute
// capability 9.0 or where the device cannot place the cluster): asked when the op is planned.
small_batch_mma::SplitK small_batch_forward_split(const DenseForwardArgs& args);

// args as small_batch_forward_applies says, operands 16-byte aligned (dense_forward's checks),
// `split` as small_batch_forward_split gave it; writes args.relu_mask in cuBLASLt's bit-mask format
// when `write_mask`, it is set and the activation is ReLU.
void run_small_batch_forward(const DenseForwardArgs& args, const small_batch_mma::SplitK& split, bool write_mask,
                             cudaStream_t stream);

}  // namespace mpt
