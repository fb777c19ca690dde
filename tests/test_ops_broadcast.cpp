// test_ops_broadcast.cpp — the broadcast family (engine/ops/broadcast.h) and the pointwise
// ops the model importer needs (pow_scalar; silu / hardswish / hardsigmoid in
// test_ops_activation.cpp): float64 gradchecks over the broadcasting patterns real models
// have (per-channel scale, layer scale, position embedding, outer products), values against
// explicit loops, expand as a view that allocates nothing, what backward saves and
// allocates, 16-bit kernels against float32, and shape errors naming the op.
// ctest tier: ops
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/broadcast.h"
#include "engine/ops/elementwise.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
using In = std::vector<Tensor>;
struct Case { const char* name; Shape a, b; };
const Case kCases[] = {
    {"per_channel", {2, 3, 4, 4}, {2, 3, 1, 1}},   // squeeze-excitation scale
    {"layer_scale", {3, 1, 1}, {2, 3, 2, 2}},      // ConvNeXt's gamma * x
    {"row", {2, 5, 4}, {1, 5, 4}},                 // a position embedding
    {"outer", {4, 1}, {1, 3}},
    {"lower_rank", {2, 3, 4}, {4}},
    {"scalar_tensor", {3, 4}, {}},
};
}  // namespace

TEST(BroadcastGrad, EveryOpOverEveryPattern) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    Tensor a = leaf(random_f64(c.a, -1, 1, 1)), b = leaf(random_f64(c.b, 0.5, 1.5, 2));
    EXPECT_TRUE(gradcheck([](const In& in) { return add(in[0], in[1]); }, {a, b}));
    EXPECT_TRUE(gradcheck([](const In& in) { return sub(in[0], in[1]); }, {a, b}));
    EXPECT_TRUE(gradcheck([](const In& in) { return mul(in[0], in[1]); }, {a, b}));
    EXPECT_TRUE(gradcheck([](const In& in) { return div(in[0], in[1]); }, {a, b}));
    EXPECT_TRUE(gradcheck([](const In& in) { return div(in[1], in[0]); }, {b, leaf(random_f64(c.a, 0.5, 1.5, 3))}));
  }
}

TEST(BroadcastGrad, SumToExpandAndPow) {
  Tensor x = leaf(random_f64({2, 3, 4}, -1, 1, 4));
  EXPECT_TRUE(gradcheck([](const In& in) { return sum_to(in[0], {3, 1}); }, {x}));
  EXPECT_TRUE(gradcheck([](const In& in) { return sum_to(in[0], {4}); }, {x}));
  Tensor s = leaf(random_f64({1, 3, 1}, -1, 1, 5));
  EXPECT_TRUE(gradcheck([](const In& in) { return expand(in[0], {2, -1, 4}).contiguous(); }, {s}));
  EXPECT_TRUE(gradcheck([](const In& in) { return pow_scalar(in[0], 3.0); }, {x}));
  EXPECT_TRUE(gradcheck([](const In& in) { return pow_scalar(in[0], 2.5); }, {leaf(random_f64({5}, 0.5, 2, 6))}));
  EXPECT_TRUE(gradcheck([](const In& in) { return pow_scalar(in[0], 0.0); }, {x}));
}

TEST(BroadcastValues, MatchExplicitLoops) {
  Tensor a = random_f64({2, 3, 2}, -1, 1, 7), b = random_f64({3, 1}, 0.5, 1.5, 8);
  const std::vector<double> av = a.to_vector(), bv = b.to_vector();
  const std::vector<double> m = mul(a, b).to_vector(), d = div(b, a).to_vector(), s = sum_to(a, {3, 1}).to_vector();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) {
        EXPECT_EQ(m[size_t(i * 6 + j * 2 + k)], av[size_t(i * 6 + j * 2 + k)] * bv[size_t(j)]);
        EXPECT_EQ(d[size_t(i * 6 + j * 2 + k)], bv[size_t(j)] / av[size_t(i * 6 + j * 2 + k)]);
      }
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR(s[size_t(j)], av[size_t(j * 2)] + av[size_t(j * 2 + 1)] + av[size_t(6 + j * 2)] + av[size_t(7 + j * 2)],
                1e-15);
  EXPECT_EQ(pow_scalar(Tensor::from_vector({-2.0, 3.0}, {2}, DType::f64), 3.0).to_vector(),
            (std::vector<double>{-8.0, 27.0}));
}

// expand is a view: no allocation, stride 0 on the broadcast dims; reading it copies.
TEST(BroadcastMemory, ExpandAllocatesNothingAndMulSavesOnlyWhatBackwardNeeds) {
  CachingAllocator& alloc = allocator_for(meta_device());
  Tensor t = Tensor::empty({1, 1, 768}, DType::f32, meta_device());
  const int64_t before = alloc.stat("allocated_bytes.all.current");
  Tensor e = expand(t, {32, 1, 768});
  EXPECT_EQ(alloc.stat("allocated_bytes.all.current"), before);
  EXPECT_EQ(e.strides(), (Shape{0, 768, 1}));
  EXPECT_FALSE(e.is_contiguous());
  // x (no grad) * gamma (grad): the node keeps x only; backward makes g * x at x's shape,
  // then gamma's gradient at gamma's shape.
  Tensor x = Tensor::empty({8, 96, 56, 56}, DType::f32, meta_device());
  Tensor gamma = Tensor::empty({96, 1, 1}, DType::f32, meta_device());
  gamma.set_requires_grad(true);
  const int64_t base = alloc.stat("allocated_bytes.all.current");
  Tensor y = mul(gamma, x);
  EXPECT_EQ(alloc.stat("allocated_bytes.all.current") - base, int64_t(x.nbytes()));   // y only: x was already alive
  alloc.reset_peak_stats();
  const int64_t pre = alloc.stat("allocated_bytes.all.current");
  y.backward(Tensor::empty(y.shape(), DType::f32, meta_device()));
  // g, g * x, then gamma's 384-byte gradient in a 512-byte block (the allocator's rounding)
  EXPECT_EQ(alloc.stat("allocated_bytes.all.peak") - pre, int64_t(2 * x.nbytes() + 512));
}

// float16 / bfloat16 run the float32 kernel on widened copies: equal to float32 rounded once.
TEST(BroadcastHalf, SixteenBitEqualsFloat32RoundedOnce) {
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor a = Tensor::uniform({4, 6, 3}, -2, 2, dt), b = Tensor::uniform({6, 1}, 0.5, 2, dt);
    const Tensor ref = div(a.to(DType::f32), b.to(DType::f32)).to(dt).to(DType::f32);
    EXPECT_EQ(div(a, b).to(DType::f32).to_vector(), ref.to_vector()) << dtype_name(dt);
    const Tensor sref = sum_to(a.to(DType::f32), {6, 1}).to(dt).to(DType::f32);
    EXPECT_EQ(sum_to(a, {6, 1}).to(DType::f32).to_vector(), sref.to_vector()) << dtype_name(dt);
  }
}

TEST(BroadcastErrors, NameTheOpAndBothShapes) {
  try {
    mul(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("mul: shapes [2, 3] and [4, 3] do not match and do not broadcast"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(expand(Tensor::zeros({2, 3}), {4, 3}), ShapeError);
  EXPECT_THROW(sum_to(Tensor::zeros({2, 3}), {4}), ShapeError);
  EXPECT_THROW(div(Tensor::zeros({2}), Tensor::zeros({2}, DType::f64)), DTypeError);
}
