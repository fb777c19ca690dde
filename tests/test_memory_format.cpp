// test_memory_format.cpp — channels_last (torch.channels_last) through the CPU ops of a CNN:
// the format's strides and checks, contiguous(format), empty_like / to() keeping it; conv2d,
// batch_norm, the pools, add / relu / add_relu_ equal to their NCHW results (pools and the
// elementwise ops bit for bit, conv and batch_norm within float32 rounding), outputs and
// gradients in channels_last, float64 gradchecks on channels_last inputs, results
// independent of the thread count, the gradient layout contract of leaves, and the meta
// device allocating the same bytes as NCHW.
// ctest tier: ops
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/activation.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/pool.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
constexpr MemoryFormat kCL = MemoryFormat::channels_last;

Tensor cl(const Tensor& t) { return t.contiguous(kCL); }

Tensor rand_t(const Shape& s, uint64_t seed, DType dt = DType::f32) { return random_f64(s, -1, 1, seed).to(dt); }

void expect_close(const Tensor& got, const Tensor& want, double rel, const char* what) {
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  ASSERT_EQ(g.size(), w.size()) << what;
  double scale = 1e-30;
  for (double v : w) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_LE(std::fabs(g[i] - w[i]), rel * scale) << what << " at " << i << ": " << g[i] << " vs " << w[i];
}

void expect_equal(const Tensor& got, const Tensor& want, const char* what) {
  EXPECT_EQ(got.to_vector(), want.to_vector()) << what;
}
}  // namespace

