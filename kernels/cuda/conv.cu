// conv.cu — the CUDA kernels of the conv family (kernels/conv.h): conv2d_forward /
// conv2d_backward_data / conv2d_backward_weight on cuDNN 9's legacy convolution API, for
// float32, float64, float16 and bfloat16 (half types compute in float: cuDNN's
// PSEUDO_HALF / PSEUDO_BFLOAT16 configurations).
// Contracts (as the CPU kernels): NCHW / KCRS contiguous, or NHWC / KRSC with channels_last
// (cuDNN's CUDNN_TENSOR_NHWC descriptors; the layout is part of the plan key), cross-correlation, stride,
// padding, dilation, groups; every output (y, dx, dw) is overwritten (beta = 0). An empty
// reduction (C == 0 forward, K == 0 backward data, N == 0 backward weight) writes zeros.
// Plans: per (device, dtype, direction, shape, parameters, TF32 / benchmark / workspace
// settings) one cached plan holds the tensor/filter/convolution descriptors and the
// algorithm candidates in preference order. Candidates come from
//   * cudnnGet*Algorithm_v7 (heuristics) by default, or
//   * cudnnFind*AlgorithmEx (timed on the call's own buffers) when cudnn_benchmark();
// those with a workspace above cudnn_workspace_limit(), or nondeterministic ones under
// cudnn_deterministic(), are dropped (none at all:
// NotImplementedError, as a missing kernel; none within the limit: DeviceError). Math type: float32
// uses CUDNN_DEFAULT_MATH (TF32 permitted) when cudnn_allow_tf32(), else CUDNN_FMA_MATH
// (strict fp32, forced over any algorithm's own math type); half types start from
// CUDNN_TENSOR_OP_MATH and then use each algorithm's reported math type; float64 uses
// the default. Workspaces come from the device's caching allocator (tag "workspace") and
// are freed right after the call; if one cannot be allocated (OutOfMemoryError), the next
// candidate with a smaller workspace is tried, and the error is rethrown when none fits;
// a candidate that cuDNN refuses at execution (NOT_SUPPORTED category) gives way to the next.
// The plan cache is process-wide (mutex; plans are immutable once built and shared);
// clear_cudnn_plan_cache() drops it (and conv_graph.cu's).
// With cudnn_graph_api() in effect (under cuDNN benchmark, channels_last, or OOMLAB_CUDNN_GRAPH=1), each call
// first tries cuDNN's graph API (conv_graph.cu); a problem it has no usable engine for runs here, and the kernel choice
// then names the legacy algorithm and the graph API's answer.
#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/memory/kernel_choices.h"
#include "kernels/conv.h"
#include "kernels/cuda/conv_graph.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_libs.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/cuda_stream.h"

namespace oomlab {
namespace {

enum Kind : int { kFwd = 0, kBwdData = 1, kBwdFilter = 2 };
const char* kind_op(Kind k) { return conv_op_name(int(k)); }

struct Types { cudnnDataType_t data, compute; cudnnMathType_t base_math; bool strict_fp32; };
Types conv_types(DType t, bool tf32) {
  switch (t) {
    case DType::f32: {
      return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, !tf32};
    }
    case DType::f64: return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH, false};
    case DType::f16: return {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH, false};
    case DType::bf16: return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH, false};
    default: throw InternalError(str_cat("conv2d (cuda): unsupported dtype ", dtype_name(t)));
  }
}

int to_int(int64_t v, Kind k, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw NotImplementedError(str_cat("op '", kind_op(k), "' on cuda: ", what, " = ", v, " exceeds cuDNN's int range"));
  return int(v);
}

