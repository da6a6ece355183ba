// Scratch buffers for the participants of one ThreadPool's loops, one per participant and use:
// participant 0 is the thread that calls parallel_for, participant i the pool's worker i (each
// runs its own chunk, so no two threads share a buffer). They belong to the pool, and so to the
// backend that owns it: thread_local buffers stayed with the threads, the caller's after every
// context was gone, and no context's budget counted them (for the seed MLP on AMX: about 1 MiB at
// batch 32, 6-9 MiB at batch 256). Charged to a MemoryTracker when one is given.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "memory/host_block.h"
#include "memory/memory_tracker.h"

namespace mpt {

// What a buffer is for: uses that may be alive at once on one thread need different ones.
enum class ScratchUse {
    small_gemm_rows,   // small_gemm: op(A')'s rows, packed (caller)
    amx_whole_side,    // amx_gemm: the side packed whole (caller)
    amx_own_blocks,    // amx_gemm: a task's own blocks
    amx_sums,          // amx_gemm: a task's fp32 sums (strips or groups)
    portable_a,        // portable_sgemm: a tile's A panel
    portable_b,        // portable_sgemm: a tile's B panel
    rounded_bias,      // CpuBackend::dense_forward: the bias rounded to its dtype (caller)
    clip_gram,         // CpuBackend::clip_factor_from_batch: two Gram matrices, a scaled copy (caller)
    count
};

class WorkerScratch {
public:
    explicit WorkerScratch(int participants) : buffers_(static_cast<size_t>(participants)) {}

    // Where every buffer's bytes are charged (what they hold moves there).
    void charge_to(MemoryTracker* memory) {
        for (auto& uses : buffers_)
            for (ScratchBuffer& buffer : uses) buffer.charge_to(memory);
    }
    ScratchBuffer& buffer(int participant, ScratchUse use) {
        return buffers_[static_cast<size_t>(participant)][static_cast<size_t>(use)];
    }
    // Frees every buffer (outside the pool's loops only).
    void release() noexcept {
        for (auto& uses : buffers_)
            for (ScratchBuffer& buffer : uses) buffer.release();
    }
    // Bytes held by all buffers.
    size_t bytes() const {
        size_t total = 0;
        for (const auto& uses : buffers_)
            for (const ScratchBuffer& buffer : uses) total += buffer.capacity();
        return total;
    }

private:
    std::vector<std::array<ScratchBuffer, static_cast<size_t>(ScratchUse::count)>> buffers_;
};

}  // namespace mpt
