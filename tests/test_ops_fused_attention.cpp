// test_ops_fused_attention.cpp — fused_scaled_dot_product_attention (engine/ops/attention.h):
// float64 gradchecks of q, k and v (padded keys, a fully padded batch row, dropout replayed
// from a reset generator, Tq != Tk, Dv != D, permuted inputs); equal to eager attention
// within float32 rounding, dropout included (the same generator state draws the same mask),
// forward and backward; bitwise the same at 1 and 2 threads; on meta it saves its output
// and one log-sum-exp per row, never the Tq x Tk probabilities, and 16-bit inputs in 16 bits
// (as PyTorch's SDPA); causal masking (GPT-2) on both.
// ctest tier: ops
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/autograd/autocast.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/attention.h"
#include "engine/ops/elementwise.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
Tensor fused(const std::vector<Tensor>& in, const Tensor& m, double p, uint64_t seed) {
  Generator gen{seed, 0};
  return fused_scaled_dot_product_attention(in[0], in[1], in[2], m, p, true, &gen);
}
}  // namespace

TEST(FusedAttention, Gradcheck) {
  Tensor m = u8_mask({0, 0, 0, 0, 1, 1, 1, 1}, {2, 4});   // batch 1: every key padded
  Tensor q = leaf(random_f64({2, 2, 3, 3}, -1, 1, 28)), k = leaf(random_f64({2, 2, 4, 3}, -1, 1, 29)),
         v = leaf(random_f64({2, 2, 4, 5}, -1, 1, 30));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return fused(in, m, 0.0, 1); }, {q, k, v}));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return fused(in, m, 0.2, 42); }, {q, k, v}));
  Tensor m2 = u8_mask({0, 0, 1, 0}, {1, 4});
  Tensor q2 = leaf(random_f64({1, 3, 2, 2}, -1, 1, 31)), k2 = leaf(random_f64({1, 4, 2, 2}, -1, 1, 32)),
         v2 = leaf(random_f64({1, 4, 2, 3}, -1, 1, 33));
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        return fused({in[0].permute({0, 2, 1, 3}), in[1].permute({0, 2, 1, 3}), in[2].permute({0, 2, 1, 3})}, m2, 0.1,
                     7);
      },
      {q2, k2, v2}));
}

// T 8: one block of query rows; T 130: three (64-row blocks, the last partial), so the
// dropout ranges of later blocks and the per-block softmax are compared too.
TEST(FusedAttention, EqualsEagerWithinFloat32RoundingDropoutIncluded) {
  for (int64_t T : {8, 130})
    for (double p : {0.0, 0.1}) {
      std::vector<double> pad(size_t(2 * T), 0.0);
      for (int64_t j = T - 3; j < T; ++j) pad[size_t(T + j)] = 1;   // batch 1's last 3 keys
      Tensor m = u8_mask(pad, {2, T});
      std::vector<Tensor> a, b;
      for (uint64_t s : {11u, 12u, 13u}) {
        Tensor t = random_f64({2, 4, T, 16}, -1, 1, s).to(DType::f32);
        a.push_back(leaf(t.clone()));
        b.push_back(leaf(t.clone()));
      }
      Generator g1{5, 3}, g2{5, 3};
      Tensor eager = scaled_dot_product_attention(a[0], a[1], a[2], m, p, true, &g1);
      Tensor fast = fused_scaled_dot_product_attention(b[0], b[1], b[2], m, p, true, &g2);
      EXPECT_EQ(g1.offset, g2.offset);   // the same draws reserved
      expect_near(fast.to_vector(), eager.to_vector(), 2e-6);
      Tensor w = random_f64({2, 4, T, 16}, -1, 1, 99).to(DType::f32);
      sum_all(mul(eager, w)).backward();
      sum_all(mul(fast, w)).backward();
      for (int i = 0; i < 3; ++i) expect_near(b[size_t(i)].grad().to_vector(), a[size_t(i)].grad().to_vector(), 2e-5);
    }
}

TEST(FusedAttention, ThreadCountDoesNotChangeABit) {
  std::vector<Tensor> in;
  for (uint64_t s : {21u, 22u, 23u})
    in.push_back(leaf(random_f64({2, 4, 130, 16}, -1, 1, s).to(DType::f32)));  // 3 row blocks; parallel
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    for (Tensor& t : in) t.zero_grad();
    Tensor y = fused(in, Tensor(), 0.1, 9);
    sum_all(y).backward();
    std::vector<double> all = y.to_vector();
    for (Tensor& t : in) for (double g : t.grad().to_vector()) all.push_back(g);
    return all;
  };
  const int n = omp_get_max_threads();
  const std::vector<double> one = run(1), many = run(std::max(2, n));
  omp_set_num_threads(n);
  EXPECT_EQ(one, many);
}

