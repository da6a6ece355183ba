// Makes one chosen heap allocation fail, anywhere in the process (the library, libstdc++'s operator
// new, which then throws std::bad_alloc), by interposing malloc/calloc/realloc/aligned_alloc/
// posix_memalign. Linked into a test executable, it shows that every allocation the library makes
// can fail without terminating the process.
#pragma once

#include <cstdint>

namespace mpt::testing {

// From now on, count allocations and make the `n`-th one fail (n >= 1), once.
void fail_allocation(uint64_t n);
// Stop counting; returns how many allocations were counted since fail_allocation.
uint64_t stop_failing_allocations();
// Whether the chosen allocation was reached (and failed) since fail_allocation.
bool allocation_failed();

}  // namespace mpt::testing
