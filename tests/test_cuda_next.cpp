// test_cuda_next.cpp — the GPU paths written since the last GPU run, behind their switches
// (cuda_settings.h, default off until the kit measures them; gpu_run.sh's NEXT), against the
// default path and the CPU:
//  * the split embedding backward (OOMLAB_CUDA_EMBEDDING_SPLIT): bit for bit;
//  * layer_norm's unrolled forward and dx kernels (OOMLAB_CUDA_LN_UNROLL): bit for bit against
//    the default kernels (the same operations in the same order); the forward's y against the
//    CPU bit for bit in float32 (layernorm.cu's contract);
//  * channels_last BatchNorm's one-pass statistics (OOMLAB_CUDA_BN_CL_ONE_PASS): running and
//    saved statistics within 2 float32 ulps of the two-pass kernels' on channels far from zero,
//    y and the gradients within float32 rounding;
//  * dropout's vectorized kernels (OOMLAB_CUDA_DROPOUT_VEC): y and dx bit for bit against the
//    scalar kernels and the CPU, on a whole tensor and on a view one element in;
//  * strided copies with 32-bit offsets (OOMLAB_CUDA_COPY_FASTDIV): BERT's head-layout permute
//    and a channels_last conversion, every dtype, bit for bit against the int64 path and the CPU;
//  * linear's bias in cuBLASLt epilogues (OOMLAB_CUDA_LINEAR_LT): y and every gradient within
//    rounding of the unfused path, and whether cuBLASLt offers each epilogue at BERT's shapes;
//  * the NCHW convolution bias add by planes (OOMLAB_CUDA_BIAS_PLANES): bit for bit;
//  * fused attention on 16-bit tensor cores (OOMLAB_CUDA_MMA_ATTENTION): out and the three
//    gradients within 16-bit rounding of the CPU and of the TF32 kernels it replaces.
// Each test sets its switch itself and restores the default. Everything GTEST_SKIPs with the
// reason when no CUDA device is usable.
// ctest tier: gpu
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda_test_util.h"
#include "engine/ops/attention.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/conv.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/embedding.h"
#include "engine/ops/layernorm.h"
#include "engine/ops/linear.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/linear_lt.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
bool same_bytes(const Tensor& a, const Tensor& b) {
  Tensor x = to_host(a).contiguous(), y = to_host(b).contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// The largest |a - b| / |b| over float32 elements (0 where both are 0).
double max_rel(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_host(a).contiguous().to_vector(), y = to_host(b).contiguous().to_vector();
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i]) worst = std::max(worst, std::fabs(x[i] - y[i]) / std::fabs(y[i]));
  return worst;
}
}  // namespace

// ---- embedding backward -----------------------------------------------------------------
// The split backward (OOMLAB_CUDA_EMBEDDING_SPLIT, embedding.cu: column chunks on blocks side by
// side, eight reads in flight) adds the same rows in the same order as the default kernel and
// the CPU: bit for bit. 700 positions of 5 ids (~140 each: groups of eight and a tail, three
// compaction rounds), 600 columns (three chunks, the last partial). With one out-of-range id
// (which the CUDA kernels skip and the CPU refuses) split and default are compared alone.
TEST(CudaEmbedding, SplitBackwardIsBitIdenticalToTheDefaultAndTheCpu) {
  OOMLAB_REQUIRE_CUDA();
  std::vector<int64_t> v = random_ints(700, 0, 5, 31);
  const Tensor ids = Tensor::from_vector_i64(v, {2, 350});
  v[3] = 9;
  const Tensor ids_out_of_range = Tensor::from_vector_i64(v, {2, 350});
  for (DType t : {DType::f32, DType::f64}) {
    const Tensor gy = random_tensor({2, 350, 600}, -1, 1, 32, t);
    auto grad_of = [&](Device dev, bool split, const Tensor& id) {
      set_cuda_embedding_split(split);
      Tensor w = to_device(random_tensor({5, 600}, -1, 1, 33, t), dev);
      w.set_requires_grad(true);
      sum_all(mul(embedding(w, to_device(id, dev)), to_device(gy, dev))).backward();
      set_cuda_embedding_split(false);
      return to_host(w.grad());
    };
    const Tensor cpu = grad_of(cpu_device(), false, ids);
    EXPECT_TRUE(same_bytes(grad_of(cuda0(), false, ids), cpu)) << dtype_name(t);
    EXPECT_TRUE(same_bytes(grad_of(cuda0(), true, ids), cpu)) << dtype_name(t);
    EXPECT_TRUE(same_bytes(grad_of(cuda0(), true, ids_out_of_range), grad_of(cuda0(), false, ids_out_of_range)))
        << dtype_name(t) << " with an out-of-range id";
  }
}

