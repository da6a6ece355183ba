// See cuda_dense_update.cuh. The element rule is optimizer_update_element, the same inline code the
// CPU backend runs. Elements are taken four at a time (16-byte loads) when a group's pointers allow.
// The kernel is compiled per dtype of the low-precision copy and, for plain SGD (the bench's step),
// with plain_sgd_update_element alone and two chunks of four in flight per thread: on an H200 the
// generic kernel moved 2.27-2.45 TB/s (ncu, batch 256 and 4096: 69-70 us for the step's three
// layers) with one 32-byte load pair in flight per thread and every rule and dtype branched on
// per element. Unmeasured: no GPU has run the specialised kernel yet.
#include "backend/cuda/cuda_dense_update.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/update_chunk_layout.h"

namespace mpt {

namespace {

constexpr int kUpdateThreads = 256;

struct DeviceGroup {
    float* master;
    void* low_copy;
    float* gradient;
    float* state1;
    float* state2;
    float* state3;
    int64_t count;
    int64_t first_chunk;  // chunks (of 4 elements) before this group in the launch
    DType low_dtype;
    bool vectorised;
};

constexpr int kUpdateGroups = 2;  // a layer's weights and its bias

struct UpdateLaunch {
    DeviceGroup groups[kUpdateGroups];
    int64_t total_chunks;
    OptimizerConfig optimizer;
    const TrainState* state;
    const float* gradient_factor;  // device memory, or null: 1
};

// One element; kLow the low copy's dtype (when the group has one).
template <DType kLow, bool kPlainSgd>
__device__ __forceinline__ void update_one(const UpdateLaunch& launch, const OptimizerStepScalars& scalars,
                                           const DeviceGroup& group, int64_t i) {
    float master;
    if constexpr (kPlainSgd) {
        master = plain_sgd_update_element(launch.optimizer, scalars, group.master[i], group.gradient[i]);
    } else {
        float unused1 = 0.0f, unused2 = 0.0f, unused3 = 0.0f;
        float& state1 = group.state1 ? group.state1[i] : unused1;
        float& state2 = group.state2 ? group.state2[i] : unused2;
        float& state3 = group.state3 ? group.state3[i] : unused3;
        master = optimizer_update_element(launch.optimizer, scalars, group.master[i], group.gradient[i], state1,
                                          state2, state3);
    }
    group.master[i] = master;
    if (group.low_copy) store_element(group.low_copy, kLow, i, master);
}

// Elements i .. i + 3 of the low copy, in its dtype kLow.
template <DType kLow>
__device__ __forceinline__ void store_low4(void* low_copy, int64_t i, const float4& value) {
    if constexpr (kLow == DType::bf16)
        store_rounded4(static_cast<__nv_bfloat16*>(low_copy) + i, value);
    else if constexpr (kLow == DType::fp16)
        store_rounded4(static_cast<__half*>(low_copy) + i, value);
    else
        store_rounded4(static_cast<float*>(low_copy) + i, value);
}

// Four elements with state (the optimizers other than plain SGD).
template <DType kLow>
__device__ __forceinline__ void update_four(const UpdateLaunch& launch, const OptimizerStepScalars& scalars,
                                            const DeviceGroup& group, int64_t i) {
    float4 master = *reinterpret_cast<const float4*>(group.master + i);
    const float4 gradient = *reinterpret_cast<const float4*>(group.gradient + i);
    float4 state1 = group.state1 ? *reinterpret_cast<const float4*>(group.state1 + i) : make_float4(0, 0, 0, 0);
    float4 state2 = group.state2 ? *reinterpret_cast<const float4*>(group.state2 + i) : make_float4(0, 0, 0, 0);
    float4 state3 = group.state3 ? *reinterpret_cast<const float4*>(group.state3 + i) : make_float4(0, 0, 0, 0);
    const OptimizerConfig& config = launch.optimizer;
    master.x = optimizer_update_element(config, scalars, master.x, gradient.x, state1.x, state2.x, state3.x);
    master.y = optimizer_update_element(config, scalars, master.y, gradient.y, state1.y, state2.y, state3.y);
    master.z = optimizer_update_element(config, scalars, master.z, gradient.z, state1.z, state2.z, state3.z);
    master.w = optimizer_update_element(config, scalars, master.w, gradient.w, state1.w, state2.w, state3.w);
    *reinterpret_cast<float4*>(group.master + i) = master;
    if (group.state1) *reinterpret_cast<float4*>(group.state1 + i) = state1;
    if (group.state2) *reinterpret_cast<float4*>(group.state2 + i) = state2;
    if (group.state3) *reinterpret_cast<float4*>(group.state3 + i) = state3;
    if (group.low_copy) store_low4<kLow>(group.low_copy, i, master);
}

// Plain SGD on kChunks whole chunks of four: every chunk's loads are issued before any is used.
template <DType kLow, int kChunks>
__device__ __forceinline__ void plain_sgd_fours(const UpdateLaunch& launch, const OptimizerStepScalars& scalars,
                                                const DeviceGroup* const (&groups)[kChunks],
                                                const int64_t (&firsts)[kChunks]) {
    float4 masters[kChunks], gradients[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
        masters[c] = *reinterpret_cast<const float4*>(groups[c]->master + firsts[c]);
        gradients[c] = *reinterpret_cast<const float4*>(groups[c]->gradient + firsts[c]);
    }
    const OptimizerConfig& config = launch.optimizer;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
        masters[c].x = plain_sgd_update_element(config, scalars, masters[c].x, gradients[c].x);
        masters[c].y = plain_sgd_update_element(config, scalars, masters[c].y, gradients[c].y);
        masters[c].z = plain_sgd_update_element(config, scalars, masters[c].z, gradients[c].z);
        masters[c].w = plain_sgd_update_element(config, scalars, masters[c].w, gradients[c].w);
        *reinterpret_cast<float4*>(groups[c]->master + firsts[c]) = masters[c];
        if (groups[c]->low_copy) store_low4<kLow>(groups[c]->low_copy, firsts[c], masters[c]);
    }
}

using update_chunks::ChunkPlace;
using update_chunks::place_chunk;

template <DType kLow, bool kPlainSgd>
__device__ __forceinline__ void update_chunk(const UpdateLaunch& launch, const OptimizerStepScalars& scalars,
                                             const ChunkPlace& place) {
    const DeviceGroup& group = launch.groups[place.group];
    if (place.whole) {
        if constexpr (kPlainSgd) {
            const DeviceGroup* const groups[1] = {&group};
            const int64_t firsts[1] = {place.first};
            plain_sgd_fours<kLow, 1>(launch, scalars, groups, firsts);
        } else {
            update_four<kLow>(launch, scalars, group, place.first);
        }
        return;
    }
    const int64_t last = place.first + 4 < group.count ? place.first + 4 : group.count;
    for (int64_t i = place.first; i < last; ++i) update_one<kLow, kPlainSgd>(launch, scalars, group, i);
}

template <DType kLow, bool kPlainSgd>
__global__ void __launch_bounds__(kUpdateThreads) update_kernel(const UpdateLaunch launch) {
    start_after_preceding_kernel();
    __shared__ OptimizerStepScalars scalars;
    __shared__ int skip;
    if (threadIdx.x == 0) {
        const TrainState state = *launch.state;
        skip = state.found_inf;
        scalars = kPlainSgd ? plain_step_scalars(launch.optimizer, state.loss_scale, state.steps)
                            : optimizer_step_scalars(launch.optimizer, state.loss_scale, state.applied_steps, state.steps);
        // The clip factor joins the unscaling, as on the CPU: one multiply per element either way.
        if (launch.gradient_factor) scalars.inverse_scale *= *launch.gradient_factor;
    }
    __syncthreads();
    if (skip) return;

    // The walk of update_chunk_layout.h: chunks a stride apart, two per pass for plain SGD (their
    // loads in flight together when both are whole), then one at a time.
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if constexpr (kPlainSgd) {
        for (; chunk + stride < launch.total_chunks; chunk += 2 * stride) {
            const ChunkPlace first = place_chunk(launch.groups, chunk);
            const ChunkPlace second = place_chunk(launch.groups, chunk + stride);
            if (first.whole && second.whole) {
                const DeviceGroup* const groups[2] = {&launch.groups[first.group], &launch.groups[second.group]};
                const int64_t firsts[2] = {first.first, second.first};
                plain_sgd_fours<kLow, 2>(launch, scalars, groups, firsts);
            } else {
                update_chunk<kLow, true>(launch, scalars, first);
                update_chunk<kLow, true>(launch, scalars, second);
            }
        }
    }
    for (; chunk < launch.total_chunks; chunk += stride)
        update_chunk<kLow, kPlainSgd>(launch, scalars, place_chunk(launch.groups, chunk));
}

DeviceGroup device_group(float* master, void* low_copy, DType low_dtype, float* gradient, float* const* states,
                         int64_t count, int64_t first_chunk) {
    DeviceGroup group{};
    group.master = master;
    group.low_copy = low_copy;
    group.gradient = gradient;
    group.state1 = states[0];
    group.state2 = states[1];
    group.state3 = states[2];
    group.count = count;
    group.first_chunk = first_chunk;
    group.low_dtype = low_dtype;
    // store_low4 writes four elements at once: a float4 (16 bytes) in fp32, 8 bytes in 16-bit.
    const unsigned low_alignment = low_dtype == DType::fp32 ? 16 : 8;
    group.vectorised = is_aligned(master, 16) && is_aligned(gradient, 16) &&
                       (!states[0] || is_aligned(states[0], 16)) && (!states[1] || is_aligned(states[1], 16)) &&
                       (!states[2] || is_aligned(states[2], 16)) && (!low_copy || is_aligned(low_copy, low_alignment));
    return group;
}

WeightGradientArgs gradient_args(const DenseUpdateArgs& args, const DenseUpdatePlan& plan) {
    WeightGradientArgs gradient{};
    gradient.output_grad = args.output_grad;
    gradient.input = args.input;
    gradient.weight_grad = plan.weight_grad;
    gradient.bias_grad = plan.bias_grad;
    gradient.rows = args.rows;
    gradient.in_features = args.in_features;
    gradient.out_features = args.out_features;
    gradient.compute_dtype = args.compute_dtype;
    gradient.workspace = args.workspace;
    gradient.accumulate = args.part == UpdatePart::accumulate;
    return gradient;
}

// Where the gradients of the whole update go in the backend's scratch: dW, then db.
size_t scratch_weight_bytes(const DenseUpdateArgs& args) {
    return round_up_256(static_cast<size_t>(args.out_features * args.in_features) * sizeof(float));
}
size_t scratch_bias_bytes(const DenseUpdateArgs& args) {
    return round_up_256(static_cast<size_t>(args.out_features) * sizeof(float));
}

}  // namespace

