// See cuda_small_batch_backward_data.cuh; where each lane loads its operands and finds its sums is
// small_batch_backward_data_layout.h. The loop is the small-batch forward's with W's 16-byte
// chunk replaced by 8 rows of 8 bytes: a step of the block reads 256 consecutive rows of W (the
// layer's output features), 64 bytes of each per 8 lanes. Unmeasured: no GPU has run it yet.
#include "backend/cuda/cuda_small_batch_backward_data.cuh"

#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_small_batch_mma.cuh"
#include "backend/cuda/small_batch_backward_data_layout.h"
#include "nn/activation.h"

namespace mpt {

namespace {

using namespace small_batch_forward;

struct SmallBatchBackwardDataLaunch {
    const uint16_t* output_grad;  // dZ [rows, out_features]
    const uint16_t* weights;      // W [out_features, in_features]
    const void* input;            // A_prev [rows, in_features], compute dtype
    const uint32_t* mask;         // cuBLASLt's ReLU bit mask of A_prev, or null
    void* input_grad;             // [rows, in_features], input_grad_dtype
    int64_t rows, in_features, out_features, mask_ld_bits;
    Activation input_activation;
    DType compute_dtype, input_grad_dtype;
};

// Rows of W a lane loads per step (its chunk of dZ's 8 output features).
constexpr int kRowsPerStep = kElementsPerLoad;

// T: the 16-bit compute type. kTiles: 8-row mma tiles of the batch (1, 2, 4 or 8).
template <typename T, int kTiles>
__global__ void __launch_bounds__(kThreads, 1) small_batch_backward_data_kernel(const SmallBatchBackwardDataLaunch p) {
    constexpr int kSteps = kStepsInFlight<kTiles>;
    __shared__ float partial[kSlots * 8 * kTiles * kFeatures];

    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int64_t f0 = static_cast<int64_t>(blockIdx.x) * kFeatures;
    const int64_t O = p.out_features;

    // The lane's 4 features of every row of W: whole or past the layer (in_features is a multiple of 8).
    const int64_t w_column = f0 + w_feature0(lane);
    const bool w_present = w_column < p.in_features;
    const uint16_t* w_base = p.weights + (w_present ? w_column : 0);
    const uint16_t* dz_row[kTiles];
    bool dz_present[kTiles];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
        const int r = b_row(lane, j);
        dz_present[j] = r < p.rows;
        dz_row[j] = p.output_grad + (dz_present[j] ? r : 0) * O;
    }

    float sums[kMmaRows][kTiles][4] = {};
    const int64_t steps = (O + kBlockStepK - 1) / kBlockStepK;
    for (int64_t step0 = 0; step0 < steps; step0 += kSteps) {
        uint2 w[kSteps][kRowsPerStep];
        uint4 dz[kSteps][kTiles];
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            const int64_t o = chunk_k(step0 + s, warp, lane);
            const bool in_o = o < O;  // O is a multiple of 8: the lane's 8 rows are all there or none
#pragma unroll
            for (int u = 0; u < kRowsPerStep; ++u)
                w[s][u] = load_half_chunk(w_base + (in_o ? o + u : 0) * p.in_features, 0, in_o && w_present);
#pragma unroll
            for (int j = 0; j < kTiles; ++j) dz[s][j] = load_chunk(dz_row[j], o, in_o && dz_present[j]);
        }
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int m = 0; m < kMmaRows; ++m) {
                    uint32_t a_fragment[4];
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        // Row u's and row u + 1's element of the register's feature.
                        const int u = dgrad_row(h, r);
                        const uint32_t first = dgrad_word(m) == 0 ? w[s][u].x : w[s][u].y;
                        const uint32_t second = dgrad_word(m) == 0 ? w[s][u + 1].x : w[s][u + 1].y;
                        a_fragment[r] = __byte_perm(first, second, dgrad_selector(r));
                    }
#pragma unroll
                    for (int j = 0; j < kTiles; ++j) {
                        const uint32_t b_fragment[2] = {chunk_word(dz[s][j], b_word(h, 0)),
                                                        chunk_word(dz[s][j], b_word(h, 1))};
                        mma_16x8x16<T>(sums[m][j], a_fragment, b_fragment);
                    }
                }
    }
    add_warp_sums<kTiles>(partial, sums, warp, lane,
                          [](int l, int m, int c) { return dgrad_accumulator_feature(l, m, c); });

    const int64_t f = f0 + lane;
    if (f >= p.in_features) return;  // no __syncthreads or ballot below
    for (int64_t row = warp; row < p.rows; row += kWarps) {
        const float sum = block_sum<kTiles>(partial, static_cast<int>(row), lane);
        const int64_t index = row * p.in_features + f;
        float derivative;
        if (p.mask) {
            derivative = (p.mask[mask_bit(f0, row, p.mask_ld_bits) / 32] >> lane) & 1u ? 1.0f : 0.0f;
        } else {
            derivative = activation_derivative_from_output(p.input_activation,
                                                           load_element(p.input, p.compute_dtype, index));
        }
        store_element(p.input_grad, p.input_grad_dtype, index, __fmul_rn(sum, derivative));
    }
}

