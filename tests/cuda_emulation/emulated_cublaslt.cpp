// cuBLASLt for the emulated device (tests/cuda_emulation/): the entry points the backend loads
// (cuda_cublaslt_library.cuh), as host functions over host memory, so that the backend's own GEMM
// code (cuda_gemm.cu: keys, descriptors, plans) and the ops built on it run unchanged. The matmul
// follows cuBLASLt's documented semantics for what the backend asks of it: column-major operands,
// D = alpha op(A) op(B) + beta C (C not read when beta is 0), op(A) op(B) summed in fp32; the
// epilogues BIAS (a bias per row of D), RELU (with or without BIAS and AUX, the aux a bit a D
// element, bit j * aux_ld + i, set where the value is above 0), DRELU (D zeroed where the aux bit
// is clear), DRELU_BGRAD (and the bias gradient: each row of D summed), BGRADA and BGRADB (the bias
// gradient as op(A)'s rows or op(B)'s columns summed over K, not scaled by alpha), alpha and beta
// from host or device pointers (both host memory here). Its heuristic offers up to 3 algorithms
// without workspace for everything, all the same product. What cuBLASLt does beyond the
// documentation (its sums' order, its choice of kernels and their refusals) is not emulated: the
// GPU tests check the backend against the real library.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cuda/cuda_cublaslt_library.cuh"
#include "core/thread_pool.h"
#include "cuda_emulation/emulated_threads.h"
#include "cuda_emulation/race_check.h"

namespace {

struct Desc {
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    int32_t bias_type = -1;  // unset: D's type
    const void* bias = nullptr;
    void* aux = nullptr;
    int64_t aux_ld = 0;
};

struct Layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};

template <typename T>
void set_from(T& field, const void* buffer, size_t bytes) {
    if (bytes == sizeof(T)) std::memcpy(&field, buffer, sizeof(T));
}

double load(cudaDataType type, const void* base, int64_t index) {
    switch (type) {
        case CUDA_R_32F:
            return static_cast<const float*>(base)[index];
        case CUDA_R_16F:
            return __half2float(static_cast<const __half*>(base)[index]);
        case CUDA_R_16BF:
            return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
        default:
            return NAN;
    }
}

void store(cudaDataType type, void* base, int64_t index, double value) {
    const float rounded = static_cast<float>(value);
    switch (type) {
        case CUDA_R_32F:
            static_cast<float*>(base)[index] = rounded;
            return;
        case CUDA_R_16F:
            static_cast<__half*>(base)[index] = __float2half_rn(rounded);
            return;
        case CUDA_R_16BF:
            static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(rounded);
            return;
        default:
            return;
    }
}

bool has_bias(int32_t epilogue) {
    return epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
           epilogue == CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
}
bool applies_relu(int32_t epilogue) {
    return epilogue == CUBLASLT_EPILOGUE_RELU || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
           epilogue == CUBLASLT_EPILOGUE_RELU_AUX || epilogue == CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
}
bool writes_aux(int32_t epilogue) {
    return epilogue == CUBLASLT_EPILOGUE_RELU_AUX || epilogue == CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
}
bool reads_aux(int32_t epilogue) {
    return epilogue == CUBLASLT_EPILOGUE_DRELU || epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD;
}

