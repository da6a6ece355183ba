// See cuda_bias_gradient.cuh.
#include "backend/cuda/cuda_bias_gradient.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

constexpr int kScalarColumns = 32;
constexpr int kScalarRowSlices = 8;

// Any shape: 32 columns per block, 8 row slices per column summed in shared memory in slice order.
__global__ void bias_gradient_scalar_kernel(const BiasGradientArgs args) {
    start_after_preceding_kernel();
    __shared__ float partial[kScalarRowSlices][kScalarColumns];
    const int64_t column = blockIdx.x * static_cast<int64_t>(kScalarColumns) + threadIdx.x;
    float sum = 0.0f;
    if (column < args.columns)
        for (int64_t row = threadIdx.y; row < args.rows; row += kScalarRowSlices)
            sum += load_element(args.output_grad, args.dtype, row * args.columns + column);
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && column < args.columns) {
        float total = 0.0f;
        for (int slice = 0; slice < kScalarRowSlices; ++slice) total += partial[slice][threadIdx.x];
        args.bias_grad[column] = args.accumulate ? args.bias_grad[column] + total : total;
    }
}

}  // namespace

void run_bias_gradient(const BiasGradientArgs& args, cudaStream_t stream) {
    if (args.rows <= 0 || args.columns <= 0) return;
    const dim3 block(kScalarColumns, kScalarRowSlices);
    const unsigned blocks = static_cast<unsigned>((args.columns + kScalarColumns - 1) / kScalarColumns);
    launch_kernel("bias_gradient_scalar_kernel", bias_gradient_scalar_kernel, blocks, block, 0, stream, args);
}

}  // namespace mpt
