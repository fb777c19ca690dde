// test_ops_embedding.cpp — embedding: values and a float64 gradcheck, the padding row
// getting no gradient while repeated ids accumulate, and id / padding_idx / shape / dtype
// errors; token_inputs (BERT's positions, types and padding mask from the ids): values,
// allocation order, meta allocations, errors, and on a GPU (skipped without one) the CUDA
// kernel equal to the CPU's.
// ctest tier: ops gpu
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/device_graph.h"
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

TEST(TokenInputs, PositionsTypesAndPaddingFromTheIds) {
  const Tensor ids = Tensor::from_vector_i64({5, 7, 0, 0, 9, 0, 3, 4}, {2, 4});
  const TokenInputs ti = token_inputs(ids, true, true);
  EXPECT_EQ(ti.positions.to_vector_i64(), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(ti.types.to_vector_i64(), (std::vector<int64_t>(8, 0)));
  ASSERT_EQ(ti.padding.dtype(), DType::u8);
  const uint8_t* m = ti.padding.data<uint8_t>();
  EXPECT_EQ(std::vector<int>(m, m + 8), (std::vector<int>{0, 0, 1, 1, 0, 1, 0, 0}));
  const TokenInputs mask_only = token_inputs(ids, false, true);
  EXPECT_FALSE(mask_only.positions.defined());
  EXPECT_FALSE(mask_only.types.defined());
  EXPECT_EQ(std::vector<int>(mask_only.padding.data<uint8_t>(), mask_only.padding.data<uint8_t>() + 8),
            std::vector<int>(m, m + 8));
}

// positions, types, mask: in that order on the ids' device, nothing else (no host staging).
TEST(TokenInputs, AllocatesThreeTensorsInOrderOnTheIdsDevice) {
  const Device meta{DeviceType::meta, 0};
  reset_allocators();
  CachingAllocator& al = allocator_for(meta);
  const Tensor ids = Tensor::empty({3, 1000}, DType::i64, meta);
  al.record_history(true);
  const TokenInputs ti = token_inputs(ids, true, true);
  std::vector<size_t> sizes;
  for (const TraceEvent& e : al.trace())
    if (e.action == "alloc") sizes.push_back(e.size);
  EXPECT_EQ(sizes, (std::vector<size_t>{24064, 24064, 3072}));   // 3x1000 int64 twice, then uint8 (512 B rounding)
  EXPECT_EQ(allocator_for(cpu_device()).stat("allocation.all.allocated"), 0);
}

TEST(TokenInputs, RefusesAnythingButInt64Ids) {
  EXPECT_THROW(token_inputs(Tensor::zeros({2, 3}), true, true), DTypeError);
  EXPECT_THROW(token_inputs(Tensor::from_vector_i64({1, 2, 3}, {3}), true, true), DTypeError);
}

// The CUDA kernel, eagerly and inside a captured graph, against the CPU's.
TEST(CudaTokenInputs, MatchTheCpuKernel) {
  OOMLAB_REQUIRE_CUDA();
  std::vector<int64_t> v(4 * 37);
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 7919) % 5);   // zeros scattered
  const Tensor ids = Tensor::from_vector_i64(v, {4, 37});
  const TokenInputs cpu = token_inputs(ids, true, true);
  auto expect_equal = [&](const TokenInputs& gpu) {
    EXPECT_EQ(to_host(gpu.positions).to_vector_i64(), cpu.positions.to_vector_i64());
    EXPECT_EQ(to_host(gpu.types).to_vector_i64(), cpu.types.to_vector_i64());
    const Tensor mh = to_host(gpu.padding);
    EXPECT_EQ(std::vector<int>(mh.data<uint8_t>(), mh.data<uint8_t>() + v.size()),
              std::vector<int>(cpu.padding.data<uint8_t>(), cpu.padding.data<uint8_t>() + v.size()));
  };
  const Tensor dids = to_device(ids, cuda0());
  expect_equal(token_inputs(dids, true, true));
  TokenInputs captured;
  DeviceGraph g(cuda0());
  g.capture([&] { captured = token_inputs(dids, true, true); });
  g.replay();
  expect_equal(captured);
}
