// The bytes a buffer of backend memory spans, to tell whether two ops' operands share any: the
// executor's arena gives buffers whose lifetimes do not overlap the same bytes, so a backend that
// runs several ops in one launch (grouped fused SGD updates) must check that no operand one part
// writes is one another part still reads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpt {

struct ByteRange {
    uintptr_t begin = 0, end = 0;
    bool overlaps(const ByteRange& other) const { return begin < other.end && other.begin < end; }
};

// [pointer, pointer + elements * element_bytes); empty for a null pointer.
inline ByteRange bytes_of(const void* pointer, int64_t elements, size_t element_bytes) {
    const auto begin = reinterpret_cast<uintptr_t>(pointer);
    return ByteRange{begin, pointer ? begin + static_cast<uintptr_t>(elements) * element_bytes : begin};
}

}  // namespace mpt