struct Candidate { int algo; cudnnMathType_t math; size_t ws; };
struct Perf { int algo; cudnnStatus_t status; size_t memory; cudnnMathType_t math; bool deterministic; };

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;      // x: [N,C,H,W], y: [N,K,P,Q]
  cudnnFilterDescriptor_t w = nullptr;                   // [K, C/groups, R, S]
  cudnnConvolutionDescriptor_t conv[4] = {};             // by cudnnMathType_t (0..3)
  std::vector<Candidate> candidates;                     // preference order
  bool from_find = false;                                // candidates timed by cudnnFind*Ex
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {   // host-only frees; errors ignored (destructors never throw)
    if (x) (void)cudnnDestroyTensorDescriptor(x);
    if (y) (void)cudnnDestroyTensorDescriptor(y);
    if (w) (void)cudnnDestroyFilterDescriptor(w);
    for (auto c : conv)
      if (c) (void)cudnnDestroyConvolutionDescriptor(c);
  }
};

// The convolution descriptor of `plan` with math type `math`, created on first request
// (only while the plan is being built, under the cache mutex).
cudnnConvolutionDescriptor_t conv_desc(ConvPlan& plan, const Conv2dArgs& a, const Types& ty, cudnnMathType_t math,
                                       Kind k) {
  const int m = int(math);
  OOMLAB_ASSERT(m >= 0 && m < 4);
  if (plan.conv[m]) return plan.conv[m];
  cudnnConvolutionDescriptor_t d = nullptr;
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
  plan.conv[m] = d;
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, to_int(a.p.pad_h, k, "pad_h"), to_int(a.p.pad_w, k, "pad_w"),
                                              to_int(a.p.stride_h, k, "stride_h"), to_int(a.p.stride_w, k, "stride_w"),
                                              to_int(a.p.dil_h, k, "dil_h"), to_int(a.p.dil_w, k, "dil_w"),
                                              CUDNN_CROSS_CORRELATION, ty.compute));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, to_int(a.p.groups, k, "groups")));
  CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  return d;
}

template <class P> std::vector<Perf> to_perf(const std::vector<P>& v, int n) {
  std::vector<Perf> out;
  for (int i = 0; i < n && i < int(v.size()); ++i)
    out.push_back({int(v[size_t(i)].algo), v[size_t(i)].status, v[size_t(i)].memory, v[size_t(i)].mathType,
                   v[size_t(i)].determinism == CUDNN_DETERMINISTIC});
  return out;
}

// Exact workspace of `algo` under descriptor `cd`; nullopt when cuDNN rejects the pair.
std::optional<size_t> workspace_size(cudnnHandle_t h, const ConvPlan& p, Kind k, cudnnConvolutionDescriptor_t cd,
                                     int algo) {
  size_t sz = 0;
  cudnnStatus_t st;
  if (k == kFwd)
    st = cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, cd, p.y, cudnnConvolutionFwdAlgo_t(algo), &sz);
  else if (k == kBwdData)
    st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, cd, p.x, cudnnConvolutionBwdDataAlgo_t(algo), &sz);
  else
    st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, cd, p.w, cudnnConvolutionBwdFilterAlgo_t(algo),
                                                        &sz);
  if (st != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return sz;
}

// 3xxx codes that describe the installation (driver, runtime, architecture, a missing
// sub-library such as libcudnn_ops), not the problem: never read as "no algorithm".
bool environment_failure(cudnnStatus_t st) {
  switch (st) {
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART:
    case CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH:
    case CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING:
    case CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE: return true;
    default: return false;
  }
}
// Any other NOT_SUPPORTED answer (cuDNN 9's 3xxx category: shape, type, layout...) to the
// query itself means no algorithm.
bool refused(cudnnStatus_t st) {
  return CUDNN_STATUS_CATEGORY(int(st)) == int(CUDNN_STATUS_NOT_SUPPORTED) && !environment_failure(st);
}

std::vector<Perf> heuristics(cudnnHandle_t h, const ConvPlan& p, Kind k, cudnnConvolutionDescriptor_t cd) {
  int count = 0, got = 0;
  cudnnStatus_t st;
  if (k == kFwd) {
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> v(size_t(std::max(count, 1)));
    st = cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, cd, p.y, int(v.size()), &got, v.data());
    if (refused(st)) return {};
    CUDNN_CHECK(st);
    return to_perf(v, got);
  }
  if (k == kBwdData) {
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> v(size_t(std::max(count, 1)));
    st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, cd, p.x, int(v.size()), &got, v.data());
    if (refused(st)) return {};
    CUDNN_CHECK(st);
    return to_perf(v, got);
  }
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> v(size_t(std::max(count, 1)));
  st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, cd, p.w, int(v.size()), &got, v.data());
  if (refused(st)) return {};
  CUDNN_CHECK(st);
  return to_perf(v, got);
}

