// See cuda_fused_sgd_bulk_copy.cuh; where each operand sits in shared memory and which element each
// lane's fragments stand for is fused_sgd_bulk_copy_layout.h. A block's life:
//   1. thread 0 sets up the 3 stages' mbarriers; the block issues the bulk copies of the run's first
//      3 tiles, one copy a row (the tile's 32 master rows of the strip and dZ's batch rows, dealt
//      round the warps), thread 0 arriving on the stage's barrier with their bytes;
//   2. meanwhile the block stages its strip of A (the batch rows past the batch zero, and the dZ rows
//      past it in every stage, so that the mma's K padding adds 0 x 0), and each warp takes its B
//      fragments of the strip into registers with ldmatrix.trans, for the whole run;
//   3. per tile: wait for its stage's barrier, take dZ's A fragments (ldmatrix.trans), 2 x 2 mma
//      tiles a k-step, then each thread updates the masters its accumulators stand for (read from
//      the stage, written to global memory with their low-precision copies) and the first strip's
//      blocks the bias (their last warp); a barrier; the block refills the stage with the tile 3 ahead.
// Every tile issued is waited for, so no copy is in flight when the block ends. Code for compute
// capability 9.0 only (bulk copies and mbarrier transaction counts); elsewhere the kernels trap and
// fused_sgd_bulk_copy_applies keeps them from being launched. Under MPT_CUDA_EMULATION (the host
// compiler, tests/cuda_emulation) each instruction below is the emulation's instead.
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fused_sgd_launch.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/fused_sgd_bulk_copy_layout.h"

namespace mpt {

namespace {

using namespace fused_sgd_bulk;

static_assert(kTileRows == kFusedSgdTileRows && kStripColumns == kFusedSgdStripColumns, "the grid's tiles");
static_assert(kMaxRows >= kFusedSgdMaxRows, "every batch the CUDA-core kernel takes");

#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900) || defined(MPT_CUDA_EMULATION)

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
#if defined(MPT_CUDA_EMULATION)
    return ::mpt_emulation::shared_offset(pointer);
#else
    return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
#endif
}

__device__ __forceinline__ void barrier_init(uint32_t barrier) {
#if defined(MPT_CUDA_EMULATION)
    ::mpt_emulation::mbarrier_init(barrier, 1);
#else
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(barrier) : "memory");
#endif
}

// The barrier's initialisation made visible to the bulk-copy engine (the async proxy).
__device__ __forceinline__ void barrier_init_fence() {
#if !defined(MPT_CUDA_EMULATION)
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Shared memory this thread read or wrote as ordinary accesses, ordered before the bulk copies it
// issues next (which write that memory through the async proxy).
__device__ __forceinline__ void async_proxy_fence() {
#if !defined(MPT_CUDA_EMULATION)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// The barrier's one arrival of a phase, with the bytes its copies will bring.
__device__ __forceinline__ void barrier_expect_bytes(uint32_t barrier, uint32_t bytes) {
#if defined(MPT_CUDA_EMULATION)
    ::mpt_emulation::mbarrier_arrive_expect_tx(barrier, bytes);
#else
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
#endif
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
// completing on `barrier`.
__device__ __forceinline__ void bulk_copy(uint32_t destination, const void* source, uint32_t bytes, uint32_t barrier) {
#if defined(MPT_CUDA_EMULATION)
    ::mpt_emulation::bulk_copy(destination, source, bytes, barrier);
#else
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(destination),
        "l"(source), "r"(bytes), "r"(barrier)
        : "memory");
#endif
}

// The L2 policy for data read once and not again before the next step's update (the masters):
// evicted first, as the CUDA-core kernel's __ldcs marks them, so that L2 keeps the low-precision
// copies written beside them, which the next step's forward reads (cuda_fused_sgd_launch.cuh).
__device__ __forceinline__ uint64_t evict_first_policy() {
    uint64_t policy = 0;
#if !defined(MPT_CUDA_EMULATION)
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#endif
    return policy;
}

// bulk_copy under an L2 cache policy.
__device__ __forceinline__ void bulk_copy_with_policy(uint32_t destination, const void* source, uint32_t bytes,
                                                      uint32_t barrier, uint64_t policy) {
#if defined(MPT_CUDA_EMULATION)
    static_cast<void>(policy);
    ::mpt_emulation::bulk_copy(destination, source, bytes, barrier);
#else
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
        "%4;\n" ::"r"(destination),
        "l"(source), "r"(bytes), "r"(barrier), "l"(policy)
        : "memory");
#endif
}

__device__ __forceinline__ void barrier_wait(uint32_t barrier, uint32_t parity) {
#if defined(MPT_CUDA_EMULATION)
    ::mpt_emulation::mbarrier_wait_parity(barrier, parity);
#else
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n"
            ".reg .pred complete;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
            "selp.u32 %0, 1, 0, complete;\n"
            "}\n"
            : "=r"(done)
            : "r"(barrier), "r"(parity)
            : "memory");
    } while (!done);