TEST(MemoryFormat, StridesChecksAndConversions) {
  EXPECT_EQ(format_strides({2, 3, 4, 5}, kCL), (Shape{60, 1, 15, 3}));
  EXPECT_THROW(format_strides({2, 3, 4}, kCL), ShapeError);
  Tensor x = rand_t({2, 3, 4, 5}, 1);
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_FALSE(x.is_contiguous(kCL));
  EXPECT_EQ(x.memory_format(), MemoryFormat::contiguous);
  Tensor y = cl(x);
  EXPECT_EQ(y.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(y.is_contiguous(kCL));
  EXPECT_FALSE(y.is_contiguous());
  EXPECT_TRUE(y.is_dense());
  EXPECT_EQ(y.memory_format(), kCL);
  EXPECT_EQ(y.to_vector(), x.to_vector());   // same logical values
  EXPECT_EQ(y.contiguous().to_vector(), x.to_vector());
  EXPECT_EQ(y.contiguous(kCL).impl(), y.impl());   // already so: no copy
  // memory order is NHWC: element (n=0, c=1, h=0, w=0) sits second
  EXPECT_EQ(y.data<float>()[1], x.data<float>()[20]);
  // empty_like, zeros_like and to() keep the format; a permuted view is not dense
  EXPECT_EQ(empty_like(y).strides(), y.strides());
  EXPECT_EQ(zeros_like(y).strides(), y.strides());
  EXPECT_EQ(y.to(DType::f64).strides(), y.strides());
  EXPECT_EQ(y.to(DType::f64).to_vector(), x.to(DType::f64).to_vector());
  EXPECT_FALSE(x.transpose(2, 3).is_dense());
  // size-1 channels or planes: both formats at once, reported as contiguous
  Tensor one = cl(rand_t({2, 5, 1, 1}, 2));
  EXPECT_TRUE(one.is_contiguous());
  EXPECT_EQ(one.memory_format(), MemoryFormat::contiguous);
  // torch's to(memory_format=...): size-1 dimensions restrided in place of a copy, and then
  // judged channels_last by the strides' order (is_channels_last_strides_2d)
  for (const Shape& shape : {Shape{2, 1, 4, 5}, Shape{2, 5, 1, 1}}) {
    Tensor t = rand_t(shape, 3);
    Tensor v = to_memory_format(t, kCL);
    EXPECT_EQ(v.memory_format(), kCL) << shape_str(shape);
    EXPECT_EQ(v.storage().get(), t.storage().get()) << "a view, not a copy";
    EXPECT_EQ(v.to_vector(), t.to_vector());
    EXPECT_EQ(empty_like(v).strides(), v.strides());
  }
  EXPECT_EQ(Tensor::empty({3, 1, 1, 1}).memory_format(), MemoryFormat::contiguous);   // N111: NCHW by default
  // copy_ into a channels_last destination writes logical positions
  Tensor d = Tensor::empty_format({2, 3, 4, 5}, DType::f32, cpu_device(), kCL);
  d.copy_(x);
  EXPECT_EQ(d.to_vector(), x.to_vector());
}

TEST(MemoryFormat, ConvMatchesNchwForwardAndBackward) {
  struct Case { Shape x, w; Conv2dParams p; bool bias; };
  const std::vector<Case> cases = {
      {{2, 5, 9, 7}, {6, 5, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, true},
      {{2, 4, 9, 9}, {8, 4, 3, 3}, {2, 2, 1, 1, 1, 1, 1}, false},
      {{3, 8, 6, 5}, {4, 8, 1, 1}, {}, false},                     // pointwise
      {{2, 8, 7, 7}, {6, 8, 1, 1}, {2, 2, 0, 0, 1, 1, 1}, true},  // 1x1 stride 2 (ResNet shortcut)
      {{2, 6, 8, 8}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 2}, true},  // groups
      {{2, 8, 9, 7}, {8, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 8}, true},  // depthwise, stride 2
      {{2, 5, 6, 6}, {5, 1, 5, 5}, {1, 1, 2, 2, 1, 1, 5}, false},  // depthwise 5x5
      {{1, 3, 10, 10}, {5, 3, 3, 3}, {1, 1, 2, 2, 2, 2, 1}, false},  // dilation
      {{2, 3, 20, 20}, {4, 3, 7, 7}, {2, 2, 3, 3, 1, 1, 1}, false},  // the ResNet stem
  };
  for (const Case& c : cases) {
    Tensor x = leaf(rand_t(c.x, 3)), w = leaf(rand_t(c.w, 4));
    Tensor b = c.bias ? leaf(rand_t({c.w[0]}, 5)) : Tensor();
    Tensor xc = leaf(cl(x.detach())), wc = leaf(cl(w.detach()));
    Tensor bc = c.bias ? leaf(b.detach().clone()) : Tensor();
    Tensor y = conv2d(x, w, b, c.p), yc = conv2d(xc, wc, bc, c.p);
    EXPECT_EQ(yc.memory_format(), y.size(2) * y.size(3) > 1 ? kCL : MemoryFormat::contiguous);
    expect_close(yc, y, 1e-5, "conv forward");
    Tensor g = rand_t(y.shape(), 6);
    y.backward(g);
    yc.backward(cl(g));
    expect_close(xc.grad(), x.grad(), 1e-5, "conv dx");
    expect_close(wc.grad(), w.grad(), 1e-5, "conv dw");
    EXPECT_TRUE(xc.grad().is_contiguous(kCL));
    EXPECT_TRUE(wc.grad().is_contiguous(kCL));
    if (c.bias) expect_close(bc.grad(), b.grad(), 1e-5, "conv db");
  }
}

TEST(MemoryFormat, ChannelsLastOpsDoNotDependOnTheThreadCount) {
  // conv (3x3, 1x1, depthwise), batch_norm and the pools in channels_last, forward and
  // backward: bit-identical with 1 and 3 threads (the kernels' work splits follow the shapes)
  auto run = [](int threads) {
    const int prev = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor x = leaf(cl(rand_t({4, 16, 12, 12}, 30)));
    Tensor w3 = leaf(cl(rand_t({32, 16, 3, 3}, 31))), w1 = leaf(cl(rand_t({16, 32, 1, 1}, 32)));
    Tensor wd = leaf(cl(rand_t({16, 1, 3, 3}, 33)));
    Tensor rm = Tensor::zeros({32}), rv = Tensor::ones({32});
    Tensor h =
        relu(batch_norm(conv2d(x, w3, Tensor(), {1, 1, 1, 1, 1, 1, 1}), Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5));
    Tensor y = max_pool2d(conv2d(conv2d(h, w1, Tensor(), {}), wd, Tensor(), {1, 1, 1, 1, 1, 1, 16}), {2, 2, 2, 2});
    y.backward(cl(rand_t(y.shape(), 34)));
    std::vector<std::vector<double>> out = {y.to_vector(), x.grad().to_vector(), w3.grad().to_vector(),
                                            w1.grad().to_vector(), wd.grad().to_vector()};
    omp_set_num_threads(prev);
    return out;
  };
  EXPECT_EQ(run(1), run(3));
}

TEST(MemoryFormat, ChannelsLastWeightMakesTheConvChannelsLastAndLeafGradsKeepTheirLayout) {
  // torch's rule: either operand in channels_last runs the conv so; each leaf's gradient has
  // the leaf's own layout (AccumulateGrad's contract).
  Tensor x = leaf(rand_t({2, 3, 6, 6}, 7)), w = leaf(cl(rand_t({4, 3, 3, 3}, 8)));
  Tensor y = conv2d(x, w, Tensor(), {1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(y.memory_format(), kCL);
  y.backward(rand_t(y.shape(), 9));
  EXPECT_TRUE(x.grad().is_contiguous());
  EXPECT_TRUE(w.grad().is_contiguous(kCL));
}

TEST(MemoryFormat, ConvGradcheckFloat64) {
  const Conv2dParams p{2, 1, 1, 0, 1, 1, 2};
  std::vector<Tensor> in = {leaf(cl(random_f64({2, 4, 5, 4}, -1, 1, 10))),
                            leaf(cl(random_f64({6, 2, 3, 2}, -1, 1, 11))), leaf(random_f64({6}, -1, 1, 12))};
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], p); }, in));
  const Conv2dParams dw{1, 2, 1, 1, 1, 1, 3};   // depthwise
  std::vector<Tensor> in2 = {leaf(cl(random_f64({2, 3, 5, 6}, -1, 1, 13))),
                             leaf(cl(random_f64({3, 1, 3, 3}, -1, 1, 14)))};
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], Tensor(), dw); }, in2));
}