// ---- layer_norm, unrolled ---------------------------------------------------------------
// BERT's widths (768) and a ragged one (200: a tail past the 8-lane main part, rows not a
// multiple of the 32 a block takes), float32 and float64; y and the three gradients.
TEST(CudaLayerNorm, UnrolledKernelsAreBitIdenticalToTheDefault) {
  OOMLAB_REQUIRE_CUDA();
  for (DType t : {DType::f32, DType::f64})
    for (const Shape& shape : {Shape{4, 128, 768}, Shape{45, 200}}) {
      const int64_t H = shape.back();
      const Tensor x = random_tensor(shape, -2, 3, 41, t), gy = random_tensor(shape, -1, 1, 42, t);
      const Tensor w0 = random_tensor({H}, 0.5, 1.5, 43, t), b0 = random_tensor({H}, -0.5, 0.5, 44, t);
      auto run = [&](Device dev, bool unroll) {
        set_cuda_ln_unroll(unroll);
        Tensor xd = to_device(x, dev), w = to_device(w0, dev), b = to_device(b0, dev);
        for (Tensor* p : {&xd, &w, &b}) p->set_requires_grad(true);
        const Tensor y = layer_norm(xd, w, b, 1e-12);
        sum_all(mul(y, to_device(gy, dev))).backward();
        set_cuda_ln_unroll(false);
        return std::vector<Tensor>{to_host(y), to_host(xd.grad()), to_host(w.grad()), to_host(b.grad())};
      };
      const std::vector<Tensor> dflt = run(cuda0(), false), unrolled = run(cuda0(), true),
                                cpu = run(cpu_device(), false);
      const char* names[] = {"y", "dx", "dweight", "dbias"};
      for (size_t i = 0; i < dflt.size(); ++i)
        EXPECT_TRUE(same_bytes(unrolled[i], dflt[i])) << names[i] << " " << dtype_name(t) << " H=" << H;
      if (t == DType::f32) {
        EXPECT_TRUE(same_bytes(dflt[0], cpu[0])) << "y vs the CPU, H=" << H;
      }
    }
}

// ---- channels_last batch_norm, one-pass statistics ---------------------------------------
// Channels with means far from zero (up to 2,000 times their spread) and the shift K an outlier:
// the case the shifted sums are for. M = 16*20*20 = 6400 rows of 35 channels (two 32-lane tiles).
TEST(CudaBatchNormChannelsLast, OnePassStatisticsMatchTwoPass) {
  OOMLAB_REQUIRE_CUDA();
  const int64_t C = 35;
  std::vector<double> xv = random_tensor({16, C, 20, 20}, -1, 1, 51, DType::f32).to_vector();
  for (size_t i = 0; i < xv.size(); ++i) xv[i] += 60.0 * double(int64_t(i) / 400 % C);   // channel c: + 60c
  xv[400 * 7] += 30.0;   // channel 7's first element (NCHW index 7 * 400) far out
  const Tensor x = Tensor::from_vector(xv, {16, C, 20, 20}), gy = random_tensor({16, C, 20, 20}, -1, 1, 52, DType::f32);
  const Tensor w0 = random_tensor({C}, 0.5, 1.5, 53, DType::f32), b0 = random_tensor({C}, -0.5, 0.5, 54, DType::f32);
  auto run = [&](bool one_pass) {
    set_cuda_bn_cl_one_pass(one_pass);
    Tensor xd = to_device(x, cuda0()).contiguous(MemoryFormat::channels_last);
    Tensor w = to_device(w0, cuda0()), b = to_device(b0, cuda0());
    Tensor rm = to_device(Tensor::zeros({C}, DType::f32, cpu_device()), cuda0());
    Tensor rv = to_device(Tensor::ones({C}, DType::f32, cpu_device()), cuda0());
    for (Tensor* p : {&xd, &w, &b}) p->set_requires_grad(true);
    const Tensor y = batch_norm(xd, w, b, rm, rv, true);
    sum_all(mul(y, to_device(gy, cuda0()).contiguous(MemoryFormat::channels_last))).backward();
    set_cuda_bn_cl_one_pass(false);
    return std::vector<Tensor>{rm, rv, y, xd.grad(), w.grad(), b.grad()};
  };
  const std::vector<Tensor> two = run(false), one = run(true);
  EXPECT_LE(max_rel(one[0], two[0]), 0x1p-22) << "running_mean";
  EXPECT_LE(max_rel(one[1], two[1]), 0x1p-22) << "running_var";
  const char* names[] = {"y", "dx", "dweight", "dbias"};
  for (size_t i = 2; i < two.size(); ++i) {   // through float32 statistics: rounding, not digits lost
    const std::vector<double> a = to_host(one[i]).contiguous().to_vector(),
                              r = to_host(two[i]).contiguous().to_vector();
    double scale = 1e-30, worst = 0.0;
    for (size_t k = 0; k < r.size(); ++k) {
      scale = std::max(scale, std::fabs(r[k]));
      worst = std::max(worst, std::fabs(a[k] - r[k]));
    }
    EXPECT_LE(worst, 1e-5 * scale) << names[i - 2];
  }
}

