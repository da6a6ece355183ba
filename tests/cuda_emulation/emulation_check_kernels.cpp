// Small kernels that check the emulation itself (test_cuda_emulated_kernels.cpp): the warp
// collectives' lanes and segments as CUDA defines them, barriers and their counts, and the misuses
// that must fail a launch instead of passing unnoticed.
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "cuda_emulation/emulation_check_kernels.h"

#include <vector>

namespace {

cudaLaunchConfig_t config_for(unsigned blocks, unsigned threads) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(threads);
    return config;
}

// Each thread writes what its warp's collectives gave it: [0] xor 1 within the warp, [1] down 3
// within segments of 8, [2] up 2 within segments of 16, [3] lane 5 of its segment of 8, [4] the
// ballot of odd lanes, [5] the warp's sum by xor butterfly, [6] the block barrier's count of threads
// below 40, [7] the block's sum through shared memory; then the edges of PTX's definition: [8] xor 16
// within segments of 16 (an earlier segment may be read, a later one not), [9] lane -1 of its segment
// of 16 (the low bits: its last lane), [10] xor 33 (the low 5 bits: xor 1).
__global__ void collectives_kernel(int* out) {
    const int t = static_cast<int>(threadIdx.x);
    int* mine = out + 11 * (blockIdx.x * blockDim.x + threadIdx.x);
    mine[0] = __shfl_xor_sync(0xffffffffu, t, 1);
    mine[1] = __shfl_down_sync(0xffffffffu, t, 3, 8);
    mine[2] = __shfl_up_sync(0xffffffffu, t, 2, 16);
    mine[3] = __shfl_sync(0xffffffffu, t, 5, 8);
    mine[4] = static_cast<int>(__ballot_sync(0xffffffffu, t % 2 == 1));
    int sum = t;
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    mine[5] = sum;
    mine[6] = __syncthreads_count(t < 40);
    __shared__ int values[64];
    values[t] = t;
    __syncthreads();
    int block_sum = 0;
    for (int i = 0; i < 64; ++i) block_sum += values[i];
    mine[7] = block_sum;
    mine[8] = __shfl_xor_sync(0xffffffffu, t, 16, 16);
    mine[9] = __shfl_sync(0xffffffffu, t, -1, 16);
    mine[10] = __shfl_xor_sync(0xffffffffu, t, 33);
}

__global__ void mask_leaves_out_caller_kernel(int* out) {
    out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, static_cast<int>(threadIdx.x), 1);  // lanes 16-31 not in it
}

__global__ void reads_outside_mask_kernel(int* out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, static_cast<int>(threadIdx.x), 20);
}

// Lane 0 waits in a warp collective for lane 1, which waits at the block barrier for lane 0.
__global__ void deadlock_kernel(int* out) {
    if (threadIdx.x == 0)
        out[0] = __shfl_sync(0x3u, 1, 1);
    else
        __syncthreads();
}

__global__ void exited_lane_kernel(int* out) {
    if (threadIdx.x == 1) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 2);
}

// (Each thread writes its own element: under the race check the blocks of a grid are unordered.)
__global__ void trap_kernel(int* out) {
    if (blockIdx.x == 1 && threadIdx.x == 3) __trap();
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

__global__ void cluster_kernel(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1; }

// Kernels whose threads share values through shared memory, each with its synchronisation or
// without: unsynchronised they still give the values in the plain emulation (a fiber runs whole
// between two waits), and only the race check (race_check.h) sees the race. Each thread writes its
// slot of the block's 64 and reads its neighbour's, after a block barrier or none.
__global__ void block_neighbours_kernel(int* out, bool synchronised) {
    __shared__ int values[64];
    const unsigned t = threadIdx.x;
    values[t] = static_cast<int>(t);
    if (synchronised) __syncthreads();
    out[t] = values[(t + 1) % 64];
}

// Each lane of one warp writes its slot and reads the lane 16 away, after a __syncwarp of the whole
// warp, or of its own half only (whose barrier orders nothing of the other half's writes).
__global__ void warp_halves_kernel(int* out, bool synchronised) {
    __shared__ int values[32];
    const unsigned lane = threadIdx.x;
    values[lane] = static_cast<int>(lane);
    __syncwarp(synchronised ? 0xffffffffu : (lane < 16 ? 0x0000ffffu : 0xffff0000u));
    out[lane] = values[lane ^ 16];
}

// Each block of a cluster of 2 writes a value into its shared memory and reads the other block's,
// after a cluster barrier or none (the barrier at the end keeps both blocks' memory alive while read).
__global__ void cluster_neighbours_kernel(int* out, bool synchronised) {
    __shared__ int value;
    if (threadIdx.x == 0) value = static_cast<int>(blockIdx.x) + 1;
    if (synchronised) ::mpt_emulation::sync_cluster();
    if (threadIdx.x == 0)
        out[blockIdx.x] = *static_cast<int*>(::mpt_emulation::map_shared_rank(&value, (blockIdx.x % 2) ^ 1u));
    ::mpt_emulation::sync_cluster();
}

// The blocks of a grid hand their values to its last block (the "last block" of a reduction): each
// block's thread 0 writes its slot, and the block that takes the last ticket (an atomic each, after a
// fence) sums the slots, after a fence of its own. Without the fence before the ticket, a GPU may make
// the ticket visible before the slot; without the one after it, the last block may read a slot from
// before its write (a relaxed atomic orders nothing); with no ticket at all, block gridDim.x - 1 sums
// them, which the plain emulation runs last (blocks in index order) and a GPU may run first.
__global__ void last_block_kernel(int* slots, unsigned* tickets, int* sum, mpt_emulation_check::Handoff handoff) {
    using mpt_emulation_check::Handoff;
    __shared__ bool last;
    if (threadIdx.x == 0) {
        slots[blockIdx.x] = static_cast<int>(blockIdx.x) + 1;
        if (handoff == Handoff::none) {
            last = blockIdx.x == gridDim.x - 1;
        } else {
            if (handoff != Handoff::ticket_without_fence) __threadfence();
            last = atomicAdd(tickets, 1u) == gridDim.x - 1;
        }
    }
    __syncthreads();
    if (last && handoff != Handoff::ticket_without_reading_fence) __threadfence();
    if (last && threadIdx.x == 0) {
        int total = 0;
        for (unsigned b = 0; b < gridDim.x; ++b) total += slots[b];
        *sum = total;
    }
}

// Copies `count` values, one a thread.
__global__ void stream_reader_kernel(const int* in, int* out, unsigned count) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) out[i] = in[i];
}

