// See cuda_backend.cuh. Besides the ops themselves this file holds the device bookkeeping: the
// allocation counter, the preallocated reduction scratch, the lazily grown fp32 scratch of the
// fallback paths (an epilogue cuBLASLt refuses; an update given no gradient scratch outside the
// fused SGD kernel's case, which the executor never does), and issuing each op or recording it in
// the compute task under way (the tasks' folds, capture and replay: cuda_backend_tasks.cu). The
// cuBLASLt workspace is not here: it comes with each op from the executor's arena.
#include "backend/cuda/cuda_backend.cuh"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <utility>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_clip_factor.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_convert.cuh"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cuh"
#include "backend/cuda/cuda_gather.cuh"
#include "backend/cuda/cuda_head_layer.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_max_abs.cuh"
#include "backend/cuda/cuda_small_batch_backward_data.cuh"
#include "backend/cuda/cuda_small_batch_forward.cuh"
#include "backend/cuda/cuda_step_state.cuh"
#include "backend/cuda/cuda_weight_average.cuh"
#include "backend/device_scope.h"
#include "core/environment_settings.h"
#include "memory/memory_tracker.h"

namespace mpt {

namespace {

// Set once a CUDA backend exists: from then on DeviceScope saves and restores the current device.
std::atomic<bool> cuda_backend_created{false};

// MPTRAIN_CUDA_GRAPHS=0 and MPTRAIN_CUDA_FUSED_EPILOGUES=0 turn off the step graphs and the fused
// paths (cuBLASLt's epilogues and the fused SGD kernel): to compare, or to get around a driver
// that mishandles them (the same numbers either way, slower). MPTRAIN_CUDA_SPLIT_K=0 keeps
// cuBLASLt from splitting K (where it did, a fused epilogue ran as a pass of its own: at batch
// 4096 on an H200, 80 of 650 us of kernel time), to compare; MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1
// (below) keeps it from splitting only the GEMMs whose outputs have tiles enough. A fused epilogue
// that cuBLASLt refuses when it runs needs neither: the op is planned again without it. MPTRAIN_CUDA_STEP_FOLDS=0
// keeps a recorded step's small ops in launches of their own (the begin_step's memset, the update
// decision's kernel) instead of folded into the loss head and the max pass: the same numbers, to
// tell a fold's fault from another's.
bool turned_off_by_environment(const char* variable) {
    const char* value = std::getenv(variable);
    return value && std::strcmp(value, "0") == 0;
}

// MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 and MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 run the forward layers and
// the input gradients of at most 64 rows as one tensor-core kernel each (K split across a thread-block
// cluster on compute capability 9.0), MPTRAIN_CUDA_GEMM_AUTOTUNE=1 times cuBLASLt's candidate
// algorithms for each GEMM when it is first planned, MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 launches the
// backend's kernels with programmatic dependent launch (cuda_launch.cuh), and
// MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 lets cuBLASLt split K only in the
// GEMMs whose output has fewer tiles than the GPU has multiprocessors (gemm_split_k_rule.h): off by
// default, none 2% faster than the default step on an H200 (2026-12-05, bench/NOTES.md).
// MPTRAIN_CUDA_RELU_FROM_OUTPUT=1 has the forward GEMMs write no ReLU mask (cuBLASLt's RELU_BIAS
// instead of RELU_AUX_BIAS, whose mask may cost a pass of its own: two of 40 us at batch 4096 on an
// H200 followed some GEMM of the step) and the backward ones take ReLU's derivative from the stored
// outputs, in place after a plain GEMM (cuda_dense_backward_data.cu): off by default, unmeasured.
// MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 runs the fused SGD kernel compiled for 3 blocks an SM instead
// of ptxas's 2 (cuda_fused_sgd.cu; the same numbers): off by default, unmeasured.
// MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1 runs the fused SGD kernel compiled for batches of exactly 32 rows
// where a batch has them (cuda_fused_sgd.cuh; the same numbers): off by default, unmeasured.
// MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 runs plain SGD's updates that the fused SGD kernel does not
// take (batches over 64 rows) as one GEMM into the fp32 masters, with no weight gradient in memory
// (cuda_gradient_into_masters.cuh): off by default, unmeasured.
// MPTRAIN_CUDA_BULK_COPY_SGD=1 runs plain SGD's bf16 and fp16 updates of up to 256 rows on compute
// capability 9.0 in one kernel, the masters brought into shared memory by bulk copies, three tiles
// ahead, and the weight gradient on tensor cores (cuda_fused_sgd_bulk_copy.cuh; other sums' order):
// off by default, unmeasured.
// MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 runs a recorded step's last layer at batches of at most 64 rows
// (its forward, loss head and input gradient) as one launch, K split across a thread-block cluster
// (cuda_head_layer.cuh; other sums' order): off by default, unmeasured.
bool turned_on_by_environment(const char* variable) {
    const char* value = std::getenv(variable);
    return value && std::strcmp(value, "1") == 0;
}

}  // namespace

std::string CudaBackend::setup_warning() const {
    return unknown_environment_settings({{"MPTRAIN_CUDA_GRAPHS", {"0", "1"}},
                                         {"MPTRAIN_CUDA_FUSED_EPILOGUES", {"0", "1"}},
                                         {"MPTRAIN_CUDA_SPLIT_K", {"0", "1"}},
                                         {"MPTRAIN_CUDA_GEMM_AUTOTUNE", {"0", "1"}},
                                         {"MPTRAIN_CUDA_SMALL_BATCH_FORWARD", {"0", "1"}},
                                         {"MPTRAIN_CUDA_SMALL_BATCH_BACKWARD", {"0", "1"}},
                                         {"MPTRAIN_CUDA_DEPENDENT_LAUNCH", {"0", "1"}},
                                         {"MPTRAIN_CUDA_GROUPED_SGD", {"0", "1"}},
                                         {"MPTRAIN_CUDA_STEP_FOLDS", {"0", "1"}},
                                         {"MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS", {"0", "1"}},
                                         {"MPTRAIN_CUDA_RELU_FROM_OUTPUT", {"0", "1"}},
                                         {"MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS", {"0", "1"}},
                                         {"MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", {"0", "1"}},
                                         {"MPTRAIN_CUDA_FUSED_SGD_32_ROWS", {"0", "1"}},
                                         {"MPTRAIN_CUDA_BULK_COPY_SGD", {"0", "1"}},
                                         {"MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", {"0", "1"}}});
}

// ---- creation ----------------------------------------------------------------------------------

namespace {

// Usable devices: 0, with `why` set, when there is no driver, no device or no cuBLASLt.
int usable_devices(std::string& why) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        cudaGetLastError();  // no driver or no device: not an error for callers, and not sticky
        why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
        return 0;
    }
    if (count == 0) {
        why = "no CUDA device present";
        return 0;
    }
    std::string library_failure;
    if (!cublaslt(&library_failure)) {
        why = "cuBLASLt cannot be loaded (" + library_failure + ")";
        return 0;
    }
    return count;
}

}  // namespace

