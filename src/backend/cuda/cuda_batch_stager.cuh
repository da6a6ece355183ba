// Batches of a streamed dataset (one that stays in host memory because it exceeds its device
// budget): the host copies a batch's rows, in the epoch's order, into one of two pinned buffers; an
// asynchronous copy on the current lane's stream (the copy lane during fit) sends them to a device
// buffer, where the ordinary gather kernel normalises them. With two slots the host fills one while
// the other is in flight, and the copy overlaps the compute lane's step.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/backend.h"

namespace mpt {

class CudaBackend;
class CudaScheduler;

class CudaBatchStager {
public:
    CudaBatchStager(CudaBackend& backend, CudaScheduler& scheduler);
    ~CudaBatchStager();
    CudaBatchStager(const CudaBatchStager&) = delete;
    CudaBatchStager& operator=(const CudaBatchStager&) = delete;

    // Stages and gathers `args` (args.streamed) on `stream`. Blocks the host only when the slot's
    // previous batch is still being copied.
    void gather(const GatherArgs& args, cudaStream_t stream);

private:
    struct Slot {
        void* pinned = nullptr;
        void* device = nullptr;
        size_t capacity = 0;
        cudaEvent_t done = nullptr;  // after the slot's last gather kernel
        bool in_use = false;
    };
    void reserve(Slot& slot, size_t bytes);

    CudaBackend& backend_;
    CudaScheduler& scheduler_;
    Slot slots_[2];
    unsigned next_ = 0;
};

}  // namespace mpt
