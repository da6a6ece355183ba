// See cuda_small_batch_backward_data.cuh; where each lane loads its operands and finds its sums is
// small_batch_backward_data_layout.h. The loop is the small-batch forward's with W's 16-byte
// chunk replaced by 8 rows of 8 bytes: a step of the block reads 256 consecutive rows of W (the
// layer's output features), 64 bytes of each per 8 lanes. The output features are split across the
// cluster's blocks as the forward splits K (blockIdx.x of gridDim.x; blockIdx.y is the tile of input
// features), their sums added likewise. Unmeasured: no GPU has run it with the split.
#include "backend/cuda/cuda_small_batch_backward_data.cuh"

#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_max_abs_cells.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_small_batch_mma.cuh"
#include "backend/cuda/small_batch_backward_data_layout.h"
#include "nn/activation.h"

namespace mpt {

namespace {

using namespace small_batch_mma;

// Rows of W a lane loads per step (its chunk of dZ's 8 output features).
constexpr int kRowsPerStep = kElementsPerLoad;

// T: the 16-bit compute type. kTiles: 8-row mma tiles of the batch (1, 2, 4 or 8).
template <typename T, int kTiles>
__global__ void __launch_bounds__(kThreads, kBlocksPerMultiprocessor)
    small_batch_backward_data_kernel(const SmallBatchBackwardDataLaunch launch, const int64_t o_per_block) {
    start_after_preceding_kernel();
    const DenseBackwardDataArgs& p = launch.data;
    constexpr int kSteps = kStepsInFlight<kTiles>;
    __shared__ float partial[kSlots * 8 * kTiles * kFeatures];

    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int split = static_cast<int>(blockIdx.x), splits = static_cast<int>(gridDim.x);
    const int64_t f0 = static_cast<int64_t>(blockIdx.y) * kFeatures;
    const int64_t O = p.out_features;
    const int64_t o_begin = split_k_begin(split, o_per_block);
    const int64_t o_end = split_k_end(split, o_per_block, O);

    // The lane's 4 features of every row of W: whole or past the layer (in_features is a multiple of 8).
    const int64_t w_column = f0 + w_feature0(lane);
    const bool w_present = w_column < p.in_features;
    const uint16_t* w_base = static_cast<const uint16_t*>(p.weights) + (w_present ? w_column : 0);
    const BatchOperand<kTiles> dz_rows(static_cast<const uint16_t*>(p.output_grad), p.rows, O, lane);

    float sums[kMmaRows][kTiles][4] = {};
    const int64_t steps = split_steps(o_begin, o_end);
    for (int64_t step0 = 0; step0 < steps; step0 += kSteps) {
        uint32_t w[kSteps][kRowsPerStep][2];  // the lane's 4 features of each of its 8 rows of W
        uint32_t dz[kSteps][kTiles][4];
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            const int64_t o = o_begin + chunk_k(step0 + s, warp, lane);
            const bool in_o = o < o_end;  // o_end is a multiple of 8: the lane's 8 rows are all there or none
#pragma unroll
            for (int u = 0; u < kRowsPerStep; ++u) {
                const uint2 chunk = load_half_chunk(w_base + (in_o ? o + u : 0) * p.in_features, 0, in_o && w_present);
                w[s][u][0] = chunk.x;
                w[s][u][1] = chunk.y;
            }
            dz_rows.load(dz[s], o, in_o);
        }
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int m = 0; m < kMmaRows; ++m) {
                    uint32_t a_fragment[4];
#pragma unroll
                    for (int r = 0; r < 4; ++r) a_fragment[r] = dgrad_a_register(w[s], h, m, r);
                    mma_batch_tiles<T>(sums[m], a_fragment, dz[s], h);
                }
    }
    add_warp_sums<kTiles>(partial, sums, warp, lane,
                          [](int l, int m, int c) { return dgrad_accumulator_feature(l, m, c); });
    fold_slots<kTiles>(partial);
    sync_split_blocks();

