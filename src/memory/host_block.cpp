// See host_block.h.
#include "memory/host_block.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/error.h"

namespace mpt {

namespace {

constexpr size_t kSmallAlignment = 256;             // what cuBLASLt and the AMX tiles need, and more
constexpr size_t kHugePage = size_t{2} << 20;       // x86-64's and most arm64 kernels' huge page

size_t rounded_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

void* allocate_host_block(size_t bytes) noexcept {
    bytes = std::max<size_t>(bytes, 1);
    if (bytes < kHugePage) return std::aligned_alloc(kSmallAlignment, rounded_up(bytes, kSmallAlignment));
    const size_t rounded = rounded_up(bytes, kHugePage);
    void* block = std::aligned_alloc(kHugePage, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Advice only: a kernel without transparent huge pages says no, and the block works as it is.
    if (block) madvise(block, rounded, MADV_HUGEPAGE);
#endif
    return block;
}

void release_host_block(void* block) noexcept { std::free(block); }

void ScratchBuffer::grow(size_t bytes) {
    release();
    // Charged first, so that a budget refusal allocates nothing.
    if (memory_) {
        try {
            memory_->reserve(bytes);
        } catch (const Error& error) {
            fail(error.status(), std::string("the CPU backend's GEMM scratch (") + std::to_string(bytes) +
                                     " bytes for one thread): " + error.what());
        }
    }
    data_.reset(allocate_host_block(bytes));
    if (!data_) {
        if (memory_) memory_->unreserve(bytes);
        throw std::bad_alloc();
    }
    capacity_ = bytes;
}

void ScratchBuffer::release() noexcept {
    data_.reset();
    if (memory_) memory_->unreserve(capacity_);
    capacity_ = 0;
}

}  // namespace mpt
