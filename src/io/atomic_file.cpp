// POSIX implementation of the atomic write (temp file + fsync + rename + directory fsync) and of
// the bounded read. Every system call is checked; EINTR is retried; partial writes are continued.
#include "io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <chrono>

#include "core/error.h"

namespace mpt {
namespace {

std::atomic<AtomicWriteFaultHook> fault_hook{nullptr};
std::atomic<uint64_t> temp_counter{0};

// Returns the injected errno for `step` (0: none) and sets errno to it.
int injected_fault(AtomicWriteStep step) {
    const AtomicWriteFaultHook hook = fault_hook.load(std::memory_order_acquire);
    if (hook == nullptr) return 0;
    const int error = hook(step);
    if (error != 0) errno = error;
    return error;
}

[[noreturn]] void fail_io(const std::string& what, const std::string& path, int error) {
    fail(MPT_STATUS_IO_ERROR, what + " '" + path + "': " + std::strerror(error));
}

std::string directory_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

std::string file_name_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "dir/.name.tmp-" for "dir/name": temporaries are hidden and name the file they will replace.
std::string temp_prefix(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    const std::string directory_part = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
    return directory_part + "." + file_name_of(path) + ".tmp-";
}

// A file descriptor closed on scope exit unless released.
class FileDescriptor {
public:
    explicit FileDescriptor(int fd) : fd_(fd) {}
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    ~FileDescriptor() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }
    int release() {
        const int fd = fd_;
        fd_ = -1;
        return fd;
    }

private:
    int fd_;
};

void write_all(int fd, const ByteSpan& piece, const std::string& temp_path) {
    const auto* bytes = static_cast<const uint8_t*>(piece.data);
    size_t left = piece.size;
    constexpr size_t max_chunk = size_t(1) << 30;  // Linux caps one write() at just under 2 GiB
    while (left > 0) {
        if (injected_fault(AtomicWriteStep::write) != 0) fail_io("cannot write", temp_path, errno);
        const ssize_t written = ::write(fd, bytes, std::min(left, max_chunk));
        if (written < 0) {
            if (errno == EINTR) continue;
            fail_io("cannot write", temp_path, errno);
        }
        if (written == 0) fail_io("cannot write", temp_path, EIO);
        bytes += written;
        left -= static_cast<size_t>(written);
    }
}

void sync_directory(const std::string& directory, const std::string& path) {
    if (injected_fault(AtomicWriteStep::sync_directory) != 0) {
        fail_io("renamed but could not sync the directory of", path, errno);
    }
    FileDescriptor fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0) fail_io("renamed but could not open the directory of", path, errno);
    // Some file systems cannot sync directories (EINVAL); the rename is then as durable as it gets.
    if (::fsync(fd.get()) != 0 && errno != EINVAL) {
        fail_io("renamed but could not sync the directory of", path, errno);
    }
}

}  // namespace

void set_atomic_write_fault_hook(AtomicWriteFaultHook hook) { fault_hook.store(hook, std::memory_order_release); }

