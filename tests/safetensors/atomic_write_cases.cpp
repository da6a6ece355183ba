// test_safetensors: atomic writes under injected and real failures (every step, the file size limit,
// read-only and missing directories, stale temporaries), and a child process SIGKILLed while
// checkpointing, which leaves the old file or the new one, never a torn one.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "safetensors/harness.h"

using namespace mpt_test::safetensors;

TEST_CASE("an atomic write creates, then replaces, a file and leaves no temporaries") {
    TempDir dir;
    const std::string target = dir.file("data.bin");
    const Bytes first(1000, 0x11), second(77, 0x22);
    mpt::write_file_atomic(target, first.data(), first.size());
    CHECK(slurp(target) == first);
    const uint8_t head[3] = {1, 2, 3};
    mpt::write_file_atomic(target, {{head, 3}, {second.data(), second.size()}, {nullptr, 0}});
    Bytes expected = {1, 2, 3};
    expected.insert(expected.end(), second.begin(), second.end());
    CHECK(slurp(target) == expected);
    CHECK(mpt::read_file(target, 1000) == expected);
    CHECK(directory_entries(dir.path.string()) == std::vector<std::string>{"data.bin"});

    // A path without a directory part goes to the working directory (checked in a child).
    const int code = run_in_child([&] {
        if (::chdir(dir.path.string().c_str()) != 0) return 2;
        mpt::write_file_atomic("relative.bin", head, 3);
        return mpt::read_file("relative.bin", 3) == Bytes{1, 2, 3} ? 0 : 1;
    });
    CHECK(code == 0);
    CHECK(directory_entries(dir.path.string()) == std::vector<std::string>{"data.bin", "relative.bin"});
}

mpt::AtomicWriteStep fault_step;
int fault_on_call = 0, fault_calls = 0, fault_errno = 0;

int inject_fault(mpt::AtomicWriteStep step) {
    if (step != fault_step) return 0;
    return ++fault_calls == fault_on_call ? fault_errno : 0;
}

