// mptrain-gpu-floor: the hardware floor of the seed MLP's training step on this GPU, measured in the
// same run as the bench so that mptrain's step time is read as a ratio to it (METHOD.md: the two
// ceilings, measured, not taken from the datasheet). For each batch size it times, with CUDA events
// over graph replays on random data, the step's bare cuBLASLt GEMMs in bf16 with fp32 accumulation
// (forward, input gradient of every layer but the first, weight gradient in fp32), and adds the
// least memory traffic of the update (fp32 masters read and written, the bf16 copy written) at the
// device-to-device copy bandwidth measured here. floor = GEMMs + update bytes / bandwidth: what a
// step with perfect fusion around the library GEMMs would take. fused floor = the same without the
// weight-gradient GEMM, whose FLOPs are charged at the 8192^3 rate instead: a step that computes the
// weight gradient inside the update pass (the fused SGD kernel, batches <= 64) and never writes it.
// It also reports the copy bandwidth and an 8192^3 bf16 GEMM's rate as the two ceilings. The copy
// ceiling is the faster of cudaMemcpyAsync and a copy kernel with four 16-byte loads in flight per
// thread: on an H200 the memcpy moved 2.7 TB/s where PyTorch's copy kernel moves about 4.3.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

void check(cudaError_t status, const char* what) {
    if (status == cudaSuccess) return;
    std::fprintf(stderr, "mptrain-gpu-floor: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
}

void check(cublasStatus_t status, const char* what) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    std::fprintf(stderr, "mptrain-gpu-floor: %s: cuBLAS status %d\n", what, static_cast<int>(status));
    std::exit(1);
}

__global__ void fill_random(__nv_bfloat16* data, size_t count, unsigned seed) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        data[i] = __float2bfloat16(static_cast<float>(x & 0xffff) / 65536.0f - 0.5f);
    }
}

// Four 16-byte loads in flight per thread before the first store; a grid-stride loop over the rest.
__global__ void copy_kernel(const float4* __restrict__ source, float4* __restrict__ target, size_t count) {
    const size_t step = static_cast<size_t>(blockDim.x);
    size_t i = static_cast<size_t>(blockIdx.x) * step * 4 + threadIdx.x;
    for (; i + 3 * step < count; i += static_cast<size_t>(gridDim.x) * step * 4) {
        const float4 a = source[i], b = source[i + step], c = source[i + 2 * step], d = source[i + 3 * step];
        target[i] = a;
        target[i + step] = b;
        target[i + 2 * step] = c;
        target[i + 3 * step] = d;
    }
    for (; i < count; i += step) target[i] = source[i];
}

struct Device {
    cudaStream_t stream = nullptr;
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = size_t{32} << 20;
};

// One column-major GEMM D[m, n] = op(A) op(B) with bf16 inputs, fp32 accumulation and D in `out_type`.
struct Gemm {
    int64_t m, n, k;
    bool transpose_a;
    cudaDataType_t out_type;
    bool transpose_b = false;
};

void run_gemm(Device& device, const Gemm& g, const void* a, const void* b, void* d) {
    cublasLtMatmulDesc_t desc;
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    const cublasOperation_t trans_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t trans_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a), "transa");
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b), "transb");
    cublasLtMatrixLayout_t la, lb, ld;
    check(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, g.transpose_a ? g.k : g.m, g.transpose_a ? g.m : g.k,
                                     g.transpose_a ? g.k : g.m), "layout a");
    check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, g.transpose_b ? g.n : g.k, g.transpose_b ? g.k : g.n,
                                     g.transpose_b ? g.n : g.k), "layout b");
    check(cublasLtMatrixLayoutCreate(&ld, g.out_type, g.m, g.n, g.m), "layout d");
    cublasLtMatmulPreference_t preference;
    check(cublasLtMatmulPreferenceCreate(&preference), "preference");
    check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &device.workspace_bytes, sizeof device.workspace_bytes), "workspace");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(device.handle, desc, la, lb, ld, ld, preference, 1, &result, &found), "heuristic");
    if (found == 0) {
        std::fprintf(stderr, "mptrain-gpu-floor: no cuBLASLt algorithm for %lldx%lldx%lld\n", (long long)g.m,
                     (long long)g.n, (long long)g.k);
        std::exit(1);
    }
    const float alpha = 1.0f, beta = 0.0f;
    check(cublasLtMatmul(device.handle, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &result.algo, device.workspace,
                         device.workspace_bytes, device.stream), "matmul");
    cublasLtMatmulPreferenceDestroy(preference);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
}