TEST(FusedAttention, MetaSavesNoSequenceSquaredTensors) {
  // B 2, 4 heads, T 256, D 16 (float32): eager keeps probabilities, dropout mask and dropped
  // probabilities (2*4*256*256 * 9 bytes); fused keeps out and lse.
  const Device meta{DeviceType::meta, 0};
  auto saved_bytes = [&](bool use_fused) {
    CachingAllocator& alloc = allocator_for(meta);
    std::vector<Tensor> in;
    for (int i = 0; i < 3; ++i) {
      Tensor t = Tensor::empty({2, 4, 256, 16}, DType::f32, meta);
      t.set_requires_grad(true);
      in.push_back(t);
    }
    const int64_t before = alloc.stats().at("allocated_bytes.all.current");
    Generator gen{1, 0};
    Tensor y = use_fused ? fused_scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.1, true, &gen)
                         : scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.1, true, &gen);
    return alloc.stats().at("allocated_bytes.all.current") - before;
  };
  const int64_t eager = saved_bytes(false), fast = saved_bytes(true);
  const int64_t out = 2 * 4 * 256 * 16 * 4, lse = 2 * 4 * 256 * 4;
  EXPECT_EQ(fast, out + lse);
  EXPECT_GE(eager - fast, int64_t(2) * 4 * 256 * 256 * 9 - out);
}

// 16-bit q, k, v (a --half model; under autocast also float32 ones, cast to its dtype) are
// saved as they are, as PyTorch's SDPA saves them: on meta the op leaves only its 16-bit
// output and a float32 log-sum-exp allocated (its float32 working copies are freed), under
// autocast the same plus the 16-bit casts of q, k, v; values and gradients in the inputs'
// dtype, equal to the float32 op's within that dtype's rounding.
TEST(FusedAttention, SixteenBitInputsAreSavedIn16BitsAndMatchFloat32) {
  const Device meta{DeviceType::meta, 0};
  const int64_t n = 2 * 4 * 64 * 16, rows = 2 * 4 * 64;
  for (DType low : {DType::f16, DType::bf16}) {
    for (bool autocast : {false, true}) {
      CachingAllocator& alloc = allocator_for(meta);
      std::vector<Tensor> in;
      for (int i = 0; i < 3; ++i) in.push_back(leaf(Tensor::empty({2, 4, 64, 16}, autocast ? DType::f32 : low, meta)));
      const int64_t before = alloc.stats().at("allocated_bytes.all.current");
      AutocastGuard amp(autocast ? std::optional<DType>(low) : std::nullopt);
      Tensor y = fused_scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.0, true);
      EXPECT_EQ(y.dtype(), low);
      const int64_t casts = autocast ? 3 * n * 2 : 0;
      EXPECT_EQ(alloc.stats().at("allocated_bytes.all.current") - before, casts + n * 2 + rows * 4)
          << dtype_name(low) << " autocast " << autocast;
    }
    std::vector<Tensor> f32, half;
    for (int i = 0; i < 3; ++i) {
      Tensor t = random_f64({2, 3, 7, 8}, -1, 1, uint64_t(40 + i)).to(low);   // values a 16-bit tensor holds
      half.push_back(leaf(t.detach()));
      f32.push_back(leaf(t.to(DType::f32).detach()));
    }
    const Tensor g = random_f64({2, 3, 7, 8}, -1, 1, 50).to(low);
    Tensor yh = fused_scaled_dot_product_attention(half[0], half[1], half[2], Tensor(), 0.0, true);
    Tensor yf = fused_scaled_dot_product_attention(f32[0], f32[1], f32[2], Tensor(), 0.0, true);
    sum_all(mul(yh, g)).backward();
    sum_all(mul(yf, g.to(DType::f32))).backward();
    const double tol = low == DType::f16 ? 4e-3 : 3e-2;   // a few of the type's ulps at magnitude ~1
    expect_near(yh.to(DType::f64).to_vector(), yf.to(DType::f64).to_vector(), tol);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(half[size_t(i)].grad().dtype(), low);
      expect_near(half[size_t(i)].grad().to(DType::f64).to_vector(), f32[size_t(i)].grad().to(DType::f64).to_vector(),
                  tol);
    }
  }
}