int cuda_device_count() {
    std::string why;
    return usable_devices(why);
}

std::string cuda_unavailable_reason() {
    std::string why;
    usable_devices(why);
    return why;
}

std::unique_ptr<Backend> create_cuda_backend(int device, MemoryTracker* memory) {
    std::string why;
    const int count = usable_devices(why);
    if (count == 0) fail(MPT_STATUS_BACKEND_UNAVAILABLE, "cuda backend: no usable CUDA device (" + why + ")");
    if (device < 0 || device >= count)
        fail(MPT_STATUS_BACKEND_UNAVAILABLE, "cuda backend: device " + std::to_string(device) + " requested, " +
                                                 std::to_string(count) + " present");
    return std::make_unique<CudaBackend>(device, memory);
}

namespace {

// cuCtxGetCurrent / cuCtxSetCurrent, resolved through the runtime (no link to libcuda); null when
// no driver answers.
struct DriverContextCalls {
    CUresult (*get)(CUcontext*) = nullptr;
    CUresult (*set)(CUcontext) = nullptr;
};

const DriverContextCalls& driver_context_calls() {
    static const DriverContextCalls calls = [] {
        DriverContextCalls found;
        void* get = nullptr;
        void* set = nullptr;
        cudaDriverEntryPointQueryResult get_status{}, set_status{};
        if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 4000, cudaEnableDefault, &get_status) ==
                cudaSuccess &&
            cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 4000, cudaEnableDefault, &set_status) ==
                cudaSuccess &&
            get_status == cudaDriverEntryPointSuccess && set_status == cudaDriverEntryPointSuccess) {
            found.get = reinterpret_cast<CUresult (*)(CUcontext*)>(get);
            found.set = reinterpret_cast<CUresult (*)(CUcontext)>(set);
        }
        cudaGetLastError();
        return found;
    }();
    return calls;
}

}  // namespace

DeviceScope::DeviceScope(bool cuda_may_start) noexcept {
    if (!cuda_may_start && !cuda_backend_created.load(std::memory_order_relaxed)) return;
    const DriverContextCalls& calls = driver_context_calls();
    CUcontext current = nullptr;
    if (!calls.get || calls.get(&current) != CUDA_SUCCESS) return;
    saved_context_ = current;
    active_ = true;
}

DeviceScope::~DeviceScope() {
    if (!active_) return;
    const DriverContextCalls& calls = driver_context_calls();
    CUcontext current = nullptr;
    if (calls.get(&current) == CUDA_SUCCESS && current != static_cast<CUcontext>(saved_context_))
        calls.set(static_cast<CUcontext>(saved_context_));
}

