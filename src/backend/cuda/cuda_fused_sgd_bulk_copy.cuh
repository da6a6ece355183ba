// Fused SGD with its masters streamed into shared memory by bulk copies and its weight gradient on
// tensor cores (MPTRAIN_CUDA_BULK_COPY_SGD=1, off by default; compute capability 9.0, fp16 and bf16).
// The same update as cuda_fused_sgd.cuh's CUDA-core kernel, with the arithmetic and the memory traffic
// in other hands, for the batches of at most 64 rows that kernel takes and past them up to 256 rows,
// where the default writes the fp32 weight gradient with a GEMM and reads it back in the update
// kernel (18 bytes a weight against 10 here):
//   - the CUDA-core kernel spends 32 FMAs a weight at batch 32 (512 a thread a tile, about 1,260
//     instructions with its shared-memory reads), and ncu found it issuing an instruction in 64% of
//     cycles while moving 1 TB/s, a third of an H200's copy bandwidth: bound by its instructions.
//     Here a warp's 32 x 16 part of a tile is 8 mma.m16n8k16 at batch 32: the sm_90 code's tile loop
//     is about 260 instructions a thread, most of them the 16 masters' reads, updates and stores;
//   - its masters were prefetched one tile ahead in registers, 64 bytes a thread (32 KiB an SM in
//     flight at 2 blocks). Here the tile's masters and dZ rows arrive by cp.async.bulk into a ring
//     of 3 stages, 2 tiles ahead of the one summed, completing on an mbarrier each: about 40 KiB a
//     block in flight, 120 KiB an SM at 3 blocks (batch 32: 67 KiB of shared memory a block; 2
//     blocks of 83 KiB at 33-64 rows, 1 of 179 KiB at 65-256, whose copies then come from every
//     warp: a lane a dZ row).
// The skip on found_inf, the grid (fused_sgd_grid_layout.h), the bias up to 64 rows and the element
// rule are the CUDA-core kernel's; the weight gradient's sums are the tensor cores' (fp32, in another
// order), so the masters agree with the CUDA-core kernel's within rounding, not bit for bit. Layout:
// fused_sgd_bulk_copy_layout.h.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mpt {

struct FusedSgdVariant;  // cuda_fused_sgd_launch.cuh (device code: this header is also for host-only tests)

// Whether an update's shapes and pointers suit the bulk copies: fp16 or bf16, 1 to 256 rows,
// in_features a multiple of 4 and out_features of 8 (every copied row a multiple of 16 bytes), the
// masters and dZ 16-byte aligned, A 8-byte aligned, the copies 4-byte aligned. No CUDA call.
bool fused_sgd_bulk_copy_shapes_fit(const DenseUpdateArgs& args);

// Which of the kernel's compilations run on a device: compute capability 9.0 with sm_90 code, and a
// block's dynamic shared memory granted. Found once by prepare_fused_sgd_bulk_copy, since finding it
// takes CUDA calls and an update is planned in every step.
struct FusedSgdBulkCopyDevice {
    bool runs[2][3] = {};  // [bf16, fp16][batches up to 32 rows, 33 to 64, 65 to 256]
};

// Lets each compilation have the dynamic shared memory it takes (over the default 48 KiB) and says
// which then run: once per device, before the kernels run (CudaBackend's constructor under
// MPTRAIN_CUDA_BULK_COPY_SGD=1). Errors leave a compilation out.
FusedSgdBulkCopyDevice prepare_fused_sgd_bulk_copy();

// The shapes fit, and the compilation for the update's dtype and rows runs on `device`: when an
// update is planned.
bool fused_sgd_bulk_copy_applies(const DenseUpdateArgs& args, const FusedSgdBulkCopyDevice& device);

// The kernel's compilations for the update's dtype and batch rows (planned with applies).
FusedSgdVariant fused_sgd_bulk_copy_variant(const DenseUpdateArgs& args);

// Blocks of the compilation for `dtype` and `rows` resident on an SM of the current device (tests).
int fused_sgd_bulk_copy_blocks_per_multiprocessor(DType dtype, int64_t rows, bool single);

}  // namespace mpt
