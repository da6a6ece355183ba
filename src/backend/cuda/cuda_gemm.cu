// See cuda_gemm.cuh.
#include "backend/cuda/cuda_gemm.cuh"

#include <cstring>
#include <utility>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_gemm_autotune.cuh"
#include "backend/cuda/gemm_split_k_rule.h"

namespace mpt {

bool GemmKey::operator==(const GemmKey& other) const {
    return m == other.m && n == other.n && k == other.k && lda == other.lda && ldb == other.ldb && ldd == other.ldd &&
           aux_ld == other.aux_ld && epilogue == other.epilogue && transa == other.transa && transb == other.transb &&
           type_ab == other.type_ab && type_d == other.type_d && align_a == other.align_a && align_b == other.align_b &&
           align_d == other.align_d && align_bias == other.align_bias && align_aux == other.align_aux &&
           workspace_limit == other.workspace_limit && device_scalars == other.device_scalars;
}

size_t GemmKeyHash::operator()(const GemmKey& key) const {
    uint64_t hash = 1469598103934665603ull;
    auto mix = [&](uint64_t value) { hash = (hash ^ value) * 1099511628211ull; };
    mix(static_cast<uint64_t>(key.m));
    mix(static_cast<uint64_t>(key.n));
    mix(static_cast<uint64_t>(key.k));
    mix(static_cast<uint64_t>(key.lda));
    mix(static_cast<uint64_t>(key.ldb));
    mix(static_cast<uint64_t>(key.ldd));
    mix(static_cast<uint64_t>(key.aux_ld));
    mix(static_cast<uint64_t>(key.epilogue) | (static_cast<uint64_t>(key.transa) << 16) |
        (static_cast<uint64_t>(key.transb) << 24) | (static_cast<uint64_t>(key.type_ab) << 32) |
        (static_cast<uint64_t>(key.type_d) << 48));
    mix(static_cast<uint64_t>(key.align_a) | (static_cast<uint64_t>(key.align_b) << 16) |
        (static_cast<uint64_t>(key.align_d) << 32) | (static_cast<uint64_t>(key.align_bias) << 48));
    mix(key.align_aux);
    mix(key.workspace_limit);
    mix(key.device_scalars ? 1u : 0u);
    return static_cast<size_t>(hash);
}

GemmKey make_gemm_key(int32_t epilogue, int32_t transa, int32_t transb, int64_t m, int64_t n, int64_t k,
                      int64_t lda, int64_t ldb, int64_t ldd, int32_t type_ab, int32_t type_d, const void* a,
                      const void* b, const void* d, const void* bias, const void* aux, int64_t aux_ld,
                      const GemmWorkspace& workspace) {
    GemmKey key;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldd = ldd;
    key.aux_ld = aux_ld;
    key.epilogue = epilogue;
    key.transa = transa;
    key.transb = transb;
    key.type_ab = type_ab;
    key.type_d = type_d;
    key.align_a = static_cast<uint16_t>(pointer_alignment(a));
    key.align_b = static_cast<uint16_t>(pointer_alignment(b));
    key.align_d = static_cast<uint16_t>(pointer_alignment(d));
    key.align_bias = static_cast<uint16_t>(pointer_alignment(bias));
    key.align_aux = static_cast<uint16_t>(pointer_alignment(aux));
    key.workspace_limit = workspace.data ? workspace.bytes : 0;
    return key;
}

void require_workspace(const GemmWorkspace& workspace, const char* op) {
    if (workspace.bytes != 0 && (!workspace.data || reinterpret_cast<uintptr_t>(workspace.data) % 256 != 0))
        fail(MPT_STATUS_INVALID_ARGUMENT,
             std::string("cuda backend: ") + op + " needs its GEMM workspace 256-byte aligned (or none)");
}

GemmChoice choose_gemm(CudaGemm& gemm, bool try_fused, const GemmKey& fused, const GemmKey& plain, const char* op,
                       DType dtype) {
    GemmChoice choice;
    if (try_fused) {
        const GemmPlan& plan = gemm.plan(fused);
        if (plan.supported && !plan.refused_when_run) {
            choice.plan = &plan;
            choice.fused = true;
            return choice;
        }
    }
    const GemmPlan& plan = gemm.plan(plain);
    if (!plan.supported)
        fail(MPT_STATUS_UNSUPPORTED,
             std::string("cuda backend: cuBLASLt has no GEMM for ") + op + " in " + dtype_name(dtype));
    choice.plan = &plan;
    return choice;
}

GemmPlan::~GemmPlan() {
    const CublasLt& lt = *cublaslt();  // loaded: plans exist only after a CudaGemm was made
    if (layout_d) lt.matrix_layout_destroy(layout_d);
    if (layout_b) lt.matrix_layout_destroy(layout_b);
    if (layout_a) lt.matrix_layout_destroy(layout_a);
    if (desc) lt.matmul_desc_destroy(desc);
}

namespace {

const CublasLt& loaded_cublaslt() {
    std::string why;
    const CublasLt* lt = cublaslt(&why);
    if (!lt) fail(MPT_STATUS_BACKEND_UNAVAILABLE, "cuda backend: cuBLASLt cannot be loaded (" + why + ")");
    return *lt;
}

}  // namespace

CudaGemm::CudaGemm(bool split_k, bool split_k_small_outputs_only, bool autotune)
    : lt_(loaded_cublaslt()),
      split_k_(split_k),
      split_k_small_outputs_only_(split_k_small_outputs_only),
      autotune_(autotune) {
    MPT_CUDA_CHECK(cudaGetDevice(&device_));  // the backend's: it makes its CudaGemm with its device current
    MPT_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device_));
    MPT_CUBLAS_CHECK(lt_.create(&handle_));
}

