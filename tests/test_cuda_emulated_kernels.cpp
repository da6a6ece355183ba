// The CUDA backend's kernels run on emulated threads on the CPU (tests/cuda_emulation/): each kernel's
// own source, compiled for the host, launched through its backend entry point on buffers that fault
// past their ends, and compared with the CPU reference. Every build with the CUDA toolkit runs it, GPU
// or not: what it checks (indexing, reductions, the last block's work, warp collectives' masks, the
// results' bits where the arithmetic is the same) does not depend on a GPU's timing. Races, memory
// ordering and the speed are for the GPU tests (test_cuda_ops) and the device check.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "amp/loss_scaler.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_loss_head.h"
#include "backend/cuda/cuda_bias_gradient.cuh"
#include "backend/cuda/cuda_dense_backward_data.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_dropout.cuh"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cuh"
#include "backend/cuda/cuda_gather.cuh"
#include "backend/cuda/cuda_gemm.cuh"
#include "backend/cuda/cuda_gradient_into_masters.cuh"
#include "backend/cuda/cuda_loss_head.cuh"
#include "backend/cuda/cuda_max_abs.cuh"
#include "backend/cuda/cuda_small_batch_backward_data.cuh"
#include "backend/cuda/cuda_small_batch_forward.cuh"
#include "backend/cuda/cuda_step_state.cuh"
#include "cuda_emulation/emulated_threads.h"
#include "cuda_emulation/emulation_check_kernels.h"
#include "nn/activation.h"
#include "nn/dropout.h"
#include "support/loss_head_case.h"

using mpt::Activation;
using mpt::DType;
using mpt::LossKind;
using mpt_emulation::DeviceBuffer;

namespace {

float float_of_bits(uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
}
uint32_t bits_of_float(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    return bits;
}

// A tensor in the emulated device's memory, its elements kept as floats too (the values its dtype
// stores) for the reference.
struct DeviceTensor {
    DType dtype = DType::fp32;
    int64_t count = 0;
    DeviceBuffer buffer;
    std::vector<float> values;

    DeviceTensor(DType type, int64_t elements, size_t misalignment = 0)
        : dtype(type),
          count(elements),
          buffer(static_cast<size_t>(elements) * (type == DType::fp32 ? 4 : 2), 256, misalignment),
          values(static_cast<size_t>(elements)) {}

    // Stores `value` as the dtype does (round to nearest even) and keeps what was stored.
    void set(int64_t index, float value) {
        const size_t i = static_cast<size_t>(index);
        switch (dtype) {
            case DType::fp32:
                buffer.as<float>()[i] = value;
                values[i] = value;
                return;
            case DType::bf16: {
                const __nv_bfloat16 stored = __float2bfloat16_rn(value);
                buffer.as<__nv_bfloat16>()[i] = stored;
                values[i] = __bfloat162float(stored);
                return;
            }
            case DType::fp16: {
                const __half stored = __float2half_rn(value);
                buffer.as<__half>()[i] = stored;
                values[i] = __half2float(stored);
                return;
            }
        }
    }
};

// The emulated device's compute capability for a scope (9.0: the small-batch kernels split K across
// a cluster's blocks).
struct ComputeCapability {
    explicit ComputeCapability(int capability) : saved(mpt_emulation::set_compute_capability(capability)) {}
    ~ComputeCapability() { mpt_emulation::set_compute_capability(saved); }
    int saved;
};

// The emulated device's multiprocessors for a scope: fused SGD's grid is what fits at once, so a
// device of one gives each block a run of several tiles (the CUDA-core kernel's prefetch of the
// next tile, the bulk-copy kernel's ring of stages turning over).
struct Multiprocessors {
    explicit Multiprocessors(int count) : saved(mpt_emulation::set_multiprocessors(count)) {}
    ~Multiprocessors() { mpt_emulation::set_multiprocessors(saved); }
    int saved;
};

// max |x| as the kernels define it: NaN and Inf as +Inf.
float reference_max_abs(const std::vector<float>& values) {
    uint32_t largest = 0;
    for (const float value : values) {
        uint32_t bits = bits_of_float(value) & 0x7fffffffu;
        if (bits > 0x7f800000u) bits = 0x7f800000u;
        if (bits > largest) largest = bits;
    }
    return float_of_bits(largest);
}

// The max pass's own device memory, zeroed as the backend zeroes it when it allocates it.
struct MaxAbsScratchBuffer {
    DeviceBuffer memory{mpt::max_abs_scratch_bytes()};
    explicit MaxAbsScratchBuffer(int max_blocks) : max_blocks_(max_blocks) {
        std::memset(memory.data(), 0, memory.size());
    }
    mpt::MaxAbsScratch scratch() const {
        unsigned* base = memory.as<unsigned>();
        return mpt::MaxAbsScratch{base, base + 256 / sizeof(unsigned), max_blocks_};
    }
    bool zero() const {
        const unsigned char* bytes = memory.as<unsigned char>();
        for (size_t i = 0; i < memory.size(); ++i)
            if (bytes[i] != 0) return false;
        return true;
    }
    int max_blocks_;
};

void fill_random(DeviceTensor& tensor, std::mt19937& random, float scale) {
    std::uniform_real_distribution<float> uniform(-scale, scale);
    for (int64_t i = 0; i < tensor.count; ++i) tensor.set(i, uniform(random));
}

}  // namespace

TEST_CASE("the emulation's warp collectives and barriers are CUDA's") {
    const unsigned blocks = 3;
    DeviceBuffer out(sizeof(int) * blocks * 64 * 11);
    mpt_emulation_check::run_collectives(out.as<int>(), blocks);
    for (int t = 0; t < static_cast<int>(blocks) * 64; ++t) {
        CAPTURE(t);
        const int* got = out.as<int>() + 11 * t;
        const int thread = t % 64, lane = thread % 32, warp_first = thread - lane;
        CHECK(got[0] == (thread ^ 1));
        CHECK(got[1] == (lane % 8 + 3 < 8 ? thread + 3 : thread));  // past the segment: its own value
        CHECK(got[2] == (lane % 16 >= 2 ? thread - 2 : thread));
        CHECK(got[3] == warp_first + lane / 8 * 8 + 5);
        CHECK(static_cast<unsigned>(got[4]) == 0xaaaaaaaau);
        CHECK(got[5] == 32 * warp_first + 31 * 32 / 2);
        CHECK(got[6] == 40);
        CHECK(got[7] == 63 * 64 / 2);
        CHECK(got[8] == (lane >= 16 ? thread - 16 : thread));
        CHECK(got[9] == warp_first + lane / 16 * 16 + 15);
        CHECK(got[10] == (thread ^ 1));
    }
}

TEST_CASE("the emulation fails a launch that misuses a collective, deadlocks, traps or needs clusters") {
    DeviceBuffer out(sizeof(int) * 64);
    CHECK_THROWS_WITH_AS(mpt_emulation_check::run_mask_leaves_out_caller(out.as<int>()),
                         doctest::Contains("mask leaves it out"), mpt_emulation::EmulationError);
    CHECK_THROWS_WITH_AS(mpt_emulation_check::run_reads_outside_mask(out.as<int>()),
                         doctest::Contains("outside its collective's mask"), mpt_emulation::EmulationError);
    CHECK_THROWS_WITH_AS(mpt_emulation_check::run_deadlock(out.as<int>()), doctest::Contains("deadlock"),
                         mpt_emulation::EmulationError);
    CHECK_THROWS_WITH_AS(mpt_emulation_check::run_exited_lane(out.as<int>()),
                         doctest::Contains("lanes that have exited"), mpt_emulation::EmulationError);
    CHECK_THROWS_WITH_AS(mpt_emulation_check::run_trap(out.as<int>()), doctest::Contains("trapped"),
                         mpt_emulation::EmulationError);
    CHECK_THROWS_WITH_AS(mpt_emulation_check::run_in_clusters(out.as<int>()), doctest::Contains("clusters"),
                         mpt_emulation::EmulationError);
    // And the next launch runs as usual.
    DeviceBuffer collectives(sizeof(int) * 64 * 11);
    mpt_emulation_check::run_collectives(collectives.as<int>(), 1);
    CHECK(collectives.as<int>()[7] == 63 * 64 / 2);
}

// What the race check (cuda_emulation/race_check.h) is checked by: kernels whose threads share values
// through shared memory give them with their synchronisation, and the race-check build reports
// nothing; without it they give the same values here (a fiber runs whole between two waits), so only
// the race check can see it, and ctest's cuda_emulated_race_found_* entries require its report of each
// case below (skipped otherwise: --no-skip runs them).
TEST_CASE("threads that share values through shared memory after their barrier see each other's") {
    DeviceBuffer out(sizeof(int) * 64);
    mpt_emulation_check::run_block_neighbours(out.as<int>(), true);
    for (int t = 0; t < 64; ++t) CHECK(out.as<int>()[t] == (t + 1) % 64);
    mpt_emulation_check::run_warp_halves(out.as<int>(), true);
    for (int lane = 0; lane < 32; ++lane) CHECK(out.as<int>()[lane] == (lane ^ 16));
    const ComputeCapability hopper(90);
    mpt_emulation_check::run_cluster_neighbours(out.as<int>(), true);
    CHECK(out.as<int>()[0] == 2);
    CHECK(out.as<int>()[1] == 1);
}

TEST_CASE("blocks that hand their values to the grid's last block by tickets give it every value") {
    for (const unsigned blocks : {2u, 5u, 16u}) {
        CAPTURE(blocks);
        DeviceBuffer slots(sizeof(int) * blocks), tickets(sizeof(unsigned)), sum(sizeof(int));
        tickets.as<unsigned>()[0] = 0;
        sum.as<int>()[0] = -1;
        mpt_emulation_check::run_last_block(slots.as<int>(), tickets.as<unsigned>(), sum.as<int>(), blocks,
                                            mpt_emulation_check::Handoff::fenced_ticket);
        CHECK(sum.as<int>()[0] == static_cast<int>(blocks * (blocks + 1) / 2));
        CHECK(tickets.as<unsigned>()[0] == blocks);
    }
}

TEST_CASE("race in a block: a neighbour's shared value read with no barrier after its write" * doctest::skip()) {
    DeviceBuffer out(sizeof(int) * 64);
    mpt_emulation_check::run_block_neighbours(out.as<int>(), false);
}

TEST_CASE("race in a warp: the other half's shared value read after a __syncwarp of one half" * doctest::skip()) {
    DeviceBuffer out(sizeof(int) * 32);
    mpt_emulation_check::run_warp_halves(out.as<int>(), false);
}

TEST_CASE("race in a cluster: the other block's shared value read with no cluster barrier" * doctest::skip()) {
    DeviceBuffer out(sizeof(int) * 2);
    const ComputeCapability hopper(90);
    mpt_emulation_check::run_cluster_neighbours(out.as<int>(), false);
}

namespace {
// Four blocks hand their values to the last one as `handoff` says.
void run_last_block_of_four(mpt_emulation_check::Handoff handoff) {
    DeviceBuffer slots(sizeof(int) * 4), tickets(sizeof(unsigned)), sum(sizeof(int));
    tickets.as<unsigned>()[0] = 0;
    mpt_emulation_check::run_last_block(slots.as<int>(), tickets.as<unsigned>(), sum.as<int>(), 4, handoff);
}
}  // namespace

TEST_CASE("race in a grid: the last block reads the other blocks' values with no tickets" * doctest::skip()) {
    run_last_block_of_four(mpt_emulation_check::Handoff::none);
}

TEST_CASE("race in a fence: the blocks take their tickets with no fence after their values" * doctest::skip()) {
    run_last_block_of_four(mpt_emulation_check::Handoff::ticket_without_fence);
}