// Times every algorithm on the call's buffers (the output is scratch here: it is
// overwritten by the real call afterwards).
std::vector<Perf> find(cudnnHandle_t h, const ConvPlan& p, Kind k, cudnnConvolutionDescriptor_t cd,
                       const Conv2dArgs& a, int device, size_t limit) {
  const int n_algos = k == kFwd ? int(CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
                                : (k == kBwdData ? int(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
                                                 : int(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT));
  size_t ws_size = 0;
  for (int algo = 0; algo < n_algos; ++algo)
    if (auto sz = workspace_size(h, p, k, cd, algo); sz && *sz <= limit) ws_size = std::max(ws_size, *sz);
  std::optional<cuda::DeviceBuffer> ws;
  try {
    ws.emplace(device, ws_size);
  } catch (const OutOfMemoryError&) {   // time only the algorithms that need no workspace
    ws.emplace(device, 0);
  }
  int got = 0;
  cudnnStatus_t st;
  if (k == kFwd) {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> v(static_cast<size_t>(n_algos));
    st = cudnnFindConvolutionForwardAlgorithmEx(h, p.x, a.x, p.w, a.w, cd, p.y, a.y, n_algos, &got, v.data(),
                                                ws->get(), ws->size());
    if (refused(st)) return {};
    CUDNN_CHECK(st);
    return to_perf(v, got);
  }
  if (k == kBwdData) {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> v(static_cast<size_t>(n_algos));
    st = cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w, a.w, p.y, a.dy, cd, p.x, a.dx, n_algos, &got,
                                                     v.data(), ws->get(), ws->size());
    if (refused(st)) return {};
    CUDNN_CHECK(st);
    return to_perf(v, got);
  }
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> v(static_cast<size_t>(n_algos));
  st = cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p.x, a.x, p.y, a.dy, cd, p.w, a.dw, n_algos, &got,
                                                     v.data(), ws->get(), ws->size());
  if (refused(st)) return {};
  CUDNN_CHECK(st);
  return to_perf(v, got);
}

