// See cuda_gemm_autotune.cuh.
#include "backend/cuda/cuda_gemm_autotune.cuh"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_gemm.cuh"

namespace mpt {

namespace {

constexpr int kTimedLaunches = 5;  // per candidate, one event pair each, after one warm-up launch

size_t element_bytes(int32_t type) { return type == CUDA_R_32F ? 4 : 2; }

// One device block for every scratch operand, each at a 256-byte boundary (cuBLASLt's strictest
// alignment, so every alignment the key promises holds).
struct Scratch {
    char* base = nullptr;
    size_t a = 0, b = 0, d = 0, bias = 0, aux = 0, workspace = 0, total = 0;

    size_t place(size_t bytes) {
        const size_t offset = total;
        total += round_up_256(std::max<size_t>(bytes, 1));
        return offset;
    }
};

// Makes `device` current for the timing and restores the caller's device after it: planning runs
// on whatever device the calling thread has current, which need not be the backend's.
struct DeviceSwitch {
    int previous = -1;
    explicit DeviceSwitch(int device) {
        if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
        if (previous != device) cudaSetDevice(device);
        cudaGetLastError();
    }
    ~DeviceSwitch() {
        if (previous >= 0) cudaSetDevice(previous);
        cudaGetLastError();
    }
};

// Frees what it holds on every path out, after the work queued on its stream has finished.
struct TimingResources {
    void* block = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    ~TimingResources() {
        if (stream) cudaStreamSynchronize(stream);
        if (start) cudaEventDestroy(start);
        if (stop) cudaEventDestroy(stop);
        if (stream) cudaStreamDestroy(stream);
        if (block) cudaFree(block);
        cudaGetLastError();  // nothing here may leave an error behind for the next CUDA call
    }
};

std::string cuda_failure(const char* call, cudaError_t status) {
    cudaGetLastError();
    return std::string(call) + ": " + cudaGetErrorName(status);
}

}  // namespace

GemmTiming time_gemm_candidates(const CublasLt& lt, cublasLtHandle_t handle, int device, const GemmPlan& plan,
                                const cublasLtMatmulHeuristicResult_t* candidates, int count) {
    GemmTiming timing;
    if (count < 2) {
        timing.why = "one candidate";
        return timing;
    }
    const GemmKey& key = plan.key;
    const bool a_transposed = key.transa != CUBLAS_OP_N, b_transposed = key.transb != CUBLAS_OP_N;
    Scratch scratch;
    scratch.a = scratch.place(static_cast<size_t>(key.lda) * static_cast<size_t>(a_transposed ? key.m : key.k) *
                              element_bytes(key.type_ab));
    scratch.b = scratch.place(static_cast<size_t>(key.ldb) * static_cast<size_t>(b_transposed ? key.k : key.n) *
                              element_bytes(key.type_ab));
    scratch.d = scratch.place(static_cast<size_t>(key.ldd) * static_cast<size_t>(key.n) * element_bytes(key.type_d));
    // A bias along m, or a bias gradient along m or n: room for the longer, in fp32.
    scratch.bias = scratch.place(static_cast<size_t>(std::max(key.m, key.n)) * sizeof(float));
    // The ReLU bitmask: aux_ld bits per column of D.
    scratch.aux = scratch.place(static_cast<size_t>(key.aux_ld) * static_cast<size_t>(key.n) / 8 + 256);
    scratch.workspace = scratch.place(static_cast<size_t>(key.workspace_limit));

    const DeviceSwitch on_device(device);  // (declared before the resources: they are freed on it)
    TimingResources resources;
    cudaError_t status = cudaMalloc(&resources.block, scratch.total);
    if (status != cudaSuccess) {
        timing.why = cuda_failure("cudaMalloc of the timing operands", status);
        return timing;
    }
    scratch.base = static_cast<char*>(resources.block);
    status = cudaStreamCreateWithFlags(&resources.stream, cudaStreamNonBlocking);
    if (status == cudaSuccess) status = cudaEventCreate(&resources.start);
    if (status == cudaSuccess) status = cudaEventCreate(&resources.stop);
    // Finite, nonzero operands (0x3c3c: about 1.06 in fp16, 0.011 in bf16; 0x3c3c3c3c about 0.011
    // in fp32): zeros would time the tensor cores at the lower power they draw on them.
    if (status == cudaSuccess) status = cudaMemsetAsync(scratch.base, 0x3c, scratch.total, resources.stream);
    if (status != cudaSuccess) {
        timing.why = cuda_failure("setting up the timing", status);
        return timing;
    }
    const void* bias = scratch.base + scratch.bias;
    const void* aux = scratch.base + scratch.aux;
    if (epilogue_has_bias(key.epilogue) &&
        lt.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) !=
            CUBLAS_STATUS_SUCCESS) {
        timing.why = "setting the bias pointer";
        return timing;
    }
    if (epilogue_has_aux(key.epilogue) &&
        lt.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux) !=
            CUBLAS_STATUS_SUCCESS) {
        timing.why = "setting the aux pointer";
        return timing;
    }
    const float alpha = 1.0f, beta = 0.0f;
    auto launch = [&](int candidate) {
        return lt.matmul(handle, plan.desc, &alpha, scratch.base + scratch.a, plan.layout_a, scratch.base + scratch.b,
                         plan.layout_b, &beta, scratch.base + scratch.d, plan.layout_d, scratch.base + scratch.d,
                         plan.layout_d, &candidates[candidate].algo, scratch.base + scratch.workspace,
                         candidates[candidate].workspaceSize, resources.stream);
    };
    // Warm-up: a candidate cuBLASLt refuses to run drops out (the heuristic's first too: then the
    // fastest of the others is the plan, where keeping the first would have it refused when run).
    std::vector<bool> runs(static_cast<size_t>(count), false);
    for (int c = 0; c < count; ++c) runs[static_cast<size_t>(c)] = launch(c) == CUBLAS_STATUS_SUCCESS;
    std::vector<std::vector<float>> times(static_cast<size_t>(count));
    for (int round = 0; round < kTimedLaunches; ++round) {
        for (int c = 0; c < count; ++c) {
            if (!runs[static_cast<size_t>(c)]) continue;
            float ms = 0.0f;
            status = cudaEventRecord(resources.start, resources.stream);
            const bool ran = status == cudaSuccess && launch(c) == CUBLAS_STATUS_SUCCESS;
            if (ran) status = cudaEventRecord(resources.stop, resources.stream);
            if (ran && status == cudaSuccess) status = cudaEventSynchronize(resources.stop);
            if (ran && status == cudaSuccess) status = cudaEventElapsedTime(&ms, resources.start, resources.stop);
            if (status != cudaSuccess) {
                timing.why = cuda_failure("timing a candidate", status);
                return timing;
            }
            if (!ran) {
                runs[static_cast<size_t>(c)] = false;
                continue;
            }
            times[static_cast<size_t>(c)].push_back(ms * 1000.0f);
        }
    }
    auto median = [&](int c) {
        std::vector<float> sorted = times[static_cast<size_t>(c)];
        std::sort(sorted.begin(), sorted.end());
        return sorted[sorted.size() / 2];
    };
    for (int c = 0; c < count; ++c) {
        if (!runs[static_cast<size_t>(c)] || times[static_cast<size_t>(c)].size() != kTimedLaunches) continue;
        const float us = median(c);
        if (!timing.timed || us < timing.chosen_us) {
            timing.timed = true;
            timing.chosen = c;
            timing.chosen_us = us;
        }
    }
    if (!timing.timed) {
        timing.why = "no candidate ran";
        return timing;
    }
    // Against the heuristic's first when it ran; a first that cuBLASLt refused saves nothing.
    const bool first_ran = runs[0] && times[0].size() == kTimedLaunches;
    timing.first_us = first_ran ? median(0) : timing.chosen_us;
    return timing;
}

}  // namespace mpt
