// Launches of emulation_check_kernels.cpp's kernels, for test_cuda_emulated_kernels.cpp. Each throws
// mpt_emulation::EmulationError where the emulation refuses the launch.
#pragma once

namespace mpt_emulation_check {

void run_collectives(int* out, unsigned blocks);  // out: [blocks * 64 threads * 11]
void run_mask_leaves_out_caller(int* out);        // out: [32]
void run_reads_outside_mask(int* out);            // out: [32]
void run_deadlock(int* out);                      // out: [2]
void run_exited_lane(int* out);                   // out: [32]
void run_trap(int* out);                          // out: [32]
void run_in_clusters(int* out);                   // out: [1]

}  // namespace mpt_emulation_check
