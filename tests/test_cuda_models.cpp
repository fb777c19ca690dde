// test_cuda_models.cpp — whole models and the trainer on cuda:0 against the CPU and meta:
//  * one training step of every zoo model (small inputs): same init, loss, parameter
//    gradients, buffers (BN stats) and updated parameters as the same step on the CPU;
//  * the allocator trace of two steps on cuda equals the meta trace (action, size,
//    layer/phase frame) apart from allocations tagged "workspace" (cuDNN/cuBLAS scratch);
//    the peak lies between meta's and meta's plus the workspace peak;
//  * train() end to end (eval, argmax counting, item(), results JSON) against the CPU, an
//    emulated --device-memory cap raising OutOfMemoryError, and checkpoint save/resume
//    on cuda with the checkpoint also resuming on the CPU; DP, balanced DP, DDP and
//    SyncBatchNorm on two logical CUDA devices of the one GPU against the CPU.
// Float32 runs strict (no TF32) unless OOMLAB_MATMUL_TF32/OOMLAB_CUDNN_TF32=1 are set.
// Every test GTEST_SKIPs with the reason when no CUDA device is usable.
// ctest tier: gpu
// ctest slow: ShortRunComparison.*
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include <unistd.h>

#include "cuda_test_util.h"
#include "short_run_util.h"
#include "zoo_step_util.h"
#include "engine/autograd/grad_mode.h"
#include "engine/data/dataloader.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_step.h"
#include "experiments/train/train_command.h"
#include "models/model_zoo.h"

using namespace oomlab;
using namespace oomlab::testing;
namespace fs = std::filesystem;

namespace {
const double kGradNmse = tf32_enabled() ? 1e-3 : 1e-6;
}  // namespace

class CudaZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaZoo, TrainingStepMatchesCpu) {
  OOMLAB_REQUIRE_CUDA();
  const std::string name = GetParam();
  reset_allocators();
  ZooSetup cs = zoo_setup(name, cpu_device()), gs = zoo_setup(name, cuda0());
  nn::ModulePtr cm = build_model(name, cs.cfg), gm = build_model(name, gs.cfg);
  nn::NamedTensors cstate = cm->state_dict(), gstate = gm->state_dict();
  ASSERT_EQ(cstate.size(), gstate.size());
  for (size_t i = 0; i < cstate.size(); ++i)   // init draws on the host: identical on every device
    EXPECT_EQ(values(gstate[i].second), values(cstate[i].second)) << "init of " << cstate[i].first;
  // Deep BN ResNets at init amplify rounding (a 1-ulp change of the input moves resnet50's
  // gradients by NMSE ~3e-3): damp each residual branch's last BN (zero_init_residual with
  // 0.1 instead of 0, so every gradient stays nonzero) to make the step well-conditioned.
  if (name.rfind("resnet", 0) == 0) {
    NoGradGuard ng;
    bool bottleneck = false;
    for (auto& [n, p] : cstate) bottleneck |= n.find(".bn3.") != std::string::npos;
    const std::string last = bottleneck ? ".bn3.weight" : ".bn2.weight";
    for (auto& [n, p] : cstate)
      if (n.rfind("layer", 0) == 0 && n.size() > last.size() &&
          n.compare(n.size() - last.size(), last.size(), last) == 0)
        p.detach().fill_(0.1);
  }
  gm->load_state_dict(cstate);
  std::vector<std::vector<double>> p0;   // parameters before the step (named_parameters order)
  for (auto& [n, p] : cm->named_parameters()) p0.push_back(values(p));
  auto copt = sgd_for(*cm), gopt = sgd_for(*gm);
  HostBatch b = make_batch(name, cs.cfg, cs.batch, 42);
  manual_seed(5);
  StepOutput co =
      train_step(*cm, *copt, batch_input_to_device(b, cpu_device()), batch_target_to_device(b, cpu_device()));
  manual_seed(5);
  StepOutput go = train_step(*gm, *gopt, batch_input_to_device(b, cuda0()), batch_target_to_device(b, cuda0()));
  const double cl = co.loss.item(), gl = go.loss.item();
  EXPECT_NEAR(gl, cl, (tf32_enabled() ? 2e-3 : 1e-4) * std::max(1.0, std::fabs(cl))) << name << " loss";
  const int64_t scored = b.n * std::max<int64_t>(1, shape_numel(b.target_shape) / b.n);
  EXPECT_LE(std::abs(go.correct - co.correct), std::max<int64_t>(1, scored / 500)) << name << " argmax hits";
  auto cp = cm->named_parameters(), gp = gm->named_parameters();
  ASSERT_EQ(cp.size(), gp.size());
  // Per-tensor NMSE with the denominator floored at the tensor's share of the mean square of
  // all gradients: a gradient that is zero in exact arithmetic (conv bias before BN in
  // vgg*_bn, attention key bias in bert-*) is rounding noise on both sides.
  double all_sq = 0;
  int64_t all_n = 0;
  for (auto& [n, p] : cp)
    if (p.grad().defined())
      for (double v : values(p.grad())) { all_sq += v * v; ++all_n; }
  const double floor_ms = all_sq / double(std::max<int64_t>(1, all_n));
  double worst = 0; std::string worst_name;
  for (size_t i = 0; i < cp.size(); ++i) {
    SCOPED_TRACE(cp[i].first);
    ASSERT_EQ(cp[i].second.grad().defined(), gp[i].second.grad().defined());
    if (!cp[i].second.grad().defined()) continue;
    const std::vector<double> gg = values(gp[i].second.grad()), cg = values(cp[i].second.grad());
    double num = 0, den = 0;
    for (size_t j = 0; j < cg.size(); ++j) { num += (gg[j] - cg[j]) * (gg[j] - cg[j]); den += cg[j] * cg[j]; }
    den = std::max(den, floor_ms * double(cg.size()));
    EXPECT_LE(num, kGradNmse * den) << "grad: floored NMSE " << num / den;
    if (num / den > worst) { worst = num / den; worst_name = cp[i].first; }
    // The update from the device's own gradient (SGD, first step: buf = g, p1 = p0 - lr * g).
    const std::vector<double> p1 = values(gp[i].second);
    for (size_t j = 0; j < p1.size(); ++j) {
      const double want = p0[i][j] - 0.01 * gg[j];
      ASSERT_LE(std::fabs(p1[j] - want), 4e-7 * std::max(std::fabs(p0[i][j]), std::fabs(want)))
          << "updated parameter at " << j;
    }
  }
  std::printf("[   INFO   ] %s: worst floored grad NMSE %.2e (%s)\n", name.c_str(), worst, worst_name.c_str());
  auto cb = cm->named_buffers(), gb = gm->named_buffers();
  ASSERT_EQ(cb.size(), gb.size());
  for (size_t i = 0; i < cb.size(); ++i) {
    SCOPED_TRACE(cb[i].first);
    if (cb[i].second.dtype() == DType::i64) EXPECT_EQ(values(gb[i].second), values(cb[i].second));
    else EXPECT_TRUE(nmse_below(values(gb[i].second), values(cb[i].second), kGradNmse));
  }
}

