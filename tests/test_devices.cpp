// test_devices.cpp — logical devices: names with their index (cpu:N, meta:N, cuda:N), one
// caching allocator, capacity and generator per logical device, the current-device guard,
// thread budgets, and device threads: two threads training at once on meta:0/meta:1 (and
// cpu:0/cpu:1) give each device exactly the allocation peak (and on cpu the weights) of a
// lone run.
// ctest tier: unit
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <thread>

#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/core/thread_budget.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/dropout.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_step.h"
#include "kernels/linear.h"
#include "models/model_zoo.h"

using namespace oomlab;

TEST(Devices, ParseAndPrintWithTheirIndex) {
  for (const char* name : {"cpu:0", "cpu:3", "meta:0", "meta:1", "cuda:0", "cuda:7"})
    EXPECT_EQ(parse_device(name).str(), name);
  EXPECT_EQ(parse_device("cpu"), cpu_device(0));
  EXPECT_EQ(parse_device("meta"), meta_device(0));
  EXPECT_EQ(parse_device("meta:2"), meta_device(2));
  EXPECT_EQ(parse_device("cuda").str(), "cuda:0");
  for (const char* bad : {"gpu", "meta:", "meta:-1", "meta:x", "cpu:1x", "cuda:64", "meta :1", "Meta:0", ""}) {
    try {
      parse_device(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("unknown device"), std::string::npos) << e.what();
    }
  }
}

TEST(Devices, EachLogicalDeviceHasItsOwnAllocatorAndCapacity) {
  reset_allocators();
  CachingAllocator& a0 = allocator_for(meta_device(0));
  CachingAllocator& a1 = allocator_for(meta_device(1));
  EXPECT_NE(&a0, &a1);
  EXPECT_EQ(a1.device(), meta_device(1));
  a1.set_capacity(4 << 20);
  {
    Tensor big = Tensor::empty({8 << 20}, DType::u8, meta_device(0));   // meta:0 is not capped
    EXPECT_EQ(a0.stat("allocated_bytes.all.current"), 8 << 20);
    EXPECT_EQ(a1.stat("allocated_bytes.all.current"), 0);
    EXPECT_THROW(Tensor::empty({8 << 20}, DType::u8, meta_device(1)), OutOfMemoryError);
    EXPECT_EQ(a1.stat("num_ooms"), 1);
    EXPECT_EQ(a0.stat("num_ooms"), 0);
  }
  reset_allocators();
}

TEST(Devices, EachLogicalDeviceHasItsOwnGenerator) {
  manual_seed(5);
  Tensor x = Tensor::ones({1000});
  Tensor x1 = Tensor::ones({1000}, DType::f32, cpu_device(1));
  const Generator g0 = device_generator(cpu_device(0)).get_state();
  const Generator g1 = device_generator(cpu_device(1)).get_state();
  EXPECT_EQ(g0.seed, 5u);
  EXPECT_EQ(g1.seed, 5u);
  Tensor d1 = dropout(x1, 0.5, true);
  EXPECT_EQ(device_generator(cpu_device(1)).get_state().offset, g1.offset + 250);   // 1000 uniforms = 250 blocks
  EXPECT_EQ(device_generator(cpu_device(0)).get_state().offset, g0.offset);          // untouched
  // Same seed and offset on another device: the same mask (counter-based, device-independent).
  device_generator(cpu_device(0)).set_state(g1);
  EXPECT_EQ(dropout(x, 0.5, true).to_vector(), d1.to_vector());
  // get/set state replays.
  const Generator before = device_generator(cpu_device(1)).get_state();
  Tensor a = dropout(x1, 0.3, true);
  device_generator(cpu_device(1)).set_state(before);
  EXPECT_EQ(dropout(x1, 0.3, true).to_vector(), a.to_vector());
  manual_seed(9);   // seeds every device, offset 0
  EXPECT_EQ(device_generator(cpu_device(1)).get_state().seed, 9u);
  EXPECT_EQ(device_generator(cpu_device(1)).get_state().offset, 0u);
  EXPECT_EQ(device_generator(meta_device(3)).get_state().seed, 9u);   // created later: same seed
}

