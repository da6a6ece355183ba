// The emulated threads as ThreadSanitizer's threads, so that it checks a kernel for data races the
// way compute-sanitizer's racecheck would on a GPU: two threads that touch the same shared or global
// byte, one of them writing, with no synchronisation of CUDA's between them.
//
// Why: the emulation runs one fiber at a time and switches only where CUDA threads wait for each
// other, so a missing __syncthreads or cluster barrier usually goes unseen there (the reader simply
// runs after the writer), and most sessions have no GPU to run racecheck on. Under ThreadSanitizer
// every fiber is a thread of its own (__tsan_create_fiber), every switch carries no ordering
// (__tsan_switch_to_fiber_no_sync), and the only happens-before edges are those CUDA gives, made
// here by release and acquire on an address of each synchronisation object:
// - a block's barrier, a warp collective's lanes, a cluster's barrier: each arrival releases, each
//   thread acquires once the barrier lets it go;
// - an mbarrier: arrivals and bulk copies release, a completed wait acquires;
// - fences and atomics, as PTX orders them (relaxed atomics; emulated_device.h): a thread's writes
//   before its __threadfence are released by its atomic writes after it, and a fence acquires what
//   was released at the atomics before it (its thread's, and its block's before a barrier it passed);
// - a block's start and end: the scheduler's setup reaches its threads, and their work reaches the
//   scheduler, and from it the next block of the same lane (below) and the stream that launched it;
// - streams and events (emulated_runtime.cpp): a stream's work runs on a thread of the stream's own,
//   which knows what the host did before issuing it and what was recorded before the events it waits
//   on; the host knows a stream's work once it has synchronised with the stream, an event recorded
//   on it, or the device (the legacy default stream runs as the host itself).
// A grid's blocks (its clusters, where it has them) are dealt to two lanes in turn (a grid's first
// block to each lane by turns), each an OS thread that runs its share one after another
// (emulated_threads.cpp, Lane), and nothing but the kernel's atomics and fences orders one lane's
// blocks with the other's. So what it checks is the races inside a block (shared memory, and global
// memory between its threads), between a cluster's blocks, which run side by side, and between two
// blocks of a grid that fall into different lanes, as any two next to each other in the blocks'
// order do (not blocks 0 and 2, say). A missing __threadfence before an atomic that hands writes over
// is seen, and one after it on the reading side; a fence of too narrow a scope is not. Between
// streams, and between a stream and the host, a missing event, wait or synchronisation is seen.
//
// emulated_threads.cpp, the emulation's own bookkeeping, is compiled without instrumentation (what
// the scheduler and the fibers share is ordered by the switches, which ThreadSanitizer is told
// nothing of), and its own mutexes are kept out of the happens-before order; so is mma_m16n8k16.cpp,
// a warp's mma over its lanes' registers, whose cache of the operands is left out by OwnMemory too.
// The kernels' files and the tests are instrumented (tests/CMakeLists.txt:
// test_cuda_emulated_kernels_race_check), less the sums the kernel cases expect over host arrays
// (emulated_kernels/reference_sums.cpp). Without MPT_EMULATION_RACE_CHECK (the bookkeeping's file)
// or ThreadSanitizer's instrumentation (the others), everything here is a no-op.
#pragma once

#include <cstddef>

#if defined(MPT_EMULATION_RACE_CHECK) || defined(__SANITIZE_THREAD__)
#define MPT_EMULATION_RACE_CHECKED 1
#include <sanitizer/tsan_interface.h>
extern "C" {
// ThreadSanitizer's dynamic annotations (its runtime defines them; no header declares them) and its
// instrumentation's read of 2 bytes, for a read the emulation makes on a kernel's behalf.
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
void __tsan_read2(void* address);
}
#endif

namespace mpt_emulation::race_check {

#if defined(MPT_EMULATION_RACE_CHECKED)
constexpr bool kEnabled = true;
// The calling OS thread's own identity (its scheduler's), a new one for a fiber, and its end.
inline void* current_identity() { return __tsan_get_current_fiber(); }
inline void* new_identity() { return __tsan_create_fiber(0); }
inline void destroy_identity(void* identity) { __tsan_destroy_fiber(identity); }
// Immediately before a switch of stacks to the fiber (or scheduler) of `identity`: no ordering.
inline void switching_to(void* identity) { __tsan_switch_to_fiber(identity, __tsan_switch_to_fiber_no_sync); }
inline void release(const void* object) { __tsan_release(const_cast<void*>(object)); }
inline void acquire(const void* object) { __tsan_acquire(const_cast<void*>(object)); }
// A read of 2 bytes the emulation makes for the calling thread (ldmatrix's rows).
inline void read_2_bytes(const void* address) { __tsan_read2(const_cast<void*>(address)); }
// For a scope: the emulation's own mutexes and condition variables order nothing of the kernel's.
struct OwnSynchronisation {
    OwnSynchronisation() { AnnotateIgnoreSyncBegin(__FILE__, __LINE__); }
    ~OwnSynchronisation() { AnnotateIgnoreSyncEnd(__FILE__, __LINE__); }
    OwnSynchronisation(const OwnSynchronisation&) = delete;
    OwnSynchronisation& operator=(const OwnSynchronisation&) = delete;
};
// For a scope of instrumented code: what it reads and writes is the emulation's, not the kernel's.
struct OwnMemory {
    OwnMemory() {
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    }
    ~OwnMemory() {
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    }
    OwnMemory(const OwnMemory&) = delete;
    OwnMemory& operator=(const OwnMemory&) = delete;
};
#else
constexpr bool kEnabled = false;
inline void* current_identity() { return nullptr; }
inline void* new_identity() { return nullptr; }
inline void destroy_identity(void*) {}
inline void switching_to(void*) {}
inline void release(const void*) {}
inline void acquire(const void*) {}
inline void read_2_bytes(const void*) {}
struct OwnSynchronisation {
    OwnSynchronisation() {}  // (user-provided: a guard no compiler calls unused)
};
struct OwnMemory {
    OwnMemory() {}
};
#endif

// For a scope of the emulation's bookkeeping under its own mutex (a hand-over's fields, the pools):
// neither that mutex's order nor what the scope reads and writes is the kernel's.
struct OwnBookkeeping {
    OwnSynchronisation synchronisation;
    OwnMemory memory;
};

}  // namespace mpt_emulation::race_check