#endif
}

// Four 8 x 8 matrices of 16-bit elements, transposed: lane 8q + j hands the address of row j of
// matrix q, and register q of lane l gets that matrix's elements (2 (l % 4), l / 4) and
// (2 (l % 4) + 1, l / 4) in its low and high halves.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&registers)[4], uint32_t address) {
#if defined(MPT_CUDA_EMULATION)
    ::mpt_emulation::ldmatrix_x4_trans(registers, address);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(registers[0]), "=r"(registers[1]), "=r"(registers[2]), "=r"(registers[3])
                 : "r"(address));
#endif
}

// Two floats as two elements of T in 32 bits, the first in the low half, rounded to nearest even
// (from_float's rounding).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float first, float second) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 pair = __floats2bfloat162_rn(first, second);
        return *reinterpret_cast<const uint32_t*>(&pair);
    } else {
        const __half2 pair = __floats2half2_rn(first, second);
        return *reinterpret_cast<const uint32_t*>(&pair);
    }
}

// One block's part of layer p's update: its column strip, its run of row tiles. T: __half or
// __nv_bfloat16. kPadded: the batch rows as the mma's K (32, 64 or 256).
template <typename T, int kPadded>
__device__ __forceinline__ void update_strip_by_bulk_copies(const FusedSgdLaunch& p, int64_t strip, int64_t run) {
    constexpr int kSteps = kPadded / 16;
#if defined(MPT_CUDA_EMULATION)
    unsigned char* const shared = ::mpt_emulation::dynamic_shared_memory();
#else
    extern __shared__ __align__(128) unsigned char shared[];
#endif
    const FusedSgdBlockStart start = fused_sgd_block_start(p, run);
    if (!start.active) return;  // no tile, or a skipped step: nothing is written
    const int64_t first_tile = start.first_tile, end_tile = start.end_tile;
    const OptimizerStepScalars& scalars = start.scalars;

    const int thread = static_cast<int>(threadIdx.x), lane = thread & 31, warp = thread >> 5;
    const int rows = static_cast<int>(p.rows);
    const int64_t in = p.in_features, out = p.out_features;
    const int64_t i0 = strip * kStripColumns;
    const int strip_columns = static_cast<int>(in - i0 < kStripColumns ? in - i0 : kStripColumns);
    uint64_t* barriers = reinterpret_cast<uint64_t*>(shared);
    uint16_t* input = reinterpret_cast<uint16_t*>(shared + input_offset());
    const auto stage_masters = [&](int stage) {
        return reinterpret_cast<float*>(shared + stage_offset(kPadded, stage));
    };
    const auto stage_output_grad = [&](int stage) {
        return reinterpret_cast<uint16_t*>(shared + stage_offset(kPadded, stage) + master_bytes());
    };
    const uint16_t* output_grad = static_cast<const uint16_t*>(p.output_grad);

    // Every thread: its copies of `tile` into `stage`, one row a copy, dealt round the warps
    // (tile_copy: the tile's master rows, then dZ's batch rows); thread 0 arrives on the stage's barrier
    // with all their bytes, the phase's one arrival (a copy that completes before it only takes the
    // barrier's count of bytes below zero: the phase cannot end before the arrival).
    const uint64_t streaming = evict_first_policy();
    const auto issue = [&](int64_t tile, int stage) {
        const int64_t o0 = tile * kTileRows;
        const int tile_rows = static_cast<int>(out - o0 < kTileRows ? out - o0 : kTileRows);
        const int copies = tile_rows + rows;
        const uint32_t master_row_bytes = static_cast<uint32_t>(strip_columns) * 4;
        const uint32_t grad_row_bytes = static_cast<uint32_t>(tile_rows) * 2;
        const uint32_t barrier = shared_address(&barriers[stage]);
        if (thread != 0 && tile_copy(lane, warp, 0) >= copies) return;  // no copy of this tile here
        async_proxy_fence();
        if (thread == 0) barrier_expect_bytes(barrier, tile_rows * master_row_bytes + rows * grad_row_bytes);
#pragma unroll
        for (int k = 0; k < kMaxCopiesPerLane; ++k) {
            const int copy = tile_copy(lane, warp, k);
            if (copy < tile_rows) {
                bulk_copy_with_policy(shared_address(stage_masters(stage) + copy * kMasterStride),
                                      p.weights + (o0 + copy) * in + i0, master_row_bytes, barrier, streaming);
            } else if (copy < copies) {
                const int r = copy - tile_rows;
                bulk_copy(shared_address(stage_output_grad(stage) + r * kOutputGradStride), output_grad + r * out + o0,
                          grad_row_bytes, barrier);
            }
        }
    };

    if (thread == 0) {
        for (int stage = 0; stage < kStages; ++stage) barrier_init(shared_address(&barriers[stage]));
        barrier_init_fence();
    }
    __syncthreads();
    for (int stage = 0; stage < kStages && first_tile + stage < end_tile; ++stage) issue(first_tile + stage, stage);

    // While the first tiles arrive: dZ's rows past the batch, zero in every stage (no copy writes
    // them), and the strip of A, zero past the batch and past the layer's last column.
    for (int k = thread; k < kStages * (kPadded - rows) * kTileRows; k += kThreads) {
        const int stage = k / ((kPadded - rows) * kTileRows), rest = k % ((kPadded - rows) * kTileRows);
        stage_output_grad(stage)[(rows + rest / kTileRows) * kOutputGradStride + rest % kTileRows] = 0;
    }
    // A in groups of 4 elements, one 8-byte load each (in_features a multiple of 4, A 8-byte aligned:
    // a group lies inside the layer's columns or past them whole), 8 loads a thread in flight at once.
    const uint16_t* input_rows = static_cast<const uint16_t*>(p.input);
    constexpr int kGroupsPerRow = kStripColumns / 4;
    constexpr int kGroupsPerThread = kPadded * kGroupsPerRow / kThreads;
    constexpr int kInFlight = kGroupsPerThread < 8 ? kGroupsPerThread : 8;
    static_assert(kGroupsPerThread % kInFlight == 0, "whole rounds of loads");
    for (int round = 0; round < kGroupsPerThread; round += kInFlight) {
        uint2 staged[kInFlight];
#pragma unroll
        for (int s = 0; s < kInFlight; ++s) {
            const int k = thread + (round + s) * kThreads, r = k / kGroupsPerRow, c = 4 * (k % kGroupsPerRow);
            staged[s] = r < rows && c < strip_columns ? *reinterpret_cast<const uint2*>(input_rows + r * in + i0 + c)
                                                      : make_uint2(0u, 0u);
        }
#pragma unroll
        for (int s = 0; s < kInFlight; ++s) {
            const int k = thread + (round + s) * kThreads;
            *reinterpret_cast<uint2*>(input + (k / kGroupsPerRow) * kInputStride + 4 * (k % kGroupsPerRow)) = staged[s];
        }
    }
    __syncthreads();

    // This warp's B fragments (its 16 columns of the strip), for every k-step of the run.
    uint32_t b[kSteps][kMmaColumnTiles][2];
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
        uint32_t matrices[4];
        ldmatrix_x4_trans(matrices, shared_address(input + input_element(lane, warp, ks)));
        b[ks][0][0] = matrices[0];
        b[ks][0][1] = matrices[1];
        b[ks][1][0] = matrices[2];
        b[ks][1][1] = matrices[3];
    }

    // Whether the strip's columns of this thread's two column tiles lie inside the layer (a pair is
    // inside or outside whole: its first column is even, in_features a multiple of 4).
    bool column_inside[kMmaColumnTiles];