using SmallBatchBackwardDataKernel = void (*)(SmallBatchBackwardDataLaunch);

template <typename T>
SmallBatchBackwardDataKernel kernel_for_tiles(int tiles) {
    switch (tiles) {
        case 1: return small_batch_backward_data_kernel<T, 1>;
        case 2: return small_batch_backward_data_kernel<T, 2>;
        case 4: return small_batch_backward_data_kernel<T, 4>;
        default: return small_batch_backward_data_kernel<T, 8>;
    }
}

}  // namespace

bool small_batch_backward_data_available() {
    return mma_runs_on_current_device(
        reinterpret_cast<const void*>(small_batch_backward_data_kernel<__nv_bfloat16, 4>));
}

bool small_batch_backward_data_applies(const DenseBackwardDataArgs& args) {
    return args.rows >= 1 && args.rows <= kMaxRows && args.in_features > 0 && args.out_features > 0 &&
           args.in_features % kElementsPerLoad == 0 && args.out_features % kElementsPerLoad == 0 &&
           (args.compute_dtype == DType::fp16 || args.compute_dtype == DType::bf16) &&
           args.input_activation != Activation::softmax;
}

void run_small_batch_backward_data(const DenseBackwardDataArgs& args, bool read_mask, cudaStream_t stream) {
    require(small_batch_backward_data_applies(args) &&
                (!read_mask || (args.input_activation == Activation::relu && args.relu_mask != nullptr)),
            MPT_STATUS_INTERNAL, "cuda backend: the small-batch backward-data kernel called outside its case");
    SmallBatchBackwardDataLaunch launch{};
    launch.output_grad = static_cast<const uint16_t*>(args.output_grad);
    launch.weights = static_cast<const uint16_t*>(args.weights);
    launch.input = args.input;
    launch.mask = read_mask ? static_cast<const uint32_t*>(args.relu_mask) : nullptr;
    launch.input_grad = args.input_grad;
    launch.rows = args.rows;
    launch.in_features = args.in_features;
    launch.out_features = args.out_features;
    launch.mask_ld_bits = relu_mask_ld_bits(args.in_features);
    launch.input_activation = args.input_activation;
    launch.compute_dtype = args.compute_dtype;
    launch.input_grad_dtype = args.input_grad_dtype;
    const int rows = static_cast<int>(args.rows);
    const int tiles = rows <= 8 ? 1 : rows <= 16 ? 2 : rows <= 32 ? 4 : 8;
    const SmallBatchBackwardDataKernel kernel = args.compute_dtype == DType::bf16
                                                    ? kernel_for_tiles<__nv_bfloat16>(tiles)
                                                    : kernel_for_tiles<__half>(tiles);
    const unsigned blocks = static_cast<unsigned>((args.in_features + kFeatures - 1) / kFeatures);
    kernel<<<blocks, kThreads, 0, stream>>>(launch);
    MPT_CUDA_CHECK_LAUNCH("small_batch_backward_data_kernel");
}

}  // namespace mpt
