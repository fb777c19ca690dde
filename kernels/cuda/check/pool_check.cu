// pool_check.cu — a CPU-only run of pool.cu's per-element bodies (pool_math.cuh): max / avg /
// adaptive-avg pool2d forward and backward evaluated on the host for every element, in NCHW
// and in channels_last (locate()'s NHWC indexing, --channels-last), against the CPU kernels
// (kernels/cpu/pool_cpu.cpp through the kernel tables), float32 and float64. The GPU's
// backward gathers per input element in the order the CPU scatters, so the bar is bit
// equality of y, the max indices and dx. Inputs hold ties (the first maximum wins).
// Built as `cuda_pool_check` in CUDA builds and run by ctest; exits 1 on a mismatch.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/dispatch.h"
#include "kernels/cuda/pool_math.cuh"
#include "kernels/pool.h"

using namespace oomlab;
namespace pm = oomlab::pool_math;

namespace {
int failures = 0;

template <class T> struct HostIO {
  using C = T;
  static T to(T v) { return v; }
  static T from(T v) { return v; }
};

template <class T> void expect_same(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  if (got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0) return;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      std::printf("FAIL %s [%zu]: emulated %.17g vs cpu %.17g\n", what.c_str(), i, double(got[i]), double(want[i]));
      break;
    }
  ++failures;
}

struct Case { const char* name; bool max, adaptive; int64_t N, C, H, W, P, Q; Pool2dParams p; };

template <class T> void check(const Case& k, bool nhwc) {
  const std::string name = std::string(k.name) + (nhwc ? " nhwc " : " nchw ") + (sizeof(T) == 4 ? "f32" : "f64");
  const int64_t xn = k.N * k.C * k.H * k.W, yn = k.N * k.C * k.P * k.Q;
  std::mt19937 g(11);
  std::uniform_int_distribution<int> d(-8, 8);   // few values: many ties
  std::vector<T> x(static_cast<size_t>(xn)), dy(static_cast<size_t>(yn));
  for (T& v : x) v = T(d(g)) / T(4);
  for (T& v : dy) v = T(d(g)) / T(3);
  Pool2dArgs a{};
  a.N = k.N; a.C = k.C; a.H = k.H; a.W = k.W; a.P = k.P; a.Q = k.Q; a.p = k.p; a.adaptive = k.adaptive;
  a.channels_last = nhwc;
  const DType dt = sizeof(T) == 4 ? DType::f32 : DType::f64;
  std::vector<T> y(static_cast<size_t>(yn)), dx(static_cast<size_t>(xn)), ey(static_cast<size_t>(yn)),
      edx(static_cast<size_t>(xn));
  std::vector<int64_t> idx(static_cast<size_t>(k.max ? yn : 0)), eidx(idx.size());
  a.x = x.data(); a.y = y.data(); a.indices = k.max ? idx.data() : nullptr;
  (k.max ? max_pool2d_forward_kernels() : avg_pool2d_forward_kernels()).launch(cpu_device(), dt, a);
  a.dy = dy.data(); a.dx = dx.data();
  (k.max ? max_pool2d_backward_kernels() : avg_pool2d_backward_kernels()).launch(cpu_device(), dt, a);
  const pm::PoolDims pd = pm::pool_dims(a);
  for (int64_t o = 0; o < yn; ++o) {
    if (k.max) pm::max_forward_at<HostIO<T>>(o, x.data(), ey.data(), eidx.data(), pd);
    else pm::avg_forward_at<HostIO<T>>(o, x.data(), ey.data(), pd);
  }
  for (int64_t e = 0; e < xn; ++e) {
    if (k.max) pm::max_backward_at<HostIO<T>>(e, dy.data(), idx.data(), edx.data(), pd);
    else pm::avg_backward_at<HostIO<T>>(e, dy.data(), edx.data(), pd);
  }
  expect_same(ey, y, name + " y");
  if (k.max) expect_same(eidx, idx, name + " indices");
  expect_same(edx, dx, name + " dx");
}
}  // namespace

int main() {
  ensure_kernels_registered();
  const Case cases[] = {
      {"max 3x3 s2 p1", true, false, 2, 5, 9, 9, 5, 5, {3, 3, 2, 2, 1, 1}},
      {"max 2x2", true, false, 2, 4, 8, 8, 4, 4, {2, 2, 2, 2}},
      {"avg 3x3 s1 p1", false, false, 2, 3, 7, 6, 7, 6, {3, 3, 1, 1, 1, 1}},
      {"adaptive 10x9 -> 7x7", false, true, 2, 3, 10, 9, 7, 7, {}},
      {"adaptive 3x2 -> 7x7 (upsampling)", false, true, 1, 2, 3, 2, 7, 7, {}},
      {"adaptive 7x7 -> 1x1", false, true, 3, 33, 7, 7, 1, 1, {}},
  };
  for (const Case& k : cases)
    for (bool nhwc : {false, true}) {
      check<float>(k, nhwc);
      check<double>(k, nhwc);
    }
  std::printf("%s: pool.cu's element bodies (NCHW and channels_last) vs the CPU kernels (%d failure%s)\n",
              failures ? "FAILED" : "ok", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
