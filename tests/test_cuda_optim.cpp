// test_cuda_optim.cpp — the CUDA optimizers and span timer, against the CPU:
//  * optimizers (SGD momentum/nesterov/weight decay, Adam, AdamW) and WeightEma over several
//    steps, and the foreach kernels (multi-tensor launches) bit-identical to one launch per
//    parameter;
//  * the span timer (kernels/cuda/span_timer.cpp): device time of a profiler span from events.
// Everything that needs a device GTEST_SKIPs with the reason when none is usable.
// ctest tier: gpu
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "engine/memory/memory_export.h"
#include "engine/ops/elementwise.h"
#include "engine/optim/ema.h"
#include "engine/optim/optimizer.h"
#include "kernels/optim.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using namespace oomlab::testing;

// ---- optimizers and EMA -----------------------------------------------------------------
namespace {
struct OptCase { const char* name; const char* opt; double lr, momentum, weight_decay; bool nesterov; };

std::vector<std::vector<double>> run_optimizer(const OptCase& c, Device dev, DType t, int steps) {
  NamedTensors params;
  for (int i = 0; i < 3; ++i) {
    Tensor p = to_device(random_tensor({int64_t(17 + 40 * i)}, -1, 1, 100 + i, t), dev);
    p.set_requires_grad(true);
    params.push_back({"p" + std::to_string(i), p});
  }
  ParamGroup g;
  g.params = params;
  g.lr = c.lr; g.momentum = c.momentum; g.weight_decay = c.weight_decay; g.nesterov = c.nesterov;
  auto opt = make_optimizer(c.opt, {g});
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i)
      params[i].second.set_grad(to_device(random_tensor(params[i].second.shape(), -1, 1, 500 + 10 * s + i, t), dev));
    opt->step();
  }
  std::vector<std::vector<double>> out;
  for (auto& [n, p] : params) out.push_back(values(p));
  for (auto& [n, st] : opt->state_tensors()) out.push_back(values(st));
  return out;
}
}  // namespace

TEST(CudaOptim, StepsMatchCpu) {
  OOMLAB_REQUIRE_CUDA();
  const OptCase cases[] = {{"sgd_plain", "sgd", 0.1, 0.0, 0.0, false},
                           {"sgd_momentum_wd", "sgd", 0.05, 0.9, 5e-4, false},
                           {"sgd_nesterov", "sgd", 0.05, 0.9, 1e-4, true},
                           {"adam", "adam", 1e-2, 0, 0.0, false},
                           {"adam_wd", "adam", 1e-2, 0, 1e-2, false},
                           {"adamw", "adamw", 1e-2, 0, 1e-2, false}};
  for (const OptCase& c : cases)
    for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {   // 16-bit: a --half model's optimizer
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(t));
      auto want = run_optimizer(c, cpu_device(), t, 4);
      std::vector<std::vector<double>> got;
      try {
        got = run_optimizer(c, cuda0(), t, 4);
      } catch (const NotImplementedError& e) {
        if (t == DType::f32) ADD_FAILURE() << e.what();
        continue;
      }
      ASSERT_EQ(got.size(), want.size());
      const Tol tol = tolerance(t);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(all_close(got[i], want[i], tol.rtol, tol.atol)) << "tensor " << i;
    }
}

// The foreach kernels (optim_foreach.cu): multi-tensor launches give the single-tensor
// kernels' bits. The per-item form (kernels/optim.h foreach_per_item, what the CPU registers)
// is put in the CUDA tables for the reference run, through a test-only friend, and the
// multi-tensor kernels restored after it. 30 parameters (more than a launch's 24) and one of
// 150000 elements (three 65536-element chunks), four steps, every optimizer and dtype.
namespace oomlab {
struct KernelTableBypassForTest {
  template <class Args> static auto& slot(KernelTable<Args>& t, DType dt) {
    ensure_kernels_registered();
    return t.fns_[int(DeviceType::cuda)][int(dt)];
  }
};
}  // namespace oomlab