std::shared_ptr<ConvPlan> build_plan(cudnnHandle_t h, const Conv2dArgs& a, DType t, Kind k, int device, bool tf32,
                                     bool bench, bool deterministic, size_t limit) {
  const Types ty = conv_types(t, tf32);
  auto plan = std::make_shared<ConvPlan>();
  ConvPlan& p = *plan;
  p.from_find = bench;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  // channels_last: NHWC tensors and a KRSC filter (cuDNN's NHWC format, its tensor-core layout)
  const cudnnTensorFormat_t fmt = a.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, fmt, ty.data, to_int(a.N, k, "N"), to_int(a.C, k, "C"),
                                         to_int(a.H, k, "H"), to_int(a.W, k, "W")));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, fmt, ty.data, to_int(a.N, k, "N"), to_int(a.K, k, "K"),
                                         to_int(a.P, k, "P"), to_int(a.Q, k, "Q")));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, ty.data, fmt, to_int(a.K, k, "K"),
                                         to_int(a.C / a.p.groups, k, "C/groups"), to_int(a.R, k, "R"),
                                         to_int(a.S, k, "S")));
  cudnnConvolutionDescriptor_t base = conv_desc(p, a, ty, ty.base_math, k);
  int on = 0, oc = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(base, p.x, p.w, &on, &oc, &oh, &ow));
  if (on != a.N || oc != a.K || oh != a.P || ow != a.Q)
    throw InternalError(str_cat(kind_op(k), ": cuDNN output [", on, ", ", oc, ", ", oh, ", ", ow,
                                "] differs from the op's [", a.N, ", ", a.K, ", ", a.P, ", ", a.Q, "]"));

  const std::vector<Perf> perfs = bench ? find(h, p, k, base, a, device, limit) : heuristics(h, p, k, base);
  bool any_supported = false;   // some algorithm exists, whatever its workspace
  bool nondeterministic_only = false;   // an algorithm left out for cudnn_deterministic()
  cudnnStatus_t first_refusal = CUDNN_STATUS_SUCCESS;   // for the message
  for (const Perf& r : perfs) {
    if (environment_failure(r.status)) cuda::throw_cudnn_error(r.status, kind_op(k), __FILE__, __LINE__);
    if (r.status != CUDNN_STATUS_SUCCESS) {
      if (first_refusal == CUDNN_STATUS_SUCCESS) first_refusal = r.status;
      continue;
    }
    if (deterministic && !r.deterministic) {
      nondeterministic_only = true;
      continue;
    }
    const cudnnMathType_t math = (ty.strict_fp32 || int(r.math) < 0 || int(r.math) > 3) ? ty.base_math : r.math;
    if (std::any_of(p.candidates.begin(), p.candidates.end(),
                    [&](const Candidate& c) { return c.algo == r.algo && c.math == math; }))
      continue;
    cudnnConvolutionDescriptor_t cd = conv_desc(p, a, ty, math, k);
    const std::optional<size_t> sz = workspace_size(h, p, k, cd, r.algo);
    if (!sz) continue;
    any_supported = true;
    if (*sz > limit) continue;
    p.candidates.push_back({r.algo, math, *sz});
  }
  if (p.candidates.empty()) {
    const std::string what = str_cat("input [", a.N, ", ", a.C, ", ", a.H, ", ", a.W, "] and weight [", a.K, ", ",
                                     a.C / a.p.groups, ", ", a.R, ", ", a.S, "]");
    // No algorithm at all: this cuDNN does not implement the dtype/configuration (as a
    // missing kernel-table entry); algorithms only over the limit, or only nondeterministic
    // ones under cudnn_deterministic(): a settings problem.
    if (!any_supported && nondeterministic_only)
      throw DeviceError(str_cat("op '", kind_op(k), "' on cuda: cuDNN offers no deterministic ", dtype_name(t),
                                " algorithm for ", what, " (cuDNN deterministic is on)"));
    if (!any_supported)
      throw NotImplementedError(str_cat("op '", kind_op(k), "' has no cuda/", dtype_name(t),
                                        " cuDNN algorithm for ", what, " (", perfs.size(), " candidates; cuDNN: ",
                                        first_refusal == CUDNN_STATUS_SUCCESS ? "no workspace query succeeded"
                                                                              : cudnnGetErrorString(first_refusal),
                                        ")"));
    throw DeviceError(str_cat("op '", kind_op(k), "' on cuda: cuDNN offers no ", dtype_name(t), " algorithm for ",
                              what, " within the workspace limit of ", limit, " bytes"));
  }
  return plan;
}

using Key = std::array<int64_t, 24>;
struct PlanCache {
  std::mutex mu;
  std::map<Key, std::shared_ptr<const ConvPlan>> plans;
};
PlanCache& plan_cache() { static auto* c = new PlanCache; return *c; }   // leaked: no teardown at exit

std::shared_ptr<const ConvPlan> get_plan(cudnnHandle_t h, const Conv2dArgs& a, DType t, Kind k, int device) {
  const bool bench = cudnn_benchmark();
  const bool deterministic = cudnn_deterministic();
  const size_t limit = cudnn_workspace_limit();
  const bool tf32 = t == DType::f32 && cudnn_allow_tf32();
  const Key key{device, int64_t(t), int64_t(k), a.N, a.C, a.H, a.W, a.K, a.R, a.S, a.P, a.Q,
                a.p.stride_h, a.p.stride_w, a.p.pad_h, a.p.pad_w, a.p.dil_h, a.p.dil_w, a.p.groups,
                tf32, bench, limit == SIZE_MAX ? -1 : int64_t(std::min<size_t>(limit, size_t(INT64_MAX))),
                a.channels_last, deterministic};
  PlanCache& c = plan_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.plans.find(key);
  if (it != c.plans.end()) return it->second;
  std::shared_ptr<const ConvPlan> plan = build_plan(h, a, t, k, device, tf32, bench, deterministic, limit);
  c.plans.emplace(key, plan);
  return plan;
}

