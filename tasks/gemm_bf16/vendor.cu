// gemm_bf16 vendor yardstick (trusted path only, never shown to agents): the same entry through
// cuBLASLt, bf16 in/out, CUBLAS_COMPUTE_32F, the bias fused as cuBLASLt's bias epilogue (what
// PyTorch's addmm / F.linear does), so cuBLAS is not charged an extra pass over C. Handle, 32 MiB
// workspace and one plan (descriptors + heuristic algorithm) per shape are created once and cached;
// the bias pointer is set per call. Link with -lcublasLt (libcublasLt.so; -lcublas alone does not
// export the cublasLt* symbols).
//
// Row-major C (M x N) = A (M x K) * B^T is column-major C^T (N x M, ld N) = B_cm^T * A_cm with
// B_cm = B viewed column-major (K x N, ld K) and A_cm = A viewed column-major (K x M, ld K):
// cuBLAS m = N, n = M, k = K, op(first) = T on B, op(second) = N on A; the bias (length N) runs
// along cuBLAS's rows, as its bias epilogue expects.
#include <cstdint>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <map>
#include <tuple>

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
};

struct State {
  int device = -1;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, Plan> plans;
};

State& state() {
  static State s;
  return s;
}

int to_int(cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS ? 0 : 1000 + static_cast<int>(st); }

int make_plan(State& s, int64_t M, int64_t N, int64_t K, int use_bias, Plan* plan) {
  cublasStatus_t st = cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return to_int(st);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (use_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                   sizeof(bias_type));
  }
  st = cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, K, N, K);  // B viewed column-major
  if (st != CUBLAS_STATUS_SUCCESS) return to_int(st);
  st = cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, K, M, K);  // A viewed column-major
  if (st != CUBLAS_STATUS_SUCCESS) return to_int(st);
  st = cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_16BF, N, M, N);  // C^T column-major
  if (st != CUBLAS_STATUS_SUCCESS) return to_int(st);

  cublasLtMatmulPreference_t pref = nullptr;
  st = cublasLtMatmulPreferenceCreate(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) return to_int(st);
  const size_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  st = cublasLtMatmulAlgoGetHeuristic(s.handle, plan->op, plan->a, plan->b, plan->c, plan->c, pref, 1,
                                      &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return to_int(st);
  if (found < 1) return to_int(CUBLAS_STATUS_NOT_SUPPORTED);
  plan->algo = result.algo;
  plan->ok = true;
  return 0;
}

}  // namespace

extern "C" int d2k_gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
                             const __nv_bfloat16* bias, __nv_bfloat16* C, int64_t M, int64_t N,
                             int64_t K, int use_bias, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  State& s = state();
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (s.device != device) {  // first call (one device per process in the runner)
    if (s.handle == nullptr) {
      const cublasStatus_t st = cublasLtCreate(&s.handle);
      if (st != CUBLAS_STATUS_SUCCESS) return to_int(st);
    }
    if (s.workspace != nullptr) cudaFree(s.workspace);
    s.workspace = nullptr;
    err = cudaMalloc(&s.workspace, kWorkspaceBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    s.plans.clear();
    s.device = device;
  }
  const auto key = std::make_tuple(M, N, K, use_bias ? 1 : 0);
  auto it = s.plans.find(key);
  if (it == s.plans.end()) {
    Plan plan;
    const int rc = make_plan(s, M, N, K, use_bias, &plan);
    if (rc != 0) return rc;
    it = s.plans.emplace(key, plan).first;
  }
  Plan& plan = it->second;
  if (use_bias) {
    const void* bias_ptr = bias;
    cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                   sizeof(bias_ptr));
  }
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(s.handle, plan.op, &alpha, B, plan.a, A, plan.b, &beta, C, plan.c, C, plan.c,
                     &plan.algo, s.workspace, kWorkspaceBytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return to_int(st);
  return static_cast<int>(cudaGetLastError());
}
