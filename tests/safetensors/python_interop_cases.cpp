// test_safetensors: files written here open in Python's safetensors, and files written by Python open
// here (skipped without it).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "safetensors/harness.h"

using namespace mpt_test::safetensors;

namespace {

const char* const interop_script = R"PY(
import sys
import numpy as np
from safetensors import deserialize, safe_open
from safetensors.numpy import save_file

ours, theirs = sys.argv[1], sys.argv[2]

def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

expected = {
    "weights": (np.float32, [2, 3], (np.arange(6) - 2.5) * 0.25),
    "half": (np.float16, [4], [1.0, -2.0, 65504.0, 2.0 ** -14]),
    "steps": (np.int64, [], -1234567890123),
    "empty": (np.float32, [0, 5], []),
    "bytes": (np.uint8, [5], [0, 1, 127, 128, 255]),
    "flags": (np.bool_, [3], [True, False, True]),
    "wide": (np.float64, [2], [1.0 / 3.0, -1e300]),
}
raw = {name: info for name, info in deserialize(open(ours, "rb").read())}  # Rust validation of the whole file
assert sorted(raw) == sorted(list(expected) + ["bf"]), sorted(raw)
for name, (dtype, shape, values) in expected.items():
    array = np.frombuffer(bytes(raw[name]["data"]), dtype=dtype).reshape(raw[name]["shape"])
    assert list(array.shape) == shape, (name, array.shape)
    assert np.array_equal(array, np.array(values, dtype=dtype).reshape(shape)), (name, array)
assert raw["bf"]["dtype"] == "BF16" and raw["bf"]["shape"] == [3]
assert np.frombuffer(bytes(raw["bf"]["data"]), dtype="<u2").tolist() == [0x3F80, 0xC040, 0x7F80]
with safe_open(ours, framework="np") as f:
    metadata = f.metadata()
    assert np.array_equal(f.get_tensor("weights"), ((np.arange(6) - 2.5) * 0.25).astype(np.float32).reshape(2, 3))
assert metadata["arch"] == "mlp 3072-256-10" and metadata["unicode"] == "\u00fcn\u00ef \u2713", metadata
for name in raw:
    assert metadata["mptrain.crc32c." + name] == "%08x" % crc32c(bytes(raw[name]["data"])), name
# The header's own checksum: over the length and header, its 8 digits read as zeros.
file_bytes = open(ours, "rb").read()
prefix = bytearray(file_bytes[:8 + int.from_bytes(file_bytes[:8], "little")])
needle = b'"mptrain.crc32c.__metadata__":"'
digits = prefix.index(needle) + len(needle)
prefix[digits:digits + 8] = b"00000000"
assert metadata["mptrain.crc32c.__metadata__"] == "%08x" % crc32c(bytes(prefix)), metadata

save_file({
    "w": (np.arange(12, dtype=np.float32) * 0.5).reshape(3, 4),
    "i": np.array([-1, 2 ** 40], dtype=np.int64),
    "s": np.array(7, dtype=np.int32),
    "e": np.zeros((0,), dtype=np.float16),
    "h": np.array([0.5, -65504.0], dtype=np.float16),
}, theirs, metadata={"format": "np", "who": "python"})
print("python interop ok")
)PY";

}  // namespace

TEST_CASE("files written here open in Python's safetensors, and files written by Python open here") {
    if (std::system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0) {
        MESSAGE("skipped: python3 with the safetensors and numpy modules is not available");
        return;
    }
    TempDir dir;
    SafetensorsWriter writer;
    float weights[6];
    for (int i = 0; i < 6; ++i) weights[i] = (static_cast<float>(i) - 2.5f) * 0.25f;
    const uint16_t half[4] = {0x3C00, 0xC000, 0x7BFF, 0x0400};  // 1, -2, 65504, 2^-14
    const uint16_t bf[3] = {0x3F80, 0xC040, 0x7F80};            // 1, -3, +inf
    const int64_t steps = -1234567890123;
    const uint8_t bytes[5] = {0, 1, 127, 128, 255};
    const uint8_t flags[3] = {1, 0, 1};
    const double wide[2] = {1.0 / 3.0, -1e300};
    writer.add("weights", "F32", {2, 3}, weights, sizeof weights);
    writer.add("half", "F16", {4}, half, sizeof half);
    writer.add("bf", "BF16", {3}, bf, sizeof bf);
    writer.add("steps", "I64", {}, &steps, sizeof steps);
    writer.add("empty", "F32", {0, 5}, nullptr, 0);
    writer.add("bytes", "U8", {5}, bytes, sizeof bytes);
    writer.add("flags", "BOOL", {3}, flags, sizeof flags);
    writer.add("wide", "F64", {2}, wide, sizeof wide);
    writer.set_metadata("arch", "mlp 3072-256-10");
    writer.set_metadata("unicode", "ünï ✓");
    writer.write(dir.file("ours.safetensors"));

    {
        std::ofstream script(dir.file("interop.py"));
        script << interop_script;
    }
    const std::string command =
        "python3 " + dir.file("interop.py") + " " + dir.file("ours.safetensors") + " " + dir.file("theirs.safetensors");
    REQUIRE(std::system(command.c_str()) == 0);

    const SafetensorsReader reader = SafetensorsReader::open(dir.file("theirs.safetensors"), false);
    CHECK(reader.names() == std::vector<std::string>{"e", "h", "i", "s", "w"});
    CHECK(reader.metadata() == std::map<std::string, std::string>{{"format", "np"}, {"who", "python"}});
    const mpt::TensorView& w = reader.tensor("w");
    CHECK(w.dtype == "F32");
    CHECK(w.shape == std::vector<int64_t>{3, 4});
    REQUIRE(w.bytes == 48);
    for (int i = 0; i < 12; ++i) {
        float value;
        std::memcpy(&value, w.data + 4 * i, 4);
        CHECK(value == static_cast<float>(i) * 0.5f);
    }
    const mpt::TensorView& i64 = reader.tensor("i");
    int64_t integers[2];
    REQUIRE(i64.bytes == sizeof integers);
    std::memcpy(integers, i64.data, sizeof integers);
    CHECK(integers[0] == -1);
    CHECK(integers[1] == (int64_t(1) << 40));
    CHECK(reader.tensor("s").shape.empty());
    CHECK(reader.tensor("s").bytes == 4);
    CHECK(reader.tensor("e").bytes == 0);
    uint16_t h[2];
    REQUIRE(reader.tensor("h").bytes == sizeof h);
    std::memcpy(h, reader.tensor("h").data, sizeof h);
    CHECK(h[0] == 0x3800);  // 0.5
    CHECK(h[1] == 0xFBFF);  // -65504
    // Python's writer stores no checksums.
    const Outcome required = outcome_of([&] { (void)SafetensorsReader::open(dir.file("theirs.safetensors"), true); });
    CHECK(required.status == MPT_STATUS_CORRUPT_DATA);
    CHECK(required.message.find("has no checksum") != std::string::npos);
}
