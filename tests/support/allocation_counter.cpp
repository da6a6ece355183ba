// See allocation_counter.h. glibc lets an executable define malloc and friends and forward to the
// __libc_* entry points; every shared library (libstdc++'s operator new included) then resolves to
// these definitions.
#include "allocation_counter.h"

#include <atomic>
#include <cstddef>
#include <cstdlib>

#include "libc_allocators.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}

namespace mpt::testing {
uint64_t allocation_count() { return g_allocations.load(std::memory_order_relaxed); }
}  // namespace mpt::testing

extern "C" {

void* malloc(size_t size) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(size);
}

void* calloc(size_t count, size_t size) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_calloc(count, size);
}

void* realloc(void* pointer, size_t size) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_realloc(pointer, size);
}

void* aligned_alloc(size_t alignment, size_t size) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_memalign(alignment, size);
}

int posix_memalign(void** out, size_t alignment, size_t size) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    void* pointer = __libc_memalign(alignment, size);
    if (!pointer) return 12;  // ENOMEM
    *out = pointer;
    return 0;
}

}  // extern "C"