// Median milliseconds of one run of `work`, captured as a graph: `samples` event pairs, each around
// `launches` back-to-back replays (so the host's launch time between the events is amortised, not
// counted against short GEMMs). `work` runs once eagerly first, so cuBLASLt's heuristics and kernel
// loading happen before the capture.
template <typename Work>
double time_graph(Device& device, Work work, int samples, int launches) {
    work();
    check(cudaStreamSynchronize(device.stream), "eager run");
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    check(cudaStreamBeginCapture(device.stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    work();
    check(cudaStreamEndCapture(device.stream, &graph), "end capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "event");
    check(cudaEventCreate(&stop), "event");
    for (int i = 0; i < 3; ++i) check(cudaGraphLaunch(exec, device.stream), "warm-up");
    std::vector<float> times;
    for (int i = 0; i < samples; ++i) {
        check(cudaEventRecord(start, device.stream), "record");
        for (int l = 0; l < launches; ++l) check(cudaGraphLaunch(exec, device.stream), "launch");
        check(cudaEventRecord(stop, device.stream), "record");
        check(cudaEventSynchronize(stop), "sync");
        float ms = 0.0f;
        check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
        times.push_back(ms / static_cast<float>(launches));
    }
    std::sort(times.begin(), times.end());
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return times[times.size() / 2];
}

int64_t padded(int64_t width) { return (width + 7) / 8 * 8; }

}  // namespace

int main(int argc, char** argv) {
    std::vector<int64_t> batches = {32, 256, 4096};
    std::string json;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--batch") {
            batches.clear();
            std::stringstream list(argv[i + 1]);
            for (std::string part; std::getline(list, part, ',');) batches.push_back(std::atoll(part.c_str()));
        } else if (flag == "--json") {
            json = argv[i + 1];
        } else {
            std::fprintf(stderr, "usage: mptrain-gpu-floor [--batch LIST] [--json FILE]\n");
            return 2;
        }
    }
    Device device;
    check(cudaStreamCreateWithFlags(&device.stream, cudaStreamNonBlocking), "stream");
    check(cublasLtCreate(&device.handle), "cublasLt");
    check(cudaMalloc(&device.workspace, device.workspace_bytes), "workspace");

    // Ceiling 1: device-to-device copy of 2 GiB, bytes read plus written.
    const size_t copy_bytes = size_t{1} << 31;
    void *source, *target;
    check(cudaMalloc(&source, copy_bytes), "copy source");
    check(cudaMalloc(&target, copy_bytes), "copy target");
    check(cudaMemsetAsync(source, 1, copy_bytes, device.stream), "memset");
    const double memcpy_ms = time_graph(device, [&] {
        check(cudaMemcpyAsync(target, source, copy_bytes, cudaMemcpyDeviceToDevice, device.stream), "copy");
    }, 10, 1);
    int device_id = 0, multiprocessors = 1;
    check(cudaGetDevice(&device_id), "device");
    check(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device_id), "multiprocessors");
    const double kernel_ms = time_graph(device, [&] {
        copy_kernel<<<multiprocessors * 8, 256, 0, device.stream>>>(static_cast<const float4*>(source),
                                                                   static_cast<float4*>(target), copy_bytes / 16);
        check(cudaGetLastError(), "copy kernel");
    }, 10, 1);
    // bytes per second, read plus written
    const double memcpy_bandwidth = 2.0 * static_cast<double>(copy_bytes) / (memcpy_ms * 1e-3);
    const double kernel_bandwidth = 2.0 * static_cast<double>(copy_bytes) / (kernel_ms * 1e-3);
    const double bandwidth = std::max(memcpy_bandwidth, kernel_bandwidth);
    cudaFree(source);
    cudaFree(target);

    // Ceiling 2: an 8192^3 bf16 GEMM on random data.
    const int64_t big = 8192;
    __nv_bfloat16 *ba, *bb;
    float* bd;
    check(cudaMalloc(&ba, big * big * 2), "a");
    check(cudaMalloc(&bb, big * big * 2), "b");
    check(cudaMalloc(&bd, big * big * 4), "d");
    fill_random<<<1024, 256, 0, device.stream>>>(ba, big * big, 1);
    fill_random<<<1024, 256, 0, device.stream>>>(bb, big * big, 2);
    check(cudaGetLastError(), "fill_random");
    const double big_ms = time_graph(device, [&] { run_gemm(device, Gemm{big, big, big, false, CUDA_R_32F}, ba, bb, bd); }, 10, 1);
    const double matrix_rate = 2.0 * big * big * big / (big_ms * 1e-3);  // FLOP per second
    cudaFree(ba);
    cudaFree(bb);
    cudaFree(bd);

    std::printf("ceilings: device copy %.2f TB/s (read + write; cudaMemcpyAsync %.2f, copy kernel %.2f), "
                "bf16 GEMM 8192^3 %.0f TFLOP/s\n",
                bandwidth / 1e12, memcpy_bandwidth / 1e12, kernel_bandwidth / 1e12, matrix_rate / 1e12);
    std::printf("%6s %12s %12s %12s %16s\n", "batch", "gemms us", "update us", "floor us", "fused floor us");

    const std::vector<int64_t> widths = {padded(3072), padded(3000), padded(1000), padded(10)};
    int64_t parameters = 0, widest = 0;
    for (size_t l = 0; l + 1 < widths.size(); ++l) parameters += widths[l + 1] * (widths[l] + 1);
    for (int64_t w : widths) widest = std::max(widest, w);
    std::FILE* out = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
    if (out) std::fprintf(out, "[\n");
    // Each layer has its own weights and weight gradient, as in the real step: one shared buffer would
    // partly measure the 50 MB L2 instead of memory.
    const size_t layers = widths.size() - 1;
    std::vector<__nv_bfloat16*> weights(layers);
    std::vector<float*> weight_grads(layers);
    for (size_t l = 0; l < layers; ++l) {
        const int64_t count = widths[l] * widths[l + 1];
        check(cudaMalloc(&weights[l], count * 2), "weights");
        check(cudaMalloc(&weight_grads[l], count * 4), "weight gradient");
        fill_random<<<1024, 256, 0, device.stream>>>(weights[l], count, 3 + static_cast<unsigned>(l));
        check(cudaGetLastError(), "fill_random");
    }
    for (size_t b = 0; b < batches.size(); ++b) {
        const int64_t rows = batches[b];
        __nv_bfloat16 *activations, *gradients;
        float* logits;
        check(cudaMalloc(&activations, rows * widest * 2 * 2), "activations");
        check(cudaMalloc(&gradients, rows * widest * 2 * 2), "gradients");
        check(cudaMalloc(&logits, rows * widest * 4), "logits");
        fill_random<<<1024, 256, 0, device.stream>>>(activations, rows * widest * 2, 4);
        fill_random<<<1024, 256, 0, device.stream>>>(gradients, rows * widest * 2, 5);
        check(cudaGetLastError(), "fill_random");
        __nv_bfloat16* output = activations + rows * widest;
        // Short steps: many replays per event pair; at batch 4096 (milliseconds) a few.
        const int launches = rows <= 256 ? 20 : 2;
        // with_weight_gradient false: the forward and input-gradient GEMMs alone (the fused floor).
        auto step_gemms = [&](bool with_weight_gradient) {
            for (size_t l = 0; l < layers; ++l) {
                const int64_t in = widths[l], units = widths[l + 1];
                const bool last = l + 1 == layers;
                // Forward: Z[units, rows] = W^T-as-stored · X (weights row-major [units, in]).
                run_gemm(device, Gemm{units, rows, in, true, last ? CUDA_R_32F : CUDA_R_16BF}, weights[l], activations,
                         last ? static_cast<void*>(logits) : static_cast<void*>(output));
                // Weight gradient in fp32: dW[in, units] = X[in, rows] · dZ^T with dZ stored [units, rows],
                // as the library runs it (NT): cuBLASLt may pick other kernels for other transposes.
                if (with_weight_gradient)
                    run_gemm(device, Gemm{in, units, rows, false, CUDA_R_32F, true}, activations, gradients,
                             weight_grads[l]);
                // Input gradient for every layer but the first.
                if (l > 0) run_gemm(device, Gemm{in, rows, units, false, CUDA_R_16BF}, weights[l], gradients, output);
            }
        };
        const double gemm_ms = time_graph(device, [&] { step_gemms(true); }, 15, launches);
        const double unfused_gemm_ms = time_graph(device, [&] { step_gemms(false); }, 15, launches);
        // The update's least traffic: fp32 masters read and written, the bf16 copy written (10 bytes a
        // parameter; the forward's read of that copy is inside the GEMM time).
        const double update_ms = static_cast<double>(parameters) * (4 + 4 + 2) / bandwidth * 1e3;
        const double floor_us = (gemm_ms + update_ms) * 1e3;
        // The weight gradient's 2 · rows FLOPs a parameter at the big GEMM's rate, inside the update.
        const double weight_gradient_ms = 2.0 * static_cast<double>(rows) * static_cast<double>(parameters) /
                                          matrix_rate * 1e3;
        const double fused_floor_us = (unfused_gemm_ms + update_ms + weight_gradient_ms) * 1e3;
        std::printf("%6lld %12.1f %12.1f %12.1f %16.1f\n", static_cast<long long>(rows), gemm_ms * 1e3,
                    update_ms * 1e3, floor_us, fused_floor_us);
        if (out)
            std::fprintf(out,
                         "  {\"floor\": \"gpu\", \"batch\": %lld, \"gemm_us\": %.2f, \"update_us\": %.2f, \"floor_us\": %.2f, "
                         "\"fused_floor_us\": %.2f, \"copy_tb_per_s\": %.3f, \"memcpy_tb_per_s\": %.3f, "
                         "\"copy_kernel_tb_per_s\": %.3f, \"bf16_tflop_per_s\": %.1f}%s\n",
                         static_cast<long long>(rows), gemm_ms * 1e3, update_ms * 1e3, floor_us, fused_floor_us,
                         bandwidth / 1e12, memcpy_bandwidth / 1e12, kernel_bandwidth / 1e12, matrix_rate / 1e12,
                         b + 1 < batches.size() ? "," : "");
        cudaFree(activations);
        cudaFree(gradients);
        cudaFree(logits);
    }
    for (size_t l = 0; l < layers; ++l) {
        cudaFree(weights[l]);
        cudaFree(weight_grads[l]);
    }
    if (out) {
        std::fprintf(out, "]\n");
        std::fclose(out);
    }
    return 0;
}