namespace {

// Whether the bulk-copy fused SGD kernel takes the update (cuda_fused_sgd_bulk_copy.cuh).
bool bulk_copy_takes(const DenseUpdateArgs& args, const OptimizerConfig& optimizer, bool allow_fused,
                     const FusedSgdBulkCopyDevice* bulk_copy) {
    return allow_fused && bulk_copy && fused_sgd_rule_applies(args, optimizer) &&
           fused_sgd_bulk_copy_applies(args, *bulk_copy);
}

}  // namespace

size_t dense_update_scratch_bytes(CudaGemm& gemm, const DenseUpdateArgs& args, const OptimizerConfig& optimizer,
                                  bool allow_fused, bool into_masters, const FusedSgdBulkCopyDevice* bulk_copy) {
    // The parts write and read the args' gradients.
    if (args.part != UpdatePart::whole) return 0;
    if (bulk_copy_takes(args, optimizer, allow_fused, bulk_copy)) return 0;
    if (allow_fused && fused_sgd_applies(args, optimizer)) return 0;
    if (allow_fused && into_masters && gradient_into_masters_applies(gemm, args, optimizer))
        return gradient_into_masters_scratch_bytes(args.out_features);
    if (args.weight_grad && args.bias_grad) return 0;
    return scratch_weight_bytes(args) + scratch_bias_bytes(args);
}

