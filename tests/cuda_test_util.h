// cuda_test_util.h — shared helpers of the CUDA tests (tests/test_cuda_*.cpp, test_cli.cpp):
//  * cuda_available(why) / OOMLAB_REQUIRE_CUDA(): whether cuda:0 is usable, probed through
//    the engine only (built_with_cuda(), then the cuda allocator's creation and one
//    allocation); every CUDA test GTEST_SKIPs with the reason when it is not;
//  * to_device / to_host: copies through Tensor::copy_ (the engine has no autograd-aware
//    Tensor::to(Device); a copy made this way is a fresh leaf);
//  * per-dtype tolerances and comparisons: pointwise |got - want| <= atol + rtol*|want|,
//    and NMSE = sum (got - want)^2 / sum want^2 for reductions, GEMM and convolutions;
//  * run_op_case(): the table-driven parity harness (forward and backward of one op on
//    random inputs, cuda in dtype D vs the CPU reference in f64 (D = f64) or f32).
// Float32 GEMM/conv run strict (no TF32) unless OOMLAB_MATMUL_TF32 / OOMLAB_CUDNN_TF32 are
// set to 1 in the environment, which switches f32 NMSE limits from 1e-10 to 1e-6.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab::testing {

// Strict float32 by default: set before the CUDA backend reads its settings (first use).
inline const bool kStrictFp32Env = [] {
  ::setenv("OOMLAB_MATMUL_TF32", "0", 0);
  ::setenv("OOMLAB_CUDNN_TF32", "0", 0);
  return true;
}();

inline bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0 && std::strcmp(v, "off") != 0;
}
inline bool tf32_enabled() { return env_on("OOMLAB_MATMUL_TF32") || env_on("OOMLAB_CUDNN_TF32"); }

inline Device cuda0() { return Device{DeviceType::cuda, 0}; }

// Probed once per process. `why` gets a one-line reason when cuda:0 is not usable.
inline bool cuda_available(std::string* why = nullptr) {
  static const std::pair<bool, std::string> probe = []() -> std::pair<bool, std::string> {
    if (!built_with_cuda())
      return {false, "this oomlab build has no CUDA backend (nvcc or cuDNN not found at configure time, "
                     "or -DOOMLAB_CUDA=OFF)"};
    ensure_kernels_registered();   // registers the cuda raw-memory factory
    try {
      CachingAllocator& al = allocator_for(cuda0());
      void* p = al.allocate(512);
      al.free(p);
    } catch (const std::exception& e) {
      return {false, std::string("CUDA backend compiled in but no usable device: ") + e.what()};
    }
    return {true, ""};
  }();
  if (why) *why = probe.second;
  return probe.first;
}

#define OOMLAB_REQUIRE_CUDA()                                                   \
  do {                                                                          \
    std::string oomlab_why_;                                                    \
    if (!::oomlab::testing::cuda_available(&oomlab_why_)) GTEST_SKIP() << oomlab_why_; \
  } while (0)

inline Tensor to_device(const Tensor& t, Device d) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), d);
  out.copy_(t);
  return out;
}
inline Tensor to_host(const Tensor& t) { return t.device().is_cpu() ? t : to_device(t, cpu_device()); }
inline std::vector<double> values(const Tensor& t) { return to_host(t).to_vector(); }

// Uniform [lo, hi) values from Generator{seed}, stored (rounded) in `dtype` on cpu.
inline Tensor random_tensor(const Shape& shape, double lo, double hi, uint64_t seed, DType dtype) {
  Generator g{seed, 0};
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = lo + (hi - lo) * g.next_unit();
  return Tensor::from_vector(v, shape, dtype);
}
inline std::vector<int64_t> random_ints(int64_t n, int64_t lo, int64_t hi, uint64_t seed) {
  Generator g{seed, 0};
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + std::min<int64_t>(hi - lo - 1, int64_t(g.next_unit() * double(hi - lo)));
  return v;
}

struct Tol { double rtol, atol, nmse; };
inline Tol tolerance(DType t) {
  switch (t) {
    case DType::f64: return {1e-12, 1e-14, 1e-22};
    case DType::f16: return {2e-3, 2e-3, 1e-5};
    case DType::bf16: return {1.6e-2, 1.6e-2, 1e-4};
    default: return {1e-5, 1e-6, tf32_enabled() ? 1e-6 : 1e-10};
  }
}

inline ::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                            double rtol, double atol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const double err = std::fabs(got[i] - want[i]);
    if (both_nan || (got[i] == want[i]) || err <= atol + rtol * std::fabs(want[i])) continue;
    if (bad++ == 0) first = i;
    if (!(err <= worst)) worst = err;
  }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ (rtol " << rtol
                                       << ", atol " << atol << "); first at " << first << ": got " << got[first]
                                       << " want " << want[first] << "; worst abs error " << worst;
}

inline double nmse(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return num / den;
}

