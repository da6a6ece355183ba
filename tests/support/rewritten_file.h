// Rewrites an mptrain file (a model or a checkpoint) with valid checksums, which the C API tests
// cannot make: its metadata (each value through `edit`, when given; an empty result drops the key)
// and the tensors `keep` accepts, then whatever `add` adds. For internal tests of what loaders
// refuse: a damaged file's checksums would refuse it before the part under test is read.
#pragma once

#include <functional>
#include <string>

#include "io/safetensors.h"

namespace mpt_test {

inline void rewrite_file(const std::string& source, const std::string& destination,
                         const std::function<bool(const std::string& tensor)>& keep,
                         const std::function<void(mpt::SafetensorsWriter&)>& add = {},
                         const std::function<std::string(const std::string& key, const std::string& value)>& edit = {}) {
    const mpt::SafetensorsReader reader = mpt::SafetensorsReader::open(source, true);
    mpt::SafetensorsWriter writer;
    const std::string checksum_prefix = mpt::safetensors_checksum_key("");
    for (const auto& [key, value] : reader.metadata()) {
        if (key.compare(0, checksum_prefix.size(), checksum_prefix) == 0) continue;  // the writer makes them again
        const std::string edited = edit ? edit(key, value) : value;
        if (!edited.empty()) writer.set_metadata(key, edited);
    }
    for (const auto& [name, view] : reader.tensors())
        if (keep(name)) writer.add(name, view.dtype, view.shape, view.data, view.bytes);
    if (add) add(writer);
    writer.write(destination);
}

// Every tensor.
inline bool all_tensors(const std::string&) { return true; }

}  // namespace mpt_test