    const int64_t f = f0 + lane;
    const bool present = f < p.in_features;  // no ballot below: lanes past the layer idle
    // The step's maxima of dZ_prev as written and of A_prev, where the launch takes them (the same
    // for the whole grid): every element of both is one lane's of one block here.
    const bool maxima = p.input_grad_max_abs || p.input_max_abs;
    unsigned gradient_largest = 0, input_largest = 0;
    for (int64_t row = epilogue_first_row(split, splits, warp); present && row < p.rows;
         row += epilogue_row_stride(splits)) {
        const float sum = split_sum<kTiles>(partial, static_cast<int>(row), lane);
        const int64_t index = row * p.in_features + f;
        // A_prev where the derivative or its maximum needs it.
        const float input = p.relu_mask && !p.input_max_abs ? 0.0f : load_element(p.input, p.compute_dtype, index);
        float derivative;
        if (p.relu_mask) {
            const uint32_t word =
                static_cast<const uint32_t*>(p.relu_mask)[mask_bit(f0, row, relu_mask_ld_bits(p.in_features)) / 32];
            derivative = (word >> lane) & 1u ? 1.0f : 0.0f;
        } else {
            derivative = activation_derivative_from_output(p.input_activation, input);
        }
        const float gradient = __fmul_rn(sum, derivative);
        store_element(p.input_grad, p.input_grad_dtype, index, gradient);
        if (maxima) {
            gradient_largest = max(gradient_largest, magnitude_bits(round_to_device(p.input_grad_dtype, gradient)));
            input_largest = max(input_largest, magnitude_bits(input));  // (0 where not asked for)
        }
    }
    if (splits > 1) sync_split_blocks();  // the cluster's other blocks have read this one's sums
    if (maxima)
        write_gradient_and_input_maxima(launch.scratch, gradient_largest, input_largest, p.input_grad_max_abs,
                                        p.input_max_abs);
}

struct BackwardDataInstances {
    template <typename T, int kTiles>
    static auto get() {
        return small_batch_backward_data_kernel<T, kTiles>;
    }
};

int64_t feature_tiles(const DenseBackwardDataArgs& args) { return (args.in_features + kFeatures - 1) / kFeatures; }

}  // namespace

bool small_batch_backward_data_available() { return instances_run_on_current_device<BackwardDataInstances>(); }

bool small_batch_backward_data_applies(const DenseBackwardDataArgs& args) {
    return args.rows >= 1 && args.rows <= kMaxRows && args.in_features > 0 && args.out_features > 0 &&
           args.in_features % kElementsPerLoad == 0 && args.out_features % kElementsPerLoad == 0 &&
           feature_tiles(args) <= kMaxFeatureTiles &&
           (args.compute_dtype == DType::fp16 || args.compute_dtype == DType::bf16) &&
           args.input_activation != Activation::softmax;
}

small_batch_mma::SplitK small_batch_backward_data_split(const DenseBackwardDataArgs& args) {
    return instance_split<BackwardDataInstances>(args.compute_dtype, args.rows, args.out_features, feature_tiles(args));
}

void run_small_batch_backward_data(const DenseBackwardDataArgs& args, const small_batch_mma::SplitK& split,
                                   bool read_mask, bool take_maxima, const MaxAbsScratch& max_abs_scratch,
                                   cudaStream_t stream) {
    require(small_batch_backward_data_applies(args) &&
                (!read_mask || (args.input_activation == Activation::relu && args.relu_mask != nullptr)) &&
                split.splits >= 1 && split.splits <= kMaxSplits &&
                split_k_begin(split.splits - 1, split.k_per_block) < args.out_features &&
                split_k_begin(split.splits, split.k_per_block) >= args.out_features,
            MPT_STATUS_INTERNAL, "cuda backend: the small-batch backward-data kernel called outside its case");
    SmallBatchBackwardDataLaunch launch{args, max_abs_scratch};
    if (!read_mask) launch.data.relu_mask = nullptr;  // ReLU's derivative from A_prev
    if (!take_maxima) launch.data.input_grad_max_abs = launch.data.input_max_abs = nullptr;
    launch_small_batch<BackwardDataInstances>("small_batch_backward_data_kernel", args.compute_dtype, args.rows, split,
                                              feature_tiles(args), stream, launch);
}

}  // namespace mpt
