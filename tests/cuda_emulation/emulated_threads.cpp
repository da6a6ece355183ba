// See emulated_threads.h. A block's threads are fibers (fiber_context.h) on the calling OS thread, run
// in rounds by the block's scheduler loop, each fiber handing on to the next; a fiber gives the CPU up
// only inside a wait (a barrier or a warp collective whose other threads have not arrived), so
// everything between two waits runs as one piece, as a warp's instructions between two
// synchronisations may. A full round of the fibers in which none arrived anywhere, released anything
// or ended is a deadlock.
// A cluster's blocks run side by side on OS threads of their own, each its own scheduler, so that
// each has its own copy of the shared variables (thread-local statics, emulated_device.h); they meet
// at the cluster's barrier, under a mutex, and a block whose fibers all wait there sleeps until
// another block moves the cluster on (a deadlock when none does for seconds).
// Under ThreadSanitizer (race_check.h) the fibers are its threads, and the waits below tell it what
// CUDA's synchronisation orders; a grid's blocks then run in two lanes, OS threads that nothing
// orders with each other (Lane, below); this file itself is not instrumented.
#include "cuda_emulation/emulated_threads.h"

#include "cuda_emulation/emulated_device_profile.h"

#include "cuda_emulation/fiber_context.h"
#include "cuda_emulation/race_check.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace mpt_emulation {

namespace {

constexpr unsigned kWarpSize = 32;
constexpr size_t kStackBytes = 256 * 1024;  // the kernels' locals are registers' worth: ample

size_t page_bytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// The pool of ThreadSanitizer threads the calling OS thread takes from (RaceIdentities): 0 on the
// host's and the streams' threads (which, under the race check, run no block: run_grid), 1 + l on
// lane l's (Lane: 2 a set, kRaceLaneSets sets) and on the OS threads of the clusters it runs.
thread_local unsigned identity_pool = 0;
constexpr unsigned kIdentityPools = 1 + 2 * kRaceLaneSets;
// The lanes the calling thread's launches run in (the host's: 0; a stream thread's: its stream's set).
thread_local unsigned race_lane_set = 0;

// ThreadSanitizer's threads for the fibers (race_check.h), shared by OS threads: a block's fibers take
// theirs as it starts and give them back as it ends, so that a lane and the OS threads that run its
// clusters' other blocks side by side share one pool, as large as the most threads it ever ran at
// once. ThreadSanitizer dies at 8128 threads, makes each release and acquire slower for every thread
// it has, and takes most of a millisecond to make one, so identities are kept, not made anew. A
// thread keeps what it came to know, so one that served a lane's blocks serves that lane again,
// never another lane, whose blocks would then be ordered after this lane's.
class RaceIdentities {
public:
    // `count` identities into `into`, under one lock (a block's worth at its start).
    void take(unsigned pool, size_t count, void** into) {
        if (!race_check::kEnabled) {
            std::fill(into, into + count, nullptr);
            return;
        }
        const race_check::OwnBookkeeping own;
        std::lock_guard<std::mutex> lock(mutex_);
        std::vector<void*>& free = free_[pool];
        for (size_t i = 0; i < count; ++i) {
            if (free.empty()) {
                into[i] = race_check::new_identity();
            } else {
                into[i] = free.back();
                free.pop_back();
            }
        }
    }
    void give_back(unsigned pool, size_t count, void* const* from) {
        if (!race_check::kEnabled) return;
        const race_check::OwnBookkeeping own;
        std::lock_guard<std::mutex> lock(mutex_);
        free_[pool].insert(free_[pool].end(), from, from + count);
    }

private:
    std::mutex mutex_;
    std::vector<void*> free_[kIdentityPools];
};
// (Never destroyed: the OS threads' fence carriers give theirs back as the threads end, the main
// thread's after static objects may be gone.)
RaceIdentities& race_identities() {
    static RaceIdentities* identities = new RaceIdentities;
    return *identities;
}

// A fiber's stack, with a page below it that faults on an overflow.
struct Stack {
    void* mapping = nullptr;
    char* base = nullptr;
    Stack() {
        const size_t page = page_bytes();
        mapping = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mapping == MAP_FAILED) throw std::bad_alloc();
        mprotect(mapping, page, PROT_NONE);
        base = static_cast<char*>(mapping) + page;
    }
    ~Stack() { munmap(mapping, kStackBytes + page_bytes()); }
    Stack(const Stack&) = delete;
    Stack& operator=(const Stack&) = delete;
};

// Addresses of atomics that a fence is yet to acquire (the race check's: fence_for_race_check). A few
// at most (a ticket, a cell or two), held without allocating: the emulation's own memory must not be
// seen by ThreadSanitizer's interceptors as the kernel's.
struct AtomicAddresses {
    static constexpr unsigned kCapacity = 8;
    const void* at[kCapacity] = {};
    unsigned count = 0;
    // False when full (then the caller acquires `address` at once: ordered early, a race may be
    // missed, never one made up).
    bool add(const void* address) {
        for (unsigned i = 0; i < count; ++i)
            if (at[i] == address) return true;
        if (count == kCapacity) return false;
        at[count++] = address;
        return true;
    }
};

struct Fiber {
    FiberContext context;
    void* race_identity = nullptr;  // its thread to ThreadSanitizer (race_check.h), or null
    uint3 index{};
    unsigned linear = 0;
    bool finished = false;
    const char* waiting_at = "";  // what it waits in, for a deadlock's message
    // The race check's fences (release_fenced_writes): whether it has fenced in this block, and what
    // its fences release, its writes before each.
    bool fenced = false;
    char fence_sync = 0;
    // And what its next fence acquires (note_atomic_for_race_check): the addresses of the atomics it
    // has made since its last fence, or that threads of its block made before a barrier it has passed.
    AtomicAddresses atomics_before_fence;
};

constexpr size_t kMaxGatherBytes = 64;

// The lanes of one mask that are inside a collective, and how many times it has released them.
// What the lanes offer one another (exchange, ballot, gather_lanes) is kept by the parity of the
// generation they meet in: a lane writes generation g's offer only after generation g - 1 released
// it, for which every lane had arrived there, so had read generation g - 2's offers, the ones g's
// overwrites. So one meeting a collective suffices, not one to offer and one to have read, which
// halved the fibers' switches in kernels that shuffle. (Kept by mask: a lane may go on from a
// collective of one mask to one of another while its lanes still read what it offered in the first.)
struct LaneGroup {
    unsigned mask = 0;
    unsigned arrived = 0;
    uint64_t generation = 0;
    char sync[2] = {};  // what its lanes release and acquire, by the generation's parity (race_check.h)
    uint64_t offers[2][kWarpSize] = {};
    unsigned char gathered[2][kWarpSize][kMaxGatherBytes] = {};
};

