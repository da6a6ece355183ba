// See cuda_dense_forward.cuh. Row-major out[rows, N] = in[rows, K] · W[N, K]^T is, column-major,
// out^T[N, rows] = W^T · in^T with W stored as a [K, N] column-major matrix: A = W (transposed),
// B = input, m = N, n = rows, k = K. The bias runs along m, as cuBLASLt's bias epilogue wants.
// The fused ReLU mask is set from the fp32 sum before the output is rounded, where the CPU and the
// fallback take the derivative from the rounded output: they differ only where 0 < z < 2^-25
// rounds to an fp16 zero, whose gradient the GPU passes and the CPU drops (below every tolerance).
#include "backend/cuda/cuda_dense_forward.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_small_batch_forward.cuh"

namespace mpt {

namespace {

__global__ void forward_epilogue_kernel(const float* __restrict__ accumulator, const void* __restrict__ bias,
                                        DType bias_dtype, void* __restrict__ output, DType output_dtype,
                                        Activation activation, int64_t rows, int64_t columns, int64_t valid_columns) {
    start_after_preceding_kernel();
    const int64_t total = rows * columns;
    for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; index < total;
         index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t column = index % columns;
        float value = 0.0f;
        if (column < valid_columns)
            value = activation_forward(activation, __fadd_rn(accumulator[index], load_element(bias, bias_dtype, column)));
        store_element(output, output_dtype, index, value);
    }
}

void validate(const DenseForwardArgs& args) {
    require(args.rows > 0 && args.in_features > 0 && args.out_features > 0, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: dense_forward needs a non-empty problem");
    require_aligned16(args.input, "dense_forward input");
    require_aligned16(args.weights, "dense_forward weights");
    require_aligned16(args.bias, "dense_forward bias");
    require_aligned16(args.output, "dense_forward output");
    require_aligned16(args.relu_mask, "dense_forward relu_mask");
    require_workspace(args.workspace, "dense_forward");
    require(args.activation != Activation::softmax, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: dense_forward never applies softmax (the loss head does)");
}

GemmKey forward_key(const DenseForwardArgs& args, int32_t epilogue, DType output_dtype, const void* output,
                    const void* aux) {
    return make_gemm_key(epilogue, CUBLAS_OP_T, CUBLAS_OP_N, args.out_features, args.rows, args.in_features,
                         args.in_features, args.in_features, args.out_features, cuda_data_type(args.compute_dtype),
                         cuda_data_type(output_dtype), args.weights, args.input, output, args.bias, aux,
                         aux ? relu_mask_ld_bits(args.out_features) : 0, args.workspace);
}

}  // namespace

DenseForwardPlan plan_dense_forward(CudaGemm& gemm, const DenseForwardArgs& args, bool allow_fused, bool mask_wanted,
                                    bool small_batch) {
    validate(args);
    DenseForwardPlan plan;
    if (allow_fused && small_batch && small_batch_forward_applies(args)) {
        plan.fused = plan.small_batch = true;
        plan.writes_mask = args.activation == Activation::relu && args.relu_mask != nullptr && mask_wanted;
        plan.small_batch_split = small_batch_forward_split(args);
        return plan;
    }
    const bool fusable_dtypes = (args.output_dtype == args.compute_dtype || args.output_dtype == DType::fp32) &&
                                args.bias_dtype == args.output_dtype;
    const bool fusable_activation = args.activation == Activation::linear || args.activation == Activation::relu;
    const bool with_mask = args.activation == Activation::relu && args.relu_mask != nullptr && mask_wanted;
    const int32_t epilogue = args.activation == Activation::linear ? CUBLASLT_EPILOGUE_BIAS
                             : with_mask                           ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS
                                                                   : CUBLASLT_EPILOGUE_RELU_BIAS;
    // The fallback's scratch pointer is not known yet; assume the arena's 256-byte alignment.
    const GemmChoice choice =
        choose_gemm(gemm, allow_fused && fusable_dtypes && fusable_activation,
                    forward_key(args, epilogue, args.output_dtype, args.output, with_mask ? args.relu_mask : nullptr),
                    forward_key(args, CUBLASLT_EPILOGUE_DEFAULT, DType::fp32, nullptr, nullptr), "dense_forward",
                    args.compute_dtype);
    plan.gemm = choice.plan;
    plan.fused = choice.fused;
    plan.writes_mask = choice.fused && with_mask;
    if (!choice.fused) plan.scratch_bytes = static_cast<size_t>(args.rows * args.out_features) * sizeof(float);
    return plan;
}

void run_dense_forward(CudaGemm& gemm, const DenseForwardPlan& plan, const DenseForwardArgs& args, float* scratch,
                       cudaStream_t stream) {
    if (plan.small_batch) {
        run_small_batch_forward(args, plan.small_batch_split, plan.writes_mask, stream);
        return;
    }
    if (plan.fused) {
        gemm.run(*plan.gemm, args.weights, args.input, args.output, args.bias,
                 plan.writes_mask ? args.relu_mask : nullptr, args.workspace, stream);
        return;
    }
    gemm.run(*plan.gemm, args.weights, args.input, scratch, nullptr, nullptr, args.workspace, stream);
    const int64_t total = args.rows * args.out_features;
    launch_kernel("forward_epilogue_kernel", forward_epilogue_kernel, grid_for(total, 256, 4096), 256, 0, stream,
                  scratch, args.bias, args.bias_dtype, args.output, args.output_dtype, args.activation, args.rows,
                  args.out_features, args.valid_out);
}

}  // namespace mpt
