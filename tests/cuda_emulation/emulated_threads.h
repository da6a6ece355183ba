// The threads of an emulated CUDA launch, on the CPU: every thread of a block is a fiber on one OS
// thread, switched only where CUDA threads wait for each other (a block's barrier, a warp's
// collective), so a kernel's code runs as written, compiled for the host (emulated_device.h).
//
// Why: most sessions have no GPU, and a kernel no GPU has run can still be checked for what does not
// depend on the hardware's timing: its indexing, its reductions, the last block's work, its warp
// collectives' masks. The emulation is strict where CUDA leaves things undefined and a GPU would
// often get away with it: a collective whose mask leaves out the calling lane or a lane it reads, or
// a barrier that some threads never reach, fails the launch with a message (a deadlock on a GPU).
//
// What it cannot check: races, unless built under ThreadSanitizer (race_check.h: then each fiber is
// one of its threads, ordered only by CUDA's synchronisation); memory ordering (one fiber runs at a
// time, so every access is sequentially consistent); timing; and code for a specific architecture
// only (under __CUDA_ARCH__, which the host compiler leaves undefined: the instructions without a
// C++ form, the mma, the cluster barrier and map and bulk copies, have emulated forms below). Blocks
// run one at a time, a cluster's side by side, in an order shuffled by a seed: a result that depends
// on the blocks' order shows up as a difference between seeds. (Under the race check, two at a time:
// race_check.h.)
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace mpt_emulation {

// A launch the emulation could not run to its end: a deadlock, a collective misused, a cluster.
struct EmulationError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Runs `thread_body` as every thread of a grid: blocks one at a time in the order `block_order_seed`
// shuffles them into (0: in index order), each block's threads as fibers (under the race check, that
// order dealt to two lanes that run side by side: race_check.h). With clusters of
// `cluster_blocks` > 1 blocks along x (gridDim.x a multiple of it), a cluster at a time instead, its
// blocks side by side, each on an OS thread of its own (each has its own shared memory, and sees
// the others' through map_shared_rank). Throws EmulationError.
void run_grid(dim3 grid, dim3 block, size_t dynamic_shared_bytes, unsigned cluster_blocks,
              const std::function<void()>& thread_body);

// Work issued on a stream (a kernel launch, a copy, a memset): run at once, in issue order (every
// stream is one queue here; under the race check on the stream's own thread, below), or recorded
// while the stream captures a graph (emulated_runtime.cpp) and run each time the graph is launched.
void issue(cudaStream_t stream, std::function<void()> work);

// Under the race check (emulated_runtime.cpp), a stream's work runs on an OS thread of the stream's
// own, which is a ThreadSanitizer thread with its own stack, while the host waits: take one for a
// stream, give it back when the stream goes. run_on_stream_thread runs `work` there, then releases
// each of `released_after`; the blocks of the kernels it launches run in the lanes of `lane_set`
// (0 or 1; the host's own launches run in set 0), so that the lanes' ThreadSanitizer threads carry no
// stream's order into a stream of the other set. (The host's launches carry nothing into set 0's
// streams that the streams' issues do not: what the host did before it issues their work.) Two sets,
// not one a stream: every lane's ThreadSanitizer threads, as many as a block's threads, count against
// its limit of 8128 and cost memory. What work threw is rethrown.
struct StreamThread;
constexpr unsigned kRaceLaneSets = 2;
StreamThread* take_stream_thread();
void give_back_stream_thread(StreamThread* thread);
void run_on_stream_thread(StreamThread& thread, unsigned lane_set, const std::function<void()>& work,
                          std::initializer_list<const void*> released_after);

// The compute capability the emulated device reports (emulated_runtime.cpp), as major * 10 + minor:
// MPTRAIN_EMULATED_COMPUTE_CAPABILITY's, else 80, unless a test sets another (90 for the paths that
// take clusters); returns the previous one. The device's limits follow it (emulated_device_profile.h).
int set_compute_capability(int capability);
int compute_capability();
// The multiprocessors it reports: its profile's (108 at 8.0, 132 at 9.0) unless a test sets fewer, so
// that kernels whose grid is what fits at once give each block a run of several tiles; returns the
// previous setting (0: the profile's).
int set_multiprocessors(int count);
int multiprocessors();

// The seed of the next launches' block order (0 keeps index order); returns the previous one.
uint64_t set_block_order_seed(uint64_t seed);
// Launches run so far by run_grid (tests count them).
uint64_t launches();

// The race check's fences (race_check.h, emulated_device.h): __threadfence by the calling thread;
// before its atomic write at `address`, the release there of what it wrote before its last fence
// (nothing if it has not fenced in this block); after its atomic at `address`, the note that its next
// fence acquires what was released there. No-ops without the race check.
void fence_for_race_check();
void release_fenced_writes(const void* address);
void note_atomic_for_race_check(const void* address);

// The calling fiber's lane in its warp.
unsigned lane_index();

// __syncthreads: every live thread of the block arrives (exited threads count as arrived). Returns
// how many of them passed `predicate` true (__syncthreads_count).
int sync_block(int predicate = 0);
// __syncwarp and the collectives under it: every lane of `mask` arrives, the caller among them;
// lanes past the block's last thread are left out of the mask.
void sync_lanes(unsigned mask);
// A collective exchange: the caller offers `value`, every lane of `mask` does, and each receives the
// offer of lane `source` (its own where source is -1). Offers are up to 8 bytes.
uint64_t exchange(unsigned mask, uint64_t value, int source);
// The lanes of `mask` whose predicate is true (__ballot_sync).
unsigned ballot(unsigned mask, bool predicate);
// A collective that shows every lane of `mask` each other's `bytes` (at most 64): `all` receives
// lane l's at all + l * bytes (lanes outside the mask: untouched).
void gather_lanes(unsigned mask, const void* mine, size_t bytes, void* all);
// The most phases any mbarrier completed in the launches since the last call (a test's check that
// a ring of stages turned over); resets it.
uint64_t take_most_mbarrier_phases();

// The dynamic shared memory a kernel may launch with: 48 KiB unless raised by
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), as on a GPU.
void set_dynamic_shared_limit(const void* kernel, size_t bytes);
size_t dynamic_shared_limit(const void* kernel);