TEST(MemoryFormat, BatchNormMatchesNchwAndKeepsTheFormat) {
  for (bool relu : {false, true}) {
    Tensor x = leaf(rand_t({4, 6, 5, 3}, 13)), xc = leaf(cl(x.detach()));
    Tensor w = leaf(rand_t({6}, 14)), b = leaf(rand_t({6}, 15));
    Tensor wc = leaf(w.detach().clone()), bcl = leaf(b.detach().clone());
    Tensor rm = Tensor::zeros({6}), rv = Tensor::ones({6}), rmc = Tensor::zeros({6}), rvc = Tensor::ones({6});
    auto bn = relu ? batch_norm_relu : batch_norm;
    Tensor y = bn(x, w, b, rm, rv, true, 0.1, 1e-5), yc = bn(xc, wc, bcl, rmc, rvc, true, 0.1, 1e-5);
    EXPECT_EQ(yc.memory_format(), kCL);
    expect_close(yc, y, 1e-5, "bn forward");
    expect_close(rmc, rm, 1e-6, "running mean");
    expect_close(rvc, rv, 1e-6, "running var");
    Tensor g = rand_t(y.shape(), 16);
    y.backward(g);
    yc.backward(g);   // an NCHW gradient into a channels_last op: laid out on the way in
    EXPECT_TRUE(xc.grad().is_contiguous(kCL));
    expect_close(xc.grad(), x.grad(), 1e-5, "bn dx");
    expect_close(wc.grad(), w.grad(), 1e-5, "bn dweight");
    expect_close(bcl.grad(), b.grad(), 1e-5, "bn dbias");
    // eval mode reads the running statistics
    expect_close(bn(xc.detach(), w.detach(), b.detach(), rmc, rvc, false, 0.1, 1e-5),
                 bn(x.detach(), w.detach(), b.detach(), rm, rv, false, 0.1, 1e-5), 1e-6, "bn eval");
  }
  Tensor rm = Tensor::zeros({3}, DType::f64), rv = Tensor::ones({3}, DType::f64);
  std::vector<Tensor> in = {leaf(cl(random_f64({3, 3, 2, 3}, -1, 1, 17))), leaf(random_f64({3}, 0.5, 1.5, 18)),
                            leaf(random_f64({3}, -1, 1, 19))};
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& t) { return batch_norm(t[0], t[1], t[2], rm, rv, true, 0.1, 1e-5); }, in));
}

