// See cuda_weight_gradient.cuh. Row-major dW[N, K] = dZ[rows, N]^T · A[rows, K] is,
// column-major, dW^T[K, N] = A^T · dZ with A stored as [K, rows] and dZ as [N, rows]:
// A-operand = input (not transposed), B-operand = dZ (transposed), m = K, n = N, k = rows. BGRADB
// sums op(B) over k, which is the column sum of dZ over the batch: the bias gradient, length N.
#include "backend/cuda/cuda_weight_gradient.cuh"

#include "backend/cuda/cuda_bias_gradient.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace mpt {

namespace {

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

WeightGradientPlan plan_weight_gradient(CudaGemm& gemm, const WeightGradientArgs& args, bool allow_fused) {
    validate(args);
    const bool fusable = allow_fused && !args.accumulate;
    const GemmChoice choice =
        choose_gemm(gemm, fusable, backward_weights_key(args, CUBLASLT_EPILOGUE_BGRADB),
                    backward_weights_key(args, CUBLASLT_EPILOGUE_DEFAULT), "the weight gradient", args.compute_dtype);
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
    BiasGradientArgs bias;
    bias.output_grad = args.output_grad;
    bias.dtype = args.compute_dtype;
    bias.bias_grad = args.bias_grad;
    bias.rows = args.rows;
    bias.columns = args.out_features;
    bias.accumulate = args.accumulate;
    run_bias_gradient(bias, stream);
}

}  // namespace mpt
