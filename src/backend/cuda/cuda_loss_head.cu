// See cuda_loss_head.cuh. Each row is processed by one warp (cuda_loss_head_rows.cuh, whose row code
// the last layer's kernel around its head shares); the warps' sums are added in a fixed order.
#include "backend/cuda/cuda_loss_head.cuh"

#include <cub/block/block_reduce.cuh>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_loss_head_rows.cuh"
#include "backend/cuda/cuda_max_abs_cells.cuh"

namespace mpt {

namespace {

using namespace loss_head_rows;

constexpr int kWarpsPerBlock = 8;
constexpr int kBlockThreads = kWarpSize * kWarpsPerBlock;
constexpr int kSingleBlockRows = 32;  // batches up to this many rows: one block, one warp per row

// kWarps: the block's warps at most (one row per warp at a time). A grid of one block (batches of
// at most kSingleBlockRows rows, launched with a warp per row) sums its warps' partials itself; a
// larger grid leaves per-block partials in `scratch` for the last block to finish, which costs a
// fence, an atomic and a second round of reads through L2 (at batch 32 on an H200 the kernel took
// 8.4 us for 32 x 10 logits over 4 blocks).
template <int kWarps, HeadCase kind, bool kNarrow>
__global__ void __launch_bounds__(kWarps* kWarpSize)
    loss_head_kernel(const LossHeadArgs args, bool starts_step, const LossHeadScratch scratch) {
    start_after_preceding_kernel();
    __shared__ double warp_loss[kWarps];
    __shared__ long long warp_correct[kWarps], warp_counted[kWarps];
    __shared__ bool last_block;

    const int lane = threadIdx.x % kWarpSize;
    // The warp's index as lane 0 holds it: the same in every lane as far as the compiler can tell, so
    // that a loop over the warp's rows leaves its lanes together for the shuffles inside.
    const int warp = __shfl_sync(kFullMask, static_cast<int>(threadIdx.x / kWarpSize), 0);
    const int block_warps = static_cast<int>(blockDim.x) / kWarpSize;
    const float loss_scale = args.state ? args.state->loss_scale : 1.0f;
    const float gradient_factor = loss_scale / static_cast<float>(loss_mean_rows(args));

    double loss = 0.0;
    long long correct = 0, counted = 0;
    unsigned gradient_largest = 0;  // this lane's, where args.logits_grad_max_abs asks
    if constexpr (kWarps == kSingleBlockRows) {
        // One block of a warp per row (run_loss_head): each warp's row, with no loop around it, so
        // that the compiler sees every lane of the warp reach the row's shuffles together (in a loop
        // of a count it cannot prove the same across a warp, each shuffle came with code for lanes
        // that diverged: half the kernel's instructions, sm_90).
        if (warp < args.rows) {  // always (run_loss_head launches rows warps); the same in every lane
            const RowResult result = head_row<kind, kNarrow>(args, warp, lane, gradient_factor);
            loss = result.loss;
            correct = result.correct;
            counted = result.counted;
            gradient_largest = result.gradient_largest;
        }
    } else {
        const int64_t warps = static_cast<int64_t>(gridDim.x) * block_warps;
        for (int64_t row = static_cast<int64_t>(blockIdx.x) * block_warps + warp; row < args.rows; row += warps) {
            const RowResult result = head_row<kind, kNarrow>(args, row, lane, gradient_factor);
            loss += result.loss;
            correct += result.correct;
            counted += result.counted;
            gradient_largest = max(gradient_largest, result.gradient_largest);
        }
    }
    // The block's largest gradient, in thread 0: the result of a grid of one, else raised into the
    // scratch's cell before the block's ticket (thread 0's fence below orders it).
    unsigned block_gradient_largest = 0;
    if (args.logits_grad_max_abs) block_gradient_largest = block_largest_bits(gradient_largest);  // (uniform)
    if (lane == 0) {
        warp_loss[warp] = loss;
        warp_correct[warp] = correct;
        warp_counted[warp] = counted;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const HeadSums block = add_head_partials(warp_loss, warp_correct, warp_counted, block_warps);
        if (gridDim.x == 1) {
            finish_head(args, starts_step, block.loss, block.correct, block.counted);
            if (args.logits_grad_max_abs) *args.logits_grad_max_abs = __uint_as_float(block_gradient_largest);
        } else {
            if (block_gradient_largest != 0) atomicMax(scratch.gradient_largest, block_gradient_largest);
            scratch.partial_loss[blockIdx.x] = block.loss;
            scratch.partial_correct[blockIdx.x] = block.correct;
            scratch.partial_counted[blockIdx.x] = block.counted;
            __threadfence();
            last_block = atomicAdd(scratch.counter, 1u) == gridDim.x - 1;
        }
    }
    if (gridDim.x == 1) return;  // (the same for every thread)
    // A grid of several blocks only with kWarpsPerBlock warps (run_loss_head): cub's block
    // reduction below is sized for that block.
    if constexpr (kWarps == kWarpsPerBlock) {
        __syncthreads();
        if (!last_block) return;

        // The last block combines every block's partials in a fixed order.
        __threadfence();
        const volatile double* partial_loss = scratch.partial_loss;
        const volatile long long* partial_correct = scratch.partial_correct;
        const volatile long long* partial_counted = scratch.partial_counted;
        double thread_loss = 0.0;
        long long thread_correct = 0, thread_counted = 0;
        for (unsigned b = threadIdx.x; b < gridDim.x; b += kBlockThreads) {
            thread_loss += partial_loss[b];
            thread_correct += partial_correct[b];
            thread_counted += partial_counted[b];
        }
        using DoubleReduce = cub::BlockReduce<double, kBlockThreads>;
        using CountReduce = cub::BlockReduce<long long, kBlockThreads>;
        __shared__ union {
            typename DoubleReduce::TempStorage loss;
            typename CountReduce::TempStorage count;
        } temp;
        const double loss_sum = DoubleReduce(temp.loss).Sum(thread_loss);
        __syncthreads();
        const long long correct_sum = CountReduce(temp.count).Sum(thread_correct);
        __syncthreads();
        const long long counted_sum = CountReduce(temp.count).Sum(thread_counted);
        if (threadIdx.x == 0) {
            finish_head(args, starts_step, loss_sum, correct_sum, counted_sum);
            // Read and set back to 0 in one (a launch that takes no maximum leaves it 0).
            if (args.logits_grad_max_abs) *args.logits_grad_max_abs = take_max_cell(scratch.gradient_largest);
            store_relaxed(scratch.counter, 0u);
        }
    }
}

}  // namespace

void validate_loss_head(const LossHeadArgs& args) {
    require(args.rows > 0 && args.classes > 0 && args.width >= args.classes, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: loss_head needs rows > 0 and 0 < classes <= width");
    require(args.logits != nullptr, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: loss_head needs logits");
    require(!args.logits_grad_max_abs || args.logits_grad, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: loss_head takes the logits gradient's maximum only where it writes the gradient");
    require(loss_uses_labels(args.loss) ? args.labels != nullptr : args.targets != nullptr, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: loss_head needs labels (sparse categorical) or targets (other losses)");
    require(valid_label_smoothing(args.loss, args.label_smoothing), MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: loss_head needs label smoothing in [0, 1), 0 for a regression");
    require(args.loss != LossKind::huber || valid_huber_delta(args.huber_delta), MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: loss_head needs a finite Huber delta above 0");
    require(args.class_weights == nullptr || loss_takes_class_weights(args.loss), MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: loss_head takes class weights for the categorical losses only");
}

namespace {

template <HeadCase kind, bool kNarrow>
void launch_loss_head(const LossHeadArgs& args, const LossHeadScratch& scratch, cudaStream_t stream, bool starts_step) {
    if (args.rows <= kSingleBlockRows) {
        // One block, a warp per row.
        launch_kernel("loss_head_kernel", loss_head_kernel<kSingleBlockRows, kind, kNarrow>, 1,
                      static_cast<unsigned>(args.rows) * kWarpSize, 0, stream, args, starts_step, scratch);
        return;
    }
    const unsigned blocks = grid_for(args.rows, kWarpsPerBlock, kLossHeadMaxBlocks);
    launch_kernel("loss_head_kernel", loss_head_kernel<kWarpsPerBlock, kind, kNarrow>, blocks, kBlockThreads, 0, stream,
                  args, starts_step, scratch);
}

// A softmax or linear cross-entropy head of at most 32 columns (the padded classes: a lane each), the
// common one, takes the narrow kernel, whose lanes hold one class each instead of a loop over them
// (the same sums in the same order); the other cases loop (fewer kernels in the library).
template <HeadCase kind>
void launch_loss_head(const LossHeadArgs& args, const LossHeadScratch& scratch, cudaStream_t stream, bool starts_step) {
    if constexpr (kind == HeadCase::logits_categorical) {
        if (args.width <= kWarpSize) return launch_loss_head<kind, true>(args, scratch, stream, starts_step);
    }
    launch_loss_head<kind, false>(args, scratch, stream, starts_step);
}

}  // namespace

void run_loss_head(const LossHeadArgs& args, const LossHeadScratch& scratch, cudaStream_t stream, bool starts_step) {
    require(!starts_step || args.state, MPT_STATUS_INTERNAL,
            "cuda backend: a loss head that starts a step needs its state");
    // A kernel for each case, compiled for it alone: the one for every case was 70 KB of code a
    // warp count (sm_90), most of it branches a given head never takes, which a block on a cold SM
    // fetches from L2 as it goes (the seed MLP's head took 9.0 us at batch 32 for 32 x 10 logits).
    switch (head_case(args)) {
        case HeadCase::logits_categorical:
            return launch_loss_head<HeadCase::logits_categorical>(args, scratch, stream, starts_step);
        case HeadCase::probability_categorical:
            return launch_loss_head<HeadCase::probability_categorical>(args, scratch, stream, starts_step);
        case HeadCase::sigmoid_binary:
            return launch_loss_head<HeadCase::sigmoid_binary>(args, scratch, stream, starts_step);
        case HeadCase::probability_binary:
            return launch_loss_head<HeadCase::probability_binary>(args, scratch, stream, starts_step);
        case HeadCase::regression:
            return launch_loss_head<HeadCase::regression>(args, scratch, stream, starts_step);
    }
}

}  // namespace mpt
