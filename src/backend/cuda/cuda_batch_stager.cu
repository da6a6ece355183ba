// See cuda_batch_stager.cuh.
#include "backend/cuda/cuda_batch_stager.cuh"

#include <cstring>

#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_gather.cuh"
#include "backend/cuda/cuda_scheduler.cuh"

namespace mpt {

CudaBatchStager::CudaBatchStager(CudaBackend& backend, CudaScheduler& scheduler)
    : backend_(backend), scheduler_(scheduler) {
    for (Slot& slot : slots_) {
        const cudaError_t status = cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming);
        if (status != cudaSuccess) {
            for (Slot& created : slots_)
                if (created.done) discard_cuda_error(cudaEventDestroy(created.done));
            MPT_CUDA_CHECK(status);
        }
    }
}

CudaBatchStager::~CudaBatchStager() {
    for (Slot& slot : slots_) {
        if (slot.in_use) discard_cuda_error(cudaEventSynchronize(slot.done));
        backend_.release_host(slot.pinned);
        backend_.release_scratch(slot.device);
        discard_cuda_error(cudaEventDestroy(slot.done));
    }
}

void CudaBatchStager::reserve(Slot& slot, size_t bytes) {
    if (bytes <= slot.capacity) return;
    backend_.release_host(slot.pinned);
    backend_.release_scratch(slot.device);
    slot.pinned = slot.device = nullptr;
    slot.capacity = 0;
    slot.pinned = backend_.allocate_host(bytes);
    slot.device = backend_.allocate_scratch(bytes);
    slot.capacity = bytes;
}

void CudaBatchStager::gather(const GatherArgs& args, cudaStream_t stream) {
    if (args.rows == 0) return;
    Slot& slot = slots_[next_++ % 2];
    // The host is about to overwrite the slot's pinned bytes and the device buffer may be read on
    // another stream next: the slot's previous batch must be through its gather kernel.
    if (slot.in_use) {
        if (!event_passed(slot.done)) {
            scheduler_.count_host_sync();
            MPT_CUDA_CHECK(cudaEventSynchronize(slot.done));
        }
        slot.in_use = false;
    }
    const size_t row_bytes = static_cast<size_t>(args.features) * (args.samples_are_u8 ? 1 : sizeof(float));
    const size_t rows = static_cast<size_t>(args.rows);
    const size_t target_row_bytes = static_cast<size_t>(args.target_width) * sizeof(float);
    const size_t sample_bytes = round_up_256(rows * row_bytes);
    const size_t label_bytes = args.labels ? round_up_256(rows * sizeof(int32_t)) : 0;
    const size_t target_bytes = args.targets ? round_up_256(rows * target_row_bytes) : 0;
    const size_t weight_bytes = args.row_weights ? rows * sizeof(float) : 0;
    const size_t total = sample_bytes + label_bytes + target_bytes + weight_bytes;
    reserve(slot, total);

    char* pinned = static_cast<char*>(slot.pinned);
    const char* samples = static_cast<const char*>(args.samples);
    for (size_t r = 0; r < rows; ++r) {
        const int64_t position = args.first + static_cast<int64_t>(r);
        const size_t source = static_cast<size_t>(args.host_order ? args.host_order[position] : position);
        std::memcpy(pinned + r * row_bytes, samples + source * row_bytes, row_bytes);
        if (args.labels)
            std::memcpy(pinned + sample_bytes + r * sizeof(int32_t), args.labels + source, sizeof(int32_t));
        if (args.targets)
            std::memcpy(pinned + sample_bytes + label_bytes + r * target_row_bytes, args.targets + source * args.target_width,
                        target_row_bytes);
        if (args.row_weights)
            std::memcpy(pinned + sample_bytes + label_bytes + target_bytes + r * sizeof(float), args.row_weights + source,
                        sizeof(float));
    }
    MPT_CUDA_CHECK(cudaMemcpyAsync(slot.device, slot.pinned, total, cudaMemcpyHostToDevice, stream));

    // The staged rows are in batch order: gather them with the identity order.
    char* device = static_cast<char*>(slot.device);
    GatherArgs staged = args;
    staged.streamed = false;
    staged.host_order = nullptr;
    staged.order = nullptr;
    staged.first = 0;
    staged.samples = device;
    staged.labels = args.labels ? reinterpret_cast<const int32_t*>(device + sample_bytes) : nullptr;
    staged.targets = args.targets ? reinterpret_cast<const float*>(device + sample_bytes + label_bytes) : nullptr;
    staged.row_weights =
        args.row_weights ? reinterpret_cast<const float*>(device + sample_bytes + label_bytes + target_bytes) : nullptr;
    run_gather(staged, stream);
    MPT_CUDA_CHECK(cudaEventRecord(slot.done, stream));
    slot.in_use = true;
}

}  // namespace mpt
