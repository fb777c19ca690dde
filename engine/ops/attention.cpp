// attention.cpp — scaled_dot_product_attention(q [B, NH, Tq, D], k [B, NH, Tk, D],
// v [B, NH, Tk, Dv], key_padding_mask, dropout_p, training) =
//   dropout(masked_softmax(q k^T, mask, 1/sqrt(D))) v, composed from bmm (linear.h),
//   masked_softmax (softmax.h) and dropout (dropout.h), so it saves exactly what they save:
//   q and k (first bmm), the softmax output, the dropout keep-mask (uint8) and the dropped
//   probabilities plus v (second bmm). k^T is a transposed view (no copy); the raw scores
//   are freed after the softmax. No kernels of its own.
#include "engine/ops/attention.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/ops/dropout.h"
#include "engine/ops/linear.h"
#include "engine/ops/softmax.h"

namespace oomlab {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    double dropout_p, bool training, Generator* gen) {
  OOMLAB_CHECK_T(ValueError, q.defined() && k.defined() && v.defined(),
                 "scaled_dot_product_attention: undefined q, k or v");
  OOMLAB_CHECK_T(ShapeError,
                 q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(0) == k.size(0) && q.size(0) == v.size(0) &&
                     q.size(1) == k.size(1) && q.size(1) == v.size(1) && q.size(3) == k.size(3) &&
                     k.size(2) == v.size(2),
                 "scaled_dot_product_attention: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), " and v ",
                 shape_str(v.shape()), " do not match (expected [B, NH, Tq, D], [B, NH, Tk, D], [B, NH, Tk, Dv])");
  const int64_t B = q.size(0), NH = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
  const double scale = D > 0 ? 1.0 / std::sqrt(double(D)) : 1.0;
  Tensor qf = q.reshape({B * NH, Tq, D});
  Tensor kf = k.reshape({B * NH, Tk, D});
  Tensor scores = bmm(qf, kf.transpose(1, 2)).reshape({B, NH, Tq, Tk});
  qf = Tensor();
  kf = Tensor();
  Tensor p = masked_softmax(scores, mask, scale);
  scores = Tensor();   // saved by nobody: free it before the next allocations
  p = dropout(p, dropout_p, training, gen);
  Tensor vf = v.reshape({B * NH, Tk, Dv});
  return bmm(p.reshape({B * NH, Tq, Tk}), vf).reshape({B, NH, Tq, Dv});
}

}  // namespace oomlab
