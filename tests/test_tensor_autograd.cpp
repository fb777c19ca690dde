// test_tensor_autograd.cpp — Tensor basics, views, autograd engine semantics.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/elementwise.h"

using namespace oomlab;

TEST(Tensor, FactoriesAndViews) {
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_TRUE(t.is_contiguous());
  Tensor tt = t.transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.contiguous().to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(t.reshape({3, -1}).shape(), (Shape{3, 2}));
  EXPECT_EQ(t.narrow(0, 1, 1).to_vector(), (std::vector<double>{4, 5, 6}));
  EXPECT_THROW(t.reshape({4, 2}), ShapeError);
  EXPECT_EQ(t.to(DType::f16).to(DType::f32).to_vector(), t.to_vector());
  EXPECT_EQ(t.to(DType::bf16).to(DType::f64).to_vector(), t.to_vector());
}

TEST(Tensor, HalfConversionRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.96e-08f, 1e-3f})
    EXPECT_FLOAT_EQ(half_to_float(float_to_half(f)), half_to_float(float_to_half(half_to_float(float_to_half(f)))));
  EXPECT_EQ(half_to_float(float_to_half(1e6f)), INFINITY);
  EXPECT_FLOAT_EQ(half_to_float(float_to_half(0.1f)), 0.0999755859375f);
}

TEST(Autograd, ChainAndAccumulate) {
  Tensor a = Tensor::from_vector({1, 2, 3}, {3}, DType::f64);
  a.set_requires_grad(true);
  Tensor b = Tensor::from_vector({4, 5, 6}, {3}, DType::f64);
  b.set_requires_grad(true);
  Tensor y = sum_all(mul(add(a, b), a));   // sum((a+b)*a) -> d/da = 2a+b, d/db = a
  y.backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{6, 9, 12}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{1, 2, 3}));
  // second backward through a fresh graph accumulates with +=
  sum_all(a).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{7, 10, 13}));
  EXPECT_THROW(y.backward(), AutogradError);
}

TEST(Autograd, NoGradAndVersionCheck) {
  Tensor a = Tensor::from_vector({1, 2}, {2}, DType::f64);
  a.set_requires_grad(true);
  {
    NoGradGuard g;
    EXPECT_FALSE(mul(a, a).requires_grad());
  }
  Tensor h = scale(a, 1.0);
  Tensor y = sum_all(mul(h, h));
  Tensor hd = h.detach();
  add_inplace(hd, hd);   // modify a saved tensor in place
  try {
    y.backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an inplace operation"), std::string::npos);
  }
}

TEST(Autograd, GradReadyHookFiresOnceWithFinalGrad) {
  Tensor w = Tensor::from_vector({1, 1}, {2}, DType::f64);
  w.set_requires_grad(true);
  int calls = 0;
  std::vector<double> seen;
  w.register_grad_ready_hook([&](Tensor& g) { ++calls; seen = g.to_vector(); });
  Tensor y = sum_all(add(mul(w, w), w));    // two uses of w
  y.backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<double>{3, 3}));
}

// Each node releases its saved tensors as soon as it has run, while the graph itself is
// still alive (y is held): t1 = a*a and t2 = t1*a are held only by the nodes of the muls
// that saved them (t3 = t2*a is not saved: sum's backward needs only the shape). After backward only y and a.grad remain; t2 (saved by the
// third mul, which runs first) is freed before t1, with the second mul's gradient
// allocated in between (a release at the end of backward would free both back to back).
TEST(Autograd, SavedTensorsFreedAsEachNodeRuns) {
  reset_allocators();
  CachingAllocator& al = allocator_for(cpu_device());
  Tensor a = Tensor::uniform({1024}, -1, 1, DType::f32);
  a.set_requires_grad(true);
  const int64_t base = al.stat("allocated_bytes.all.current");
  Tensor t1 = mul(a, a);
  Tensor t2 = mul(t1, a);
  const uint64_t addr1 = reinterpret_cast<uint64_t>(t1.raw_data()), addr2 = reinterpret_cast<uint64_t>(t2.raw_data());
  Tensor y = sum_all(mul(t2, a));
  t1 = Tensor();
  t2 = Tensor();
  EXPECT_EQ(al.stat("allocated_bytes.all.current"), base + 2 * 4096 + 512);   // t1, t2 in the graph; y
  al.record_history(true);
  y.backward();
  al.record_history(false);
  EXPECT_EQ(al.stat("allocated_bytes.all.current"), base + 512 + 4096) << "only y (one 512 B block) and a.grad";
  std::vector<TraceEvent> tr = al.trace();
  auto index_of_free = [&](uint64_t addr) {
    for (size_t i = 0; i < tr.size(); ++i)
      if (tr[i].action == "free_completed" && tr[i].addr == addr) return int64_t(i);
    return int64_t(-1);
  };
  const int64_t f2 = index_of_free(addr2), f1 = index_of_free(addr1);
  ASSERT_GE(f2, 0) << "t2 not freed during backward";
  ASSERT_GE(f1, 0) << "t1 not freed during backward";
  EXPECT_LT(f2, f1);
  EXPECT_TRUE(std::any_of(tr.begin() + f2, tr.begin() + f1, [](const TraceEvent& e) { return e.action == "alloc"; }))
      << "t1 and t2 were released together, not as their nodes ran";
  y = Tensor();
  a.zero_grad();
  EXPECT_EQ(al.stat("allocated_bytes.all.current"), base);
}

TEST(Autograd, SecondBackwardThroughReleasedGraphFails) {
  Tensor a = Tensor::from_vector({1, 2}, {2}, DType::f64);
  a.set_requires_grad(true);
  Tensor y = sum_all(mul(a, a));
  y.backward();
  try {
    y.backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("a second time"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{2, 4}));   // the first backward only
}

TEST(Autograd, InPlaceAddRebasesHistory) {
  Tensor a = Tensor::from_vector({1, 2, 3}, {3}, DType::f64);
  a.set_requires_grad(true);
  Tensor b = Tensor::from_vector({4, 5, 6}, {3}, DType::f64);
  b.set_requires_grad(true);
  Tensor h = mul(a, a);          // saves a; h is not saved by anyone
  uint64_t v = h.version();
  add_(h, b);                    // h = a*a + b
  EXPECT_EQ(h.version(), v + 1);
  sum_all(mul(h, b)).backward();  // d/da = 2a*b, d/db = a*a + 2b
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{8, 20, 36}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{9, 14, 21}));
  EXPECT_THROW(add_(a, b), AutogradError);   // leaf requiring grad
}