#pragma unroll
    for (int n = 0; n < kMmaColumnTiles; ++n) column_inside[n] = i0 + accumulator_column(lane, warp, n, 0) < in;
    float* const weights = p.weights;
    uint16_t* const low_weights = static_cast<uint16_t*>(p.low_weights);
    for (int64_t tile = first_tile; tile < end_tile; ++tile) {
        const int use = static_cast<int>(tile - first_tile), stage = use % kStages;
        barrier_wait(shared_address(&barriers[stage]), static_cast<uint32_t>(use / kStages) & 1u);
        const uint16_t* grads = stage_output_grad(stage);

        float sums[kMmaRowTiles][kMmaColumnTiles][4] = {};
#pragma unroll
        for (int ks = 0; ks < kSteps; ++ks)
#pragma unroll
            for (int m = 0; m < kMmaRowTiles; ++m) {
                uint32_t a[4];
                ldmatrix_x4_trans(a, shared_address(grads + output_grad_element(lane, m, ks)));
#pragma unroll
                for (int n = 0; n < kMmaColumnTiles; ++n) mma_16x8x16<T>(sums[m][n], a, b[ks][n]);
            }

        // The masters this thread's accumulators stand for: rows g, g + 8, g + 16, g + 24 of the tile
        // (g = lane / 4), each at the columns of `column_inside`; their place in global memory from
        // the tile's first row of them, rows apart by multiples of 8 x in_features.
        const int64_t o0 = tile * kTileRows;
        const float* masters = stage_masters(stage);
        const int64_t first_index = (o0 + accumulator_row(lane, 0, 0)) * in + i0 + accumulator_column(lane, warp, 0, 0);
        const bool whole_tile = o0 + kTileRows <= out;
#pragma unroll
        for (int m = 0; m < kMmaRowTiles; ++m)
#pragma unroll
            for (int pair = 0; pair < 2; ++pair) {
                const int row = accumulator_row(lane, m, 2 * pair);
                if (!whole_tile && o0 + row >= out) continue;
#pragma unroll
                for (int n = 0; n < kMmaColumnTiles; ++n) {
                    if (!column_inside[n]) continue;
                    const float2 master =
                        *reinterpret_cast<const float2*>(masters + master_element(lane, warp, m, n, pair));
                    const float first = plain_sgd_update_element(p.optimizer, scalars, master.x, sums[m][n][2 * pair]);
                    const float second =
                        plain_sgd_update_element(p.optimizer, scalars, master.y, sums[m][n][2 * pair + 1]);
                    const int64_t index = first_index + (m * 16 + pair * 8) * in + n * 8;
                    store_master<T>(reinterpret_cast<float2*>(weights + index), make_float2(first, second));
                    if (low_weights) *reinterpret_cast<uint32_t*>(low_weights + index) = pack_pair<T>(first, second);
                }
            }
        // The bias gradient is the column sum of dZ: the first strip's blocks own the bias, their last
        // warp (any warp would do: the copies after the barrier below are dealt evenly). Up to 64 rows in
        // batch-row order, as the CUDA-core kernel sums it (the same bits); past them in 8 interleaved
        // partial sums, added pairwise, so that the chain of additions is not 256 long (the default
        // path there, cuBLASLt's bias-gradient epilogue, has its own order too).
        const int column = thread - (kWarps - 1) * 32;
        if (strip == 0 && warp == kWarps - 1 && o0 + column < out) {
            float sum = 0.0f;
            if constexpr (kPadded <= kFusedSgdMaxRows) {
                for (int r = 0; r < rows; ++r) sum += bits_to_float<T>(grads[r * kOutputGradStride + column]);
            } else {
                float partial[8] = {};
                for (int r = 0; r < rows; r += 8)
#pragma unroll
                    for (int j = 0; j < 8; ++j)  // (rows past the batch are zero)
                        partial[j] += bits_to_float<T>(grads[(r + j) * kOutputGradStride + column]);
                sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                      ((partial[4] + partial[5]) + (partial[6] + partial[7]));
            }
            const int64_t o = o0 + column;
            const float bias = plain_sgd_update_element(p.optimizer, scalars, p.bias[o], sum);
            p.bias[o] = bias;
            if (p.low_bias) static_cast<T*>(p.low_bias)[o] = from_float<T>(bias);
        }
        // Every warp is done with the stage before its refill is issued.
        __syncthreads();
        if (tile + kStages < end_tile) issue(tile + kStages, stage);
    }
}