TEST_P(CudaZoo, AllocatorTraceEqualsMetaApartFromWorkspace) {
  OOMLAB_REQUIRE_CUDA();
  const std::string name = GetParam();
  Recorded meta = record_steps(name, meta_device());
  Recorded cuda = record_steps(name, cuda0());
  reset_allocators();
  expect_trace_equals_meta(name, meta, cuda);
}

INSTANTIATE_TEST_SUITE_P(Zoo, CudaZoo, ::testing::ValuesIn(model_names()),
                         [](const auto& info) { return gtest_name(info.param); });

// ---- the trainer ------------------------------------------------------------------------
namespace {
void expect_close_histories(const nlohmann::json& got, const nlohmann::json& want, double rel) {
  const auto& g = got["metrics"]["history"]["train_loss"];
  const auto& w = want["metrics"]["history"]["train_loss"];
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i].get<double>(), w[i].get<double>(), rel * std::max(1.0, std::fabs(w[i].get<double>())))
        << "step " << i;
}

std::string scratch_dir() {
  const fs::path d = fs::temp_directory_path() / ("oomlab_short_runs_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d.string();
}
}  // namespace

// The comparison itself, on the CPU (no GPU needed): a run that differs from the CPU's by
// rounding passes, runs that a wrong backend would give fail (short_run_util.h).
TEST(ShortRunComparison, PassesRoundingFailsWrongWeightsAndUpdates) {
  const std::string dir = scratch_dir();
  for (const char* ds : {"synthetic", "synthetic-seg"}) {
    const bool sgd = ds == std::string("synthetic");
    RunSpec c = small_run(sgd ? "resnet20" : "unet-small", ds);
    SCOPED_TRACE(c.model);
    const CpuEnvelope e = cpu_envelope(c, dir);
    EXPECT_TRUE(within_rounding_envelope(e.cpu, e));   // itself
    RunSpec other = c;                              // rounded the other way: half an ulp down, to nearest
    const std::string init = dir + "/down.safetensors";
    write_perturbed_init(c, -std::numeric_limits<float>::epsilon() / 2, init);
    other.init = init;
    EXPECT_TRUE(within_rounding_envelope(train(other), e));
    write_perturbed_init(c, 1e-4, init);                 // weights off by 1e-4 (a bad cast, say)
    EXPECT_FALSE(within_rounding_envelope(train(other), e));
    if (sgd) {                                          // an update off by 5%
      RunSpec wrong_lr = c;
      wrong_lr.lr = *c.lr * 1.05;
      EXPECT_FALSE(within_rounding_envelope(train(wrong_lr), e));
    }
  }
  fs::remove_all(dir);
}

