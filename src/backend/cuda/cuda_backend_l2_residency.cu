// CudaBackend's L2-resident masters (MPTRAIN_CUDA_L2_RESIDENT_MASTERS=1; l2_resident_masters.h says
// why): per recorded task, the share of each fused SGD update's fp32 masters that its kernel loads
// and stores with L2's evict-last priority, and L2's persisting set-aside that holds them. The shares
// follow from the task's updates (their signed sizes and dtypes) and the device, so equal signatures
// keep equal shares; they are signed all the same (cuda_backend_signature.cu).
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/l2_resident_masters.h"
#include "core/dtype.h"

namespace mpt {

namespace {

// The persisting set-aside is a limit of the device's context (the primary context every CUDA
// backend of the process shares), not of one backend: raised to the largest share a live backend
// asked for, and put back as it was found when the last backend that raised it goes, unless
// something else has changed it since. The calls are never made under a capture of this backend's;
// another library capturing in cudaStreamCaptureModeGlobal on another thread meanwhile could see them
// refused (then the masters stream as by default).
struct SharedSetAside {
    int users = 0;     // live backends that raised it
    size_t found = 0;  // the limit before the first of them raised it
    size_t set = 0;    // what it was last raised to
};
std::mutex set_aside_mutex;
std::map<int, SharedSetAside>& set_asides() {  // by device
    // Never destroyed: a backend freed by a static's destructor or at exit may still restore.
    static auto* by_device = new std::map<int, SharedSetAside>();
    return *by_device;
}

}  // namespace

bool CudaBackend::set_l2_resident_masters(bool enabled) {
    l2_resident_masters_ = enabled && l2_set_aside_max_ > 0;
    return l2_resident_masters_;
}

void CudaBackend::keep_masters_in_l2() {
    if (!l2_resident_masters_) return;  // (each op's plan, made as it was issued, keeps none)
    // Every step: the vectors are members, reused (no heap allocation in a steady-state step).
    std::vector<size_t>& updates = l2_updates_;
    std::vector<l2_residency::LayerBytes>& layers = l2_layers_;
    l2_residency::KeptMasters& kept = l2_kept_;
    updates.clear();
    layers.clear();
    for (size_t index = 0; index < recorded_.size(); ++index) {
        const RecordedOp& op = recorded_[index];
        if (op.code != OpCode::dense_update || !op.update_plan.fused_sgd) continue;
        const DenseUpdateArgs& update = op.update;
        const int64_t values = update.out_features * update.in_features + update.out_features;
        l2_residency::LayerBytes bytes;
        // A kernel without a kept variant streams its masters: they take no share, its copies do.
        if (fused_sgd_keeps_masters_in_l2(update)) bytes.masters = values * static_cast<int64_t>(sizeof(float));
        bytes.copies = update.low_weights ? values * static_cast<int64_t>(dtype_size(update.compute_dtype)) : 0;
        updates.push_back(index);
        layers.push_back(bytes);
    }
    if (updates.empty()) return;
    l2_residency::choose_into(layers, l2_bytes_, l2_set_aside_max_, kept);
    if (kept.kept_bytes == 0) return;
    const int64_t granted = reserve_l2_set_aside(kept.kept_bytes);
    // A device that grants less than asked (its steps, or a refusal: 0) keeps what that holds.
    if (granted < kept.kept_bytes) l2_residency::choose_into(layers, l2_bytes_, granted, kept);
    for (size_t l = 0; l < updates.size(); ++l) {
        recorded_[updates[l]].update_plan.l2_kept_fraction = kept.fractions[l];
        if (kept.fractions[l] > 0.0f) ++op_paths_.fused_sgd_masters_in_l2;
    }
}

int64_t CudaBackend::reserve_l2_set_aside(int64_t bytes) {
    const size_t wanted = static_cast<size_t>(bytes);
    if (wanted <= l2_set_aside_) return static_cast<int64_t>(l2_set_aside_);  // every step but the first
    const std::lock_guard<std::mutex> lock(set_aside_mutex);
    activate();
    size_t current = 0;
    if (cudaDeviceGetLimit(&current, cudaLimitPersistingL2CacheSize) != cudaSuccess) {
        cudaGetLastError();
        l2_resident_masters_ = false;
        return 0;
    }
    SharedSetAside& shared = set_asides()[device_];
    if (current < wanted) {
        // Refused under MPS (the server sets it when it starts) or MIG: the masters stream as by default.
        if (cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, wanted) != cudaSuccess) {
            cudaGetLastError();
            l2_resident_masters_ = false;
            return 0;
        }
        if (shared.users == 0) shared.found = current;
        if (cudaDeviceGetLimit(&current, cudaLimitPersistingL2CacheSize) != cudaSuccess) {
            cudaGetLastError();
            current = wanted;  // (it was set; what the device rounded it to is unknown)
        }
        shared.set = current;
        // Granted less (the device's steps, or its own ceiling): later tasks ask no more than that.
        if (current < wanted) l2_set_aside_max_ = static_cast<int64_t>(current);
    } else if (shared.users == 0) {
        // Large enough already, and not by a backend of this process: nothing of ours to put back.
        l2_set_aside_ = current;
        return static_cast<int64_t>(current);
    }
    // Raised by this backend, or by another one still alive, whose restore must then wait for this one.
    if (!raised_l2_set_aside_) ++shared.users;
    raised_l2_set_aside_ = true;
    l2_set_aside_ = current;  // what the device holds now, granted or found
    return static_cast<int64_t>(current);
}

void CudaBackend::restore_l2_set_aside() noexcept {
    if (!raised_l2_set_aside_) return;
    const std::lock_guard<std::mutex> lock(set_aside_mutex);
    const auto found = set_asides().find(device_);
    if (found == set_asides().end()) return;
    SharedSetAside& shared = found->second;
    if (--shared.users > 0) return;
    size_t current = 0;
    if (cudaDeviceGetLimit(&current, cudaLimitPersistingL2CacheSize) == cudaSuccess && current == shared.set &&
        current != shared.found) {
        discard_cuda_error(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, shared.found));
        // The lines kept so far go back to normal priority for whatever runs next.
        discard_cuda_error(cudaCtxResetPersistingL2Cache());
    }
    cudaGetLastError();
}

}  // namespace mpt
