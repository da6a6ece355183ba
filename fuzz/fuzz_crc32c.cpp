// libFuzzer target for CRC32C: the slicing-by-8 implementation must equal the bitwise definition on
// any input, whole and split at any point (the first byte chooses the split).
// fuzz-options: -max_len=1024
#include <cstdint>
#include <cstdlib>

#include "io/crc32c.h"

namespace {

uint32_t bitwise_crc32c(const uint8_t* bytes, size_t size) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < size; ++i) {
        crc ^= bytes[i];
        for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint32_t expected = bitwise_crc32c(data, size);
    if (mpt::crc32c(data, size) != expected) std::abort();
    if (size > 0) {
        const size_t split = data[0] % (size + 1);
        if (mpt::crc32c_extend(mpt::crc32c(data, split), data + split, size - split) != expected) std::abort();
    }
    return 0;
}
