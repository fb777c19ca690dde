// test_cuda_parity.cpp — every op through the public op API, forward and backward, on
// cuda:0 against the CPU reference (ggml test-backend-ops style): one table row per op
// configuration, run for float32 (required), float64, float16 and bfloat16 (a dtype the
// CUDA backend does not register yet is printed as a note, not a failure). Inputs are
// random, rounded to the tested dtype once and given to both sides; the reference runs in
// float64 (for f64) or float32. Tolerances (tests/cuda_test_util.h): pointwise
// rtol/atol 1e-5/1e-6 (f32), 2e-3 (f16), 1.6e-2 (bf16); NMSE for reductions, GEMM and
// convolutions: 1e-10 (f32 strict; 1e-6 with TF32 enabled), 1e-5 (f16), 1e-4 (bf16).
// Every test GTEST_SKIPs with the reason when no CUDA device is usable (or no CUDA build).
// ctest tier: gpu
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "cuda_test_util.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/broadcast.h"
#include "engine/ops/concat.h"
#include "engine/ops/conv.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/embedding.h"
#include "engine/ops/groupnorm.h"
#include "engine/ops/layernorm.h"
#include "engine/ops/linear.h"
#include "engine/ops/loss.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax.h"
#include "engine/ops/upsample.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
using V = std::vector<Tensor>;
constexpr DType f32 = DType::f32, f64 = DType::f64;
const Metric P = Metric::pointwise, N = Metric::nmse;

OpCase conv_case(const std::string& name, Shape x, Shape w, bool bias, Conv2dParams p) {
  std::vector<Input> in = {F(x), F(w, true, -0.5, 0.5)};
  if (bias) in.push_back(F({w[0]}));
  return {name, in, [=](V& v) { return conv2d(v[0], v[1], bias ? v[2] : Tensor(), p); }, N};
}

OpCase conv_t_case(const std::string& name, Shape x, Shape w, bool bias, ConvTranspose2dParams p) {
  std::vector<Input> in = {F(x), F(w, true, -0.5, 0.5)};
  if (bias) in.push_back(F({w[1] * p.groups}));
  return {name, in, [=](V& v) { return conv_transpose2d(v[0], v[1], bias ? v[2] : Tensor(), p); }, N};
}

OpCase pool_case(const std::string& name, Shape x, std::function<Tensor(const Tensor&)> f) {
  return {name, {F(x)}, [f](V& v) { return f(v[0]); }, N};
}

// --channels-last: the op on channels_last copies of its 4-D inputs (NHWC cuDNN descriptors,
// pool.cu's NHWC indexing, batch_norm's [N*HW, C, 1] view); compared in logical order.
Tensor cl(const Tensor& t) { return t.contiguous(MemoryFormat::channels_last); }

OpCase conv_cl_case(const std::string& name, Shape x, Shape w, bool bias, Conv2dParams p) {
  OpCase c = conv_case(name, x, w, bias, p);
  c.fn = [=](V& v) { return conv2d(cl(v[0]), cl(v[1]), bias ? v[2] : Tensor(), p); };
  return c;
}

std::vector<int64_t> with(std::vector<int64_t> v, std::initializer_list<std::pair<size_t, int64_t>> set) {
  for (auto [i, x] : set) v[i] = x;
  return v;
}