TEST_CASE("race in a ticket: the last block reads the values with no fence after its ticket" * doctest::skip()) {
    run_last_block_of_four(mpt_emulation_check::Handoff::ticket_without_reading_fence);
}

TEST_CASE("a kernel on one stream reads what another stream's copy wrote after an event, and the host after a sync") {
    constexpr unsigned kCount = 40;
    DeviceBuffer source(sizeof(int) * kCount), staged(sizeof(int) * kCount), out(sizeof(int) * kCount);
    for (unsigned i = 0; i < kCount; ++i) source.as<int>()[i] = static_cast<int>(i) * 3 + 1;
    mpt_emulation_check::run_stream_handoff(source.as<int>(), staged.as<int>(), out.as<int>(), kCount, true);
    for (unsigned i = 0; i < kCount; ++i) CHECK(out.as<int>()[i] == static_cast<int>(i) * 3 + 1);
    DeviceBuffer value(sizeof(int));
    value.as<int>()[0] = 0;
    CHECK(mpt_emulation_check::host_reads_stream_result(value.as<int>(), true) == 0x01010101);
}

TEST_CASE("grids of one block on more live streams than ThreadSanitizer has threads for run, each on its stream") {
    constexpr unsigned kStreams = 10;
    constexpr unsigned kThreads = mpt_emulation_check::kLiveStreamThreads;
    DeviceBuffer out(sizeof(int) * kStreams * kThreads);
    for (unsigned i = 0; i < kStreams * kThreads; ++i) out.as<int>()[i] = -1;
    mpt_emulation_check::run_on_live_streams(out.as<int>(), kStreams);
    unsigned wrong = 0;
    for (unsigned i = 0; i < kStreams * kThreads; ++i) wrong += out.as<int>()[i] != static_cast<int>(i % kThreads);
    CHECK(wrong == 0);
}

TEST_CASE("race in a stream: a kernel reads what another stream's copy writes, with no event between" *
          doctest::skip()) {
    DeviceBuffer source(sizeof(int) * 8), staged(sizeof(int) * 8), out(sizeof(int) * 8);
    for (int i = 0; i < 8; ++i) source.as<int>()[i] = i;
    mpt_emulation_check::run_stream_handoff(source.as<int>(), staged.as<int>(), out.as<int>(), 8, false);
}

TEST_CASE("race in a stream pair: one block reads what another stream's one block writes, in the same lanes" *
          doctest::skip()) {
    DeviceBuffer staged(sizeof(int) * 32), out(sizeof(int) * 32);
    mpt_emulation_check::run_stream_pair(staged.as<int>(), out.as<int>(), 32);
}

TEST_CASE("race in a host: it reads what a stream set, with no synchronisation" * doctest::skip()) {
    DeviceBuffer value(sizeof(int));
    value.as<int>()[0] = 0;
    mpt_emulation_check::host_reads_stream_result(value.as<int>(), false);
}

// The backend's captures run in the thread-local mode; the emulation keeps the runtime's rules for
// them, so that a step whose capture a GPU would refuse (a cudaMalloc while recording, say) is refused
// here too, and the GPU test programs' zero-refusal checks mean on the emulated backend what they do
// on a GPU.
TEST_CASE("the emulated runtime refuses what stream capture does not permit, and invalidates the capture") {
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    const auto ended = [&](cudaError_t expected) {
        cudaGraph_t graph = nullptr;
        CHECK(cudaStreamEndCapture(stream, &graph) == expected);
        CHECK((graph != nullptr) == (expected == cudaSuccess));
        if (graph) CHECK(cudaGraphDestroy(graph) == cudaSuccess);
        cudaGetLastError();
    };
    void* memory = nullptr;
    SUBCASE("a cudaMalloc on the capturing thread") {
        REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        CHECK(cudaMalloc(&memory, 64) == cudaErrorStreamCaptureUnsupported);
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        CHECK(cudaStreamIsCapturing(stream, &status) == cudaSuccess);
        CHECK(status == cudaStreamCaptureStatusInvalidated);
        ended(cudaErrorStreamCaptureInvalidated);
    }
    SUBCASE("a synchronisation of the capturing stream, then of the device") {
        REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        CHECK(cudaStreamSynchronize(stream) == cudaErrorStreamCaptureUnsupported);
        ended(cudaErrorStreamCaptureInvalidated);
        REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
        ended(cudaErrorStreamCaptureInvalidated);
    }
    SUBCASE("an event recorded in the capture, asked after") {
        cudaEvent_t event = nullptr;
        REQUIRE(cudaEventCreate(&event) == cudaSuccess);
        REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        REQUIRE(cudaEventRecord(event, stream) == cudaSuccess);
        CHECK(cudaEventQuery(event) == cudaErrorCapturedEvent);
        CHECK(cudaEventSynchronize(event) == cudaErrorCapturedEvent);
        ended(cudaSuccess);
        REQUIRE(cudaEventRecord(event, stream) == cudaSuccess);  // outside a capture: usable again
        CHECK(cudaEventSynchronize(event) == cudaSuccess);
        CHECK(cudaEventDestroy(event) == cudaSuccess);
    }
    SUBCASE("another thread's cudaMalloc: permitted beside a thread-local capture, not beside a global one") {
        for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeGlobal}) {
            REQUIRE(cudaStreamBeginCapture(stream, mode) == cudaSuccess);
            cudaError_t elsewhere = cudaErrorUnknown;
            std::thread([&] {
                elsewhere = cudaMalloc(&memory, 64);
                if (elsewhere == cudaSuccess) CHECK(cudaFree(memory) == cudaSuccess);
            }).join();
            const bool global = mode == cudaStreamCaptureModeGlobal;
            CHECK(elsewhere == (global ? cudaErrorStreamCaptureUnsupported : cudaSuccess));
            ended(global ? cudaErrorStreamCaptureInvalidated : cudaSuccess);
        }
    }
    SUBCASE("the work issued into a capture runs when its graph is launched, not before") {
        int* value = nullptr;
        REQUIRE(cudaMalloc(reinterpret_cast<void**>(&value), sizeof(int)) == cudaSuccess);
        *value = 0;
        REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        REQUIRE(cudaMemsetAsync(value, 1, sizeof(int), stream) == cudaSuccess);
        CHECK(*value == 0);
        cudaGraph_t graph = nullptr;
        REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
        cudaGraphExec_t exec = nullptr;
        REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
        REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
        CHECK(*value == 0x01010101);
        CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
        CHECK(cudaGraphDestroy(graph) == cudaSuccess);
        CHECK(cudaFree(value) == cudaSuccess);
    }
    // Nothing left capturing: the calls are permitted again.
    REQUIRE(cudaMalloc(&memory, 64) == cudaSuccess);
    CHECK(cudaFree(memory) == cudaSuccess);
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("the max pass's kernel finds every tensor's max |x| whatever the grid and the blocks' order") {
    std::mt19937 random(20261206);
    std::vector<DeviceTensor> tensors;
    // Vectorised and element-wise (misaligned) tensors of each dtype, with tails, one chunk and many
    // (a chunk is 1,024 16-byte units), an empty one and one of a single element.
    tensors.emplace_back(DType::fp32, 4 * 1024 * 3 + 7);
    tensors.emplace_back(DType::bf16, 8 * 1024 * 2 + 5);
    tensors.emplace_back(DType::fp16, 1000, 2);
    tensors.emplace_back(DType::fp32, 0);
    tensors.emplace_back(DType::fp32, 5000, 4);
    tensors.emplace_back(DType::bf16, 1);
    tensors.emplace_back(DType::fp16, 8 * 1024 + 8);
    tensors.emplace_back(DType::bf16, 333, 6);
    for (size_t k = 0; k < tensors.size(); ++k) fill_random(tensors[k], random, 1.0f + static_cast<float>(k));
    // Planted maxima: at a tensor's first element, its last (the tail), the middle of a vector.
    tensors[0].set(0, -1000.0f);
    tensors[1].set(tensors[1].count - 1, 77.0f);
    tensors[2].set(501, -8.5f);
    tensors[4].set(4999, 123.0f);
    tensors[6].set(8 * 1024 + 3, -65504.0f);  // fp16's largest finite
    SUBCASE("finite values") {}
    SUBCASE("NaN and -Inf count as +Inf") {
        tensors[0].set(4 * 1024 + 9, NAN);
        tensors[7].set(300, -INFINITY);
    }

    std::vector<mpt::MaxAbsInput> inputs;
    for (const DeviceTensor& t : tensors) inputs.push_back(mpt::MaxAbsInput{t.buffer.data(), t.dtype, t.count});
    for (const int max_blocks : {1, 3, 8, 1000}) {
        for (const uint64_t seed : {0ull, 1ull, 2ull}) {
            CAPTURE(max_blocks);
            CAPTURE(seed);
            MaxAbsScratchBuffer scratch(max_blocks);
            DeviceBuffer out(sizeof(float) * inputs.size());
            mpt_emulation::set_block_order_seed(seed);
            mpt::run_max_abs(inputs.data(), static_cast<int>(inputs.size()), out.as<float>(), scratch.scratch(),
                             mpt::MaxAbsDecision{}, nullptr);
            mpt_emulation::set_block_order_seed(0);
            for (size_t k = 0; k < tensors.size(); ++k) {
                CAPTURE(k);
                CHECK(bits_of_float(out.as<float>()[k]) == bits_of_float(reference_max_abs(tensors[k].values)));
            }
            CHECK(scratch.zero());  // the cells and the ticket are ready for the next pass
        }
    }
}

TEST_CASE("the max pass's decision reads the maxima it computed and those already taken") {
    // Two layers' (dZ, A_prev) pairs; the second pair's maxima were taken by the backward that wrote
    // them (kMaxAbsTaken: the pass leaves out[2] and out[3] and reads them).
    std::mt19937 random(7);
    DeviceTensor gradient(DType::fp32, 640), input(DType::bf16, 3000);
    fill_random(gradient, random, 1.0f);
    fill_random(input, random, 4.0f);
    const float taken_gradient_max = 2.0f;
    for (const float taken_input_max : {3.0f, 1e38f, INFINITY}) {
        CAPTURE(taken_input_max);
        const mpt::MaxAbsInput inputs[4] = {{gradient.buffer.data(), DType::fp32, gradient.count},
                                            {input.buffer.data(), DType::bf16, input.count},
                                            {nullptr, DType::bf16, mpt::kMaxAbsTaken},
                                            {nullptr, DType::bf16, mpt::kMaxAbsTaken}};
        DeviceBuffer out(4 * sizeof(float));
        out.as<float>()[2] = taken_gradient_max;
        out.as<float>()[3] = taken_input_max;
        DeviceBuffer state_memory(sizeof(mpt::TrainState));
        mpt::TrainState& state = *state_memory.as<mpt::TrainState>();
        state = mpt::TrainState{};
        MaxAbsScratchBuffer scratch(8);
        mpt::run_max_abs(inputs, 4, out.as<float>(), scratch.scratch(), mpt::MaxAbsDecision{&state, 2, 32}, nullptr);
        CHECK(out.as<float>()[0] == reference_max_abs(gradient.values));
        CHECK(out.as<float>()[1] == reference_max_abs(input.values));
        CHECK(out.as<float>()[2] == taken_gradient_max);
        CHECK(out.as<float>()[3] == taken_input_max);
        const float pairs[4] = {out.as<float>()[0], out.as<float>()[1], taken_gradient_max, taken_input_max};
        CHECK(state.found_inf == (mpt::gradient_bounds_finite(pairs, 2, 32) ? 0 : 1));
        CHECK(state.found_inf == (taken_input_max == 3.0f ? 0 : 1));
        CHECK(scratch.zero());
    }
}

