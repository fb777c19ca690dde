// test_sync_batchnorm.cpp — sync_batch_norm and SyncBatchNorm layers: with one rank (an
// identity all-reduce) it equals batch_norm and passes float64 gradchecks; over 2-4 local
// ranks (threads on cpu:0..N-1, uneven and empty slices) outputs, input gradients and
// running stats equal batch_norm on the whole batch, and the per-rank weight/bias
// gradients sum to its; float32; meta (allocations as on cpu, one all-reduce per pass);
// errors; convert_sync_batchnorm on a ResNet / an MLP; a BatchNorm2d module with
// sync_all_reduce over 2 ranks, also under checkpointing.
// ctest tier: ranks
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd/checkpoint.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/layers.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/sync_batchnorm.h"
#include "engine/parallel/local_comm.h"
#include "engine/parallel/sync_batchnorm.h"
#include "models/model_zoo.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
const AllReduceSumFn kIdentity = [](const Tensor&) {};   // one rank: the sum is the tensor itself

std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int r = 0; r < n; ++r) d.push_back(cpu_device(r));
  return d;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<double> random_values(int64_t n, double lo, double hi, uint64_t seed) {
  return random_f64({n}, lo, hi, seed).to_vector();
}

std::vector<double> slice(const std::vector<double>& v, int64_t begin, int64_t count, int64_t per_sample) {
  return {v.begin() + begin * per_sample, v.begin() + (begin + count) * per_sample};
}

struct BnResult { std::vector<double> y, dx, dw, db, rm, rv; };

// batch_norm or sync_batch_norm (fn set) of x [N, C, H, W] from host values, then
// backward of sum(y * g): outputs, gradients and running stats as host vectors.
BnResult run_bn(const std::vector<double>& xv, const std::vector<double>& gv, Shape shape,
                const std::vector<double>& wv, const std::vector<double>& bv, const std::vector<double>& rmv,
                const std::vector<double>& rvv, DType dt, Device dev, const AllReduceSumFn& fn) {
  const int64_t C = shape[1];
  Tensor x = leaf(Tensor::from_vector(xv, shape, dt, dev)), g = Tensor::from_vector(gv, shape, dt, dev);
  Tensor w = leaf(Tensor::from_vector(wv, {C}, dt, dev)), b = leaf(Tensor::from_vector(bv, {C}, dt, dev));
  Tensor rm = Tensor::from_vector(rmv, {C}, dt, dev), rv = Tensor::from_vector(rvv, {C}, dt, dev);
  Tensor y = fn ? sync_batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, fn) : batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
  sum_all(mul(y, g)).backward();
  return {y.to_vector(), x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector(), rm.to_vector(),
          rv.to_vector()};
}

// The global batch [sum(sizes), 3, 4, 4] split over sizes.size() local ranks vs one device.
void check_ranks_equal_one_device(const std::vector<int64_t>& sizes, DType dt, double tol) {
  const int n = int(sizes.size());
  int64_t N = 0;
  for (int64_t s : sizes) N += s;
  const int64_t C = 3, per = C * 4 * 4;
  const std::vector<double> xv = random_values(N * per, -2, 3, 11), gv = random_values(N * per, -1, 1, 12);
  const std::vector<double> wv = random_values(C, 0.5, 1.5, 13), bv = random_values(C, -1, 1, 14);
  const std::vector<double> rmv = random_values(C, -1, 1, 15), rvv = random_values(C, 0.5, 2, 16);
  const BnResult want = run_bn(xv, gv, {N, C, 4, 4}, wv, bv, rmv, rvv, dt, cpu_device(), nullptr);

  std::vector<BnResult> got(static_cast<size_t>(n));
  std::vector<int64_t> calls(static_cast<size_t>(n), 0);
  run_local_ranks(cpus(n), AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
    const int r = comm.rank();
    int64_t begin = 0;
    for (int q = 0; q < r; ++q) begin += sizes[size_t(q)];
    AllReduceSumFn fn = [&, r](const Tensor& t) { ++calls[size_t(r)]; comm.all_reduce(t, ReduceOp::sum); };
    const int64_t Nr = sizes[size_t(r)];
    got[size_t(r)] = run_bn(slice(xv, begin, Nr, per), slice(gv, begin, Nr, per), {Nr, C, 4, 4}, wv, bv, rmv, rvv,
                            dt, comm.device(), fn);
  });
  std::vector<double> y, dx, dw(size_t(C), 0.0), db(size_t(C), 0.0);
  for (int r = 0; r < n; ++r) {
    const BnResult& g = got[size_t(r)];
    y.insert(y.end(), g.y.begin(), g.y.end());
    dx.insert(dx.end(), g.dx.begin(), g.dx.end());
    for (int64_t c = 0; c < C; ++c) { dw[size_t(c)] += g.dw[size_t(c)]; db[size_t(c)] += g.db[size_t(c)]; }
    EXPECT_LE(max_abs_diff(g.rm, want.rm), tol) << "rank " << r << " running_mean";
    EXPECT_LE(max_abs_diff(g.rv, want.rv), tol) << "rank " << r << " running_var";
    EXPECT_EQ(calls[size_t(r)], 2) << "rank " << r << ": one all-reduce forward, one backward";
  }
  EXPECT_LE(max_abs_diff(y, want.y), tol) << n << " ranks: outputs";
  EXPECT_LE(max_abs_diff(dx, want.dx), tol) << n << " ranks: input gradients";
  EXPECT_LE(max_abs_diff(dw, want.dw), tol * double(N)) << n << " ranks: summed weight gradients";
  EXPECT_LE(max_abs_diff(db, want.db), tol * double(N)) << n << " ranks: summed bias gradients";
}
}  // namespace