#endif  // __CUDA_ARCH__ >= 900

// 3 blocks an SM at batch 32 (67 KiB of shared memory each), 2 at 64 (83 KiB), 1 at 256 (179 KiB).
template <int kPadded>
constexpr int kBlocksPerMultiprocessor = blocks_per_multiprocessor(kPadded);

template <typename T, int kPadded, int kLayers>
__global__ void __launch_bounds__(kThreads, kBlocksPerMultiprocessor<kPadded>)
    fused_sgd_bulk_copy_kernel(const FusedSgdGroup group) {
    start_after_preceding_kernel();
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900) || defined(MPT_CUDA_EMULATION)
    update_this_blocks_layer<kLayers>(group, [](const FusedSgdLaunch& p, int64_t strip, int64_t run) {
        update_strip_by_bulk_copies<T, kPadded>(p, strip, run);
    });
    if (group.finish.state) finish_step_in_last_block(group.finish);
#else
    static_cast<void>(group);
    __trap();  // never launched below 9.0: fused_sgd_bulk_copy_applies says no there
#endif
}

template <typename T, int kPadded>
FusedSgdVariant variant_for() {
    FusedSgdVariant variant{};
    variant.single = fused_sgd_bulk_copy_kernel<T, kPadded, 1>;
    variant.group = fused_sgd_bulk_copy_kernel<T, kPadded, kFusedSgdMaxLayers>;
    variant.dynamic_shared = static_cast<int>(shared_bytes(kPadded));
    return variant;
}