inline ::testing::AssertionResult nmse_below(const std::vector<double>& got, const std::vector<double>& want,
                                             double limit) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::isnan(got[i]) != std::isnan(want[i]))
      return ::testing::AssertionFailure() << "NaN mismatch at " << i << ": got " << got[i] << " want " << want[i];
  const double e = nmse(got, want);
  if (e <= limit) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "NMSE " << e << " > " << limit;
}

// ---- the op-parity harness -------------------------------------------------------------
enum class Kind { floating, buffer, index, mask };   // buffer: float, no grad, compared after forward
struct Input {
  Shape shape;
  Kind kind = Kind::floating;
  bool grad = true;
  double lo = -1.0, hi = 1.0;
  std::vector<int64_t> ints;   // index (int64) / mask (uint8) values, row-major
};
inline Input F(Shape s, bool grad = true, double lo = -1.0, double hi = 1.0) {
  return {std::move(s), Kind::floating, grad, lo, hi, {}};
}
inline Input Buf(Shape s, double lo, double hi) { return {std::move(s), Kind::buffer, false, lo, hi, {}}; }
inline Input Idx(Shape s, std::vector<int64_t> v) { return {std::move(s), Kind::index, false, 0, 0, std::move(v)}; }
inline Input Mask(Shape s, std::vector<int64_t> v) { return {std::move(s), Kind::mask, false, 0, 0, std::move(v)}; }

enum class Metric { pointwise, nmse };
struct OpCase {
  std::string name;
  std::vector<Input> inputs;
  std::function<Tensor(std::vector<Tensor>&)> fn;
  Metric metric = Metric::pointwise;
  std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
  bool backward = true;
};

inline ::testing::AssertionResult compare(const Tensor& got, const Tensor& want, DType d, Metric m) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " != " << shape_str(want.shape());
  const Tol t = tolerance(d);
  return m == Metric::nmse ? nmse_below(values(got), values(want), t.nmse)
                           : all_close(values(got), values(want), t.rtol, t.atol);
}

// Runs c.fn on the cpu (reference dtype) and on cuda:0 (dtype d) from the same rounded
// inputs; compares outputs, buffers and, with a random grad_output, every input's grad.
// A missing cuda kernel (NotImplementedError) or a refused dtype (DTypeError) fails for
// float32 and is printed as a note for the other dtypes.
inline void run_op_case(const OpCase& c, DType d) {
  SCOPED_TRACE(c.name + " / " + dtype_name(d));
  const DType rt = d == DType::f64 ? DType::f64 : DType::f32;
  std::vector<Tensor> ref, dev;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Input& in = c.inputs[i];
    Tensor host;
    if (in.kind == Kind::index) host = Tensor::from_vector_i64(in.ints, in.shape);
    else if (in.kind == Kind::mask)
      host = Tensor::from_vector(std::vector<double>(in.ints.begin(), in.ints.end()), in.shape, DType::u8);
    else host = random_tensor(in.shape, in.lo, in.hi, 1000 + 17 * i, d);
    Tensor r = (in.kind == Kind::floating || in.kind == Kind::buffer) ? host.to(rt).contiguous().detach() : host;
    Tensor g = to_device(host, cuda0());
    if (in.kind == Kind::floating && in.grad) { r.set_requires_grad(true); g.set_requires_grad(true); }
    ref.push_back(r);
    dev.push_back(g);
  }
  auto unsupported = [&](const Error& e) {
    if (d == DType::f32) ADD_FAILURE() << c.name << ": cuda/float32 must be supported: " << e.what();
    else std::printf("[   NOTE   ] %s %s not covered: %s\n", c.name.c_str(), dtype_name(d), e.what());
  };
  Tensor want = c.fn(ref), got;
  try { got = c.fn(dev); }
  catch (const NotImplementedError& e) { unsupported(e); return; }
  catch (const DTypeError& e) { unsupported(e); return; }
  ASSERT_EQ(got.device(), cuda0()) << c.name << " output is not on cuda";
  EXPECT_TRUE(compare(got, want, d, c.metric)) << "forward";
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].kind == Kind::buffer) {
      EXPECT_TRUE(compare(dev[i], ref[i], d, c.metric)) << "buffer " << i;
    }
  if (!c.backward || !want.requires_grad()) return;
  ASSERT_TRUE(got.requires_grad()) << "cuda output has no grad_fn";
  Tensor G = random_tensor(want.shape(), -1.0, 1.0, 99, d);
  try { got.backward(to_device(G.to(got.dtype()), cuda0())); }
  catch (const NotImplementedError& e) { unsupported(e); return; }
  want.backward(G.to(want.dtype()));
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!ref[i].requires_grad()) continue;
    ASSERT_EQ(ref[i].grad().defined(), dev[i].grad().defined()) << "grad of input " << i;
    if (ref[i].grad().defined()) {
      EXPECT_TRUE(compare(dev[i].grad(), ref[i].grad(), d, c.metric)) << "grad of input " << i;
    }
  }
}

}  // namespace oomlab::testing