TEST_CASE("a max pass of taken maxima alone launches nothing, unless it decides") {
    const mpt::MaxAbsInput inputs[2] = {{nullptr, DType::fp32, mpt::kMaxAbsTaken},
                                        {nullptr, DType::bf16, mpt::kMaxAbsTaken}};
    DeviceBuffer out(2 * sizeof(float));
    out.as<float>()[0] = 1e30f;
    out.as<float>()[1] = 1e30f;
    MaxAbsScratchBuffer scratch(8);
    const uint64_t before = mpt_emulation::launches();
    mpt::run_max_abs(inputs, 2, out.as<float>(), scratch.scratch(), mpt::MaxAbsDecision{}, nullptr);
    CHECK(mpt_emulation::launches() == before);

    DeviceBuffer state_memory(sizeof(mpt::TrainState));
    mpt::TrainState& state = *state_memory.as<mpt::TrainState>();
    state = mpt::TrainState{};
    mpt::run_max_abs(inputs, 2, out.as<float>(), scratch.scratch(), mpt::MaxAbsDecision{&state, 1, 64}, nullptr);
    CHECK(mpt_emulation::launches() == before + 1);
    CHECK(state.found_inf == 1);  // 64 * 1e30 * 1e30 overflows
    CHECK(out.as<float>()[0] == 1e30f);
    CHECK(scratch.zero());
}

namespace {

// One head, as test_cuda_ops's cases describe them: the emulated kernel against cpu_loss_head on the
// same inputs.
// One head, as test_cuda_ops's cases describe them (tests/support/loss_head_case.h), and what the
// emulated kernel adds: a NaN logit, and the head that starts the step (begin_step folded into it).
struct HeadCase {
    mpt_test::LossHeadCase head;
    int64_t nan_logit = -1;  // an element of the logits set to NaN, or none
    bool starts_step = false;
};

// The inputs of a head, in emulated device memory, and what a run of it wrote.
struct HeadRun {
    DeviceBuffer logits, labels, targets, probabilities, gradient, state, metrics, class_weights, row_weights;
    mpt::LossHeadArgs args{};

    HeadRun(const HeadCase& c, const mpt_test::LossHeadInputs& in)
        : logits(in.logits.size() * 4),
          labels(in.labels.size() * 4),
          targets(in.targets.size() * 4),
          probabilities(in.logits.size() * 4),
          gradient(in.logits.size() * 4),
          state(sizeof(mpt::TrainState)),
          metrics(sizeof(double) * mpt::kMetricsCount),
          class_weights(in.class_weights.size() * 4),
          row_weights(in.row_weights.size() * 4) {
        std::memcpy(logits.data(), in.logits.data(), logits.size());
        std::memcpy(labels.data(), in.labels.data(), labels.size());
        std::memcpy(targets.data(), in.targets.data(), targets.size());
        std::memcpy(class_weights.data(), in.class_weights.data(), class_weights.size());
        std::memcpy(row_weights.data(), in.row_weights.data(), row_weights.size());
        mpt::TrainState initial{};
        initial.loss_scale = mpt_test::kLossHeadScale;
        initial.found_inf = c.starts_step ? 1 : 0;  // a head that starts the step clears it
        std::memcpy(state.data(), &initial, sizeof(initial));
        std::memcpy(metrics.data(), mpt_test::kLossHeadInitialMetrics, sizeof(mpt_test::kLossHeadInitialMetrics));
        args = mpt_test::loss_head_args(
            c.head,
            {logits.as<float>(), labels.as<int32_t>(), targets.as<float>(), probabilities.as<float>(), gradient.data(),
             state.as<mpt::TrainState>(), metrics.as<double>(), class_weights.as<float>(), row_weights.as<float>()});
    }

    // The gradient as the dtype stores it on a GPU (`device`), or as the CPU backend stores every
    // dtype: the values it rounds to, as fp32.
    std::vector<float> gradient_values(bool device) const {
        std::vector<float> values(static_cast<size_t>(args.rows * args.width));
        for (size_t i = 0; i < values.size(); ++i) {
            switch (device ? args.logits_grad_dtype : DType::fp32) {
                case DType::fp32:
                    values[i] = gradient.as<float>()[i];
                    break;
                case DType::bf16:
                    values[i] = __bfloat162float(gradient.as<__nv_bfloat16>()[i]);
                    break;
                case DType::fp16:
                    values[i] = __half2float(gradient.as<__half>()[i]);
                    break;
            }
        }
        return values;
    }
};

// max |a - b| over max |b|, NaN where one is NaN and the other not (both NaN: equal).
double normalised_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double largest = 0.0, difference = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) || std::isnan(b[i])) {
            if (std::isnan(a[i]) != std::isnan(b[i])) return NAN;
            continue;
        }
        largest = std::max(largest, std::fabs(static_cast<double>(b[i])));
        difference = std::max(difference, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    return largest > 0.0 ? difference / largest : difference;
}

// The rounding of a gradient element in its dtype, and a few ulps of fp32 for the rest.
double difference_bound(DType dtype) {
    switch (dtype) {
        case DType::fp32:
            return 1e-5;
        case DType::bf16:
            return 1.6e-2;
        case DType::fp16:
            return 2e-3;
    }
    return 0.0;
}

void compare_head(const HeadCase& test, uint64_t block_order_seed) {
    const mpt_test::LossHeadCase& c = test.head;
    CAPTURE(static_cast<int>(c.activation));
    CAPTURE(static_cast<int>(c.loss));
    CAPTURE(c.rows);
    CAPTURE(c.width);
    CAPTURE(c.classes);
    CAPTURE(static_cast<int>(c.gradient_dtype));
    CAPTURE(c.label_smoothing);
    CAPTURE(c.with_class_weights);
    CAPTURE(c.with_row_weights);
    CAPTURE(c.mean_rows);
    CAPTURE(test.nan_logit);
    CAPTURE(test.starts_step);
    CAPTURE(block_order_seed);
    std::mt19937 random(static_cast<uint32_t>(c.rows * 131 + c.width * 7 + c.classes));
    const mpt_test::LossHeadInputs in = mpt_test::random_loss_head_inputs(c, random, test.nan_logit);
    HeadRun reference(test, in);
    HeadRun emulated(test, in);
    float reference_gradient_max = NAN;
    reference.args.logits_grad_max_abs = &reference_gradient_max;
    mpt::cpu_loss_head(reference.args);
    CHECK(bits_of_float(reference_gradient_max) == bits_of_float(reference_max_abs(reference.gradient_values(false))));
    if (test.starts_step && c.with_state && reference.args.state->found_inf == 1) {
        // cpu_loss_head leaves a set found_inf set; begin_step on the CPU would have cleared it first.
        const double batch_loss = reference.args.metrics[mpt::kMetricBatchLoss];
        if (std::fabs(batch_loss) <= 3.4028234663852886e38) reference.args.state->found_inf = 0;
    }
    DeviceBuffer head_scratch_memory(mpt::kLossHeadMaxBlocks * (sizeof(double) + 2 * sizeof(long long)) + 256);
    std::memset(head_scratch_memory.data(), 0, head_scratch_memory.size());
    char* base = head_scratch_memory.as<char>();
    const mpt::LossHeadScratch scratch{reinterpret_cast<double*>(base),
                                       reinterpret_cast<long long*>(base + mpt::kLossHeadMaxBlocks * 8),
                                       reinterpret_cast<long long*>(base + mpt::kLossHeadMaxBlocks * 16),
                                       reinterpret_cast<unsigned*>(base + mpt::kLossHeadMaxBlocks * 24),
                                       reinterpret_cast<unsigned*>(base + mpt::kLossHeadMaxBlocks * 24 + 128)};
    // The gradient's max |x| as the head writes it, poisoned before (NaN in every float format).
    DeviceBuffer gradient_max(sizeof(float));
    std::memset(gradient_max.data(), 0xff, sizeof(float));
    emulated.args.logits_grad_max_abs = gradient_max.as<float>();
    mpt_emulation::set_block_order_seed(block_order_seed);
    mpt::run_loss_head(emulated.args, scratch, nullptr, test.starts_step);
    mpt_emulation::set_block_order_seed(0);
    // Exactly max_abs's value over the gradient as stored (NaN and Inf as +Inf); the cell left 0.
    CHECK(bits_of_float(*gradient_max.as<float>()) == bits_of_float(reference_max_abs(emulated.gradient_values(true))));
    CHECK(*scratch.gradient_largest == 0u);

    const std::vector<float> gradient = emulated.gradient_values(true),
                             expected_gradient = reference.gradient_values(false);
    CHECK(normalised_difference(gradient, expected_gradient) <= difference_bound(c.gradient_dtype));
    // Padded columns are 0 in the gradient (the model's padded outputs must not learn).
    for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t k = c.classes; k < c.width; ++k) CHECK(gradient[static_cast<size_t>(r * c.width + k)] == 0.0f);
    if (c.with_probabilities) {
        const size_t n = static_cast<size_t>(c.rows * c.width);
        const std::vector<float> p(emulated.probabilities.as<float>(), emulated.probabilities.as<float>() + n);
        const std::vector<float> q(reference.probabilities.as<float>(), reference.probabilities.as<float>() + n);
        CHECK(normalised_difference(p, q) <= 1e-5);
    }
    const double* metrics = emulated.args.metrics;
    const double* expected = reference.args.metrics;
    if (test.nan_logit >= 0) {
        CHECK(std::isnan(metrics[mpt::kMetricLossSum]));
        CHECK(std::isnan(metrics[mpt::kMetricBatchLoss]));
    } else {
        CHECK(metrics[mpt::kMetricLossSum] == doctest::Approx(expected[mpt::kMetricLossSum]).epsilon(1e-5));
        CHECK(metrics[mpt::kMetricBatchLoss] == doctest::Approx(expected[mpt::kMetricBatchLoss]).epsilon(1e-5));
    }
    CHECK(metrics[mpt::kMetricCorrect] == expected[mpt::kMetricCorrect]);
    CHECK(metrics[mpt::kMetricCounted] == expected[mpt::kMetricCounted]);
    if (c.with_state) CHECK(emulated.args.state->found_inf == reference.args.state->found_inf);
    CHECK(*scratch.counter == 0u);  // ready for the next head
}

}  // namespace

TEST_CASE("the loss head's kernels match the CPU's head in every case, in one block and in several") {
    struct Shape {
        int64_t rows, width, classes;
    };
    // One block (at most 32 rows, a warp each) and several (8 rows a block, the last partial); rows
    // of at most 32 columns (the narrow kernel for the logits' cases) and wider ones.
    const Shape shapes[] = {{1, 16, 10}, {7, 8, 5}, {32, 16, 10}, {33, 16, 10}, {67, 8, 3}, {29, 48, 40}, {45, 40, 33}};
    struct Head {
        Activation activation;
        LossKind loss;
    };
    const Head heads[] = {{Activation::softmax, LossKind::sparse_categorical_crossentropy},
                          {Activation::linear, LossKind::sparse_categorical_crossentropy},
                          {Activation::softmax, LossKind::categorical_crossentropy},
                          {Activation::sigmoid, LossKind::categorical_crossentropy},
                          {Activation::sigmoid, LossKind::binary_crossentropy},
                          {Activation::tanh, LossKind::binary_crossentropy},
                          {Activation::linear, LossKind::mean_squared_error},
                          {Activation::softmax, LossKind::huber},
                          {Activation::elu, LossKind::mean_absolute_error}};
    const DType dtypes[] = {DType::fp32, DType::bf16, DType::fp16};
    int variant = 0;
    for (const Head& head : heads) {
        for (const Shape& shape : shapes) {
            HeadCase test{{head.activation, head.loss, shape.rows, shape.width, shape.classes, dtypes[variant % 3],
                           true, variant % 2 == 0}};
            // Options in rotation, so that each head meets each of them in some shape.
            mpt_test::LossHeadCase& c = test.head;
            c.with_class_weights = variant % 3 == 1 && mpt::loss_takes_class_weights(c.loss);
            c.with_row_weights = variant % 4 == 2;
            c.label_smoothing = variant % 5 == 3 && mpt::valid_label_smoothing(c.loss, 0.1f) ? 0.1f : 0.0f;
            test.starts_step = variant % 3 == 2;
            if (variant % 7 == 4) {
                c.mean_rows = 3 * c.rows;
                c.continues_batch = true;
            }
            ++variant;
            compare_head(test, 0);
            compare_head(test, 5);  // the blocks in another order: the last block combines in a fixed one
            HeadCase nan_case = test;
            nan_case.nan_logit = shape.classes > 1 ? 1 : 0;  // row 0: found_inf, NaN loss
            compare_head(nan_case, 0);
        }
    }
}