template <typename T>
FusedSgdVariant variant_for(int64_t rows) {
    switch (padded_rows(static_cast<int>(rows))) {
        case 32:
            return variant_for<T, 32>();
        case 64:
            return variant_for<T, 64>();
        default:
            return variant_for<T, 256>();
    }
}

FusedSgdVariant variant_of(DType dtype, int64_t rows) {
    return dtype == DType::bf16 ? variant_for<__nv_bfloat16>(rows) : variant_for<__half>(rows);
}

}  // namespace

bool fused_sgd_bulk_copy_shapes_fit(const DenseUpdateArgs& args) {
    return (args.compute_dtype == DType::bf16 || args.compute_dtype == DType::fp16) && args.rows > 0 &&
           args.rows <= kMaxRows && args.in_features % 4 == 0 && args.out_features % 8 == 0 &&
           is_aligned(args.weights, 16) && is_aligned(args.output_grad, 16) && is_aligned(args.input, 8) &&
           (args.low_weights == nullptr || is_aligned(args.low_weights, 4));
}

bool fused_sgd_bulk_copy_applies(const DenseUpdateArgs& args, const FusedSgdBulkCopyDevice& device) {
    return fused_sgd_bulk_copy_shapes_fit(args) &&
           device.runs[args.compute_dtype == DType::bf16 ? 0 : 1][compilation_index(static_cast<int>(args.rows))];
}

FusedSgdVariant fused_sgd_bulk_copy_variant(const DenseUpdateArgs& args) {
    require(fused_sgd_bulk_copy_shapes_fit(args), MPT_STATUS_INTERNAL,
            "cuda backend: the bulk-copy fused SGD kernel for an update it does not take");
    return variant_of(args.compute_dtype, args.rows);
}

FusedSgdBulkCopyDevice prepare_fused_sgd_bulk_copy() {
    FusedSgdBulkCopyDevice device;
    for (DType dtype : {DType::bf16, DType::fp16})
        for (int64_t rows : {int64_t{32}, int64_t{64}, int64_t{256}}) {
            const FusedSgdVariant variant = variant_of(dtype, rows);
            bool runs = true;
            for (const auto kernel : {variant.single, variant.group}) {
                // All of an SM's unified memory as shared memory: the copies bypass L1, and 3 blocks
                // take 206 KiB at batch 32, 1 block 179 KiB at 256.
                int blocks = 0;
                if (!kernel_code_runs_on_current_device(reinterpret_cast<const void*>(kernel), 9) ||
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, variant.dynamic_shared) !=
                        cudaSuccess ||
                    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared) != cudaSuccess ||
                    cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                        &blocks, kernel, kThreads, static_cast<size_t>(variant.dynamic_shared)) != cudaSuccess ||
                    blocks < 1) {
                    cudaGetLastError();  // (not sticky) this compilation is left out: the CUDA-core kernel
                    runs = false;
                }
            }
            device.runs[dtype == DType::bf16 ? 0 : 1][compilation_index(static_cast<int>(rows))] = runs;
        }
    return device;
}

int fused_sgd_bulk_copy_blocks_per_multiprocessor(DType dtype, int64_t rows, bool single) {
    const FusedSgdVariant variant = variant_of(dtype, rows);
    int blocks = 0;
    MPT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, single ? variant.single : variant.group, kThreads, static_cast<size_t>(variant.dynamic_shared)));
    return blocks;
}

}  // namespace mpt
