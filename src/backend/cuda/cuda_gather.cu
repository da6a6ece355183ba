// See cuda_gather.cuh. One block per batch row; the normalisation is written with explicit
// round-to-nearest multiply and add (no FMA contraction), matching the CPU bit for bit.
#include "backend/cuda/cuda_gather.cuh"

#include "backend/cuda/cuda_common.cuh"

namespace mpt {

namespace {

constexpr int kThreads = 256;

// A standardized dataset's (value - mean) / divisor for feature f, correctly rounded as the CPU's.
__device__ float standardize(const GatherArgs& args, int64_t f, float value) {
    if (!args.feature_mean) return value;
    return __fdiv_rn(__fsub_rn(value, args.feature_mean[f]), args.feature_divisor[f]);
}

__global__ void __launch_bounds__(kThreads) gather_kernel(const GatherArgs args) {
    for (int64_t r = blockIdx.x; r < args.rows; r += gridDim.x) {
        const int64_t source_row = args.order ? args.order[args.first + r] : args.first + r;
        const int64_t out_row = r * args.padded_features;
        if (args.samples_are_u8) {
            const uint8_t* in = static_cast<const uint8_t*>(args.samples) + source_row * args.features;
            for (int64_t f = threadIdx.x; f < args.padded_features; f += kThreads) {
                const float value = f < args.features
                                        ? standardize(args, f, __fadd_rn(__fmul_rn(static_cast<float>(in[f]), args.scale),
                                                                         args.offset))
                                        : 0.0f;
                store_element(args.batch, args.batch_dtype, out_row + f, value);
            }
        } else {
            const float* in = static_cast<const float*>(args.samples) + source_row * args.features;
            for (int64_t f = threadIdx.x; f < args.padded_features; f += kThreads) {
                const float value =
                    f < args.features ? standardize(args, f, __fadd_rn(__fmul_rn(in[f], args.scale), args.offset)) : 0.0f;
                store_element(args.batch, args.batch_dtype, out_row + f, value);
            }
        }
        if (args.labels && threadIdx.x == 0) args.batch_labels[r] = args.labels[source_row];
        if (args.row_weights && threadIdx.x == 0) args.batch_row_weights[r] = args.row_weights[source_row];
        if (args.targets)
            for (int64_t c = threadIdx.x; c < args.target_width; c += kThreads)
                args.batch_targets[r * args.target_width + c] = args.targets[source_row * args.target_width + c];
    }
}

}  // namespace

void validate_gather(const GatherArgs& args) {
    require(args.rows >= 0 && args.features > 0 && args.padded_features >= args.features, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: gather_batch needs 0 < features <= padded_features");
    require(args.rows == 0 || (args.samples && args.batch), MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: gather_batch needs samples and a batch buffer");
    require(!args.labels || args.batch_labels, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: gather_batch has labels but nowhere to put them");
    require(!args.targets || args.batch_targets, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: gather_batch has targets but nowhere to put them");
    require(!args.row_weights || args.batch_row_weights, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: gather_batch has row weights but nowhere to put them");
    require(!args.feature_mean == !args.feature_divisor, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: gather_batch needs a standardization's means and divisors together");
}

void run_gather(const GatherArgs& args, cudaStream_t stream) {
    if (args.rows == 0) return;
    const unsigned blocks = static_cast<unsigned>(args.rows < 65535 ? args.rows : 65535);
    gather_kernel<<<blocks, kThreads, 0, stream>>>(args);
    MPT_CUDA_CHECK_LAUNCH("gather_kernel");
}

}  // namespace mpt