CudaBackend::CudaBackend(int device, MemoryTracker* memory) : device_(device), memory_(memory) {
    cuda_backend_created.store(true, std::memory_order_relaxed);
    MPT_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp properties{};
    MPT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
    compute_capability_ = properties.major * 10 + properties.minor;
    multiprocessors_ = properties.multiProcessorCount > 0 ? properties.multiProcessorCount : 1;
    l2_bytes_ = properties.l2CacheSize;
    l2_set_aside_max_ = compute_capability_ >= 80 ? properties.persistingL2CacheMaxSize : 0;
    name_ = "cuda:" + std::to_string(device) + " (" + properties.name + ", compute capability " +
            std::to_string(properties.major) + "." + std::to_string(properties.minor) + ", " +
            std::to_string(properties.totalGlobalMem >> 20) + " MiB)";
    graphs_enabled_ = !turned_off_by_environment("MPTRAIN_CUDA_GRAPHS");
    fused_epilogues_ = !turned_off_by_environment("MPTRAIN_CUDA_FUSED_EPILOGUES");
    set_small_batch_forward(turned_on_by_environment("MPTRAIN_CUDA_SMALL_BATCH_FORWARD"));
    set_small_batch_backward_data(turned_on_by_environment("MPTRAIN_CUDA_SMALL_BATCH_BACKWARD"));
    set_dependent_launch(turned_on_by_environment("MPTRAIN_CUDA_DEPENDENT_LAUNCH"));
    grouped_sgd_ = turned_on_by_environment("MPTRAIN_CUDA_GROUPED_SGD");
    step_folds_ = !turned_off_by_environment("MPTRAIN_CUDA_STEP_FOLDS");
    relu_from_output_ = turned_on_by_environment("MPTRAIN_CUDA_RELU_FROM_OUTPUT");
    fused_sgd_three_blocks_ = turned_on_by_environment("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS");
    if (fused_sgd_three_blocks_) prepare_fused_sgd_three_blocks();
    fused_sgd_exact_rows_ = turned_on_by_environment("MPTRAIN_CUDA_FUSED_SGD_32_ROWS");
    // (Described as off where the kernel cannot run: the device check's summary flags such a run.)
    bulk_copy_sgd_ = turned_on_by_environment("MPTRAIN_CUDA_BULK_COPY_SGD") && compute_capability_ >= 90;
    if (bulk_copy_sgd_) bulk_copy_device_ = prepare_fused_sgd_bulk_copy();
    gradient_into_masters_ = turned_on_by_environment("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS");
    set_head_layer_cluster(turned_on_by_environment("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER"));
    try {
        scheduler_ = std::make_unique<CudaScheduler>(*static_cast<CudaTaskHooks*>(this));
        gemm_ = std::make_unique<CudaGemm>(!turned_off_by_environment("MPTRAIN_CUDA_SPLIT_K"),
                                           turned_on_by_environment("MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS"),
                                           turned_on_by_environment("MPTRAIN_CUDA_GEMM_AUTOTUNE"));
        epoch_order_ = std::make_unique<CudaEpochOrder>(*this);
        const size_t partial_bytes = kLossHeadMaxBlocks * sizeof(double);
        const size_t clip_bytes = kClipFactorMaxBlocks * sizeof(double);
        const int max_abs_blocks = multiprocessors_ * 8;
        const size_t max_abs_bytes = round_up_256(max_abs_scratch_bytes());
        const size_t scratch_bytes = 3 * partial_bytes + 256 + round_up_256(clip_bytes) + 256 + max_abs_bytes;
        reduction_scratch_ = allocate_scratch(scratch_bytes);
        char* base = static_cast<char*>(reduction_scratch_);
        head_scratch_.partial_loss = reinterpret_cast<double*>(base);
        head_scratch_.partial_correct = reinterpret_cast<long long*>(base + partial_bytes);
        head_scratch_.partial_counted = reinterpret_cast<long long*>(base + 2 * partial_bytes);
        head_scratch_.counter = reinterpret_cast<unsigned*>(base + 3 * partial_bytes);
        head_scratch_.gradient_largest = reinterpret_cast<unsigned*>(base + 3 * partial_bytes + 128);
        clip_partials_ = reinterpret_cast<double*>(base + 3 * partial_bytes + 256);
        finish_counter_ = reinterpret_cast<unsigned*>(base + 3 * partial_bytes + 256 + round_up_256(clip_bytes));
        char* max_abs_base = base + 3 * partial_bytes + 256 + round_up_256(clip_bytes) + 256;
        max_abs_scratch_.counter = reinterpret_cast<unsigned*>(max_abs_base);
        max_abs_scratch_.maxima = reinterpret_cast<unsigned*>(max_abs_base + 256);
        max_abs_scratch_.max_blocks = max_abs_blocks;
        // On our own stream, not the legacy one: that would be unsafe while another library in the
        // process captures a graph, and a device-wide sync would stall other contexts.
        const cudaStream_t compute = scheduler_->stream(Lane::compute);
        MPT_CUDA_CHECK(cudaMemsetAsync(reduction_scratch_, 0, scratch_bytes, compute));
        MPT_CUDA_CHECK(cudaStreamSynchronize(compute));
    } catch (...) {
        release_scratch(reduction_scratch_);
        epoch_order_.reset();
        gemm_.reset();
        scheduler_.reset();
        throw;
    }
}

CudaBackend::~CudaBackend() {
    discard_cuda_error(cudaSetDevice(device_));
    if (scheduler_) {
        try {
            scheduler_->drain();
        } catch (...) {
            // A fault is reported by the call that meets it; destruction goes on regardless.
        }
    }
    graphs_.clear();
    stager_.reset();
    epoch_order_.reset();
    release_scratch(scratch_);
    release_scratch(reduction_scratch_);
    scheduler_.reset();
    gemm_.reset();
}

void CudaBackend::activate() const { MPT_CUDA_CHECK(cudaSetDevice(device_)); }

DType CudaBackend::preferred_compute_dtype() const {
    return compute_capability_ >= 80 ? DType::bf16 : DType::fp16;
}

// None under MPTRAIN_CUDA_RELU_FROM_OUTPUT=1: no forward writes a mask, so a trainer plans none.
size_t CudaBackend::relu_mask_bytes(int64_t rows, int64_t features) const {
    return relu_from_output_ ? 0 : relu_mask_size(rows, features);
}