cublasStatus_t create(cublasLtHandle_t* handle) {
    static int context;
    *handle = reinterpret_cast<cublasLtHandle_t>(&context);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t destroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t desc_create(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t desc_destroy(cublasLtMatmulDesc_t desc) {
    delete reinterpret_cast<Desc*>(desc);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t desc_set(cublasLtMatmulDesc_t handle, cublasLtMatmulDescAttributes_t attribute, const void* buffer,
                        size_t bytes) {
    Desc& desc = *reinterpret_cast<Desc*>(handle);
    switch (attribute) {
        case CUBLASLT_MATMUL_DESC_TRANSA:
            set_from(desc.transa, buffer, bytes);
            break;
        case CUBLASLT_MATMUL_DESC_TRANSB:
            set_from(desc.transb, buffer, bytes);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE:
            set_from(desc.epilogue, buffer, bytes);
            break;
        case CUBLASLT_MATMUL_DESC_POINTER_MODE:
            set_from(desc.pointer_mode, buffer, bytes);
            break;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
            set_from(desc.bias_type, buffer, bytes);
            break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
            set_from(desc.bias, buffer, bytes);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
            set_from(desc.aux, buffer, bytes);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
            set_from(desc.aux_ld, buffer, bytes);
            break;
        default:
            return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t layout_create(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols,
                             int64_t ld) {
    if (ld < static_cast<int64_t>(rows)) return CUBLAS_STATUS_INVALID_VALUE;
    *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t layout_destroy(cublasLtMatrixLayout_t layout) {
    delete reinterpret_cast<Layout*>(layout);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t preference_create(cublasLtMatmulPreference_t* preference) {
    static int preferences;
    *preference = reinterpret_cast<cublasLtMatmulPreference_t>(&preferences);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t preference_destroy(cublasLtMatmulPreference_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t preference_set(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*, size_t) {
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t heuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                         cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int requested,
                         cublasLtMatmulHeuristicResult_t results[], int* returned) {
    *returned = 0;
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    // Up to 3 candidates, told apart by their first word, so that autotuning has some to time; each
    // computes the same product.
    const int offered = std::min(requested, 3);
    for (int i = 0; i < offered; ++i) {
        results[i] = cublasLtMatmulHeuristicResult_t{};
        results[i].algo.data[0] = static_cast<uint64_t>(i);
        results[i].state = CUBLAS_STATUS_SUCCESS;
        results[i].wavesCount = 1.0f;
    }
    *returned = offered;
    return CUBLAS_STATUS_SUCCESS;
}

// op(X) as a dense row-major rows x cols float matrix (every fp16 and bf16 value is a float).
std::vector<float> dense_operand(const Layout& layout, const void* base, bool transposed, int64_t rows, int64_t cols) {
    std::vector<float> dense(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            dense[static_cast<size_t>(r * cols + c)] =
                static_cast<float>(load(layout.type, base, transposed ? c + r * layout.ld : r + c * layout.ld));
    return dense;
}

// The product itself, on the descriptors as they were when it was issued: op(A) op(B) summed in fp32,
// as CUBLAS_COMPUTE_32F does, by the CPU backend's GEMM (OpenBLAS where it loads), so that the GPU
// test programs train the seed MLP's shapes in minutes; then alpha, beta, the bias and the ReLU element by
// element, rounded to float after each step.
void multiply(const Desc& desc, const Layout& la, const Layout& lb, const Layout& lc, const Layout& ld, double alpha,
              double beta, const void* a, const void* b, const void* c, void* d) {
    const bool ta = desc.transa != CUBLAS_OP_N, tb = desc.transb != CUBLAS_OP_N;
    const int64_t m = static_cast<int64_t>(ld.rows), n = static_cast<int64_t>(ld.cols);
    const int64_t k = static_cast<int64_t>(ta ? la.rows : la.cols);
    const std::vector<float> op_a = dense_operand(la, a, ta, m, k);   // m x k
    const std::vector<float> op_b = dense_operand(lb, b, !tb, n, k);  // n x k: op(B) transposed
    std::vector<float> product(static_cast<size_t>(m * n), 0.0f);     // m x n
    if (k > 0) {
        // (One thread under the race check: the pool is not instrumented, and ThreadSanitizer would
        // not see its threads hand their work over; race_check.h.)
        static mpt::ThreadPool pool(mpt_emulation::race_check::kEnabled
                                        ? 1
                                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
        static std::mutex pool_lock;  // streams issue on threads of their own
        const std::lock_guard<std::mutex> hold(pool_lock);
        mpt::cpu_sgemm(false, true, m, n, k, 1.0f, op_a.data(), k, op_b.data(), k, 0.0f, product.data(), n, pool);
    }
    const int32_t epilogue = desc.epilogue;
    const cudaDataType bias_type = desc.bias_type >= 0 ? static_cast<cudaDataType>(desc.bias_type) : ld.type;
    unsigned char* aux = static_cast<unsigned char*>(desc.aux);
    std::vector<double> row_sums(static_cast<size_t>(m), 0.0);
    for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < m; ++i) {
            double value = static_cast<float>(alpha * product[static_cast<size_t>(i * n + j)]);
            if (beta != 0.0) value = static_cast<float>(value + beta * load(lc.type, c, i + j * lc.ld));
            if (has_bias(epilogue)) value = static_cast<float>(value + load(bias_type, desc.bias, i));
            const int64_t bit = j * desc.aux_ld + i;
            if (applies_relu(epilogue)) {
                const bool above = value > 0.0;
                if (writes_aux(epilogue)) {
                    if (above)
                        aux[bit / 8] = static_cast<unsigned char>(aux[bit / 8] | (1u << (bit % 8)));
                    else
                        aux[bit / 8] = static_cast<unsigned char>(aux[bit / 8] & ~(1u << (bit % 8)));
                }
                if (!above) value = 0.0;
            }
            if (reads_aux(epilogue) && !((aux[bit / 8] >> (bit % 8)) & 1u)) value = 0.0;
            row_sums[static_cast<size_t>(i)] += value;
            store(ld.type, d, i + j * ld.ld, value);
        }
    }
    void* bias_gradient = const_cast<void*>(desc.bias);
    if (epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD)
        for (int64_t i = 0; i < m; ++i) store(bias_type, bias_gradient, i, row_sums[static_cast<size_t>(i)]);
    if (epilogue == CUBLASLT_EPILOGUE_BGRADA)
        for (int64_t i = 0; i < m; ++i) {
            double sum = 0.0;
            for (int64_t p = 0; p < k; ++p) sum += op_a[static_cast<size_t>(i * k + p)];
            store(bias_type, bias_gradient, i, sum);
        }
    if (epilogue == CUBLASLT_EPILOGUE_BGRADB)
        for (int64_t j = 0; j < n; ++j) {
            double sum = 0.0;
            for (int64_t p = 0; p < k; ++p) sum += op_b[static_cast<size_t>(j * k + p)];
            store(bias_type, bias_gradient, j, sum);
        }
}

// Checks what cuBLASLt checks when called, then issues the product on the stream as its kernels
// would be (recorded while the stream captures a graph): alpha and beta read now from host memory,
// when the kernel runs from device memory (CUBLASLT_POINTER_MODE_DEVICE).
cublasStatus_t matmul(cublasLtHandle_t, cublasLtMatmulDesc_t handle, const void* alpha_pointer, const void* a,
                      cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                      const void* beta_pointer, const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                      cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t*, void*, size_t,
                      cudaStream_t stream) {
    const Desc desc = *reinterpret_cast<const Desc*>(handle);
    const Layout la = *reinterpret_cast<const Layout*>(a_layout);
    const Layout lb = *reinterpret_cast<const Layout*>(b_layout);
    const Layout lc = *reinterpret_cast<const Layout*>(c_layout);
    const Layout ld = *reinterpret_cast<const Layout*>(d_layout);
    const bool ta = desc.transa != CUBLAS_OP_N, tb = desc.transb != CUBLAS_OP_N;
    const int64_t m = static_cast<int64_t>(ld.rows), n = static_cast<int64_t>(ld.cols);
    const int64_t k = static_cast<int64_t>(ta ? la.rows : la.cols);
    if (static_cast<int64_t>(ta ? la.cols : la.rows) != m || static_cast<int64_t>(tb ? lb.rows : lb.cols) != n ||
        static_cast<int64_t>(tb ? lb.cols : lb.rows) != k || lc.rows != ld.rows || lc.cols != ld.cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    const int32_t epilogue = desc.epilogue;
    if ((has_bias(epilogue) || epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD || epilogue == CUBLASLT_EPILOGUE_BGRADA ||
         epilogue == CUBLASLT_EPILOGUE_BGRADB) &&
        desc.bias == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((writes_aux(epilogue) || reads_aux(epilogue)) && (desc.aux == nullptr || desc.aux_ld < m))
        return CUBLAS_STATUS_INVALID_VALUE;
    const bool device_scalars = desc.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
    const float alpha = device_scalars ? 0.0f : *static_cast<const float*>(alpha_pointer);
    const float beta = device_scalars ? 0.0f : *static_cast<const float*>(beta_pointer);
    const float* alpha_at = static_cast<const float*>(alpha_pointer);
    const float* beta_at = static_cast<const float*>(beta_pointer);
    mpt_emulation::issue(stream, [=] {
        multiply(desc, la, lb, lc, ld, device_scalars ? *alpha_at : alpha, device_scalars ? *beta_at : beta, a, b, c,
                 d);
    });
    return CUBLAS_STATUS_SUCCESS;
}

const char* status_name(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS:
            return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED:
            return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED:
            return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE:
            return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH:
            return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_EXECUTION_FAILED:
            return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR:
            return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED:
            return "CUBLAS_STATUS_NOT_SUPPORTED";
        default:
            return "CUBLAS_STATUS_UNKNOWN";
    }
}
const char* status_string(cublasStatus_t status) { return status_name(status); }

}  // namespace

namespace mpt {

const CublasLt* cublaslt(std::string* /*why*/) {
    static const CublasLt table = [] {
        CublasLt lt;
        lt.create = create;
        lt.destroy = destroy;
        lt.matmul = matmul;
        lt.algo_get_heuristic = heuristic;
        lt.matmul_desc_create = desc_create;
        lt.matmul_desc_destroy = desc_destroy;
        lt.matmul_desc_set_attribute = desc_set;
        lt.preference_create = preference_create;
        lt.preference_destroy = preference_destroy;
        lt.preference_set_attribute = preference_set;
        lt.matrix_layout_create = layout_create;
        lt.matrix_layout_destroy = layout_destroy;
        lt.get_status_name = status_name;
        lt.get_status_string = status_string;
        return lt;
    }();
    return &table;
}

}  // namespace mpt