TEST(Devices, ReservationsFromManyThreadsNeverOverlap) {
  DeviceGenerator& g = device_generator(cpu_device(2));
  g.set_state(Generator{1, 0});
  std::vector<std::vector<uint64_t>> bases(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) bases[t].push_back(g.reserve(4 * (t + 1)));
    });
  for (auto& t : threads) t.join();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;   // [base, base + blocks)
  for (int t = 0; t < 4; ++t)
    for (uint64_t b : bases[t]) ranges.push_back({b, b + uint64_t(t + 1)});
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) ASSERT_LE(ranges[i - 1].second, ranges[i].first);
  EXPECT_EQ(g.get_state().offset, 1000u * (1 + 2 + 3 + 4));
}

TEST(Devices, CurrentDeviceGuardNestsAndIsPerThread) {
  EXPECT_EQ(current_device(), cpu_device(0));
  {
    CurrentDeviceGuard a(meta_device(1));
    EXPECT_EQ(current_device(), meta_device(1));
    {
      CurrentDeviceGuard b(cpu_device(3));
      EXPECT_EQ(current_device(), cpu_device(3));
      Device other;
      std::thread([&] { other = current_device(); }).join();
      EXPECT_EQ(other, cpu_device(0));
    }
    EXPECT_EQ(current_device(), meta_device(1));
  }
  EXPECT_EQ(current_device(), cpu_device(0));
}

TEST(Devices, RunOnDevicesBudgetsThreadsAndRethrows) {
  const int hw = hardware_threads();
  std::vector<Device> devs = {meta_device(0), meta_device(1)};
  std::vector<int> budgets(2), omp(2);
  std::vector<Device> seen(2);
  run_on_devices(devs, [&](Device d) {
    budgets[d.index] = thread_budget();
    omp[d.index] = omp_get_max_threads();
    seen[d.index] = current_device();
  });
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(budgets[i], std::max(1, hw / 2));
    EXPECT_EQ(omp[i], std::max(1, hw / 2));
    EXPECT_EQ(seen[i], devs[i]);
  }
  EXPECT_EQ(thread_budget(), hw);   // the caller is untouched
  EXPECT_THROW(run_on_devices(devs, [](Device d) {
                 if (d.index == 1) throw ValueError("device 1 failed");
               }),
               ValueError);
}

namespace {
struct RunResult {
  std::map<std::string, int64_t> stats;
  std::vector<double> weights;
};

// Three training steps of a small model on `dev` (SGD momentum: state appears at step 1).
RunResult train_three_steps(Device dev, const std::string& model, const Shape& chw) {
  ModelConfig cfg = default_model_config(model);
  cfg.device = dev;
  cfg.in_channels = chw[0]; cfg.height = chw[1]; cfg.width = chw[2];
  cfg.seed = 3;
  nn::ModulePtr m = build_model(model, cfg);
  ParamGroup g;
  g.params = m->named_parameters();
  g.lr = 0.05;
  g.momentum = 0.9;
  auto opt = make_optimizer("sgd", {g});
  Tensor x = dev.is_meta() ? Tensor::empty({8, chw[0], chw[1], chw[2]}, DType::f32, dev)
                           : Tensor::uniform({8, chw[0], chw[1], chw[2]}, -1, 1, DType::f32, dev);
  std::vector<int64_t> labels = {0, 1, 2, 3, 4, 5, 6, 7};
  Tensor y = Tensor::from_vector_i64(labels, {8}, dev);
  for (int i = 0; i < 3; ++i) train_step(*m, *opt, x, y, /*track_memory=*/false);
  RunResult r;
  r.stats = allocator_for(dev).stats();
  if (!dev.is_meta())
    for (auto& [n, p] : m->named_parameters()) {
      std::vector<double> v = p.to_vector();
      r.weights.insert(r.weights.end(), v.begin(), v.end());
    }
  return r;
}

void expect_concurrent_equals_lone(DeviceType type, const std::string& model, const Shape& chw) {
  const Device d0{type, 0}, d1{type, 1};
  reset_allocators();
  manual_seed(1);
  const RunResult lone = train_three_steps(d0, model, chw);
  reset_allocators();
  manual_seed(1);
  std::vector<RunResult> both(2);
  run_on_devices({d0, d1}, [&](Device d) { both[d.index] = train_three_steps(d, model, chw); });
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE((Device{type, i}.str()));
    for (const char* k : {"allocated_bytes.all.peak", "reserved_bytes.all.peak", "allocation.all.allocated",
                          "segment.all.peak", "active_bytes.all.peak", "allocated_bytes.all.current"})
      EXPECT_EQ(both[i].stats.at(k), lone.stats.at(k)) << k;
    EXPECT_EQ(both[i].weights, lone.weights);   // cpu: bit for bit (kernels are thread-count independent)
  }
  reset_allocators();
}
}  // namespace

