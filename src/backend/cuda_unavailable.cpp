// Built when mptrain is compiled without CUDA: the CUDA backend reports itself unavailable.
#include "backend/backend.h"
#include "core/error.h"

namespace mpt {

std::unique_ptr<Backend> create_cuda_backend(int) {
    fail(MPT_STATUS_BACKEND_UNAVAILABLE, "this build of mptrain has no CUDA backend (built with MPTRAIN_CUDA=OFF)");
}

int cuda_device_count() { return 0; }

}  // namespace mpt
