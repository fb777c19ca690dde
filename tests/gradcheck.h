// gradcheck.h — float64 finite-difference gradient check for tests (Caffe/PyTorch style).
// gradcheck(f, inputs): L = sum(f(inputs) * R) with a fixed random R; compares autograd
// dL/dx against central differences (x +- eps) for every element of every input that
// requires grad. Pass: |analytic - numeric| <= atol + rtol * |numeric|.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "engine/ops/elementwise.h"

namespace oomlab::testing {

using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;

inline Tensor random_f64(const Shape& shape, double lo = -1.0, double hi = 1.0, uint64_t seed = 7) {
  Generator g{seed, 0};
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = lo + (hi - lo) * g.next_unit();
  return Tensor::from_vector(v, shape, DType::f64);
}

// Offset from t's first element of its logical (row-major) element i, whatever its strides
// (channels_last inputs: memory order is not the logical order).
inline int64_t memory_offset(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.shape()[size_t(d)]) * t.strides()[size_t(d)];
    i /= t.shape()[size_t(d)];
  }
  return off;
}

inline ::testing::AssertionResult gradcheck(const GradFn& f, std::vector<Tensor> inputs,
                                            double eps = 1e-6, double atol = 1e-6,
                                            double rtol = 1e-5) {
  Tensor out0 = [&] { NoGradGuard g; return f(inputs); }();
  Tensor R = random_f64(out0.shape(), -1.0, 1.0, 1234);
  auto loss_value = [&]() {
    NoGradGuard g;
    Tensor o = f(inputs);
    std::vector<double> ov = o.to_vector(), rv = R.to_vector();
    double s = 0;
    for (size_t i = 0; i < ov.size(); ++i) s += ov[i] * rv[i];
    return s;
  };
  for (Tensor& t : inputs)
    if (t.requires_grad()) t.zero_grad();
  Tensor out = f(inputs);
  if (!out.requires_grad()) return ::testing::AssertionFailure() << "output does not require grad";
  sum_all(mul(out, R)).backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& t = inputs[k];
    if (!t.requires_grad()) continue;
    if (!t.grad().defined()) return ::testing::AssertionFailure() << "input " << k << " got no gradient";
    std::vector<double> analytic = t.grad().to_vector();
    double* base = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      double* p = base + memory_offset(t, i);   // logical element i (to_vector's order)
      double orig = *p;
      *p = orig + eps;
      double lp = loss_value();
      *p = orig - eps;
      double lm = loss_value();
      *p = orig;
      double numeric = (lp - lm) / (2 * eps);
      if (std::fabs(analytic[size_t(i)] - numeric) > atol + rtol * std::fabs(numeric))
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": analytic "
                                             << analytic[size_t(i)] << " vs numeric " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

inline Tensor leaf(Tensor t) { t.set_requires_grad(true); return t; }

}  // namespace oomlab::testing