TEST(Devices, TwoMetaDeviceThreadsEachPeakAsALoneRun) {
  expect_concurrent_equals_lone(DeviceType::meta, "resnet50", {3, 64, 64});
}

TEST(Devices, TwoCpuDeviceThreadsEachPeakAndTrainAsALoneRun) {
  expect_concurrent_equals_lone(DeviceType::cpu, "resnet20", {1, 16, 16});
}

// ---- the launch check (engine/core/dispatch.h) ------------------------------------------
// A planted bypass: raw kernel pointers taken from the tables through the test-only friend,
// as engine/ops/linear.cpp's batched_gemm once did with get() (on the H100 it ran a cuda
// GEMM with cpu:0 current). Each must fail the launch check before touching memory.
namespace oomlab {
struct KernelTableBypassForTest {
  template <class Args> static auto raw(const KernelTable<Args>& t, Device d, DType dt) { return t.get(d, dt); }
};
}  // namespace oomlab

namespace {
const char* kTestOp = "test_outer";
struct OuterArgs { const GemmArgs* inner; };
void outer_kernel_that_bypasses(const OuterArgs& a) {   // runs inside its own launch
  KernelTableBypassForTest::raw(gemm_kernels(), current_device(), DType::f32)(*a.inner);
}
}  // namespace

TEST(Dispatch, KernelsRunOnlyInsideALaunchOfThemselves) {
  float A[4] = {1, 2, 3, 4}, B[4] = {1, 0, 0, 1}, C[4] = {-7, -7, -7, -7};
  const GemmArgs g{false, false, 2, 2, 2, 1.0, A, 2, B, 2, 0.0, C, 2};
  auto expect_refused = [&](auto&& run, const char* where) {
    SCOPED_TRACE(where);
    try {
      run();
      ADD_FAILURE() << "a raw kernel call was not refused";
    } catch (const InternalError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("op 'gemm'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("outside KernelTable::launch"), std::string::npos) << msg;
    }
    EXPECT_EQ(C[0], -7.0f) << "the refused kernel wrote its output";
  };
  auto raw_cpu = KernelTableBypassForTest::raw(gemm_kernels(), cpu_device(), DType::f32);
  expect_refused([&] { raw_cpu(g); }, "cpu kernel, no launch");
  expect_refused(
      [&] {
        std::exception_ptr e;
        std::thread([&] {
          try { raw_cpu(g); } catch (...) { e = std::current_exception(); }
        }).join();
        if (e) std::rethrow_exception(e);
      },
      "cpu kernel on another thread");
  {
    CurrentDeviceGuard on_cpu1(cpu_device(1));   // the right device current is not enough
    expect_refused([&] { raw_cpu(g); }, "cpu kernel with its device current");
  }
  // Inside another kernel's launch: the check names the kernel being launched, not only the
  // device, so a kernel that calls a raw pointer of another table is refused too.
  static KernelTable<OuterArgs> outer(kTestOp);
  set_kernel<&outer_kernel_that_bypasses>(outer, DeviceType::cpu, DType::f32);
  expect_refused([&] { outer.launch(cpu_device(), DType::f32, OuterArgs{&g}); }, "inside another launch");
  if (backend_linked("cuda")) {   // refused before any CUDA call: no GPU needed to see it
    auto raw_cuda = KernelTableBypassForTest::raw(gemm_kernels(), Device{DeviceType::cuda, 0}, DType::f32);
    expect_refused([&] { raw_cuda(g); }, "cuda kernel, no launch");
  }
  // Through launch() the same kernel runs: C = A * I.
  gemm_kernels().launch(cpu_device(), DType::f32, g);
  EXPECT_EQ(std::vector<float>(C, C + 4), (std::vector<float>{1, 2, 3, 4}));
}
