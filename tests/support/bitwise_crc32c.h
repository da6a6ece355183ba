// The textbook one-bit-at-a-time CRC32C (Castagnoli, reflected polynomial 0x82F63B78), sharing
// nothing with the library's table-driven one: the reference the file tests check it and the files'
// checksums against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mpt_test {

inline uint32_t bitwise_crc32c(const void* data, size_t size) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < size; ++i) {
        crc ^= bytes[i];
        for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

inline uint32_t bitwise_crc32c(const std::string& bytes) { return bitwise_crc32c(bytes.data(), bytes.size()); }

}  // namespace mpt_test
