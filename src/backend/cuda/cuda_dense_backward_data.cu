// See cuda_dense_backward_data.cuh. Row-major dZ_prev[rows, K] = dZ[rows, N] · W[N, K] is,
// column-major, dZ_prev^T[K, rows] = W^T · dZ^T where W stored row-major [N, K] is column-major
// [K, N]: A = W (not transposed), B = dZ (not transposed), m = K, n = rows, k = N. The ReLU mask
// of the previous layer's forward has exactly this [K, rows] shape.
#include "backend/cuda/cuda_dense_backward_data.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_max_abs_cells.cuh"
#include "backend/cuda/cuda_small_batch_backward_data.cuh"

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

// ReLU's derivative from its output y applied to a gradient g already rounded to T: g where y > 0,
// else +0. A product with 1 is exact, so rounding first changes no bit of the live units' gradients
// (an fp16 one that overflows is Inf either way). The dead units' are +0 as the DRELU epilogue
// leaves them, where the CPU's product of the fp32 sum with 0 gives -0 for a negative sum and NaN
// for a non-finite one (non-finite dZ or W, which the step's finiteness check catches in dZ_prev's
// other units or in dZ itself): the same values to every tolerance, and no test data is non-finite.
// y > 0 from its bits: sign clear, not zero, at most +Inf's bits (a NaN's lie above).
template <typename T>
constexpr uint32_t kInfinityBits = std::is_same_v<T, float>    ? 0x7f800000u
                                   : std::is_same_v<T, __half> ? 0x7c00u
                                                               : 0x7f80u;
template <typename T>
__device__ __forceinline__ bool above_zero(uint32_t bits) {
    return bits != 0 && bits <= kInfinityBits<T>;
}
// A word of g and the same word of y: one float, or two 16-bit elements.
template <typename T>
__device__ __forceinline__ uint32_t relu_backward_word(uint32_t gradient, uint32_t output) {
    if constexpr (sizeof(T) == 4) {
        return above_zero<T>(output) ? gradient : 0u;
    } else {
        return (above_zero<T>(output & 0xffffu) ? gradient & 0xffffu : 0u) |
               (above_zero<T>(output >> 16) ? gradient & 0xffff0000u : 0u);
    }
}
template <typename T>
__device__ __forceinline__ uint32_t bits_of(T value) {
    if constexpr (sizeof(T) == 4) {
        return __float_as_uint(value);
    } else {
        return *reinterpret_cast<const uint16_t*>(&value);
    }
}

// Where the relu_from_output kernel also takes max |x| of the gradient it leaves and of the output
// (as max_abs would: DenseBackwardDataArgs' input_grad_max_abs and input_max_abs), each may be null.
struct ReluMaxAbs {
    float* gradient = nullptr;
    float* output = nullptr;
    MaxAbsScratch scratch{};  // cells 0 and 1 and the ticket (cuda_max_abs_cells.cuh)
};

// T's dtype, for vector_max (cuda_max_abs_cells.cuh).
template <typename T>
constexpr DType kDTypeOf = std::is_same_v<T, float>    ? DType::fp32
                           : std::is_same_v<T, __half> ? DType::fp16
                                                       : DType::bf16;

