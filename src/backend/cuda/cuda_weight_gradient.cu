// See cuda_weight_gradient.cuh. Row-major dW[N, K] = dZ[rows, N]^T · A[rows, K] is,
// column-major, dW^T[K, N] = A^T · dZ with A stored as [K, rows] and dZ as [N, rows]:
// A-operand = input (not transposed), B-operand = dZ (transposed), m = K, n = N, k = rows. BGRADB
// sums op(B) over k, which is the column sum of dZ over the batch: the bias gradient, length N.
#include "backend/cuda/cuda_weight_gradient.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

constexpr int kColumnsPerBlock = 32;
constexpr int kRowSlices = 8;

// Column sums of dZ in fp32: 32 columns per block, 8 row slices per column summed in shared memory.
// `accumulate`: adds the sums to bias_grad's values.
__global__ void bias_grad_kernel(const void* __restrict__ output_grad, DType dtype, float* __restrict__ bias_grad,
                                 int64_t rows, int64_t columns, bool accumulate) {
    start_after_preceding_kernel();
    __shared__ float partial[kRowSlices][kColumnsPerBlock];
    const int64_t column = blockIdx.x * static_cast<int64_t>(kColumnsPerBlock) + threadIdx.x;
    float sum = 0.0f;
    if (column < columns)
        for (int64_t row = threadIdx.y; row < rows; row += kRowSlices)
            sum += load_element(output_grad, dtype, row * columns + column);
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && column < columns) {
        float total = 0.0f;
        for (int slice = 0; slice < kRowSlices; ++slice) total += partial[slice][threadIdx.x];
        bias_grad[column] = accumulate ? bias_grad[column] + total : total;
    }
}

void validate(const WeightGradientArgs& args) {
    require(args.rows > 0 && args.in_features > 0 && args.out_features > 0, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: dense_update needs a non-empty problem");
    require_aligned16(args.output_grad, "dense_update output_grad");
    require_aligned16(args.input, "dense_update input");
    require_aligned16(args.weight_grad, "dense_update weight_grad");
    require_aligned16(args.bias_grad, "dense_update bias_grad");
    require_workspace(args.workspace, "dense_update");
}

GemmKey backward_weights_key(const WeightGradientArgs& args, int32_t epilogue) {
    const bool bias = epilogue == CUBLASLT_EPILOGUE_BGRADB;
    return make_gemm_key(epilogue, CUBLAS_OP_N, CUBLAS_OP_T, args.in_features, args.out_features, args.rows,
                         args.in_features, args.out_features, args.in_features, cuda_data_type(args.compute_dtype),
                         CUDA_R_32F, args.input, args.output_grad, args.weight_grad, bias ? args.bias_grad : nullptr,
                         nullptr, 0, args.workspace);
}

}  // namespace

WeightGradientPlan plan_weight_gradient(CudaGemm& gemm, const WeightGradientArgs& args,
                                                     bool allow_fused) {
    validate(args);
    const GemmChoice choice = choose_gemm(gemm, allow_fused && !args.accumulate, backward_weights_key(args, CUBLASLT_EPILOGUE_BGRADB),
                                          backward_weights_key(args, CUBLASLT_EPILOGUE_DEFAULT), "the weight gradient",
                                          args.compute_dtype);
    WeightGradientPlan plan;
    plan.gemm = choice.plan;
    plan.fused = choice.fused;
    return plan;
}

void run_weight_gradient(CudaGemm& gemm, const WeightGradientPlan& plan,
                                const WeightGradientArgs& args, cudaStream_t stream) {
    gemm.run(*plan.gemm, args.input, args.output_grad, args.weight_grad, plan.fused ? args.bias_grad : nullptr,
             nullptr, args.workspace, stream, args.accumulate ? 1.0f : 0.0f);
    if (plan.fused) return;
    const dim3 block(kColumnsPerBlock, kRowSlices);
    const unsigned blocks = static_cast<unsigned>((args.out_features + kColumnsPerBlock - 1) / kColumnsPerBlock);
    launch_kernel("bias_grad_kernel", bias_grad_kernel, blocks, block, 0, stream, args.output_grad, args.compute_dtype,
                  args.bias_grad, args.rows, args.out_features, args.accumulate);
}

}  // namespace mpt