namespace {

// An element's bits in a 16-bit or 32-bit array.
uint32_t element_bits(const DeviceBuffer& buffer, DType dtype, size_t i) {
    return dtype == DType::fp32 ? buffer.as<uint32_t>()[i] : buffer.as<uint16_t>()[i];
}
void set_element_bits(DeviceBuffer& buffer, DType dtype, size_t i, uint32_t bits) {
    if (dtype == DType::fp32)
        buffer.as<uint32_t>()[i] = bits;
    else
        buffer.as<uint16_t>()[i] = static_cast<uint16_t>(bits);
}
float element_float(DType dtype, uint32_t bits) {
    switch (dtype) {
        case DType::fp32:
            return float_of_bits(bits);
        case DType::bf16:
            return float_of_bits(bits << 16);
        case DType::fp16: {
            __half_raw raw;
            raw.x = static_cast<unsigned short>(bits);
            return __half2float(__half(raw));
        }
    }
    return 0.0f;
}
// The bits of an output element of each kind ReLU's backward must tell apart.
uint32_t output_bits(DType dtype, int kind, std::mt19937& random) {
    const bool wide = dtype == DType::fp32;
    const uint32_t sign = wide ? 0x80000000u : 0x8000u;
    const uint32_t infinity = wide ? 0x7f800000u : (dtype == DType::bf16 ? 0x7f80u : 0x7c00u);
    const uint32_t finite = 1 + random() % (infinity - 1);  // positive: subnormal to the largest
    switch (kind) {
        case 0:
            return 0;  // +0: not above 0
        case 1:
            return sign;  // -0
        case 2:
            return sign | finite;  // negative
        case 3:
            return infinity + 1;  // NaN: not above 0
        case 4:
            return infinity;  // +Inf: above 0
        case 5:
            return sign | infinity;  // -Inf
        default:
            return finite;  // above 0 (the most common)
    }
}

}  // namespace

TEST_CASE("the ReLU backward in place zeroes the gradient where the output is not above 0 and takes both maxima") {
    for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
        // A tail alone, vectors and a tail, one block's worth, several blocks' (256 threads of 16 bytes).
        for (const int64_t count : {int64_t{5}, int64_t{8 * 37 + 3}, int64_t{2048}, int64_t{4 * 256 * 9 + 1}}) {
            for (const int asked : {0, 1, 2, 3}) {  // bit 0: the gradient's maximum, bit 1: the output's
                CAPTURE(static_cast<int>(dtype));
                CAPTURE(count);
                CAPTURE(asked);
                std::mt19937 random(static_cast<uint32_t>(count * 3 + asked));
                const size_t n = static_cast<size_t>(count), bytes = n * (dtype == DType::fp32 ? 4 : 2);
                DeviceBuffer gradient(bytes, 16), output(bytes, 16);
                std::vector<uint32_t> gradient_before(n);
                std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
                for (size_t i = 0; i < n; ++i) {
                    const float g = uniform(random);
                    gradient_before[i] = dtype == DType::fp32   ? bits_of_float(g)
                                         : dtype == DType::bf16 ? bits_of_float(g) >> 16
                                                                : __half_raw(__float2half_rn(g)).x;
                    set_element_bits(gradient, dtype, i, gradient_before[i]);
                    set_element_bits(output, dtype, i, output_bits(dtype, static_cast<int>(random() % 10), random));
                }
                // The largest gradient where the output is 0 (it must not count) and where it is kept.
                set_element_bits(output, dtype, 0, 0);
                set_element_bits(gradient, dtype, 0, dtype == DType::fp32 ? bits_of_float(1000.0f) : 0x4000u | 0x3000u);
                gradient_before[0] = element_bits(gradient, dtype, 0);
                MaxAbsScratchBuffer scratch(3);  // a cap of 3 blocks: several blocks raise the cells
                DeviceBuffer maxima(2 * sizeof(float));
                maxima.as<float>()[0] = maxima.as<float>()[1] = -1.0f;
                float* gradient_max = (asked & 1) ? maxima.as<float>() : nullptr;
                float* output_max = (asked & 2) ? maxima.as<float>() + 1 : nullptr;
                mpt_emulation::set_block_order_seed(static_cast<uint64_t>(asked) + 1);
                if (asked == 0)
                    mpt::run_relu_backward_in_place(gradient.data(), output.data(), dtype, count, nullptr);
                else
                    mpt::run_relu_backward_in_place(gradient.data(), output.data(), dtype, count, gradient_max,
                                                    output_max, scratch.scratch(), nullptr);
                mpt_emulation::set_block_order_seed(0);

                std::vector<float> kept_values, output_values;
                int64_t wrong = 0;
                for (size_t i = 0; i < n; ++i) {
                    const uint32_t y = element_bits(output, dtype, i);
                    const float y_value = element_float(dtype, y);
                    const bool kept = y_value > 0.0f;  // NaN is not
                    const uint32_t expected = kept ? gradient_before[i] : 0u;
                    if (element_bits(gradient, dtype, i) != expected) ++wrong;
                    kept_values.push_back(kept ? element_float(dtype, gradient_before[i]) : 0.0f);
                    output_values.push_back(y_value);
                }
                CHECK(wrong == 0);
                CHECK(maxima.as<float>()[0] == ((asked & 1) ? reference_max_abs(kept_values) : -1.0f));
                CHECK(maxima.as<float>()[1] == ((asked & 2) ? reference_max_abs(output_values) : -1.0f));
                CHECK(scratch.zero());
            }
        }
    }
}

namespace {

// A 16-bit or fp32 array of `dtype` in emulated device memory from floats, and the floats it holds.
DeviceTensor upload_rounded(DType dtype, const std::vector<float>& values, size_t misalignment = 0) {
    DeviceTensor tensor(dtype, static_cast<int64_t>(values.size()), misalignment);
    for (size_t i = 0; i < values.size(); ++i) tensor.set(static_cast<int64_t>(i), values[i]);
    return tensor;
}

std::vector<float> random_vector(size_t n, float low, float high, std::mt19937& random) {
    std::uniform_real_distribution<float> uniform(low, high);
    std::vector<float> values(n);
    for (float& v : values) v = uniform(random);
    return values;
}

// One layer's plain SGD update on the emulated device, and what it must leave: the weight gradient
// summed as the kernel states it sums (fmaf over the batch rows in order from 0), the bias gradient
// as a float sum in the same order, the element rule and the step's scalars the shared inline
// functions'. Masters, bias and copies start from values the update cannot leave (copies 0xff).
struct SgdLayer {
    int64_t rows, in_features, out_features;
    DType dtype;
    DeviceTensor output_grad, input;
    DeviceBuffer weights, bias, low_weights, low_bias;
    std::vector<float> weights_before, bias_before;

    SgdLayer(int64_t r, int64_t in, int64_t out, DType type, bool aligned, std::mt19937& random)
        : rows(r),
          in_features(in),
          out_features(out),
          dtype(type),
          output_grad(upload_rounded(type, random_vector(static_cast<size_t>(r * out), -64.0f, 64.0f, random))),
          input(upload_rounded(type, random_vector(static_cast<size_t>(r * in), 0.0f, 2.0f, random))),
          weights(static_cast<size_t>(in * out) * 4, 256, aligned ? 0 : 4),
          bias(static_cast<size_t>(out) * 4),
          low_weights(static_cast<size_t>(in * out) * (type == DType::fp32 ? 4 : 2)),
          low_bias(static_cast<size_t>(out) * (type == DType::fp32 ? 4 : 2)) {
        weights_before = random_vector(static_cast<size_t>(in * out), -0.5f, 0.5f, random);
        bias_before = random_vector(static_cast<size_t>(out), -0.5f, 0.5f, random);
        std::memcpy(weights.data(), weights_before.data(), weights.size());
        std::memcpy(bias.data(), bias_before.data(), bias.size());
    }

    mpt::DenseUpdateArgs args(const mpt::TrainState* state) const {
        mpt::DenseUpdateArgs a{};
        a.output_grad = output_grad.buffer.data();
        a.input = input.buffer.data();
        a.weights = weights.as<float>();
        a.bias = bias.as<float>();
        a.low_weights = dtype == DType::fp32 ? nullptr : low_weights.data();
        a.low_bias = dtype == DType::fp32 ? nullptr : low_bias.data();
        a.rows = rows;
        a.in_features = in_features;
        a.out_features = out_features;
        a.compute_dtype = dtype;
        a.state = state;
        return a;
    }

    // Mismatches against the update from `state` (skipped: nothing written).
    int64_t mismatches(const mpt::OptimizerConfig& optimizer, const mpt::TrainState& state) const {
        int64_t wrong = 0;
        const bool copies = dtype != DType::fp32;
        const auto check_copy = [&](const DeviceBuffer& low, size_t index, float master, bool written) {
            if (!copies) return;
            const uint32_t bits = low.as<uint16_t>()[index];
            if (!written) {
                if (bits != 0xffffu) ++wrong;
                return;
            }
            const uint32_t expected = dtype == DType::bf16 ? __nv_bfloat16_raw(__float2bfloat16_rn(master)).x
                                                           : __half_raw(__float2half_rn(master)).x;
            if (bits != expected) ++wrong;
        };
        const bool applied = state.found_inf == 0;
        const mpt::OptimizerStepScalars scalars = mpt::plain_step_scalars(optimizer, state.loss_scale, state.steps);
        for (int64_t o = 0; o < out_features; ++o) {
            for (int64_t i = 0; i < in_features; ++i) {
                float gradient = 0.0f;
                for (int64_t r = 0; r < rows; ++r)
                    gradient = std::fma(output_grad.values[static_cast<size_t>(r * out_features + o)],
                                        input.values[static_cast<size_t>(r * in_features + i)], gradient);
                const size_t index = static_cast<size_t>(o * in_features + i);
                const float expected =
                    applied ? mpt::plain_sgd_update_element(optimizer, scalars, weights_before[index], gradient)
                            : weights_before[index];
                if (bits_of_float(weights.as<float>()[index]) != bits_of_float(expected)) ++wrong;
                check_copy(low_weights, index, expected, applied);
            }
            float sum = 0.0f;
            for (int64_t r = 0; r < rows; ++r) sum += output_grad.values[static_cast<size_t>(r * out_features + o)];
            const size_t index = static_cast<size_t>(o);
            const float expected = applied ? mpt::plain_sgd_update_element(optimizer, scalars, bias_before[index], sum)
                                           : bias_before[index];
            if (bits_of_float(bias.as<float>()[index]) != bits_of_float(expected)) ++wrong;
            check_copy(low_bias, index, expected, applied);
        }
        return wrong;
    }
};

// The updates of a kernel that sums the weight gradient in another order (the tensor cores'): each
// master within the rounding of its gradient's sum (2^-20 of the sum of its terms' magnitudes) and
// 2 ulps of the result; its copy the rounding of the master it wrote, bit for bit; the bias as
// mismatches() requires it where `exact_bias`.
int64_t tolerant_mismatches(const SgdLayer& layer, const mpt::OptimizerConfig& optimizer, const mpt::TrainState& state,
                            bool exact_bias) {
    int64_t wrong = 0;
    const mpt::OptimizerStepScalars scalars = mpt::plain_step_scalars(optimizer, state.loss_scale, state.steps);
    const int64_t rows = layer.rows, in = layer.in_features, out = layer.out_features;
    for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
            double gradient = 0.0, magnitude = 0.0;
            for (int64_t r = 0; r < rows; ++r) {
                const double term = static_cast<double>(layer.output_grad.values[static_cast<size_t>(r * out + o)]) *
                                    layer.input.values[static_cast<size_t>(r * in + i)];
                gradient += term;
                magnitude += std::fabs(term);
            }
            const size_t index = static_cast<size_t>(o * in + i);
            const float before = layer.weights_before[index];
            const float expected =
                mpt::plain_sgd_update_element(optimizer, scalars, before, static_cast<float>(gradient));
            const float got = layer.weights.as<float>()[index];
            const double ulp = std::fabs(std::nextafter(expected, INFINITY) - expected);
            const double bound = 2.0 * ulp + scalars.learning_rate * scalars.inverse_scale * magnitude * 0x1p-20;
            if (!(std::fabs(static_cast<double>(got) - expected) <= bound)) ++wrong;
            const uint32_t copy = layer.low_weights.as<uint16_t>()[index];
            const uint32_t rounded = layer.dtype == DType::bf16 ? __nv_bfloat16_raw(__float2bfloat16_rn(got)).x
                                                                : __half_raw(__float2half_rn(got)).x;
            if (copy != rounded) ++wrong;
        }
        float sum = 0.0f;
        for (int64_t r = 0; r < rows; ++r) sum += layer.output_grad.values[static_cast<size_t>(r * out + o)];
        const float expected =
            mpt::plain_sgd_update_element(optimizer, scalars, layer.bias_before[static_cast<size_t>(o)], sum);
        const float got = layer.bias.as<float>()[static_cast<size_t>(o)];
        if (exact_bias ? bits_of_float(got) != bits_of_float(expected)
                       : !(std::fabs(got - expected) <= 1e-5f * std::fabs(expected) + 1e-6f))
            ++wrong;
    }
    return wrong;
}

