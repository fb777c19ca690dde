// test_cpu_backend.cpp — properties of the CPU backend as a whole: it announces itself and
// records its BLAS library; it flushes subnormal floats to zero on every thread that runs
// kernels (the main thread, OpenMP's workers, OpenBLAS's workers, device threads), so a
// GEMM on subnormal inputs returns zeros at full speed instead of crawling.
// ctest tier: unit
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <condition_variable>

#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "engine/core/backend.h"
#include "engine/core/dispatch.h"
#include "engine/core/thread_budget.h"
#include "engine/ops/linear.h"

using namespace oomlab;

namespace {
float subnormal() {
  const uint32_t bits = 0x00000100u;   // about 3.6e-43
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
bool library(const std::string& key, const std::string& starts) {
  for (auto& [k, v] : library_info())
    if (k == key) return v.rfind(starts, 0) == 0;
  return false;
}
}  // namespace

TEST(CpuBackend, AnnouncedWithItsLibraries) {
  EXPECT_TRUE(backend_linked("cpu"));
  EXPECT_TRUE(library("blas", "OpenBLAS"));
  EXPECT_TRUE(library("cpu_denormals", "flush-to-zero"));
}

TEST(CpuBackend, SubnormalInputsAreFlushedOnEveryThread) {
  const int64_t n = 256;
  Tensor a = Tensor::full({n, n}, 0.0), b = Tensor::full({n, n}, 1.0);
  float* pa = a.data<float>();
  for (int64_t i = 0; i < n * n; ++i) pa[i] = subnormal();   // stored bits, no arithmetic
  auto check = [&] {
    Tensor c = matmul(a, b);   // OpenBLAS, threaded for this size when the budget allows
    for (double v : c.to_vector()) ASSERT_EQ(v, 0.0);
    volatile float x = subnormal();
    ASSERT_EQ(x * 1.0f, 0.0f);   // this thread's own arithmetic
    float y = 0;
#pragma omp parallel reduction(+ : y)
    y += subnormal() * 1.0f;   // OpenMP workers
    ASSERT_EQ(y, 0.0f);
  };
  check();
  std::thread([&] { check(); }).join();                                  // a thread started later
  run_on_devices({cpu_device(0), cpu_device(1)}, [&](Device) { check(); });   // device threads
}

// OpenBLAS's thread count is process-wide: it follows the smallest live limit (conv's
// serial sections, device threads' budgets) and returns to its setting after the last.
TEST(CpuBackend, BlasThreadLimitFollowsTheSmallestLiveGuard) {
  ensure_kernels_registered();
  const int original = openblas_get_num_threads();
  {
    BlasThreadsGuard four(4);
    EXPECT_EQ(openblas_get_num_threads(), std::min(4, original));   // a limit never raises the setting
    {
      BlasThreadsGuard serial(1);
      EXPECT_EQ(openblas_get_num_threads(), 1);
      std::thread([] {
        BlasThreadsGuard other(2);   // another thread's larger limit does not lift the serial one
        EXPECT_EQ(openblas_get_num_threads(), 1);
      }).join();
    }
    EXPECT_EQ(openblas_get_num_threads(), std::min(4, original));
  }
  EXPECT_EQ(openblas_get_num_threads(), original);
}

// OpenBLAS's OpenMP build sizes each call by the calling thread's OpenMP thread count, and
// its setter changes that count on whichever thread calls it: a guard gives its own thread
// its limit and puts the thread's count back after, so another thread's guards never decide
// this thread's BLAS thread count (their timing made float64 DDP runs differ run to run).
TEST(CpuBackend, BlasGuardsLeaveEveryThreadItsOwnOpenMpCount) {
  ensure_kernels_registered();
  std::mutex mu;
  std::condition_variable cv;
  int stage = 0;
  auto advance_to = [&](int s) { { std::lock_guard<std::mutex> l(mu); stage = s; } cv.notify_all(); };
  auto wait_for = [&](int s) { std::unique_lock<std::mutex> l(mu); cv.wait(l, [&] { return stage >= s; }); };
  omp_set_num_threads(2);
  std::thread other([&] {
    omp_set_num_threads(2);
    {
      BlasThreadsGuard serial(1);   // the first limit: the setter runs on this thread
      EXPECT_EQ(omp_get_max_threads(), 1);
      advance_to(1);
      wait_for(2);
    }   // the main thread's guard is still live: the limit stays, no setter call
    EXPECT_EQ(omp_get_max_threads(), 2) << "this thread kept the count the setter gave it";
    advance_to(3);
  });
  wait_for(1);
  {
    BlasThreadsGuard serial(1);   // the limit is 1 already: the setter does not run here
    EXPECT_EQ(omp_get_max_threads(), 1) << "serial BLAS on this thread ran with 2 threads";
    advance_to(2);
    wait_for(3);
  }
  EXPECT_EQ(omp_get_max_threads(), 2);
  other.join();
}

// Casts keep subnormals although the backend's arithmetic flushes them: the cast semantics
// of every device (docs/CUDA.md "Casts"; kernels/cuda/cast_math.cuh on CUDA). 1e-40 is the float
// subnormal 71362 * 2^-149; a flushing cast would give 0 (the H100 run's CUDA/CPU mismatch).
TEST(CpuBackend, CastsKeepSubnormalsUnderFlushToZero) {
  Tensor d = Tensor::from_vector({1e-40, -1e-40, 0x1.fffffep-127, 2e-310}, {4}, DType::f64);
  Tensor f = d.to(DType::f32);
  const float* pf = f.data<float>();
  uint32_t u[4];
  std::memcpy(u, pf, 16);
  EXPECT_EQ(u[0], 71362u);                  // nearest even of 1e-40 / 2^-149 = 71362.38
  EXPECT_EQ(u[1], 0x80000000u | 71362u);
  EXPECT_EQ(u[2], 0x00800000u);             // rounds up to FLT_MIN
  EXPECT_EQ(u[3], 0u);                      // a double subnormal is below float's range
  // float -> double and back, through every path: exact.
  EXPECT_EQ(f.to(DType::f64).to_vector()[0], 71362.0 * 0x1p-149);
  EXPECT_EQ(f.narrow(0, 0, 1).item(), 71362.0 * 0x1p-149) << "item() flushed";
  Tensor strided = Tensor::from_vector({1e-40, 5.0, 1e-39, 6.0}, {2, 2}, DType::f64).transpose(0, 1).to(DType::f32);
  EXPECT_NE(strided.contiguous().to_vector()[0], 0.0);
  // bfloat16 subnormals (the same exponent range as float) survive float64 round trips.
  Tensor b = Tensor::from_vector({1e-39, -9.2e-41}, {2}, DType::bf16);
  const std::vector<double> bv = b.to_vector();
  EXPECT_NE(bv[0], 0.0);
  EXPECT_NE(bv[1], 0.0);
  EXPECT_EQ(b.to(DType::f64).to(DType::bf16).to_vector(), bv);
}
