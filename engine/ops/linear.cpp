// linear.cpp — matmul and linear with autograd; GEMM and bias kernels via tables.
// matmul: a[M,K] x b[K,N]; saves a only if b needs grad, b only if a needs grad.
// linear: x[..., in] (any leading dims, flattened to rows), w[out,in], optional b[out];
// y = x w^T + b. Saves x only if w needs grad, w only if x needs grad; bias saves
// nothing. Backward uses raw GEMMs with transpose flags (no transposed copies):
// dx = g w, dw = g^T x, db = column sums of g. Allocation order (meta = cpu):
// forward: contiguous copies if any, y; backward: contiguous(g) if any, dx, dw, db.
#include "engine/ops/linear.h"

#include <algorithm>

#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"

namespace oomlab {

KernelTable<GemmArgs>& gemm_kernels() { static KernelTable<GemmArgs> t("gemm"); return t; }
KernelTable<BiasAddRowsArgs>& bias_add_rows_kernels() {
  static KernelTable<BiasAddRowsArgs> t("bias_add_rows"); return t;
}
KernelTable<BiasGradRowsArgs>& bias_grad_rows_kernels() {
  static KernelTable<BiasGradRowsArgs> t("bias_grad_rows"); return t;
}

namespace {
// C[M,N] = op(A) op(B) (+ beta C) on contiguous row-major buffers.
void gemm(const Tensor& C, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& A,
          const Tensor& B, double beta = 0.0) {
  GemmArgs g{ta, tb, M, N, K, 1.0,
             A.raw_data(), ta ? M : K,
             B.raw_data(), tb ? K : N,
             beta, C.raw_data(), N};
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

Tensor matmul(const Tensor& a0, const Tensor& b0) {
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

Tensor linear(const Tensor& x0, const Tensor& w0, const Tensor& b0) {
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
  Tensor x = x0.contiguous(), w = w0.contiguous();
  Tensor b = has_bias ? b0.contiguous() : Tensor();
  const int64_t rows = x.numel() / std::max<int64_t>(in_f, 1);
  Shape x_shape = x.shape(), y_shape = x.shape();
  y_shape.back() = out_f;
  Tensor y = Tensor::empty(y_shape, x.dtype(), x.device());
  gemm(y, false, true, rows, out_f, in_f, x, w);   // y = x w^T
  if (has_bias)
    bias_add_rows_kernels().launch(y.device(), y.dtype(),
                                   BiasAddRowsArgs{y.raw_data(), b.raw_data(), rows, out_f});
  return attach_grad_fn(y, "linear", {x0, w0, b0}, [&]() -> BackwardFn {
    SavedTensor sx(w0.requires_grad() ? x : Tensor(), "linear");
    SavedTensor sw(x0.requires_grad() ? w : Tensor(), "linear");
    return [sx, sw, x_shape, rows, in_f, out_f](const Tensor& g0, const std::vector<bool>& needs) {
      Tensor g = g0.contiguous();
      Tensor gx, gw, gb;
      if (needs[0]) {   // gx[rows,in] = g[rows,out] w[out,in]
        Tensor w = sw.unpack();
        gx = Tensor::empty(x_shape, g.dtype(), g.device());
        gemm(gx, false, false, rows, in_f, out_f, g, w);
      }
      if (needs[1]) {   // gw[out,in] = g^T x
        Tensor x = sx.unpack();
        gw = Tensor::empty({out_f, in_f}, g.dtype(), g.device());
        gemm(gw, true, false, out_f, in_f, rows, g, x);
      }
      if (needs.size() > 2 && needs[2]) {
        gb = Tensor::empty({out_f}, g.dtype(), g.device());
        bias_grad_rows_kernels().launch(g.device(), g.dtype(),
                                        BiasGradRowsArgs{gb.raw_data(), g.raw_data(), rows, out_f});
      }
      return std::vector<Tensor>{gx, gw, gb};
    };
  });
}

}  // namespace oomlab
