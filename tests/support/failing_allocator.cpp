// See failing_allocator.h. Defines malloc and friends in the executable, as allocation_counter.cpp
// does (libc_allocators.h).
#include "failing_allocator.h"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>

#include "libc_allocators.h"

namespace {

std::atomic<bool> g_armed{false};
std::atomic<uint64_t> g_counted{0};
std::atomic<uint64_t> g_target{0};
std::atomic<bool> g_failed{false};

// Whether this allocation is the one to fail.
bool fail_this_one() {
    if (!g_armed.load(std::memory_order_acquire)) return false;
    if (g_counted.fetch_add(1) + 1 != g_target.load()) return false;
    g_failed.store(true);
    return true;
}

}  // namespace

namespace mpt::testing {

void fail_allocation(uint64_t n) {
    g_counted.store(0);
    g_failed.store(false);
    g_target.store(n);
    g_armed.store(true, std::memory_order_release);
}

uint64_t stop_failing_allocations() {
    g_armed.store(false, std::memory_order_release);
    return g_counted.load();
}

bool allocation_failed() { return g_failed.load(); }

}  // namespace mpt::testing

extern "C" {

void* malloc(size_t size) {
    if (fail_this_one()) {
        errno = ENOMEM;
        return nullptr;
    }
    return __libc_malloc(size);
}

void* calloc(size_t count, size_t size) {
    if (fail_this_one()) {
        errno = ENOMEM;
        return nullptr;
    }
    return __libc_calloc(count, size);
}

void* realloc(void* pointer, size_t size) {
    if (fail_this_one()) {
        errno = ENOMEM;
        return nullptr;
    }
    return __libc_realloc(pointer, size);
}

void* aligned_alloc(size_t alignment, size_t size) {
    if (fail_this_one()) {
        errno = ENOMEM;
        return nullptr;
    }
    return __libc_memalign(alignment, size);
}

int posix_memalign(void** out, size_t alignment, size_t size) {
    if (fail_this_one()) return ENOMEM;
    void* pointer = __libc_memalign(alignment, size);
    if (!pointer) return ENOMEM;
    *out = pointer;
    return 0;
}

}  // extern "C"
