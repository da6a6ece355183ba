// See cuda_head_layer.cuh; how the work is shared out is head_layer_case.h. A block's phases, with
// the cluster's two barriers:
//  1. its share of every logit: a thread a 4 x 4 tile of the logits over a slice of the share, 16-byte
//     loads of A and W straight into registers (A was written just before, so from L2), the slices
//     added in shared memory in slice order;
//  2. (barrier) the logits, each block summing every block's share in block order, plus the bias;
//  3. the head on them (cuda_loss_head_rows.cuh, a warp a row), its logits gradient in the compute
//     dtype in shared memory, as the separate head writes it and the separate backward reads it;
//  4. its share of the input gradient: a thread 4 rows by 4 inputs, the sum over the layer's outputs
//     in order, times the derivative (the mask's bit or the output's), rounded once;
//  5. (barrier) block 0 writes the maxima its blocks found, where asked.
// The sums are deterministic; their order is not cuBLASLt's (nor the CPU's).
#include "backend/cuda/cuda_head_layer.cuh"

#include <cstdint>

#include "backend/cuda/cuda_cluster.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_loss_head_rows.cuh"
#include "backend/cuda/cuda_max_abs_cells.cuh"
#include "nn/activation.h"

namespace mpt {

namespace {

using namespace loss_head_rows;

constexpr int kWarps = kHeadLayerThreads / kWarpSize;
constexpr int kMaxLogits = kHeadLayerMaxRows * kHeadLayerMaxWidth;

struct HeadLayerLaunch {
    DenseForwardArgs forward;
    LossHeadArgs head;
    DenseBackwardDataArgs data;
    bool read_mask;
    bool write_maxima;
    bool starts_step;
};

// The 8 16-bit elements of a 16-byte chunk as floats (T: __half or __nv_bfloat16).
template <typename T>
__device__ __forceinline__ void chunk_values(const uint4& chunk, float (&values)[kHeadLayerElementsPerLoad]) {
    const uint32_t words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        values[2 * w] = bits_to_float<T>(static_cast<uint16_t>(words[w] & 0xffffu));
        values[2 * w + 1] = bits_to_float<T>(static_cast<uint16_t>(words[w] >> 16));
    }
}

// Phase 1: this block's share of every logit into `partial` ([rows][width]).
template <typename T>
__device__ void sum_logit_shares(const DenseForwardArgs& f, int64_t k_begin, int64_t k_end, float* slice_sums,
                                 float* partial) {
    const int rows = static_cast<int>(f.rows), width = static_cast<int>(f.out_features);
    const int64_t K = f.in_features;
    const HeadLayerForwardSplit split = head_layer_forward_split(rows, width);
    const int tiles = split.row_tiles * split.feature_tiles;
    const int thread = static_cast<int>(threadIdx.x);
    if (thread < tiles * split.slices) {
        const int tile = thread / split.slices, slice = thread % split.slices;
        const int r0 = tile / split.feature_tiles * kHeadLayerItemRows;
        const int f0 = tile % split.feature_tiles * kHeadLayerItemColumns;
        const uint16_t* input = static_cast<const uint16_t*>(f.input);
        const uint16_t* weights = static_cast<const uint16_t*>(f.weights);
        float sums[kHeadLayerItemRows][kHeadLayerItemColumns] = {};
        const int64_t slice_begin = k_begin + slice * split.slice_k;
        const int64_t slice_end = slice_begin + split.slice_k < k_end ? slice_begin + split.slice_k : k_end;
        for (int64_t k = slice_begin; k < slice_end; k += kHeadLayerElementsPerLoad) {
            uint4 a[kHeadLayerItemRows], w[kHeadLayerItemColumns];
#pragma unroll
            for (int i = 0; i < kHeadLayerItemRows; ++i)
                a[i] = r0 + i < rows ? __ldg(reinterpret_cast<const uint4*>(input + (r0 + i) * K + k))
                                     : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
            for (int j = 0; j < kHeadLayerItemColumns; ++j)
                w[j] = f0 + j < width ? __ldg(reinterpret_cast<const uint4*>(weights + (f0 + j) * K + k))
                                      : make_uint4(0u, 0u, 0u, 0u);
            float av[kHeadLayerItemRows][kHeadLayerElementsPerLoad],
                wv[kHeadLayerItemColumns][kHeadLayerElementsPerLoad];
#pragma unroll
            for (int i = 0; i < kHeadLayerItemRows; ++i) chunk_values<T>(a[i], av[i]);
#pragma unroll
            for (int j = 0; j < kHeadLayerItemColumns; ++j) chunk_values<T>(w[j], wv[j]);
#pragma unroll
            for (int e = 0; e < kHeadLayerElementsPerLoad; ++e)
#pragma unroll
                for (int i = 0; i < kHeadLayerItemRows; ++i)
#pragma unroll
                    for (int j = 0; j < kHeadLayerItemColumns; ++j) sums[i][j] = fmaf(av[i][e], wv[j][e], sums[i][j]);
        }
#pragma unroll
        for (int i = 0; i < kHeadLayerItemRows; ++i)
#pragma unroll
            for (int j = 0; j < kHeadLayerItemColumns; ++j)
                slice_sums[head_layer_slice_sum(tile, slice, split.slices, i, j)] = sums[i][j];
    }
    __syncthreads();
    // The slices in slice order, a thread a logit.
    for (int place = thread; place < rows * width; place += kHeadLayerThreads) {
        const int r = place / width, c = place % width;
        const int tile = r / kHeadLayerItemRows * split.feature_tiles + c / kHeadLayerItemColumns;
        const int i = r % kHeadLayerItemRows, j = c % kHeadLayerItemColumns;
        float sum = slice_sums[head_layer_slice_sum(tile, 0, split.slices, i, j)];
        for (int slice = 1; slice < split.slices; ++slice)
            sum += slice_sums[head_layer_slice_sum(tile, slice, split.slices, i, j)];
        partial[place] = sum;
    }
}

// Phase 4: this block's share of the input gradient from the logits gradient `gradient` ([rows][width]
// floats, each as its dtype stores it); the largest magnitudes (as bits) it writes and of the outputs
// it reads, where `maxima`.
template <typename T>
__device__ void input_gradient_share(const HeadLayerLaunch& p, int64_t k_begin, int64_t k_end, const float* gradient,
                                     unsigned& gradient_largest, unsigned& input_largest) {
    const DenseBackwardDataArgs& d = p.data;
    const int rows = static_cast<int>(d.rows), width = static_cast<int>(d.out_features);
    const int64_t K = d.in_features;
    const int64_t share = k_end - k_begin;
    const int64_t quads = head_layer_divide_up(share, kHeadLayerItemColumns);
    const int64_t items = head_layer_backward_items(rows, share);
    const uint16_t* weights = static_cast<const uint16_t*>(d.weights);
    const int64_t mask_ld = relu_mask_ld_bits(K);
    const bool input_read = !p.read_mask || (p.write_maxima && d.input_max_abs);  // the outputs, where needed
    for (int64_t item = threadIdx.x; item < items; item += kHeadLayerThreads) {
        const int r0 = static_cast<int>(item / quads) * kHeadLayerItemRows;
        const int64_t k = k_begin + item % quads * kHeadLayerItemColumns;  // K and the share: multiples of 8
        float sums[kHeadLayerItemRows][kHeadLayerItemColumns] = {};
        for (int c = 0; c < width; ++c) {
            const uint2 chunk = __ldg(reinterpret_cast<const uint2*>(weights + c * K + k));
            const float w[kHeadLayerItemColumns] = {bits_to_float<T>(static_cast<uint16_t>(chunk.x & 0xffffu)),
                                                    bits_to_float<T>(static_cast<uint16_t>(chunk.x >> 16)),
                                                    bits_to_float<T>(static_cast<uint16_t>(chunk.y & 0xffffu)),
                                                    bits_to_float<T>(static_cast<uint16_t>(chunk.y >> 16))};
#pragma unroll
            for (int i = 0; i < kHeadLayerItemRows; ++i) {
                const float g = r0 + i < rows ? gradient[(r0 + i) * width + c] : 0.0f;
#pragma unroll
                for (int j = 0; j < kHeadLayerItemColumns; ++j) sums[i][j] = fmaf(g, w[j], sums[i][j]);
            }
        }
#pragma unroll
        for (int i = 0; i < kHeadLayerItemRows; ++i) {
            const int r = r0 + i;
            if (r >= rows) break;
#pragma unroll
            for (int j = 0; j < kHeadLayerItemColumns; ++j) {
                const int64_t index = r * K + k + j;
                const float output = input_read ? load_element(d.input, d.compute_dtype, index) : 0.0f;
                // ReLU's derivative selects (+0 where a unit is off, as DRELU and the in-place kernel
                // leave it, whatever the sum: -0 or an overflowed fp16 gradient's NaN included); the
                // other activations' multiplies.
                float value;
                if (p.read_mask) {
                    const uint32_t word = static_cast<const uint32_t*>(d.relu_mask)[(r * mask_ld + k + j) / 32];
                    value = (word >> ((k + j) % 32)) & 1u ? sums[i][j] : 0.0f;
                } else if (d.input_activation == Activation::relu) {
                    value = output > 0.0f ? sums[i][j] : 0.0f;
                } else {
                    value = __fmul_rn(sums[i][j], activation_derivative_from_output(d.input_activation, output));
                }
                store_element(d.input_grad, d.input_grad_dtype, index, value);
                if (p.write_maxima) {
                    gradient_largest =
                        max(gradient_largest, magnitude_bits(round_to_device(d.input_grad_dtype, value)));
                    input_largest = max(input_largest, magnitude_bits(output));
                }
            }
        }
    }
}

template <typename T, HeadCase kind>
__global__ void __launch_bounds__(kHeadLayerThreads, 1) head_layer_kernel(const HeadLayerLaunch p) {
    start_after_preceding_kernel();
    __shared__ float slice_sums[kHeadLayerThreads * kHeadLayerItemSums];
    __shared__ float partial[kMaxLogits];  // this block's share of the logits, read by the cluster
    __shared__ float logits[kMaxLogits];   // the whole logits; then their gradient as floats
    __shared__ __align__(16) unsigned char gradient_bytes[kMaxLogits * sizeof(float)];  // the head's, in its dtype
    __shared__ double row_loss[kHeadLayerMaxRows];
    __shared__ long long row_correct[kHeadLayerMaxRows], row_counted[kHeadLayerMaxRows];
    __shared__ unsigned block_maxima[kHeadLayerMaxBlocks][2];  // block 0's: each block's, written by it

    const int block = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
    const int rows = static_cast<int>(p.head.rows), width = static_cast<int>(p.head.width);
    const int64_t K = p.forward.in_features;
    const int64_t k_begin = head_layer_share_begin(block), k_end = head_layer_share_end(block, K);
    const int thread = static_cast<int>(threadIdx.x);

    sum_logit_shares<T>(p.forward, k_begin, k_end, slice_sums, partial);
    sync_cluster_blocks();

    // 2. The logits, every block's shares in block order, the bias added (0 in the padded columns).
    const DenseForwardArgs& f = p.forward;
    for (int place = thread; place < rows * width; place += kHeadLayerThreads) {
        const int c = place % width;
        float z = cluster_block_shared(partial, 0)[place];
        for (int b = 1; b < blocks; ++b) z += cluster_block_shared(partial, b)[place];
        const float value = c < f.valid_out ? __fadd_rn(z, load_element(f.bias, f.bias_dtype, c)) : 0.0f;
        logits[place] = value;
        if (block == 0) static_cast<float*>(f.output)[place] = value;
    }
    __syncthreads();

    // 3. The head, a warp a row in every block (the same bits); block 0's sums and outputs are kept.
    LossHeadArgs head = p.head;
    head.logits = logits;
    head.logits_grad = gradient_bytes;
    head.logits_grad_max_abs = nullptr;  // taken below from the gradient block 0 writes
    const int lane = thread % kWarpSize;
    const int warp = __shfl_sync(kFullMask, thread / kWarpSize, 0);
    const float loss_scale = head.state ? head.state->loss_scale : 1.0f;
    const float gradient_factor = loss_scale / static_cast<float>(loss_mean_rows(head));
    for (int row = warp; row < rows; row += kWarps) {
        const RowResult result = head_row<kind, true>(head, row, lane, gradient_factor);
        if (lane == 0) {
            row_loss[row] = result.loss;
            row_correct[row] = result.correct;
            row_counted[row] = result.counted;
        }
    }
    __syncthreads();
    if (block == 0 && thread == 0) {
        // Row by row, as the separate head's one block adds its warps' (a warp a row) up to 32 rows
        // (past them its blocks' partials are added in another order: the last bits may differ).
        const HeadSums sums = add_head_partials(row_loss, row_correct, row_counted, rows);
        finish_head(p.head, p.starts_step, sums.loss, sums.correct, sums.counted);
    }
    const DType gradient_dtype = p.head.logits_grad_dtype;
    unsigned logits_gradient_largest = 0;  // block 0's, where the head's args ask for it
    for (int place = thread; place < rows * width; place += kHeadLayerThreads) {
        const float value = load_element(gradient_bytes, gradient_dtype, place);
        logits[place] = value;
        if (block == 0) {
            store_element(p.head.logits_grad, gradient_dtype, place, value);
            logits_gradient_largest = max(logits_gradient_largest, magnitude_bits(value));
        }
    }
    if (block == 0 && p.head.logits_grad_max_abs) {  // the same in every thread of the block
        const unsigned largest = block_largest_bits(logits_gradient_largest);
        if (thread == 0) *p.head.logits_grad_max_abs = __uint_as_float(largest);
    }
    __syncthreads();

    // 4. This block's share of the input gradient.
    unsigned gradient_largest = 0, input_largest = 0;
    input_gradient_share<T>(p, k_begin, k_end, logits, gradient_largest, input_largest);

    // 5. The maxima: each block's into block 0's shared memory, then block 0 writes them.
    if (p.write_maxima) {
        const unsigned gradient_block = block_largest_bits(gradient_largest);
        const unsigned input_block = block_largest_bits(input_largest);
        if (thread == 0) {
            unsigned* cell = cluster_block_shared(&block_maxima[block][0], 0);
            cell[0] = gradient_block;
            cell[1] = input_block;
        }
    }
    sync_cluster_blocks();  // also: no block leaves while another may still read its `partial`
    if (p.write_maxima && block == 0 && thread == 0) {
        unsigned gradient_all = 0, input_all = 0;
        for (int b = 0; b < blocks; ++b) {
            gradient_all = max(gradient_all, block_maxima[b][0]);
            input_all = max(input_all, block_maxima[b][1]);
        }
        if (p.data.input_grad_max_abs) *p.data.input_grad_max_abs = __uint_as_float(gradient_all);
        if (p.data.input_max_abs) *p.data.input_max_abs = __uint_as_float(input_all);
    }
}

template <typename T>
auto head_layer_instance(HeadCase kind) {
    switch (kind) {
        case HeadCase::logits_categorical:
            return head_layer_kernel<T, HeadCase::logits_categorical>;
        case HeadCase::probability_categorical:
            return head_layer_kernel<T, HeadCase::probability_categorical>;
        case HeadCase::sigmoid_binary:
            return head_layer_kernel<T, HeadCase::sigmoid_binary>;
        case HeadCase::probability_binary:
            return head_layer_kernel<T, HeadCase::probability_binary>;
        case HeadCase::regression:
            break;
    }
    return head_layer_kernel<T, HeadCase::regression>;
}

auto head_layer_instance(DType compute, HeadCase kind) {
    return compute == DType::bf16 ? head_layer_instance<__nv_bfloat16>(kind) : head_layer_instance<__half>(kind);
}

}  // namespace

