// test_optim_foreach.cpp — the foreach form of the optimizer updates (kernels/optim.h):
// the launch plan of the CUDA multi-tensor kernel (kernels/cuda/multi_tensor_plan.h, plain
// C++) covers every element of every tensor exactly once within its per-launch bounds, and
// a group's foreach update on the CPU equals its parameters' single-tensor kernels bit for
// bit (SGD with and without momentum, Adam, AdamW; float32, float64 and bfloat16).
// ctest tier: unit
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "kernels/cuda/multi_tensor_plan.h"
#include "kernels/optim.h"

namespace oomlab {
namespace {

using cuda::plan_multi_tensor;

void expect_exact_cover(const std::vector<int64_t>& sizes, int max_tensors, int max_blocks, int64_t chunk) {
  const auto plan = plan_multi_tensor(sizes, max_tensors, max_blocks, chunk);
  std::vector<std::vector<int>> hits(sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t) hits[t].assign(size_t(sizes[t]), 0);
  for (const auto& l : plan) {
    ASSERT_FALSE(l.blocks.empty());
    ASSERT_LE(int(l.tensors.size()), max_tensors);
    ASSERT_LE(int(l.blocks.size()), max_blocks);
    for (const auto& b : l.blocks) {
      const int64_t t = l.tensors.at(size_t(b.slot));
      for (int64_t i = b.chunk * chunk; i < std::min(sizes[size_t(t)], (b.chunk + 1) * chunk); ++i)
        ++hits[size_t(t)][size_t(i)];
    }
  }
  for (size_t t = 0; t < sizes.size(); ++t)
    for (size_t i = 0; i < hits[t].size(); ++i) ASSERT_EQ(hits[t][i], 1) << "tensor " << t << " element " << i;
}

TEST(MultiTensorPlan, EveryElementOnceWithinTheLaunchBounds) {
  expect_exact_cover({}, 24, 320, 8);
  expect_exact_cover({0, 0, 5}, 24, 320, 8);                 // empty tensors get no block
  expect_exact_cover({1, 8, 9, 16, 17}, 2, 3, 8);            // both bounds bite, tensors split
  expect_exact_cover(std::vector<int64_t>(50, 3), 24, 320, 8);   // more tensors than a launch holds
  expect_exact_cover({1000, 1, 1000}, 24, 7, 10);            // a long tensor across launches
  std::mt19937 rng(7);
  for (int r = 0; r < 20; ++r) {
    std::vector<int64_t> sizes(size_t(rng() % 40));
    for (auto& n : sizes) n = int64_t(rng() % 300);
    expect_exact_cover(sizes, 1 + int(rng() % 24), 1 + int(rng() % 30), 1 + int64_t(rng() % 64));
  }
}

TEST(MultiTensorPlan, ASplitTensorContinuesInTheNextLaunch) {
  const auto plan = plan_multi_tensor({25}, 24, 2, 10);   // chunks 0, 1 | 2
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].blocks.size(), 2u);
  EXPECT_EQ(plan[1].tensors, std::vector<int64_t>{0});
  EXPECT_EQ(plan[1].blocks[0].chunk, 2);
}

template <class T> std::vector<T> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<T> v(n);
  for (auto& x : v) {
    const float f = d(rng);
    if constexpr (sizeof(T) == 2) x = float_to_bf16(f);
    else x = T(f);
  }
  return v;
}

// Three parameters of a group (sizes 5, 40000, 17: one above the kernels' OpenMP threshold),
// updated twice through the foreach table and twice through the single-tensor table.
template <class T, class Args, class MakeArgs>
void expect_foreach_equals_single(DType dt, KernelTable<Args>& single, KernelTable<ForeachArgs<Args>>& each,
                                  int state_tensors, MakeArgs make) {
  std::mt19937 rng(11);
  const std::vector<size_t> sizes{5, 40000, 17};
  struct Param { std::vector<T> p, g, s0, s1; };
  std::vector<Param> a, b;
  for (size_t n : sizes) a.push_back({random_values<T>(n, rng), random_values<T>(n, rng), std::vector<T>(n),
                                      std::vector<T>(n)});
  b = a;
  for (int step = 1; step <= 2; ++step) {
    std::vector<Args> items;
    for (auto& q : a)
      items.push_back(make(q.p.data(), q.g.data(), q.s0.data(), q.s1.data(), int64_t(q.p.size()), step));
    each.launch(cpu_device(), dt, ForeachArgs<Args>{items.data(), int64_t(items.size()), dt});
    for (auto& q : b) single.launch(cpu_device(), dt, make(q.p.data(), q.g.data(), q.s0.data(), q.s1.data(),
                                                           int64_t(q.p.size()), step));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(std::memcmp(a[i].p.data(), b[i].p.data(), sizes[i] * sizeof(T)), 0) << "param " << i;
    if (state_tensors > 0) {
      EXPECT_EQ(std::memcmp(a[i].s0.data(), b[i].s0.data(), sizes[i] * sizeof(T)), 0);
    }
    if (state_tensors > 1) {
      EXPECT_EQ(std::memcmp(a[i].s1.data(), b[i].s1.data(), sizes[i] * sizeof(T)), 0);
    }
  }
}

template <class T> void check_dtype(DType dt) {
  for (double momentum : {0.0, 0.9}) {
    expect_foreach_equals_single<T, SgdArgs>(dt, sgd_kernels(), sgd_foreach_kernels(), momentum != 0 ? 1 : 0,
        [&](void* p, const void* g, void* s0, void*, int64_t n, int step) {
          return SgdArgs{p, g, momentum != 0 ? s0 : nullptr, 0.1, momentum, 0.0, 1e-4, false, step == 1, n};
        });
  }
  for (bool decoupled : {false, true}) {
    expect_foreach_equals_single<T, AdamArgs>(dt, adam_kernels(), adam_foreach_kernels(), 2,
        [&](void* p, const void* g, void* m, void* v, int64_t n, int step) {
          const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.999, step);
          return AdamArgs{p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1e-3 / bc1, std::sqrt(bc2), decoupled, n};
        });
  }
}

TEST(OptimForeach, CpuGroupUpdateEqualsTheSingleTensorKernelsBitForBit) {
  check_dtype<float>(DType::f32);
  check_dtype<double>(DType::f64);
  check_dtype<uint16_t>(DType::bf16);
}

}  // namespace
}  // namespace oomlab
