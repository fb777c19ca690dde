// test_ops_batchnorm_relu.cpp — batch_norm_relu (engine/ops/batchnorm.h; fused kernels of
// kernels/cpu/batchnorm_cpu.cpp and kernels/cuda/batchnorm.cu): float64 gradchecks
// (training NCHW and [N, C], eval, only the bias wanting a gradient), and bit-equality with
// batch_norm followed by relu and with batch_norm followed by an in-place relu_ — output,
// running statistics and every gradient — in float32, float64 and bfloat16, training and
// eval; the backward allocates one dy-sized tensor fewer (the meta device's count).
// ctest tier: ops
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/memory/caching_allocator.h"
#include "engine/ops/activation.h"
#include "engine/ops/batchnorm.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
TEST(BatchNormRelu, GradcheckTrainingAndEval) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    Tensor rm = random_f64({3}, -0.3, 0.3, 40), rv = random_f64({3}, 0.5, 2.0, 41);
    auto f = [&](const std::vector<Tensor>& in) { return batch_norm_relu(in[0], in[1], in[2], rm, rv, training); };
    EXPECT_TRUE(gradcheck(f, {leaf(random_f64({2, 3, 2, 3}, -1, 1, 42)), leaf(random_f64({3}, 0.5, 1.5, 43)),
                              leaf(random_f64({3}, -0.5, 0.5, 44))}));
    EXPECT_TRUE(gradcheck(f, {leaf(random_f64({6, 3}, -1, 1, 45)), leaf(random_f64({3}, 0.5, 1.5, 46)),
                              leaf(random_f64({3}, -0.5, 0.5, 47))}));
    Tensor x = random_f64({3, 3, 2, 2}, -1, 1, 48), w = random_f64({3}, 0.5, 1.5, 49);
    auto only_b = [&](const std::vector<Tensor>& in) { return batch_norm_relu(x, w, in[0], rm, rv, training); };
    EXPECT_TRUE(gradcheck(only_b, {leaf(random_f64({3}, -0.5, 0.5, 50))}));
  }
}

struct Outcome { std::vector<std::vector<uint8_t>> tensors; };

// y, running stats and the gradients of x, weight and bias after one forward + backward.
// mode 0: batch_norm_relu; 1: batch_norm then relu; 2: batch_norm then relu_.
Outcome run(int mode, DType dt, bool training) {
  Tensor x = leaf(random_f64({4, 3, 5, 5}, -2, 2, 60).to(dt));
  Tensor w = leaf(random_f64({3}, 0.5, 1.5, 61).to(DType::f64 == dt ? dt : DType::f32));
  Tensor b = leaf(random_f64({3}, -0.5, 0.5, 62).to(w.dtype()));
  Tensor rm = random_f64({3}, -0.2, 0.2, 63).to(w.dtype()), rv = random_f64({3}, 0.5, 1.5, 64).to(w.dtype());
  Tensor y;
  if (mode == 0) {
    y = batch_norm_relu(x, w, b, rm, rv, training);
  } else if (mode == 1) {
    y = relu(batch_norm(x, w, b, rm, rv, training));
  } else {
    y = batch_norm(x, w, b, rm, rv, training);
    relu_(y);
  }
  y.backward(random_f64(y.shape(), -1, 1, 65).to(dt));
  return {{tensor_bytes(y), tensor_bytes(rm), tensor_bytes(rv), tensor_bytes(x.grad()), tensor_bytes(w.grad()),
           tensor_bytes(b.grad())}};
}

TEST(BatchNormRelu, BitIdenticalToBatchNormThenRelu) {
  const char* names[] = {"y", "running_mean", "running_var", "dx", "dweight", "dbias"};
  for (DType dt : {DType::f32, DType::f64, DType::bf16})
    for (bool training : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (training ? " training" : " eval"));
      const Outcome fused = run(0, dt, training);
      for (int mode : {1, 2}) {
        const Outcome eager = run(mode, dt, training);
        for (size_t i = 0; i < fused.tensors.size(); ++i)
          EXPECT_EQ(fused.tensors[i], eager.tensors[i]) << names[i] << (mode == 1 ? " vs relu" : " vs relu_");
      }
    }
}

// Backward on the meta device: batch_norm then relu allocates relu's dx (a dy-sized
// tensor) that the fused op does not.
TEST(BatchNormRelu, BackwardAllocatesOneActivationFewer) {
  auto allocations = [](bool fused) {
    const Device meta = meta_device();
    Tensor x = Tensor::zeros({8, 4, 6, 6}, DType::f32, meta);
    x.set_requires_grad(true);
    Tensor w = Tensor::ones({4}, DType::f32, meta), b = Tensor::zeros({4}, DType::f32, meta);
    Tensor rm = Tensor::zeros({4}, DType::f32, meta), rv = Tensor::ones({4}, DType::f32, meta);
    Tensor y = fused ? batch_norm_relu(x, w, b, rm, rv, true) : relu(batch_norm(x, w, b, rm, rv, true));
    Tensor g = Tensor::ones(y.shape(), DType::f32, meta);
    const auto before = allocator_for(meta).stats().at("allocation.all.allocated");
    y.backward(g);
    return allocator_for(meta).stats().at("allocation.all.allocated") - before;
  };
  EXPECT_EQ(allocations(false) - allocations(true), 1);
}
}  // namespace
