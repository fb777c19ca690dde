// linear.cpp — matmul, linear and bmm with autograd, on the gemm / bias_add_rows /
// bias_grad_rows tables (kernels/linear.h). Backward uses raw GEMMs with transpose flags
// (no transposed copies): linear dx = g w, dw = g^T x, db = column sums of g (x: any
// leading dims, flattened to rows). bmm is one strided-batched GEMM launch; an operand (or output
// gradient) that is contiguous or the transpose of a contiguous [B, C, R] tensor (k^T in
// attention) is used in place with a transpose flag, anything else is made contiguous,
// and a transposed operand gets its gradient as the same transposed view: no copies.
// Saved: see linear.h. Allocation order (meta = cpu): forward contiguous copies if any,
// the output; backward contiguous(g) if any, then the gradients in input order. linear's
// bias add and bias gradient ride on its GEMMs (GemmArgs' extras: fused by CUDA's cuBLASLt
// path, separate kernels elsewhere), so the bias gradient exists before the dW GEMM runs.
#include "engine/ops/linear.h"

#include <algorithm>

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "kernels/linear.h"

namespace oomlab {

namespace {
// Linear's extras of one GEMM (kernels/linear.h): the bias added to C's rows, or the bias
// gradient as the sums of op(A)'s rows or op(B)'s columns.
struct GemmExtras {
  const Tensor* bias = nullptr;
  const Tensor* a_row_sums = nullptr;
  const Tensor* b_col_sums = nullptr;
};
void* data_or_null(const Tensor* t) { return t ? t->raw_data() : nullptr; }

// C[M,N] = op(A) op(B) (+ beta C) on contiguous row-major buffers.
void gemm(const Tensor& C, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& A,
          const Tensor& B, double beta = 0.0, GemmExtras x = {}) {
  GemmArgs g{ta, tb, M, N, K, 1.0,
             A.raw_data(), ta ? M : K,
             B.raw_data(), tb ? K : N,
             beta, C.raw_data(), N};
  g.bias = data_or_null(x.bias);
  g.a_row_sums = data_or_null(x.a_row_sums);
  g.b_col_sums = data_or_null(x.b_col_sums);
  gemm_kernels().launch(C.device(), C.dtype(), g);
}

void check_pair(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  OOMLAB_CHECK_T(DTypeError, a.dtype() == b.dtype(), op, ": ", an, " dtype ", dtype_name(a.dtype()),
                 " and ", bn, " dtype ", dtype_name(b.dtype()), " differ");
  OOMLAB_CHECK_T(DeviceError, a.device() == b.device(), op, ": ", an, " on ", a.device().str(),
                 " and ", bn, " on ", b.device().str());
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(a.dtype()), op, ": unsupported dtype ", dtype_name(a.dtype()));
}
}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a0 = autocast_lower(a_in, "matmul"), b0 = autocast_lower(b_in, "matmul");
  OOMLAB_CHECK_T(ShapeError, a0.dim() == 2 && b0.dim() == 2 && a0.size(1) == b0.size(0),
                 "matmul: mat1 and mat2 shapes cannot be multiplied (", shape_str(a0.shape()),
                 " and ", shape_str(b0.shape()), ")");
  check_pair(a0, b0, "matmul", "mat1", "mat2");
  Tensor a = a0.contiguous(), b = b0.contiguous();
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  Tensor out = Tensor::empty({M, N}, a.dtype(), a.device());
  gemm(out, false, false, M, N, K, a, b);
  return attach_grad_fn(out, "matmul", {a0, b0}, [&]() -> BackwardFn {
    SavedTensor sa(b0.requires_grad() ? a : Tensor(), "matmul");
    SavedTensor sb(a0.requires_grad() ? b : Tensor(), "matmul");
    return [sa, sb, M, N, K](const Tensor& g0, const std::vector<bool>& needs) {
      Tensor g = g0.contiguous();
      Tensor ga, gb;
      if (needs[0]) {   // ga[M,K] = g[M,N] b^T
        Tensor b = sb.unpack();
        ga = Tensor::empty({M, K}, g.dtype(), g.device());
        gemm(ga, false, true, M, K, N, g, b);
      }
      if (needs[1]) {   // gb[K,N] = a^T g
        Tensor a = sa.unpack();
        gb = Tensor::empty({K, N}, g.dtype(), g.device());
        gemm(gb, true, false, K, N, M, a, g);
      }
      return std::vector<Tensor>{ga, gb};
    };
  });
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  const Tensor x0 = autocast_lower(x_in, "linear"), w0 = autocast_lower(w_in, "linear"),
               b0 = autocast_lower(b_in, "linear");
  OOMLAB_CHECK_T(ShapeError, w0.dim() == 2 && x0.dim() >= 1 && x0.size(-1) == w0.size(1),
                 "linear: input ", shape_str(x0.shape()), " and weight ", shape_str(w0.shape()),
                 " cannot be multiplied (expected input [..., in] and weight [out, in])");
  check_pair(x0, w0, "linear", "input", "weight");
  const int64_t out_f = w0.size(0), in_f = w0.size(1);
  const bool has_bias = b0.defined();
  if (has_bias) {
    OOMLAB_CHECK_T(ShapeError, b0.dim() == 1 && b0.size(0) == out_f, "linear: bias ",
                   shape_str(b0.shape()), " does not match weight ", shape_str(w0.shape()),
                   " (expected [", out_f, "])");
    check_pair(x0, b0, "linear", "input", "bias");
  }
  // A weight that is the transpose of a contiguous [in, out] matrix (GPT-2's Conv1D, x @ W)
  // is used in place, as w_t [in, out], with the GEMM's transpose flags.
  const bool w_t = !w0.is_contiguous() && w0.transpose(0, 1).is_contiguous();
  Tensor x = x0.contiguous(), w = w_t ? w0.transpose(0, 1).detach() : w0.contiguous();
  Tensor b = has_bias ? b0.contiguous() : Tensor();
  const int64_t rows = x.numel() / std::max<int64_t>(in_f, 1);
  Shape x_shape = x.shape(), y_shape = x.shape();
  y_shape.back() = out_f;
  Tensor y = Tensor::empty(y_shape, x.dtype(), x.device());
  gemm(y, false, !w_t, rows, out_f, in_f, x, w, 0.0, {.bias = has_bias ? &b : nullptr});   // y = x w^T (+ b)
  return attach_grad_fn(y, "linear", {x0, w0, b0}, [&]() -> BackwardFn {
    SavedTensor sx(w0.requires_grad() ? x : Tensor(), "linear");
    SavedTensor sw(x0.requires_grad() ? w : Tensor(), "linear");
    return [sx, sw, x_shape, rows, in_f, out_f, w_t](const Tensor& g0, const std::vector<bool>& needs) {
      Tensor g = g0.contiguous();
      Tensor gx, gw, gb;
      if (needs[0]) {   // gx[rows,in] = g[rows,out] w[out,in]
        Tensor w = sw.unpack();
        gx = Tensor::empty(x_shape, g.dtype(), g.device());
        gemm(gx, false, w_t, rows, in_f, out_f, g, w);
      }
      // The bias gradient is the dW GEMM's extra (kernels/linear.h): the column sums of g
      // (bias_grad_rows) = the row sums of op(A) = g^T, or in w_t's layout the column sums of
      // op(B) = g. So gb is allocated after gw and before the GEMM runs.
      const bool want_b = needs.size() > 2 && needs[2];
      if (needs[1]) {
        Tensor x = sx.unpack();
        gw = Tensor::empty(w_t ? Shape{in_f, out_f} : Shape{out_f, in_f}, g.dtype(), g.device());
        if (want_b) gb = Tensor::empty({out_f}, g.dtype(), g.device());
        if (w_t) {   // in w_t's layout, gw^T[in,out] = x^T g, handed back as the transposed view
          gemm(gw, true, false, in_f, out_f, rows, x, g, 0.0, {.b_col_sums = want_b ? &gb : nullptr});
          gw = gw.transpose(0, 1);
        } else {     // gw[out,in] = g^T x
          gemm(gw, true, false, out_f, in_f, rows, g, x, 0.0, {.a_row_sums = want_b ? &gb : nullptr});
        }
      } else if (want_b) {
        gb = Tensor::empty({out_f}, g.dtype(), g.device());
        bias_grad_rows_kernels().launch(g.device(), g.dtype(),
                                        BiasGradRowsArgs{gb.raw_data(), g.raw_data(), rows, out_f});
      }
      return std::vector<Tensor>{gx, gw, gb};
    };
  });
}