// batch_norm as a half model calls it: a 16-bit input takes float32 weight, bias and running
// stats (the op's rule); the table's 16-bit running-stat buffers receive the updated float32
// stats rounded back, so they are compared as for the other dtypes.
// relu: batch_norm_relu, the fused BatchNorm + ReLU (--fuse-relu).
Tensor bn_call(V& v, bool training, bool relu = false) {
  const auto op = relu ? batch_norm_relu : batch_norm;
  const bool low = v[0].dtype() == DType::f16 || v[0].dtype() == DType::bf16;
  if (!low) return op(v[0], v[1], v[2], v[3], v[4], training, 0.1, 1e-5);
  Tensor rm = v[3].to(f32), rv = v[4].to(f32);
  Tensor y = op(v[0], v[1].to(f32), v[2].to(f32), rm, rv, training, 0.1, 1e-5);
  v[3].copy_(rm);
  v[4].copy_(rv);
  return y;
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> c;
    // ---- elementwise ----
    c.push_back({"add", {F({3, 5, 7}), F({3, 5, 7})}, [](V& v) { return add(v[0], v[1]); }, P});
    c.push_back({"sub", {F({3, 5, 7}), F({3, 5, 7})}, [](V& v) { return sub(v[0], v[1]); }, P});
    c.push_back({"mul", {F({1000}), F({1000})}, [](V& v) { return mul(v[0], v[1]); }, P});
    c.push_back({"scale", {F({4, 33})}, [](V& v) { return scale(v[0], 0.75); }, P});
    c.push_back({"add_scalar", {F({4, 33})}, [](V& v) { return add_scalar(v[0], 0.5); }, P});
    c.push_back({"add_inplace",
                 {F({6, 7}), F({6, 7})},
                 [](V& v) {
                   Tensor y = scale(v[0], 1.0);
                   add_(y, v[1]);
                   return y;
                 },
                 P});
    c.push_back({"sum_all", {F({10, 100})}, [](V& v) { return sum_all(v[0]); }, N});
    c.push_back({"mean_all", {F({7, 129})}, [](V& v) { return mean_all(v[0]); }, N});
    // ---- activations ----
    c.push_back({"relu", {F({4, 33})}, [](V& v) { return relu(v[0]); }, P});
    c.push_back({"relu_inplace", {F({4, 33})}, [](V& v) { Tensor y = scale(v[0], 1.0); return relu_(y); }, P});
    c.push_back({"add_relu_inplace", {F({4, 33}), F({4, 33})},   // 132 elements: vector body + tail
                 [](V& v) { Tensor y = scale(v[0], 1.0); return add_relu_(y, v[1]); }, P});
    c.push_back({"dropout_train",
                 {F({8, 129})},
                 [](V& v) {
                   Generator g{123, 5};
                   return dropout(v[0], 0.3, true, g);
                 },
                 P});
    c.push_back({"dropout_eval",
                 {F({8, 16})},
                 [](V& v) {
                   Generator g{123, 5};
                   return dropout(v[0], 0.3, false, g);
                 },
                 P});
    c.push_back({"gelu_erf", {F({5, 40}, true, -3, 3)}, [](V& v) { return gelu(v[0]); }, P});
    c.push_back({"gelu_tanh", {F({5, 40}, true, -3, 3)}, [](V& v) { return gelu(v[0], "tanh"); }, P});
    c.push_back({"sigmoid", {F({5, 40}, true, -4, 4)}, [](V& v) { return sigmoid(v[0]); }, P});
    c.push_back({"silu", {F({5, 40}, true, -6, 6)}, [](V& v) { return silu(v[0]); }, P});
    c.push_back({"hardswish", {F({5, 40}, true, -5, 5)}, [](V& v) { return hardswish(v[0]); }, P});
    c.push_back({"hardsigmoid", {F({5, 40}, true, -5, 5)}, [](V& v) { return hardsigmoid(v[0]); }, P});
    c.push_back({"pow_3", {F({5, 40}, true, -2, 2)}, [](V& v) { return pow_scalar(v[0], 3.0); }, P});
    // ---- broadcasting (broadcast.h): per-channel scale, layer scale, pos embedding, sum_to ----
    c.push_back({"mul_channel_bcast", {F({4, 6, 5, 5}), F({4, 6, 1, 1})}, [](V& v) { return mul(v[0], v[1]); }, N});
    c.push_back({"mul_layer_scale", {F({6, 1, 1}), F({3, 6, 4, 4})}, [](V& v) { return mul(v[0], v[1]); }, N});
    c.push_back({"add_row_bcast", {F({3, 7, 16}), F({1, 7, 16})}, [](V& v) { return add(v[0], v[1]); }, N});
    c.push_back({"sub_bcast", {F({5, 1}), F({1, 9})}, [](V& v) { return sub(v[0], v[1]); }, N});
    c.push_back({"div_bcast", {F({4, 9}), F({9}, true, 0.5, 2)}, [](V& v) { return div(v[0], v[1]); }, N});
    c.push_back({"expand_contiguous", {F({1, 1, 8})}, [](V& v) { return expand(v[0], {3, 5, 8}).contiguous(); }, N});
    c.push_back({"softmax", {F({6, 37}, true, -3, 3)}, [](V& v) { return softmax(v[0]); }, N});
    c.push_back({"log_softmax", {F({6, 37}, true, -3, 3)}, [](V& v) { return log_softmax(v[0]); }, N});
    c.push_back({"softmax_wide", {F({3, 1500}, true, -3, 3)}, [](V& v) { return softmax(v[0]); }, N});
    // ---- losses ----
    const auto labels = with(random_ints(8, 0, 10, 5), {{3, kNllIgnoreIndex}});
    c.push_back({"cross_entropy",
                 {F({8, 10}, true, -2, 2), Idx({8}, labels)},
                 [](V& v) { return cross_entropy(v[0], v[1]); },
                 N});
    c.push_back({"nll_loss",
                 {F({8, 10}, true, -2, 2), Idx({8}, labels)},
                 [](V& v) { return nll_loss(log_softmax(v[0]), v[1]); },
                 N});
    // 7 x 13 = 91 gradient elements: a tail after the 16-byte stores (vector_map.cuh)
    const auto labels7 = with(random_ints(7, 0, 13, 8), {{5, kNllIgnoreIndex}});
    c.push_back({"nll_loss_odd_size", {F({7, 13}, true, -2, 2), Idx({7}, labels7)},
                 [](V& v) { return nll_loss(log_softmax(v[0]), v[1]); }, N});
    const auto pix = with(random_ints(60, 0, 4, 6), {{0, kNllIgnoreIndex}, {17, kNllIgnoreIndex}});
    c.push_back({"pixel_cross_entropy", {F({2, 4, 5, 6}, true, -2, 2), Idx({2, 5, 6}, pix)},
                 [](V& v) { return pixel_cross_entropy(v[0], v[1]); }, N});
    // ---- GEMM ----
    c.push_back({"matmul", {F({33, 65}), F({65, 47})}, [](V& v) { return matmul(v[0], v[1]); }, N});
    c.push_back({"matmul_transposed_a",
                 {F({65, 33}), F({65, 47})},
                 [](V& v) { return matmul(v[0].transpose(0, 1), v[1]); },
                 N});
    c.push_back({"matmul_transposed_b",
                 {F({33, 65}), F({47, 65})},
                 [](V& v) { return matmul(v[0], v[1].transpose(0, 1)); },
                 N});
    c.push_back({"linear_bias", {F({2, 5, 64}), F({48, 64}, true, -0.3, 0.3), F({48})},
                 [](V& v) { return linear(v[0], v[1], v[2]); }, N});
    c.push_back({"linear_no_bias",
                 {F({9, 130}), F({7, 130}, true, -0.3, 0.3)},
                 [](V& v) { return linear(v[0], v[1], Tensor()); },
                 N});
    c.push_back({"linear_large", {F({64, 512}), F({384, 512}, true, -0.1, 0.1), F({384})},
                 [](V& v) { return linear(v[0], v[1], v[2]); }, N});
    c.push_back({"bmm", {F({3, 17, 24}), F({3, 24, 19})}, [](V& v) { return bmm(v[0], v[1]); }, N});
    // ---- convolutions (conv2d_forward / backward_data / backward_weight, channel bias) ----
    c.push_back(conv_case("conv_stem_7x7_s2", {2, 3, 32, 32}, {8, 3, 7, 7}, false, {2, 2, 3, 3, 1, 1, 1}));
    c.push_back(conv_case("conv_3x3_bias", {2, 8, 12, 12}, {16, 8, 3, 3}, true, {1, 1, 1, 1, 1, 1, 1}));
    c.push_back(conv_case("conv_3x3_s2", {2, 8, 16, 16}, {16, 8, 3, 3}, false, {2, 2, 1, 1, 1, 1, 1}));
    c.push_back(conv_case("conv_1x1_groups3_bias", {2, 6, 11, 13}, {9, 2, 1, 1}, true, {1, 1, 0, 0, 1, 1, 3}));
    c.push_back(conv_case("conv_depthwise", {2, 8, 10, 10}, {8, 1, 3, 3}, false, {1, 1, 1, 1, 1, 1, 8}));
    c.push_back(conv_case("conv_5x3_dilated", {1, 4, 15, 14}, {6, 4, 5, 3}, true, {1, 2, 4, 2, 2, 2, 1}));
    c.push_back(conv_case("conv_wide_channels", {2, 64, 8, 8}, {64, 64, 3, 3}, false, {1, 1, 1, 1, 1, 1, 1}));
    // --fuse-relu's conv2d_relu: the relu in conv_bias.cu's bias pass, NCHW and channels_last
    {
      OpCase r = conv_case("conv_relu_3x3_bias", {2, 8, 12, 12}, {16, 8, 3, 3}, true, {1, 1, 1, 1, 1, 1, 1});
      r.fn = [](V& v) { return conv2d_relu(v[0], v[1], v[2], {1, 1, 1, 1, 1, 1, 1}); };
      c.push_back(r);
      r.name = "conv_relu_cl_3x3_bias";
      r.fn = [](V& v) { return conv2d_relu(cl(v[0]), cl(v[1]), v[2], {1, 1, 1, 1, 1, 1, 1}); };
      c.push_back(r);
    }
    // bias gradient over N*HW = 25600 positions per channel: 7 splits (conv_bias.cu)
    c.push_back(conv_case("conv_1x1_bias_split", {16, 3, 40, 40}, {4, 3, 1, 1}, true, {1, 1, 0, 0, 1, 1, 1}));
    // x without elements, padding 1: y = bias over pure padding, dw = 0 (never reaches cuDNN).
    c.push_back(conv_case("conv_empty_x_padded", {2, 3, 0, 0}, {4, 3, 1, 1}, true, {1, 1, 1, 1, 1, 1, 1}));
    c.push_back(conv_t_case("conv_transpose_2x2_s2", {2, 8, 6, 6}, {8, 4, 2, 2}, true, {2, 0, 0, 1}));
    c.push_back(conv_t_case("conv_transpose_3x3_s2_outpad", {1, 4, 5, 5}, {4, 3, 3, 3}, false, {2, 1, 1, 1}));
    // ---- batch norm (running stats are buffers: compared after forward) ----
    const std::vector<DType> bn_types = {f32, f64, DType::f16, DType::bf16};
    c.push_back({"batch_norm_train",
                 {F({4, 6, 5, 5}), F({6}, true, 0.5, 1.5), F({6}), Buf({6}, -0.2, 0.2), Buf({6}, 0.5, 1.5)},
                 [](V& v) { return bn_call(v, true); },
                 N,
                 bn_types});
    c.push_back({"batch_norm_eval",
                 {F({4, 6, 5, 5}), F({6}, true, 0.5, 1.5), F({6}), Buf({6}, -0.2, 0.2), Buf({6}, 0.5, 1.5)},
                 [](V& v) { return bn_call(v, false); },
                 N,
                 bn_types});
    c.push_back({"batch_norm_2d",
                 {F({16, 10}, true, -2, 3), F({10}, true, 0.5, 1.5), F({10}), Buf({10}, 0, 0.1), Buf({10}, 0.9, 1.1)},
                 [](V& v) { return bn_call(v, true); },
                 N,
                 bn_types});
    c.push_back({"batch_norm_large_hw",
                 {F({2, 3, 40, 40}), F({3}, true, 0.5, 1.5), F({3}), Buf({3}, 0, 0.1), Buf({3}, 0.9, 1.1)},
                 [](V& v) { return bn_call(v, true); },
                 N,
                 bn_types});
    // M = N*HW = 25600 per channel: 7 splits of the per-channel sums (batchnorm.cu), the
    // last one shorter.
    c.push_back({"batch_norm_train_split",
                 {F({16, 3, 40, 40}), F({3}, true, 0.5, 1.5), F({3}), Buf({3}, 0, 0.1), Buf({3}, 0.9, 1.1)},
                 [](V& v) { return bn_call(v, true); },
                 N,
                 bn_types});
    c.push_back({"batch_norm_eval_split",
                 {F({16, 3, 40, 40}), F({3}, true, 0.5, 1.5), F({3}), Buf({3}, 0, 0.1), Buf({3}, 0.9, 1.1)},
                 [](V& v) { return bn_call(v, false); },
                 N,
                 bn_types});
    c.push_back({"batch_norm_relu_train_split",
                 {F({16, 3, 40, 40}), F({3}, true, 0.5, 1.5), F({3}), Buf({3}, 0, 0.1), Buf({3}, 0.9, 1.1)},
                 [](V& v) { return bn_call(v, true, true); },
                 N,
                 bn_types});
    c.push_back({"batch_norm_relu_eval",
                 {F({4, 6, 5, 5}), F({6}, true, 0.5, 1.5), F({6}), Buf({6}, -0.2, 0.2), Buf({6}, 0.5, 1.5)},
                 [](V& v) { return bn_call(v, false, true); },
                 N,
                 bn_types});
    // ---- pooling ----
    c.push_back(pool_case("max_pool_3x3_s2_p1", {2, 3, 9, 9}, [](const Tensor& x) {
      return max_pool2d(x, {3, 3, 2, 2, 1, 1});
    }));
    c.push_back(pool_case("max_pool_2x2", {2, 4, 8, 8}, [](const Tensor& x) { return max_pool2d(x, {2, 2, 2, 2}); }));
    c.push_back(pool_case("avg_pool_2x2", {2, 4, 8, 8}, [](const Tensor& x) { return avg_pool2d(x, {2, 2, 2, 2}); }));
    c.push_back(pool_case("avg_pool_3x3_s1_p1", {2, 3, 7, 6}, [](const Tensor& x) {
      return avg_pool2d(x, {3, 3, 1, 1, 1, 1});
    }));
    c.push_back(
        pool_case("adaptive_avg_1x1", {2, 5, 7, 7}, [](const Tensor& x) { return adaptive_avg_pool2d(x, 1, 1); }));
    c.push_back(
        pool_case("adaptive_avg_7x7", {2, 3, 10, 9}, [](const Tensor& x) { return adaptive_avg_pool2d(x, 7, 7); }));
    c.push_back(pool_case("adaptive_avg_upsampling", {1, 2, 3, 2},
                          [](const Tensor& x) { return adaptive_avg_pool2d(x, 7, 7); }));
    // ---- channels_last (--channels-last) ----
    c.push_back(conv_cl_case("conv_cl_stem_7x7_s2", {2, 3, 32, 32}, {8, 3, 7, 7}, false, {2, 2, 3, 3, 1, 1, 1}));
    c.push_back(conv_cl_case("conv_cl_3x3_bias", {2, 8, 12, 12}, {16, 8, 3, 3}, true, {1, 1, 1, 1, 1, 1, 1}));
    c.push_back(conv_cl_case("conv_cl_1x1_s2", {2, 16, 9, 9}, {32, 16, 1, 1}, false, {2, 2, 0, 0, 1, 1, 1}));
    c.push_back(conv_cl_case("conv_cl_groups2", {2, 8, 10, 10}, {8, 4, 3, 3}, true, {1, 1, 1, 1, 1, 1, 2}));
    c.push_back({"batch_norm_cl_train_split",
                 {F({16, 3, 40, 40}), F({3}, true, 0.5, 1.5), F({3}), Buf({3}, 0, 0.1), Buf({3}, 0.9, 1.1)},
                 [](V& v) {
                   V w = v;
                   w[0] = cl(v[0]);
                   return bn_call(w, true);
                 },
                 N,
                 bn_types});
    c.push_back({"batch_norm_relu_cl_eval",
                 {F({4, 6, 5, 5}), F({6}, true, 0.5, 1.5), F({6}), Buf({6}, -0.2, 0.2), Buf({6}, 0.5, 1.5)},
                 [](V& v) {
                   V w = v;
                   w[0] = cl(v[0]);
                   return bn_call(w, false, true);
                 },
                 N,
                 bn_types});
    c.push_back(pool_case("max_pool_cl_3x3_s2_p1", {2, 5, 9, 9}, [](const Tensor& x) {
      return max_pool2d(cl(x), {3, 3, 2, 2, 1, 1});
    }));
    c.push_back(pool_case("avg_pool_cl_3x3_s1_p1", {2, 3, 7, 6}, [](const Tensor& x) {
      return avg_pool2d(cl(x), {3, 3, 1, 1, 1, 1});
    }));
    c.push_back(pool_case("adaptive_avg_cl_7x7", {2, 3, 10, 9},
                          [](const Tensor& x) { return adaptive_avg_pool2d(cl(x), 7, 7); }));
    c.push_back({"add_relu_cl", {F({2, 6, 5, 7}), F({2, 6, 5, 7})},
                 [](V& v) { Tensor y = cl(scale(v[0], 1.0)); return add_relu_(y, cl(v[1])); }, P});
    // ---- transformer ops ----
    auto ids = with(random_ints(21, 0, 50, 7), {{0, 0}, {5, 0}, {6, 13}, {7, 13}, {8, 13}});
    c.push_back(
        {"embedding_padding_idx", {F({50, 16}), Idx({3, 7}, ids)}, [](V& v) { return embedding(v[0], v[1], 0); }, N});
    c.push_back({"embedding", {F({50, 16}), Idx({3, 7}, ids)}, [](V& v) { return embedding(v[0], v[1]); }, N});
    c.push_back({"layer_norm", {F({6, 48}, true, -2, 3), F({48}, true, 0.5, 1.5), F({48})},
                 [](V& v) { return layer_norm(v[0], v[1], v[2], 1e-5); }, N});
    c.push_back({"group_norm", {F({2, 8, 3, 3}, true, -2, 3), F({8}, true, 0.5, 1.5), F({8})},
                 [](V& v) { return group_norm(v[0], 4, v[1], v[2], 1e-5); }, N});
    c.push_back({"group_norm_large_hw_no_affine", {F({3, 32, 20, 20}, true, -2, 3)},
                 [](V& v) { return group_norm(v[0], 32, Tensor(), Tensor(), 1e-5); }, N});
    c.push_back({"layer_norm_wide", {F({4, 768}, true, -2, 3), F({768}, true, 0.5, 1.5), F({768})},
                 [](V& v) { return layer_norm(v[0], v[1], v[2], 1e-12); }, N});
    // dweight/dbias over row splits (layernorm.cu): 301 rows = 4 splits of 76, the last 73;
    // 4289 rows = 67 splits of 65, split 65 holds 64 rows and split 66 none.
    c.push_back({"layer_norm_row_splits", {F({301, 40}, true, -2, 3), F({40}, true, 0.5, 1.5), F({40})},
                 [](V& v) { return layer_norm(v[0], v[1], v[2], 1e-5); }, N});
    c.push_back({"layer_norm_empty_last_split", {F({4289, 40}, true, -2, 3), F({40}, true, 0.5, 1.5), F({40})},
                 [](V& v) { return layer_norm(v[0], v[1], v[2], 1e-5); }, N});
    const std::vector<int64_t> mask = {0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1};
    const std::vector<int64_t> mask_all = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    c.push_back({"masked_softmax", {F({2, 3, 4, 7}, true, -3, 3), Mask({2, 7}, mask)},
                 [](V& v) { return masked_softmax(v[0], v[1], 0.5); }, N});
    c.push_back({"masked_softmax_all_padded_row", {F({2, 2, 3, 7}, true, -3, 3), Mask({2, 7}, mask_all)},
                 [](V& v) { return masked_softmax(v[0], v[1], 1.0); }, N});
    c.push_back({"masked_softmax_no_mask",
                 {F({5, 9}, true, -3, 3)},
                 [](V& v) { return masked_softmax(v[0], Tensor(), 1.0); },
                 N});
    // causal (GPT-2's mask, issue 32): the eager path's masked_softmax; Tq < Tk and with padding
    c.push_back({"masked_softmax_causal", {F({2, 3, 7, 7}, true, -3, 3), Mask({2, 7}, mask)},
                 [](V& v) { return masked_softmax(v[0], v[1], 0.5, true); }, N});
    c.push_back({"masked_softmax_causal_wide", {F({1, 2, 40, 300}, true, -3, 3)},
                 [](V& v) { return masked_softmax(v[0], Tensor(), 1.0, true); }, N});
    c.push_back(
        {"attention_causal",
         {F({2, 2, 6, 8}), F({2, 2, 6, 8}), F({2, 2, 6, 6})},
         [](V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], Tensor(), 0.0, false, nullptr, true); },
         N});
    c.push_back({"attention", {F({2, 2, 5, 8}), F({2, 2, 7, 8}), F({2, 2, 7, 6}), Mask({2, 7}, mask)},
                 [](V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], v[3], 0.0, false); }, N});
    c.push_back({"attention_dropout",
                 {F({2, 2, 5, 8}), F({2, 2, 7, 8}), F({2, 2, 7, 6}), Mask({2, 7}, mask)},
                 [](V& v) {
                   Generator g{77, 0};
                   return scaled_dot_product_attention(v[0], v[1], v[2], v[3], 0.2, true, g);
                 },
                 N});
    c.push_back({"fused_attention", {F({2, 2, 5, 8}), F({2, 2, 7, 8}), F({2, 2, 7, 6}), Mask({2, 7}, mask_all)},
                 [](V& v) { return fused_scaled_dot_product_attention(v[0], v[1], v[2], v[3], 0.0, false); }, N});
    c.push_back({"fused_attention_dropout", {F({2, 2, 5, 8}), F({2, 2, 7, 8}), F({2, 2, 7, 6}), Mask({2, 7}, mask)},
                 [](V& v) {
                   Generator g{77, 0};
                   return fused_scaled_dot_product_attention(v[0], v[1], v[2], v[3], 0.2, true, &g);
                 }, N});
    // Several tiles of the tiled kernels (64 query rows, 32 keys per tile; head dim 64 at compile
    // time): 70 queries, 130 keys of which the last 10 padded, dropout.
    std::vector<int64_t> mask130(130, 0);
    std::fill(mask130.begin() + 120, mask130.end(), 1);
    c.push_back({"fused_attention_tiles",
                 {F({1, 2, 70, 64}), F({1, 2, 130, 64}), F({1, 2, 130, 64}), Mask({1, 130}, mask130)},
                 [](V& v) {
                   Generator g{78, 0};
                   return fused_scaled_dot_product_attention(v[0], v[1], v[2], v[3], 0.1, true, &g);
                 },
                 N});
    // Head dim 64 over two batches, the second with every key padded (zero outputs and
    // gradients), no dropout: the tiled and the flash kernels' (OOMLAB_CUDA_FLASH_ATTENTION)
    // empty rows and partial tiles on both sides.
    std::vector<int64_t> mask2x65(130, 0);
    std::fill(mask2x65.begin() + 60, mask2x65.begin() + 65, 1);
    std::fill(mask2x65.begin() + 65, mask2x65.end(), 1);
    c.push_back({"fused_attention_tiles_padded_batch",
                 {F({2, 3, 33, 64}), F({2, 3, 65, 64}), F({2, 3, 65, 64}), Mask({2, 65}, mask2x65)},
                 [](V& v) { return fused_scaled_dot_product_attention(v[0], v[1], v[2], v[3], 0.0, false); }, N});
    // causal fused attention (GPT-2 graphs with --attention fused): Tq < Tk with padding, and
    // 130 x 130 with dropout, where whole tiles are skipped (tiled kernels) on both sides.
    c.push_back(
        {"fused_attention_causal",
         {F({2, 2, 5, 8}), F({2, 2, 7, 8}), F({2, 2, 7, 6}), Mask({2, 7}, mask)},
         [](V& v) { return fused_scaled_dot_product_attention(v[0], v[1], v[2], v[3], 0.0, false, nullptr, true); },
         N});
    c.push_back({"fused_attention_causal_tiles", {F({1, 2, 130, 64}), F({1, 2, 130, 64}), F({1, 2, 130, 64})},
                 [](V& v) {
                   Generator g{79, 0};
                   return fused_scaled_dot_product_attention(v[0], v[1], v[2], Tensor(), 0.1, true, &g, true);
                 }, N});
    c.push_back({"cat_split", {F({3, 5, 4})}, [](V& v) {
                   auto p = split(v[0], {2, 3}, 1);
                   return cat({mul(p[1], p[1]), p[0]}, 1);
                 }, P});
    c.push_back({"chunk_cat_dim0", {F({4, 3}), F({2, 3})}, [](V& v) {
                   auto p = chunk(v[0], 2, 0);
                   return cat({p[1], v[1], p[0]}, 0);
                 }, P});
    // ---- views and casts (copy kernels) ----
    c.push_back({"permute_contiguous",
                 {F({3, 4, 5}), F({5, 3, 4})},
                 [](V& v) {
                   return mul(v[0].permute({2, 0, 1}).contiguous(), v[1]);
                 },
                 P});
    c.push_back({"narrow_transpose",
                 {F({6, 5})},
                 [](V& v) { return scale(v[0].transpose(0, 1).narrow(0, 1, 3).contiguous(), 2.0); },
                 P});
    c.push_back({"reshape_flatten",
                 {F({2, 3, 4, 5})},
                 [](V& v) {
                   return scale(v[0].flatten(1).reshape({6, 20}), -1.0);
                 },
                 P});
    c.push_back({"cast_to_f64", {F({4, 9})}, [](V& v) { return scale(v[0].to(f64), 1.0); }, P});
    c.push_back({"cast_to_f32", {F({4, 9})}, [](V& v) { return scale(v[0].to(f32), 1.0); }, P});
    // ---- vision ----
    c.push_back({"upsample_nearest", {F({2, 3, 5, 6})}, [](V& v) { return upsample2x(v[0], "nearest"); }, N});
    c.push_back({"upsample_bilinear", {F({2, 3, 5, 6})}, [](V& v) { return upsample2x(v[0], "bilinear"); }, N});
    return c;
  }();
  return cases;
}

