// Reader and writer of the safetensors format (Hugging Face): an 8-byte little-endian header length
// N, N bytes of JSON header padded with spaces to a multiple of 8, then the raw little-endian tensor
// data, contiguous and without holes. mptrain stores a CRC32C of every tensor in the header's
// __metadata__ ("mptrain.crc32c.<tensor name>": 8 lowercase hex digits) and one of the header itself
// under "mptrain.crc32c.__metadata__" (see safetensors_header_checksum_key); other readers ignore them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace mpt {

// Bytes per element of a safetensors dtype name ("F32" -> 4, "BF16" -> 2), 0 for names mptrain
// does not know or cannot hold (the sub-byte "F4", "F6_E2M3", "F6_E3M2"). Thread-safe.
size_t safetensors_dtype_size(const std::string& dtype);

// The metadata key under which a tensor's checksum is stored.
std::string safetensors_checksum_key(const std::string& tensor_name);

// The metadata key of the header's own checksum: "mptrain.crc32c.__metadata__", under the tensors'
// reserved prefix with the one name no tensor can have. Its value is the CRC32C, as 8 lowercase hex
// digits, of the file's first 8 + N bytes (the header length and the whole header with its padding:
// every metadata entry, the tensors' checksums and the tensor table) as they are written, except that
// the value's own 8 digits count as "00000000". The value is found in the header bytes as they stand,
// `"mptrain.crc32c.__metadata__":"` followed by the 8 digits: in valid JSON that text can only be this
// key (a quote inside a string is escaped), so no re-serialisation is needed to check it.
const std::string& safetensors_header_checksum_key();

// One tensor of a file that a SafetensorsReader has validated. `data` points into the reader (valid
// while it lives) and is aligned to the element size when the file keeps the reference layout
// (ours does: larger elements first); copy with memcpy if unsure. `bytes` == product(shape) * size.
struct TensorView {
    std::string dtype;
    std::vector<int64_t> shape;  // [] for a scalar
    const uint8_t* data = nullptr;
    size_t bytes = 0;

    int64_t element_count() const;
};

// Collects tensors and metadata, then writes them as one safetensors file. Misuse (bad dtype, a
// shape that does not match the byte count, a repeated name, text that is not UTF-8) throws
// mpt::Error(MPT_STATUS_INVALID_ARGUMENT). Tensors are laid out largest element size first, then by
// name, so each is aligned to its element size, as the reference writer does. One thread at a time.
class SafetensorsWriter {
public:
    // Copies `bytes` bytes from `data` (which may be null when bytes == 0).
    void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
             const void* data, size_t bytes);
    // Like add() without the copy: `data` must stay valid and unchanged until the last write() or
    // serialize() call returns. For large weights that already sit in host memory.
    void add_borrowed(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                      const void* data, size_t bytes);
    // Sets (or replaces) one __metadata__ entry. Keys starting "mptrain.crc32c." are reserved: the
    // writer stores every tensor's checksum and the header's own there.
    void set_metadata(const std::string& key, const std::string& value);

    // The whole file as bytes (for tests, fuzzing and in-memory use).
    std::vector<uint8_t> serialize() const;
    // Writes the file atomically and durably (see write_file_atomic): on failure, MPT_STATUS_IO_ERROR
    // and the previous file at `path` is untouched.
    void write(const std::string& path) const;

private:
    struct Entry {
        std::string name;
        std::string dtype;
        std::vector<int64_t> shape;
        std::vector<uint8_t> owned;
        const uint8_t* borrowed = nullptr;
        bool is_borrowed = false;
        size_t bytes = 0;
        const uint8_t* data() const { return is_borrowed ? borrowed : owned.data(); }
    };
    struct Layout {
        std::vector<const Entry*> order;  // data order
        std::string header;               // JSON padded with spaces to a multiple of 8
        uint8_t header_length[8];
    };

    Entry& add_entry(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                     const void* data, size_t bytes);
    Layout layout() const;

    std::vector<Entry> entries_;
    std::set<std::string> names_;
    std::map<std::string, std::string> metadata_;
};

// A validated safetensors file held in memory. Nothing is exposed until the whole file has been
// checked: header length, JSON syntax and types, dtypes, shapes (with overflow checks), offsets (in
// bounds, no overlaps, no holes, no trailing bytes), duplicate keys (rejected, unlike the reference
// reader), unknown fields in a tensor entry (rejected) and every checksum present: the header's own
// first, before anything in the header is believed. Any defect throws
// mpt::Error(MPT_STATUS_CORRUPT_DATA) with a message naming it. Move-only; const methods are
// thread-safe.
class SafetensorsReader {
public:
    static constexpr uint64_t max_header_bytes = 100'000'000;  // the reference implementation's limit
    static constexpr uint64_t default_max_file_bytes = uint64_t(64) << 30;
    static constexpr size_t max_rank = 64;

    // Reads and validates a file. With `require_checksums`, a tensor without a stored checksum is
    // also an error (files from other writers have none). A missing or unreadable file gives
    // MPT_STATUS_IO_ERROR; a file over `max_file_bytes`, MPT_STATUS_CORRUPT_DATA.
    static SafetensorsReader open(const std::string& path, bool require_checksums = true,
                                  uint64_t max_file_bytes = default_max_file_bytes);
    // Validates bytes already in memory; the first overload copies them, the second takes them.
    static SafetensorsReader parse(const uint8_t* bytes, size_t size, bool require_checksums);
    static SafetensorsReader parse(std::vector<uint8_t> file_bytes, bool require_checksums);

    SafetensorsReader(SafetensorsReader&&) = default;
    SafetensorsReader& operator=(SafetensorsReader&&) = default;
    SafetensorsReader(const SafetensorsReader&) = delete;
    SafetensorsReader& operator=(const SafetensorsReader&) = delete;

    // All of __metadata__, including the tensors' "mptrain.crc32c.<name>" entries but not the header's
    // own checksum, which belongs to the bytes rather than the content (a writer that lays the same
    // content out differently stores another): header_checksummed() says whether it was there.
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // Whether the header carried its own checksum (and so passed it). Files of other writers, and
    // mptrain's before the header had one, do not.
    bool header_checksummed() const { return header_checksummed_; }
    bool has(const std::string& name) const { return tensors_.count(name) != 0; }
    // Throws MPT_STATUS_CORRUPT_DATA when the file has no tensor of that name.
    const TensorView& tensor(const std::string& name) const;
    std::vector<std::string> names() const;  // sorted
    const std::map<std::string, TensorView>& tensors() const { return tensors_; }

private:
    SafetensorsReader() = default;

    std::vector<uint8_t> file_;  // the views point into this buffer
    std::map<std::string, std::string> metadata_;
    std::map<std::string, TensorView> tensors_;
    bool header_checksummed_ = false;
};

}  // namespace mpt