// ---- bmm ------------------------------------------------------------------------------
namespace {
// A 3-D operand as GEMM sees it: `data` points at a contiguous buffer holding op(data)
// row-major ([R, C] when !trans, [C, R] when trans) for each batch.
struct Operand { Tensor data; bool trans; };

Operand as_operand(const Tensor& t) {
  if (t.is_contiguous()) return {t, false};
  const Shape& sh = t.shape();
  const Shape& st = t.strides();
  const int64_t R = sh[1], C = sh[2];
  const bool transposed = (sh[0] <= 1 || st[0] == R * C) && (C <= 1 || st[1] == 1) && (R <= 1 || st[2] == R);
  if (transposed) return {t, true};
  return {t.contiguous(), false};
}

// For each batch i: C_i[rows, cols] = op(X_i) op(Y_i) (inner dim `inner`), buffers packed
// per batch with no gaps: one strided-batched GEMM launch.
void batched_gemm(const Tensor& C, int64_t batch, int64_t rows, int64_t cols, int64_t inner, const Tensor& X,
                  bool tx, const Tensor& Y, bool ty) {
  if (C.numel() == 0) return;
  if (inner == 0) { Tensor c = C; c.fill_(0.0); return; }   // empty sum
  GemmArgs g{tx, ty, rows, cols, inner, 1.0,
             X.raw_data(), tx ? rows : inner,
             Y.raw_data(), ty ? inner : cols,
             0.0, C.raw_data(), cols,
             batch, rows * inner, inner * cols, rows * cols};
  gemm_kernels().launch(C.device(), C.dtype(), g);
}

// The logical [B, R, C] gradient of an operand stored transposed: a view of buf [B, C, R].
Tensor as_logical(const Tensor& buf, bool trans) {
  if (!trans) return buf;
  const Shape& s = buf.shape();
  return make_view(buf, {s[0], s[2], s[1]}, {s[1] * s[2], 1, s[2]}, buf.offset());
}
}  // namespace

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  OOMLAB_CHECK_T(ValueError, a_in.defined() && b_in.defined(), "bmm: undefined operand");
  const Tensor a0 = autocast_lower(a_in, "bmm"), b0 = autocast_lower(b_in, "bmm");
  OOMLAB_CHECK_T(ShapeError, a0.dim() == 3 && b0.dim() == 3, "bmm: expected 3-D tensors, got ",
                 shape_str(a0.shape()), " and ", shape_str(b0.shape()));
  OOMLAB_CHECK_T(ShapeError, a0.size(0) == b0.size(0) && a0.size(2) == b0.size(1), "bmm: batch1 ",
                 shape_str(a0.shape()), " and batch2 ", shape_str(b0.shape()),
                 " cannot be multiplied (expected [B, M, K] and [B, K, N])");
  OOMLAB_CHECK_T(DTypeError, a0.dtype() == b0.dtype(), "bmm: dtypes ", dtype_name(a0.dtype()), " and ",
                 dtype_name(b0.dtype()), " differ");
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(a0.dtype()), "bmm: unsupported dtype ", dtype_name(a0.dtype()));
  OOMLAB_CHECK_T(DeviceError, a0.device() == b0.device(), "bmm: tensors on ", a0.device().str(), " and ",
                 b0.device().str());
  const int64_t B = a0.size(0), M = a0.size(1), K = a0.size(2), N = b0.size(2);
  Operand oa = as_operand(a0), ob = as_operand(b0);
  Tensor out = Tensor::empty({B, M, N}, a0.dtype(), a0.device());
  batched_gemm(out, B, M, N, K, oa.data, oa.trans, ob.data, ob.trans);
  return attach_grad_fn(out, "bmm", {a0, b0}, [&]() -> BackwardFn {
    SavedTensor sa(b0.requires_grad() ? oa.data : Tensor(), "bmm");
    SavedTensor sb(a0.requires_grad() ? ob.data : Tensor(), "bmm");
    const bool ta = oa.trans, tb = ob.trans;
    return [sa, sb, ta, tb, B, M, N, K](const Tensor& g0, const std::vector<bool>& needs) {
      Operand og = as_operand(g0);   // g [B, M, N]; tg: stored as [N, M]
      const bool tg = og.trans;
      Tensor ga, gb;
      if (needs[0]) {
        Tensor bs = sb.unpack();
        if (!ta) {   // da[M,K] = g b^T
          ga = Tensor::empty({B, M, K}, og.data.dtype(), og.data.device());
          batched_gemm(ga, B, M, K, N, og.data, tg, bs, !tb);
        } else {     // stored da[K,M] = b g^T
          ga = Tensor::empty({B, K, M}, og.data.dtype(), og.data.device());
          batched_gemm(ga, B, K, M, N, bs, tb, og.data, !tg);
        }
      }
      if (needs[1]) {
        Tensor as = sa.unpack();
        if (!tb) {   // db[K,N] = a^T g
          gb = Tensor::empty({B, K, N}, og.data.dtype(), og.data.device());
          batched_gemm(gb, B, K, N, M, as, !ta, og.data, tg);
        } else {     // stored db[N,K] = g^T a
          gb = Tensor::empty({B, N, K}, og.data.dtype(), og.data.device());
          batched_gemm(gb, B, N, K, M, og.data, !tg, as, ta);
        }
      }
      return std::vector<Tensor>{ga.defined() ? as_logical(ga, ta) : ga, gb.defined() ? as_logical(gb, tb) : gb};
    };
  });
}

}  // namespace oomlab