DenseUpdatePlan plan_dense_update(CudaGemm& gemm, const DenseUpdateArgs& args, const OptimizerConfig& optimizer,
                                  float* scratch, bool allow_fused, bool into_masters,
                                  const FusedSgdBulkCopyDevice* bulk_copy) {
    require(args.state != nullptr, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: dense_update needs the train state");
    require(args.weights && args.bias, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: dense_update needs the masters");
    // (The apply part reads no batch.)
    require((args.part == UpdatePart::apply || args.rows > 0) && args.in_features > 0 && args.out_features > 0,
            MPT_STATUS_INVALID_ARGUMENT, "cuda backend: dense_update needs a non-empty problem");
    DenseUpdatePlan plan;
    if (args.part != UpdatePart::whole) {
        require(args.weight_grad && args.bias_grad, MPT_STATUS_INVALID_ARGUMENT,
                "cuda backend: a dense_update in parts needs weight_grad and bias_grad");
        plan.weight_grad = args.weight_grad;
        plan.bias_grad = args.bias_grad;
        if (args.part != UpdatePart::apply)
            plan.gradient = plan_weight_gradient(gemm, gradient_args(args, plan), allow_fused);
        return plan;
    }
    // The bulk-copy kernel first where it applies: in place of the CUDA-core fused SGD kernel up to 64
    // rows, and of the GEMM paths below from 65 to 256 (no gradient GEMM planned, no scratch).
    if (bulk_copy_takes(args, optimizer, allow_fused, bulk_copy)) {
        plan.fused_sgd = true;
        plan.fused_sgd_bulk_copy = true;
        return plan;
    }
    if (allow_fused && fused_sgd_applies(args, optimizer)) {
        plan.fused_sgd = true;
        return plan;
    }
    if (allow_fused && into_masters && gradient_into_masters_applies(gemm, args, optimizer)) {
        plan.into_masters = true;
        plan.into_masters_plan = plan_gradient_into_masters(gemm, args, scratch);
        return plan;
    }
    char* bytes = reinterpret_cast<char*>(scratch);
    if (args.weight_grad && args.bias_grad) {
        plan.weight_grad = args.weight_grad;
        plan.bias_grad = args.bias_grad;
    } else {
        require(scratch != nullptr, MPT_STATUS_INTERNAL, "cuda backend: dense_update has no gradient scratch");
        plan.weight_grad = scratch;
        plan.bias_grad = reinterpret_cast<float*>(bytes + scratch_weight_bytes(args));
    }
    plan.gradient = plan_weight_gradient(gemm, gradient_args(args, plan), allow_fused);
    return plan;
}

void run_dense_update(CudaGemm& gemm, const DenseUpdatePlan& plan, const DenseUpdateArgs& args,
                      const OptimizerConfig& optimizer, int max_blocks, cudaStream_t stream) {
    if (plan.fused_sgd) {
        run_fused_sgd(args, optimizer,
                      FusedSgdKernelChoice{plan.fused_sgd_three_blocks, plan.fused_sgd_exact_rows,
                                           plan.fused_sgd_bulk_copy ? 1u : 0u},
                      stream);
        return;
    }
    if (plan.into_masters) {
        run_gradient_into_masters(gemm, plan.into_masters_plan, args, optimizer, max_blocks, stream);
        return;
    }
    if (args.part != UpdatePart::apply) run_weight_gradient(gemm, plan.gradient, gradient_args(args, plan), stream);
    if (args.part == UpdatePart::gradient || args.part == UpdatePart::accumulate) return;
    UpdateLaunch launch{};
    launch.optimizer = optimizer;
    launch.state = args.state;
    launch.gradient_factor = args.gradient_factor;
    const int64_t weight_count = args.out_features * args.in_features;
    launch.groups[0] = device_group(args.weights, args.low_weights, args.compute_dtype, plan.weight_grad,
                                    args.weight_state, weight_count, 0);
    const int64_t weight_chunks = update_chunks::chunks(weight_count);
    launch.groups[1] = device_group(args.bias, args.low_bias, args.compute_dtype, plan.bias_grad, args.bias_state,
                                    args.out_features, weight_chunks);
    launch.total_chunks = weight_chunks + update_chunks::chunks(args.out_features);
    const unsigned blocks = grid_for(launch.total_chunks, kUpdateThreads, static_cast<unsigned>(max_blocks));
    void (*kernel)(UpdateLaunch) = nullptr;
    const bool plain_sgd = is_plain_sgd(optimizer);
    switch (args.compute_dtype) {
        case DType::fp32: kernel = plain_sgd ? update_kernel<DType::fp32, true> : update_kernel<DType::fp32, false>; break;
        case DType::fp16: kernel = plain_sgd ? update_kernel<DType::fp16, true> : update_kernel<DType::fp16, false>; break;
        case DType::bf16: kernel = plain_sgd ? update_kernel<DType::bf16, true> : update_kernel<DType::bf16, false>; break;
    }
    require(kernel != nullptr, MPT_STATUS_INTERNAL, "cuda backend: dense_update for an unknown dtype");
    launch_kernel("update_kernel", kernel, blocks, kUpdateThreads, 0, stream, launch);
}

}  // namespace mpt