// ---- dropout, vectorized -----------------------------------------------------------------
// 4099 elements (a partial last Philox block) in every dtype; the view one element in is not
// aligned to the vectors (the kernels' scalar form).
TEST(CudaDropout, VectorizedKernelsAreBitIdenticalToTheScalarOnesAndTheCpu) {
  OOMLAB_REQUIRE_CUDA();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (int64_t skip : {0, 1}) {
      const Tensor x0 = random_tensor({4100}, -1, 1, 61, t), gy = random_tensor({4100 - skip}, -1, 1, 62, t);
      auto run = [&](Device dev, bool vec) {
        set_cuda_dropout_vec(vec);
        Tensor x = to_device(x0, dev);
        x.set_requires_grad(true);
        Generator gen{1234, 56};
        const Tensor y = dropout(x.narrow(0, skip, 4100 - skip), 0.3, true, gen);
        sum_all(mul(y, to_device(gy, dev))).backward();
        set_cuda_dropout_vec(false);
        return std::vector<Tensor>{to_host(y), to_host(x.grad())};
      };
      const std::vector<Tensor> scalar = run(cuda0(), false), vec = run(cuda0(), true), cpu = run(cpu_device(), false);
      for (size_t i = 0; i < 2; ++i) {
        EXPECT_TRUE(same_bytes(vec[i], scalar[i])) << (i ? "dx " : "y ") << dtype_name(t) << " skip " << skip;
        EXPECT_TRUE(same_bytes(vec[i], cpu[i])) << (i ? "dx vs the CPU " : "y vs the CPU ") << dtype_name(t);
      }
    }
}

// ---- strided copies, 32-bit offsets -----------------------------------------------------
TEST(CudaCopy, FastDivisionOffsetsGiveTheSameBytes) {
  OOMLAB_REQUIRE_CUDA();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::u8}) {
    const Tensor host = random_tensor({4, 10, 3, 16}, -50, 50, 81, DType::f64).to(t);
    auto copies = [&](Device dev, bool fast) {
      set_cuda_copy_fastdiv(fast);
      const Tensor x = to_device(host, dev);
      std::vector<Tensor> out = {to_host(x.permute({0, 2, 1, 3}).contiguous()),                 // [B, NH, T, D]
                                 to_host(x.contiguous(MemoryFormat::channels_last))};            // NCHW -> NHWC
      set_cuda_copy_fastdiv(false);
      return out;
    };
    const std::vector<Tensor> slow = copies(cuda0(), false), fast = copies(cuda0(), true),
                              cpu = copies(cpu_device(), false);
    for (size_t i = 0; i < slow.size(); ++i) {
      EXPECT_TRUE(same_bytes(fast[i], slow[i])) << dtype_name(t) << " copy " << i;
      EXPECT_TRUE(same_bytes(fast[i], cpu[i])) << dtype_name(t) << " copy " << i << " vs the CPU";
    }
  }
}

