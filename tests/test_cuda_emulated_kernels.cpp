// The CUDA backend's kernels run on emulated threads on the CPU (tests/cuda_emulation/): each kernel's
// own source, compiled for the host, launched through its backend entry point on buffers that fault
// past their ends, and compared with the CPU reference. Every build with the CUDA toolkit runs it, GPU
// or not: what it checks (indexing, reductions, the last block's work, warp collectives' masks, the
// results' bits where the arithmetic is the same) does not depend on a GPU's timing. Races, memory
// ordering and the speed are for the GPU tests (test_cuda_ops) and the device check. This file: the
// emulation itself (collectives, barriers, tickets, streams, capture, and the races it must report);
// the same program's kernel cases, by kernel, are in tests/emulated_kernels/.
#include <doctest/doctest.h>

#include <thread>

#include "cuda_emulation/emulated_threads.h"
#include "cuda_emulation/emulation_check_kernels.h"
#include "emulated_kernels/harness.h"

using namespace mpt_test::emulated_kernels;

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
