// test_ops_linear.cpp — matmul, linear, bmm: float64 gradchecks (transposed operands,
// leading dims, bias or not, a transposed output gradient for bmm), values against hand-
// computed or naive references, the CPU GEMM's linear extras against the separate bias
// kernels bit for bit, and shape errors naming both shapes. Linear / conv shape
// errors and meta-device peaks: test_ops_cross_family.cpp.
// ctest tier: ops
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/linear.h"
#include "kernels/linear.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(Matmul, GradcheckAndValues) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({1, 0, 0, 1, 1, 1}, {3, 2});
  EXPECT_EQ(matmul(a, b).to_vector(), (std::vector<double>{4, 5, 10, 11}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); },
                        {leaf(random_f64({3, 4}, -1, 1, 1)), leaf(random_f64({4, 5}, -1, 1, 2))}));
  // transposed (non-contiguous) operand
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& v) { return matmul(v[0].transpose(0, 1), v[1]); },
                        {leaf(random_f64({4, 3}, -1, 1, 3)), leaf(random_f64({4, 2}, -1, 1, 4))}));
}

TEST(Linear, Gradcheck) {
  auto with_bias = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); };
  auto no_bias = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], Tensor()); };
  EXPECT_TRUE(gradcheck(with_bias, {leaf(random_f64({3, 4}, -1, 1, 5)), leaf(random_f64({2, 4}, -1, 1, 6)),
                                    leaf(random_f64({2}, -1, 1, 7))}));
  EXPECT_TRUE(gradcheck(no_bias, {leaf(random_f64({3, 4}, -1, 1, 8)), leaf(random_f64({5, 4}, -1, 1, 9))}));
  // the bias alone requires grad (its gradient without the dW GEMM)
  EXPECT_TRUE(gradcheck(with_bias, {leaf(random_f64({3, 4}, -1, 1, 13)), random_f64({2, 4}, -1, 1, 14),
                                    leaf(random_f64({2}, -1, 1, 15))}));
  // leading dims [B, T, in]; only the weight requires grad
  EXPECT_TRUE(gradcheck(with_bias, {random_f64({2, 3, 4}, -1, 1, 10), leaf(random_f64({3, 4}, -1, 1, 11)),
                                    leaf(random_f64({3}, -1, 1, 12))}));
}

// A weight given as the transpose of a contiguous [in, out] matrix (GPT-2's Conv1D: x @ W) is
// used in place: the same values and gradients as a contiguous copy, and no copy allocated.
TEST(Linear, TransposedWeightViewIsUsedInPlace) {
  Tensor x = leaf(random_f64({3, 4}, -1, 1, 71)), m = leaf(random_f64({4, 5}, -1, 1, 72)),
         b = leaf(random_f64({5}, -1, 1, 73));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1].transpose(0, 1), in[2]); },
                        {x, m, b}));
  const std::vector<double> want = linear(x, m.transpose(0, 1).contiguous(), b).to_vector();
  EXPECT_EQ(linear(x, m.transpose(0, 1), b).to_vector(), want);
  CachingAllocator& alloc = allocator_for(meta_device());
  Tensor xm = Tensor::empty({8, 768}, DType::f32, meta_device()),
         wm = Tensor::empty({768, 2304}, DType::f32, meta_device());
  const int64_t before = alloc.stat("allocated_bytes.all.current");
  Tensor y = linear(xm, wm.transpose(0, 1), Tensor());
  EXPECT_EQ(alloc.stat("allocated_bytes.all.current") - before, int64_t(8 * 2304 * 4));   // the output only
}

