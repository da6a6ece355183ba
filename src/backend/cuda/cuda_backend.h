// Test and debug hooks of the CUDA backend, callable from host-only code (no CUDA headers here).
// The backend itself is created through create_cuda_backend() in backend/backend.h. These exist
// only in builds with the CUDA backend (MPTRAIN_WITH_CUDA); each throws
// Error(MPT_STATUS_INVALID_ARGUMENT) when `backend` is not a CUDA backend.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace mpt {

// Device allocations made so far (allocate() and the backend's own scratch).
uint64_t cuda_backend_allocation_count(const Backend& backend);
// Compute tasks replayed from a captured CUDA graph so far, and graphs captured.
uint64_t cuda_backend_graph_replays(const Backend& backend);
uint64_t cuda_backend_graph_captures(const Backend& backend);
// Graph capture of repeated compute tasks (default on; MPTRAIN_CUDA_GRAPHS=0 turns it off).
void cuda_backend_set_graphs(Backend& backend, bool enabled);
// cuBLASLt epilogue fusion (default on); off forces the unfused fallback paths, for tests.
void cuda_backend_set_fused_epilogues(Backend& backend, bool enabled);

}  // namespace mpt
