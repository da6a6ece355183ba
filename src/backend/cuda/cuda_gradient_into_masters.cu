// See cuda_gradient_into_masters.cuh. The GEMM is the weight gradient's (cuda_weight_gradient.cu):
// row-major dW[N, K] = dZ[rows, N]^T · A[rows, K] is column-major dW^T[K, N] = A^T · dZ, with A the
// A-operand (not transposed) and dZ the B-operand (transposed); D is the masters themselves, and C
// the same memory with the same layout (cuBLASLt computes in place when C == D).
#include "backend/cuda/cuda_gradient_into_masters.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_bias_gradient.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

constexpr int kThreads = 256;

struct StartLaunch {
    const TrainState* state;
    OptimizerConfig optimizer;
    float* scalars;     // alpha, beta
    void* output_grad;  // dZ, zeroed on a skipped step
    void* input;        // A_prev, its non-finite values zeroed on a skipped step
    int64_t output_grad_elements;
    int64_t input_elements;
    DType dtype;
};

// Whether the element `index` of `values` (in `dtype`) is inf or NaN, from its bits.
__device__ __forceinline__ bool non_finite(const void* values, DType dtype, int64_t index) {
    switch (dtype) {
        case DType::fp16:
            return (static_cast<const uint16_t*>(values)[index] & 0x7fffu) >= 0x7c00u;
        case DType::bf16:
            return (static_cast<const uint16_t*>(values)[index] & 0x7fffu) >= 0x7f80u;
        case DType::fp32:
            break;
    }
    return (static_cast<const uint32_t*>(values)[index] & 0x7fffffffu) >= 0x7f800000u;
}

__device__ __forceinline__ void store_zero(void* values, DType dtype, int64_t index) {
    if (dtype == DType::fp32)
        static_cast<uint32_t*>(values)[index] = 0u;
    else
        static_cast<uint16_t*>(values)[index] = 0u;
}

__global__ void __launch_bounds__(kThreads) gradient_into_masters_start_kernel(const StartLaunch p) {
    start_after_preceding_kernel();
    const TrainState state = *p.state;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        if (state.found_inf) {
            p.scalars[0] = -0.0f;  // adds -0 to each master: every value stays (see the header)
            p.scalars[1] = 1.0f;
        } else {
            const OptimizerStepScalars scalars = plain_step_scalars(p.optimizer, state.loss_scale, state.steps);
            // In the CPU backend's order: -rate * (1 / scale).
            p.scalars[0] = -scalars.learning_rate * scalars.inverse_scale;
            p.scalars[1] = plain_sgd_keep(p.optimizer, scalars.learning_rate);
        }
    }
    if (!state.found_inf) return;
    // A skipped step (rare): the GEMM's products must be finite zeros. Element by element is enough.
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (int64_t i = first; i < p.output_grad_elements; i += stride) store_zero(p.output_grad, p.dtype, i);
    for (int64_t i = first; i < p.input_elements; i += stride)
        if (non_finite(p.input, p.dtype, i)) store_zero(p.input, p.dtype, i);
}

struct FinishLaunch {
    const TrainState* state;
    const float* scalars;  // alpha, beta as the start kernel wrote them
    const float* bias_grad;
    float* weights;
    float* bias;
    void* low_weights;  // null: no copy (fp32)
    void* low_bias;
    int64_t weight_count;
    int64_t out_features;
    bool vector;  // weights whole float4s (16-byte aligned, a multiple of 4) and the copy 8-byte aligned
};

// T: the copies' element type (float where the layer has none: only the bias is updated).
template <typename T>
__global__ void __launch_bounds__(kThreads) gradient_into_masters_finish_kernel(const FinishLaunch p) {
    start_after_preceding_kernel();
    if (p.state->found_inf) return;  // the masters are as they were, and so are their copies
    const float step = p.scalars[0], keep = p.scalars[1];
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (int64_t o = first; o < p.out_features; o += stride) {
        const float bias = keep * p.bias[o] + step * p.bias_grad[o];  // as the CPU's column_sums
        p.bias[o] = bias;
        if (p.low_bias) static_cast<T*>(p.low_bias)[o] = from_float<T>(bias);
    }
    if (!p.low_weights) return;  // (an fp32 layer computes from the masters)
    T* low = static_cast<T*>(p.low_weights);
    if constexpr (!std::is_same_v<T, float>) {
        if (p.vector) {
            const float4* masters = reinterpret_cast<const float4*>(p.weights);
            const int64_t chunks = p.weight_count / 4;
            // Two chunks a pass, both loads in flight before either store.
            int64_t c = first;
            for (; c + stride < chunks; c += 2 * stride) {
                const float4 a = masters[c], b = masters[c + stride];
                store_rounded4(low + 4 * c, a);
                store_rounded4(low + 4 * (c + stride), b);
            }
            for (; c < chunks; c += stride) store_rounded4(low + 4 * c, masters[c]);
            return;
        }
    }
    for (int64_t i = first; i < p.weight_count; i += stride) low[i] = from_float<T>(p.weights[i]);
}

GemmKey into_masters_key(const DenseUpdateArgs& args, float* bias_grad, int32_t epilogue) {
    const bool bias = epilogue == CUBLASLT_EPILOGUE_BGRADB;
    GemmKey key = make_gemm_key(epilogue, CUBLAS_OP_N, CUBLAS_OP_T, args.in_features, args.out_features, args.rows,
                                args.in_features, args.out_features, args.in_features,
                                cuda_data_type(args.compute_dtype), CUDA_R_32F, args.input, args.output_grad,
                                args.weights, bias ? bias_grad : nullptr, nullptr, 0, args.workspace);
    key.device_scalars = true;
    return key;
}

