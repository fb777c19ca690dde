// test_ops_groupnorm.cpp — group_norm: values against a hand computation, equivalences
// (G = 1 is layer norm over C*HW; G = C is instance norm; the result of a sample does not
// depend on the batch it is in, BatchNorm's opposite), float64 gradchecks (x, weight and
// bias; no affine; a non-contiguous input), the 16-bit kernel = float32 kernel rounded,
// nn::GroupNorm's state_dict keys, and errors (groups not dividing the channels, shapes).
// ctest tier: ops
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/nn/layers.h"
#include "engine/ops/groupnorm.h"
#include "engine/ops/layernorm.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(GroupNorm, Values) {
  // one sample, 4 channels of 2 positions, 2 groups: group 0 = {1,2,3,4}, group 1 = {0,0,2,2}
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 0, 0, 2, 2}, {1, 4, 2}, DType::f64);
  Tensor w = Tensor::from_vector({1, 2, 1, 1}, {4}, DType::f64);
  Tensor b = Tensor::from_vector({0, 0, 1, 0}, {4}, DType::f64);
  const double s0 = 1.0 / std::sqrt(1.25 + 1e-5), s1 = 1.0 / std::sqrt(1.0 + 1e-5);
  expect_near(group_norm(x, 2, w, b, 1e-5).to_vector(),
              {-1.5 * s0, -0.5 * s0, 0.5 * s0 * 2, 1.5 * s0 * 2, -1 * s1 + 1, -1 * s1 + 1, 1 * s1, 1 * s1}, 1e-12);
}

TEST(GroupNorm, OneGroupIsLayerNormOverTheSampleAndGroupsNeverMixSamples) {
  Tensor x = random_f64({3, 6, 5}, -2, 2, 21);
  // G = 1: layer norm over each sample's C*HW values (no affine)
  expect_near(group_norm(x, 1, Tensor(), Tensor(), 1e-5).to_vector(),
              layer_norm(x.reshape({3, 30}), Tensor(), Tensor(), 1e-5).to_vector(), 1e-12);
  // a sample's output is the same alone or in a batch (BatchNorm's would change)
  Tensor w = random_f64({6}, 0.5, 1.5, 22), b = random_f64({6}, -1, 1, 23);
  const std::vector<double> all = group_norm(x, 3, w, b).to_vector();
  const std::vector<double> one = group_norm(x.narrow(0, 1, 1).contiguous(), 3, w, b).to_vector();
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(one[i], all[30 + i], 1e-14) << i;
}

TEST(GroupNorm, Gradcheck) {
  auto f = [](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2], 1e-5); };
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({2, 4, 3, 3}, -1, 1, 5)), leaf(random_f64({4}, 0.5, 1.5, 6)),
                            leaf(random_f64({4}, -1, 1, 7))}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return group_norm(in[0], 3, Tensor(), Tensor()); },
                        {leaf(random_f64({2, 6, 4}, -1, 1, 8))}));
  // only the affine parameters; G = C (instance norm)
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return group_norm(in[0], 4, in[1], in[2]); },
                        {random_f64({3, 4, 5}, -1, 1, 9), leaf(random_f64({4}, -1, 1, 10)),
                         leaf(random_f64({4}, -1, 1, 11))}));
  // non-contiguous input
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return group_norm(in[0].transpose(0, 1), 2, in[1], in[2]); },
      {leaf(random_f64({4, 2, 3}, -1, 1, 12)), leaf(random_f64({4}, -1, 1, 13)), leaf(random_f64({4}, -1, 1, 14))}));
}

// 16-bit: widen, the float32 kernel, round back (statistics kept in float32).
TEST(GroupNorm, HalfIsTheFloat32KernelRounded) {
  Tensor x = random_f64({2, 8, 3, 3}, -2, 2, 31).to(DType::f32);
  Tensor w = random_f64({8}, 0.5, 1.5, 32).to(DType::f32), b = random_f64({8}, -1, 1, 33).to(DType::f32);
  for (DType low : {DType::f16, DType::bf16}) {
    Tensor xl = x.to(low), wl = w.to(low), bl = b.to(low);
    const Tensor want = group_norm(xl.to(DType::f32), 4, wl.to(DType::f32), bl.to(DType::f32)).to(low);
    const Tensor got = group_norm(xl, 4, wl, bl);
    EXPECT_EQ(got.dtype(), low);
    EXPECT_EQ(got.to_vector(), want.to_vector()) << dtype_name(low);
  }
}

TEST(GroupNorm, LayerKeysAndErrors) {
  nn::GroupNorm gn(4, 16);
  std::vector<std::string> keys;
  for (const auto& [n, t] : gn.state_dict()) keys.push_back(n);
  EXPECT_EQ(keys, (std::vector<std::string>{"weight", "bias"}));   // torch.nn.GroupNorm's, no buffers
  EXPECT_EQ(gn.weight.to_vector(), std::vector<double>(16, 1.0));
  std::string m = error_of<ValueError>([] { group_norm(Tensor::zeros({2, 6, 4}), 4, Tensor(), Tensor()); });
  EXPECT_TRUE(contains(m, "6 channels cannot be split into 4 groups")) << m;
  m = error_of<ShapeError>([] { group_norm(Tensor::zeros({2, 6, 4}), 3, Tensor::ones({5}), Tensor()); });
  EXPECT_TRUE(contains(m, "[5]") && contains(m, "6 channels")) << m;
  m = error_of<ShapeError>([] { group_norm(Tensor::zeros({6}), 3, Tensor(), Tensor()); });
  EXPECT_TRUE(contains(m, "[N, C, *]")) << m;
  EXPECT_THROW(nn::GroupNorm(3, 16), ValueError);
}