// ---- one rank: identical to batch_norm ---------------------------------------------------
TEST(SyncBatchNorm, OneRankEqualsBatchNorm) {
  for (Shape shape : {Shape{6, 3, 2, 3}, Shape{7, 4}}) {
    const int64_t C = shape[1], numel = shape_numel(shape);
    const std::vector<double> xv = random_values(numel, -1, 2, 1), gv = random_values(numel, -1, 1, 2);
    const std::vector<double> wv = random_values(C, 0.5, 1.5, 3), bv = random_values(C, -1, 1, 4);
    const std::vector<double> rmv(size_t(C), 0.0), rvv(size_t(C), 1.0);
    const BnResult a = run_bn(xv, gv, shape, wv, bv, rmv, rvv, DType::f64, cpu_device(), nullptr);
    const BnResult s = run_bn(xv, gv, shape, wv, bv, rmv, rvv, DType::f64, cpu_device(), kIdentity);
    EXPECT_LE(max_abs_diff(s.y, a.y), 1e-12);
    EXPECT_LE(max_abs_diff(s.dx, a.dx), 1e-12);
    EXPECT_LE(max_abs_diff(s.dw, a.dw), 1e-12);
    EXPECT_LE(max_abs_diff(s.db, a.db), 1e-12);
    EXPECT_LE(max_abs_diff(s.rm, a.rm), 1e-12);
    EXPECT_LE(max_abs_diff(s.rv, a.rv), 1e-12);
  }
}

TEST(SyncBatchNorm, GradcheckOneRank) {
  Tensor rm = Tensor::zeros({3}, DType::f64), rv = Tensor::ones({3}, DType::f64);
  auto f = [&](const std::vector<Tensor>& in) {
    return sync_batch_norm(in[0], in[1], in[2], rm, rv, true, 0.1, 1e-5, kIdentity);
  };
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({2, 3, 2, 3}, -1, 1, 4)), leaf(random_f64({3}, 0.5, 1.5, 5)),
                            leaf(random_f64({3}, -1, 1, 6))}));
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({5, 3}, -1, 1, 7)), leaf(random_f64({3}, 0.5, 1.5, 8)),
                            leaf(random_f64({3}, -1, 1, 9))}));
  // no affine, no running stats; and only some inputs needing gradients
  Tensor none_m, none_v;
  auto g = [&](const std::vector<Tensor>& in) {
    return sync_batch_norm(in[0], Tensor(), Tensor(), none_m, none_v, true, 0.1, 1e-5, kIdentity);
  };
  EXPECT_TRUE(gradcheck(g, {leaf(random_f64({3, 2, 2, 2}, -1, 1, 10))}));
  auto h = [&](const std::vector<Tensor>& in) {
    return sync_batch_norm(in[0], in[1], in[2], rm, rv, true, 0.1, 1e-5, kIdentity);
  };
  EXPECT_TRUE(gradcheck(h, {random_f64({4, 3}, -1, 1, 11), leaf(random_f64({3}, 0.5, 1.5, 12)),
                            leaf(random_f64({3}, -1, 1, 13))}));
  EXPECT_TRUE(gradcheck(h, {random_f64({4, 3}, -1, 1, 14), random_f64({3}, 0.5, 1.5, 15),
                            leaf(random_f64({3}, -1, 1, 16))}));
}

