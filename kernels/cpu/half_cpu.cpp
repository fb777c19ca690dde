// half_cpu.cpp — float16 and bfloat16 CPU kernels for every op family on the mixed-
// precision paths (autocast: linear / conv / attention products in 16 bits and what
// follows them; --half: the whole model), built from the float32 kernels: each 16-bit
// input is widened to a float32 scratch copy, the float32 kernel runs, each 16-bit output
// is rounded back (round to nearest even, dtype.h). "Compute in float32, store in the low
// type", so CI tests the numerics the GPU kernels have (cuBLAS / cuDNN accumulate half
// types in float32). Pointers of other dtypes pass through: BatchNorm's float32 weight,
// bias and statistics with a 16-bit input; LayerNorm's float32 mean / rstd; masks,
// indices, targets. Scratch is host memory outside the caching allocator, so allocation
// traces (and the meta = cpu invariant) are those of the ops, as on a GPU. Thread-count
// independent: the conversions are elementwise and the float32 kernels are.
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/activation.h"
#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/groupnorm.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/loss.h"
#include "kernels/optim.h"
#include "kernels/pool.h"
#include "kernels/softmax.h"
#include "kernels/upsample.h"

namespace oomlab {
namespace {

// Scratch float32 copies of one call's 16-bit buffers (dtype H); narrow() writes the
// outputs back. Null pointers stay null.
template <DType H> class Widen {
 public:
  const float* in(const void* p, int64_t n) { return p ? widen(p, n) : nullptr; }
  float* inout(void* p, int64_t n) {
    if (!p) return nullptr;
    float* f = widen(p, n);
    outs_.push_back({p, f, n});
    return f;
  }
  float* out(void* p, int64_t n) {
    if (!p) return nullptr;
    float* f = scratch(n);
    outs_.push_back({p, f, n});
    return f;
  }
  void narrow() {
    for (const Out& o : outs_) {
      float_to_low(H, o.src, static_cast<uint16_t*>(o.dst), o.n);
    }
  }

 private:
  struct Out { void* dst; const float* src; int64_t n; };
  float* scratch(int64_t n) {
    bufs_.push_back(std::make_unique<float[]>(size_t(std::max<int64_t>(n, 1))));
    return bufs_.back().get();
  }
  float* widen(const void* p, int64_t n) {
    float* f = scratch(n);
    low_to_float(H, static_cast<const uint16_t*>(p), f, n);
    return f;
  }
  std::vector<std::unique_ptr<float[]>> bufs_;
  std::vector<Out> outs_;
};

// Runs the float32 kernel of `table` on the widened copy `f`.
template <class Args> void run_f32(KernelTable<Args>& table, const Args& f) {
  table.launch(current_device(), DType::f32, f);   // the cpu:N this 16-bit launch runs on
}

// ---- linear ---------------------------------------------------------------------------
template <DType H> void gemm_half(const GemmArgs& a) {
  Widen<H> w;
  GemmArgs f = a;
  f.A = w.in(a.A, gemm_extent(a.batch, a.stride_a, a.trans_a ? a.K : a.M, a.lda));
  f.B = w.in(a.B, gemm_extent(a.batch, a.stride_b, a.trans_b ? a.N : a.K, a.ldb));
  const int64_t cn = gemm_extent(a.batch, a.stride_c, a.M, a.ldc);
  // C's gaps (ldc > N, or batches further apart than M * ldc) are read so that narrowing
  // writes them back unchanged.
  const bool gapless = a.ldc == a.N && (a.batch <= 1 || a.stride_c == a.M * a.ldc);
  f.C = (a.beta != 0 || !gapless) ? w.inout(a.C, cn) : w.out(a.C, cn);
  run_f32(gemm_kernels(), f);
  w.narrow();
}
template <DType H> void bias_add_rows_half(const BiasAddRowsArgs& a) {
  Widen<H> w;
  BiasAddRowsArgs f = a;
  f.out = w.inout(a.out, a.rows * a.cols);
  f.bias = w.in(a.bias, a.cols);
  run_f32(bias_add_rows_kernels(), f);
  w.narrow();
}
template <DType H> void bias_grad_rows_half(const BiasGradRowsArgs& a) {
  Widen<H> w;
  BiasGradRowsArgs f = a;
  f.grad_bias = w.out(a.grad_bias, a.cols);
  f.grad = w.in(a.grad, a.rows * a.cols);
  run_f32(bias_grad_rows_kernels(), f);
  w.narrow();
}

// ---- conv -----------------------------------------------------------------------------
template <DType H> Conv2dArgs conv_widened(const Conv2dArgs& a, Widen<H>& w, KernelTable<Conv2dArgs>& t) {
  const int64_t xn = a.N * a.C * a.H * a.W, wn = a.K * (a.C / std::max<int64_t>(a.p.groups, 1)) * a.R * a.S,
                yn = a.N * a.K * a.P * a.Q;
  Conv2dArgs f = a;
  if (&t == &conv2d_forward_kernels()) {
    f.x = w.in(a.x, xn); f.w = w.in(a.w, wn); f.y = w.out(a.y, yn);
  } else if (&t == &conv2d_backward_data_kernels()) {
    f.dy = w.in(a.dy, yn); f.w = w.in(a.w, wn); f.dx = w.out(a.dx, xn);
  } else {
    f.x = w.in(a.x, xn); f.dy = w.in(a.dy, yn); f.dw = w.out(a.dw, wn);
  }
  return f;
}
template <DType H, KernelTable<Conv2dArgs>& (*Table)()> void conv_half(const Conv2dArgs& a) {
  Widen<H> w;
  run_f32(Table(), conv_widened(a, w, Table()));
  w.narrow();
}
template <DType H> void channel_bias_add_half(const ChannelBiasArgs& a) {
  Widen<H> w;
  ChannelBiasArgs f = a;
  f.y = w.inout(a.y, a.N * a.K * a.HW);
  f.b = w.in(a.b, a.K);
  run_f32(channel_bias_add_kernels(), f);
  w.narrow();
}
template <DType H> void channel_bias_grad_half(const ChannelBiasArgs& a) {
  Widen<H> w;
  ChannelBiasArgs f = a;
  f.dy = w.in(a.dy, a.N * a.K * a.HW);
  f.db = w.out(a.db, a.K);
  run_f32(channel_bias_grad_kernels(), f);
  w.narrow();
}

// ---- elementwise families of n elements: x, y, dy, dx -----------------------------------
// (relu / sigmoid / gelu / dropout share the field names; forward reads x, writes y;
// backward reads y (relu, sigmoid) or x (gelu) and dy, writes dx.)
template <DType H, class Args, KernelTable<Args>& (*Table)(), bool Backward> void pointwise_half(const Args& a) {
  Widen<H> w;
  Args f = a;
  if (!Backward) {
    f.x = w.in(a.x, a.n);
    f.y = w.out(a.y, a.n);
  } else {
    f.x = w.in(a.x, a.n);
    f.y = const_cast<float*>(w.in(a.y, a.n));   // read only in backward
    f.dy = w.in(a.dy, a.n);
    f.dx = w.out(a.dx, a.n);
  }
  run_f32(Table(), f);
  w.narrow();
}
template <DType H> void dropout_forward_half(const DropoutArgs& a) {
  Widen<H> w;
  DropoutArgs f = a;
  f.x = w.in(a.x, a.n);
  f.y = w.out(a.y, a.n);
  run_f32(dropout_forward_kernels(), f);
  w.narrow();
}
template <DType H> void dropout_backward_half(const DropoutArgs& a) {
  Widen<H> w;
  DropoutArgs f = a;
  f.dy = w.in(a.dy, a.n);
  f.dx = w.out(a.dx, a.n);
  run_f32(dropout_backward_kernels(), f);
  w.narrow();
}
template <DType H> void axpby_half(const AxpbyArgs& a) {
  Widen<H> w;
  AxpbyArgs f = a;
  f.a = w.in(a.a, a.n);
  f.b = w.in(a.b, a.n);
  f.out = w.out(a.out, a.n);
  run_f32(axpby_kernels(), f);
  w.narrow();
}
template <DType H> void mul_half(const MulArgs& a) {
  Widen<H> w;
  MulArgs f = a;
  f.a = w.in(a.a, a.n);
  f.b = w.in(a.b, a.n);
  f.out = w.out(a.out, a.n);
  run_f32(mul_kernels(), f);
  w.narrow();
}
template <DType H> void sum_half(const SumArgs& a) {
  Widen<H> w;
  SumArgs f = a;
  f.a = w.in(a.a, a.n);
  f.out = w.out(a.out, 1);
  run_f32(sum_kernels(), f);
  w.narrow();
}

// ---- pool, upsample ----------------------------------------------------------------------
template <DType H, KernelTable<Pool2dArgs>& (*Table)(), bool Backward> void pool_half(const Pool2dArgs& a) {
  Widen<H> w;
  Pool2dArgs f = a;
  const int64_t xn = a.N * a.C * a.H * a.W, yn = a.N * a.C * a.P * a.Q;
  if (!Backward) { f.x = w.in(a.x, xn); f.y = w.out(a.y, yn); }
  else { f.x = w.in(a.x, xn); f.dy = w.in(a.dy, yn); f.dx = w.out(a.dx, xn); }
  run_f32(Table(), f);
  w.narrow();
}
template <DType H, bool Backward> void upsample_half(const Upsample2xArgs& a) {
  Widen<H> w;
  Upsample2xArgs f = a;
  const int64_t xn = a.NC * a.H * a.W, yn = xn * 4;
  if (!Backward) { f.x = w.in(a.x, xn); f.y = w.out(a.y, yn); run_f32(upsample2x_forward_kernels(), f); }
  else { f.dy = w.in(a.dy, yn); f.dx = w.out(a.dx, xn); run_f32(upsample2x_backward_kernels(), f); }
  w.narrow();
}

// ---- softmax, layer_norm, batch_norm, losses, embedding ----------------------------------
template <DType H, bool Backward> void softmax_half(const SoftmaxArgs& a) {
  Widen<H> w;
  SoftmaxArgs f = a;
  const int64_t n = a.N * a.C;
  if (!Backward) { f.x = w.in(a.x, n); f.y = w.out(a.y, n); run_f32(softmax_forward_kernels(), f); }
  else { f.y = const_cast<float*>(w.in(a.y, n)); f.dy = w.in(a.dy, n); f.dx = w.out(a.dx, n); run_f32(softmax_backward_kernels(), f); }
  w.narrow();
}
template <DType H, bool Backward> void masked_softmax_half(const MaskedSoftmaxArgs& a) {
  Widen<H> w;
  MaskedSoftmaxArgs f = a;
  const int64_t n = a.rows * a.C;
  if (!Backward) { f.x = w.in(a.x, n); f.y = w.out(a.y, n); run_f32(masked_softmax_forward_kernels(), f); }
  else { f.y = const_cast<float*>(w.in(a.y, n)); f.dy = w.in(a.dy, n); f.dx = w.out(a.dx, n); run_f32(masked_softmax_backward_kernels(), f); }
  w.narrow();
}
// 16-bit x, weight, bias, y, dy, dx, dweight, dbias; mean / rstd float32 (the contract).
template <DType H, bool Backward> void layer_norm_half(const LayerNormArgs& a) {
  Widen<H> w;
  LayerNormArgs f = a;
  const int64_t n = a.rows * a.H;
  f.x = w.in(a.x, n);
  f.weight = w.in(a.weight, a.H);
  if (!Backward) {
    f.bias = w.in(a.bias, a.H);
    f.y = w.out(a.y, n);
    run_f32(layer_norm_forward_kernels(), f);
  } else {
    f.dy = w.in(a.dy, n);
    f.dx = w.out(a.dx, n);
    f.dweight = w.out(a.dweight, a.H);
    f.dbias = w.out(a.dbias, a.H);
    run_f32(layer_norm_backward_kernels(), f);
  }
  w.narrow();
}
// 16-bit x, y, dy, dx; weight, bias, running and saved statistics float32 (the op's rule).
// 16-bit x, weight, bias, y, dy, dx, dweight, dbias; mean / rstd float32 (the contract).
template <DType H, bool Backward> void group_norm_half(const GroupNormArgs& a) {
  Widen<H> w;
  GroupNormArgs f = a;
  const int64_t n = a.N * a.C * a.HW;
  f.x = w.in(a.x, n);
  f.weight = w.in(a.weight, a.C);
  if (!Backward) {
    f.bias = w.in(a.bias, a.C);
    f.y = w.out(a.y, n);
    run_f32(group_norm_forward_kernels(), f);
  } else {
    f.dy = w.in(a.dy, n);
    f.dx = w.out(a.dx, n);
    f.dweight = w.out(a.dweight, a.C);
    f.dbias = w.out(a.dbias, a.C);
    run_f32(group_norm_backward_kernels(), f);
  }
  w.narrow();
}
template <DType H, bool Backward> void batch_norm_half(const BatchNormArgs& a) {
  Widen<H> w;
  BatchNormArgs f = a;
  const int64_t n = a.N * a.C * a.HW;
  f.x = w.in(a.x, n);
  if (!Backward) { f.y = w.out(a.y, n); run_f32(batch_norm_forward_kernels(), f); }
  else { f.dy = w.in(a.dy, n); f.dx = w.out(a.dx, n); run_f32(batch_norm_backward_kernels(), f); }
  w.narrow();
}
template <DType H, bool Backward> void nll_half(const NllArgs& a) {
  Widen<H> w;
  NllArgs f = a;
  if (!Backward) { f.logp = w.in(a.logp, a.N * a.C); f.loss = w.out(a.loss, 1); run_f32(nll_forward_kernels(), f); }
  else { f.dloss = w.in(a.dloss, 1); f.dlogp = w.out(a.dlogp, a.N * a.C); run_f32(nll_backward_kernels(), f); }
  w.narrow();
}
template <DType H, bool Backward> void pixel_ce_half(const PixelCrossEntropyArgs& a) {
  Widen<H> w;
  PixelCrossEntropyArgs f = a;
  const int64_t n = a.N * a.C * a.HW;
  if (!Backward) {
    f.logits = w.in(a.logits, n); f.logp = w.out(a.logp, n); f.loss = w.out(a.loss, 1);
    run_f32(pixel_cross_entropy_forward_kernels(), f);
  } else {
    f.logp = const_cast<float*>(w.in(a.logp, n)); f.dloss = w.in(a.dloss, 1); f.dlogits = w.out(a.dlogits, n);
    run_f32(pixel_cross_entropy_backward_kernels(), f);
  }
  w.narrow();
}
template <DType H, bool Backward> void embedding_half(const EmbeddingArgs& a) {
  Widen<H> w;
  EmbeddingArgs f = a;
  if (!Backward) { f.weight = w.in(a.weight, a.V * a.H); f.out = w.out(a.out, a.N * a.H); run_f32(embedding_forward_kernels(), f); }
  else { f.dout = w.in(a.dout, a.N * a.H); f.dweight = w.out(a.dweight, a.V * a.H); run_f32(embedding_backward_kernels(), f); }
  w.narrow();
}

// ---- optimizers on 16-bit parameters (model.half() without master weights) -----------------
template <DType H> void sgd_half(const SgdArgs& a) {
  Widen<H> w;
  SgdArgs f = a;
  f.param = w.inout(a.param, a.n);
  f.grad = w.in(a.grad, a.n);
  f.buf = w.inout(a.buf, a.n);
  run_f32(sgd_kernels(), f);
  w.narrow();
}
template <DType H> void adam_half(const AdamArgs& a) {
  Widen<H> w;
  AdamArgs f = a;
  f.param = w.inout(a.param, a.n);
  f.grad = w.in(a.grad, a.n);
  f.exp_avg = w.inout(a.exp_avg, a.n);
  f.exp_avg_sq = w.inout(a.exp_avg_sq, a.n);
  run_f32(adam_kernels(), f);
  w.narrow();
}

template <DType H> void register_for() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&gemm_half<H>>(gemm_kernels(), cpu, H);
  set_kernel<&bias_add_rows_half<H>>(bias_add_rows_kernels(), cpu, H);
  set_kernel<&bias_grad_rows_half<H>>(bias_grad_rows_kernels(), cpu, H);
  set_kernel<&conv_half<H, conv2d_forward_kernels>>(conv2d_forward_kernels(), cpu, H);
  set_kernel<&conv_half<H, conv2d_backward_data_kernels>>(conv2d_backward_data_kernels(), cpu, H);
  set_kernel<&conv_half<H, conv2d_backward_weight_kernels>>(conv2d_backward_weight_kernels(), cpu, H);
  set_kernel<&channel_bias_add_half<H>>(channel_bias_add_kernels(), cpu, H);
  set_kernel<&channel_bias_grad_half<H>>(channel_bias_grad_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, ReluArgs, relu_forward_kernels, false>>(relu_forward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, ReluArgs, relu_backward_kernels, true>>(relu_backward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, SigmoidArgs, sigmoid_forward_kernels, false>>(sigmoid_forward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, SigmoidArgs, sigmoid_backward_kernels, true>>(sigmoid_backward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, GeluArgs, gelu_forward_kernels, false>>(gelu_forward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, GeluArgs, gelu_backward_kernels, true>>(gelu_backward_kernels(), cpu, H);
  set_kernel<&dropout_forward_half<H>>(dropout_forward_kernels(), cpu, H);
  set_kernel<&dropout_backward_half<H>>(dropout_backward_kernels(), cpu, H);
  set_kernel<&axpby_half<H>>(axpby_kernels(), cpu, H);
  set_kernel<&mul_half<H>>(mul_kernels(), cpu, H);
  set_kernel<&sum_half<H>>(sum_kernels(), cpu, H);
  set_kernel<&pool_half<H, max_pool2d_forward_kernels, false>>(max_pool2d_forward_kernels(), cpu, H);
  set_kernel<&pool_half<H, max_pool2d_backward_kernels, true>>(max_pool2d_backward_kernels(), cpu, H);
  set_kernel<&pool_half<H, avg_pool2d_forward_kernels, false>>(avg_pool2d_forward_kernels(), cpu, H);
  set_kernel<&pool_half<H, avg_pool2d_backward_kernels, true>>(avg_pool2d_backward_kernels(), cpu, H);
  set_kernel<&upsample_half<H, false>>(upsample2x_forward_kernels(), cpu, H);
  set_kernel<&upsample_half<H, true>>(upsample2x_backward_kernels(), cpu, H);
  set_kernel<&softmax_half<H, false>>(softmax_forward_kernels(), cpu, H);
  set_kernel<&softmax_half<H, true>>(softmax_backward_kernels(), cpu, H);
  set_kernel<&masked_softmax_half<H, false>>(masked_softmax_forward_kernels(), cpu, H);
  set_kernel<&masked_softmax_half<H, true>>(masked_softmax_backward_kernels(), cpu, H);
  set_kernel<&layer_norm_half<H, false>>(layer_norm_forward_kernels(), cpu, H);
  set_kernel<&layer_norm_half<H, true>>(layer_norm_backward_kernels(), cpu, H);
  set_kernel<&group_norm_half<H, false>>(group_norm_forward_kernels(), cpu, H);
  set_kernel<&group_norm_half<H, true>>(group_norm_backward_kernels(), cpu, H);
  set_kernel<&batch_norm_half<H, false>>(batch_norm_forward_kernels(), cpu, H);
  set_kernel<&batch_norm_half<H, true>>(batch_norm_backward_kernels(), cpu, H);
  set_kernel<&nll_half<H, false>>(nll_forward_kernels(), cpu, H);
  set_kernel<&nll_half<H, true>>(nll_backward_kernels(), cpu, H);
  set_kernel<&pixel_ce_half<H, false>>(pixel_cross_entropy_forward_kernels(), cpu, H);
  set_kernel<&pixel_ce_half<H, true>>(pixel_cross_entropy_backward_kernels(), cpu, H);
  set_kernel<&embedding_half<H, false>>(embedding_forward_kernels(), cpu, H);
  set_kernel<&embedding_half<H, true>>(embedding_backward_kernels(), cpu, H);
  set_kernel<&sgd_half<H>>(sgd_kernels(), cpu, H);
  set_kernel<&adam_half<H>>(adam_kernels(), cpu, H);
}
}  // namespace

void register_half_cpu_kernels() {
  register_for<DType::f16>();
  register_for<DType::bf16>();
}

}  // namespace oomlab