TEST(MemoryFormat, PoolsAreBitIdenticalToNchw) {
  struct Case { const char* op; Shape x; Pool2dParams p; };
  const std::vector<Case> cases = {{"max", {2, 5, 9, 8}, {3, 3, 2, 2, 1, 1}}, {"max", {1, 3, 4, 4}, {2, 2, 2, 2}},
                                   {"avg", {2, 4, 7, 6}, {3, 3, 2, 2, 1, 1}}, {"adaptive", {2, 6, 7, 5}, {}}};
  for (const Case& c : cases) {
    auto run = [&](const Tensor& t) {
      const std::string op = c.op;
      return op == "max" ? max_pool2d(t, c.p) : op == "avg" ? avg_pool2d(t, c.p) : adaptive_avg_pool2d(t, 3, 2);
    };
    Tensor x = rand_t(c.x, 20);
    x.data<float>()[7] = x.data<float>()[8];   // a tie: the first maximum wins in both layouts
    Tensor xl = leaf(x.clone()), xc = leaf(cl(x));
    Tensor y = run(xl), yc = run(xc);
    EXPECT_EQ(yc.memory_format(), kCL) << c.op;
    expect_equal(yc, y, c.op);
    Tensor g = rand_t(y.shape(), 21);
    y.backward(g);
    yc.backward(cl(g));
    EXPECT_TRUE(xc.grad().is_contiguous(kCL)) << c.op;
    expect_equal(xc.grad(), xl.grad(), c.op);
  }
  std::vector<Tensor> in = {leaf(cl(random_f64({2, 3, 5, 4}, -1, 1, 22)))};
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], {3, 3, 2, 2, 1, 1}); }, in));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return max_pool2d(t[0], {2, 2, 1, 1}); }, in));
}

TEST(MemoryFormat, ElementwiseOpsKeepTheFormat) {
  Tensor a = rand_t({2, 3, 4, 5}, 23), b = rand_t({2, 3, 4, 5}, 24);
  Tensor ac = cl(a), bc = cl(b);
  Tensor s = add(ac, bc);
  EXPECT_EQ(s.memory_format(), kCL);
  expect_equal(s, add(a, b), "add");
  expect_equal(add(ac, b), add(a, b), "add, mixed formats");
  Tensor r = relu(ac);
  EXPECT_EQ(r.memory_format(), kCL);
  expect_equal(r, relu(a), "relu");
  Tensor t = ac.clone().contiguous(kCL);
  add_relu_(t, bc);
  EXPECT_EQ(t.memory_format(), kCL);
  Tensor u = a.clone();
  add_relu_(u, b);
  expect_equal(t, u, "add_relu_");
  // backward through a residual add of two channels_last branches stays channels_last
  Tensor x = leaf(cl(a));
  relu(add(x, mul(x, x))).backward(rand_t(a.shape(), 25));
  EXPECT_TRUE(x.grad().is_contiguous(kCL));
  Tensor xn = leaf(a.clone());
  relu(add(xn, mul(xn, xn))).backward(rand_t(a.shape(), 25));
  expect_equal(x.grad(), xn.grad(), "residual backward");
}

TEST(MemoryFormat, MetaAllocatesTheSameBytesAsNchw) {
  auto trace = [](bool channels_last) {
    Device meta = meta_device();
    CachingAllocator& alloc = allocator_for(meta);
    alloc.empty_cache();
    Tensor x = Tensor::empty({8, 16, 32, 32}, DType::f32, meta), w = Tensor::empty({32, 16, 3, 3}, DType::f32, meta);
    if (channels_last) { x = x.contiguous(kCL); w = w.contiguous(kCL); }
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    Tensor rm = Tensor::zeros({32}, DType::f32, meta), rv = Tensor::ones({32}, DType::f32, meta);
    alloc.reset_peak_stats();
    alloc.reset_accumulated_stats();
    {
      Tensor y = max_pool2d(relu(batch_norm(conv2d(x, w, Tensor(), {1, 1, 1, 1, 1, 1, 1}), Tensor(), Tensor(), rm, rv,
                                            true, 0.1, 1e-5)),
                            {2, 2, 2, 2});
      Tensor g = empty_like(y);   // the gradient in y's layout (as a loss's would be)
      g.fill_(1.0);
      y.backward(g);
    }
    return std::vector<int64_t>{alloc.stat("allocated_bytes.all.peak"), alloc.stat("allocation.all.allocated"),
                                alloc.stat("allocated_bytes.all.allocated")};
  };
  EXPECT_EQ(trace(true), trace(false));
}