// The calling lane's warp, and how many of its collectives have completed: the same for every lane
// between two collectives of the warp (a result the lanes share can be computed once, by the first).
const void* warp_identity();
uint64_t warp_collectives_completed();

// The block's dynamic shared memory (the launch's bytes, 128-byte aligned, 0xff at the block's
// start as uninitialised memory may be), and 32-bit shared-memory addresses into it, as PTX's
// instructions take them (__cvta_generic_to_shared): an address outside it fails the launch.
unsigned char* dynamic_shared_memory();
uint32_t shared_offset(const void* pointer);

// mbarrier objects in the block's dynamic shared memory, with transaction counts, and bulk copies
// from global memory that complete on them. A copy's destination reads 0xff from its issue until
// it lands, and it lands only when a thread waits on its barrier: a read of a stage before the
// wait, or a refill issued while threads still read the stage, shows up in the results.
void mbarrier_init(uint32_t barrier, unsigned arrivals);
void mbarrier_arrive_expect_tx(uint32_t barrier, uint32_t bytes);
void bulk_copy(uint32_t destination, const void* source, uint32_t bytes, uint32_t barrier);
// Waits (yielding) until the phase of parity `parity` has completed.
void mbarrier_wait_parity(uint32_t barrier, uint32_t parity);
// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: a warp collective; lane 8q + j gives the address
// of row j of matrix q, and register q of lane l receives that matrix's elements (row 2 (l % 4),
// column l / 4) and (row 2 (l % 4) + 1, column l / 4), low half first.
void ldmatrix_x4_trans(uint32_t (&registers)[4], uint32_t address);

// Inside a cluster launch: the cluster's blocks, its barrier (every thread of every block of the
// cluster arrives; exited threads count as arrived), and a pointer to the same shared variable of the
// cluster's block `rank` (distributed shared memory).
unsigned cluster_blocks();  // 1 outside a cluster launch
void sync_cluster();
void* map_shared_rank(void* address, unsigned rank);

// Memory for the emulated device: `bytes` placed so that the first byte is aligned to `alignment`
// plus `offset`, the end as near a page the process may not touch as that allows (an access past it
// faults), the bytes around it filled with 0xff (NaN in every float format: a read of them shows up)
// and checked when it is freed: a write outside the buffer that did not fault ends the process with
// a message.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes, size_t alignment = 256, size_t offset = 0);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return data_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(data_);
    }
    size_t size() const { return bytes_; }

private:
    void* mapping_ = nullptr;
    size_t mapped_bytes_ = 0;
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace mpt_emulation

// CUDA's built-in variables, as the running fiber sees them: whoever resumes a fiber (the scheduler, or
// the fiber before it in the round) sets them first (one runs at a time), so kernels read them as they
// would on a GPU. Names in the
// global namespace as CUDA's are, and no macros (a member may have the same name).
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