// `gradient` and `output` 16-byte aligned (validate): 16 bytes a thread at a time, then the last
// count % (16 / sizeof(T)) elements one by one. kMaxima: also the maxima `maxima` asks for, each
// block's raised into scratch cells 0 (gradient) and 1 (output), written by the last block.
template <typename T, bool kMaxima>
__global__ void __launch_bounds__(256)
    relu_backward_in_place_kernel(T* __restrict__ gradient, const T* __restrict__ output, int64_t count,
                                  const ReluMaxAbs maxima) {
    start_after_preceding_kernel();
    constexpr int64_t kPerVector = 16 / sizeof(T);
    const int64_t vectors = count / kPerVector;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    uint4* gradient_vectors = reinterpret_cast<uint4*>(gradient);
    const uint4* output_vectors = reinterpret_cast<const uint4*>(output);
    unsigned gradient_largest = 0, output_largest = 0;
    for (int64_t v = first; v < vectors; v += stride) {
        const uint4 g = gradient_vectors[v], y = output_vectors[v];
        const uint4 kept = make_uint4(relu_backward_word<T>(g.x, y.x), relu_backward_word<T>(g.y, y.y),
                                      relu_backward_word<T>(g.z, y.z), relu_backward_word<T>(g.w, y.w));
        gradient_vectors[v] = kept;
        if constexpr (kMaxima) {
            gradient_largest = max(gradient_largest, vector_max<kPerVector>(kept, kDTypeOf<T>));
            output_largest = max(output_largest, vector_max<kPerVector>(y, kDTypeOf<T>));
        }
    }
    for (int64_t i = vectors * kPerVector + first; i < count; i += stride) {
        const bool kept = above_zero<T>(bits_of(output[i]));
        if (!kept) gradient[i] = from_float<T>(0.0f);
        if constexpr (kMaxima) {
            gradient_largest = max(gradient_largest, kept ? magnitude_bits(to_float(gradient[i])) : 0u);
            output_largest = max(output_largest, magnitude_bits(to_float(output[i])));
        }
    }
    if constexpr (kMaxima)
        write_gradient_and_input_maxima(maxima.scratch, gradient_largest, output_largest, maxima.gradient,
                                        maxima.output);
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

namespace {

template <typename T>
void launch_relu_backward_in_place(void* gradient, const void* output, int64_t count, const ReluMaxAbs& maxima,
                                   cudaStream_t stream) {
    // Taking maxima: at most the max pass's blocks (8 an SM), each one atomic a cell.
    const bool takes_maxima = maxima.gradient || maxima.output;
    const auto kernel = takes_maxima ? relu_backward_in_place_kernel<T, true> : relu_backward_in_place_kernel<T, false>;
    const unsigned cap = takes_maxima && maxima.scratch.max_blocks < 4096 ? maxima.scratch.max_blocks : 4096;
    launch_kernel("relu_backward_in_place_kernel", kernel, grid_for(count / 8 + 1, 256, cap), 256, 0, stream,
                  static_cast<T*>(gradient), static_cast<const T*>(output), count, maxima);
}

void run_relu_backward_in_place(void* gradient, const void* output, DType dtype, int64_t count,
                                const ReluMaxAbs& maxima, cudaStream_t stream) {
    require_aligned16(gradient, "relu_backward_in_place gradient");
    require_aligned16(output, "relu_backward_in_place output");
    if (count <= 0) {
        // Nothing to read: the maxima of empty arrays, as max_abs gives them.
        require(!maxima.gradient && !maxima.output, MPT_STATUS_INTERNAL,
                "cuda backend: the maxima of an empty ReLU backward");
        return;
    }
    switch (dtype) {
        case DType::fp32:
            return launch_relu_backward_in_place<float>(gradient, output, count, maxima, stream);
        case DType::fp16:
            return launch_relu_backward_in_place<__half>(gradient, output, count, maxima, stream);
        case DType::bf16:
            return launch_relu_backward_in_place<__nv_bfloat16>(gradient, output, count, maxima, stream);
    }
}

}  // namespace

void run_relu_backward_in_place(void* gradient, const void* output, DType dtype, int64_t count, cudaStream_t stream) {
    run_relu_backward_in_place(gradient, output, dtype, count, ReluMaxAbs{}, stream);
}

void run_relu_backward_in_place(void* gradient, const void* output, DType dtype, int64_t count, float* gradient_max_abs,
                                float* output_max_abs, const MaxAbsScratch& scratch, cudaStream_t stream) {
    run_relu_backward_in_place(gradient, output, dtype, count, ReluMaxAbs{gradient_max_abs, output_max_abs, scratch},
                               stream);
}

DenseBackwardDataPlan plan_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataArgs& args, bool mask_valid,
                                               bool allow_fused, bool small_batch) {
    validate(args);
    DenseBackwardDataPlan plan;
    const bool fusable_dtypes = args.input_grad_dtype == args.compute_dtype || args.input_grad_dtype == DType::fp32;
    const bool linear = args.input_activation == Activation::linear;
    const bool relu = args.input_activation == Activation::relu;
    const bool masked_relu = relu && args.relu_mask && mask_valid;
    if (allow_fused && small_batch && small_batch_backward_data_applies(args)) {
        plan.fused = plan.small_batch = true;
        plan.reads_mask = masked_relu;  // otherwise ReLU's derivative from A_prev, as the fallback's
        plan.small_batch_split = small_batch_backward_data_split(args);
        plan.writes_max_abs = args.input_grad_max_abs || args.input_max_abs;
        return plan;
    }
    // Without the mask, the in-place kernel reads A_prev and writes dZ_prev as elements of one type.
    const bool relu_from_output = relu && !masked_relu && args.input_grad_dtype == args.compute_dtype;
    const GemmChoice choice =
        choose_gemm(gemm, allow_fused && fusable_dtypes && (linear || masked_relu || relu_from_output),
                    backward_data_key(args, masked_relu ? CUBLASLT_EPILOGUE_DRELU : CUBLASLT_EPILOGUE_DEFAULT,
                                      args.input_grad_dtype, args.input_grad, masked_relu ? args.relu_mask : nullptr),
                    backward_data_key(args, CUBLASLT_EPILOGUE_DEFAULT, DType::fp32, nullptr, nullptr),
                    "dense_backward_data", args.compute_dtype);
    plan.gemm = choice.plan;
    plan.fused = choice.fused;
    plan.reads_mask = choice.fused && masked_relu;
    plan.relu_from_output = choice.fused && relu_from_output;
    plan.writes_max_abs = plan.relu_from_output && (args.input_grad_max_abs || args.input_max_abs);
    if (!choice.fused) plan.scratch_bytes = static_cast<size_t>(args.rows * args.in_features) * sizeof(float);
    return plan;
}

void run_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataPlan& plan, const DenseBackwardDataArgs& args,
                             float* scratch, const MaxAbsScratch& max_abs_scratch, cudaStream_t stream) {
    if (plan.small_batch) {
        run_small_batch_backward_data(args, plan.small_batch_split, plan.reads_mask, plan.writes_max_abs,
                                      max_abs_scratch, stream);
        return;
    }
    if (plan.fused) {
        gemm.run(*plan.gemm, args.weights, args.output_grad, args.input_grad, nullptr,
                 plan.reads_mask ? args.relu_mask : nullptr, args.workspace, stream);
        if (plan.relu_from_output)
            run_relu_backward_in_place(args.input_grad, args.input, args.compute_dtype, args.rows * args.in_features,
                                       plan.writes_max_abs ? args.input_grad_max_abs : nullptr,
                                       plan.writes_max_abs ? args.input_max_abs : nullptr, max_abs_scratch, stream);
        return;
    }
    gemm.run(*plan.gemm, args.weights, args.output_grad, scratch, nullptr, nullptr, args.workspace, stream);
    const int64_t total = args.rows * args.in_features;
    launch_kernel("backward_data_epilogue_kernel", backward_data_epilogue_kernel, grid_for(total, 256, 4096), 256, 0,
                  stream, scratch, args.input, args.compute_dtype, args.input_activation, args.input_grad,
                  args.input_grad_dtype, total);
}

}  // namespace mpt
