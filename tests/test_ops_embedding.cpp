// test_ops_embedding.cpp — embedding: values and a float64 gradcheck, the padding row
// getting no gradient while repeated ids accumulate, and id / padding_idx / shape / dtype
// errors.
// ctest tier: ops
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/embedding.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(Embedding, ValuesAndGradcheck) {
  Tensor w = Tensor::from_vector({0, 1, 10, 11, 20, 21}, {3, 2}, DType::f64);
  Tensor ids = Tensor::from_vector_i64({2, 0, 2, 1}, {2, 2});
  Tensor out = embedding(w, ids);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{20, 21, 0, 1, 20, 21, 10, 11}));
  // repeated ids, padding_idx set (row 4, not looked up: its numeric gradient is 0 too)
  Tensor ids2 = Tensor::from_vector_i64({1, 3, 1, 0, 3, 1}, {2, 3});
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], ids2, 4); },
                        {leaf(random_f64({5, 3}, -1, 1, 1))}));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], ids2); },
                        {leaf(random_f64({5, 3}, -1, 1, 2))}));
}

TEST(Embedding, PaddingRowGetsNoGradAndRepeatsAccumulate) {
  Tensor w = leaf(random_f64({4, 3}, -1, 1, 3));
  Tensor ids = Tensor::from_vector_i64({2, 0, 2, 2, 1, 0}, {6});
  Tensor g = random_f64({6, 3}, -1, 1, 4);
  Tensor out = embedding(w, ids, /*padding_idx=*/0);
  EXPECT_EQ(out.to_vector()[3], w.to_vector()[0]);   // the padding row is still looked up
  out.backward(g);
  std::vector<double> gw = w.grad().to_vector(), gv = g.to_vector();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(gw[0 * 3 + c], 0.0);                                        // padding row
    EXPECT_NEAR(gw[2 * 3 + c], gv[0 * 3 + c] + gv[2 * 3 + c] + gv[3 * 3 + c], 1e-15);  // id 2 x3
    EXPECT_EQ(gw[1 * 3 + c], gv[4 * 3 + c]);
    EXPECT_EQ(gw[3 * 3 + c], 0.0);                                        // never used
  }
}

TEST(Embedding, Errors) {
  Tensor w = Tensor::zeros({5, 2});
  std::string m = error_of<ValueError>([&] { embedding(w, Tensor::from_vector_i64({1, 7, 2}, {3})); });
  EXPECT_TRUE(contains(m, "index 7")) << m;
  EXPECT_TRUE(contains(m, "5")) << m;
  m = error_of<ValueError>([&] { embedding(w, Tensor::from_vector_i64({-1}, {1})); });
  EXPECT_TRUE(contains(m, "index -1")) << m;
  EXPECT_THROW(embedding(w, Tensor::from_vector({1}, {1})), DTypeError);
  EXPECT_THROW(embedding(w, Tensor::from_vector_i64({1}, {1}), 5), ValueError);
  // meta has no data: no range check, shapes only
  Tensor wm = Tensor::empty({5, 2}, DType::f32, meta_device());
  Tensor om = embedding(wm, Tensor::empty({2, 3}, DType::i64, meta_device()));
  EXPECT_EQ(om.shape(), (Shape{2, 3, 2}));
}