struct Warp {
    unsigned existing = 0;  // lanes the block has (its last warp may be partial)
    unsigned exited = 0;
    std::deque<LaneGroup> groups;   // a few at most: one per mask in use at once (each stays where it is)
    uint64_t completed = 0;         // the collective_serial of its last collective released, any mask
    LaneGroup& group(unsigned mask) {
        for (LaneGroup& g : groups)
            if (g.mask == mask) return g;
        const race_check::OwnMemory own;  // (a list that lanes grow in turn: the emulation's)
        groups.emplace_back();
        groups.back().mask = mask;
        return groups.back();
    }
};

constexpr const char* kAtClusterBarrier = "the cluster barrier";

// What a cluster's blocks share: its barrier, and where each block's shared variables live.
struct ClusterRun {
    explicit ClusterRun(unsigned blocks, unsigned threads_per_block)
        : size(blocks), live(blocks * threads_per_block), tls_bases(blocks, nullptr) {}
    const unsigned size;
    std::mutex mutex;
    std::condition_variable moved;
    unsigned live;  // threads of the cluster not yet ended (under mutex)
    unsigned arrived = 0;
    std::atomic<uint64_t> generation{0};
    std::atomic<uint64_t> epoch{0};  // any arrival, release or end: the cluster moved
    std::atomic<bool> failed{false};
    std::vector<char*> tls_bases;  // each block's OS thread's tls_marker
    std::unique_ptr<std::atomic<bool>[]> ended { new std::atomic<bool>[ size ]() };  // each block's threads all ended
    unsigned registered = 0;
    char barrier_sync[2] = {};  // what its barrier's arrivals release, by the generation's parity

    void release_if_all_arrived() {  // under mutex
        if (arrived > 0 && arrived == live) {
            arrived = 0;
            generation.fetch_add(1);
        }
    }
    void moved_on() {  // under mutex
        epoch.fetch_add(1);
        moved.notify_all();
    }
};

struct PendingCopy {
    uint32_t destination;
    const void* source;
    uint32_t bytes;
};

struct MBarrier {
    unsigned initialised_by = 0;         // the thread that initialised it
    uint64_t initialised_at = 0;         // the block barrier's generation then
    unsigned expected = 0, pending = 0;  // arrivals a phase, and those still missing
    int64_t transactions = 0;            // bytes expected and not yet landed (below 0 before the expectation)
    uint64_t phase = 0;                  // phases completed
    std::vector<PendingCopy> copies;     // issued, not landed
};

struct BlockRun {
    dim3 grid, block;
    uint3 block_index{};
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    unsigned live = 0;
    unsigned arrived = 0;  // at the block barrier
    int passed = 0;        // predicates true among them
    int released_count = 0;
    uint64_t generation = 0;
    uint64_t progress = 0;
    FiberContext scheduler;
    Fiber* current = nullptr;
    std::vector<unsigned> turns;  // the fibers' order in a round of the scheduler (run_block)
    size_t turn = 0;              // the current fiber's place in it
    const std::function<void()>* body = nullptr;
    std::string failure;
    ClusterRun* cluster = nullptr;  // null outside a cluster launch
    size_t dynamic_bytes = 0;
    std::vector<unsigned char> dynamic_storage;  // dynamic_bytes + 128: aligned within
    unsigned char* dynamic_shared = nullptr;
    std::vector<std::pair<uint32_t, MBarrier>> barriers;
    // What race_check.h's edges go through: the scheduler's setup to the block's threads, their
    // work back to it, and the block barrier's arrivals (by its generation's parity).
    char start_sync = 0, end_sync = 0, barrier_sync[2] = {};
    // The arrivals' atomics not yet followed by a fence, which the barrier hands to every thread it
    // lets go (Fiber::atomics_before_fence), by its generation's parity.
    AtomicAddresses barrier_atomics[2];
    void* scheduler_identity = nullptr;
    std::vector<void*> fiber_identities;  // each fiber's ThreadSanitizer thread, while the block runs
};

thread_local BlockRun* current_run = nullptr;
// A thread-local variable whose address locates this OS thread's copy of every other one: static
// thread-local storage has the same layout in every thread, so the same shared variable of another
// block (OS thread) is at the same distance from that thread's marker.
thread_local char tls_marker;
// MPTRAIN_EMULATED_COMPUTE_CAPABILITY=90 in the environment: the GPU test programs on the emulated
// device (tests/CMakeLists.txt) take the paths of compute capability 9.0 (clusters, bulk copies).
int capability_from_environment() {
    const char* value = std::getenv("MPTRAIN_EMULATED_COMPUTE_CAPABILITY");
    const int capability = value ? std::atoi(value) : 0;
    return capability >= 70 && capability <= 120 ? capability : 80;
}
int emulated_capability = capability_from_environment();
int emulated_multiprocessors = 0;  // 0: the profile's (emulated_device_profile.h)
thread_local std::vector<std::unique_ptr<Stack>> stacks;
// Numbers the warp collectives released on this OS thread, across blocks and launches: a warp's last
// one (Warp::completed) then says which collective its lanes are between, whatever the block.
thread_local uint64_t collective_serial = 0;
uint64_t block_order_seed = 0;
uint64_t launch_count = 0;

BlockRun& run() {
    if (!current_run) throw EmulationError("a device function was called outside an emulated launch");
    return *current_run;
}

// Hands the CPU to the scheduler, with nothing that orders the fiber's work before the fiber the
// scheduler resumes next (race_check.h). What a fiber did reaches the scheduler by one release, at
// its end or its failure (or, for a fiber still waiting when its block fails, by the scheduler in
// its name: release_unfinished_fibers), not at every switch, which made the race check up to four
// times slower where threads meet often.
void switch_to_scheduler(BlockRun& r, Fiber& self) {
    race_check::switching_to(r.scheduler_identity);
    switch_context(self.context, r.scheduler);
}

// On to the next fiber of the round that has not ended, or to the scheduler at the round's end: a
// switch to the scheduler and one on from it at every wait were twice the switches, which were most
// of the emulation's time. (Nothing orders the fibers' work here either.)
void hand_on(BlockRun& r, Fiber& self) {
    for (size_t turn = r.turn + 1; turn < r.turns.size(); ++turn) {
        Fiber& next = r.fibers[r.turns[turn]];
        if (next.finished) continue;
        r.turn = turn;
        r.current = &next;
        threadIdx = next.index;
        race_check::switching_to(next.race_identity);
        switch_context(self.context, next.context);
        return;
    }
    switch_to_scheduler(r, self);
}

