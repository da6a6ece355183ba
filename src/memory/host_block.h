// Host memory for the CPU backend's large, long-lived buffers (arenas, GEMM packing). Blocks of
// 2 MiB or more are aligned to 2 MiB and Linux is asked to back them with transparent huge pages
// (madvise MADV_HUGEPAGE; most distributions enable them only on request). The GEMMs read weights
// 128 bytes per row, rows 12 KiB apart, and write weight gradients the same way: with 4 KiB pages
// nearly every such access misses the TLB. Smaller blocks, and hosts that refuse the advice, get
// ordinary pages; nothing else differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "memory/memory_tracker.h"

namespace mpt {

// At least `bytes` (one if 0), aligned to 256 bytes or more; nullptr when the memory is not there.
void* allocate_host_block(size_t bytes) noexcept;
// Frees what allocate_host_block returned; nullptr is ignored.
void release_host_block(void* block) noexcept;

// Owns a host block: released when it goes.
struct HostBlockRelease {
    void operator()(void* block) const noexcept { release_host_block(block); }
};
using HostBlock = std::unique_ptr<void, HostBlockRelease>;

// Grow-only, 256-byte-aligned scratch (one per thread and use, e.g. in a GEMM; worker_scratch.h
// keeps them per thread-pool participant): steady-state training allocates nothing. With a
// MemoryTracker, its capacity is charged there: reserve throws Error(MPT_STATUS_OUT_OF_MEMORY)
// past the budget; without, std::bad_alloc when memory runs out.
class ScratchBuffer {
public:
    ScratchBuffer() = default;
    ~ScratchBuffer() { release(); }
    ScratchBuffer(const ScratchBuffer&) = delete;
    ScratchBuffer& operator=(const ScratchBuffer&) = delete;

    // Where its bytes are charged (nullptr: nowhere); what it holds already moves there.
    void charge_to(MemoryTracker* memory) {
        if (memory == memory_) return;
        if (memory) memory->reserve(capacity_);
        if (memory_) memory_->unreserve(capacity_);
        memory_ = memory;
    }

    template <typename T>
    T* reserve(int64_t count) {
        const size_t bytes = static_cast<size_t>(count) * sizeof(T);
        if (bytes > capacity_) grow(bytes);
        return static_cast<T*>(data_.get());
    }

    size_t capacity() const { return capacity_; }
    // Frees the block (and its charge); the next reserve allocates again.
    void release() noexcept;

private:
    void grow(size_t bytes);

    HostBlock data_;
    size_t capacity_ = 0;
    MemoryTracker* memory_ = nullptr;
};

}  // namespace mpt