mpt::OptimizerConfig plain_sgd(float weight_decay) {
    mpt::OptimizerConfig optimizer{};
    optimizer.learning_rate = 0.05f;
    optimizer.weight_decay = weight_decay;
    return optimizer;
}

DeviceBuffer train_state(float loss_scale, int32_t found_inf) {
    DeviceBuffer memory(sizeof(mpt::TrainState));
    mpt::TrainState state{};
    state.loss_scale = loss_scale;
    state.found_inf = found_inf;
    state.steps = 7;
    state.applied_steps = 6;
    std::memcpy(memory.data(), &state, sizeof(state));
    return memory;
}

}  // namespace

TEST_CASE(
    "fused SGD's CUDA-core kernel updates the masters, bias and copies as its sums and rule say, in every "
    "compilation") {
    struct Shape {
        int64_t rows, in_features, out_features;
        bool aligned;
    };
    // Batches of 1 row to the kernel's 64, exactly 32 (its own compilation), a layer's last strip
    // and last tile partial or whole, the scalar path (columns not a multiple of 4, or masters not
    // 16-byte aligned).
    const Shape shapes[] = {{32, 256, 64, true},  {32, 300, 45, true}, {1, 128, 32, true},   {17, 260, 70, true},
                            {64, 136, 33, true},  {32, 130, 40, true}, {32, 128, 32, false}, {5, 7, 3, true},
                            {32, 256, 600, true}, {32, 130, 330, true}};
    for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
        for (const Shape& shape : shapes) {
            for (const float decay : {0.0f, 0.01f}) {
                for (const int choice_bits : {0, 1, 2, 3}) {  // bit 0: exact rows, bit 1: three blocks
                    // A block a tile (132 multiprocessors), or runs of several (one).
                    const Multiprocessors multiprocessors(choice_bits % 2 == 0 ? 132 : 1);
                    CAPTURE(static_cast<int>(dtype));
                    CAPTURE(shape.rows);
                    CAPTURE(shape.in_features);
                    CAPTURE(shape.out_features);
                    CAPTURE(shape.aligned);
                    CAPTURE(decay);
                    CAPTURE(choice_bits);
                    std::mt19937 random(static_cast<uint32_t>(shape.rows * 1000 + shape.in_features + choice_bits));
                    SgdLayer layer(shape.rows, shape.in_features, shape.out_features, dtype, shape.aligned, random);
                    DeviceBuffer state = train_state(1024.0f, 0);
                    const mpt::OptimizerConfig optimizer = plain_sgd(decay);
                    mpt::FusedSgdKernelChoice choice{};
                    choice.exact_rows = (choice_bits & 1) != 0;
                    choice.three_blocks = (choice_bits & 2) != 0;
                    mpt_emulation::set_block_order_seed(static_cast<uint64_t>(choice_bits));
                    mpt::run_fused_sgd(layer.args(state.as<mpt::TrainState>()), optimizer, choice, nullptr);
                    mpt_emulation::set_block_order_seed(0);
                    CHECK(layer.mismatches(optimizer, *state.as<mpt::TrainState>()) == 0);
                }
            }
        }
    }
}

TEST_CASE("fused SGD writes nothing in a skipped step") {
    std::mt19937 random(3);
    for (const DType dtype : {DType::fp32, DType::bf16}) {
        SgdLayer layer(32, 256, 64, dtype, true, random);
        DeviceBuffer state = train_state(1024.0f, 1);
        const mpt::OptimizerConfig optimizer = plain_sgd(0.01f);
        mpt::run_fused_sgd(layer.args(state.as<mpt::TrainState>()), optimizer, mpt::FusedSgdKernelChoice{true, true},
                           nullptr);
        CHECK(layer.mismatches(optimizer, *state.as<mpt::TrainState>()) == 0);
    }
}

TEST_CASE("fused SGD's group launch updates each layer as alone and finishes the step in its last block") {
    std::mt19937 random(11);
    for (const DType dtype : {DType::bf16, DType::fp16}) {
        for (const int choice_bits : {0, 1, 3}) {
            CAPTURE(static_cast<int>(dtype));
            CAPTURE(choice_bits);
            // The seed MLP's shape, narrowed: three layers of one variant in one launch.
            SgdLayer first(32, 384, 96, dtype, true, random), second(32, 96, 64, dtype, true, random),
                last(32, 64, 16, dtype, true, random);
            DeviceBuffer state = train_state(256.0f, 0);
            mpt::TrainState* device_state = state.as<mpt::TrainState>();
            const mpt::TrainState before = *device_state;
            const mpt::OptimizerConfig optimizer = plain_sgd(0.0f);
            const mpt::DenseUpdateArgs args[3] = {first.args(device_state), second.args(device_state),
                                                  last.args(device_state)};
            const mpt::DenseUpdateArgs* layers[3] = {&args[0], &args[1], &args[2]};
            const mpt::OptimizerConfig* optimizers[3] = {&optimizer, &optimizer, &optimizer};
            DeviceBuffer metrics(sizeof(double) * mpt::kMetricsCount), committed(sizeof(double) * mpt::kMetricsCount),
                counter(256);
            for (int m = 0; m < mpt::kMetricsCount; ++m) {
                metrics.as<double>()[m] = 1.5 * (m + 1);
                committed.as<double>()[m] = -1.0;
            }
            std::memset(counter.data(), 0, counter.size());
            mpt::FusedSgdFinish finish{};
            finish.state = device_state;
            finish.scaler.mode = mpt::LossScaling::dynamic;
            finish.scaler.growth_interval = 2;
            finish.metrics = metrics.as<double>();
            finish.committed_metrics = committed.as<double>();
            finish.counter = counter.as<unsigned>();
            mpt::FusedSgdKernelChoice choice{};
            choice.exact_rows = (choice_bits & 1) != 0;
            choice.three_blocks = (choice_bits & 2) != 0;
            mpt_emulation::set_block_order_seed(9);
            const uint64_t launches = mpt_emulation::launches();
            CHECK(mpt::run_fused_sgd_layers(layers, optimizers, 3, &finish, choice, nullptr) == 3);
            mpt_emulation::set_block_order_seed(0);
            CHECK(mpt_emulation::launches() == launches + 1);
            // The updates read the state before the last block advanced it.
            CHECK(first.mismatches(optimizer, before) == 0);
            CHECK(second.mismatches(optimizer, before) == 0);
            CHECK(last.mismatches(optimizer, before) == 0);
            mpt::TrainState expected = before;
            mpt::advance_loss_scaler(expected, finish.scaler);
            CHECK(std::memcmp(device_state, &expected, sizeof(expected)) == 0);
            for (int m = 0; m < mpt::kMetricsCount; ++m) CHECK(committed.as<double>()[m] == metrics.as<double>()[m]);
            CHECK(*counter.as<unsigned>() == 0u);
        }
    }
}

namespace {

// An array of `dtype` as floats (fp32 as is).
std::vector<float> download_values(const DeviceBuffer& buffer, DType dtype, size_t n) {
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i)
        values[i] = dtype == DType::fp32 ? buffer.as<float>()[i] : element_float(dtype, buffer.as<uint16_t>()[i]);
    return values;
}

// Elements of `got` farther from `expected` than the rounding of one value in `dtype` (relative to
// itself: 2^-7 for bf16, 2^-10 for fp16, 1e-5 for fp32) plus 1e-5 of the largest |expected| (the
// fp32 sums' own error): each element held to its own size, small ones too.
int64_t outside_rounding(const std::vector<float>& got, const std::vector<float>& expected, DType dtype) {
    double largest = 0.0;
    for (const float e : expected) largest = std::max(largest, std::fabs(static_cast<double>(e)));
    const double relative = dtype == DType::bf16 ? 0x1p-7 : (dtype == DType::fp16 ? 0x1p-10 : 1e-5);
    int64_t outside = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double e = expected[i];
        if (!(std::fabs(got[i] - e) <= relative * std::fabs(e) + 1e-5 * largest)) ++outside;
    }
    return outside;
}

struct ForwardCase {
    int64_t rows, in_features, out_features, valid_out;
    DType compute, output;
    Activation activation;
};

