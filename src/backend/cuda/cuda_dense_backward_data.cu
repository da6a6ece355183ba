// See cuda_dense_backward_data.cuh. Row-major dZ_prev[rows, K] = dZ[rows, N] · W[N, K] is,
// column-major, dZ_prev^T[K, rows] = W^T · dZ^T where W stored row-major [N, K] is column-major
// [K, N]: A = W (not transposed), B = dZ (not transposed), m = K, n = rows, k = N. The ReLU mask
// of the previous layer's forward has exactly this [K, rows] shape.
#include "backend/cuda/cuda_dense_backward_data.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

__global__ void backward_data_epilogue_kernel(const float* __restrict__ accumulator, const void* __restrict__ input,
                                              DType input_dtype, Activation activation, void* __restrict__ output,
                                              DType output_dtype, int64_t total) {
    start_after_preceding_kernel();
    for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; index < total;
         index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float derivative = activation_derivative_from_output(activation, load_element(input, input_dtype, index));
        store_element(output, output_dtype, index, __fmul_rn(accumulator[index], derivative));
    }
}

void validate(const DenseBackwardDataArgs& args) {
    require(args.rows > 0 && args.in_features > 0 && args.out_features > 0, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: dense_backward_data needs a non-empty problem");
    require_aligned16(args.output_grad, "dense_backward_data output_grad");
    require_aligned16(args.weights, "dense_backward_data weights");
    require_aligned16(args.input, "dense_backward_data input");
    require_aligned16(args.relu_mask, "dense_backward_data relu_mask");
    require_aligned16(args.input_grad, "dense_backward_data input_grad");
    require_workspace(args.workspace, "dense_backward_data");
    require(args.input_activation != Activation::softmax, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: softmax is only allowed on the last layer");
}

GemmKey backward_data_key(const DenseBackwardDataArgs& args, int32_t epilogue, DType output_dtype, const void* output,
                          const void* aux) {
    return make_gemm_key(epilogue, CUBLAS_OP_N, CUBLAS_OP_N, args.in_features, args.rows, args.out_features,
                         args.in_features, args.out_features, args.in_features, cuda_data_type(args.compute_dtype),
                         cuda_data_type(output_dtype), args.weights, args.output_grad, output, nullptr, aux,
                         aux ? relu_mask_ld_bits(args.in_features) : 0, args.workspace);
}

}  // namespace

DenseBackwardDataPlan plan_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataArgs& args, bool mask_valid,
                                               bool allow_fused) {
    validate(args);
    DenseBackwardDataPlan plan;
    const bool fusable_dtypes = args.input_grad_dtype == args.compute_dtype || args.input_grad_dtype == DType::fp32;
    const bool linear = args.input_activation == Activation::linear;
    const bool masked_relu = args.input_activation == Activation::relu && args.relu_mask && mask_valid;
    const GemmChoice choice =
        choose_gemm(gemm, allow_fused && fusable_dtypes && (linear || masked_relu),
                    backward_data_key(args, linear ? CUBLASLT_EPILOGUE_DEFAULT : CUBLASLT_EPILOGUE_DRELU,
                                      args.input_grad_dtype, args.input_grad, linear ? nullptr : args.relu_mask),
                    backward_data_key(args, CUBLASLT_EPILOGUE_DEFAULT, DType::fp32, nullptr, nullptr),
                    "dense_backward_data", args.compute_dtype);
    plan.gemm = choice.plan;
    plan.fused = choice.fused;
    plan.reads_mask = choice.fused && !linear;
    if (!choice.fused) plan.scratch_bytes = static_cast<size_t>(args.rows * args.in_features) * sizeof(float);
    return plan;
}

void run_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataPlan& plan, const DenseBackwardDataArgs& args,
                             float* scratch, cudaStream_t stream) {
    if (plan.fused) {
        gemm.run(*plan.gemm, args.weights, args.output_grad, args.input_grad, nullptr,
                 plan.reads_mask ? args.relu_mask : nullptr, args.workspace, stream);
        return;
    }
    gemm.run(*plan.gemm, args.weights, args.output_grad, scratch, nullptr, nullptr, args.workspace, stream);
    const int64_t total = args.rows * args.in_features;
    launch_kernel("backward_data_epilogue_kernel", backward_data_epilogue_kernel, grid_for(total, 256, 4096), 256, 0,
                  stream, scratch, args.input, args.compute_dtype, args.input_activation, args.input_grad,
                  args.input_grad_dtype, total);
}

}  // namespace mpt