TEST(SyncBatchNorm, EvalIsBatchNormWithoutCommunication) {
  int calls = 0;
  AllReduceSumFn counting = [&](const Tensor&) { ++calls; };
  Tensor x = random_f64({4, 3, 2, 2}, -1, 1, 20), w = random_f64({3}, 0.5, 1.5, 21), b = random_f64({3}, -1, 1, 22);
  Tensor rm = random_f64({3}, -1, 1, 23), rv = random_f64({3}, 0.5, 2, 24);
  Tensor want = batch_norm(x, w, b, rm, rv, false);
  EXPECT_LE(max_abs_diff(sync_batch_norm(x, w, b, rm, rv, false, 0.1, 1e-5, counting).to_vector(), want.to_vector()),
            0.0);
  EXPECT_LE(max_abs_diff(sync_batch_norm(x, w, b, rm, rv, false, 0.1, 1e-5, nullptr).to_vector(), want.to_vector()),
            0.0);
  EXPECT_EQ(calls, 0);
}

// ---- several local ranks: equal to one device on the whole batch ------------------------
TEST(SyncBatchNorm, RanksEqualOneDeviceFloat64) {
  check_ranks_equal_one_device({6, 6}, DType::f64, 1e-12);
  check_ranks_equal_one_device({7, 5}, DType::f64, 1e-12);
  check_ranks_equal_one_device({5, 4, 3}, DType::f64, 1e-12);
  check_ranks_equal_one_device({4, 3, 3, 2}, DType::f64, 1e-12);
}

TEST(SyncBatchNorm, RankWithEmptySliceTakesPart) {
  check_ranks_equal_one_device({8, 0, 4}, DType::f64, 1e-12);
}

TEST(SyncBatchNorm, RanksEqualOneDeviceFloat32) {
  check_ranks_equal_one_device({7, 5}, DType::f32, 1e-5);
  check_ranks_equal_one_device({5, 4, 3}, DType::f32, 1e-5);
}

// ---- meta: same allocations as cpu, one all-reduce per pass ------------------------------
TEST(SyncBatchNorm, MetaAllocatesLikeCpuAndCommunicatesOncePerPass) {
  struct Counts { int64_t allocs, peak, calls_fwd, calls_total; };
  auto run = [](Device dev) {
    Tensor x = leaf(Tensor::zeros({4, 3, 5, 5}, DType::f32, dev));
    Tensor w = leaf(Tensor::ones({3}, DType::f32, dev)), b = leaf(Tensor::zeros({3}, DType::f32, dev));
    Tensor rm = Tensor::zeros({3}, DType::f32, dev), rv = Tensor::ones({3}, DType::f32, dev);
    Tensor g = Tensor::ones({4, 3, 5, 5}, DType::f32, dev);
    int64_t calls = 0;
    AllReduceSumFn fn = [&](const Tensor& t) {
      EXPECT_EQ(t.device(), dev);
      ++calls;
    };
    CachingAllocator& a = allocator_for(dev);
    a.reset_peak_stats();
    a.reset_accumulated_stats();
    Tensor y = sync_batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, fn);
    const int64_t fwd = calls;
    y.backward(g);
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_EQ(x.grad().shape(), x.shape());
    EXPECT_EQ(w.grad().shape(), Shape{3});
    return Counts{a.stat("allocation.all.allocated"), a.stat("allocated_bytes.all.peak"), fwd, calls};
  };
  const Counts meta = run(meta_device(3)), cpu = run(cpu_device(3));
  EXPECT_EQ(meta.calls_fwd, 1);
  EXPECT_EQ(meta.calls_total, 2);
  EXPECT_GT(meta.allocs, 0);
  EXPECT_EQ(meta.allocs, cpu.allocs);
  EXPECT_EQ(meta.peak, cpu.peak);
  // two meta ranks through the local communicator
  std::atomic<int> calls{0};
  run_local_ranks({meta_device(0), meta_device(1)}, AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
    Tensor x = leaf(Tensor::empty({2, 3, 4, 4}, DType::f32, comm.device()));
    Tensor w = leaf(Tensor::ones({3}, DType::f32, comm.device())),
           b = leaf(Tensor::zeros({3}, DType::f32, comm.device()));
    Tensor rm = Tensor::zeros({3}, DType::f32, comm.device()), rv = Tensor::ones({3}, DType::f32, comm.device());
    AllReduceSumFn fn = [&](const Tensor& t) { ++calls; comm.all_reduce(t, ReduceOp::sum); };
    sync_batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, fn)
        .backward(Tensor::ones({2, 3, 4, 4}, DType::f32, comm.device()));
    EXPECT_EQ(comm.stats().calls.at("all_reduce"), 2);
  });
  EXPECT_EQ(calls.load(), 4);
}

