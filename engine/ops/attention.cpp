// attention.cpp — scaled_dot_product_attention(q [B, NH, Tq, D], k [B, NH, Tk, D],
// v [B, NH, Tk, Dv], key_padding_mask, dropout_p, training) =
//   dropout(masked_softmax(q k^T, mask, 1/sqrt(D))) v, composed from bmm (linear.h),
//   masked_softmax (softmax.h) and dropout (dropout.h), so it saves exactly what they save:
//   q and k (first bmm), the softmax output, the dropout keep-mask (uint8) and the dropped
//   probabilities plus v (second bmm). k^T is a transposed view (no copy); the raw scores
//   are freed after the softmax. No kernels of its own. While the op profiler records, each
//   step has a span of its own inside the calling layer's ("<layer>/bmm/fwd", ...).
#include "engine/ops/attention.h"

#include <cmath>
#include <optional>
#include <string>

#include "engine/autograd/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_export.h"
#include "engine/ops/dropout.h"
#include "engine/ops/linear.h"
#include "engine/ops/softmax.h"
#include "kernels/attention.h"

namespace oomlab {

namespace {
void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  OOMLAB_CHECK_T(ValueError, q.defined() && k.defined() && v.defined(), op, ": undefined q, k or v");
  OOMLAB_CHECK_T(ShapeError,
                 q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(0) == k.size(0) && q.size(0) == v.size(0) &&
                     q.size(1) == k.size(1) && q.size(1) == v.size(1) && q.size(3) == k.size(3) &&
                     k.size(2) == v.size(2),
                 op, ": q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), " and v ", shape_str(v.shape()),
                 " do not match (expected [B, NH, Tq, D], [B, NH, Tk, D], [B, NH, Tk, Dv])");
}

// 16-bit q, k, v (autocast's dtype, or a --half model) are saved as they are, as PyTorch's
// scaled_dot_product_attention saves its 16-bit inputs; the kernels (float32 and float64)
// compute on float32 copies made for the call and freed after it. No autograd on these
// copies: the op's own backward returns gradients in the inputs' dtype.
bool is_low(DType t) { return t == DType::f16 || t == DType::bf16; }

// While the op profiler records, a span per step of the composed attention, named
// "<layer>/<op>/fwd" (the layer from the memory context: the attention core's), nested in the
// core's own span: scripts/trace_breakdown.py then splits the core's forward by op, as the
// autograd nodes split its backward. Nothing when the profiler is off.
class StepSpan {
 public:
  StepSpan(const char* op, Device device) {
    if (!OpProfiler::enabled()) return;
    const std::string ctx = MemoryContext::current();
    name_ = (ctx.empty() ? std::string("attention") : ctx.substr(0, ctx.rfind('/'))) + "/" + op + "/fwd";
    span_.emplace(name_.c_str(), 0, device);
  }
  StepSpan(const StepSpan&) = delete;
  StepSpan& operator=(const StepSpan&) = delete;

 private:
  std::string name_;                 // outlives span_ (declared first, destroyed last)
  std::optional<OpSpanScope> span_;
};
Tensor compute_copy(const Tensor& t) {
  if (!is_low(t.dtype())) return t;
  NoGradGuard no_grad;
  return t.to(DType::f32);
}
Tensor to_dtype(const Tensor& t, DType dt) {
  if (t.dtype() == dt) return t;
  NoGradGuard no_grad;
  return t.to(dt);
}

// Backward of the fused op: float32 copies of the saved 16-bit tensors, the kernel, the
// gradients cast to the inputs' dtype.
BackwardFn fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor& mask, const FusedAttentionArgs& a) {
  SavedTensor sq(q, "fused_attention"), sk(k, "fused_attention"), sv(v, "fused_attention");
  SavedTensor so(out, "fused_attention"), sl(lse, "fused_attention");
  const DType io = q.dtype();
  return [sq, sk, sv, so, sl, mask, a, io](const Tensor& g0, const std::vector<bool>&) {
    Tensor q = compute_copy(sq.unpack()), k = compute_copy(sk.unpack()), v = compute_copy(sv.unpack());
    Tensor out = compute_copy(so.unpack()), lse = sl.unpack(), g = compute_copy(g0.contiguous());
    Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
    Tensor dk = Tensor::empty(k.shape(), k.dtype(), k.device());
    Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
    FusedAttentionArgs b = a;
    b.q = q.raw_data(); b.k = k.raw_data(); b.v = v.raw_data(); b.out = out.raw_data(); b.lse = lse.raw_data();
    b.mask = mask.defined() ? mask.data<uint8_t>() : nullptr;
    b.dout = g.raw_data(); b.dq = dq.raw_data(); b.dk = dk.raw_data(); b.dv = dv.raw_data();
    fused_attention_backward_kernels().launch(q.device(), q.dtype(), b);
    return std::vector<Tensor>{to_dtype(dq, io), to_dtype(dk, io), to_dtype(dv, io)};
  };
}

}  // namespace