// Each short run on cuda:0 against the CPU's rounding envelope (short_run_util.h): unet-small
// under Adam at lr 0.05 turns 1-ulp differences into 2e-3 loss differences, so a fixed
// tolerance either fails a correct backend or passes a wrong one.
TEST(CudaTrainer, ShortRunsMatchCpu) {
  OOMLAB_REQUIRE_CUDA();
  const std::string dir = scratch_dir();
  const std::pair<const char*, const char*> runs[] = {
      {"mlp", "synthetic"}, {"resnet20", "synthetic"}, {"bert-tiny", "synthetic-seq"}, {"unet-small", "synthetic-seg"}};
  for (auto [model, dataset] : runs) {
    SCOPED_TRACE(model);
    RunSpec c = small_run(model, dataset);
    const CpuEnvelope e = cpu_envelope(c, dir, tf32_enabled() ? std::ldexp(1.0, -11) : 0.0);
    c.device = cuda0();
    nlohmann::json got = train(c);
    EXPECT_EQ(got["context"]["device"], "cuda:0");
    EXPECT_EQ(got["context"]["cuda_compiled"], true);
    EXPECT_GT(got["memory"]["totals"]["allocated_bytes.all.peak"].get<int64_t>(), 0);
    EXPECT_TRUE(within_rounding_envelope(got, e));
    // One eval batch of 16 samples: accuracy moves in steps of 1/16, one near-tie allowed.
    EXPECT_NEAR(got["metrics"]["final_test_accuracy"].get<double>(),
                e.cpu["metrics"]["final_test_accuracy"].get<double>(), 1.0 / 16 + 1e-9);
  }
  fs::remove_all(dir);
  reset_allocators();
}

// Data parallelism on logical CUDA devices sharing the GPU (cuda:0..1): DP, balanced DP and
// DDP over rank threads end where the CPU's single device does for the MLP (no BatchNorm), and
// DDP with SyncBatchNorm follows the CPU's DDP with SyncBatchNorm step by step.
TEST(CudaTrainer, DataParallelOnLogicalDevicesMatchesCpu) {
  OOMLAB_REQUIRE_CUDA();
  const RunSpec base = small_run("mlp", "synthetic");   // global batch 16
  const nlohmann::json want = train(base);
  const double want_test = want["metrics"]["history"]["epochs"].back()["test_loss"].get<double>();
  struct Mode { ParallelMode parallel; int64_t batch, gpu0; };
  for (const Mode& m :
       {Mode{ParallelMode::dp, 16, -1}, Mode{ParallelMode::bdp, 16, 4}, Mode{ParallelMode::ddp, 8, -1}}) {
    SCOPED_TRACE(parallel_mode_name(m.parallel));
    RunSpec c = base;
    c.device = cuda0();
    c.parallel = m.parallel;
    c.devices = 2;
    c.batch = m.batch;
    c.gpu0_bsz = m.gpu0;
    const nlohmann::json got = train(c);
    EXPECT_TRUE(got["memory"]["devices"].contains("cuda:1"));
    EXPECT_NEAR(got["metrics"]["history"]["epochs"].back()["test_loss"].get<double>(), want_test,
                1e-3 * std::max(1.0, want_test));
  }
  RunSpec r = small_run("resnet20", "synthetic");
  r.parallel = ParallelMode::ddp;
  r.devices = 2;
  r.batch = 8;
  r.sync_bn = true;
  const nlohmann::json cpu_sync = train(r);
  r.device = cuda0();
  expect_close_histories(train(r), cpu_sync, 1e-3);
  reset_allocators();
}

TEST(CudaTrainer, DeviceMemoryCapRaisesOutOfMemoryError) {
  OOMLAB_REQUIRE_CUDA();
  RunSpec c = small_run("resnet20", "synthetic");
  c.device = cuda0();
  c.device_memory = 1 << 20;
  std::string msg;
  try { train(c); } catch (const OutOfMemoryError& e) { msg = e.what(); }
  ASSERT_FALSE(msg.empty()) << "no OutOfMemoryError with a 1 MiB cap";
  for (const char* k :
       {"cuda:0 out of memory", "tried to allocate", "capacity 1.00 MiB", "allocated", "reserved", "free"})
    EXPECT_NE(msg.find(k), std::string::npos) << k << " missing in: " << msg;
  reset_allocators();
}

TEST(CudaTrainer, CheckpointResumesOnCudaAndOnCpu) {
  OOMLAB_REQUIRE_CUDA();
  const fs::path dir = fs::temp_directory_path() / ("oomlab_cuda_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RunSpec c = small_run("mlp", "synthetic");
  c.steps = 4;
  c.optimizer = "adam";
  c.lr = 1e-3;
  c.ema_decay = 0.9;
  c.device = cuda0();
  c.save_dir = dir.string();
  c.save_every = 2;
  nlohmann::json full = train(c);
  ASSERT_TRUE(fs::exists(dir / "step-2" / "model.safetensors"));
  RunSpec r = c;
  r.save_dir.clear();
  r.resume_dir = (dir / "step-2").string();
  expect_close_histories(train(r), full, 1e-5);   // resumed on cuda
  r.device = cpu_device();
  expect_close_histories(train(r), full, 1e-3);   // the cuda checkpoint resumed on the CPU
  fs::remove_all(dir);
  reset_allocators();
}
