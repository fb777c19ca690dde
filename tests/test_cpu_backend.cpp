// test_cpu_backend.cpp — properties of the CPU backend as a whole: it announces itself and
// records its BLAS library; it flushes subnormal floats to zero on every thread that runs
// kernels (the main thread, OpenMP's workers, OpenBLAS's workers, device threads), so a
// GEMM on subnormal inputs returns zeros at full speed instead of crawling.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>

#include <cstdint>
#include <cstring>
#include <limits>
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
