// See cuda_fused_sgd.cuh. A block of 16 x 16 threads owns a 64 x 64 tile of the weights; thread
// (x, y) owns rows y + 16u and columns x + 16v (u, v < 4), so a warp's shared-memory reads are
// broadcasts or 16 consecutive words and its master accesses are 64-byte runs.
#include "backend/cuda/cuda_fused_sgd.cuh"

#include "backend/cuda/cuda_common.cuh"

namespace mpt {

namespace {

constexpr int kTile = 64;
constexpr int kSide = 16;  // threads per tile side
constexpr int kPerThread = kTile / kSide;

struct FusedSgdLaunch {
    const void* output_grad;  // dZ [rows, out]
    const void* input;        // A [rows, in]
    float* weights;
    float* bias;
    void* low_weights;
    void* low_bias;
    int64_t rows;
    int64_t in_features;
    int64_t out_features;
    DType dtype;
    OptimizerConfig optimizer;
    const TrainState* state;
};

__global__ void __launch_bounds__(kSide * kSide) fused_sgd_kernel(const FusedSgdLaunch p) {
    __shared__ float output_grad[kFusedSgdMaxRows][kTile];  // dZ[r][o0 + c]
    __shared__ float input[kFusedSgdMaxRows][kTile];        // A[r][i0 + c]
    const TrainState state = *p.state;
    if (state.found_inf) return;  // a skipped step: nothing is written
    // optimizer_step_scalars for plain SGD (the only optimizer here), without its Adam branch: that
    // branch's double pow() is a call that costs this kernel register spills.
    OptimizerStepScalars scalars;
    scalars.inverse_scale = 1.0f / state.loss_scale;
    scalars.learning_rate = scheduled_learning_rate(p.optimizer, state.steps);
    scalars.step_size = scalars.learning_rate;
    scalars.epsilon_hat = p.optimizer.epsilon;

    const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kTile;
    const int64_t o0 = static_cast<int64_t>(blockIdx.y) * kTile;
    const int rows = static_cast<int>(p.rows);
    // The 16 masters this thread updates, loaded first: the loads are in flight, all at once, while
    // the tiles fill and the gradient is summed (after the stores below nothing reads them again).
    float master[kPerThread][kPerThread];
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
        const int64_t o = o0 + threadIdx.y + kSide * u;
#pragma unroll
        for (int v = 0; v < kPerThread; ++v) {
            const int64_t i = i0 + threadIdx.x + kSide * v;
            master[u][v] = o < p.out_features && i < p.in_features ? p.weights[o * p.in_features + i] : 0.0f;
        }
    }
    const int thread = threadIdx.y * kSide + threadIdx.x;
    for (int k = thread; k < rows * kTile; k += kSide * kSide) {
        const int r = k / kTile, c = k % kTile;
        const int64_t o = o0 + c, i = i0 + c;
        output_grad[r][c] = o < p.out_features ? load_element(p.output_grad, p.dtype, r * p.out_features + o) : 0.0f;
        input[r][c] = i < p.in_features ? load_element(p.input, p.dtype, r * p.in_features + i) : 0.0f;
    }
    __syncthreads();

    float gradient[kPerThread][kPerThread] = {};
    for (int r = 0; r < rows; ++r) {
        float dz[kPerThread], a[kPerThread];
#pragma unroll
        for (int u = 0; u < kPerThread; ++u) {
            dz[u] = output_grad[r][threadIdx.y + kSide * u];
            a[u] = input[r][threadIdx.x + kSide * u];
        }
#pragma unroll
        for (int u = 0; u < kPerThread; ++u)
#pragma unroll
            for (int v = 0; v < kPerThread; ++v) gradient[u][v] = fmaf(dz[u], a[v], gradient[u][v]);
    }

    float unused1 = 0.0f, unused2 = 0.0f, unused3 = 0.0f;  // plain SGD keeps no state
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
        const int64_t o = o0 + threadIdx.y + kSide * u;
        if (o >= p.out_features) continue;
#pragma unroll
        for (int v = 0; v < kPerThread; ++v) {
            const int64_t i = i0 + threadIdx.x + kSide * v;
            if (i >= p.in_features) continue;
            const int64_t index = o * p.in_features + i;
            const float weight =
                optimizer_update_element(p.optimizer, scalars, master[u][v], gradient[u][v], unused1, unused2, unused3);
            p.weights[index] = weight;
            if (p.low_weights) store_element(p.low_weights, p.dtype, index, weight);
        }
    }

    // The bias gradient is the column sum of dZ: the first tile column owns it.
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        for (int u = 0; u < kPerThread; ++u) {
            const int64_t o = o0 + threadIdx.y + kSide * u;
            if (o >= p.out_features) continue;
            float sum = 0.0f;
            for (int r = 0; r < rows; ++r) sum += output_grad[r][threadIdx.y + kSide * u];
            const float bias = optimizer_update_element(p.optimizer, scalars, p.bias[o], sum, unused1, unused2, unused3);
            p.bias[o] = bias;
            if (p.low_bias) store_element(p.low_bias, p.dtype, o, bias);
        }
    }
}

}  // namespace

void run_fused_sgd(const DenseUpdateArgs& args, const OptimizerConfig& optimizer, cudaStream_t stream) {
    require(fused_sgd_applies(args, optimizer), MPT_STATUS_INTERNAL, "cuda backend: fused SGD called outside its case");
    FusedSgdLaunch launch{};
    launch.output_grad = args.output_grad;
    launch.input = args.input;
    launch.weights = args.weights;
    launch.bias = args.bias;
    launch.low_weights = args.low_weights;
    launch.low_bias = args.low_bias;
    launch.rows = args.rows;
    launch.in_features = args.in_features;
    launch.out_features = args.out_features;
    launch.dtype = args.compute_dtype;
    launch.optimizer = optimizer;
    launch.state = args.state;
    const int64_t column_tiles = (args.in_features + kTile - 1) / kTile;
    const int64_t row_tiles = (args.out_features + kTile - 1) / kTile;
    require(row_tiles <= 65535, MPT_STATUS_UNSUPPORTED, "cuda backend: a layer of more than 4,194,240 units");
    const dim3 grid(static_cast<unsigned>(column_tiles), static_cast<unsigned>(row_tiles));
    fused_sgd_kernel<<<grid, dim3(kSide, kSide), 0, stream>>>(launch);
    MPT_CUDA_CHECK_LAUNCH("fused_sgd_kernel");
}

}  // namespace mpt