bool CudaBackend::update_needs_gradient_scratch(const OptimizerConfig& optimizer, int64_t rows,
                                                const DenseUpdateShape* layers, int count) const {
    // The fused SGD kernels keep the gradient in registers, and plain SGD into the masters never has
    // one; every other update writes it first. With the fused paths off none runs
    // (dense_update_scratch_bytes says the same).
    DenseUpdateArgs whole{};
    whole.rows = rows;
    whole.part = UpdatePart::whole;
    if (!fused_epilogues_) return true;
    if (gradient_into_masters_ && is_plain_sgd(optimizer)) return false;
    if (fused_sgd_applies(whole, optimizer)) return false;
    // Under MPTRAIN_CUDA_BULK_COPY_SGD=1, none where the bulk-copy kernel takes every layer's update
    // (planned on their shapes and dtypes; the executor's buffers have the alignment it needs, and
    // should an update still take a GEMM path, it grows the backend's private scratch).
    if (!(bulk_copy_sgd_ && fused_sgd_rule_applies(whole, optimizer))) return true;
    for (int l = 0; l < count; ++l) {
        whole.in_features = layers[l].in_features;
        whole.out_features = layers[l].out_features;
        whole.compute_dtype = layers[l].compute_dtype;
        if (!fused_sgd_bulk_copy_applies(whole, bulk_copy_device_)) return true;
    }
    return false;
}

// Plain SGD into the masters takes its scalars and bias gradient from the backend's scratch, which
// grows when an op first needs more: grown here, before the step's first update, so that running out
// of memory fails the step before any layer is updated. (The other updates use the executor's
// gradient scratch, or none.)
void CudaBackend::reserve_update_scratch(const DenseUpdateShape* layers, int count, int64_t rows, bool clipping) {
    if (!(gradient_into_masters_ && fused_epilogues_) || clipping || rows <= kFusedSgdMaxRows) return;
    size_t bytes = 0;
    for (int l = 0; l < count; ++l)
        bytes = std::max(bytes, gradient_into_masters_scratch_bytes(layers[l].out_features));
    if (bytes) scratch_for(bytes);
}

size_t CudaBackend::gemm_workspace_bytes() const {
    // cuBLAS's recommendation: 32 MiB on Hopper and later, 4 MiB before.
    return compute_capability_ >= 90 ? size_t{32} << 20 : size_t{4} << 20;
}

void CudaBackend::set_graphs(bool enabled) {
    flush_recording();
    graphs_enabled_ = enabled;
}

// ---- memory ------------------------------------------------------------------------------------

void* CudaBackend::allocate(size_t bytes) {
    activate();
    const size_t rounded = round_up_256(std::max<size_t>(bytes, 1));
    void* pointer = nullptr;
    const cudaError_t status = cudaMalloc(&pointer, rounded);
    if (status != cudaSuccess) {
        cudaGetLastError();  // out of memory is not sticky
        fail(status == cudaErrorMemoryAllocation ? MPT_STATUS_OUT_OF_MEMORY : MPT_STATUS_BACKEND_ERROR,
             "cuda backend: cudaMalloc of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorName(status) +
                 ": " + cudaGetErrorString(status));
    }
    ++allocations_;
    allocation_bytes_[pointer] = rounded;
    return pointer;
}

void* CudaBackend::allocate_scratch(size_t bytes) {
    const size_t rounded = round_up_256(std::max<size_t>(bytes, 1));
    if (memory_) memory_->reserve(rounded);  // throws OUT_OF_MEMORY past the budget, before cudaMalloc
    try {
        return allocate(rounded);
    } catch (...) {
        if (memory_) memory_->unreserve(rounded);
        throw;
    }
}

void CudaBackend::release_scratch(void* pointer) noexcept {
    if (!pointer) return;
    const auto found = allocation_bytes_.find(pointer);
    const size_t bytes = found != allocation_bytes_.end() ? found->second : 0;
    release(pointer);
    if (memory_) memory_->unreserve(bytes);
}

void CudaBackend::release(void* pointer) noexcept {
    if (!pointer) return;
    discard_cuda_error(cudaSetDevice(device_));
    // Operations recorded but not yet issued may use the memory: issue them before it goes. A
    // failure there (a CUDA fault, or running out of memory while planning an op again) cannot
    // leave this noexcept function: the next op issued or task ended reports it.
    try {
        flush_recording();
    } catch (...) {
        if (!deferred_error_) deferred_error_ = std::current_exception();
    }
    // Work still queued may use the memory: let both lanes finish first (cudaFree alone only
    // orders with the legacy stream, and our streams are non-blocking). cudaFree waits as well.
    scheduler_->count_host_sync();
    for (int lane = 0; lane < 2; ++lane)
        discard_cuda_error(cudaStreamSynchronize(scheduler_->stream(static_cast<Lane>(lane))));
    // Forget the ReLU masks that lived in this block (an arena holds many); others stay valid, so
    // freeing an unrelated buffer between a forward and its backward keeps the fused DRELU path.
    const auto found = allocation_bytes_.find(pointer);
    if (found != allocation_bytes_.end()) {
        const char* begin = static_cast<const char*>(pointer);
        const char* end = begin + found->second;
        for (auto mask = masks_.begin(); mask != masks_.end();) {
            const char* at = static_cast<const char*>(mask->first);
            mask = at >= begin && at < end ? masks_.erase(mask) : std::next(mask);
        }
        allocation_bytes_.erase(found);
    } else {
        masks_.clear();
    }
    discard_cuda_error(cudaFree(pointer));
}

