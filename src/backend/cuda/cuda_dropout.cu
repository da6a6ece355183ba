// See cuda_dropout.cuh. The product is rounded as the CPU's (built with -ffp-contract=off) is, so
// both backends keep and scale the same values, bit for bit.
#include "backend/cuda/cuda_dropout.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

// `input` and `output` may be the same array (not __restrict__): each element is read before written.
// `first_index`: where input[0] lies in the step's whole batch (DropoutArgs::first_index).
__global__ void __launch_bounds__(kThreads) dropout_kernel(const void* input, void* output, DType dtype, int64_t count,
                                                           int64_t first_index, DropoutDraw draw, const TrainState* state) {
    start_after_preceding_kernel();
    const uint64_t key = dropout_key(draw.seed, state->steps, draw.layer);
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float kept = dropout_keeps(key, draw.threshold, first_index + i)
                               ? __fmul_rn(load_element(input, dtype, i), draw.scale)
                               : 0.0f;
        store_element(output, dtype, i, kept);
    }
}

}  // namespace

void run_dropout(const DropoutArgs& args, cudaStream_t stream) {
    if (args.count == 0) return;
    launch_kernel("dropout_kernel", dropout_kernel, grid_for(args.count, kThreads, kMaxBlocks), kThreads, 0, stream,
                  args.input, args.output, args.dtype, args.count, args.first_index, args.draw, args.state);
}

}  // namespace mpt
