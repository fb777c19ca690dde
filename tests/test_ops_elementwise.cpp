// test_ops_elementwise.cpp — float64 gradchecks for the elementwise family (add, sub,
// mul, scale, add_scalar, add_, sum, mean) and their errors (shape / dtype mismatches
// naming the op, with the view ops' shape errors alongside). View gradchecks:
// test_ops_view.cpp.
// ctest tier: ops
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/elementwise.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(ElementwiseGrad, BinaryOps) {
  Tensor a = leaf(random_f64({2, 3}, -1, 1, 1)), b = leaf(random_f64({2, 3}, -1, 1, 2));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return add(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return sub(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return mul(in[0], in[0]); }, {a}));
}

TEST(ElementwiseGrad, ScalarOpsAndReductions) {
  Tensor a = leaf(random_f64({4, 5}, -1, 1, 3));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return scale(in[0], -2.5); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return add_scalar(in[0], 3.0); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return sum_all(in[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return mean_all(in[0]); }, {a}));
}

TEST(ElementwiseGrad, InPlaceAdd) {
  Tensor a = leaf(random_f64({3, 4}, -1, 1, 4)), b = leaf(random_f64({3, 4}, -1, 1, 5));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor h = scale(in[0], 2.0);
        add_(h, in[1]);
        return mul(h, in[0]);
      },
      {a, b}));
}

TEST(ElementwiseErrors, ShapeAndDtypeMismatchNameTheOp) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2}), c = Tensor::zeros({2, 3}, DType::f64);
  try {
    add(a, b);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("add: shapes [2, 3] and [3, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mul(a, c), DTypeError);
  EXPECT_THROW(a.reshape({7}), ShapeError);
  EXPECT_THROW(a.narrow(1, 2, 5), ShapeError);
  EXPECT_THROW(a.permute({0, 0}), ShapeError);
}

// add_scalar_inplace (no autograd): in place on the device, int64 included (BatchNorm's
// num_batches_tracked counts with it), version bumped, no allocation.
TEST(ElementwiseInPlace, AddScalarInPlaceFloatAndInt64) {
  Tensor f = Tensor::from_vector({1.5, -2.0}, {2}, DType::f32);
  const uint64_t v = f.version();
  add_scalar_inplace(f, 0.25);
  EXPECT_EQ(f.to_vector(), (std::vector<double>{1.75, -1.75}));
  EXPECT_EQ(f.version(), v + 1);
  Tensor n = Tensor::from_vector_i64({41, (int64_t(1) << 60) + 1}, {2});
  const int64_t allocated = allocator_for(cpu_device()).stat("allocated_bytes.all.current");
  add_scalar_inplace(n, 1.0);
  EXPECT_EQ(n.to_vector_i64(), (std::vector<int64_t>{42, (int64_t(1) << 60) + 2}));   // exact past 2^53
  EXPECT_EQ(allocator_for(cpu_device()).stat("allocated_bytes.all.current"), allocated);
  Tensor m = Tensor::empty({3}, DType::i64, meta_device());
  EXPECT_NO_THROW(add_scalar_inplace(m, 1.0));   // meta: nothing to compute
}