// ---- errors ------------------------------------------------------------------------------
TEST(SyncBatchNorm, Errors) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  std::string e = error_of<ShapeError>([&] {
    sync_batch_norm(Tensor::zeros({2, 3, 4}), Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5, kIdentity);
  });
  EXPECT_TRUE(contains(e, "sync_batch_norm") && contains(e, "[N, C] or [N, C, H, W]") && contains(e, "[2, 3, 4]")) << e;
  e = error_of<ValueError>([&] {
    sync_batch_norm(Tensor::zeros({2, 3}), Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5, nullptr);
  });
  EXPECT_TRUE(contains(e, "all-reduce function")) << e;
  e = error_of<ShapeError>([&] {
    sync_batch_norm(Tensor::zeros({2, 3}), Tensor::ones({4}), Tensor(), rm, rv, true, 0.1, 1e-5, kIdentity);
  });
  EXPECT_TRUE(contains(e, "weight") && contains(e, "[4]") && contains(e, "expected [3]")) << e;
  e = error_of<DTypeError>([&] {
    sync_batch_norm(Tensor::zeros({2, 3}, DType::f64), Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5, kIdentity);
  });
  EXPECT_TRUE(contains(e, "running_mean") && contains(e, "float64")) << e;
  e = error_of<ValueError>([&] {
    sync_batch_norm(Tensor::zeros({1, 3}), Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5, kIdentity);
  });
  EXPECT_TRUE(contains(e, "more than 1 value per channel") && contains(e, "global count of 1")) << e;
  Tensor none;
  e = error_of<ValueError>([&] {
    sync_batch_norm(Tensor::zeros({2, 3}), Tensor(), Tensor(), rm, none, true, 0.1, 1e-5, kIdentity);
  });
  EXPECT_TRUE(contains(e, "both")) << e;
}

// ---- modules ----------------------------------------------------------------------------
TEST(SyncBatchNorm, ConvertResNetAndRefuseMlp) {
  ModelConfig cfg = default_model_config("resnet20");
  cfg.device = meta_device();
  nn::ModulePtr net = build_model("resnet20", cfg);
  const auto keys_before = net->state_dict();
  int64_t bns = 0;
  for (auto& [name, m] : net->named_modules()) bns += dynamic_cast<nn::BatchNorm2d*>(m) != nullptr;
  EXPECT_GE(bns, 19);
  EXPECT_EQ(convert_sync_batchnorm(*net, kIdentity), bns);
  for (auto& [name, m] : net->named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) {
      EXPECT_TRUE(static_cast<bool>(bn->sync_all_reduce)) << name;
      EXPECT_STREQ(bn->type_name(), "SyncBatchNorm") << name;
    }
  const auto keys_after = net->state_dict();
  ASSERT_EQ(keys_after.size(), keys_before.size());
  for (size_t i = 0; i < keys_after.size(); ++i) EXPECT_EQ(keys_after[i].first, keys_before[i].first);

  ModelConfig mcfg = default_model_config("mlp");
  mcfg.device = meta_device();
  nn::ModulePtr mlp = build_model("mlp", mcfg);
  const std::string e = error_of<ValueError>([&] { convert_sync_batchnorm(*mlp, kIdentity); });
  EXPECT_TRUE(contains(e, "SyncBatchNorm: the model has no BatchNorm2d layers to synchronise") &&
              contains(e, mlp->type_name()))
      << e;
  EXPECT_THROW(convert_sync_batchnorm(*net, nullptr), ValueError);
}