namespace {
class PerItemOptimizersOnCuda {   // while alive, the CUDA foreach tables of `t` run per item
 public:
  explicit PerItemOptimizersOnCuda(DType t)
      : t_(t), sgd_(KernelTableBypassForTest::slot(sgd_foreach_kernels(), t)),
        adam_(KernelTableBypassForTest::slot(adam_foreach_kernels(), t)) {
    set_kernel<&foreach_per_item<SgdArgs, &sgd_kernels>>(sgd_foreach_kernels(), DeviceType::cuda, t);
    set_kernel<&foreach_per_item<AdamArgs, &adam_kernels>>(adam_foreach_kernels(), DeviceType::cuda, t);
  }
  ~PerItemOptimizersOnCuda() {
    KernelTableBypassForTest::slot(sgd_foreach_kernels(), t_) = sgd_;
    KernelTableBypassForTest::slot(adam_foreach_kernels(), t_) = adam_;
  }

 private:
  DType t_;
  KernelTable<SgdForeachArgs>::Fn sgd_;
  KernelTable<AdamForeachArgs>::Fn adam_;
};
}  // namespace

TEST(CudaOptim, ForeachStepsEqualSingleTensorStepsBitForBit) {
  OOMLAB_REQUIRE_CUDA();
  auto run = [](const char* opt, DType t, bool foreach_on) {
    std::optional<PerItemOptimizersOnCuda> per_item;
    if (!foreach_on) per_item.emplace(t);
    NamedTensors params;
    for (int i = 0; i < 30; ++i) {
      Tensor p = to_device(random_tensor({i == 7 ? int64_t(150000) : int64_t(1 + 13 * i)}, -1, 1, 300 + i, t), cuda0());
      p.set_requires_grad(true);
      params.push_back({"p" + std::to_string(i), p});
    }
    ParamGroup g;
    g.params = params;
    g.lr = 0.01; g.momentum = 0.9; g.weight_decay = 1e-3;
    auto o = make_optimizer(opt, {g});
    for (int s = 0; s < 4; ++s) {
      for (size_t i = 0; i < params.size(); ++i)
        params[i].second.set_grad(to_device(random_tensor(params[i].second.shape(), -1, 1, 900 + 40 * s + int(i), t),
                                            cuda0()));
      o->step();
    }
    std::vector<std::vector<double>> out;
    for (auto& [n, p] : params) out.push_back(values(p));
    for (auto& [n, st] : o->state_tensors()) out.push_back(values(st));
    return out;
  };
  for (const char* opt : {"sgd", "adam", "adamw"})
    for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      SCOPED_TRACE(std::string(opt) + " " + dtype_name(t));
      EXPECT_EQ(run(opt, t, true), run(opt, t, false));
    }
}

// The CUDA span timer (kernels/cuda/span_timer.cpp): a span opened on a cuda device gets the
// device time of the work it queued, from events, with no synchronisation; a host span none.
TEST(CudaProfiler, SpansOnCudaCarryDeviceTime) {
  OOMLAB_REQUIRE_CUDA();
  Tensor a = to_device(random_tensor({4096, 4096}, -1, 1, 5, DType::f32), cuda0());
  OpProfiler::take();
  OpProfiler::enable(true);
  {
    OpSpanScope s("mul/fwd", 0, cuda0());
    for (int i = 0; i < 4; ++i) a = mul(a, a);
  }
  { OpSpanScope h("host/fwd"); }
  OpProfiler::enable(false);
  const std::vector<OpSpan> spans = OpProfiler::take();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_GT(spans[0].device_us, 0);          // four 64 MiB elementwise passes
  EXPECT_LT(spans[0].device_us, 10'000'000);
  EXPECT_EQ(spans[1].device_us, -1);
}

TEST(CudaOptim, WeightEmaMatchesCpu) {
  OOMLAB_REQUIRE_CUDA();
  auto run = [](Device dev) {
    Tensor p = to_device(random_tensor({257}, -1, 1, 7, DType::f32), dev);
    p.set_requires_grad(true);
    Tensor b = to_device(random_tensor({9}, 0, 1, 8, DType::f32), dev);
    WeightEma ema({{"w", p}, {"running_mean", b}}, 0.9);
    for (int s = 0; s < 3; ++s) {
      p.detach().copy_(random_tensor({257}, -1, 1, 30 + s, DType::f32));
      b.copy_(random_tensor({9}, 0, 1, 40 + s, DType::f32));
      ema.update();
    }
    std::vector<std::vector<double>> out;
    for (auto& [n, t] : ema.state_tensors()) out.push_back(values(t));
    ema.swap_in();
    out.push_back(values(p));
    ema.swap_out();
    out.push_back(values(p));
    return out;
  };
  auto want = run(cpu_device()), got = run(cuda0());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i], 1e-6, 1e-7)) << "tensor " << i;
}