float* CudaBackend::scratch_for(size_t bytes) {
    if (bytes <= scratch_bytes_) return scratch_;
    // Growing invalidates what was recorded with the old buffer: that is issued first (here, not in
    // release(), so that its errors reach the caller), and release() lets it finish before the
    // buffer goes. Issuing may itself plan ops again and grow the buffer: look again after.
    flush_recording();
    if (bytes <= scratch_bytes_) return scratch_;
    release_scratch(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    scratch_ = static_cast<float*>(allocate_scratch(bytes));
    scratch_bytes_ = bytes;
    return scratch_;
}

void CudaBackend::copy_to_device(void* destination, const void* source, size_t bytes) {
    if (!bytes) return;
    flush_recording();
    activate();
    // The other lane may still read the bytes this overwrites (as copy_to_host, the other way).
    scheduler_->order_other_lane_after(other_lane(scheduler_->current_lane()));
    MPT_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyHostToDevice, stream()));
    scheduler_->count_host_sync();
    MPT_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaBackend::copy_to_host(void* destination, const void* source, size_t bytes) {
    if (!bytes) return;
    flush_recording();
    activate();
    // The bytes may have been written by either lane.
    scheduler_->order_other_lane_after(other_lane(scheduler_->current_lane()));
    MPT_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToHost, stream()));
    scheduler_->count_host_sync();
    MPT_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void* CudaBackend::allocate_host(size_t bytes) {
    activate();
    void* pointer = nullptr;
    const cudaError_t status = cudaHostAlloc(&pointer, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
    if (status != cudaSuccess) {
        cudaGetLastError();
        fail(status == cudaErrorMemoryAllocation ? MPT_STATUS_OUT_OF_MEMORY : MPT_STATUS_BACKEND_ERROR,
             "cuda backend: cudaHostAlloc of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorName(status));
    }
    ++allocations_;  // pinned memory is as costly as device memory (and cudaFreeHost synchronises)
    return pointer;
}

void CudaBackend::release_host(void* pointer) noexcept {
    if (!pointer) return;
    scheduler_->count_host_sync();  // cudaFreeHost waits for the device
    discard_cuda_error(cudaFreeHost(pointer));
}

void CudaBackend::copy_to_host_async(void* host, const void* source, size_t bytes) {
    if (!bytes) return;
    flush_recording();
    activate();
    MPT_CUDA_CHECK(cudaMemcpyAsync(host, source, bytes, cudaMemcpyDeviceToHost, stream()));
}

void CudaBackend::fill_zero(void* destination, size_t bytes) {
    if (!bytes) return;
    flush_recording();
    activate();
    MPT_CUDA_CHECK(cudaMemsetAsync(destination, 0, bytes, stream()));
    // Outside steps the other lane may be the next to touch these bytes (a fresh arena's batch slots).
    scheduler_->order_other_lane_after(scheduler_->current_lane());
}

void CudaBackend::convert_from_fp32(void* destination, DType dtype, const float* source, int64_t count) {
    flush_recording();
    activate();
    run_convert_from_fp32(destination, dtype, source, count, stream());
    scheduler_->order_other_lane_after(scheduler_->current_lane());
}

void CudaBackend::convert_to_fp32(float* destination, const void* source, DType dtype, int64_t count) {
    flush_recording();
    activate();
    run_convert_to_fp32(destination, source, dtype, count, stream());
    scheduler_->order_other_lane_after(scheduler_->current_lane());
}

// ---- step operations ---------------------------------------------------------------------------

void CudaBackend::fill_order(int32_t* order, int64_t rows, bool shuffle, uint64_t seed) {
    // Once an epoch, outside steps: issued eagerly, never part of a step's graph.
    flush_recording();
    activate();
    if (shuffle) epoch_order_->reserve(rows);
    epoch_order_->run(order, rows, shuffle, seed, stream());
}

void CudaBackend::gather_batch(const GatherArgs& args) {
    validate_gather(args);
    if (args.streamed) {
        // The host copies rows now, so this never joins a recorded task (it would run at replay).
        flush_recording();
        activate();
        if (!stager_) stager_ = std::make_unique<CudaBatchStager>(*this, *scheduler_);
        stager_->gather(args, stream());
        return;
    }
    RecordedOp op{};
    op.code = OpCode::gather;
    op.gather = args;
    issue(op);
}

void CudaBackend::dense_forward(const DenseForwardArgs& args) {
    RecordedOp op{};
    op.code = OpCode::dense_forward;
    op.forward = args;
    plan(op);
    issue(op);
}

void CudaBackend::loss_head(const LossHeadArgs& args) {
    validate_loss_head(args);
    RecordedOp op{};
    op.code = OpCode::loss_head;
    op.head = args;
    issue(op);
}

bool CudaBackend::dense_backward_data(const DenseBackwardDataArgs& args) {
    RecordedOp op{};
    op.code = OpCode::backward_data;
    op.data = args;
    plan(op);
    // The maxima the head layer's launch takes, where it will likely take this backward (a refused
    // plan before it, and it does not: execute then takes them from a max_abs pass).
    op.max_abs_promised =
        op.data_plan.writes_max_abs || ((args.input_grad_max_abs || args.input_max_abs) && head_layer_takes(op));
    issue(op);
    return op.max_abs_promised;
}

void CudaBackend::take_promised_maxima(const RecordedOp& op, cudaStream_t stream) {
    const DenseBackwardDataArgs& args = op.data;
    const int64_t count = args.rows * args.in_features;
    const MaxAbsInput gradient{args.input_grad, args.input_grad_dtype, count},
        input{args.input, args.compute_dtype, count};
    if (args.input_grad_max_abs) run_max_abs(&gradient, 1, args.input_grad_max_abs, max_abs_scratch_, {}, stream);
    if (args.input_max_abs) run_max_abs(&input, 1, args.input_max_abs, max_abs_scratch_, {}, stream);
}

void CudaBackend::dropout(const DropoutArgs& args) {
    require(args.input != nullptr && args.output != nullptr && args.state != nullptr && args.count >= 0,
            MPT_STATUS_INVALID_ARGUMENT, "cuda backend: dropout needs its input, its output and the train state");
    RecordedOp op{};
    op.code = OpCode::dropout;
    op.dropout = args;
    issue(op);
}

void CudaBackend::begin_step(TrainState* state) {
    require(state != nullptr, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: begin_step needs the train state");
    RecordedOp op{};
    op.code = OpCode::begin_step;
    op.state = state;
    issue(op);
}

void CudaBackend::max_abs(const MaxAbsInput* inputs, int count, float* out) {
    validate_max_abs(inputs, count, out);
    RecordedOp op{};
    op.code = OpCode::max_abs;
    std::copy(inputs, inputs + count, op.max_inputs);
    op.count = count;
    op.out = out;
    issue(op);
}

void CudaBackend::decide_update(const float* max_abs_pairs, int layer_count, int64_t rows, TrainState* state) {
    require(state != nullptr && (layer_count <= 0 || max_abs_pairs != nullptr), MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: decide_update needs the bounds and the train state");
    RecordedOp op{};
    op.code = OpCode::decide_update;
    op.values = max_abs_pairs;
    op.count = layer_count;
    op.rows = rows;
    op.state = state;
    issue(op);
}

void CudaBackend::dense_update(const DenseUpdateArgs& args, const OptimizerConfig& optimizer) {
    RecordedOp op{};
    op.code = OpCode::dense_update;
    op.update = args;
    op.optimizer = optimizer;
    plan(op);
    issue(op);
}

void CudaBackend::clip_factor(const float* gradients, int64_t count, float clipnorm, TrainState* state) {
    require(gradients != nullptr && state != nullptr && count >= 0, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: clip_factor needs the gradients and the train state");
    RecordedOp op{};
    op.code = OpCode::clip_factor;
    op.values = gradients;
    op.count = count;
    op.clipnorm = clipnorm;
    op.state = state;
    ++op_paths_.clip_factor;
    issue(op);
}

void CudaBackend::average_weights(const float* masters, float* averages, int64_t count, float momentum,
                                  const TrainState* state) {
    require(masters != nullptr && averages != nullptr && state != nullptr && count >= 0, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: average_weights needs the masters, the averages and the train state");
    RecordedOp op{};
    op.code = OpCode::average_weights;
    op.values = masters;
    op.out = averages;
    op.count = count;
    op.momentum = momentum;
    op.state = const_cast<TrainState*>(state);  // only read
    issue(op);
}

void CudaBackend::swap_values(float* first, float* second, int64_t count) {
    require(first != nullptr && second != nullptr && count >= 0, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: swap_values needs two arrays");
    // Outside steps, like fill_zero: eagerly, on the current lane, and the other lane after it.
    flush_recording();
    activate();
    run_swap_values(first, second, count, stream());
    scheduler_->order_other_lane_after(scheduler_->current_lane());
}

bool CudaBackend::set_small_batch_forward(bool enabled) {
    activate();
    small_batch_forward_ = enabled && small_batch_forward_available();
    return small_batch_forward_;
}

bool CudaBackend::set_small_batch_backward_data(bool enabled) {
    activate();
    small_batch_backward_data_ = enabled && small_batch_backward_data_available();
    return small_batch_backward_data_;
}

void CudaBackend::set_head_layer_cluster(bool enabled) {
    // The device's capacity for the launch's clusters, asked once, when first turned on (it asks for
    // every instance's code).
    if (enabled && head_layer_max_blocks_ == 0) {
        activate();
        head_layer_max_blocks_ = head_layer_cluster_capacity();
    }
    head_layer_cluster_ = enabled;
}

bool CudaBackend::set_dependent_launch(bool enabled) {
    activate();
    dependent_launch_ = enabled && dependent_launch_runs_on_current_device();
    return dependent_launch_;
}

void CudaBackend::plan(RecordedOp& op) {
    switch (op.code) {
        case OpCode::dense_forward: {
            const DenseForwardArgs& args = op.forward;
            op.forward_plan =
                plan_dense_forward(*gemm_, args, fused_epilogues_, !relu_from_output_, small_batch_forward_);
            op.scratch = op.forward_plan.scratch_bytes ? scratch_for(op.forward_plan.scratch_bytes) : nullptr;
            if (args.relu_mask) {
                if (op.forward_plan.writes_mask) masks_[args.relu_mask] = MaskShape{args.rows, args.out_features};
                else masks_.erase(args.relu_mask);
            }
            ++(op.forward_plan.fused ? op_paths_.forward_fused : op_paths_.forward_unfused);
            if (op.forward_plan.small_batch) ++op_paths_.forward_small_batch;
            if (op.forward_plan.small_batch && op.forward_plan.small_batch_split.splits > 1)
                ++op_paths_.small_batch_split;
            return;
        }
        case OpCode::backward_data: {
            const DenseBackwardDataArgs& args = op.data;
            bool mask_valid = false;
            if (args.relu_mask) {
                const auto found = masks_.find(args.relu_mask);
                mask_valid = found != masks_.end() && found->second.rows == args.rows &&
                             found->second.features == args.in_features;
            }
            op.data_plan =
                plan_dense_backward_data(*gemm_, args, mask_valid, fused_epilogues_, small_batch_backward_data_);
            op.scratch = op.data_plan.scratch_bytes ? scratch_for(op.data_plan.scratch_bytes) : nullptr;
            ++(op.data_plan.fused ? op_paths_.backward_data_fused : op_paths_.backward_data_unfused);
            if (op.data_plan.relu_from_output) ++op_paths_.backward_data_relu_from_output;
            if (op.data_plan.writes_max_abs) ++op_paths_.backward_data_max_abs;
            if (op.data_plan.small_batch) ++op_paths_.backward_data_small_batch;
            if (op.data_plan.small_batch && op.data_plan.small_batch_split.splits > 1) ++op_paths_.small_batch_split;
            return;
        }
        case OpCode::dense_update: {
            // The bulk-copy kernel, where it applies (MPTRAIN_CUDA_BULK_COPY_SGD=1): in place of either
            // compilation of the CUDA-core one up to 64 rows (so that their counters say where those ran),
            // and of the weight-gradient GEMM and the update kernel (or the GEMM into the masters) from 65
            // to 256.
            const FusedSgdBulkCopyDevice* bulk_copy = bulk_copy_sgd_ ? &bulk_copy_device_ : nullptr;
            const size_t scratch_bytes = dense_update_scratch_bytes(*gemm_, op.update, op.optimizer, fused_epilogues_,
                                                                    gradient_into_masters_, bulk_copy);
            op.scratch = scratch_bytes ? scratch_for(scratch_bytes) : nullptr;
            op.update_plan = plan_dense_update(*gemm_, op.update, op.optimizer, op.scratch, fused_epilogues_,
                                               gradient_into_masters_, bulk_copy);
            const bool cuda_cores = op.update_plan.fused_sgd && !op.update_plan.fused_sgd_bulk_copy;
            op.update_plan.fused_sgd_three_blocks = cuda_cores && fused_sgd_three_blocks_;
            op.update_plan.fused_sgd_exact_rows =
                cuda_cores && fused_sgd_exact_rows_ && fused_sgd_exact_rows_applies(op.update);
            // (Fused SGD has no weight-gradient GEMM: counted as neither of its paths.)
            const WeightGradientPlan& gradient = op.update_plan.gradient;
            if (op.update_plan.fused_sgd) {
                ++op_paths_.fused_sgd;
                if (op.update_plan.fused_sgd_three_blocks) ++op_paths_.fused_sgd_three_blocks;
                if (op.update_plan.fused_sgd_exact_rows) ++op_paths_.fused_sgd_32_rows;
                if (op.update_plan.fused_sgd_bulk_copy) ++op_paths_.fused_sgd_bulk_copy;
            } else if (op.update_plan.into_masters) {
                ++op_paths_.gradient_into_masters;
            } else if (op.update.part != UpdatePart::apply) {
                ++(gradient.fused ? op_paths_.weight_gradient_fused : op_paths_.weight_gradient_unfused);
            }
            return;
        }
        default: return;  // the other ops have no plan
    }
}

void CudaBackend::finish_step(TrainState* state, const LossScalerConfig& scaler, const double* metrics,
                              double* committed_metrics) {
    require(state != nullptr, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: finish_step needs the train state");
    RecordedOp op{};
    op.code = OpCode::finish_step;
    op.state = state;
    op.scaler = scaler;
    if (metrics && committed_metrics) {
        op.values = metrics;
        op.committed_metrics = committed_metrics;
    }
    issue(op);
}

void CudaBackend::rethrow_deferred_error() {
    if (!deferred_error_) return;
    std::exception_ptr error = std::move(deferred_error_);
    deferred_error_ = nullptr;
    std::rethrow_exception(error);
}

void CudaBackend::issue(const RecordedOp& op) {
    // plan() has recorded a forward's mask as written: whatever stops the op before it runs (a
    // deferred error, a refused plan whose replacement cannot get its scratch) takes that back.
    RecordedOp current = op;
    try {
        rethrow_deferred_error();
        if (recording_) {
            recorded_.push_back(op);
            return;
        }
        activate();
        while (!execute_unless_refused(current, stream()))
            plan(current);  // without the refused plan; each refusal rules out one more
    } catch (...) {
        forget_unwritten_mask(current);
        throw;
    }
}

bool CudaBackend::execute_unless_refused(const RecordedOp& op, cudaStream_t stream) {
    try {
        execute(op, stream);
        return true;
    } catch (const FusedGemmRefused&) {
        return false;
    }
}

void CudaBackend::execute(const RecordedOp& op, cudaStream_t stream) {
    const int max_blocks = multiprocessors_ * 8;
    const DependentLaunchScope launches(dependent_launch_ ? &op_paths_.dependent_launches : nullptr);
    switch (op.code) {
        case OpCode::gather: run_gather(op.gather, stream); return;
        case OpCode::dense_forward: run_dense_forward(*gemm_, op.forward_plan, op.forward, op.scratch, stream); return;
        case OpCode::loss_head:
            run_loss_head(op.head, head_scratch_, stream, op.starts_step);
            return;
        case OpCode::backward_data:
            run_dense_backward_data(*gemm_, op.data_plan, op.data, op.scratch, max_abs_scratch_, stream);
            if (op.max_abs_promised && !op.data_plan.writes_max_abs) take_promised_maxima(op, stream);
            return;
        case OpCode::dropout: run_dropout(op.dropout, stream); return;
        case OpCode::begin_step:
            if (op.folded_into_head) return;
            MPT_CUDA_CHECK(cudaMemsetAsync(&op.state->found_inf, 0, sizeof op.state->found_inf, stream));
            return;
        case OpCode::max_abs:
            run_max_abs(op.max_inputs, static_cast<int>(op.count), op.out, max_abs_scratch_, MaxAbsDecision{}, stream);
            return;
        case OpCode::decide_update:
            run_decide_update(static_cast<const float*>(op.values), static_cast<int>(op.count), op.rows, op.state,
                              stream);
            return;
        case OpCode::dense_update:
            run_dense_update(*gemm_, op.update_plan, op.update, op.optimizer, max_blocks, stream);
            return;
        case OpCode::clip_factor:
            run_clip_factor(static_cast<const float*>(op.values), op.count, op.clipnorm, op.state, clip_partials_,
                            stream);
            return;
        case OpCode::average_weights:
            run_average_weights(static_cast<const float*>(op.values), op.out, op.count, op.momentum, op.state, stream);
            return;
        case OpCode::finish_step:
            run_finish_step(op.state, op.scaler, static_cast<const double*>(op.values), op.committed_metrics, stream);
            return;
    }
}

// ---- test hooks (cuda_backend.h) ---------------------------------------------------------------

namespace {

CudaBackend& as_cuda(const Backend& backend) {
    if (backend.kind() != BackendKind::cuda)
        fail(MPT_STATUS_INVALID_ARGUMENT, "cuda backend hook called on a backend that is not CUDA");
    return const_cast<CudaBackend&>(static_cast<const CudaBackend&>(backend));
}

}  // namespace

uint64_t cuda_backend_allocation_count(const Backend& backend) { return as_cuda(backend).allocation_count(); }
uint64_t cuda_backend_graph_replays(const Backend& backend) { return as_cuda(backend).graph_replays(); }
uint64_t cuda_backend_graph_captures(const Backend& backend) { return as_cuda(backend).graph_captures(); }
uint64_t cuda_backend_graph_refusals(const Backend& backend) { return as_cuda(backend).graph_refusals(); }
std::string cuda_backend_last_graph_refusal(const Backend& backend) { return as_cuda(backend).last_graph_refusal(); }
uint64_t cuda_backend_refused_epilogue_plans(const Backend& backend) {
    return as_cuda(backend).gemm().refused_epilogue_plans();
}
std::string cuda_backend_last_refused_epilogue(const Backend& backend) {
    return as_cuda(backend).gemm().last_refused_epilogue();
}
uint64_t cuda_backend_refused_epilogue_runs(const Backend& backend) {
    return as_cuda(backend).gemm().refused_epilogue_runs();
}
void cuda_backend_refuse_fused_runs(Backend& backend, bool refuse) { as_cuda(backend).refuse_fused_runs(refuse); }
CudaOpPaths cuda_backend_op_paths(const Backend& backend) { return as_cuda(backend).op_paths(); }
void cuda_backend_set_graphs(Backend& backend, bool enabled) { as_cuda(backend).set_graphs(enabled); }
void cuda_backend_break_captures(Backend& backend, bool broken) { as_cuda(backend).break_captures(broken); }
void cuda_backend_set_fused_epilogues(Backend& backend, bool enabled) { as_cuda(backend).set_fused_epilogues(enabled); }
bool cuda_backend_set_small_batch_forward(Backend& backend, bool enabled) {
    return as_cuda(backend).set_small_batch_forward(enabled);
}
bool cuda_backend_set_small_batch_backward_data(Backend& backend, bool enabled) {
    return as_cuda(backend).set_small_batch_backward_data(enabled);
}
bool cuda_backend_set_dependent_launch(Backend& backend, bool enabled) {
    return as_cuda(backend).set_dependent_launch(enabled);
}
bool cuda_backend_dependent_launch(const Backend& backend) { return as_cuda(backend).dependent_launch(); }
CudaGemmAutotune cuda_backend_gemm_autotune(const Backend& backend) {
    const CudaGemm& gemm = as_cuda(backend).gemm();
    CudaGemmAutotune report;
    report.enabled = gemm.autotune();
    report.timed_plans = gemm.timed_plans();
    report.retuned_plans = gemm.retuned_plans();
    report.saved_us = gemm.autotune_saved_us();
    report.last_untimed = gemm.last_untimed();
    return report;
}
uint64_t cuda_backend_plans_kept_whole_by_size(const Backend& backend) {
    return as_cuda(backend).gemm().plans_kept_whole_by_size();
}
bool cuda_backend_fused_epilogues(const Backend& backend) { return as_cuda(backend).fused_epilogues(); }
void cuda_backend_set_grouped_sgd(Backend& backend, bool enabled) { as_cuda(backend).set_grouped_sgd(enabled); }
void cuda_backend_set_step_folds(Backend& backend, bool enabled) { as_cuda(backend).set_step_folds(enabled); }
void cuda_backend_set_head_layer_cluster(Backend& backend, bool enabled) {
    as_cuda(backend).set_head_layer_cluster(enabled);
}
int cuda_backend_head_layer_max_blocks(const Backend& backend) { return as_cuda(backend).head_layer_max_blocks(); }

}  // namespace mpt