// A training BatchNorm2d with sync_all_reduce over 2 ranks = BatchNorm2d on the whole batch
// (also when its forward is checkpointed: the re-run communicates again, stats update once).
TEST(SyncBatchNorm, ModuleOverTwoRanksEqualsUnsyncedOnWholeBatch) {
  const int64_t C = 3, per = C * 3 * 3;
  const std::vector<int64_t> sizes{5, 3};
  const std::vector<double> xv = random_values(8 * per, -1, 2, 31), gv = random_values(8 * per, -1, 1, 32);
  const std::vector<double> wv = random_values(C, 0.5, 1.5, 33), bv = random_values(C, -1, 1, 34);
  auto make_bn = [&](Device dev) {
    auto bn = std::make_shared<nn::BatchNorm2d>(C, 1e-5, 0.1, nn::LayerOptions{dev, DType::f64});
    bn->weight.copy_(Tensor::from_vector(wv, {C}, DType::f64));
    bn->bias.copy_(Tensor::from_vector(bv, {C}, DType::f64));
    return bn;
  };
  auto ref = make_bn(cpu_device());
  Tensor x = leaf(Tensor::from_vector(xv, {8, C, 3, 3}, DType::f64));
  Tensor want = (*ref)(x);
  want.backward(Tensor::from_vector(gv, {8, C, 3, 3}, DType::f64));
  EXPECT_STREQ(ref->type_name(), "BatchNorm2d");

  for (bool use_checkpoint : {false, true}) {
    std::vector<std::vector<double>> y(2), dx(2), rm(2), rv(2);
    std::vector<int64_t> calls(2, 0), tracked(2, -1);
    run_local_ranks(cpus(2), AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
      const int r = comm.rank();
      const int64_t begin = r == 0 ? 0 : sizes[0];
      auto bn = make_bn(comm.device());
      AllReduceSumFn fn = all_reduce_sum_fn(comm);
      EXPECT_EQ(convert_sync_batchnorm(*bn, [&, fn](const Tensor& t) { ++calls[size_t(r)]; fn(t); }), 1);
      Tensor xr = leaf(Tensor::from_vector(slice(xv, begin, sizes[size_t(r)], per), {sizes[size_t(r)], C, 3, 3},
                                           DType::f64, comm.device()));
      Tensor yr = use_checkpoint ? checkpoint([&](const Tensor& t) { return (*bn)(t); }, xr) : (*bn)(xr);
      yr.backward(Tensor::from_vector(slice(gv, begin, sizes[size_t(r)], per), {sizes[size_t(r)], C, 3, 3},
                                      DType::f64, comm.device()));
      y[size_t(r)] = yr.to_vector();
      dx[size_t(r)] = xr.grad().to_vector();
      rm[size_t(r)] = bn->running_mean.to_vector();
      rv[size_t(r)] = bn->running_var.to_vector();
      tracked[size_t(r)] = bn->num_batches_tracked.to_vector_i64()[0];
    });
    std::vector<double> ys = y[0], dxs = dx[0];
    ys.insert(ys.end(), y[1].begin(), y[1].end());
    dxs.insert(dxs.end(), dx[1].begin(), dx[1].end());
    EXPECT_LE(max_abs_diff(ys, want.to_vector()), 1e-12) << "checkpoint " << use_checkpoint;
    EXPECT_LE(max_abs_diff(dxs, x.grad().to_vector()), 1e-12) << "checkpoint " << use_checkpoint;
    for (int r = 0; r < 2; ++r) {
      EXPECT_LE(max_abs_diff(rm[size_t(r)], ref->running_mean.to_vector()), 1e-12);
      EXPECT_LE(max_abs_diff(rv[size_t(r)], ref->running_var.to_vector()), 1e-12);
      EXPECT_EQ(tracked[size_t(r)], 1);
      EXPECT_EQ(calls[size_t(r)], use_checkpoint ? 3 : 2) << "rank " << r;
    }
  }
}
