// cuBLASLt behind one small interface. Our tensors are row-major; cuBLASLt is column-major, and a
// row-major [r, c] matrix is the column-major [c, r] one, so each dense op is expressed on the
// transposed problem with its operands swapped (see the op files). Descriptors, layouts and the
// heuristic's algorithm are built once per problem key and kept. The workspace comes with each op
// (GemmWorkspace, from the executor's arena); its size is part of the key, since the heuristic only
// offers algorithms that fit it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/cuda/cuda_cublaslt_library.cuh"
#include "core/error.h"

namespace mpt {

// Everything that decides a cuBLASLt plan. Pointer alignments are part of it because the
// heuristic picks kernels by the alignment it is promised.
struct GemmKey {
    int64_t m = 0, n = 0, k = 0;
    int64_t lda = 0, ldb = 0, ldd = 0;
    int64_t aux_ld = 0;             // bits, for the ReLU mask epilogues; 0 when unused
    int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    int32_t type_ab = CUDA_R_32F;   // A and B share a dtype
    int32_t type_d = CUDA_R_32F;
    uint16_t align_a = 256, align_b = 256, align_d = 256, align_bias = 256, align_aux = 256;
    uint64_t workspace_limit = 0;   // bytes of workspace the algorithm may use
    // alpha and beta are read from device memory when the GEMM runs (CUBLASLT_POINTER_MODE_DEVICE;
    // run_device_scalars): a step's scalars that a kernel computes on the device, as plain SGD's
    // update into the masters does (cuda_gradient_into_masters.cuh).
    bool device_scalars = false;

    bool operator==(const GemmKey& other) const;
};

struct GemmKeyHash {
    size_t operator()(const GemmKey& key) const;
};

// Heuristic results asked for when autotuning (the first only otherwise).
constexpr int kGemmCandidates = 8;

struct GemmPlan {
    bool supported = false;  // false: cuBLASLt has no algorithm for it; use the fallback
    // cuBLASLt offered an algorithm but refused to run it (a fused epilogue only): plans made from
    // now on take the fallback, as if unsupported. Set by CudaGemm::run on a plan it owns.
    mutable bool refused_when_run = false;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace_bytes = 0;
    int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    GemmKey key;

    GemmPlan() = default;
    ~GemmPlan();
    GemmPlan(const GemmPlan&) = delete;
    GemmPlan& operator=(const GemmPlan&) = delete;
};

class CudaGemm {
public:
    // split_k false: the heuristic may not split K (reduction scheme NONE), so no GEMM has a
    // separate reduction and epilogue pass (MPTRAIN_CUDA_SPLIT_K=0, to compare). With
    // split_k_small_outputs_only, it may split K only in GEMMs whose output has fewer tiles than the
    // device has multiprocessors (gemm_split_k_rule.h; MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1).
    // autotune: each plan takes the fastest of the heuristic's first kGemmCandidates algorithms,
    // timed when the plan is made (cuda_gemm_autotune.cuh; MPTRAIN_CUDA_GEMM_AUTOTUNE=1), instead of
    // its first.
    explicit CudaGemm(bool split_k = true, bool split_k_small_outputs_only = false, bool autotune = false);
    ~CudaGemm();
    CudaGemm(const CudaGemm&) = delete;
    CudaGemm& operator=(const CudaGemm&) = delete;

