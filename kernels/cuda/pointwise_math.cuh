// pointwise_math.cuh — per-element formulas of the pointwise CUDA kernels, written with
// explicit rounding (launch_utils.cuh) so each reproduces its CPU kernel bit for bit:
// the CPU kernels are compiled by GCC with -march=x86-64-v3 in GNU mode, which fuses
// a*b + c into an FMA wherever the product has no other use; these functions spell out
// the same fusions, and where GCC vectorises a float64 reduction its order of rounding
// (read from the generated code of GCC 12.2; kernels/cuda/check/formula_check.cu checks
// every formula bitwise against the CPU kernels, float32 and float64, without a GPU — rerun
// it when a CPU kernel or the compiler changes).
// C is the compute type: float (for float, half and bfloat16 storage) or double.
#pragma once
#include "kernels/cuda/launch_utils.cuh"
#include "kernels/optim.h"

namespace oomlab::cuda {

// ---- elementwise (kernels/elementwise.h) ------------------------------------------------
// alpha*a + beta*b + gamma: GCC fuses the first product.
template <class C> __host__ __device__ __forceinline__ C axpby2(C alpha, C a, C beta, C b, C gamma) {
  return add_rn(fma_rn(alpha, a, mul_rn(beta, b)), gamma);
}
template <class C> __host__ __device__ __forceinline__ C axpby1(C alpha, C a, C gamma) {
  return fma_rn(alpha, a, gamma);
}
template <class C> __host__ __device__ __forceinline__ C mul3(C a, C b, C alpha) { return mul_rn(mul_rn(a, b), alpha); }

// ---- optim (kernels/optim.h) ------------------------------------------------------------
template <class C> struct SgdConst {
  C lr, wd, mom, keep;
  bool decay, first, nesterov;
};
// One SGD element: updates p (and b when has_buf).
template <class C>
__host__ __device__ __forceinline__ void sgd_elem(const SgdConst<C>& k, bool has_buf, C& p, C g, C& b) {
  const C d = k.decay ? fma_rn(k.wd, p, g) : g;
  if (!has_buf) {
    p = fma_rn(-k.lr, d, p);
    return;
  }
  b = k.first ? d : fma_rn(b, k.mom, mul_rn(k.keep, d));
  const C step = k.nesterov ? fma_rn(k.mom, b, d) : b;
  p = fma_rn(-k.lr, step, p);
}

// The per-call constants in C, rounded exactly as the CPU kernel forms them.
template <class C> inline SgdConst<C> make_sgd_const(const SgdArgs& a) {
  SgdConst<C> k;
  k.lr = C(a.lr);
  k.wd = C(a.weight_decay);
  k.mom = C(a.momentum);
  k.keep = C(1.0 - a.dampening);
  k.decay = a.weight_decay != 0;
  k.first = a.first_step;
  k.nesterov = a.nesterov;
  return k;
}

template <class C> struct AdamConst { C w1, one_minus_w1, beta2, w2, wd, shrink, step_size, bc2_sqrt, eps; };
// The per-step constants in C, rounded exactly as the CPU kernel forms them.
template <class C> inline AdamConst<C> make_adam_const(const AdamArgs& a) {
  AdamConst<C> k;
  k.w1 = C(1.0 - a.beta1);
  k.one_minus_w1 = C(C(1) - k.w1);  // the CPU's (T(1) - w1), in T
  k.beta2 = C(a.beta2);
  k.w2 = C(1.0 - a.beta2);
  k.wd = C(a.weight_decay);
  k.shrink = C(1.0 - a.lr * a.weight_decay);
  k.step_size = C(a.step_size);
  k.bc2_sqrt = C(a.bias_correction2_sqrt);
  k.eps = C(a.eps);
  return k;
}
template <class C, bool Decay, bool Decoupled, bool LerpLow>
__host__ __device__ __forceinline__ void adam_elem(const AdamConst<C>& k, C& p, C g, C& m, C& v) {
  C pi = p, gi = g;
  if constexpr (Decay && !Decoupled) gi = fma_rn(k.wd, pi, gi);
  C mi = m;
  if constexpr (LerpLow)
    mi = fma_rn(k.w1, sub_rn(gi, mi), mi);
  else
    mi = fma_rn(-sub_rn(gi, mi), k.one_minus_w1, gi);
  const C vi = fma_rn(v, k.beta2, mul_rn(mul_rn(k.w2, gi), gi));
  const C denom = add_rn(div_rn(sqrt_rn(vi), k.bc2_sqrt), k.eps);
  m = mi;
  v = vi;
  // AdamW: param * shrink - step: GCC fuses the shrink product into the final subtraction.
  if constexpr (Decay && Decoupled)
    p = fma_rn(pi, k.shrink, -mul_rn(k.step_size, div_rn(mi, denom)));
  else
    p = fma_rn(-k.step_size, div_rn(mi, denom), pi);
}

// Element i of a parameter, loaded, updated and stored as every optimizer kernel does (the
// single-tensor kernels of optim.cu and the multi-tensor ones of optim_foreach.cu).
template <class T, class C>
__device__ __forceinline__ void sgd_at(T* p, const T* g, T* buf, const SgdConst<C>& k, int64_t i) {
  C pi = ld(p[i]);
  C bi = buf && !k.first ? ld(buf[i]) : C(0);
  sgd_elem(k, buf != nullptr, pi, ld(g[i]), bi);
  p[i] = st<T>(pi);
  if (buf) buf[i] = st<T>(bi);
}
template <class T, bool Decay, bool Decoupled, bool LerpLow, class C>
__device__ __forceinline__ void adam_at(T* p, const T* g, T* m, T* v, const AdamConst<C>& k, int64_t i) {
  C pi = ld(p[i]), mi = ld(m[i]), vi = ld(v[i]);
  adam_elem<C, Decay, Decoupled, LerpLow>(k, pi, ld(g[i]), mi, vi);
  p[i] = st<T>(pi);
  m[i] = st<T>(mi);
  v[i] = st<T>(vi);
}

// ---- activation (kernels/activation.h): sigmoid ---------------------------------------
template <class C> __host__ __device__ __forceinline__ C sigmoid_fwd(C x) {
  return div_rn(C(1), add_rn(C(1), exp_t(-x)));
}
template <class C> __host__ __device__ __forceinline__ C sigmoid_bwd(C y, C dy) {
  return mul_rn(mul_rn(dy, sub_rn(C(1), y)), y);
}

// ---- activation (kernels/activation.h): silu, hardswish, hardsigmoid --------------------
// Formulas as kernels/cpu/activation_cpu.cpp's, every rounding spelled out (the CPU's
// float32 silu/hardswish loops have no a*b+c for GCC to contract except where noted).
template <class C> __host__ __device__ __forceinline__ C silu_fwd(C x) {
  return div_rn(x, add_rn(C(1), exp_t(-x)));
}
template <class C> __host__ __device__ __forceinline__ C silu_bwd(C x, C dy) {
  const C s = div_rn(C(1), add_rn(C(1), exp_t(-x)));
  return mul_rn(mul_rn(dy, s), fma_rn(x, sub_rn(C(1), s), C(1)));
}
template <class C> __host__ __device__ __forceinline__ C relu6_shift(C x) {   // min(max(x + 3, 0), 6)
  const C v = add_rn(x, C(3));
  return v < C(0) ? C(0) : (v > C(6) ? C(6) : v);
}
template <class C> __host__ __device__ __forceinline__ C hardswish_fwd(C x) {
  return div_rn(mul_rn(x, relu6_shift(x)), C(6));
}
template <class C> __host__ __device__ __forceinline__ C hardswish_bwd(C x, C dy) {
  return x < C(-3) ? C(0) : (x <= C(3) ? mul_rn(dy, add_rn(div_rn(x, C(3)), C(0.5))) : dy);
}
template <class C> __host__ __device__ __forceinline__ C hardsigmoid_fwd(C x) { return div_rn(relu6_shift(x), C(6)); }
template <class C> __host__ __device__ __forceinline__ C hardsigmoid_bwd(C x, C dy) {
  return (x > C(-3) && x < C(3)) ? div_rn(dy, C(6)) : C(0);
}

// ---- activation (kernels/activation.h): gelu ------------------------------------------
constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCoef = 0.044715;

// The exponent whose exp serves the erf (-x^2/2) or the tanh (-2|u|) of gelu.
template <class C> __host__ __device__ __forceinline__ C gelu_exp_arg(C v, bool tanh_approx) {
  if (!tanh_approx) return mul_rn(mul_rn(C(-0.5), v), v);
  const C u = mul_rn(C(kSqrt2OverPi), fma_rn(mul_rn(mul_rn(C(kGeluCoef), v), v), v, v));
  return mul_rn(C(-2), fabs(u));
}
// exp of a non-positive argument as the CPU's exp_nonpos: float clamps at -88.
__host__ __device__ __forceinline__ float exp_nonpos(float a) { return exp_f32(a < -88.0f ? -88.0f : a); }
__host__ __device__ __forceinline__ double exp_nonpos(double a) { return exp(a); }

// erf(z) from e = exp(-z^2): float by Abramowitz & Stegun 7.1.26 (as the CPU), double erf.
__host__ __device__ __forceinline__ float erf_with_exp(float z, float e) {
  const float t = div_rn(1.0f, fma_rn(0.3275911f, fabsf(z), 1.0f));
  float p = 1.061405429f;
  p = fma_rn(p, t, -1.453152027f);
  p = fma_rn(p, t, 1.421413741f);
  p = fma_rn(p, t, -0.284496736f);
  p = fma_rn(p, t, 0.254829592f);
  return copysignf(fma_rn(-mul_rn(p, t), e, 1.0f), z);
}
__host__ __device__ __forceinline__ double erf_with_exp(double z, double) { return erf(z); }
template <class C> __host__ __device__ __forceinline__ C tanh_with_exp(C v, C e) {
  return copysign(div_rn(sub_rn(C(1), e), add_rn(C(1), e)), v);
}

template <class C> __host__ __device__ __forceinline__ C gelu_fwd(C x, bool tanh_approx) {
  const C e = exp_nonpos(gelu_exp_arg(x, tanh_approx));
  const C h = mul_rn(C(0.5), x);
  if (tanh_approx) return mul_rn(h, add_rn(C(1), tanh_with_exp(x, e)));
  return mul_rn(h, add_rn(C(1), erf_with_exp(mul_rn(x, C(kSqrt1_2)), e)));
}
template <class C> __host__ __device__ __forceinline__ C gelu_bwd(C v, C dy, bool tanh_approx) {
  const C e = exp_nonpos(gelu_exp_arg(v, tanh_approx));
  if (tanh_approx) {
    const C t = tanh_with_exp(v, e);
    const C du = mul_rn(C(kSqrt2OverPi), fma_rn(mul_rn(C(3 * kGeluCoef), v), v, C(1)));
    const C rest = mul_rn(mul_rn(mul_rn(C(0.5), v), fma_rn(-t, t, C(1))), du);
    return mul_rn(dy, fma_rn(C(0.5), add_rn(C(1), t), rest));
  }
  const C erfv = erf_with_exp(mul_rn(v, C(kSqrt1_2)), e);
  return mul_rn(dy, fma_rn(C(0.5), add_rn(C(1), erfv), mul_rn(mul_rn(v, C(kInvSqrt2Pi)), e)));
}

// ---- layernorm (kernels/layernorm.h) ----------------------------------------------------
// y = (x - m) * s, then * w, + b (GCC fuses the last product into the bias add).
template <class C> __host__ __device__ __forceinline__ C layer_norm_y(C x, C m, C s, const C* w, const C* b) {
  const C v = mul_rn(sub_rn(x, m), s);
  if (w && b) return fma_rn(v, *w, *b);
  if (w) return mul_rn(v, *w);
  if (b) return fma_rn(sub_rn(x, m), s, *b);
  return v;
}
// dx = s * (wdy - ma - xhat * mb), xhat = (x - m) * s.
template <class C> __host__ __device__ __forceinline__ C layer_norm_dx(C wdy, C x, C m, C s, C ma, C mb) {
  return mul_rn(s, fma_rn(-mul_rn(sub_rn(x, m), s), mb, sub_rn(wdy, ma)));
}

// ---- upsample (kernels/upsample.h): bilinear 2x taps --------------------------------------
// Output d of an axis of input size n reads i0 with weight l0 and i1 with weight l1
// (align_corners=false, source max(0, (d + 0.5) / 2 - 0.5)), as make_axis in upsample_cpu.cpp.
struct Tap {
  int64_t i0, i1;
  double l0, l1;
};
__host__ __device__ __forceinline__ Tap axis_tap(int64_t d, int64_t n) {
  double s = (double(d) + 0.5) * 0.5 - 0.5;
  s = s > 0.0 ? s : 0.0;
  const int64_t i = int64_t(s);
  Tap t;
  t.i0 = i;
  t.i1 = i + (i < n - 1 ? 1 : 0);
  t.l1 = s - double(i);
  t.l0 = 1.0 - t.l1;
  return t;
}
// Horizontal pass at output column d of a row r of W inputs (bilinear_row): the 2x pattern
// inside, the taps at the two edge columns.
template <class C, class Get> __host__ __device__ __forceinline__ C bilinear_row_at(Get r, int64_t W, int64_t d) {
  if (d == 0 || d == 2 * W - 1) {
    const Tap t = axis_tap(d, W);
    return fma_rn(C(t.l0), r(t.i0), mul_rn(C(t.l1), r(t.i1)));
  }
  const int64_t k = (d - 1) >> 1;
  if (d & 1) return fma_rn(C(0.75), r(k), mul_rn(C(0.25), r(k + 1)));
  return fma_rn(C(0.25), r(k), mul_rn(C(0.75), r(k + 1)));
}
// Calls f(d, weight) for every output d of an axis (input size n) that reads input i, in
// increasing d, the i0 tap before the i1 tap of one d (the CPU's gather lists).
template <class F> __host__ __device__ __forceinline__ void axis_gather(int64_t i, int64_t n, F f) {
  const int64_t d0 = 2 * i - 3 > 0 ? 2 * i - 3 : 0, d1 = 2 * i + 3 < 2 * n - 1 ? 2 * i + 3 : 2 * n - 1;
  for (int64_t d = d0; d <= d1; ++d) {
    const Tap t = axis_tap(d, n);
    if (t.i0 == i) f(d, t.l0);
    if (t.i1 == i) f(d, t.l1);
  }
}
// Adjoint of the horizontal pass at input column w of an output-grad row g (bilinear_row_adjoint).
template <class C, class Get>
__host__ __device__ __forceinline__ C bilinear_row_adjoint_at(Get g, int64_t W, int64_t w) {
  if (w >= 2 && w + 2 <= W) {
    const C qa = C(0.25), qb = C(0.75);
    return fma_rn(qa, g(2 * w + 2), fma_rn(qb, g(2 * w + 1), fma_rn(qa, g(2 * w - 1), mul_rn(qb, g(2 * w)))));
  }
  // s += l * g[d] over the gather list. GCC vectorises the float64 loop: with L >= 4 entries
  // the first 4 * floor(L / 4) products are rounded before their in-order adds, the rest
  // fused (read from the generated code); the float32 loop fuses every product.
  int L = 0;
  axis_gather(w, W, [&](int64_t, double) { ++L; });
  const int unfused = sizeof(C) == 8 && L >= 4 ? L / 4 * 4 : 0;
  C s = C(0);
  int q = 0;
  axis_gather(w, W, [&](int64_t d, double l) { s = add_prod(s, C(l), g(d), q++ >= unfused); });
  return s;
}

}  // namespace oomlab::cuda