__global__ void write_index_kernel(int* out) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = static_cast<int>(i);
}

__global__ void pair_reader_kernel(const int* in, int* out) { out[threadIdx.x] = in[threadIdx.x] + 1; }

template <typename... Parameters, typename... Arguments>
void launch(unsigned blocks, unsigned threads, void (*kernel)(Parameters...), Arguments... arguments) {
    const cudaLaunchConfig_t config = config_for(blocks, threads);
    cudaLaunchKernelEx(&config, kernel, arguments...);
}

// The same, the blocks in clusters of 2 along x.
template <typename... Parameters, typename... Arguments>
void launch_in_clusters_of_2(unsigned blocks, unsigned threads, void (*kernel)(Parameters...), Arguments... arguments) {
    cudaLaunchConfig_t config = config_for(blocks, threads);
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = 2;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    cudaLaunchKernelEx(&config, kernel, arguments...);
}

}  // namespace

namespace mpt_emulation_check {

void run_collectives(int* out, unsigned blocks) { launch(blocks, 64, collectives_kernel, out); }
void run_mask_leaves_out_caller(int* out) { launch(1, 32, mask_leaves_out_caller_kernel, out); }
void run_reads_outside_mask(int* out) { launch(1, 32, reads_outside_mask_kernel, out); }
void run_deadlock(int* out) { launch(1, 2, deadlock_kernel, out); }
void run_exited_lane(int* out) { launch(1, 32, exited_lane_kernel, out); }
void run_trap(int* out) { launch(2, 32, trap_kernel, out); }
void run_block_neighbours(int* out, bool synchronised) { launch(1, 64, block_neighbours_kernel, out, synchronised); }
void run_warp_halves(int* out, bool synchronised) { launch(1, 32, warp_halves_kernel, out, synchronised); }

void run_last_block(int* slots, unsigned* tickets, int* sum, unsigned blocks, Handoff handoff) {
    launch(blocks, 32, last_block_kernel, slots, tickets, sum, handoff);
}

void run_stream_handoff(const int* source, int* staged, int* out, unsigned count, bool with_event) {
    cudaStream_t copy = nullptr, compute = nullptr;
    cudaEvent_t copied = nullptr;
    cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
    cudaMemcpyAsync(staged, source, count * sizeof(int), cudaMemcpyDeviceToDevice, copy);
    if (with_event) {
        cudaEventRecord(copied, copy);
        cudaStreamWaitEvent(compute, copied, 0);
    }
    cudaLaunchConfig_t config = config_for((count + 31) / 32, 32);
    config.stream = compute;
    cudaLaunchKernelEx(&config, stream_reader_kernel, static_cast<const int*>(staged), out, count);
    cudaStreamSynchronize(compute);
    cudaStreamSynchronize(copy);
    cudaEventDestroy(copied);
    cudaStreamDestroy(compute);
    cudaStreamDestroy(copy);
}

__attribute__((noinline)) int host_reads_stream_result(int* value, bool synchronised) {
    cudaStream_t stream = nullptr;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaMemsetAsync(value, 1, sizeof(int), stream);
    if (synchronised) cudaStreamSynchronize(stream);
    const int read = *value;
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    return read;
}

void run_on_live_streams(int* out, unsigned streams) {
    std::vector<cudaStream_t> live(streams);
    for (cudaStream_t& stream : live) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    for (unsigned s = 0; s < streams; ++s) {
        cudaLaunchConfig_t config = config_for(1, kLiveStreamThreads);
        config.stream = live[s];
        cudaLaunchKernelEx(&config, write_index_kernel, out + s * kLiveStreamThreads);
    }
    for (cudaStream_t stream : live) {
        cudaStreamSynchronize(stream);
        cudaStreamDestroy(stream);
    }
}

void run_stream_pair(int* staged, int* out, unsigned count) {
    cudaStream_t writer = nullptr, other_set = nullptr, reader = nullptr;
    cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&other_set, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking);
    cudaLaunchConfig_t config = config_for(1, count);
    config.stream = writer;
    cudaLaunchKernelEx(&config, write_index_kernel, staged);
    config.stream = reader;
    cudaLaunchKernelEx(&config, pair_reader_kernel, static_cast<const int*>(staged), out);
    for (cudaStream_t stream : {writer, other_set, reader}) {
        cudaStreamSynchronize(stream);
        cudaStreamDestroy(stream);
    }
}

void run_in_clusters(int* out) { launch_in_clusters_of_2(2, 32, cluster_kernel, out); }
void run_cluster_neighbours(int* out, bool synchronised) {
    launch_in_clusters_of_2(2, 32, cluster_neighbours_kernel, out, synchronised);
}

}  // namespace mpt_emulation_check
