// See cuda_gather.cuh. One block per batch row in general; the normalisation is written with
// explicit round-to-nearest multiply and add (no FMA contraction), matching the CPU bit for bit.
// uint8 rows of whole 16-byte chunks (CIFAR's 3072 bytes) take a path with one thread per chunk:
// the general path's 12 dependent loads per thread (one row per block) were 9 us of a batch-32
// step on an H200; one 16-byte load and two or four 16-byte stores per thread are one round trip.
#include "backend/cuda/cuda_gather.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

constexpr int kThreads = 256;

// A standardized dataset's (value - mean) / divisor for feature f, correctly rounded as the CPU's.
__device__ float standardize(const GatherArgs& args, int64_t f, float value) {
    if (!args.feature_mean) return value;
    return __fdiv_rn(__fsub_rn(value, args.feature_mean[f]), args.feature_divisor[f]);
}

__global__ void __launch_bounds__(kThreads) gather_kernel(const GatherArgs args) {
    start_after_preceding_kernel();
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

// Stores 16 converted values from element `index` (a multiple of 16; the batch 16-byte aligned):
// fp16 and bf16 in pairs rounded to nearest even, as store_element rounds.
__device__ __forceinline__ void store_16(void* base, DType dtype, int64_t index, const float (&values)[16]) {
    if (dtype == DType::fp32) {
        float4* out = reinterpret_cast<float4*>(static_cast<float*>(base) + index);
#pragma unroll
        for (int q = 0; q < 4; ++q)
            out[q] = make_float4(values[4 * q], values[4 * q + 1], values[4 * q + 2], values[4 * q + 3]);
        return;
    }
    uint32_t pairs[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        if (dtype == DType::bf16) {
            const __nv_bfloat162 pair = __floats2bfloat162_rn(values[2 * k], values[2 * k + 1]);
            pairs[k] = *reinterpret_cast<const uint32_t*>(&pair);
        } else {
            const __half2 pair = __floats2half2_rn(values[2 * k], values[2 * k + 1]);
            pairs[k] = *reinterpret_cast<const uint32_t*>(&pair);
        }
    }
    uint4* out = reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + index);
    out[0] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
    out[1] = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
}

// uint8 samples, features a multiple of 16 and not padded: thread t converts chunk t % chunks of
// batch row t / chunks; a row's first thread copies its label, row weight and targets.
__global__ void __launch_bounds__(kThreads) gather_u8_chunks_kernel(const GatherArgs args) {
    start_after_preceding_kernel();
    const int64_t chunks = args.features / 16;
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (t >= args.rows * chunks) return;
    const int64_t r = t / chunks, chunk = t % chunks;
    const int64_t source_row = args.order ? args.order[args.first + r] : args.first + r;
    const uint4 bytes = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(args.samples) +
                                                        source_row * args.features + 16 * chunk);
    const uint32_t words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
    float values[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const float byte = static_cast<float>((words[k / 4] >> (8 * (k % 4))) & 0xffu);  // little-endian
        values[k] = standardize(args, 16 * chunk + k, __fadd_rn(__fmul_rn(byte, args.scale), args.offset));
    }
    store_16(args.batch, args.batch_dtype, r * args.features + 16 * chunk, values);
    if (chunk != 0) return;
    if (args.labels) args.batch_labels[r] = args.labels[source_row];
    if (args.row_weights) args.batch_row_weights[r] = args.row_weights[source_row];
    if (args.targets)
        for (int64_t c = 0; c < args.target_width; ++c)
            args.batch_targets[r * args.target_width + c] = args.targets[source_row * args.target_width + c];
}

bool aligned_16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

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
    if (args.samples_are_u8 && args.features % 16 == 0 && args.padded_features == args.features &&
        aligned_16(args.samples) && aligned_16(args.batch)) {
        const int64_t threads = args.rows * (args.features / 16);
        const int64_t blocks = (threads + kThreads - 1) / kThreads;
        require(blocks <= 0x7fffffff, MPT_STATUS_UNSUPPORTED, "cuda backend: a batch too large to gather");
        launch_kernel("gather_u8_chunks_kernel", gather_u8_chunks_kernel, static_cast<unsigned>(blocks), kThreads, 0,
                      stream, args);
        return;
    }
    const unsigned blocks = static_cast<unsigned>(args.rows < 65535 ? args.rows : 65535);
    launch_kernel("gather_kernel", gather_kernel, blocks, kThreads, 0, stream, args);
}

}  // namespace mpt
