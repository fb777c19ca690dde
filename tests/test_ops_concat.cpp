// test_ops_concat.cpp — cat, split, chunk: values (including non-contiguous inputs),
// views sharing storage, torch.chunk's piece sizes, shape / dtype / argument errors, and
// float64 gradchecks of pieces recombined in another order.
// ctest tier: ops
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/ops/concat.h"
#include "engine/ops/elementwise.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(Concat, CatValuesAndGradcheck) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2}), b = Tensor::from_vector({5, 6}, {1, 2});
  EXPECT_EQ(cat({a, b}, 0).to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor c = Tensor::from_vector({7, 8}, {2, 1});
  EXPECT_EQ(cat({a, c}, -1).to_vector(), (std::vector<double>{1, 2, 7, 3, 4, 8}));
  EXPECT_EQ(cat({a.transpose(0, 1), c}, 1).to_vector(), (std::vector<double>{1, 3, 7, 2, 4, 8}));
  auto f0 = [](const std::vector<Tensor>& in) { return cat({in[0], in[1], in[2]}, 0); };
  EXPECT_TRUE(gradcheck(f0, {leaf(random_f64({2, 3}, -1, 1, 34)), random_f64({1, 3}, -1, 1, 35),
                             leaf(random_f64({3, 3}, -1, 1, 36))}));
  auto f1 = [](const std::vector<Tensor>& in) { return cat({in[0], in[1].transpose(1, 2)}, 1); };
  EXPECT_TRUE(gradcheck(f1, {leaf(random_f64({2, 3, 2}, -1, 1, 37)), leaf(random_f64({2, 2, 4}, -1, 1, 38))}));
}

TEST(Concat, CatErrors) {
  std::string m = error_of<ShapeError>([] { cat({Tensor::zeros({2, 3}), Tensor::zeros({2, 4})}, 0); });
  EXPECT_TRUE(contains(m, "[2, 3]") && contains(m, "[2, 4]")) << m;
  EXPECT_THROW(cat({Tensor::zeros({2, 3}), Tensor::zeros({2, 3, 1})}, 0), ShapeError);
  EXPECT_THROW(cat({Tensor::zeros({2, 3}), Tensor::zeros({2, 3})}, 2), ShapeError);
  EXPECT_THROW(cat({Tensor::zeros({2}), Tensor::zeros({2}, DType::f64)}, 0), DTypeError);
  EXPECT_THROW(cat({}, 0), ValueError);
}

TEST(Concat, SplitAndChunk) {
  Tensor x = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  std::vector<Tensor> p = split(x, {2, 3}, 1);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].to_vector(), (std::vector<double>{0, 1, 5, 6}));
  EXPECT_EQ(p[1].to_vector(), (std::vector<double>{2, 3, 4, 7, 8, 9}));
  EXPECT_EQ(p[1].storage(), x.storage());   // views
  auto sizes = [](const std::vector<Tensor>& v, int64_t d) {
    std::vector<int64_t> s;
    for (const Tensor& t : v) s.push_back(t.size(d));
    return s;
  };
  EXPECT_EQ(sizes(chunk(x, 3, 1), 1), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(sizes(chunk(Tensor::zeros({6}), 4, 0), 0), (std::vector<int64_t>{2, 2, 2}));   // fewer chunks
  EXPECT_EQ(sizes(chunk(Tensor::zeros({0, 2}), 3, 0), 0), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(sizes(chunk(x, 2, 0), 0), (std::vector<int64_t>{1, 1}));
  EXPECT_THROW(split(x, {2, 2}, 1), ShapeError);
  EXPECT_THROW(chunk(x, 0, 1), ValueError);
  // gradients: pieces recombined in another order, one piece scaled
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        std::vector<Tensor> s = split(in[0], {1, 3, 1}, 1);
        return cat({s[2], scale(s[0], 3.0), s[1]}, 1);
      },
      {leaf(random_f64({2, 5, 2}, -1, 1, 39))}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        std::vector<Tensor> c = chunk(in[0], 3, -1);
        return cat({c[1], c[0]}, 0);   // c[2] unused: zero gradient
      },
      {leaf(random_f64({3, 7}, -1, 1, 40))}));
}