size_t scalars_bytes() { return 256; }

}  // namespace

bool gradient_into_masters_applies(CudaGemm& gemm, const DenseUpdateArgs& args, const OptimizerConfig& optimizer) {
    if (!(is_plain_sgd(optimizer) && args.part == UpdatePart::whole && args.gradient_factor == nullptr &&
          args.rows > 0 && args.in_features > 0 && args.out_features > 0 && args.weights != nullptr &&
          is_aligned(args.weights, 16)))
        return false;
    // (The bias-gradient pointer's alignment is the scratch's, 256 bytes: the fused key's own check
    // waits for planning, where a refusal falls back to the plain plan.)
    return gemm.plan(into_masters_key(args, nullptr, CUBLASLT_EPILOGUE_DEFAULT)).supported;
}

size_t gradient_into_masters_scratch_bytes(int64_t out_features) {
    return scalars_bytes() + round_up_256(static_cast<size_t>(out_features) * sizeof(float));
}

GradientIntoMastersPlan plan_gradient_into_masters(CudaGemm& gemm, const DenseUpdateArgs& args, float* scratch) {
    require(args.rows > 0 && args.in_features > 0 && args.out_features > 0, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: dense_update needs a non-empty problem");
    require_aligned16(args.output_grad, "dense_update output_grad");
    require_aligned16(args.input, "dense_update input");
    require_workspace(args.workspace, "dense_update");
    require(scratch != nullptr, MPT_STATUS_INTERNAL, "cuda backend: plain SGD into the masters has no scratch");
    GradientIntoMastersPlan plan;
    plan.scalars = scratch;
    plan.bias_grad = reinterpret_cast<float*>(reinterpret_cast<char*>(scratch) + scalars_bytes());
    const GemmChoice choice = choose_gemm(gemm, true, into_masters_key(args, plan.bias_grad, CUBLASLT_EPILOGUE_BGRADB),
                                          into_masters_key(args, plan.bias_grad, CUBLASLT_EPILOGUE_DEFAULT),
                                          "plain SGD's update into the masters", args.compute_dtype);
    plan.gemm = choice.plan;
    plan.bias_fused = choice.fused;
    return plan;
}

void run_gradient_into_masters(CudaGemm& gemm, const GradientIntoMastersPlan& plan, const DenseUpdateArgs& args,
                               const OptimizerConfig& optimizer, int max_blocks, cudaStream_t stream) {
    // The start kernel's blocks return at once but on skipped steps: as few as still zero dZ in a
    // reasonable time then. (Should cuBLASLt refuse the fused GEMM when it runs, the op is planned
    // again and run from here: this kernel writes the same the second time.)
    StartLaunch start{};
    start.state = args.state;
    start.optimizer = optimizer;
    start.scalars = plan.scalars;
    start.output_grad = const_cast<void*>(args.output_grad);
    start.input = const_cast<void*>(args.input);
    start.output_grad_elements = args.rows * args.out_features;
    start.input_elements = args.rows * args.in_features;
    start.dtype = args.compute_dtype;
    const unsigned start_blocks =
        grid_for(start.output_grad_elements, kThreads, static_cast<unsigned>(max_blocks > 8 ? max_blocks / 8 : 1));
    launch_kernel("gradient_into_masters_start_kernel", gradient_into_masters_start_kernel, start_blocks, kThreads, 0,
                  stream, start);

    gemm.run_device_scalars(*plan.gemm, args.input, args.output_grad, args.weights,
                            plan.bias_fused ? plan.bias_grad : nullptr, args.workspace, plan.scalars, stream);
    if (!plan.bias_fused) {
        BiasGradientArgs bias{};
        bias.output_grad = args.output_grad;
        bias.dtype = args.compute_dtype;
        bias.bias_grad = plan.bias_grad;
        bias.rows = args.rows;
        bias.columns = args.out_features;
        bias.accumulate = false;
        run_bias_gradient(bias, stream);
    }

    FinishLaunch finish{};
    finish.state = args.state;
    finish.scalars = plan.scalars;
    finish.bias_grad = plan.bias_grad;
    finish.weights = args.weights;
    finish.bias = args.bias;
    finish.low_weights = args.low_weights;
    finish.low_bias = args.low_bias;
    finish.weight_count = args.out_features * args.in_features;
    finish.out_features = args.out_features;
    finish.vector = finish.weight_count % 4 == 0 && is_aligned(args.weights, 16) &&
                    (args.low_weights == nullptr || is_aligned(args.low_weights, 8));
    const int64_t work =
        args.low_weights ? (finish.vector ? finish.weight_count / 8 : finish.weight_count) : args.out_features;
    const unsigned blocks =
        grid_for(work > args.out_features ? work : args.out_features, kThreads, static_cast<unsigned>(max_blocks));
    void (*kernel)(FinishLaunch) = nullptr;
    switch (args.compute_dtype) {
        case DType::fp32:
            kernel = gradient_into_masters_finish_kernel<float>;
            break;
        case DType::fp16:
            kernel = gradient_into_masters_finish_kernel<__half>;
            break;
        case DType::bf16:
            kernel = gradient_into_masters_finish_kernel<__nv_bfloat16>;
            break;
    }
    require(kernel != nullptr, MPT_STATUS_INTERNAL, "cuda backend: plain SGD into the masters for an unknown dtype");
    launch_kernel("gradient_into_masters_finish_kernel", kernel, blocks, kThreads, 0, stream, finish);
}

}  // namespace mpt
