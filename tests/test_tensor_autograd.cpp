// test_tensor_autograd.cpp — Tensor basics, views, autograd engine semantics.
// ctest tier: unit
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <pthread.h>

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

namespace {
float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
}  // namespace

// float16: exact encodings (IEEE 754 binary16) of normals, ties to even, the subnormal
// range and its rounding, overflow, signed zero, infinities and NaN; every one of the 65536
// half values decodes exactly and encodes back to itself.
TEST(Tensor, HalfConversionEncodesIeeeBinary16) {
  const std::pair<float, uint16_t> cases[] = {
      {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3C00}, {-2.5f, 0xC100}, {0.1f, 0x2E66},
      {65504.0f, 0x7BFF},                                  // largest finite
      {65519.996f, 0x7BFF}, {65520.0f, 0x7C00},             // halfway to 65536 rounds to even: inf
      {1e6f, 0x7C00}, {-1e6f, 0xFC00}, {INFINITY, 0x7C00}, {-INFINITY, 0xFC00},
      {0x1p-14f, 0x0400},                                  // smallest normal
      {0x3FFp-24f, 0x03FF}, {0x1p-24f, 0x0001},            // largest / smallest subnormal
      {0x1p-25f, 0x0000},                                  // halfway between 0 and 2^-24: to even (0)
      {0x1.8p-25f, 0x0001},                                // above halfway
      {0x3p-25f, 0x0002},                                  // 1.5 ulp: halfway between 1 and 2, to even (2)
      {0x5p-25f, 0x0002},                                  // 2.5 ulp: to even (2)
      {1.0f + 0x1p-11f, 0x3C00},                           // halfway, even mantissa below: down
      {1.0f + 0x3p-11f, 0x3C02},                           // halfway, odd mantissa below: up
      {1.0f + 0x1.8p-11f, 0x3C01},                         // above halfway: up
      {0x1p-30f, 0x0000}, {-0x1p-30f, 0x8000}};            // underflow keeps the sign
  for (const auto& [f, h] : cases) {
    EXPECT_EQ(float_to_half(f), h) << f;
  }
  const uint16_t nan = float_to_half(NAN);
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(half_to_float(nan)));
  EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);   // subnormals decode exactly
  EXPECT_EQ(half_to_float(0x03FF), 0x3FFp-24f);
  EXPECT_EQ(bits_of(half_to_float(0x8000)), 0x80000000u);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(uint16_t(h));
    if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(float_to_half(f) & 0x7C00, 0x7C00);
      continue;
    }
    ASSERT_EQ(float_to_half(f), h) << "half 0x" << std::hex << h;
  }
}

// bfloat16: the upper 16 bits of a float, rounded to nearest even; subnormals (including
// float subnormals, handled on the bits) and every one of the 65536 values round-trip.
TEST(Tensor, BFloat16ConversionRoundsToNearestEven) {
  const std::pair<float, uint16_t> cases[] = {
      {1.0f, 0x3F80}, {-2.0f, 0xC000}, {0.1f, 0x3DCD},
      {1.0f + 0x1p-8f, 0x3F80},                              // halfway, even below: down
      {1.0f + 0x3p-8f, 0x3F82},                              // halfway, odd below: up
      {1.0f + 0x1.8p-8f, 0x3F81},                            // above halfway: up
      {from_bits(0x7F7FFFFFu), 0x7F80},                     // FLT_MAX rounds up to inf
      {from_bits(0x7F7F7FFFu), 0x7F7F},                     // just below halfway: largest finite
      {INFINITY, 0x7F80}, {-INFINITY, 0xFF80}, {-0.0f, 0x8000},
      {from_bits(0x00080000u), 0x0008},                     // a float subnormal (2^-130)
      {from_bits(0x00008000u), 0x0000},                     // halfway to the smallest bf16: to even
      {from_bits(0x00018000u), 0x0002}};                    // 1.5 units: to even (2)
  for (const auto& [f, b] : cases) {
    EXPECT_EQ(float_to_bf16(f), b) << "float bits 0x" << std::hex << bits_of(f);
  }
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_TRUE(
      std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7F800001u)))));  // a NaN that truncation would make inf
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    if ((b & 0x7F80) == 0x7F80 && (b & 0x007F)) continue;   // NaN payloads: checked above
    ASSERT_EQ(float_to_bf16(f), b) << "bf16 0x" << std::hex << b;
  }
  // Through tensors (the copy kernels use the same conversions).
  Tensor t = Tensor::from_vector({1.0 + 0x1p-8, 1.0 + 0x3p-8, 65520.0}, {3}, DType::f32);
  EXPECT_EQ(t.to(DType::bf16).to(DType::f64).to_vector(), (std::vector<double>{1.0, 1.0 + 0x1p-6, 65536.0}));
  EXPECT_EQ(t.to(DType::f16).to(DType::f64).to_vector(), (std::vector<double>{1.0 + 0x1p-8, 1.0 + 0x3p-8, INFINITY}));
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
// that saved them (t3 = t2*a is not saved: sum's backward needs only the shape). After backward only y and a.grad
// remain; t2 (saved by the third mul, which runs first) is freed before t1, with the second mul's gradient allocated in
// between (a release at the end of backward would free both back to back).
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

namespace {
// Runs fn on a thread with a 1 MiB stack: a recursion per graph node overflows it within a
// few thousand nodes, so a deep graph's deletion shows whether it is iterative.
void on_small_stack(void (*fn)()) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1 << 20);
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, &attr, [](void* f) -> void* { reinterpret_cast<void (*)()>(f)(); return nullptr; },
                           reinterpret_cast<void*>(fn)), 0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
}
}  // namespace

TEST(Autograd, DeepGraphIsFreedAndWalkedWithABoundedStack) {
  reset_allocators();
  static int64_t before, after_drop, after_backward;
  static double grad = 0;
  on_small_stack([] {
    CachingAllocator& al = allocator_for(cpu_device());
    before = al.stat("allocated_bytes.all.current");
    Tensor a = Tensor::from_vector({1.0}, {1}, DType::f64);
    a.set_requires_grad(true);
    {
      Tensor x = a;   // 100000 nodes; each closure saves its input, whose grad_fn is the previous node
      for (int i = 0; i < 100000; ++i) x = mul(x, Tensor::from_vector({1.0}, {1}, DType::f64));
    }                 // the whole graph goes here
    after_drop = al.stat("allocated_bytes.all.current");
    Tensor y = a;
    for (int i = 0; i < 100000; ++i) y = scale(y, 1.0);
    sum_all(y).backward();
    y = Tensor();
    grad = a.grad().to_vector()[0];
    a.zero_grad();
    after_backward = al.stat("allocated_bytes.all.current");
  });
  EXPECT_EQ(after_drop, before + 512) << "only a's block";
  EXPECT_EQ(after_backward, before + 512);
  EXPECT_EQ(grad, 1.0);
}
