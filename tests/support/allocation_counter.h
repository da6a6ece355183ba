// Counts heap allocations made anywhere in the process (the library included) by interposing
// malloc/calloc/realloc/aligned_alloc/posix_memalign and operator new. Linked into a test or bench
// executable, it proves a training step allocates nothing.
#pragma once

#include <cstdint>

namespace mpt::testing {

uint64_t allocation_count();

}  // namespace mpt::testing