int head_layer_cluster_capacity() {
    constexpr HeadCase kCases[] = {HeadCase::logits_categorical, HeadCase::probability_categorical,
                                   HeadCase::sigmoid_binary, HeadCase::probability_binary, HeadCase::regression};
    for (DType compute : {DType::bf16, DType::fp16})
        for (HeadCase kind : kCases) {
            const void* kernel = reinterpret_cast<const void*>(head_layer_instance(compute, kind));
            if (!cluster_launch_runs_on_current_device(kernel) ||
                !clusters_fit(kernel, kHeadLayerMaxBlocks, 1, kHeadLayerThreads))
                return 1;
        }
    return kHeadLayerMaxBlocks;
}

void run_head_layer(const DenseForwardArgs& forward, const LossHeadArgs& head, const DenseBackwardDataArgs& data,
                    bool read_mask, bool write_maxima, bool starts_step, cudaStream_t stream) {
    require(head_layer_shapes_fit(forward, head, data, kHeadLayerMaxBlocks) &&
                (!read_mask || (data.input_activation == Activation::relu && data.relu_mask != nullptr)) &&
                (!starts_step || head.state != nullptr),
            MPT_STATUS_INTERNAL, "cuda backend: the head layer's kernel called outside its case");
    require_aligned16(forward.input, "head layer input");
    require_aligned16(forward.weights, "head layer weights");
    const HeadLayerLaunch launch{forward, head, data, read_mask, write_maxima, starts_step};
    const int blocks = head_layer_blocks(forward.in_features);
    launch_kernel_in_clusters("head_layer_kernel", static_cast<unsigned>(blocks),
                              head_layer_instance(forward.compute_dtype, head_case(head)),
                              dim3(static_cast<unsigned>(blocks)), dim3(kHeadLayerThreads), 0, stream, launch);
}

}  // namespace mpt