// Runs the small-batch forward on `c` (split as planned on the emulated device) and checks it against
// a double-precision reference; returns the outputs and the mask for a backward case, and the split.
struct ForwardResult {
    std::vector<float> output;
    DeviceBuffer output_buffer, mask;
    int splits = 0;
};
ForwardResult check_small_batch_forward(const ForwardCase& c, uint32_t data_seed, uint64_t order_seed) {
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.out_features);
    CAPTURE(c.valid_out);
    CAPTURE(static_cast<int>(c.compute));
    CAPTURE(static_cast<int>(c.output));
    CAPTURE(static_cast<int>(c.activation));
    CAPTURE(order_seed);
    std::mt19937 random(data_seed);
    const DeviceTensor input =
        upload_rounded(c.compute, random_vector(static_cast<size_t>(c.rows * c.in_features), -1.0f, 1.0f, random));
    const DeviceTensor weights = upload_rounded(
        c.compute, random_vector(static_cast<size_t>(c.out_features * c.in_features), -0.1f, 0.1f, random));
    const DeviceTensor bias =
        upload_rounded(c.compute, random_vector(static_cast<size_t>(c.out_features), -0.5f, 0.5f, random));
    ForwardResult result;
    const size_t outputs = static_cast<size_t>(c.rows * c.out_features);
    result.output_buffer = DeviceBuffer(outputs * (c.output == DType::fp32 ? 4 : 2));
    result.mask = DeviceBuffer(mpt::relu_mask_size(c.rows, c.out_features));
    mpt::DenseForwardArgs args{};
    args.input = input.buffer.data();
    args.weights = weights.buffer.data();
    args.bias = bias.buffer.data();
    args.output = result.output_buffer.data();
    args.relu_mask = result.mask.data();
    args.rows = c.rows;
    args.in_features = c.in_features;
    args.out_features = c.out_features;
    args.valid_out = c.valid_out;
    args.activation = c.activation;
    args.compute_dtype = c.compute;
    args.bias_dtype = c.compute;
    args.output_dtype = c.output;
    REQUIRE(mpt::small_batch_forward_applies(args));
    const mpt::small_batch_mma::SplitK split = mpt::small_batch_forward_split(args);
    result.splits = split.splits;
    mpt_emulation::set_block_order_seed(order_seed);
    mpt::run_small_batch_forward(args, split, true, nullptr);
    mpt_emulation::set_block_order_seed(0);

    result.output = download_values(result.output_buffer, c.output, outputs);
    std::vector<float> expected(outputs);
    int64_t mask_wrong = 0;
    const int64_t ld_bits = mpt::relu_mask_ld_bits(c.out_features);
    for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t f = 0; f < c.out_features; ++f) {
            double z = 0.0;
            for (int64_t k = 0; k < c.in_features; ++k)
                z += static_cast<double>(input.values[static_cast<size_t>(r * c.in_features + k)]) *
                     weights.values[static_cast<size_t>(f * c.in_features + k)];
            const bool valid = f < c.valid_out;
            z += bias.values[static_cast<size_t>(f)];
            expected[static_cast<size_t>(r * c.out_features + f)] =
                valid ? mpt::activation_forward(c.activation, static_cast<float>(z)) : 0.0f;
            if (c.activation == Activation::relu && std::fabs(z) > 1e-3) {  // (the sums' order decides near 0)
                const int64_t bit = mpt::small_batch_mma::mask_bit(f, r, ld_bits);
                const bool set = (result.mask.as<uint32_t>()[bit / 32] >> (bit % 32)) & 1u;
                if (set != (valid && z > 0.0)) ++mask_wrong;
            }
        }
    CHECK(outside_rounding(result.output, expected, c.output) == 0);
    CHECK(mask_wrong == 0);
    // Padded features are written as 0.
    for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t f = c.valid_out; f < c.out_features; ++f)
            CHECK(result.output[static_cast<size_t>(r * c.out_features + f)] == 0.0f);
    return result;
}

}  // namespace

TEST_CASE("the small-batch forward kernel, K split across a cluster, matches the reference and is deterministic") {
    const ComputeCapability hopper(90);
    const ForwardCase cases[] = {
        // K long enough for the split model to split it across a cluster, a feature tile or several.
        {32, 3072, 64, 64, DType::bf16, DType::bf16, Activation::relu},
        {32, 4096, 32, 32, DType::fp16, DType::fp16, Activation::relu},
        // Rows of each mma-tile count, padded outputs, the last layer's fp32 logits.
        {1, 2048, 40, 40, DType::bf16, DType::bf16, Activation::relu},
        {17, 1024, 96, 90, DType::bf16, DType::fp32, Activation::linear},
        {64, 1024, 32, 30, DType::fp16, DType::fp32, Activation::tanh},
        {8, 64, 16, 10, DType::bf16, DType::fp32, Activation::linear},  // short K: one block a tile
    };
    for (const ForwardCase& c : cases) {
        const ForwardResult first = check_small_batch_forward(c, 1, 0);
        MESSAGE("rows " << c.rows << ", K " << c.in_features << ", features " << c.out_features << ": " << first.splits
                        << " blocks a cluster");
        CHECK((first.splits > 1) == (c.in_features >= 1024));  // every case but the short K's is split
        // The clusters in another order: the same bits (each sum's order is fixed).
        const ForwardResult again = check_small_batch_forward(c, 1, 7);
        int64_t differ = 0;
        for (size_t i = 0; i < first.output.size(); ++i)
            differ += bits_of_float(first.output[i]) != bits_of_float(again.output[i]);
        CHECK(differ == 0);
    }
    // The seed MLP's first layer at batch 32 splits K in 2 (the prediction's 2 blocks a cluster on 132
    // SMs; the last test case runs it).
    mpt::DenseForwardArgs seed_layer{};
    seed_layer.rows = 32;
    seed_layer.in_features = 3072;
    seed_layer.out_features = 3000;
    seed_layer.valid_out = 3000;
    seed_layer.activation = Activation::relu;
    seed_layer.compute_dtype = seed_layer.bias_dtype = seed_layer.output_dtype = DType::bf16;
    CHECK(mpt::small_batch_forward_split(seed_layer).splits == 2);
}

namespace {

struct BackwardCase {
    int64_t rows, in_features, out_features;
    DType compute, gradient;
    Activation previous;  // A_prev's activation (ReLU: from the forward's mask, or from A_prev)
};

// The small-batch input gradient of `c` (split as planned on the emulated device) against a double
// reference, ReLU's derivative from the forward's mask or from A_prev, in each block order of `orders`;
// returns the split.
int check_small_batch_backward_data(const BackwardCase& c, bool from_mask, std::initializer_list<uint64_t> orders) {
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.out_features);
    CAPTURE(static_cast<int>(c.previous));
    CAPTURE(from_mask);
    // A_prev and its mask from the forward kernel of the layer below (64 inputs of its own).
    const ForwardCase below{c.rows, 64, c.in_features, c.in_features, c.compute, c.compute, c.previous};
    const ForwardResult previous = check_small_batch_forward(below, 5, 0);
    std::mt19937 random(9);
    const DeviceTensor output_grad =
        upload_rounded(c.compute, random_vector(static_cast<size_t>(c.rows * c.out_features), -8.0f, 8.0f, random));
    const DeviceTensor weights = upload_rounded(
        c.compute, random_vector(static_cast<size_t>(c.out_features * c.in_features), -0.1f, 0.1f, random));
    const size_t n = static_cast<size_t>(c.rows * c.in_features);
    DeviceBuffer input_grad(n * (c.gradient == DType::fp32 ? 4 : 2));
    mpt::DenseBackwardDataArgs args{};
    args.output_grad = output_grad.buffer.data();
    args.weights = weights.buffer.data();
    args.input = previous.output_buffer.data();
    args.relu_mask = previous.mask.data();
    args.input_grad = input_grad.data();
    args.rows = c.rows;
    args.in_features = c.in_features;
    args.out_features = c.out_features;
    args.input_activation = c.previous;
    args.compute_dtype = c.compute;
    args.input_grad_dtype = c.gradient;
    REQUIRE(mpt::small_batch_backward_data_applies(args));
    const mpt::small_batch_mma::SplitK split = mpt::small_batch_backward_data_split(args);
    CAPTURE(split.splits);
    std::vector<float> expected(n);
    for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t i = 0; i < c.in_features; ++i) {
            double sum = 0.0;
            for (int64_t o = 0; o < c.out_features; ++o)
                sum += static_cast<double>(output_grad.values[static_cast<size_t>(r * c.out_features + o)]) *
                       weights.values[static_cast<size_t>(o * c.in_features + i)];
            const float y = previous.output[static_cast<size_t>(r * c.in_features + i)];
            expected[static_cast<size_t>(r * c.in_features + i)] =
                static_cast<float>(sum) * mpt::activation_derivative_from_output(c.previous, y);
        }
    // The step's maxima of dZ_prev and A_prev where the launch takes them (every order but the first),
    // poisoned before: exactly max_abs's over the arrays as stored, the scratch's cells left zero.
    const MaxAbsScratchBuffer scratch(1);
    DeviceBuffer maxima(2 * sizeof(float));
    args.input_grad_max_abs = maxima.as<float>();
    args.input_max_abs = maxima.as<float>() + 1;
    const std::vector<float> input_values = download_values(previous.output_buffer, c.compute, n);
    for (const uint64_t order : orders) {
        // None (the first order), both, or the gradient's alone (as for a frozen layer above).
        for (const int asked : {0, 2, 1}) {
            if ((asked == 0) != (order == *orders.begin())) continue;
            CAPTURE(order);
            CAPTURE(asked);
            args.input_max_abs = asked == 2 ? maxima.as<float>() + 1 : nullptr;
            std::memset(maxima.data(), 0xff, maxima.size());
            mpt_emulation::set_block_order_seed(order);
            mpt::run_small_batch_backward_data(args, split, from_mask, asked > 0, scratch.scratch(), nullptr);
            mpt_emulation::set_block_order_seed(0);
            const std::vector<float> gradient = download_values(input_grad, c.gradient, n);
            CHECK(outside_rounding(gradient, expected, c.gradient) == 0);
            if (asked > 0) {
                CHECK(bits_of_float(maxima.as<float>()[0]) == bits_of_float(reference_max_abs(gradient)));
            } else {
                CHECK(std::isnan(maxima.as<float>()[0]));  // not written
            }
            if (asked == 2) {
                CHECK(bits_of_float(maxima.as<float>()[1]) == bits_of_float(reference_max_abs(input_values)));
            } else {
                CHECK(std::isnan(maxima.as<float>()[1]));
            }
            CHECK(scratch.zero());
        }
    }
    return split.splits;
}

}  // namespace

TEST_CASE("the small-batch input-gradient kernel, the output features split across a cluster, matches the reference") {
    const ComputeCapability hopper(90);
    const BackwardCase cases[] = {
        {32, 96, 2048, DType::bf16, DType::bf16, Activation::relu},
        {32, 64, 16, DType::bf16, DType::bf16, Activation::relu},  // K of 16, as the seed MLP's layer 3
        {5, 40, 1024, DType::fp16, DType::fp32, Activation::relu},
        {64, 32, 512, DType::fp16, DType::fp16, Activation::tanh},
        {17, 48, 256, DType::bf16, DType::fp32, Activation::linear},
    };
    for (const BackwardCase& c : cases) {
        for (const bool from_mask : {true, false}) {
            if (from_mask && c.previous != Activation::relu) continue;
            const int splits = check_small_batch_backward_data(c, from_mask, {0, 3});
            MESSAGE("rows " << c.rows << ", features " << c.in_features << ", K " << c.out_features << ": " << splits
                            << " blocks a cluster");
            CHECK((splits > 1) == (c.out_features >= 512));  // the long K's are split
        }
    }
}

TEST_CASE("fused SGD by bulk copies and tensor cores updates as the CUDA-core kernel does, within the sums' rounding") {
    const ComputeCapability hopper(90);
    const mpt::FusedSgdBulkCopyDevice device = mpt::prepare_fused_sgd_bulk_copy();
    struct Shape {
        int64_t rows, in_features, out_features;
    };
    // Each compilation (32, 64 and 256 rows, the batch padded up to them), runs of several tiles a
    // block (the ring of 3 stages turning over), a layer's last strip and tile partial.
    const Shape shapes[] = {{32, 256, 64},  {32, 300, 200}, {7, 128, 32},   {64, 132, 40},  {33, 256, 96},
                            {256, 128, 48}, {100, 260, 24}, {32, 256, 640}, {64, 132, 328}, {256, 128, 200}};
    // On one multiprocessor (3, 2 and 1 blocks of the three compilations), the last three give each
    // block more tiles than stages.
    const auto turns_ring = [](const Shape& shape) { return shape.out_features >= 200 && shape.in_features <= 256; };
    for (const DType dtype : {DType::bf16, DType::fp16}) {
        for (const Shape& shape : shapes) {
            CAPTURE(static_cast<int>(dtype));
            CAPTURE(shape.rows);
            CAPTURE(shape.in_features);
            CAPTURE(shape.out_features);
            // One multiprocessor: blocks take runs of several tiles, and the ring of stages turns over.
            const Multiprocessors one(1);
            std::mt19937 random(static_cast<uint32_t>(shape.rows * 7 + shape.out_features));
            SgdLayer layer(shape.rows, shape.in_features, shape.out_features, dtype, true, random);
            DeviceBuffer state = train_state(1024.0f, 0);
            const mpt::OptimizerConfig optimizer = plain_sgd(0.01f);
            const mpt::DenseUpdateArgs args = layer.args(state.as<mpt::TrainState>());
            REQUIRE(mpt::fused_sgd_bulk_copy_applies(args, device));
            mpt::FusedSgdKernelChoice choice{};
            choice.bulk_copy_layers = 1;
            mpt_emulation::set_block_order_seed(4);
            mpt_emulation::take_most_mbarrier_phases();
            mpt::run_fused_sgd(args, optimizer, choice, nullptr);
            const uint64_t phases = mpt_emulation::take_most_mbarrier_phases();
            mpt_emulation::set_block_order_seed(0);
            CHECK(tolerant_mismatches(layer, optimizer, *state.as<mpt::TrainState>(), shape.rows <= 64) == 0);
            if (turns_ring(shape)) CHECK(phases >= 2);  // a stage refilled and waited for at parity 1
        }
    }
}