// To the other fibers, until this one's turn comes again.
void yield(const char* waiting_at) {
    BlockRun& r = run();
    Fiber* self = r.current;
    self->waiting_at = waiting_at;
    hand_on(r, *self);
    self->waiting_at = "";
}

// A misuse found inside a fiber: recorded for the scheduler, which throws it; this fiber is never
// resumed (its stack is simply reused by the next launch).
[[noreturn]] void fail_in_fiber(const std::string& message) {
    BlockRun& r = run();
    if (r.failure.empty()) r.failure = message;
    race_check::release(&r.end_sync);  // the message, which the scheduler reads, and the fiber's work
    for (;;) switch_to_scheduler(r, *r.current);
}

std::string describe_thread(const BlockRun& r, const Fiber& f) {
    return "block (" + std::to_string(r.block_index.x) + "," + std::to_string(r.block_index.y) + "," +
           std::to_string(r.block_index.z) + ") thread (" + std::to_string(f.index.x) + "," +
           std::to_string(f.index.y) + "," + std::to_string(f.index.z) + ")";
}

void release_block_barrier(BlockRun& r) {
    r.released_count = r.passed;
    r.passed = 0;
    r.arrived = 0;
    ++r.generation;
}

void fiber_entry() {
    BlockRun& r = run();
    Fiber& self = *r.current;
    race_check::acquire(&r.start_sync);  // the scheduler's setup of the block, and all before it
    try {
        (*r.body)();
    } catch (const std::exception& error) {
        fail_in_fiber(describe_thread(r, self) + " threw: " + error.what());
    } catch (...) {  // (nothing may unwind past a fiber's entry)
        fail_in_fiber(describe_thread(r, self) + " threw");
    }
    self.finished = true;
    --r.live;
    r.warps[self.linear / kWarpSize].exited |= 1u << (self.linear % kWarpSize);
    ++r.progress;
    // Threads that exited count as arrived at the block barrier, and at the cluster's.
    if (r.arrived > 0 && r.arrived == r.live) release_block_barrier(r);
    if (r.cluster) {
        race_check::OwnSynchronisation own;
        std::lock_guard<std::mutex> lock(r.cluster->mutex);
        --r.cluster->live;
        r.cluster->release_if_all_arrived();
        r.cluster->moved_on();
    }
    race_check::release(&r.end_sync);  // its work, which the scheduler acquires as the block ends
    hand_on(r, self);  // never resumed
}

uint64_t splitmix(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// A block that failed leaves fibers waiting that never reach their end, and the host then frees what
// they read and wrote: their work is released to the scheduler in their names. (ThreadSanitizer's
// identity is switched without a switch of stacks: a release needs no more.)
void release_unfinished_fibers(BlockRun& r) {
    for (const Fiber& f : r.fibers) {
        if (f.finished) continue;
        race_check::switching_to(f.race_identity);
        race_check::release(&r.end_sync);
    }
    race_check::switching_to(r.scheduler_identity);
}

void run_block(BlockRun& r) {
    const unsigned threads = r.block.x * r.block.y * r.block.z;
    r.dynamic_storage.assign(r.dynamic_bytes + 128, 0xff);
    const uintptr_t base = reinterpret_cast<uintptr_t>(r.dynamic_storage.data());
    r.dynamic_shared = r.dynamic_storage.data() + ((128 - base % 128) % 128);
    r.barriers.clear();
    while (stacks.size() < threads) stacks.push_back(std::make_unique<Stack>());
    r.fibers.assign(threads, Fiber{});
    r.warps.assign((threads + kWarpSize - 1) / kWarpSize, Warp{});
    for (unsigned t = 0; t < threads; ++t) r.warps[t / kWarpSize].existing |= 1u << (t % kWarpSize);
    for (unsigned t = 0; t < threads; ++t) {
        Fiber& f = r.fibers[t];
        f.linear = t;
        f.index = make_uint3(t % r.block.x, (t / r.block.x) % r.block.y, t / (r.block.x * r.block.y));
        prepare_context(f.context, stacks[t]->base, kStackBytes, fiber_entry);
    }
    // The fibers' turns in a shuffled order when blocks are (a thread that initialises what others
    // use must not be the one that happens to run first).
    std::vector<unsigned>& turns = r.turns;
    turns.resize(threads);
    for (unsigned t = 0; t < threads; ++t) turns[t] = t;
    if (block_order_seed != 0) {
        uint64_t state = block_order_seed ^ (static_cast<uint64_t>(r.block_index.x) << 20) ^ r.block_index.y;
        for (unsigned t = threads; t > 1; --t) std::swap(turns[t - 1], turns[splitmix(state) % t]);
    }
    r.live = threads;
    r.fiber_identities.resize(threads);
    race_identities().take(identity_pool, threads, r.fiber_identities.data());
    for (unsigned t = 0; t < threads; ++t) r.fibers[t].race_identity = r.fiber_identities[t];
    r.scheduler_identity = race_check::current_identity();
    race_check::release(&r.start_sync);
    // However the block ends, what its threads did reaches the scheduler (and the host) after it.
    struct AtBlockEnd {
        BlockRun& r;
        bool completed = false;
        ~AtBlockEnd() {
            if (!completed) release_unfinished_fibers(r);
            race_check::acquire(&r.end_sync);
            if (completed) {
                race_identities().give_back(identity_pool, r.fiber_identities.size(), r.fiber_identities.data());
            } else {
                // A fiber of a failed block may have left its identity inside a scope in which
                // ThreadSanitizer ignores its accesses (race_check::OwnMemory): none is used again.
                for (void* identity : r.fiber_identities) race_check::destroy_identity(identity);
            }
            r.fiber_identities.clear();
        }
    } at_block_end{r};
    while (r.live > 0) {
        const uint64_t before = r.progress;
        const uint64_t cluster_before = r.cluster ? r.cluster->epoch.load() : 0;
        // A round: every fiber not ended resumed once, in turn, each handing on to the next (hand_on)
        // and the last back here; one that fails comes back at once.
        r.turn = 0;
        while (r.fibers[turns[r.turn]].finished) ++r.turn;
        Fiber& first = r.fibers[turns[r.turn]];
        r.current = &first;
        threadIdx = first.index;
        race_check::switching_to(first.race_identity);
        switch_context(r.scheduler, first.context);
        r.current = nullptr;
        if (!r.failure.empty()) {
            race_check::acquire(&r.end_sync);  // the message, which the fiber wrote
            throw EmulationError(r.failure);
        }
        const bool at_cluster_barrier = std::any_of(r.fibers.begin(), r.fibers.end(), [](const Fiber& f) {
            return !f.finished && f.waiting_at == kAtClusterBarrier;
        });
        if (r.live > 0 && r.progress == before && at_cluster_barrier) {
            // Only the other blocks can move this one on: sleep until the cluster moves.
            ClusterRun& c = *r.cluster;
            race_check::OwnSynchronisation own;
            std::unique_lock<std::mutex> lock(c.mutex);
            const bool moved = c.moved.wait_for(lock, std::chrono::seconds(20),
                                                [&] { return c.epoch.load() != cluster_before || c.failed.load(); });
            if (c.failed.load()) throw EmulationError("another block of the cluster failed");
            if (moved) continue;
        }
        if (r.live > 0 && r.progress == before) {
            std::string message = "deadlock: no thread can go on;";
            int listed = 0;
            for (const Fiber& f : r.fibers) {
                if (f.finished) continue;
                if (++listed > 4) {
                    message += " ...";
                    break;
                }
                message += " " + describe_thread(r, f) + " waits in " + f.waiting_at + ";";
            }
            throw EmulationError(message);
        }
    }
    at_block_end.completed = true;
    // No copy may still be on its way into the block's shared memory, which is gone once it ends.
    for (const auto& entry : r.barriers) {
        const MBarrier& b = entry.second;
        if (!b.copies.empty() || b.transactions != 0 || b.pending != b.expected)
            throw EmulationError("block (" + std::to_string(r.block_index.x) + "," + std::to_string(r.block_index.y) +
                                 ") ended with an mbarrier's phase unfinished (bulk copies not waited for)");
    }
}

}  // namespace

