// Whole-file writes that are atomic and durable (a crash leaves the old file or the new one, never a
// mix), and bounded whole-file reads. Failures throw mpt::Error(MPT_STATUS_IO_ERROR, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpt {

struct ByteSpan {
    const void* data;
    size_t size;
};

// Replaces `path` with the concatenation of `pieces`: writes a uniquely named temporary file in the
// same directory, fsyncs it, renames it over `path` and fsyncs the directory. On any failure the
// temporary is removed and the previous `path` (if any) is untouched; the error is
// MPT_STATUS_IO_ERROR (open, write, ENOSPC, EFBIG, fsync, rename, read-only directory...). If the
// path is a symbolic link, the link itself is replaced. New files get mode 0666 & ~umask.
// Thread-safe; concurrent writers of one path each leave a complete file and the last rename wins.
void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& pieces);
void write_file_atomic(const std::string& path, const void* data, size_t size);

// Reads a whole regular file. Missing, unreadable or non-regular files give MPT_STATUS_IO_ERROR; a
// file larger than `max_bytes` gives MPT_STATUS_CORRUPT_DATA (before anything is allocated).
// Thread-safe.
std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes);

// The names of the entries of `directory`, "." and ".." left out. MPT_STATUS_IO_ERROR when it cannot
// be opened. Unlike std::filesystem's non-throwing directory_iterator (noexcept, yet it allocates),
// running out of memory here throws std::bad_alloc instead of terminating. Thread-safe.
std::vector<std::string> list_directory(const std::string& directory);

// Removes temporaries that write_file_atomic left next to `path` when its process was killed (they
// are named ".<file name>.tmp-*"). Returns how many were removed. Call it only while no other
// thread or process is writing `path`: it would remove that writer's temporary and fail its write.
size_t remove_stale_temp_files(const std::string& path);

// Test seam: when set, the hook runs before each step of write_file_atomic (before every write()
// call for AtomicWriteStep::write); a non-zero return makes that step fail with that errno value,
// as if the system call had. Not for production use; set it only while no write is in flight.
enum class AtomicWriteStep { open_temp, write, sync_file, close_file, rename, sync_directory };
using AtomicWriteFaultHook = int (*)(AtomicWriteStep step);
void set_atomic_write_fault_hook(AtomicWriteFaultHook hook);

}  // namespace mpt