TEST_CASE("the seed MLP's layers at batch 32 on the emulated H200, as the candidate switches run them") {
    // Each kernel once on the real shapes: 94 feature tiles with the last partial, splits as planned,
    // 24 column strips of masters with the last partial, a block a tile.
    const ComputeCapability hopper(90);
    // Layer 1's forward (MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1): K split in 2.
    CHECK(check_small_batch_forward({32, 3072, 3000, 3000, DType::bf16, DType::bf16, Activation::relu}, 3, 0).splits ==
          2);
    // Layer 2's input gradient (MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1), ReLU's derivative from layer 1's mask.
    MESSAGE("layer 2's input gradient: " << check_small_batch_backward_data(
                                                {32, 3000, 1000, DType::bf16, DType::bf16, Activation::relu}, true, {0})
                                         << " blocks a cluster");
    // Layer 1's update: fused SGD for exactly 32 rows, 3 blocks an SM (MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1,
    // MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1), the sums bit for bit; by bulk copies
    // (MPTRAIN_CUDA_BULK_COPY_SGD=1), within their rounding.
    std::mt19937 random(32);
    const mpt::OptimizerConfig optimizer = plain_sgd(0.0f);
    {
        SgdLayer layer(32, 3072, 3000, DType::bf16, true, random);
        DeviceBuffer state = train_state(32768.0f, 0);
        mpt::run_fused_sgd(layer.args(state.as<mpt::TrainState>()), optimizer, mpt::FusedSgdKernelChoice{true, true},
                           nullptr);
        CHECK(layer.mismatches(optimizer, *state.as<mpt::TrainState>()) == 0);
    }
    {
        SgdLayer layer(32, 3072, 3000, DType::bf16, true, random);
        DeviceBuffer state = train_state(32768.0f, 0);
        const mpt::DenseUpdateArgs args = layer.args(state.as<mpt::TrainState>());
        REQUIRE(mpt::fused_sgd_bulk_copy_applies(args, mpt::prepare_fused_sgd_bulk_copy()));
        mpt::FusedSgdKernelChoice choice{};
        choice.bulk_copy_layers = 1;
        mpt::run_fused_sgd(args, optimizer, choice, nullptr);
        CHECK(tolerant_mismatches(layer, optimizer, *state.as<mpt::TrainState>(), true) == 0);
    }
}

TEST_CASE("fused SGD by bulk copies: a group launch that finishes the step, and a skipped step") {
    const ComputeCapability hopper(90);
    const Multiprocessors one(1);
    std::mt19937 random(21);
    const mpt::OptimizerConfig optimizer = plain_sgd(0.0f);
    for (const int rows : {32, 64, 256}) {
        CAPTURE(rows);
        SgdLayer first(rows, 256, 96, DType::bf16, true, random), second(rows, 96, 64, DType::bf16, true, random),
            last(rows, 64, 16, DType::bf16, true, random);
        DeviceBuffer state = train_state(256.0f, 0);
        mpt::TrainState* device_state = state.as<mpt::TrainState>();
        const mpt::TrainState before = *device_state;
        const mpt::DenseUpdateArgs args[3] = {first.args(device_state), second.args(device_state),
                                              last.args(device_state)};
        const mpt::DenseUpdateArgs* layers[3] = {&args[0], &args[1], &args[2]};
        const mpt::OptimizerConfig* optimizers[3] = {&optimizer, &optimizer, &optimizer};
        DeviceBuffer counter(256);
        std::memset(counter.data(), 0, counter.size());
        mpt::FusedSgdFinish finish{};
        finish.state = device_state;
        finish.scaler.mode = mpt::LossScaling::dynamic;
        finish.counter = counter.as<unsigned>();
        mpt::FusedSgdKernelChoice choice{};
        choice.bulk_copy_layers = 0b111;
        const uint64_t launches = mpt_emulation::launches();
        mpt_emulation::set_block_order_seed(6);
        CHECK(mpt::run_fused_sgd_layers(layers, optimizers, 3, &finish, choice, nullptr) == 3);
        mpt_emulation::set_block_order_seed(0);
        CHECK(mpt_emulation::launches() == launches + 1);
        CHECK(tolerant_mismatches(first, optimizer, before, rows <= 64) == 0);
        CHECK(tolerant_mismatches(second, optimizer, before, rows <= 64) == 0);
        CHECK(tolerant_mismatches(last, optimizer, before, rows <= 64) == 0);
        mpt::TrainState expected = before;
        mpt::advance_loss_scaler(expected, finish.scaler);
        CHECK(std::memcmp(device_state, &expected, sizeof(expected)) == 0);
        CHECK(*counter.as<unsigned>() == 0u);

        // A skipped step: nothing written (mismatches() compares with the masters as they were).
        SgdLayer skipped(rows, 256, 96, DType::bf16, true, random);
        DeviceBuffer skip_state = train_state(256.0f, 1);
        mpt::FusedSgdKernelChoice alone{};
        alone.bulk_copy_layers = 1;
        mpt::run_fused_sgd(skipped.args(skip_state.as<mpt::TrainState>()), optimizer, alone, nullptr);
        CHECK(skipped.mismatches(optimizer, *skip_state.as<mpt::TrainState>()) == 0);
    }
}

TEST_CASE("the gather kernels normalise a batch's rows as the CPU does, bit for bit") {
    struct Case {
        bool u8;
        int64_t features, padded;
        DType dtype;
        bool standardized, ordered;
        int64_t rows;
    };
    // uint8 rows in 16-byte chunks (CIFAR's 3072 features), the general kernel (padded, odd widths,
    // fp32 samples), each batch dtype, standardization, an epoch's order.
    const Case cases[] = {
        {true, 3072, 3072, DType::bf16, false, true, 33}, {true, 3072, 3072, DType::fp16, true, true, 5},
        {true, 48, 48, DType::fp32, true, false, 300},    {true, 7, 16, DType::bf16, true, true, 9},
        {false, 40, 48, DType::fp32, false, true, 17},    {false, 33, 40, DType::fp16, true, false, 4}};
    for (const Case& c : cases) {
        CAPTURE(c.u8);
        CAPTURE(c.features);
        CAPTURE(c.padded);
        CAPTURE(static_cast<int>(c.dtype));
        CAPTURE(c.standardized);
        CAPTURE(c.rows);
        std::mt19937 random(static_cast<uint32_t>(c.features + c.rows));
        const int64_t dataset_rows = c.rows + 50, target_width = 3;
        DeviceBuffer samples(static_cast<size_t>(dataset_rows * c.features) * (c.u8 ? 1 : 4), 16);
        for (int64_t i = 0; i < dataset_rows * c.features; ++i) {
            if (c.u8)
                samples.as<uint8_t>()[i] = static_cast<uint8_t>(random());
            else
                samples.as<float>()[i] = std::uniform_real_distribution<float>(-3.0f, 300.0f)(random);
        }
        DeviceBuffer mean(static_cast<size_t>(c.features) * 4), divisor(static_cast<size_t>(c.features) * 4);
        for (int64_t f = 0; f < c.features; ++f) {
            mean.as<float>()[f] = std::uniform_real_distribution<float>(-0.5f, 0.5f)(random);
            divisor.as<float>()[f] = std::uniform_real_distribution<float>(0.1f, 2.0f)(random);
        }
        DeviceBuffer order(static_cast<size_t>(dataset_rows) * 4), labels(static_cast<size_t>(dataset_rows) * 4),
            targets(static_cast<size_t>(dataset_rows * target_width) * 4),
            weights(static_cast<size_t>(dataset_rows) * 4);
        for (int64_t r = 0; r < dataset_rows; ++r) {
            order.as<int32_t>()[r] = static_cast<int32_t>(random() % dataset_rows);
            labels.as<int32_t>()[r] = static_cast<int32_t>(r * 7);
            weights.as<float>()[r] = static_cast<float>(r) * 0.5f;
            for (int64_t k = 0; k < target_width; ++k)
                targets.as<float>()[r * target_width + k] = static_cast<float>(r + k);
        }
        const size_t element_bytes = c.dtype == DType::fp32 ? 4 : 2;
        DeviceBuffer batch(static_cast<size_t>(c.rows * c.padded) * element_bytes, 16),
            batch_labels(static_cast<size_t>(c.rows) * 4),
            batch_targets(static_cast<size_t>(c.rows * target_width) * 4),
            batch_weights(static_cast<size_t>(c.rows) * 4);
        mpt::GatherArgs args{};
        args.samples = samples.data();
        args.samples_are_u8 = c.u8;
        args.scale = c.u8 ? 1.0f / 255.0f : 0.01f;
        args.offset = -0.25f;
        args.feature_mean = c.standardized ? mean.as<float>() : nullptr;
        args.feature_divisor = c.standardized ? divisor.as<float>() : nullptr;
        args.order = c.ordered ? order.as<int32_t>() : nullptr;
        args.first = 11;
        args.rows = c.rows;
        args.features = c.features;
        args.padded_features = c.padded;
        args.batch = batch.data();
        args.batch_dtype = c.dtype;
        args.labels = labels.as<int32_t>();
        args.batch_labels = batch_labels.as<int32_t>();
        args.targets = targets.as<float>();
        args.target_width = target_width;
        args.batch_targets = batch_targets.as<float>();
        args.row_weights = weights.as<float>();
        args.batch_row_weights = batch_weights.as<float>();
        mpt::validate_gather(args);
        mpt_emulation::set_block_order_seed(2);
        mpt::run_gather(args, nullptr);
        mpt_emulation::set_block_order_seed(0);
        int64_t wrong = 0;
        for (int64_t r = 0; r < c.rows; ++r) {
            const int64_t source = c.ordered ? order.as<int32_t>()[args.first + r] : args.first + r;
            for (int64_t f = 0; f < c.padded; ++f) {
                float value = 0.0f;
                if (f < c.features) {  // CpuBackend::gather_batch's arithmetic, without contraction
                    const float x = c.u8 ? static_cast<float>(samples.as<uint8_t>()[source * c.features + f])
                                         : samples.as<float>()[source * c.features + f];
                    value = x * args.scale + args.offset;
                    if (c.standardized) value = (value - mean.as<float>()[f]) / divisor.as<float>()[f];
                }
                DeviceTensor expected(c.dtype, 1);
                expected.set(0, value);
                const size_t index = static_cast<size_t>(r * c.padded + f);
                const uint32_t got = c.dtype == DType::fp32 ? batch.as<uint32_t>()[index] : batch.as<uint16_t>()[index];
                const uint32_t want =
                    c.dtype == DType::fp32 ? expected.buffer.as<uint32_t>()[0] : expected.buffer.as<uint16_t>()[0];
                wrong += got != want;
            }
            wrong += batch_labels.as<int32_t>()[r] != labels.as<int32_t>()[source];
            wrong += batch_weights.as<float>()[r] != weights.as<float>()[source];
            for (int64_t k = 0; k < target_width; ++k)
                wrong +=
                    batch_targets.as<float>()[r * target_width + k] != targets.as<float>()[source * target_width + k];
        }
        CHECK(wrong == 0);
    }
}