// ---- linear's bias in cuBLASLt epilogues --------------------------------------------------
// OOMLAB_CUDA_LINEAR_LT: the bias add (EPILOGUE_BIAS) and the bias gradient (BGRADB, BGRADA for
// a weight kept as its transpose) fused into the GEMMs: y, dx, dw and db within the dtype's
// rounding of the unfused path (cuBLASLt's own algorithm and its float32 sums: not bit for bit).
TEST(CudaLinearLt, FusedBiasMatchesTheUnfusedPath) {
  OOMLAB_REQUIRE_CUDA();
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (bool transposed : {false, true}) {
      const Tensor x0 = random_tensor({3, 37, 96}, -1, 1, 91, t), gy = random_tensor({3, 37, 80}, -1, 1, 92, t);
      const Tensor w0 = random_tensor(transposed ? Shape{96, 80} : Shape{80, 96}, -0.2, 0.2, 93, t);
      const Tensor b0 = random_tensor({80}, -1, 1, 94, t);
      auto run = [&](bool lt) {
        set_cuda_linear_lt(lt);
        Tensor x = to_device(x0, cuda0()), w = to_device(w0, cuda0()), b = to_device(b0, cuda0());
        for (Tensor* p : {&x, &w, &b}) p->set_requires_grad(true);
        const Tensor y = linear(x, transposed ? w.transpose(0, 1) : w, b);
        sum_all(mul(y, to_device(gy, cuda0()))).backward();
        set_cuda_linear_lt(false);
        return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
      };
      const std::vector<Tensor> off = run(false), on = run(true);
      // Within the dtype's rounding of the tensor's largest value: another GEMM algorithm sums in
      // another order, and a 16-bit y is rounded once instead of twice (product, then + bias).
      const double rtol = tolerance(t).rtol;
      const char* names[] = {"y", "dx", "dw", "db"};
      for (size_t i = 0; i < off.size(); ++i) {
        const std::vector<double> got = values(on[i]), want = values(off[i]);
        double scale = 0.0;
        for (double v : want) scale = std::max(scale, std::fabs(v));
        EXPECT_TRUE(all_close(got, want, 0.0, 4 * rtol * scale))
            << names[i] << " " << dtype_name(t) << (transposed ? " (transposed weight)" : "");
      }
    }
}

// Whether cuBLASLt offers an algorithm for each epilogue at BERT-base's shapes (4096 rows,
// 768 -> 3072): where it offers none the switch silently runs the unfused path, and this row
// says so (a kit run then knows the switch measured nothing there).
TEST(CudaLinearLt, CublasLtOffersEachEpilogueAtBertShapes) {
  OOMLAB_REQUIRE_CUDA();
  for (DType t : {DType::f32, DType::bf16}) {
    const int64_t R = 4096, I = 768, O = 3072;
    const Tensor x = Tensor::zeros({R, I}, t, cuda0()), w = Tensor::zeros({O, I}, t, cuda0()),
                 b = Tensor::zeros({O}, t, cuda0()), g = Tensor::zeros({R, O}, t, cuda0());
    Tensor y = Tensor::empty({R, O}, t, cuda0()), gw = Tensor::empty({O, I}, t, cuda0()),
           gwt = Tensor::empty({I, O}, t, cuda0()), gb = Tensor::empty({O}, t, cuda0());
    CurrentDeviceGuard guard(cuda0());
    GemmArgs fwd{false, true, R, O, I, 1.0, x.raw_data(), I, w.raw_data(), I, 0.0, y.raw_data(), O};
    fwd.bias = b.raw_data();
    GemmArgs dw{true, false, O, I, R, 1.0, g.raw_data(), O, x.raw_data(), I, 0.0, gw.raw_data(), I};
    dw.a_row_sums = gb.raw_data();
    GemmArgs dwt{true, false, I, O, R, 1.0, x.raw_data(), I, g.raw_data(), O, 0.0, gwt.raw_data(), O};
    dwt.b_col_sums = gb.raw_data();
    EXPECT_TRUE(cuda::gemm_lt(fwd, t)) << "EPILOGUE_BIAS " << dtype_name(t);
    EXPECT_TRUE(cuda::gemm_lt(dw, t)) << "EPILOGUE_BGRADB " << dtype_name(t);
    EXPECT_TRUE(cuda::gemm_lt(dwt, t)) << "EPILOGUE_BGRADA " << dtype_name(t);
  }
}

