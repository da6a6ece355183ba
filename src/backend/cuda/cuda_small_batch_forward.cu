// See cuda_small_batch_forward.cuh; where each lane loads its operands and finds its sums is
// small_batch_forward_layout.h. A block owns 32 output features (2 mma tiles of 16) and a share of K
// (split_k: blockIdx.x of gridDim.x, the cluster's blocks; blockIdx.y is the features' tile); its 8
// warps take turns along its share, 32 k at a time, so that one step of the block reads 256
// consecutive k of each of its rows of W. Every lane loads its 16-byte chunks of W and X straight
// into mma registers: W is read once, from DRAM, and X (at most 64 rows, a few hundred KB) from L2
// by each block. The warps' fp32 sums are added in shared memory in a fixed order, then the
// cluster's blocks' sums through distributed shared memory in split order; then a warp per batch
// row (the rows dealt out over the cluster's blocks) adds the bias, applies the activation, writes
// the row's 32 outputs and, for ReLU, its 32 mask bits. Unmeasured: no GPU has run it with K split.
#include "backend/cuda/cuda_small_batch_forward.cuh"

#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_small_batch_mma.cuh"
#include "backend/cuda/small_batch_forward_layout.h"
#include "nn/activation.h"

namespace mpt {

namespace {

using namespace small_batch_mma;

// T: the 16-bit input type. kTiles: 8-row mma tiles of the batch (1, 2, 4 or 8).
template <typename T, int kTiles>
__global__ void __launch_bounds__(kThreads, kBlocksPerMultiprocessor)
    small_batch_forward_kernel(const DenseForwardArgs p, const int64_t k_per_block) {
    start_after_preceding_kernel();
    constexpr int kPaddedRows = 8 * kTiles;
    constexpr int kSteps = kStepsInFlight<kTiles>;
    __shared__ float partial[kSlots * kPaddedRows * kFeatures];

    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int split = static_cast<int>(blockIdx.x), splits = static_cast<int>(gridDim.x);
    const int64_t f0 = static_cast<int64_t>(blockIdx.y) * kFeatures;
    const int64_t K = p.in_features;
    const int64_t k_begin = split_k_begin(split, k_per_block);
    const int64_t k_end = split_k_end(split, k_per_block, K);

    const uint16_t* weights = static_cast<const uint16_t*>(p.weights);
    const uint16_t* w_row[kMmaRows][2];
    bool w_present[kMmaRows][2];
#pragma unroll
    for (int m = 0; m < kMmaRows; ++m)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int64_t f = f0 + a_feature(lane, m, half);
            w_present[m][half] = f < p.out_features;
            w_row[m][half] = weights + (w_present[m][half] ? f : 0) * K;
        }
    const BatchOperand<kTiles> x(static_cast<const uint16_t*>(p.input), p.rows, K, lane);

    float sums[kMmaRows][kTiles][4] = {};
    const int64_t steps = split_steps(k_begin, k_end);
    for (int64_t step0 = 0; step0 < steps; step0 += kSteps) {
        uint32_t a[kSteps][kMmaRows][2][4];  // rows g and g + 8 of each mma tile of W
        uint32_t b[kSteps][kTiles][4];
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            const int64_t k = k_begin + chunk_k(step0 + s, warp, lane);
            const bool in_k = k < k_end;  // k_end is a multiple of 8: a chunk is whole or absent
#pragma unroll
            for (int m = 0; m < kMmaRows; ++m)
#pragma unroll
                for (int half = 0; half < 2; ++half)
                    to_words(a[s][m][half], load_chunk(w_row[m][half], k, in_k && w_present[m][half]));
            x.load(b[s], k, in_k);
        }
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int m = 0; m < kMmaRows; ++m) {
                    uint32_t a_fragment[4];
#pragma unroll
                    for (int r = 0; r < 4; ++r) a_fragment[r] = a_register(a[s][m], h, r);
                    mma_batch_tiles<T>(sums[m], a_fragment, b[s], h);
                }
    }

    add_warp_sums<kTiles>(partial, sums, warp, lane, [](int l, int m, int c) { return accumulator_feature(l, m, c); });
    fold_slots<kTiles>(partial);
    sync_split_blocks();

    const int64_t f = f0 + lane;
    const bool valid = f < p.valid_out;  // padded features are written as 0, their mask bits clear
    const float bias = valid ? load_element(p.bias, p.bias_dtype, f) : 0.0f;
    // The same trip count on a warp's lanes (the ballot below takes them all).
    for (int64_t row = epilogue_first_row(split, splits, warp); row < p.rows; row += epilogue_row_stride(splits)) {
        float z = split_sum<kTiles>(partial, static_cast<int>(row), lane);
        float value = 0.0f;
        bool positive = false;
        if (valid) {
            z = __fadd_rn(z, bias);
            value = activation_forward(p.activation, z);
            positive = z > 0.0f;
        }
        if (f < p.out_features) store_element(p.output, p.output_dtype, row * p.out_features + f, value);
        if (p.relu_mask) {
            const unsigned bits = __ballot_sync(0xffffffffu, positive);
            if (lane == 0)
                static_cast<uint32_t*>(p.relu_mask)[mask_bit(f0, row, relu_mask_ld_bits(p.out_features)) / 32] = bits;
        }
    }
    if (splits > 1) sync_split_blocks();  // the cluster's other blocks have read this one's sums
}

struct ForwardInstances {
    template <typename T, int kTiles>
    static auto get() {
        return small_batch_forward_kernel<T, kTiles>;
    }
};

int64_t feature_tiles(const DenseForwardArgs& args) { return (args.out_features + kFeatures - 1) / kFeatures; }

}  // namespace

bool small_batch_forward_available() { return instances_run_on_current_device<ForwardInstances>(); }

bool small_batch_forward_applies(const DenseForwardArgs& args) {
    return args.rows >= 1 && args.rows <= kMaxRows && args.in_features > 0 && args.out_features > 0 &&
           args.in_features % kElementsPerLoad == 0 && feature_tiles(args) <= kMaxFeatureTiles &&
           (args.compute_dtype == DType::fp16 || args.compute_dtype == DType::bf16) &&
           args.activation != Activation::softmax;
}

small_batch_mma::SplitK small_batch_forward_split(const DenseForwardArgs& args) {
    return instance_split<ForwardInstances>(args.compute_dtype, args.rows, args.in_features, feature_tiles(args));
}

void run_small_batch_forward(const DenseForwardArgs& args, const small_batch_mma::SplitK& split, bool write_mask,
                             cudaStream_t stream) {
    require(small_batch_forward_applies(args) && split.splits >= 1 && split.splits <= kMaxSplits &&
                split_k_begin(split.splits - 1, split.k_per_block) < args.in_features &&
                split_k_begin(split.splits, split.k_per_block) >= args.in_features,
            MPT_STATUS_INTERNAL, "cuda backend: the small-batch forward kernel called outside its case");
    DenseForwardArgs launch = args;
    // A mask only for ReLU, and only where the plan writes one.
    if (args.activation != Activation::relu || !write_mask) launch.relu_mask = nullptr;
    if (launch.valid_out > args.out_features) launch.valid_out = args.out_features;
    launch_small_batch<ForwardInstances>("small_batch_forward_kernel", args.compute_dtype, args.rows, split,
                                         feature_tiles(args), stream, launch);
}

}  // namespace mpt