TEST_CASE("the step's state kernels decide and finish as the shared rules say") {
    for (const float largest : {1.0f, 1e20f, INFINITY}) {
        DeviceBuffer pairs(4 * sizeof(float));
        const float values[4] = {3.0f, 2.0f, largest, 1e19f};
        std::memcpy(pairs.data(), values, sizeof(values));
        DeviceBuffer state = train_state(128.0f, 0);
        mpt::run_decide_update(pairs.as<float>(), 2, 64, state.as<mpt::TrainState>(), nullptr);
        CHECK(state.as<mpt::TrainState>()->found_inf == (mpt::gradient_bounds_finite(values, 2, 64) ? 0 : 1));
    }
    for (const int32_t found_inf : {0, 1}) {
        DeviceBuffer state = train_state(1024.0f, found_inf), metrics(sizeof(double) * mpt::kMetricsCount),
                     committed(sizeof(double) * mpt::kMetricsCount);
        for (int m = 0; m < mpt::kMetricsCount; ++m) metrics.as<double>()[m] = 0.25 * (m + 3);
        mpt::LossScalerConfig scaler{};
        scaler.mode = mpt::LossScaling::dynamic;
        scaler.growth_interval = 1;
        mpt::TrainState expected = *state.as<mpt::TrainState>();
        mpt::advance_loss_scaler(expected, scaler);
        mpt::run_finish_step(state.as<mpt::TrainState>(), scaler, metrics.as<double>(), committed.as<double>(),
                             nullptr);
        CHECK(std::memcmp(state.data(), &expected, sizeof(expected)) == 0);
        for (int m = 0; m < mpt::kMetricsCount; ++m) CHECK(committed.as<double>()[m] == metrics.as<double>()[m]);
    }
}

TEST_CASE("the bias-gradient kernel sums dZ's columns in its stated order") {
    for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
        for (const int64_t rows : {int64_t{1}, int64_t{17}, int64_t{300}}) {
            for (const int64_t columns : {int64_t{5}, int64_t{40}, int64_t{1000}}) {
                for (const bool accumulate : {false, true}) {
                    CAPTURE(static_cast<int>(dtype));
                    CAPTURE(rows);
                    CAPTURE(columns);
                    CAPTURE(accumulate);
                    std::mt19937 random(static_cast<uint32_t>(rows * columns));
                    const DeviceTensor gradient =
                        upload_rounded(dtype, random_vector(static_cast<size_t>(rows * columns), -4.0f, 4.0f, random));
                    DeviceBuffer sums(static_cast<size_t>(columns) * 4);
                    for (int64_t k = 0; k < columns; ++k) sums.as<float>()[k] = 0.5f * static_cast<float>(k);
                    mpt::run_bias_gradient({gradient.buffer.data(), dtype, sums.as<float>(), rows, columns, accumulate},
                                           nullptr);
                    int64_t wrong = 0;
                    for (int64_t k = 0; k < columns; ++k) {
                        // 8 row slices (rows s, s + 8, ...) summed in row order, then the slices in order.
                        float total = 0.0f;
                        for (int64_t slice = 0; slice < 8; ++slice) {
                            float sum = 0.0f;
                            for (int64_t r = slice; r < rows; r += 8)
                                sum += gradient.values[static_cast<size_t>(r * columns + k)];
                            total += sum;
                        }
                        const float expected = accumulate ? 0.5f * static_cast<float>(k) + total : total;
                        wrong += bits_of_float(sums.as<float>()[k]) != bits_of_float(expected);
                    }
                    CHECK(wrong == 0);
                }
            }
        }
    }
}

TEST_CASE("the dropout kernel keeps and scales what the shared draw says, in place or not") {
    for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
        for (const bool in_place : {false, true}) {
            CAPTURE(static_cast<int>(dtype));
            CAPTURE(in_place);
            std::mt19937 random(5);
            const int64_t count = 3000;
            DeviceTensor input = upload_rounded(dtype, random_vector(static_cast<size_t>(count), -2.0f, 2.0f, random));
            DeviceBuffer separate(static_cast<size_t>(count) * (dtype == DType::fp32 ? 4 : 2));
            DeviceBuffer state = train_state(1.0f, 0);
            mpt::DropoutArgs args{};
            args.input = input.buffer.data();
            args.output = in_place ? input.buffer.data() : separate.data();
            args.dtype = dtype;
            args.count = count;
            args.draw = mpt::DropoutDraw{77, 2, 0x40000000u, 1.0f / 0.75f};
            args.state = state.as<mpt::TrainState>();
            args.first_index = 64;
            mpt::run_dropout(args, nullptr);
            const std::vector<float> got =
                download_values(in_place ? input.buffer : separate, dtype, static_cast<size_t>(count));
            const uint64_t key = mpt::dropout_key(args.draw.seed, args.state->steps, args.draw.layer);
            int64_t wrong = 0, dropped = 0;
            for (int64_t i = 0; i < count; ++i) {
                const bool kept = mpt::dropout_keeps(key, args.draw.threshold, args.first_index + i);
                DeviceTensor expected(dtype, 1);
                expected.set(0, kept ? input.values[static_cast<size_t>(i)] * args.draw.scale : 0.0f);
                wrong += bits_of_float(got[static_cast<size_t>(i)]) != bits_of_float(expected.values[0]);
                dropped += !kept;
            }
            CHECK(wrong == 0);
            CHECK(dropped > count / 5);  // a quarter of them, about
            CHECK(dropped < count / 3);
        }
    }
}

TEST_CASE(
    "plain SGD as one GEMM into the masters (over the emulated cuBLASLt) updates as the fused kernels do, and skips") {
    mpt::CudaGemm gemm;
    std::mt19937 random(41);
    for (const DType dtype : {DType::bf16, DType::fp16}) {
        for (const float decay : {0.0f, 0.004f}) {
            for (const int32_t found_inf : {0, 1}) {
                CAPTURE(static_cast<int>(dtype));
                CAPTURE(decay);
                CAPTURE(found_inf);
                // A batch past fused SGD's 64 rows, where this path applies.
                SgdLayer layer(100, 96, 40, dtype, true, random);
                if (found_inf) {  // a skipped step's non-finite inputs must not reach the masters
                    layer.input.set(5, NAN);
                    layer.input.set(700, INFINITY);
                    layer.output_grad.set(3, -INFINITY);
                }
                DeviceBuffer state = train_state(512.0f, found_inf);
                const mpt::OptimizerConfig optimizer = plain_sgd(decay);
                const mpt::DenseUpdateArgs args = layer.args(state.as<mpt::TrainState>());
                REQUIRE(mpt::gradient_into_masters_applies(gemm, args, optimizer));
                DeviceBuffer scratch(mpt::gradient_into_masters_scratch_bytes(args.out_features));
                const mpt::GradientIntoMastersPlan plan =
                    mpt::plan_gradient_into_masters(gemm, args, scratch.as<float>());
                CHECK(plan.bias_fused);  // the emulated cuBLASLt offers BGRADB
                mpt::run_gradient_into_masters(gemm, plan, args, optimizer, 64, nullptr);
                const mpt::TrainState& after = *state.as<mpt::TrainState>();
                if (found_inf)
                    CHECK(layer.mismatches(optimizer, after) == 0);  // every master, bias and copy as it was
                else
                    CHECK(tolerant_mismatches(layer, optimizer, after, false) == 0);
            }
        }
    }
}

TEST_CASE("ReLU's input gradient from the outputs (a plain GEMM, then the kernel in place) matches the mask's DRELU") {
    mpt::CudaGemm gemm;
    std::mt19937 random(43);
    for (const DType dtype : {DType::bf16, DType::fp16}) {
        for (const bool maxima : {false, true}) {
            CAPTURE(static_cast<int>(dtype));
            CAPTURE(maxima);
            const int64_t rows = 96, in = 64, out = 40;  // past the small-batch kernels' 64 rows
            const DeviceTensor output_grad =
                upload_rounded(dtype, random_vector(static_cast<size_t>(rows * out), -8.0f, 8.0f, random));
            const DeviceTensor weights =
                upload_rounded(dtype, random_vector(static_cast<size_t>(out * in), -0.2f, 0.2f, random));
            std::vector<float> outputs = random_vector(static_cast<size_t>(rows * in), -1.0f, 1.0f, random);
            for (float& y : outputs) y = y > 0.0f ? y : 0.0f;  // a ReLU layer's outputs
            const DeviceTensor input = upload_rounded(dtype, outputs);
            // The mask the forward's RELU_AUX_BIAS would have written, for the DRELU plan.
            DeviceBuffer mask(mpt::relu_mask_size(rows, in));
            std::memset(mask.data(), 0, mask.size());
            const int64_t ld_bits = mpt::relu_mask_ld_bits(in);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t i = 0; i < in; ++i)
                    if (input.values[static_cast<size_t>(r * in + i)] > 0.0f) {
                        const int64_t bit = r * ld_bits + i;
                        mask.as<uint8_t>()[bit / 8] =
                            static_cast<uint8_t>(mask.as<uint8_t>()[bit / 8] | (1u << (bit % 8)));
                    }
            std::vector<float> results[2];
            float taken[2] = {-1.0f, -1.0f};
            for (const bool mask_valid : {true, false}) {  // DRELU from the mask; relu_from_output
                DeviceBuffer input_grad(static_cast<size_t>(rows * in) * 2), workspace(1 << 20),
                    bounds(2 * sizeof(float));
                bounds.as<float>()[0] = bounds.as<float>()[1] = -1.0f;
                mpt::DenseBackwardDataArgs args{};
                args.output_grad = output_grad.buffer.data();
                args.weights = weights.buffer.data();
                args.input = input.buffer.data();
                args.relu_mask = mask.data();
                args.input_grad = input_grad.data();
                args.rows = rows;
                args.in_features = in;
                args.out_features = out;
                args.input_activation = Activation::relu;
                args.compute_dtype = dtype;
                args.input_grad_dtype = dtype;
                args.workspace = {workspace.data(), workspace.size()};
                if (maxima && !mask_valid) {
                    args.input_grad_max_abs = bounds.as<float>();
                    args.input_max_abs = bounds.as<float>() + 1;
                }
                const mpt::DenseBackwardDataPlan plan = mpt::plan_dense_backward_data(gemm, args, mask_valid, true);
                CHECK(plan.relu_from_output == !mask_valid);
                DeviceBuffer scratch(plan.scratch_bytes > 0 ? plan.scratch_bytes : 16);
                MaxAbsScratchBuffer max_abs_scratch(8);
                mpt::run_dense_backward_data(gemm, plan, args, scratch.as<float>(), max_abs_scratch.scratch(), nullptr);
                CHECK(max_abs_scratch.zero());
                results[mask_valid ? 0 : 1] = download_values(input_grad, dtype, static_cast<size_t>(rows * in));
                if (!mask_valid) {
                    taken[0] = bounds.as<float>()[0];
                    taken[1] = bounds.as<float>()[1];
                }
            }
            // The same 0 or 1 from the mask and from the outputs, so the same bits.
            int64_t differ = 0;
            for (size_t i = 0; i < results[0].size(); ++i)
                differ += bits_of_float(results[0][i]) != bits_of_float(results[1][i]);
            CHECK(differ == 0);
            if (maxima) {
                CHECK(taken[0] == reference_max_abs(results[1]));
                CHECK(taken[1] == reference_max_abs(input.values));
            } else {
                CHECK(taken[0] == -1.0f);
            }
        }
    }
}