// ---- convolution bias by planes ---------------------------------------------------------------
// OOMLAB_CUDA_BIAS_PLANES: the NCHW bias add (conv2d, conv2d_relu, conv_transpose2d) on a (plane,
// position) grid: the same bits as the flat kernel, every dtype; a channels_last output (the flat
// kernel still, its planes being one element) unchanged too.
TEST(CudaConvBias, PlanesGiveTheSameBytes) {
  OOMLAB_REQUIRE_CUDA();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor x0 = random_tensor({3, 5, 12, 11}, -1, 1, 101, t), w0 = random_tensor({7, 5, 3, 3}, -0.3, 0.3, 102, t);
    const Tensor b0 = random_tensor({7}, -1, 1, 103, t), wt0 = random_tensor({5, 7, 2, 2}, -0.3, 0.3, 104, t);
    auto outs = [&](bool planes) {
      set_cuda_bias_planes(planes);
      const Tensor x = to_device(x0, cuda0()), w = to_device(w0, cuda0()), b = to_device(b0, cuda0());
      Conv2dParams p;
      p.pad_h = p.pad_w = 1;
      std::vector<Tensor> out = {to_host(conv2d(x, w, b, p)), to_host(conv2d_relu(x, w, b, p)),
                                 to_host(conv_transpose2d(x, to_device(wt0, cuda0()), b,
                                                          ConvTranspose2dParams{2})),
                                 to_host(conv2d(x.contiguous(MemoryFormat::channels_last), w, b, p))};
      set_cuda_bias_planes(false);
      return out;
    };
    const std::vector<Tensor> flat = outs(false), planes = outs(true);
    for (size_t i = 0; i < flat.size(); ++i)
      EXPECT_TRUE(same_bytes(planes[i], flat[i])) << dtype_name(t) << " output " << i;
  }
}

// ---- fused attention, 16-bit mma --------------------------------------------------------
// BERT's head dim (64) over partial tiles on both sides (130 queries and keys: two 64-row
// blocks and a tail, five 32-row backward tiles), the second batch's last 40 keys padded,
// dropout 0.1 replayed in backward, and the causal variant; float16 and bfloat16. The
// probabilities and dS are rounded to the 16-bit type for their products (FlashAttention's
// rule), so the bar is relative to each tensor's largest magnitude: 2e-2 (bf16), 3e-3 (f16).
namespace {
double err_of_max(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_host(a).contiguous().to_vector(), y = to_host(b).contiguous().to_vector();
  double scale = 1e-30, worst = 0.0;
  for (double v : y) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst / scale;
}
}  // namespace

TEST(CudaMmaAttention, MatchesTheCpuAndTheTf32KernelsWithinRounding) {
  OOMLAB_REQUIRE_CUDA();
  std::vector<double> m(2 * 130, 0.0);
  std::fill(m.begin() + 130 + 90, m.end(), 1.0);
  const Tensor mask0 = Tensor::from_vector(m, {2, 130}, DType::u8);
  for (DType t : {DType::bf16, DType::f16})
    for (bool causal : {false, true}) {
      const Tensor q0 = random_tensor({2, 3, 130, 64}, -1, 1, 111, t),
                   k0 = random_tensor({2, 3, 130, 64}, -1, 1, 112, t);
      const Tensor v0 = random_tensor({2, 3, 130, 64}, -1, 1, 113, t),
                   g0 = random_tensor({2, 3, 130, 64}, -1, 1, 114, t);
      auto run = [&](Device dev, bool mma) {
        set_cuda_mma_attention(mma);
        std::vector<Tensor> in;
        for (const Tensor* x : {&q0, &k0, &v0}) {
          in.push_back(to_device(*x, dev));
          in.back().set_requires_grad(true);
        }
        Generator gen{4242, 7};
        const Tensor y = fused_scaled_dot_product_attention(in[0], in[1], in[2], to_device(mask0, dev), 0.1, true, &gen,
                                                            causal);
        sum_all(mul(y, to_device(g0, dev))).backward();
        set_cuda_mma_attention(false);
        return std::vector<Tensor>{to_host(y), to_host(in[0].grad()), to_host(in[1].grad()), to_host(in[2].grad())};
      };
      const std::vector<Tensor> cpu = run(cpu_device(), false), tf32 = run(cuda0(), false), mma = run(cuda0(), true);
      const double bar = t == DType::bf16 ? 2e-2 : 3e-3;
      const char* names[] = {"out", "dq", "dk", "dv"};
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_LE(err_of_max(mma[i], cpu[i]), bar)
            << names[i] << " vs the CPU, " << dtype_name(t) << (causal ? " causal" : "");
        EXPECT_LE(err_of_max(mma[i], tf32[i]), bar)
            << names[i] << " vs TF32, " << dtype_name(t) << (causal ? " causal" : "");
      }
    }
}