Tensor fused_scaled_dot_product_attention(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& mask0,
                                          double dropout_p, bool training, Generator* gen, bool causal) {
  check_qkv(q0, k0, v0, "fused attention");
  OOMLAB_CHECK_T(ValueError, dropout_p >= 0 && dropout_p < 1, "fused attention: dropout must be in [0, 1), got ",
                 dropout_p);
  const int64_t B = q0.size(0), NH = q0.size(1), Tq = q0.size(2), D = q0.size(3), Tk = k0.size(2), Dv = v0.size(3);
  Tensor mask;
  if (mask0.defined()) {
    OOMLAB_CHECK_T(ShapeError, mask0.dim() == 2 && mask0.size(0) == B && mask0.size(1) == Tk,
                   "fused attention: key_padding_mask ", shape_str(mask0.shape()), " does not match [", B, ", ", Tk,
                   "]");
    OOMLAB_CHECK_T(DTypeError, mask0.dtype() == DType::u8, "fused attention: key_padding_mask must be uint8, got ",
                   dtype_name(mask0.dtype()));
    mask = mask0.contiguous();
  }
  // PyTorch's dtype rule: under autocast q, k, v in the autocast dtype, else their own
  const Tensor q = autocast_lower(q0, "fused_attention").reshape({B * NH, Tq, D}).contiguous();
  const Tensor k = autocast_lower(k0, "fused_attention").reshape({B * NH, Tk, D}).contiguous();
  const Tensor v = autocast_lower(v0, "fused_attention").reshape({B * NH, Tk, Dv}).contiguous();
  OOMLAB_CHECK_T(DTypeError, q.dtype() == k.dtype() && q.dtype() == v.dtype(), "fused attention: q, k and v are ",
                 dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()),
                 ": one dtype expected");
  const double p = training ? dropout_p : 0.0;
  const auto [seed, base] =
      p > 0 ? reserve_draws(gen, q.device(), uint64_t(B * NH * Tq * Tk), "fused attention's dropout")
            : std::pair<uint64_t, uint64_t>{0, 0};
  FusedAttentionArgs a{nullptr, nullptr, nullptr, mask.defined() ? mask.data<uint8_t>() : nullptr,
                       nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                       B * NH, NH, Tq, Tk, D, Dv, D > 0 ? 1.0 / std::sqrt(double(D)) : 1.0, p, seed, base, causal,
                       is_low(q.dtype()), q.dtype() == DType::f16};
  Tensor out, lse;
  {
    const Tensor qc = compute_copy(q), kc = compute_copy(k), vc = compute_copy(v);
    Tensor oc = Tensor::empty({B * NH, Tq, Dv}, qc.dtype(), qc.device());
    lse = Tensor::empty({B * NH, Tq}, qc.dtype(), qc.device());   // float32 for 16-bit inputs
    a.q = qc.raw_data(); a.k = kc.raw_data(); a.v = vc.raw_data(); a.out = oc.raw_data(); a.lse = lse.raw_data();
    fused_attention_forward_kernels().launch(qc.device(), qc.dtype(), a);
    out = to_dtype(oc, q.dtype());
  }
  out = attach_grad_fn(out, "fused_attention", {q, k, v}, [&]() { return fused_backward(q, k, v, out, lse, mask, a); });
  return out.reshape({B, NH, Tq, Dv});
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    double dropout_p, bool training, Generator* gen, bool causal) {
  check_qkv(q, k, v, "scaled_dot_product_attention");
  const int64_t B = q.size(0), NH = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
  const double scale = D > 0 ? 1.0 / std::sqrt(double(D)) : 1.0;
  const Device dev = q.device();
  Tensor qf, kf, scores, p, vf;
  {
    StepSpan span("reshape", dev);   // the head-layout copies of q and k
    qf = q.reshape({B * NH, Tq, D});
    kf = k.reshape({B * NH, Tk, D});
  }
  {
    StepSpan span("bmm", dev);
    scores = bmm(qf, kf.transpose(1, 2)).reshape({B, NH, Tq, Tk});
  }
  qf = Tensor();
  kf = Tensor();
  {
    StepSpan span("masked_softmax", dev);
    p = masked_softmax(scores, mask, scale, causal);
  }
  scores = Tensor();   // saved by nobody: free it before the next allocations
  {
    StepSpan span("dropout", dev);
    p = dropout(p, dropout_p, training, gen);
  }
  {
    StepSpan span("reshape", dev);
    vf = v.reshape({B * NH, Tk, Dv});
  }
  StepSpan span("bmm", dev);
  return bmm(p.reshape({B * NH, Tq, Tk}), vf).reshape({B, NH, Tq, Dv});
}

}  // namespace oomlab