namespace {

// Block b of the grid's blocks in index order (x fastest).
uint3 block_at(const dim3& grid, uint64_t b) {
    return make_uint3(static_cast<unsigned>(b % grid.x), static_cast<unsigned>((b / grid.x) % grid.y),
                      static_cast<unsigned>(b / (static_cast<uint64_t>(grid.x) * grid.y)));
}

// One block of a cluster, on the calling OS thread; every failure is the cluster's.
void run_cluster_block(ClusterRun& cluster, unsigned rank, dim3 grid, dim3 block, size_t dynamic_bytes, uint3 index,
                       const std::function<void()>& thread_body, unsigned pool, std::exception_ptr& error) {
    identity_pool = pool;
    try {
        gridDim = grid;
        blockDim = block;
        blockIdx = index;
        BlockRun r;
        r.grid = grid;
        r.block = block;
        r.dynamic_bytes = dynamic_bytes;
        r.body = &thread_body;
        r.block_index = index;
        r.cluster = &cluster;
        {
            // Every block's shared memory located before any thread of the cluster runs.
            race_check::OwnSynchronisation own;
            std::unique_lock<std::mutex> lock(cluster.mutex);
            cluster.tls_bases[rank] = &tls_marker;
            ++cluster.registered;
            cluster.moved.notify_all();
            cluster.moved.wait(lock, [&] { return cluster.registered == cluster.size; });
        }
        current_run = &r;
        run_block(r);
        current_run = nullptr;
        cluster.ended[rank] = true;
    } catch (...) {
        current_run = nullptr;
        error = std::current_exception();
        race_check::OwnSynchronisation own;
        std::lock_guard<std::mutex> lock(cluster.mutex);
        cluster.failed = true;
        cluster.moved_on();
    }
    // Stay until the whole cluster has ended: another block may still read this one's shared memory.
    race_check::OwnSynchronisation own;
    std::unique_lock<std::mutex> lock(cluster.mutex);
    cluster.moved.wait(lock, [&] { return cluster.live == 0 || cluster.failed.load(); });
}

// The clusters (blocks, where there are none) of `order` one after another on the calling OS thread.
void run_groups(const std::vector<uint64_t>& order, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                unsigned cluster_blocks, const std::function<void()>& thread_body) {
    const unsigned threads = block.x * block.y * block.z;
    if (cluster_blocks > 1) {
        for (const uint64_t g : order) {
            ClusterRun cluster(cluster_blocks, threads);
            std::vector<std::exception_ptr> errors(cluster_blocks);
            // The calling thread runs the first block itself (one OS thread fewer a cluster); each
            // other block, a new OS thread.
            std::vector<std::thread> workers;
            for (unsigned rank = 1; rank < cluster_blocks; ++rank)
                workers.emplace_back(run_cluster_block, std::ref(cluster), rank, grid, block, dynamic_shared_bytes,
                                     block_at(grid, g * cluster_blocks + rank), std::cref(thread_body), identity_pool,
                                     std::ref(errors[rank]));
            run_cluster_block(cluster, 0, grid, block, dynamic_shared_bytes, block_at(grid, g * cluster_blocks),
                              thread_body, identity_pool, errors[0]);
            for (std::thread& worker : workers) worker.join();
            for (const std::exception_ptr& error : errors)
                if (error) std::rethrow_exception(error);
        }
        return;
    }
    BlockRun r;
    r.grid = grid;
    r.block = block;
    r.dynamic_bytes = dynamic_shared_bytes;
    gridDim = grid;
    blockDim = block;
    r.body = &thread_body;
    current_run = &r;
    try {
        for (const uint64_t b : order) {
            r.block_index = block_at(grid, b);
            blockIdx = r.block_index;
            r.arrived = 0;
            r.passed = 0;
            r.generation = 0;
            run_block(r);
        }
    } catch (...) {
        current_run = nullptr;
        throw;
    }
    current_run = nullptr;
}

// An OS thread that runs the work handed to it, one piece at a time, while the thread that hands it
// waits. Nothing orders the two but release and acquire: the hand-over releases what the handing
// thread did before it, which the worker acquires, and the worker releases its work as it returns it,
// which the handing thread acquires if it asks to; the hand-over's own mutex orders nothing
// (race_check::OwnSynchronisation). Its thread ends once the Worker is gone and it is idle.
class Worker {
public:
    explicit Worker(std::function<void()> setup) : state_(std::make_shared<State>()) {
        std::thread([state = state_, setup = std::move(setup)] {
            setup();
            state->serve();
        }).detach();
    }
    ~Worker() {
        const race_check::OwnBookkeeping own;
        std::lock_guard<std::mutex> lock(state_->mutex);
        state_->ending = true;
        state_->changed.notify_all();
    }
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    void start(std::function<void()> work) {
        race_check::release(&state_->handed);
        const race_check::OwnBookkeeping own;
        std::lock_guard<std::mutex> lock(state_->mutex);
        state_->work = std::move(work);
        state_->error = nullptr;
        state_->done = false;
        state_->changed.notify_all();
    }
    // Waits for the work started last, takes back what it did where asked; rethrows what it threw.
    void finish(bool take_back) {
        std::exception_ptr error;
        {
            const race_check::OwnBookkeeping own;
            std::unique_lock<std::mutex> lock(state_->mutex);
            state_->changed.wait(lock, [&] { return state_->done; });
            error = state_->error;
        }
        // (An error's message, which the worker wrote, is read here: taken back with it.)
        if (take_back || error) race_check::acquire(&state_->returned);
        if (error) std::rethrow_exception(error);
    }

private:
    struct State {
        std::mutex mutex;
        std::condition_variable changed;
        std::function<void()> work;
        std::exception_ptr error;
        bool done = true, ending = false;
        char handed = 0, returned = 0;  // what the hand-over and the return go through

