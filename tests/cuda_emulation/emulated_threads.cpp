// See emulated_threads.h. A block's threads are ucontext fibers on the calling OS thread, resumed in
// turn by the block's scheduler loop; a fiber gives the CPU back only inside a wait (a barrier or a
// warp collective whose other threads have not arrived), so everything between two waits runs as
// one piece, as a warp's instructions between two synchronisations may. A full round of the fibers
// in which none arrived anywhere, released anything or ended is a deadlock.
#include "cuda_emulation/emulated_threads.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace mpt_emulation {

namespace {

constexpr unsigned kWarpSize = 32;
constexpr size_t kStackBytes = 256 * 1024;  // the kernels' locals are registers' worth: ample

size_t page_bytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

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

struct Fiber {
    ucontext_t context{};
    uint3 index{};
    unsigned linear = 0;
    bool finished = false;
    const char* waiting_at = "";  // what it waits in, for a deadlock's message
};

// The lanes of one mask that are inside a collective, and how many times it has released them.
struct LaneGroup {
    unsigned mask = 0;
    unsigned arrived = 0;
    uint64_t generation = 0;
};

struct Warp {
    uint64_t offers[kWarpSize] = {};
    unsigned existing = 0;  // lanes the block has (its last warp may be partial)
    unsigned exited = 0;
    std::vector<LaneGroup> groups;  // a few at most: one per mask in use at once
    LaneGroup& group(unsigned mask) {
        for (LaneGroup& g : groups)
            if (g.mask == mask) return g;
        groups.push_back(LaneGroup{mask, 0, 0});
        return groups.back();
    }
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
    ucontext_t scheduler{};
    Fiber* current = nullptr;
    const std::function<void()>* body = nullptr;
    std::string failure;
};

thread_local BlockRun* current_run = nullptr;
thread_local std::vector<std::unique_ptr<Stack>> stacks;
uint64_t block_order_seed = 0;
uint64_t launch_count = 0;

BlockRun& run() {
    if (!current_run) throw EmulationError("a device function was called outside an emulated launch");
    return *current_run;
}

// Back to the scheduler, until it resumes this fiber.
void yield(const char* waiting_at) {
    BlockRun& r = run();
    Fiber* self = r.current;
    self->waiting_at = waiting_at;
    swapcontext(&self->context, &r.scheduler);
    self->waiting_at = "";
}

// A misuse found inside a fiber: recorded for the scheduler, which throws it; this fiber is never
// resumed (its stack is simply reused by the next launch).
[[noreturn]] void fail_in_fiber(const std::string& message) {
    BlockRun& r = run();
    if (r.failure.empty()) r.failure = message;
    for (;;) swapcontext(&r.current->context, &r.scheduler);
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
    try {
        (*r.body)();
    } catch (const std::exception& error) {
        fail_in_fiber(describe_thread(r, self) + " threw: " + error.what());
    }
    self.finished = true;
    --r.live;
    r.warps[self.linear / kWarpSize].exited |= 1u << (self.linear % kWarpSize);
    ++r.progress;
    // Threads that exited count as arrived at the block barrier.
    if (r.arrived > 0 && r.arrived == r.live) release_block_barrier(r);
    swapcontext(&self.context, &r.scheduler);  // never resumed
}

void run_block(BlockRun& r) {
    const unsigned threads = r.block.x * r.block.y * r.block.z;
    while (stacks.size() < threads) stacks.push_back(std::make_unique<Stack>());
    r.fibers.assign(threads, Fiber{});
    r.warps.assign((threads + kWarpSize - 1) / kWarpSize, Warp{});
    for (unsigned t = 0; t < threads; ++t) r.warps[t / kWarpSize].existing |= 1u << (t % kWarpSize);
    for (unsigned t = 0; t < threads; ++t) {
        Fiber& f = r.fibers[t];
        f.linear = t;
        f.index = make_uint3(t % r.block.x, (t / r.block.x) % r.block.y, t / (r.block.x * r.block.y));
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = stacks[t]->base;
        f.context.uc_stack.ss_size = kStackBytes;
        f.context.uc_link = nullptr;
        makecontext(&f.context, fiber_entry, 0);
    }
    r.live = threads;
    while (r.live > 0) {
        const uint64_t before = r.progress;
        for (Fiber& f : r.fibers) {
            if (f.finished) continue;
            r.current = &f;
            threadIdx = f.index;
            swapcontext(&r.scheduler, &f.context);
            r.current = nullptr;
            if (!r.failure.empty()) throw EmulationError(r.failure);
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
}

uint64_t splitmix(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

}  // namespace

void run_grid(dim3 grid, dim3 block, size_t /*dynamic_shared_bytes*/, const std::function<void()>& thread_body) {
    if (current_run) throw EmulationError("a kernel launched another (dynamic parallelism is not emulated)");
    const uint64_t blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
    const unsigned threads = block.x * block.y * block.z;
    if (blocks == 0 || threads == 0 || threads > 1024)
        throw EmulationError("invalid launch: " + std::to_string(blocks) + " blocks of " + std::to_string(threads) +
                             " threads");
    ++launch_count;
    std::vector<uint64_t> order(blocks);
    for (uint64_t b = 0; b < blocks; ++b) order[b] = b;
    if (block_order_seed != 0) {
        uint64_t state = block_order_seed;
        for (uint64_t b = blocks; b > 1; --b) std::swap(order[b - 1], order[splitmix(state) % b]);
    }
    BlockRun r;
    r.grid = grid;
    r.block = block;
    gridDim = grid;
    blockDim = block;
    r.body = &thread_body;
    current_run = &r;
    try {
        for (const uint64_t b : order) {
            r.block_index = make_uint3(static_cast<unsigned>(b % grid.x), static_cast<unsigned>((b / grid.x) % grid.y),
                                       static_cast<unsigned>(b / (static_cast<uint64_t>(grid.x) * grid.y)));
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

uint64_t set_block_order_seed(uint64_t seed) { return std::exchange(block_order_seed, seed); }
uint64_t launches() { return launch_count; }

unsigned lane_index() { return run().current->linear % kWarpSize; }

int sync_block(int predicate) {
    BlockRun& r = run();
    r.passed += predicate ? 1 : 0;
    ++r.arrived;
    ++r.progress;
    const uint64_t generation = r.generation;
    if (r.arrived == r.live) {
        release_block_barrier(r);
    } else {
        while (r.generation == generation) yield("__syncthreads");
    }
    return r.released_count;
}

void sync_lanes(unsigned mask) {
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
    const uint64_t generation = group.generation;
    group.arrived |= 1u << lane;
    ++r.progress;
    if (group.arrived == mask) {
        group.arrived = 0;
        ++group.generation;
    } else {
        while (warp.group(mask).generation == generation) yield("a warp collective");
    }
}

uint64_t exchange(unsigned mask, uint64_t value, int source) {
    BlockRun& r = run();
    const unsigned linear = r.current->linear;
    Warp& warp = r.warps[linear / kWarpSize];
    warp.offers[linear % kWarpSize] = value;
    sync_lanes(mask);
    uint64_t received = value;
    if (source >= 0) {
        if (!(((mask & warp.existing) >> source) & 1u))
            fail_in_fiber(describe_thread(r, *r.current) + " reads lane " + std::to_string(source) +
                          " outside its collective's mask");
        received = warp.offers[source];
    }
    sync_lanes(mask);  // every lane has read before any offers again
    return received;
}

unsigned ballot(unsigned mask, bool predicate) {
    BlockRun& r = run();
    const unsigned linear = r.current->linear;
    Warp& warp = r.warps[linear / kWarpSize];
    warp.offers[linear % kWarpSize] = predicate ? 1u : 0u;
    sync_lanes(mask);
    unsigned votes = 0;
    const unsigned lanes = mask & warp.existing;
    for (unsigned l = 0; l < kWarpSize; ++l)
        if (((lanes >> l) & 1u) && warp.offers[l]) votes |= 1u << l;
    sync_lanes(mask);
    return votes;
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
    if (mapping_) munmap(mapping_, mapped_bytes_);
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
