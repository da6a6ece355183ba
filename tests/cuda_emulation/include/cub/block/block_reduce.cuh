// A stand-in for CUB's block reduction in the emulated kernels (tests/cuda_emulation/): the same
// contract (a block of the size it was declared for; every thread calls Sum with its value; thread 0
// gets the block's sum, the others an undefined value; the caller synchronises before it reuses the
// storage), summed in thread order. CUB's own header does not compile for the host, and CUB is not what these tests
// check.
#pragma once

namespace cub {

template <typename T, int kBlockThreads, int kAlgorithm = 0, int kBlockY = 1, int kBlockZ = 1>
class BlockReduce {
public:
    struct TempStorage {
        T values[kBlockThreads * kBlockY * kBlockZ];
    };
    explicit BlockReduce(TempStorage& storage) : storage_(storage) {}

    T Sum(T value) {
        // CUB's reduction is sized for its block: another block size gives wrong sums there.
        if (blockDim.x * blockDim.y * blockDim.z != static_cast<unsigned>(kBlockThreads * kBlockY * kBlockZ)) __trap();
        const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        storage_.values[thread] = value;
        __syncthreads();
        if (thread != 0) return value;
        T total = storage_.values[0];
        for (unsigned t = 1; t < blockDim.x * blockDim.y * blockDim.z; ++t) total = total + storage_.values[t];
        return total;
    }

private:
    TempStorage& storage_;
};

}  // namespace cub
