// Table-driven CRC32C, slicing-by-8: eight 256-entry tables built at compile time let the loop fold
// eight input bytes per step (about 1-2 GB/s), fast enough to checksum checkpoints as they are read.
#include "io/crc32c.h"

#include <array>
#include <cstring>

namespace mpt {
namespace {

constexpr uint32_t reflected_polynomial = 0x82F63B78u;  // 0x1EDC6F41 with its bits reversed

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
    Tables tables{};
    for (uint32_t byte = 0; byte < 256; ++byte) {
        uint32_t crc = byte;
        for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? reflected_polynomial : 0u);
        tables[0][byte] = crc;
    }
    // tables[k][b] is the CRC of byte b followed by k zero bytes.
    for (uint32_t byte = 0; byte < 256; ++byte) {
        for (int k = 1; k < 8; ++k) {
            const uint32_t previous = tables[k - 1][byte];
            tables[k][byte] = (previous >> 8) ^ tables[0][previous & 0xFFu];
        }
    }
    return tables;
}

constexpr Tables tables = make_tables();

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the 8-byte step below assumes a little-endian host");

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    crc = ~crc;
    while (size >= 8) {
        uint32_t low, high;
        std::memcpy(&low, bytes, 4);
        std::memcpy(&high, bytes + 4, 4);
        low ^= crc;
        crc = tables[7][low & 0xFFu] ^ tables[6][(low >> 8) & 0xFFu] ^ tables[5][(low >> 16) & 0xFFu] ^
              tables[4][low >> 24] ^ tables[3][high & 0xFFu] ^ tables[2][(high >> 8) & 0xFFu] ^
              tables[1][(high >> 16) & 0xFFu] ^ tables[0][high >> 24];
        bytes += 8;
        size -= 8;
    }
    while (size-- > 0) crc = (crc >> 8) ^ tables[0][(crc ^ *bytes++) & 0xFFu];
    return ~crc;
}

}  // namespace mpt