TEST(FusedAttention, BadInputsAreClearErrors) {
  Tensor q = random_f64({1, 2, 3, 4}), k = random_f64({1, 2, 5, 4}), v = random_f64({1, 2, 5, 2});
  EXPECT_THROW(fused_scaled_dot_product_attention(q, random_f64({1, 2, 5, 3}), v, Tensor(), 0.0, false), ShapeError);
  EXPECT_THROW(fused_scaled_dot_product_attention(q, k, v, u8_mask({0, 0, 0}, {1, 3}), 0.0, false), ShapeError);
  EXPECT_THROW(fused_scaled_dot_product_attention(q, k, v, Tensor(), 1.0, true), ValueError);
}

// Causal attention (is_causal=True, GPT-2): eager's causal masked_softmax equals a reference
// built from an explicit lower-triangular softmax; both paths pass float64 gradchecks (with
// padding and dropout, Tq != Tk); fused equals eager within float32 rounding over 3 row blocks.
TEST(CausalAttention, ReferenceGradcheckAndFusedEqualsEager) {
  Tensor q = leaf(random_f64({1, 2, 4, 3}, -1, 1, 51)), k = leaf(random_f64({1, 2, 4, 3}, -1, 1, 52)),
         v = leaf(random_f64({1, 2, 4, 2}, -1, 1, 53));
  const std::vector<double> y = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, nullptr, true).to_vector();
  const std::vector<double> qv = q.to_vector(), kv = k.to_vector(), vv = v.to_vector();
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {   // softmax over keys 0..i only
      std::vector<double> e(size_t(i + 1));
      double sum = 0;
      for (int j = 0; j <= i; ++j) {
        double s = 0;
        for (int d = 0; d < 3; ++d) s += qv[size_t((h * 4 + i) * 3 + d)] * kv[size_t((h * 4 + j) * 3 + d)];
        e[size_t(j)] = std::exp(s / std::sqrt(3.0));
        sum += e[size_t(j)];
      }
      for (int c = 0; c < 2; ++c) {
        double want = 0;
        for (int j = 0; j <= i; ++j) want += e[size_t(j)] / sum * vv[size_t((h * 4 + j) * 2 + c)];
        EXPECT_NEAR(y[size_t((h * 4 + i) * 2 + c)], want, 1e-12);
      }
    }
  Tensor m = u8_mask({0, 1, 0, 0, 0, 0, 0, 1}, {2, 4});
  Tensor q2 = leaf(random_f64({2, 2, 3, 3}, -1, 1, 54)), k2 = leaf(random_f64({2, 2, 4, 3}, -1, 1, 55)),
         v2 = leaf(random_f64({2, 2, 4, 2}, -1, 1, 56));
  for (double p : {0.0, 0.2}) {
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) {
      Generator g{3, 0};
      return scaled_dot_product_attention(in[0], in[1], in[2], m, p, true, &g, true);
    }, {q2, k2, v2}));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) {
      Generator g{3, 0};
      return fused_scaled_dot_product_attention(in[0], in[1], in[2], m, p, true, &g, true);
    }, {q2, k2, v2}));
  }
  std::vector<Tensor> a, b;
  for (uint64_t s : {61u, 62u, 63u}) {
    Tensor t = random_f64({2, 3, 130, 16}, -1, 1, s).to(DType::f32);
    a.push_back(leaf(t.clone()));
    b.push_back(leaf(t.clone()));
  }
  Generator g1{5, 3}, g2{5, 3};
  Tensor eager = scaled_dot_product_attention(a[0], a[1], a[2], Tensor(), 0.1, true, &g1, true);
  Tensor fast = fused_scaled_dot_product_attention(b[0], b[1], b[2], Tensor(), 0.1, true, &g2, true);
  expect_near(fast.to_vector(), eager.to_vector(), 2e-6);
  Tensor w = random_f64({2, 3, 130, 16}, -1, 1, 64).to(DType::f32);
  sum_all(mul(eager, w)).backward();
  sum_all(mul(fast, w)).backward();
  for (int i = 0; i < 3; ++i) expect_near(b[size_t(i)].grad().to_vector(), a[size_t(i)].grad().to_vector(), 2e-5);
}