CudaGemm::~CudaGemm() {
    plans_.clear();
    if (handle_) lt_.destroy(handle_);
}

bool epilogue_has_bias(int32_t epilogue) {
    return epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
           epilogue == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_BGRADA ||
           epilogue == CUBLASLT_EPILOGUE_BGRADB || epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD;
}

bool epilogue_has_aux(int32_t epilogue) {
    return epilogue == CUBLASLT_EPILOGUE_RELU_AUX || epilogue == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
           epilogue == CUBLASLT_EPILOGUE_DRELU || epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD;
}

namespace {

// A device address with exactly `alignment` bytes of alignment, for the heuristic to read.
const void* example_pointer(unsigned alignment) {
    return reinterpret_cast<const void*>(static_cast<uintptr_t>(1) << 40 | static_cast<uintptr_t>(alignment));
}

}  // namespace

const GemmPlan& CudaGemm::plan(const GemmKey& key) {
    auto found = plans_.find(key);
    if (found != plans_.end()) return *found->second;

    auto plan = std::make_unique<GemmPlan>();
    plan->epilogue = key.epilogue;
    plan->key = key;
    MPT_CUBLAS_CHECK(lt_.matmul_desc_create(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t transa = key.transa, transb = key.transb;
    MPT_CUBLAS_CHECK(lt_.matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    MPT_CUBLAS_CHECK(lt_.matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    const uint32_t epilogue = static_cast<uint32_t>(key.epilogue);
    MPT_CUBLAS_CHECK(
        lt_.matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (key.device_scalars) {
        const int32_t mode = CUBLASLT_POINTER_MODE_DEVICE;
        MPT_CUBLAS_CHECK(
            lt_.matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode));
    }
    if (epilogue_has_bias(key.epilogue)) {
        // The bias (or bias gradient) has D's dtype, cuBLASLt's default; set it explicitly anyway.
        const int32_t bias_type = key.type_d;
        MPT_CUBLAS_CHECK(lt_.matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                        sizeof bias_type));
        const void* bias = example_pointer(key.align_bias);
        MPT_CUBLAS_CHECK(
            lt_.matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (epilogue_has_aux(key.epilogue)) {
        const int64_t aux_ld = key.aux_ld;
        MPT_CUBLAS_CHECK(
            lt_.matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
        const void* aux = example_pointer(key.align_aux);
        MPT_CUBLAS_CHECK(
            lt_.matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    }
    // Stored (column-major) shapes: op(A) is m x k, op(B) is k x n, D is m x n.
    const bool a_transposed = key.transa != CUBLAS_OP_N, b_transposed = key.transb != CUBLAS_OP_N;
    MPT_CUBLAS_CHECK(lt_.matrix_layout_create(&plan->layout_a, static_cast<cudaDataType_t>(key.type_ab),
                                                a_transposed ? key.k : key.m, a_transposed ? key.m : key.k, key.lda));
    MPT_CUBLAS_CHECK(lt_.matrix_layout_create(&plan->layout_b, static_cast<cudaDataType_t>(key.type_ab),
                                                b_transposed ? key.n : key.k, b_transposed ? key.k : key.n, key.ldb));
    MPT_CUBLAS_CHECK(
        lt_.matrix_layout_create(&plan->layout_d, static_cast<cudaDataType_t>(key.type_d), key.m, key.n, key.ldd));

    cublasLtMatmulPreference_t preference = nullptr;
    MPT_CUBLAS_CHECK(lt_.preference_create(&preference));
    cublasLtMatmulHeuristicResult_t results[kGemmCandidates]{};
    int found_count = 0;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    {
        const uint64_t workspace = key.workspace_limit;
        const uint32_t align_a = key.align_a, align_b = key.align_b, align_d = key.align_d;
        status = lt_.preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                      sizeof workspace);
        if (status == CUBLAS_STATUS_SUCCESS)
            status = lt_.preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                          &align_a, sizeof align_a);
        if (status == CUBLAS_STATUS_SUCCESS)
            status = lt_.preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                          &align_b, sizeof align_b);
        if (status == CUBLAS_STATUS_SUCCESS)
            status = lt_.preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                          &align_d, sizeof align_d);
        if (status == CUBLAS_STATUS_SUCCESS)
            status = lt_.preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                          &align_d, sizeof align_d);
        // Split-K partial sums stay in fp32 when D is 16-bit: the in-place and output-type schemes
        // would round every partial to fp16/bf16 (the small-batch GEMMs, few tiles for many SMs, are
        // where the heuristic splits K), an error the CPU reference's fp32 sums do not make.
        const bool may_split = gemm_may_split_k(key.m, key.n, split_k_, split_k_small_outputs_only_, multiprocessors_);
        if (split_k_ && !may_split) ++plans_kept_whole_by_size_;
        const uint32_t reduction_schemes =
            !may_split                 ? CUBLASLT_REDUCTION_SCHEME_NONE
            : key.type_d == CUDA_R_32F ? CUBLASLT_REDUCTION_SCHEME_MASK
                                       : (CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
        if (status == CUBLAS_STATUS_SUCCESS)
            status = lt_.preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                          &reduction_schemes, sizeof reduction_schemes);
        // (Autotuning times its candidates with host scalars: a plan reading them from the device takes
        // the heuristic's first.)
        const bool tuned = autotune_ && !key.device_scalars;
        if (status == CUBLAS_STATUS_SUCCESS)
            status =
                lt_.algo_get_heuristic(handle_, plan->desc, plan->layout_a, plan->layout_b, plan->layout_d,
                                       plan->layout_d, preference, tuned ? kGemmCandidates : 1, results, &found_count);
    }
    lt_.preference_destroy(preference);
    // "Not supported" (or, for an epilogue, an invalid combination) means: take the fallback path. A
    // plain GEMM has no fallback: an invalid one is a bug to report as cuBLASLt's error, not as a
    // combination mptrain does not support.
    const bool fallback = status == CUBLAS_STATUS_NOT_SUPPORTED ||
                          (status == CUBLAS_STATUS_INVALID_VALUE && key.epilogue != CUBLASLT_EPILOGUE_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS && !fallback)
        check_cublas(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    if (status == CUBLAS_STATUS_SUCCESS && found_count > 0 && results[0].state == CUBLAS_STATUS_SUCCESS) {
        plan->supported = true;
        int chosen = 0;
        if (autotune_ && !key.device_scalars) {
            // Only the candidates the heuristic marked usable: they come first.
            int usable = 0;
            while (usable < found_count && results[usable].state == CUBLAS_STATUS_SUCCESS) ++usable;
            const GemmTiming timing = time_gemm_candidates(lt_, handle_, device_, *plan, results, usable);
            if (timing.timed) {
                ++timed_plans_;
                chosen = timing.chosen;
                if (chosen != 0) ++retuned_plans_;
                autotune_saved_us_ += static_cast<double>(timing.first_us - timing.chosen_us);
            } else if (usable > 1) {
                last_untimed_ = describe_gemm_key(key) + ": " + timing.why;
            }
        }
        plan->algo = results[chosen].algo;
        plan->workspace_bytes = results[chosen].workspaceSize;
    } else if (key.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        ++refused_epilogue_plans_;
        const cublasStatus_t reason =
            status != CUBLAS_STATUS_SUCCESS ? status : found_count > 0 ? results[0].state : status;
        last_refused_epilogue_ = describe_gemm_key(key) + ": " + lt_.get_status_name(reason) +
                                 (found_count == 0 && status == CUBLAS_STATUS_SUCCESS ? " (no algorithm)" : "");
    }
    const GemmPlan& stored = *plan;
    plans_.emplace(key, std::move(plan));
    return stored;
}

void CudaGemm::run(const GemmPlan& plan, const void* a, const void* b, void* d, const void* bias, const void* aux,
                   const GemmWorkspace& workspace, cudaStream_t stream, float beta) {
    if (plan.key.device_scalars)
        fail(MPT_STATUS_INTERNAL, "cuda backend: a GEMM planned for device scalars was run with host ones");
    const float alpha = 1.0f;
    launch(plan, a, b, d, bias, aux, workspace, &alpha, &beta, stream);
}

void CudaGemm::run_device_scalars(const GemmPlan& plan, const void* a, const void* b, void* d, const void* bias,
                                  const GemmWorkspace& workspace, const float* alpha_beta, cudaStream_t stream) {
    if (!plan.key.device_scalars || alpha_beta == nullptr)
        fail(MPT_STATUS_INTERNAL, "cuda backend: a GEMM planned for host scalars was run with device ones");
    launch(plan, a, b, d, bias, nullptr, workspace, alpha_beta, alpha_beta + 1, stream);
}

void CudaGemm::launch(const GemmPlan& plan, const void* a, const void* b, void* d, const void* bias, const void* aux,
                      const GemmWorkspace& workspace, const void* alpha, const void* beta, cudaStream_t stream) {
    if (!plan.supported) fail(MPT_STATUS_INTERNAL, "cuda backend: a GEMM without a cuBLASLt algorithm was run");
    // Refused before (an op recorded with it is run again after a capture gave up): not counted twice.
    if (plan.refused_when_run)
        throw FusedGemmRefused(MPT_STATUS_UNSUPPORTED, "cuda backend: a fused plan cuBLASLt refused was run again");
    if (plan.workspace_bytes > (workspace.data ? workspace.bytes : 0))
        fail(MPT_STATUS_INTERNAL, "cuda backend: a GEMM was run with less workspace than it was planned for");
    if (epilogue_has_bias(plan.epilogue))
        MPT_CUBLAS_CHECK(
            lt_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (epilogue_has_aux(plan.epilogue))
        MPT_CUBLAS_CHECK(
            lt_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    const bool fused = plan.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
    const cublasStatus_t status =
        fused && refuse_fused_runs_
            ? CUBLAS_STATUS_NOT_SUPPORTED
            : lt_.matmul(handle_, plan.desc, alpha, a, plan.layout_a, b, plan.layout_b, beta, d, plan.layout_d, d,
                         plan.layout_d, &plan.algo, workspace.data, plan.workspace_bytes, stream);
    if (status == CUBLAS_STATUS_SUCCESS) return;
    // The heuristic accepted this plan. Should cuBLASLt refuse a fused one when it runs (it checks
    // more then: the actual pointers, the device's state), nothing of the op has run yet: the op
    // is planned again without this epilogue. Any other failure is an error.
    if (fused && (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
        // Refused under a graph capture only: the capture gives up and the task runs eagerly, where
        // the plan gets its own answer. It is not written off for what capturing did.
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone)
            throw FusedGemmRefused(MPT_STATUS_UNSUPPORTED, "cuda backend: cuBLASLt refused a fused plan under capture: " +
                                                               describe_gemm_key(plan.key) + ": " +
                                                               lt_.get_status_name(status));
        plan.refused_when_run = true;
        ++refused_epilogue_plans_;
        ++refused_epilogue_runs_;
        last_refused_epilogue_ = describe_gemm_key(plan.key) + ": " + lt_.get_status_name(status) + " when run";
        throw FusedGemmRefused(MPT_STATUS_UNSUPPORTED,
                               "cuda backend: cuBLASLt refused to run the fused plan " + last_refused_epilogue_);
    }
    check_cublas(status, "cublasLtMatmul", __FILE__, __LINE__);
}

std::string describe_gemm_key(const GemmKey& key) {
    return "epilogue " + std::to_string(key.epilogue) + ", m " + std::to_string(key.m) + " n " + std::to_string(key.n) +
           " k " + std::to_string(key.k) + ", types " + std::to_string(key.type_ab) + "->" +
           std::to_string(key.type_d) + ", workspace " + std::to_string(key.workspace_limit) +
           (key.device_scalars ? ", device scalars" : "");
}

}  // namespace mpt