std::vector<size_t> case_indices() {
  std::vector<size_t> v(op_cases().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}
}  // namespace

class CudaOpParity : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaOpParity, ForwardBackwardMatchCpu) {
  OOMLAB_REQUIRE_CUDA();
  const OpCase& c = op_cases()[GetParam()];
  for (DType d : c.dtypes) run_op_case(c, d);
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaOpParity, ::testing::ValuesIn(case_indices()),
                         [](const auto& info) { return op_cases()[info.param].name; });

// The op table itself is checked without a GPU: unique gtest-safe names, every case has
// float32, and the reference side runs (shapes/arguments valid) on the CPU.
TEST(CudaOpParityTable, CasesAreWellFormedOnCpu) {
  std::set<std::string> names;
  for (const OpCase& c : op_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
    EXPECT_TRUE(std::all_of(c.name.begin(), c.name.end(), [](char ch) {
      return std::isalnum(uint8_t(ch)) || ch == '_';
    })) << c.name;
    EXPECT_NE(std::find(c.dtypes.begin(), c.dtypes.end(), f32), c.dtypes.end()) << c.name;
    std::vector<Tensor> in;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const Input& s = c.inputs[i];
      if (s.kind == Kind::index) {
        ASSERT_EQ(int64_t(s.ints.size()), shape_numel(s.shape)) << c.name;
        in.push_back(Tensor::from_vector_i64(s.ints, s.shape));
      } else if (s.kind == Kind::mask)
        in.push_back(Tensor::from_vector(std::vector<double>(s.ints.begin(), s.ints.end()), s.shape, DType::u8));
      else {
        in.push_back(random_tensor(s.shape, s.lo, s.hi, 1000 + i, f32));
        if (s.kind == Kind::floating && s.grad) in.back().set_requires_grad(true);
      }
    }
    Tensor y;
    ASSERT_NO_THROW(y = c.fn(in)) << c.name;
    EXPECT_GT(y.numel(), 0) << c.name;
  }
}