// How a call ran, for kernel_choices.h: cuDNN's algorithm and math type (their enum names
// without the prefixes), the workspace, and whether Find or the heuristics chose it.
std::string choice_name(Kind k, const Candidate& c, bool from_find) {
  static const char* const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                    "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                       "FFT_TILING"};
  static const char* const math[] = {"DEFAULT_MATH", "TENSOR_OP_MATH", "TENSOR_OP_MATH_ALLOW_CONVERSION", "FMA_MATH"};
  const char* const* names = k == kFwd ? fwd : (k == kBwdData ? data : filter);
  const int count = k == kFwd ? 8 : (k == kBwdData ? 6 : 7);
  const std::string algo = c.algo >= 0 && c.algo < count ? names[c.algo] : str_cat("algo ", c.algo);
  const std::string m = int(c.math) >= 0 && int(c.math) < 4 ? math[int(c.math)] : str_cat("math ", int(c.math));
  return str_cat("cuDNN ", algo, " ", m, ", workspace ", c.ws, " B (", from_find ? "find" : "heuristics", ")");
}

// Runs one candidate; returns cuDNN's status (the caller decides whether to try the next).
cudnnStatus_t execute(cudnnHandle_t h, const ConvPlan& p, Kind k, const Candidate& cand, const Conv2dArgs& a, DType t,
                      void* ws, size_t ws_size) {
  const float falpha = 1.0f, fbeta = 0.0f;
  const double dalpha = 1.0, dbeta = 0.0;
  const void* alpha = t == DType::f64 ? static_cast<const void*>(&dalpha) : &falpha;
  const void* beta = t == DType::f64 ? static_cast<const void*>(&dbeta) : &fbeta;
  cudnnConvolutionDescriptor_t cd = p.conv[int(cand.math)];
  OOMLAB_ASSERT(cd != nullptr);
  if (k == kFwd)
    return cudnnConvolutionForward(h, alpha, p.x, a.x, p.w, a.w, cd, cudnnConvolutionFwdAlgo_t(cand.algo), ws, ws_size,
                                   beta, p.y, a.y);
  if (k == kBwdData)
    return cudnnConvolutionBackwardData(h, alpha, p.w, a.w, p.y, a.dy, cd, cudnnConvolutionBwdDataAlgo_t(cand.algo), ws,
                                        ws_size, beta, p.x, a.dx);
  return cudnnConvolutionBackwardFilter(h, alpha, p.x, a.x, p.y, a.dy, cd, cudnnConvolutionBwdFilterAlgo_t(cand.algo),
                                        ws, ws_size, beta, p.w, a.dw);
}