// GemmArgs' linear extras (kernels/linear.h) on the CPU: the bias add after the product and the
// bias gradient as the sums of op(A)'s rows or op(B)'s columns, bit for bit what the separate
// bias_add_rows / bias_grad_rows launches give, in every float dtype (16-bit: the rounded
// product plus the bias, rounded again).
TEST(Linear, GemmExtrasAreTheSeparateBiasKernels) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t M = 5, N = 7, K = 9;
    Tensor x = random_f64({M, K}, -1, 1, 81).to(t), w = random_f64({N, K}, -1, 1, 82).to(t),
           b = random_f64({N}, -1, 1, 83).to(t), g = random_f64({K, M}, -1, 1, 84).to(t),
           h = random_f64({K, N}, -1, 1, 85).to(t);
    auto bytes = [](const Tensor& u) {
      const auto* p = static_cast<const unsigned char*>(u.raw_data());
      return std::vector<unsigned char>(p, p + u.nbytes());
    };
    auto launch = [&](const GemmArgs& a) { gemm_kernels().launch(cpu_device(), t, a); };
    // y = x w^T + b
    Tensor fused = Tensor::empty({M, N}, t), split = Tensor::empty({M, N}, t);
    GemmArgs a{false, true, M, N, K, 1.0, x.raw_data(), K, w.raw_data(), K, 0.0, fused.raw_data(), N};
    a.bias = b.raw_data();
    launch(a);
    a.bias = nullptr, a.C = split.raw_data();
    launch(a);
    bias_add_rows_kernels().launch(cpu_device(), t, BiasAddRowsArgs{split.raw_data(), b.raw_data(), M, N});
    EXPECT_EQ(bytes(fused), bytes(split));
    // dW = g^T x with the sums of g's columns (op(A) = g^T: its rows), and x^T h with h's columns:
    // each sum is bias_grad_rows of its source, and the product is the product without it
    auto sums_are_bias_grads = [&](GemmArgs e, void* GemmArgs::*slot, const Tensor& src, int64_t n) {
      Tensor out = Tensor::empty({e.M, e.N}, t), plain = Tensor::empty({e.M, e.N}, t),
             sums = Tensor::empty({n}, t), want = Tensor::empty({n}, t);
      e.C = out.raw_data(), e.*slot = sums.raw_data();
      launch(e);
      e.C = plain.raw_data(), e.*slot = nullptr;
      launch(e);
      bias_grad_rows_kernels().launch(cpu_device(), t, BiasGradRowsArgs{want.raw_data(), src.raw_data(), K, n});
      EXPECT_EQ(bytes(sums), bytes(want));
      EXPECT_EQ(bytes(out), bytes(plain));
    };
    sums_are_bias_grads({true, false, M, M, K, 1.0, g.raw_data(), M, g.raw_data(), M, 0.0, nullptr, M},
                        &GemmArgs::a_row_sums, g, M);
    sums_are_bias_grads({true, false, M, N, K, 1.0, g.raw_data(), M, h.raw_data(), N, 0.0, nullptr, N},
                        &GemmArgs::b_col_sums, h, N);
  }
}

TEST(Linear, Values) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  Tensor w = Tensor::from_vector({1, 0, 1, 1, 0, 2}, {3, 2});
  Tensor b = Tensor::from_vector({10, 20, 30}, {3});
  EXPECT_EQ(linear(x, w, b).to_vector(), (std::vector<double>{11, 23, 34, 13, 27, 38}));
}

TEST(Bmm, ValuesAndGradcheck) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 1, 0, 0, 1}, {2, 2, 2});
  Tensor b = Tensor::from_vector({1, 1, 0, 1, 5, 6, 7, 8}, {2, 2, 2});
  EXPECT_EQ(bmm(a, b).to_vector(), (std::vector<double>{1, 3, 3, 7, 5, 6, 7, 8}));
  auto f = [](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); };
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({3, 2, 4}, -1, 1, 16)), leaf(random_f64({3, 4, 5}, -1, 1, 17))}));
  // transposed operands (GEMM flags, no copies) and a transposed output gradient
  auto ft = [](const std::vector<Tensor>& in) {
    return bmm(in[0].transpose(1, 2), in[1].transpose(1, 2)).transpose(1, 2);
  };
  EXPECT_TRUE(gradcheck(ft, {leaf(random_f64({2, 4, 3}, -1, 1, 18)), leaf(random_f64({2, 5, 4}, -1, 1, 19))}));
  // a generally strided operand (copied)
  auto fp = [](const std::vector<Tensor>& in) { return bmm(in[0].permute({1, 0, 2}), in[1]); };
  EXPECT_TRUE(gradcheck(fp, {leaf(random_f64({2, 3, 4}, -1, 1, 20)), random_f64({3, 4, 2}, -1, 1, 21)}));
  // transposed result equals the plain one
  Tensor x = random_f64({2, 3, 4}, -1, 1, 22), y = random_f64({2, 5, 4}, -1, 1, 23);
  expect_near(bmm(x, y.transpose(1, 2)).to_vector(), bmm(x, y.transpose(1, 2).contiguous()).to_vector(), 1e-14);
}

TEST(Bmm, ShapeErrors) {
  std::string m = error_of<ShapeError>([] { bmm(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})); });
  EXPECT_TRUE(contains(m, "[2, 3, 4]") && contains(m, "[3, 4, 5]")) << m;
  m = error_of<ShapeError>([] { bmm(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 5, 6})); });
  EXPECT_TRUE(contains(m, "[2, 3, 4]") && contains(m, "[2, 5, 6]")) << m;
  EXPECT_THROW(bmm(Tensor::zeros({3, 4}), Tensor::zeros({4, 5})), ShapeError);
}