    // The cached plan for `key` (created on first use). `bias` and `aux` are example pointers the
    // heuristic may inspect; their alignments are already in the key.
    const GemmPlan& plan(const GemmKey& key);
    // D = op(A) · op(B) + beta D (+ epilogue), fp32 accumulation: beta 0 writes D, 1 adds to it (a
    // micro-batch's gradient to its step's). `workspace` is at least the key's workspace_limit.
    void run(const GemmPlan& plan, const void* a, const void* b, void* d, const void* bias, const void* aux,
             const GemmWorkspace& workspace, cudaStream_t stream, float beta = 0.0f);
    // D = alpha op(A) · op(B) + beta D (+ epilogue) for a plan of a key with device_scalars: alpha
    // at alpha_beta[0] and beta at alpha_beta[1], device memory read when the GEMM runs (in a graph,
    // every replay reads them anew).
    void run_device_scalars(const GemmPlan& plan, const void* a, const void* b, void* d, const void* bias,
                            const GemmWorkspace& workspace, const float* alpha_beta, cudaStream_t stream);
    size_t cached_plans() const { return plans_.size(); }
    // Plans with a fused epilogue that cuBLASLt refused, by its heuristic or when one ran (their
    // ops take the unfused fallback), and the last one's key and status: the op tests cannot see a
    // fallback, whose numbers are right too, so the device check reads these.
    uint64_t refused_epilogue_plans() const { return refused_epilogue_plans_; }
    const std::string& last_refused_epilogue() const { return last_refused_epilogue_; }
    // Of those, the ones refused only when they ran.
    uint64_t refused_epilogue_runs() const { return refused_epilogue_runs_; }
    // Tests: every fused plan then fails when it runs, as if cuBLASLt returned NOT_SUPPORTED.
    void set_refuse_fused_runs(bool refuse) { refuse_fused_runs_ = refuse; }
    // Autotuning: plans whose candidates were timed, those where another than the heuristic's first
    // won, the microseconds the winners saved against the heuristic's firsts (summed over plans, one
    // run each), and why the last plan that could not be timed was not.
    bool split_k() const { return split_k_; }
    bool split_k_small_outputs_only() const { return split_k_small_outputs_only_; }
    // Plans that split_k_small_outputs_only kept whole along K (their outputs have tiles enough).
    uint64_t plans_kept_whole_by_size() const { return plans_kept_whole_by_size_; }
    bool autotune() const { return autotune_; }
    uint64_t timed_plans() const { return timed_plans_; }
    uint64_t retuned_plans() const { return retuned_plans_; }
    double autotune_saved_us() const { return autotune_saved_us_; }
    const std::string& last_untimed() const { return last_untimed_; }

private:
    // run's and run_device_scalars' call: alpha and beta host or device pointers, as the plan's key says.
    void launch(const GemmPlan& plan, const void* a, const void* b, void* d, const void* bias, const void* aux,
                const GemmWorkspace& workspace, const void* alpha, const void* beta, cudaStream_t stream);

    const CublasLt& lt_;
    bool split_k_;
    bool split_k_small_outputs_only_;
    bool autotune_;
    int device_ = 0;  // where the candidates are timed
    int multiprocessors_ = 1;
    uint64_t plans_kept_whole_by_size_ = 0;
    cublasLtHandle_t handle_ = nullptr;
    uint64_t timed_plans_ = 0, retuned_plans_ = 0;
    double autotune_saved_us_ = 0.0;
    std::string last_untimed_;
    std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash> plans_;
    uint64_t refused_epilogue_plans_ = 0;
    uint64_t refused_epilogue_runs_ = 0;
    std::string last_refused_epilogue_;
    bool refuse_fused_runs_ = false;
};

// Thrown by CudaGemm::run when cuBLASLt refuses a fused-epilogue plan that its heuristic had
// offered, before anything of the op ran: the plan is marked refused_when_run, so the caller plans
// the op again (the unfused fallback) and runs it. Escapes only where nothing can plan again.
class FusedGemmRefused : public Error {
public:
    using Error::Error;
};

// Whether a cuBLASLt epilogue reads or writes a bias (or bias gradient), and a ReLU bitmask.
bool epilogue_has_bias(int32_t epilogue);
bool epilogue_has_aux(int32_t epilogue);

// The key in words, for messages.
std::string describe_gemm_key(const GemmKey& key);

// The key of a GEMM whose operands are `a`, `b`, `d` (alignments are read off the pointers).
GemmKey make_gemm_key(int32_t epilogue, int32_t transa, int32_t transb, int64_t m, int64_t n, int64_t k,
                      int64_t lda, int64_t ldb, int64_t ldd, int32_t type_ab, int32_t type_d, const void* a,
                      const void* b, const void* d, const void* bias, const void* aux, int64_t aux_ld,
                      const GemmWorkspace& workspace);

// Throws Error unless `workspace` is empty or 256-byte aligned device memory (cuBLASLt's rule).
void require_workspace(const GemmWorkspace& workspace, const char* op);

// The GEMM of a dense op: the fused-epilogue plan when `try_fused` and cuBLASLt has one, else the
// plain plan, which the op completes with its own epilogue kernel. Throws Error(UNSUPPORTED)
// naming `op` and `dtype` when cuBLASLt has neither.
struct GemmChoice {
    const GemmPlan* plan = nullptr;
    bool fused = false;
};
GemmChoice choose_gemm(CudaGemm& gemm, bool try_fused, const GemmKey& fused, const GemmKey& plain, const char* op,
                       DType dtype);

}  // namespace mpt
