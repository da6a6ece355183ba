// CRC32C (Castagnoli), the checksum stored with every tensor in mptrain's safetensors files. The
// polynomial is the one iSCSI, ext4 and LevelDB use, so values can be checked with standard tools.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpt {

// Extends a CRC32C over `size` more bytes: `crc` is the value returned for the bytes before them
// (0 for none), so crc32c_extend(crc32c(a), b) == crc32c(a followed by b). Thread-safe.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);

inline uint32_t crc32c(const void* data, size_t size) { return crc32c_extend(0, data, size); }

}  // namespace mpt
