// libFuzzer target for the safetensors reader: any input must either parse or be rejected with
// MPT_STATUS_CORRUPT_DATA, never crash or read out of bounds; what parses must survive a round trip
// through the writer unchanged.
// fuzz-options: -max_len=4096 -dict=fuzz/safetensors.dict
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const mpt::SafetensorsReader reader = mpt::SafetensorsReader::parse(data, size, false);

        // Touch every exposed byte, so a view that strays outside the file shows under ASan.
        uint32_t sum = 0;
        for (const auto& [name, view] : reader.tensors()) {
            for (size_t i = 0; i < view.bytes; ++i) sum += view.data[i];
            if (static_cast<uint64_t>(view.element_count()) * mpt::safetensors_dtype_size(view.dtype) != view.bytes) std::abort();
        }
        if (sum == 0xFFFFFFFFu) std::abort();  // keeps the loop from being optimised away

        mpt::SafetensorsWriter writer;
        const std::string checksum_prefix = mpt::safetensors_checksum_key("");
        for (const auto& [key, value] : reader.metadata()) {
            if (key.compare(0, checksum_prefix.size(), checksum_prefix) != 0) writer.set_metadata(key, value);
        }
        for (const auto& [name, view] : reader.tensors()) writer.add(name, view.dtype, view.shape, view.data, view.bytes);
        const mpt::SafetensorsReader again = mpt::SafetensorsReader::parse(writer.serialize(), true);
        if (again.names() != reader.names()) std::abort();
        for (const auto& [name, view] : reader.tensors()) {
            const mpt::TensorView& copy = again.tensor(name);
            if (copy.dtype != view.dtype || copy.shape != view.shape || copy.bytes != view.bytes ||
                (view.bytes != 0 && std::memcmp(copy.data, view.data, view.bytes) != 0)) {
                std::abort();
            }
        }
        for (const auto& [key, value] : reader.metadata()) {
            if (again.metadata().at(key) != value) std::abort();
        }
    } catch (const mpt::Error& error) {
        // Only the reader may refuse, and only as corrupt data: a writer error would mean the reader
        // accepted something the writer cannot express.
        if (error.status() != MPT_STATUS_CORRUPT_DATA) std::abort();
    }
    return 0;
}
