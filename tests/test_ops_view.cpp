// test_ops_view.cpp — float64 gradchecks for the view family (reshape, flatten,
// transpose, permute + contiguous, narrow, clone, to); their shape errors are checked
// in test_ops_elementwise.cpp (ElementwiseErrors).
// ctest tier: ops
#include <gtest/gtest.h>

#include "engine/ops/view.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(ViewGrad, ReshapeTransposePermuteNarrow) {
  Tensor a = leaf(random_f64({2, 3, 4}, -1, 1, 6));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].reshape({4, -1}); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].flatten(1); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].transpose(0, 2).contiguous(); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].permute({1, 2, 0}).reshape({-1}); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].narrow(0, 1, 1); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].narrow(2, 1, 2).contiguous(); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].clone(); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].to(DType::f32).to(DType::f64); }, {a},
                        1e-3, 1e-4, 1e-3));
}