void conv_cuda(const Conv2dArgs& a, DType t, Kind k) {
  OOMLAB_ASSERT(a.p.groups >= 1 && a.C % a.p.groups == 0 && a.K % a.p.groups == 0);
  void* out = k == kFwd ? a.y : (k == kBwdData ? a.dx : a.dw);
  const int64_t out_numel = k == kFwd ? a.N * a.K * a.P * a.Q
                                      : (k == kBwdData ? a.N * a.C * a.H * a.W : a.K * (a.C / a.p.groups) * a.R * a.S);
  if (out_numel == 0) return;
  const int device = cuda::kernel_device(kind_op(k));
  cuda::DeviceGuard guard(device);
  // Sums over nothing: no input channels (y), no output channels (dx), or an x without
  // elements (dw; and y when H or W is 0 and padding makes the output non-empty: all padding).
  const bool empty_x = a.C == 0 || a.H == 0 || a.W == 0;
  const bool empty_sum = k == kFwd ? empty_x : (k == kBwdData ? a.K == 0 : (a.N == 0 || empty_x));
  if (empty_sum) {
    CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(out_numel) * dtype_size(t), cuda::compute_stream(device)));
    return;
  }
  cudnnHandle_t h = cuda::cudnn_handle(device);
  std::string graph_why;   // why the graph API did not run it (switch on only)
  if (cudnn_graph_api(a.channels_last) && conv_graph_run(h, a, t, int(k), device, &graph_why)) return;
  const std::shared_ptr<const ConvPlan> plan = get_plan(h, a, t, k, device);
  size_t failed_ws = SIZE_MAX;   // smallest workspace that could not be allocated
  cudnnStatus_t last_refusal = CUDNN_STATUS_SUCCESS;   // the last refusal at execution, if any
  auto more_after = [&](size_t i) {                // a later candidate that may still run
    return std::any_of(plan->candidates.begin() + std::ptrdiff_t(i) + 1, plan->candidates.end(),
                       [&](const Candidate& c) { return c.ws < failed_ws; });
  };
  for (size_t i = 0; i < plan->candidates.size(); ++i) {
    const Candidate& cand = plan->candidates[i];
    if (cand.ws >= failed_ws) continue;
    std::optional<cuda::DeviceBuffer> ws;
    try {
      ws.emplace(device, cand.ws);
    } catch (const OutOfMemoryError&) {
      failed_ws = cand.ws;
      if (!more_after(i)) throw;
      continue;
    }
    const cudnnStatus_t st = execute(h, *plan, k, cand, a, t, ws->get(), ws->size());
    // A heuristic candidate can still be refused at execution (cuDNN 9's NOT_SUPPORTED
    // category, 3xxx): nothing ran and every output is overwritten (beta = 0), so the
    // next candidate is tried; other failures are reported at once.
    if (refused(st) && more_after(i)) {
      last_refusal = st;
      continue;
    }
    if (st != CUDNN_STATUS_SUCCESS) cuda::throw_cudnn_error(st, kind_op(k), __FILE__, __LINE__);
    if (cuda::sync_after_launch()) CUDA_CHECK(cudaDeviceSynchronize());
    const std::string choice = choice_name(k, cand, plan->from_find);
    note_kernel_choice(kind_op(k), graph_why.empty() ? choice : str_cat(choice, "; graph API: ", graph_why));
    return;   // ws freed here: later work on the same stream is ordered after the call
  }
  // Reached only when every candidate left after a refusal was skipped for its workspace.
  OOMLAB_ASSERT(last_refusal != CUDNN_STATUS_SUCCESS);
  cuda::throw_cudnn_error(last_refusal, kind_op(k), __FILE__, __LINE__);
}

template <DType kT> void conv_fwd(const Conv2dArgs& a) { conv_cuda(a, kT, kFwd); }
template <DType kT> void conv_bwd_data(const Conv2dArgs& a) { conv_cuda(a, kT, kBwdData); }
template <DType kT> void conv_bwd_filter(const Conv2dArgs& a) { conv_cuda(a, kT, kBwdFilter); }

template <DType kT> void set_conv() {
  set_kernel<&conv_fwd<kT>>(conv2d_forward_kernels(), DeviceType::cuda, kT);
  set_kernel<&conv_bwd_data<kT>>(conv2d_backward_data_kernels(), DeviceType::cuda, kT);
  set_kernel<&conv_bwd_filter<kT>>(conv2d_backward_weight_kernels(), DeviceType::cuda, kT);
}
}  // namespace

void clear_cudnn_plan_cache() {
  PlanCache& c = plan_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.plans.clear();   // plans still in use by a running call stay alive (shared_ptr)
  clear_cudnn_graph_plans();
}

void register_conv_bias_cuda_kernels();   // conv_bias.cu: channel_bias_add / channel_bias_grad

void register_conv_cuda_kernels() {
  register_conv_bias_cuda_kernels();
  set_conv<DType::f32>();
  set_conv<DType::f64>();
  set_conv<DType::f16>();
  set_conv<DType::bf16>();
}

}  // namespace oomlab