        void serve() {
            for (;;) {
                std::function<void()> next;
                {
                    const race_check::OwnBookkeeping own;
                    std::unique_lock<std::mutex> lock(mutex);
                    changed.wait(lock, [&] { return static_cast<bool>(work) || ending; });
                    if (!work) return;
                    next = std::move(work);
                    work = nullptr;
                }
                race_check::acquire(&handed);
                std::exception_ptr thrown;
                try {
                    next();
                } catch (...) {
                    thrown = std::current_exception();
                }
                race_check::release(&returned);
                const race_check::OwnBookkeeping own;
                std::lock_guard<std::mutex> lock(mutex);
                // (Moved, not copied: had this thread kept a reference to drop after the release, the
                // exception could be deleted here while the waiting thread read its message, unordered.)
                error = std::move(thrown);
                done = true;
                changed.notify_all();
            }
        }
    };
    std::shared_ptr<State> state_;
};

// Under the race check, a grid's blocks (its clusters, where it has them) are dealt in their shuffled
// order to two lanes in turn, each lane a Worker that runs its share one after another as the host
// does without the check, and whose work the host takes back. Within a lane, a block's end orders it
// before the lane's next block (through the lane's scheduler, as on the host); between the lanes
// nothing does but the kernel's own synchronisation (its atomics and fences), as between the blocks
// of a grid on a GPU. So a race between two blocks is seen where they fall into different lanes, as
// any two blocks next to each other in the order do (blocks 0 and 1 in index order). Each lane has its
// own shared variables (thread-local statics), fiber stacks and ThreadSanitizer threads: nothing a GPU
// gives each block alone is shared between lanes. A lane's threads come to know what every launch
// handed them, so each of two sets of streams has a pair of lanes of its own (run_on_stream_thread's
// lane set): one stream's blocks are then never ordered after those of a stream of the other set by
// their lanes (a backend's compute and copy streams fall into different sets). Within a set, the
// lane a grid's first block goes to takes turns, so that consecutive grids of one block each, from
// two streams of the set, run unordered too.
class Lane {
public:
    explicit Lane(unsigned number) : worker_([number] { identity_pool = 1 + number; }) {}
    void start(std::function<void()> work) { worker_.start(std::move(work)); }
    void finish() { worker_.finish(true); }

private:
    Worker worker_;
};

void run_in_lanes(const std::vector<uint64_t>& order, const std::function<void(const std::vector<uint64_t>&)>& run) {
    // (Never destroyed: their threads never end.)
    static Lane* const all_lanes[kRaceLaneSets][2] = {{new Lane(0), new Lane(1)}, {new Lane(2), new Lane(3)}};
    static_assert(kRaceLaneSets == 2, "one pair of lanes a set above");
    static std::mutex lanes_in_use;  // (host threads that launch at once take turns)
    // Which lane a grid's first group goes to, by turns in each set (above).
    static unsigned first_lane[kRaceLaneSets] = {};
    const unsigned set = race_lane_set;
    Lane* const* lanes = all_lanes[set];
    std::vector<uint64_t> shares[2];
    struct Turn {
        Turn() {
            const race_check::OwnSynchronisation own;
            lanes_in_use.lock();
        }
        ~Turn() {
            const race_check::OwnSynchronisation own;
            lanes_in_use.unlock();
        }
    } turn;
    const unsigned first_share_lane = first_lane[set]++ % 2;
    for (size_t i = 0; i < order.size(); ++i) shares[(i + first_share_lane) % 2].push_back(order[i]);
    for (int l = 0; l < 2; ++l)
        if (!shares[l].empty()) lanes[l]->start([&run, &shares, l] { run(shares[l]); });
    std::exception_ptr first;
    for (int l = 0; l < 2; ++l) {
        if (shares[l].empty()) continue;
        try {
            lanes[l]->finish();
        } catch (...) {
            if (!first) first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

}  // namespace

void run_grid(dim3 grid, dim3 block, size_t dynamic_shared_bytes, unsigned cluster_blocks,
              const std::function<void()>& thread_body) {
    if (current_run) throw EmulationError("a kernel launched another (dynamic parallelism is not emulated)");
    const uint64_t blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
    const unsigned threads = block.x * block.y * block.z;
    if (blocks == 0 || threads == 0 || threads > 1024)
        throw EmulationError("invalid launch: " + std::to_string(blocks) + " blocks of " + std::to_string(threads) +
                             " threads");
    if (cluster_blocks == 0 || grid.x % cluster_blocks != 0)
        throw EmulationError("invalid launch: clusters of " + std::to_string(cluster_blocks) +
                             " blocks along a grid of " + std::to_string(grid.x));
    if (cluster_blocks > 1 && emulated_capability < 90)
        throw EmulationError("a launch in clusters on an emulated device below compute capability 9.0");
    ++launch_count;
    // Clusters (blocks, where there are none) in a shuffled order.
    const uint64_t groups = blocks / cluster_blocks;
    std::vector<uint64_t> order(groups);
    for (uint64_t g = 0; g < groups; ++g) order[g] = g;
    if (block_order_seed != 0) {
        uint64_t state = block_order_seed;
        for (uint64_t g = groups; g > 1; --g) std::swap(order[g - 1], order[splitmix(state) % g]);
    }
    // Under the race check every grid runs in the lanes, one of a single block too: a block's fibers
    // keep a ThreadSanitizer thread each on the OS thread that runs them, and the lanes are a fixed
    // few, while the streams' threads are as many as streams live at once (ThreadSanitizer dies at
    // 8128 threads).
    if (race_check::kEnabled) {
        run_in_lanes(order, [&](const std::vector<uint64_t>& lane_order) {
            run_groups(lane_order, grid, block, dynamic_shared_bytes, cluster_blocks, thread_body);
        });
        return;
    }
    run_groups(order, grid, block, dynamic_shared_bytes, cluster_blocks, thread_body);
}

int set_compute_capability(int capability) { return std::exchange(emulated_capability, capability); }
int compute_capability() { return emulated_capability; }
int set_multiprocessors(int count) { return std::exchange(emulated_multiprocessors, count); }
int multiprocessors() {
    return emulated_multiprocessors > 0 ? emulated_multiprocessors : current_device_profile().multiprocessors;
}

uint64_t set_block_order_seed(uint64_t seed) { return std::exchange(block_order_seed, seed); }
uint64_t launches() { return launch_count; }

unsigned lane_index() { return run().current->linear % kWarpSize; }

// A stream's thread under the race check: a Worker whose work the host never takes back (the stream's
// synchronisations do: emulated_runtime.cpp). Idle ones wait in a pool for the next stream: a thread
// that ran a destroyed stream's work knows it, which orders nothing that still runs.
struct StreamThread {
    Worker worker{[] {}};
};

namespace {
std::mutex stream_threads_mutex;
std::vector<StreamThread*>& idle_stream_threads() {
    static std::vector<StreamThread*>* idle = new std::vector<StreamThread*>;  // (never destroyed)
    return *idle;
}
}  // namespace

StreamThread* take_stream_thread() {
    {
        const race_check::OwnSynchronisation own;
        std::lock_guard<std::mutex> lock(stream_threads_mutex);
        std::vector<StreamThread*>& idle = idle_stream_threads();
        if (!idle.empty()) {
            StreamThread* thread = idle.back();
            idle.pop_back();
            return thread;
        }
    }
    return new StreamThread;
}

void give_back_stream_thread(StreamThread* thread) {
    if (!thread) return;
    const race_check::OwnSynchronisation own;
    std::lock_guard<std::mutex> lock(stream_threads_mutex);
    idle_stream_threads().push_back(thread);
}

void run_on_stream_thread(StreamThread& thread, unsigned lane_set, const std::function<void()>& work,
                          std::initializer_list<const void*> released_after) {
    thread.worker.start([&work, lane_set, released_after] {
        race_lane_set = lane_set % kRaceLaneSets;
        work();
        for (const void* object : released_after) race_check::release(object);
    });
    thread.worker.finish(false);
}

// Adds `address` to `addresses`, or where they are full, acquires what was released there now.
void add_address(AtomicAddresses& addresses, const void* address) {
    if (!addresses.add(address)) race_check::acquire(address);
}
void add_addresses(AtomicAddresses& into, const AtomicAddresses& from) {
    for (unsigned i = 0; i < from.count; ++i) add_address(into, from.at[i]);
}

void fence_for_race_check() {
    if (!race_check::kEnabled) return;
    Fiber& self = *run().current;
    // The reading side: what other threads released at the addresses of the atomics before the fence
    // (at their own atomics, after their fences) is ordered before what follows it.
    for (unsigned i = 0; i < self.atomics_before_fence.count; ++i) race_check::acquire(self.atomics_before_fence.at[i]);
    self.atomics_before_fence.count = 0;
    race_check::release(&self.fence_sync);
    self.fenced = true;
}

void note_atomic_for_race_check(const void* address) {
    if (!race_check::kEnabled) return;
    add_address(run().current->atomics_before_fence, address);
}

// A fence orders the thread's writes before it ahead of its atomic writes after it, but not the
// writes between the two: so what an atomic write releases is what the thread had written at its
// last fence, not at the atomic. ThreadSanitizer cannot release a past moment of a thread's, so a
// thread of its own on each OS thread, which runs no code, takes the fence's release and releases it
// at the atomic's address. (That thread's knowledge only grows, so an atomic also releases what the OS
// thread's earlier fibers wrote before their fences: ordered before the atomic anyway where they ran
// in an earlier block of the lane or met the atomic's thread at a barrier since; where not, a race is
// missed, never one made up.)
void release_fenced_writes(const void* address) {
    if (!race_check::kEnabled) return;
    Fiber& self = *run().current;
    if (!self.fenced) return;
    struct FenceCarrier {
        const unsigned pool = identity_pool;
        void* identity = nullptr;
        FenceCarrier() { race_identities().take(pool, 1, &identity); }
        ~FenceCarrier() { race_identities().give_back(pool, 1, &identity); }
    };
    thread_local FenceCarrier carrier;
    race_check::switching_to(carrier.identity);
    race_check::acquire(&self.fence_sync);
    race_check::release(address);
    race_check::switching_to(self.race_identity);
}

int sync_block(int predicate) {
    BlockRun& r = run();
    r.passed += predicate ? 1 : 0;
    ++r.arrived;
    ++r.progress;
    const uint64_t generation = r.generation;
    if (race_check::kEnabled) {
        // This parity's list was last read by the threads let go two generations ago, which have all
        // arrived at the generation between since. (An address it has no room for is acquired here,
        // before the release below hands this thread's knowledge on.)
        AtomicAddresses& atomics = r.barrier_atomics[generation & 1];
        if (r.arrived == 1) atomics.count = 0;
        add_addresses(atomics, r.current->atomics_before_fence);
    }
    race_check::release(&r.barrier_sync[generation & 1]);
    if (r.arrived == r.live) {
        release_block_barrier(r);
    } else {
        while (r.generation == generation) yield("__syncthreads");
    }
    race_check::acquire(&r.barrier_sync[generation & 1]);
    if (race_check::kEnabled) add_addresses(r.current->atomics_before_fence, r.barrier_atomics[generation & 1]);
    return r.released_count;
}

namespace {

// The caller's warp, and the group of the lanes of a collective's mask it has, which must include the
// caller and no lane that has exited.
struct Collective {
    BlockRun& r;
    Warp& warp;
    LaneGroup& group;
    const unsigned lane;
    const unsigned parity;  // of the generation the lanes meet in: where they offer (LaneGroup)
};
Collective enter_collective(unsigned mask) {
    BlockRun& r = run();
    const unsigned linear = r.current->linear;
    const unsigned lane = linear % kWarpSize;
    Warp& warp = r.warps[linear / kWarpSize];
    mask &= warp.existing;
    if (!((mask >> lane) & 1u))
        fail_in_fiber(describe_thread(r, *r.current) + " calls a warp collective whose mask leaves it out");
    if (mask & warp.exited)
        fail_in_fiber(describe_thread(r, *r.current) + " calls a warp collective with lanes that have exited");
    LaneGroup& group = warp.group(mask);
    return Collective{r, warp, group, lane, static_cast<unsigned>(group.generation & 1)};
}

// Every lane of the collective's group arrives, the caller among them. Only a __syncwarp orders the
// lanes' memory accesses (race_check.h); a shuffle, a vote or an mma, which meet the same way, order
// none.
enum class Ordering { none, memory };
void meet_lanes(const Collective& c, Ordering ordering) {
    LaneGroup& group = c.group;
    const uint64_t generation = group.generation;
    group.arrived |= 1u << c.lane;
    ++c.r.progress;
    if (ordering == Ordering::memory) race_check::release(&group.sync[generation & 1]);
    if (group.arrived == group.mask) {
        group.arrived = 0;
        ++group.generation;
        c.warp.completed = ++collective_serial;
    } else {
        while (group.generation == generation) yield("a warp collective");
    }
    if (ordering == Ordering::memory) race_check::acquire(&group.sync[generation & 1]);
}

}  // namespace

void sync_lanes(unsigned mask) {
    const Collective c = enter_collective(mask);
    meet_lanes(c, Ordering::memory);
}

uint64_t exchange(unsigned mask, uint64_t value, int source) {
    const Collective c = enter_collective(mask);
    c.group.offers[c.parity][c.lane] = value;
    meet_lanes(c, Ordering::none);
    if (source < 0) return value;
    if (!((c.group.mask >> source) & 1u))
        fail_in_fiber(describe_thread(c.r, *c.r.current) + " reads lane " + std::to_string(source) +
                      " outside its collective's mask");
    return c.group.offers[c.parity][source];
}

unsigned ballot(unsigned mask, bool predicate) {
    const Collective c = enter_collective(mask);
    c.group.offers[c.parity][c.lane] = predicate ? 1u : 0u;
    meet_lanes(c, Ordering::none);
    unsigned votes = 0;
    for (unsigned l = 0; l < kWarpSize; ++l)
        if (((c.group.mask >> l) & 1u) && c.group.offers[c.parity][l]) votes |= 1u << l;
    return votes;
}

void gather_lanes(unsigned mask, const void* mine, size_t bytes, void* all) {
    if (bytes > kMaxGatherBytes) fail_in_fiber("a warp gather of more than 64 bytes a lane");
    const Collective c = enter_collective(mask);
    const race_check::OwnMemory own;  // (lanes' values, as registers are: no memory of the kernel's)
    std::memcpy(c.group.gathered[c.parity][c.lane], mine, bytes);
    meet_lanes(c, Ordering::none);
    for (unsigned l = 0; l < kWarpSize; ++l)
        if ((c.group.mask >> l) & 1u)
            std::memcpy(static_cast<unsigned char*>(all) + l * bytes, c.group.gathered[c.parity][l], bytes);
}

const void* warp_identity() {
    BlockRun& r = run();
    return &r.warps[r.current->linear / kWarpSize];
}

uint64_t warp_collectives_completed() {
    BlockRun& r = run();
    return r.warps[r.current->linear / kWarpSize].completed;
}

unsigned cluster_blocks() {
    BlockRun& r = run();
    return r.cluster ? r.cluster->size : 1;
}

void sync_cluster() {
    BlockRun& r = run();
    if (!r.cluster) {  // a cluster of one block
        sync_block();
        return;
    }
    ClusterRun& c = *r.cluster;
    // (Read before the mutex: the barrier cannot move on before this thread arrives.)
    const uint64_t generation = c.generation.load();
    race_check::release(&c.barrier_sync[generation & 1]);
    {
        race_check::OwnSynchronisation own;  // (under which no release or acquire counts)
        std::lock_guard<std::mutex> lock(c.mutex);
        ++c.arrived;
        c.release_if_all_arrived();
        c.moved_on();
    }
    ++r.progress;
    while (c.generation.load() == generation) {
        if (c.failed.load()) fail_in_fiber("another block of the cluster failed");
        yield(kAtClusterBarrier);
    }
    race_check::acquire(&c.barrier_sync[generation & 1]);
}

void* map_shared_rank(void* address, unsigned rank) {
    BlockRun& r = run();
    if (!r.cluster) {
        if (rank != 0)
            fail_in_fiber(describe_thread(r, *r.current) + " maps rank " + std::to_string(rank) + " outside a cluster");
        return address;
    }
    if (rank >= r.cluster->size)
        fail_in_fiber(describe_thread(r, *r.current) + " maps rank " + std::to_string(rank) + " of a cluster of " +
                      std::to_string(r.cluster->size));
    // A block's shared memory is gone once its threads have ended (on a GPU; here it stays until the
    // cluster ends): a kernel must hold its blocks at a cluster barrier until the others have read
    // theirs. Seen only where the timing of the OS threads shows it, never where the kernel waits.
    if (r.cluster->ended[rank].load())
        fail_in_fiber(describe_thread(r, *r.current) + " maps the shared memory of block " + std::to_string(rank) +
                      " of its cluster, whose threads have all ended");
    const std::ptrdiff_t offset = static_cast<char*>(address) - &tls_marker;
    return r.cluster->tls_bases[rank] + offset;
}

unsigned char* dynamic_shared_memory() { return run().dynamic_shared; }

uint32_t shared_offset(const void* pointer) {
    BlockRun& r = run();
    const unsigned char* address = static_cast<const unsigned char*>(pointer);
    if (address < r.dynamic_shared || address > r.dynamic_shared + r.dynamic_bytes)
        fail_in_fiber(describe_thread(r, *r.current) +
                      " takes a shared address outside the block's dynamic shared memory");
    return static_cast<uint32_t>(address - r.dynamic_shared);
}

namespace {

// The bytes [offset, offset + bytes) of the block's dynamic shared memory, `alignment`-aligned.
unsigned char* shared_range(BlockRun& r, uint32_t offset, size_t bytes, size_t alignment, const char* what) {
    if (offset % alignment != 0 || offset + bytes > r.dynamic_bytes)
        fail_in_fiber(describe_thread(r, *r.current) + " " + what + " at shared address " + std::to_string(offset) +
                      " (" + std::to_string(bytes) + " bytes): outside the block's " + std::to_string(r.dynamic_bytes) +
                      " bytes or not " + std::to_string(alignment) + "-byte aligned");
    return r.dynamic_shared + offset;
}

MBarrier& barrier_at(BlockRun& r, uint32_t address) {
    for (auto& entry : r.barriers)
        if (entry.first == address) {
            // Its initialisation reaches the other threads (and the copy engine) through a block
            // barrier, as mbarrier.init's must.
            if (entry.second.initialised_by != r.current->linear && entry.second.initialised_at == r.generation)
                fail_in_fiber(describe_thread(r, *r.current) + " uses an mbarrier that thread " +
                              std::to_string(entry.second.initialised_by) +
                              " initialised, before a block barrier since");
            return entry.second;
        }
    fail_in_fiber(describe_thread(r, *r.current) + " uses an mbarrier at shared address " + std::to_string(address) +
                  " that was never initialised");
}

uint64_t most_mbarrier_phases = 0;

void complete_phase_if_done(MBarrier& b) {
    if (b.pending == 0 && b.transactions == 0) {
        ++b.phase;
        b.pending = b.expected;
        if (b.phase > most_mbarrier_phases) most_mbarrier_phases = b.phase;
    }
}

}  // namespace

uint64_t take_most_mbarrier_phases() { return std::exchange(most_mbarrier_phases, 0); }

namespace {
std::mutex dynamic_shared_limits_mutex;
std::vector<std::pair<const void*, size_t>> dynamic_shared_limits;
}  // namespace

void set_dynamic_shared_limit(const void* kernel, size_t bytes) {
    std::lock_guard<std::mutex> lock(dynamic_shared_limits_mutex);
    for (auto& entry : dynamic_shared_limits)
        if (entry.first == kernel) {
            entry.second = bytes;
            return;
        }
    dynamic_shared_limits.emplace_back(kernel, bytes);
}

size_t dynamic_shared_limit(const void* kernel) {
    std::lock_guard<std::mutex> lock(dynamic_shared_limits_mutex);
    for (const auto& entry : dynamic_shared_limits)
        if (entry.first == kernel) return entry.second;
    return 48 * 1024;
}

void mbarrier_init(uint32_t address, unsigned arrivals) {
    BlockRun& r = run();
    unsigned char* object = shared_range(r, address, 8, 8, "initialises an mbarrier");
    std::memset(object, 0xa5, 8);  // the object's bytes are not data
    MBarrier b;
    b.expected = b.pending = arrivals;
    b.initialised_by = r.current->linear;
    b.initialised_at = r.generation;
    ++r.progress;
    for (auto& entry : r.barriers)
        if (entry.first == address) {
            if (!entry.second.copies.empty() || entry.second.pending != entry.second.expected ||
                entry.second.transactions != 0)
                fail_in_fiber(describe_thread(r, *r.current) +
                              " initialises an mbarrier again in the middle of a phase");
            entry.second = b;
            return;
        }
    const race_check::OwnMemory own;  // (a list that threads grow in turn: the emulation's)
    r.barriers.emplace_back(address, b);
}

void mbarrier_arrive_expect_tx(uint32_t address, uint32_t bytes) {
    BlockRun& r = run();
    MBarrier& b = barrier_at(r, address);
    if (b.pending == 0)
        fail_in_fiber(describe_thread(r, *r.current) + " arrives on an mbarrier past its phase's arrivals");
    race_check::release(r.dynamic_shared + address);
    b.transactions += bytes;
    --b.pending;
    complete_phase_if_done(b);
    ++r.progress;
}

void bulk_copy(uint32_t destination, const void* source, uint32_t bytes, uint32_t barrier) {
    BlockRun& r = run();
    if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(source) % 16 != 0)
        fail_in_fiber(describe_thread(r, *r.current) + " issues a bulk copy of " + std::to_string(bytes) +
                      " bytes from a source that is not 16-byte aligned, or not a multiple of 16 bytes");
    std::memset(shared_range(r, destination, bytes, 16, "bulk-copies into shared memory"), 0xff, bytes);
    MBarrier& b = barrier_at(r, barrier);
    {
        const race_check::OwnMemory own;  // (a list that threads grow in turn: the emulation's)
        b.copies.push_back(PendingCopy{destination, source, bytes});
    }
    race_check::release(r.dynamic_shared + barrier);  // the poisoned bytes, before the copy lands
    ++r.progress;
}

void mbarrier_wait_parity(uint32_t address, uint32_t parity) {
    BlockRun& r = run();
    for (;;) {
        MBarrier& b = barrier_at(r, address);
        if (!b.copies.empty()) {  // the copies issued so far land now (as this thread's writes)
            race_check::acquire(r.dynamic_shared + address);
            for (const PendingCopy& copy : b.copies) {
                std::memcpy(r.dynamic_shared + copy.destination, copy.source, copy.bytes);
                b.transactions -= copy.bytes;
            }
            b.copies.clear();
            race_check::release(r.dynamic_shared + address);
            complete_phase_if_done(b);
            ++r.progress;
        }
        // The phase of parity `parity` has completed when the current phase's parity differs.
        if ((b.phase & 1u) != (parity & 1u)) {
            race_check::acquire(r.dynamic_shared + address);
            return;
        }
        yield("an mbarrier's phase");
    }
}

void ldmatrix_x4_trans(uint32_t (&registers)[4], uint32_t address) {
    BlockRun& r = run();
    uint32_t addresses[kWarpSize];
    gather_lanes(0xffffffffu, &address, sizeof(address), addresses);
    const unsigned lane = r.current->linear % kWarpSize;
    for (unsigned q = 0; q < 4; ++q) {
        uint16_t halves[2];
        for (unsigned h = 0; h < 2; ++h) {
            const unsigned row = 2 * (lane % 4) + h, column = lane / 4;
            const unsigned char* row_bytes = shared_range(r, addresses[8 * q + row], 16, 16, "loads a matrix row");
            race_check::read_2_bytes(row_bytes + 2 * column);
            std::memcpy(&halves[h], row_bytes + 2 * column, 2);
        }
        registers[q] = static_cast<uint32_t>(halves[0]) | static_cast<uint32_t>(halves[1]) << 16;
    }
}

DeviceBuffer::DeviceBuffer(size_t bytes, size_t alignment, size_t offset) : bytes_(bytes) {
    const size_t page = page_bytes();
    const size_t usable = (bytes + alignment + offset + page - 1) / page * page;
    mapped_bytes_ = usable + page;
    mapping_ = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping_ == MAP_FAILED) {
        mapping_ = nullptr;
        throw std::bad_alloc();
    }
    char* const start = static_cast<char*>(mapping_);
    char* const end = start + usable;
    mprotect(end, page, PROT_NONE);
    std::memset(start, 0xff, usable);
    const uintptr_t last_start = reinterpret_cast<uintptr_t>(end) - bytes - offset;
    data_ = reinterpret_cast<void*>(last_start / alignment * alignment + offset);
}

DeviceBuffer::~DeviceBuffer() {
    if (!mapping_) return;
    const unsigned char* start = static_cast<const unsigned char*>(mapping_);
    const unsigned char* end = start + mapped_bytes_ - page_bytes();
    const unsigned char* first = static_cast<const unsigned char*>(data_);
    for (const unsigned char* byte = start; byte < end; ++byte)
        if ((byte < first || byte >= first + bytes_) && *byte != 0xff) {
            std::fprintf(stderr, "emulated device memory: a write %s a buffer of %zu bytes, %td bytes %s it\n",
                         byte < first ? "before" : "past", bytes_,
                         byte < first ? first - byte : byte - (first + bytes_), byte < first ? "before" : "past");
            std::abort();
        }
    munmap(mapping_, mapped_bytes_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (mapping_) munmap(mapping_, mapped_bytes_);
        mapping_ = std::exchange(other.mapping_, nullptr);
        mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

}  // namespace mpt_emulation

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;