TEST_CASE("a failure at any step of an atomic write keeps the old file and removes the temporary") {
    TempDir dir;
    const std::string target = dir.file("ckpt.safetensors");
    SafetensorsWriter old_writer;
    old_writer.set_metadata("version", "old");
    old_writer.write(target);
    const Bytes old_file = slurp(target);

    SafetensorsWriter writer;
    const Bytes payload(1 << 16, 0x33);
    writer.add("p", "U8", {int64_t(payload.size())}, payload.data(), payload.size());
    using Step = mpt::AtomicWriteStep;
    const struct {
        Step step;
        int call;
        int error;
        const char* name;
    } faults[] = {
        {Step::open_temp, 1, EACCES, "open"},      {Step::write, 1, ENOSPC, "first write"},
        {Step::write, 3, ENOSPC, "a later write"}, {Step::write, 2, EIO, "write EIO"},
        {Step::sync_file, 1, EIO, "fsync"},        {Step::sync_file, 1, ENOSPC, "fsync ENOSPC"},
        {Step::close_file, 1, EIO, "close"},       {Step::rename, 1, EXDEV, "rename"},
    };
    for (const auto& fault : faults) {
        INFO(fault.name);
        fault_step = fault.step;
        fault_on_call = fault.call;
        fault_calls = 0;
        fault_errno = fault.error;
        mpt::set_atomic_write_fault_hook(inject_fault);
        const Outcome outcome = outcome_of([&] { writer.write(target); });
        mpt::set_atomic_write_fault_hook(nullptr);
        CHECK(fault_calls >= fault.call);  // the fault was reached
        CHECK(outcome.status == MPT_STATUS_IO_ERROR);
        CHECK(outcome.message.find(std::strerror(fault.error)) != std::string::npos);
        CHECK(slurp(target) == old_file);
        CHECK(directory_entries(dir.path.string()) == std::vector<std::string>{"ckpt.safetensors"});
    }

    // After the rename the new file is in place; a failing directory sync is still reported.
    fault_step = Step::sync_directory;
    fault_on_call = 1;
    fault_calls = 0;
    fault_errno = EIO;
    mpt::set_atomic_write_fault_hook(inject_fault);
    const Outcome late = outcome_of([&] { writer.write(target); });
    mpt::set_atomic_write_fault_hook(nullptr);
    CHECK(late.status == MPT_STATUS_IO_ERROR);
    CHECK(slurp(target) == writer.serialize());
    CHECK(directory_entries(dir.path.string()) == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("a write that hits the file size limit midway fails with IO_ERROR and keeps the old file") {
    TempDir dir;
    const std::string target = dir.file("ckpt.safetensors");
    const Bytes old_file = {'o', 'l', 'd'};
    put_file(target, old_file);
    // A real kernel error in the middle of write(): EFBIG from RLIMIT_FSIZE, in a child so that the
    // limit and the ignored SIGXFSZ do not touch the test process.
    const int code = run_in_child([&] {
        ::signal(SIGXFSZ, SIG_IGN);
        const rlimit limit{1 << 16, 1 << 16};
        if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
        SafetensorsWriter writer;
        const Bytes payload(1 << 20, 0x44);
        writer.add("p", "U8", {int64_t(payload.size())}, payload.data(), payload.size());
        const Outcome outcome = outcome_of([&] { writer.write(target); });
        if (outcome.status != MPT_STATUS_IO_ERROR) return 3;
        return outcome.message.find(std::strerror(EFBIG)) != std::string::npos ? 0 : 4;
    });
    CHECK(code == 0);
    CHECK(slurp(target) == old_file);
    CHECK(directory_entries(dir.path.string()) == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("writing into a read-only directory fails with IO_ERROR and keeps the old file") {
    TempDir dir;
    const std::string locked = dir.file("locked");
    REQUIRE(::mkdir(locked.c_str(), 0755) == 0);
    const std::string target = locked + "/ckpt.safetensors";
    const Bytes old_file = {'o', 'l', 'd'};
    put_file(target, old_file);
    REQUIRE(::chmod(locked.c_str(), 0555) == 0);
    REQUIRE(::chmod(dir.path.string().c_str(), 0755) == 0);
    // Root ignores directory permissions, so the write runs in a child that drops to "nobody".
    const int code = run_in_child([&] {
        if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
            return 2;
        const Bytes payload(100, 0x55);
        const Outcome outcome = outcome_of([&] { mpt::write_file_atomic(target, payload.data(), payload.size()); });
        if (outcome.status != MPT_STATUS_IO_ERROR) return 3;
        return outcome.message.find(std::strerror(EACCES)) != std::string::npos ? 0 : 4;
    });
    CHECK(code == 0);
    CHECK(slurp(target) == old_file);
    CHECK(directory_entries(locked) == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("writing into a missing directory or over a directory fails with IO_ERROR") {
    TempDir dir;
    const uint8_t byte = 1;
    const Outcome missing = outcome_of([&] { mpt::write_file_atomic(dir.file("no/such/dir/f"), &byte, 1); });
    CHECK(missing.status == MPT_STATUS_IO_ERROR);
    CHECK(missing.message.find(std::strerror(ENOENT)) != std::string::npos);
    CHECK(outcome_of([&] { mpt::write_file_atomic(dir.path.string() + "/", &byte, 1); }).status == MPT_STATUS_IO_ERROR);
    CHECK(outcome_of([&] { mpt::write_file_atomic("", &byte, 1); }).status == MPT_STATUS_IO_ERROR);
    REQUIRE(::mkdir(dir.file("sub").c_str(), 0755) == 0);
    CHECK(outcome_of([&] { mpt::write_file_atomic(dir.file("sub"), &byte, 1); }).status == MPT_STATUS_IO_ERROR);
    CHECK(directory_entries(dir.path.string()) == std::vector<std::string>{"sub"});
}

TEST_CASE("stale temporaries of one target are removed, and nothing else") {
    TempDir dir;
    for (const char* name :
         {"ckpt.st", ".ckpt.st.tmp-1-2-3", ".ckpt.st.tmp-9-9-9", ".other.tmp-1-2-3", "ckpt.st.tmp-x"}) {
        put_file(dir.file(name), {1});
    }
    CHECK(mpt::remove_stale_temp_files(dir.file("ckpt.st")) == 2);
    CHECK(directory_entries(dir.path.string()) ==
          std::vector<std::string>{".other.tmp-1-2-3", "ckpt.st", "ckpt.st.tmp-x"});
}

namespace {

// An 8 MiB checkpoint whose every word follows from its sequence number and position, cheaply, so
// that most of a write is spent writing; a mix of two checkpoints cannot match either formula.
constexpr size_t payload_words = (8u << 20) / 4;

void fill_payload(uint64_t sequence, std::vector<uint32_t>& words) {
    words.resize(payload_words);
    const auto salt = static_cast<uint32_t>(sequence * 0x85EBCA77u + 0x165667B1u);
    for (size_t i = 0; i < payload_words; ++i) words[i] = static_cast<uint32_t>(i) * 0x9E3779B1u ^ salt;
}

void write_checkpoint(const std::string& path, uint64_t sequence, std::vector<uint32_t>& scratch) {
    fill_payload(sequence, scratch);
    SafetensorsWriter writer;
    writer.add_borrowed("payload", "U32", {int64_t(payload_words)}, scratch.data(), payload_words * 4);
    const auto step = static_cast<int64_t>(sequence);
    writer.add("step", "I64", {}, &step, sizeof step);
    writer.set_metadata("sequence", std::to_string(sequence));
    writer.write(path);
}

// The sequence number of a complete, intact checkpoint; fails the test otherwise.
uint64_t check_checkpoint(const std::string& path, std::vector<uint32_t>& expected) {
    const SafetensorsReader reader = SafetensorsReader::open(path, true);
    const uint64_t sequence = std::stoull(reader.metadata().at("sequence"));
    int64_t step;
    REQUIRE(reader.tensor("step").bytes == sizeof step);
    std::memcpy(&step, reader.tensor("step").data, sizeof step);
    REQUIRE(uint64_t(step) == sequence);
    const mpt::TensorView& payload = reader.tensor("payload");
    REQUIRE(payload.bytes == payload_words * 4);
    fill_payload(sequence, expected);
    REQUIRE(std::memcmp(payload.data, expected.data(), payload.bytes) == 0);
    return sequence;
}

// In the checkpointing child: reports on a pipe each step of the atomic write it reaches, so that
// the parent can kill it at a chosen point as well as at random times.
int checkpoint_signal_fd = -1;

int signal_write_step(mpt::AtomicWriteStep step) {
    using Step = mpt::AtomicWriteStep;
    const char code = step == Step::write            ? 'w'
                      : step == Step::sync_file      ? 's'
                      : step == Step::sync_directory ? 'd'
                                                     : 0;
    if (code != 0 && ::write(checkpoint_signal_fd, &code, 1) != 1) ::_exit(3);
    return 0;
}

// Reads the child's step reports until `code` arrives; false if the child dies or 10 s pass first.
bool wait_for_step(int fd, char code) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd ready{fd, POLLIN, 0};
        if (::poll(&ready, 1, static_cast<int>(left.count())) <= 0) continue;
        char got = 0;
        const ssize_t n = ::read(fd, &got, 1);
        if (n == 1 && got == code) return true;
        if (n == 0) return false;  // the child died
        if (n < 0 && errno != EINTR) return false;
    }
}

}  // namespace

TEST_CASE("a process killed at random points while checkpointing leaves the old or the new file, never a torn one") {
    TempDir dir;
    const std::string target = dir.file("ckpt.safetensors");
    std::vector<uint32_t> scratch;
    const auto started = std::chrono::steady_clock::now();
    write_checkpoint(target, 0, scratch);
    const double one_write = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const double window = std::min(2.5 * one_write, 0.3);  // kill anywhere in a few writes, a few seconds in all

    // Kills cycle through: a random time; as the temporary is being written ('w'); once it is
    // complete and being synced ('s'); after the rename, while the directory is synced ('d').
    const char modes[] = {'r', 'w', 'r', 's', 'r', 'd'};
    std::mt19937 random(2024);
    uint64_t last = check_checkpoint(target, scratch);
    int advanced = 0, torn_temporaries = 0;
    // 18 kills, or fewer (at least one round of six) on a machine so slow that they take over 8 s.
    int kills = 0;
    for (int kill_index = 0; kill_index < 18; ++kill_index, ++kills) {
        if (kill_index >= 6 && std::chrono::steady_clock::now() - started > std::chrono::seconds(8)) break;
        const char mode = modes[kill_index % 6];
        int fds[2];
        REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
        std::fflush(nullptr);
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            ::close(fds[0]);
            checkpoint_signal_fd = fds[1];
            mpt::set_atomic_write_fault_hook(signal_write_step);
            try {
                std::vector<uint32_t> child_scratch;
                for (uint64_t sequence = last + 1;; ++sequence) write_checkpoint(target, sequence, child_scratch);
            } catch (...) {
            }
            ::_exit(1);  // only reached when a write failed
        }
        ::close(fds[1]);
        if (mode == 'r') {
            std::this_thread::sleep_for(
                std::chrono::duration<double>(std::uniform_real_distribution<double>(0.0, window)(random)));
        } else {
            CHECK(wait_for_step(fds[0], mode));
        }
        REQUIRE(::kill(child, SIGKILL) == 0);
        int status = 0;
        REQUIRE(::waitpid(child, &status, 0) == child);
        ::close(fds[0]);
        INFO("kill ", kill_index, " in mode ", mode);
        REQUIRE(WIFSIGNALED(status));  // killed, not failed

        const uint64_t sequence = check_checkpoint(target, scratch);
        CHECK(sequence >= last);
        if (mode == 'd') CHECK(sequence > last);  // killed after a rename: the new file is in place
        if (sequence > last) ++advanced;
        last = sequence;
        const size_t stale = mpt::remove_stale_temp_files(target);
        CHECK(stale <= 1);
        torn_temporaries += static_cast<int>(stale);
    }
    CHECK(directory_entries(dir.path.string()) == std::vector<std::string>{"ckpt.safetensors"});
    // Evidence that kills landed both between writes and in the middle of them.
    CHECK(advanced > 0);
    CHECK(torn_temporaries > 0);
    MESSAGE(kills, " kills (one write took ", one_write * 1000, " ms): the checkpoint advanced ", advanced,
            " times, reached sequence ", last, "; ", torn_temporaries, " kills left a half-written temporary");
}
