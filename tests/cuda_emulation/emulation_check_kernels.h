// Launches of emulation_check_kernels.cpp's kernels, for test_cuda_emulated_kernels.cpp. Each throws
// mpt_emulation::EmulationError where the emulation refuses the launch.
#pragma once

namespace mpt_emulation_check {

void run_collectives(int* out, unsigned blocks);  // out: [blocks * 64 threads * 11]
void run_mask_leaves_out_caller(int* out);        // out: [32]
void run_reads_outside_mask(int* out);            // out: [32]
void run_deadlock(int* out);                      // out: [2]
void run_exited_lane(int* out);                   // out: [32]
void run_trap(int* out);                          // out: [2 blocks * 32 threads]
void run_in_clusters(int* out);                   // out: [2 blocks * 32 threads]
// Threads that share values through shared memory, after the synchronisation they need or without it
// (a race that only the race check sees: race_check.h). The cluster's needs compute capability 9.0.
void run_block_neighbours(int* out, bool synchronised);    // out: [64], thread t's neighbour's t + 1
void run_warp_halves(int* out, bool synchronised);         // out: [32], lane l's l ^ 16
void run_cluster_neighbours(int* out, bool synchronised);  // out: [2], block b's 2 - b
// The grid's last block sums every block's b + 1 into *sum, after the blocks' tickets (*tickets 0
// before), each after a fence and read after one as it must be, or without the fence before the
// ticket, or without the last block's fence after it, or with no tickets at all (the last three races
// between blocks, which the race check sees: race_check.h).
enum class Handoff { fenced_ticket, ticket_without_fence, ticket_without_reading_fence, none };
void run_last_block(int* slots, unsigned* tickets, int* sum, unsigned blocks, Handoff handoff);  // slots: [blocks]
// A copy on one stream stages `count` values from device memory, which a kernel on another stream
// copies to `out`, after an event recorded on the first that the second waits on, as it must, or
// with no event (a race between streams). And the host's read of a value a stream sets (to bytes of
// 1), after the stream's synchronisation or without it (a race between the host and a stream). The
// race check sees both races (emulated_runtime.cpp).
void run_stream_handoff(const int* source, int* staged, int* out, unsigned count, bool with_event);
int host_reads_stream_result(int* value, bool synchronised);
// `streams` streams live at once, each running a grid of one block of kLiveStreamThreads threads
// that writes each thread's index into its stream's part of `out` (kLiveStreamThreads values a stream,
// each its own offset within the part). Under the race check, more such streams than ThreadSanitizer
// has threads for a block each (8128 / 1024) must not end the process.
constexpr unsigned kLiveStreamThreads = 1024;
void run_on_live_streams(int* out, unsigned streams);
// A grid of one block of `count` threads on one stream writes each thread's index into `staged`, and
// one on another stream, with no event between, reads it (+1) into `out`: a race between streams
// that the race check sees where the two streams share a set of lanes too (the first and the third a
// process makes: emulated_threads.cpp, Lane).
void run_stream_pair(int* staged, int* out, unsigned count);

}  // namespace mpt_emulation_check