void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& pieces) {
    if (path.empty() || path.back() == '/') fail(MPT_STATUS_IO_ERROR, "not a file path: '" + path + "'");

    // pid + counter make the name unique among live writers; the clock part keeps it from matching
    // a stale file left by an earlier process with the same pid. O_EXCL turns a collision into a retry.
    std::string temp_path;
    int raw_fd = -1;
    for (int attempt = 0; attempt < 16 && raw_fd < 0; ++attempt) {
        const auto clock = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
        char suffix[64];
        std::snprintf(suffix, sizeof suffix, "%ld-%llu-%08llx", static_cast<long>(::getpid()),
                      static_cast<unsigned long long>(temp_counter.fetch_add(1)), (clock * 0x9E3779B97F4A7C15ull) >> 32);
        temp_path = temp_prefix(path) + suffix;
        if (injected_fault(AtomicWriteStep::open_temp) != 0) fail_io("cannot create a temporary file for", path, errno);
        raw_fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (raw_fd < 0 && errno != EEXIST && errno != EINTR) fail_io("cannot create a temporary file for", path, errno);
    }
    if (raw_fd < 0) fail_io("cannot create a temporary file for", path, EEXIST);

    FileDescriptor fd(raw_fd);
    bool renamed = false;
    try {
        for (const ByteSpan& piece : pieces) write_all(fd.get(), piece, temp_path);
        if (injected_fault(AtomicWriteStep::sync_file) != 0 || ::fsync(fd.get()) != 0) {
            fail_io("cannot sync", temp_path, errno);
        }
        // close() can report a deferred write error (NFS); after it the descriptor is gone either way.
        if (injected_fault(AtomicWriteStep::close_file) != 0) fail_io("cannot close", temp_path, errno);
        if (::close(fd.release()) != 0) fail_io("cannot close", temp_path, errno);
        if (injected_fault(AtomicWriteStep::rename) != 0 || ::rename(temp_path.c_str(), path.c_str()) != 0) {
            fail_io("cannot rename the temporary file onto", path, errno);
        }
        renamed = true;
        sync_directory(directory_of(path), path);
    } catch (...) {
        if (!renamed) ::unlink(temp_path.c_str());
        throw;
    }
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
    write_file_atomic(path, std::vector<ByteSpan>{ByteSpan{data, size}});
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not regular).
    FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd.get() < 0) fail_io("cannot open", path, errno);
    struct stat info;
    if (::fstat(fd.get(), &info) != 0) fail_io("cannot stat", path, errno);
    if (!S_ISREG(info.st_mode)) fail(MPT_STATUS_IO_ERROR, "not a regular file: '" + path + "'");
    const auto size = static_cast<uint64_t>(info.st_size);
    if (size > max_bytes) {
        fail(MPT_STATUS_CORRUPT_DATA, "file '" + path + "' has " + std::to_string(size) + " bytes, more than the " +
                                          std::to_string(max_bytes) + " allowed");
    }
    std::vector<uint8_t> bytes(static_cast<size_t>(size));
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t got = ::read(fd.get(), bytes.data() + done, std::min(bytes.size() - done, size_t(1) << 30));
        if (got < 0) {
            if (errno == EINTR) continue;
            fail_io("cannot read", path, errno);
        }
        if (got == 0) fail(MPT_STATUS_IO_ERROR, "file '" + path + "' shrank while it was being read");
        done += static_cast<size_t>(got);
    }
    return bytes;
}

std::vector<std::string> list_directory(const std::string& directory) {
    struct Listing {
        DIR* handle;
        ~Listing() { ::closedir(handle); }  // also when a name cannot be stored
    };
    DIR* handle = ::opendir(directory.c_str());
    if (handle == nullptr) fail_io("cannot list the directory", directory, errno);
    const Listing listing{handle};
    std::vector<std::string> names;
    for (;;) {
        errno = 0;  // readdir returns null both at the end and on an error, which only errno tells apart
        const dirent* entry = ::readdir(listing.handle);
        if (entry == nullptr) {
            if (errno != 0) fail_io("cannot list the directory", directory, errno);
            return names;
        }
        if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0)
            names.emplace_back(entry->d_name);
    }
}

size_t remove_stale_temp_files(const std::string& path) {
    const std::string full_prefix = temp_prefix(path);
    const std::string prefix = full_prefix.substr(full_prefix.find_last_of('/') + 1);
    const std::string directory_part = full_prefix.substr(0, full_prefix.size() - prefix.size());
    size_t removed = 0;
    for (const std::string& name : list_directory(directory_of(path))) {
        if (name.compare(0, prefix.size(), prefix) == 0 && ::unlink((directory_part + name).c_str()) == 0) ++removed;
    }
    return removed;
}

}  // namespace mpt
