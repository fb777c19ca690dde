// linear_lt.cpp — gemm_lt (linear_lt.h): a GemmArgs with one of linear's extras as one
// cuBLASLt matmul with an epilogue. Row-major GemmArgs map to cuBLASLt's column-major order as
// linear.cu's cublasGemmEx call does, D^T[N, M] = op(B)^T op(A)^T: cuBLASLt's A is our B (m = N,
// D's rows), its B is our A (n = M, D's columns), k = K. Epilogues:
//   bias       -> CUBLASLT_EPILOGUE_BIAS   (a vector over D's rows: our N columns);
//   a_row_sums -> CUBLASLT_EPILOGUE_BGRADB (its B = our op(A) summed over k: our M);
//   b_col_sums -> CUBLASLT_EPILOGUE_BGRADA (its A = our op(B) summed over k: our N).
// The vector has the output's type (cuBLASLt's default). Compute type 32F (FAST_TF32 for
// float32 under matmul TF32, as cublasGemmEx), float32 scale. The algorithm cuBLASLt's heuristic
// offers first is cached per (GPU, shape, type, compute, transposes, epilogue, operand
// alignments, workspace size), and so is "none offered" (then gemm_lt returns false).
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_libs.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/linear_lt.h"

namespace oomlab::cuda {
namespace {

cublasLtHandle_t lt_handle(int gpu) {   // one per (host thread, GPU), kept for the process
  thread_local std::map<int, cublasLtHandle_t> handles;
  auto it = handles.find(gpu);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&h));
  return handles[gpu] = h;
}

struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld));
  }
  ~Layout() { if (l) cublasLtMatrixLayoutDestroy(l); }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() { if (p) cublasLtMatmulPreferenceDestroy(p); }
};

template <class V> void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

uint32_t alignment(const void* p) {   // the largest power of two up to 256 dividing the address
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// What one cublasLtMatmul call is: the descriptors, and the cache key of its algorithm.
struct LtCall {
  cudaDataType_t type;
  cublasComputeType_t compute;
  cublasOperation_t op_a, op_b;   // cuBLASLt's A (our B) and B (our A)
  cublasLtEpilogue_t epilogue;
  const void* vec;
  uint32_t align[4];   // our B, our A, C, the vector
};

LtCall describe(const GemmArgs& a, DType t) {
  LtCall c{};
  c.type = t == DType::f32 ? CUDA_R_32F : t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  c.compute = t == DType::f32 && cuda_matmul_allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  c.op_a = a.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.op_b = a.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.epilogue = a.bias ? CUBLASLT_EPILOGUE_BIAS : a.a_row_sums ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
  c.vec = a.bias ? a.bias : a.a_row_sums ? a.a_row_sums : a.b_col_sums;
  const void* ptrs[4] = {a.B, a.A, a.C, c.vec};
  for (int i = 0; i < 4; ++i) c.align[i] = alignment(ptrs[i]);
  return c;
}

using AlgoKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int, int,
                           uint32_t, uint32_t, uint32_t, uint32_t, size_t>;
std::mutex g_algo_mu;
std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> g_algos;

// cuBLASLt's first offer for this call (cached), or nullopt when it offers none.
std::optional<cublasLtMatmulAlgo_t> choose_algo(cublasLtHandle_t h, const AlgoKey& key, const LtCall& c,
                                                cublasLtMatmulDesc_t desc, const Layout& la, const Layout& lb,
                                                const Layout& lc, size_t ws_bytes) {
  {
    std::lock_guard<std::mutex> lock(g_algo_mu);
    auto it = g_algos.find(key);
    if (it != g_algos.end()) return it->second;
  }
  Preference pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
  const uint64_t max_ws = ws_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                                    sizeof(max_ws)));
  const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = i == 3 ? c.align[2] : c.align[i];   // D is C
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, aligns[i], &v, sizeof(v)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h, desc, la.l, lb.l, lc.l, lc.l, pref.p, 1, &result, &found);
  std::optional<cublasLtMatmulAlgo_t> algo;
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) algo = result.algo;
  std::lock_guard<std::mutex> lock(g_algo_mu);
  return g_algos.emplace(key, algo).first->second;
}
}  // namespace

bool gemm_lt(const GemmArgs& a, DType t) {
  const int extras = (a.bias != nullptr) + (a.a_row_sums != nullptr) + (a.b_col_sums != nullptr);
  if (extras != 1 || a.batch != 1 || a.M <= 0 || a.N <= 0 || a.K <= 0 || t == DType::f64 || !gemm_extras_valid(a))
    return false;
  const int device = kernel_device("gemm");
  DeviceGuard guard(device);
  const int gpu = physical_device(device);
  const LtCall c = describe(a, t);
  const uint64_t m = uint64_t(a.N), n = uint64_t(a.M), k = uint64_t(a.K);
  const Layout la(c.type, c.op_a == CUBLAS_OP_N ? m : k, c.op_a == CUBLAS_OP_N ? k : m, a.ldb);
  const Layout lb(c.type, c.op_b == CUBLAS_OP_N ? k : n, c.op_b == CUBLAS_OP_N ? n : k, a.lda);
  const Layout lc(c.type, m, n, a.ldc);
  MatmulDesc desc;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, c.compute, CUDA_R_32F));
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, c.op_a);
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, c.op_b);
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, c.epilogue);
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.vec);
  const size_t ws_bytes = cublas_workspace_bytes(device);
  const AlgoKey key{gpu, a.M, a.N, a.K, a.lda, a.ldb, a.ldc, int(a.trans_a), int(a.trans_b), int(t), int(c.compute),
                    int(c.epilogue), c.align[0], c.align[1], c.align[2], c.align[3], ws_bytes};
  cublasLtHandle_t h = lt_handle(gpu);
  const std::optional<cublasLtMatmulAlgo_t> algo = choose_algo(h, key, c, desc.d, la, lb, lc, ws_bytes);
  if (!algo) return false;
  const float one = 1.0f, zero = 0.0f;
  DeviceBuffer ws(device, ws_bytes);   // as a cuBLAS call's workspace (cuda_libs.h)
  CUBLAS_CHECK(cublasLtMatmul(h, desc.d, &one, a.B, la.l, a.A, lb.l, &zero, a.C, lc.l, a.C, lc.l, &*algo, ws.get(),
                              ws.size(), compute_stream(device)));
  if (sync_after_launch()) CUDA_CHECK(cudaDeviceSynchronize());
  return true;
}

}  // namespace oomlab::cuda
