// bmm.cpp — bmm(a [B, M, K], b [B, K, N]) -> [B, M, N] as torch.bmm, one GEMM per batch
// through linear.h's gemm table (OpenBLAS on cpu). Operands (and the output gradient)
// that are contiguous, or the transpose of a contiguous [B, C, R] tensor (k.transpose(1,
// 2) in attention), are used in place with a GEMM transpose flag; anything else is made
// contiguous first. Saves a (as used, only if b needs grad) and b (only if a needs
// grad). A transposed operand gets its gradient as the same transposed view of a
// contiguous buffer, so no copies are made on either pass. Allocations: forward
// contiguous copies if any, out; backward contiguous(g) if any, da, db.
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/ops/linear.h"
#include "engine/ops/transformer_ops.h"

namespace oomlab {
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
// per batch with no gaps.
void batched_gemm(const Tensor& C, int64_t batch, int64_t rows, int64_t cols, int64_t inner, const Tensor& X,
                  bool tx, const Tensor& Y, bool ty) {
  if (C.device().is_meta() || C.numel() == 0) return;
  if (inner == 0) { Tensor c = C; c.fill_(0.0); return; }   // empty sum
  auto fn = gemm_kernels().get(C.device(), C.dtype());
  const int64_t es = int64_t(dtype_size(C.dtype()));
  const char* xp = static_cast<const char*>(X.raw_data());
  const char* yp = static_cast<const char*>(Y.raw_data());
  char* cp = static_cast<char*>(C.raw_data());
  for (int64_t i = 0; i < batch; ++i) {
    GemmArgs g{tx, ty, rows, cols, inner, 1.0,
               xp + i * rows * inner * es, tx ? rows : inner,
               yp + i * inner * cols * es, ty ? inner : cols,
               0.0, cp + i * rows * cols * es, cols};
    fn(g);
  }
}

// The logical [B, R, C] gradient of an operand stored transposed: a view of buf [B, C, R].
Tensor as_logical(const Tensor& buf, bool trans) {
  if (!trans) return buf;
  const Shape& s = buf.shape();
  return make_view(buf, {s[0], s[2], s[1]}, {s[1] * s[2], 1, s[2]}, buf.offset());
}
}  // namespace

Tensor bmm(const Tensor& a0, const Tensor& b0) {
  OOMLAB_CHECK_T(ValueError, a0.defined() && b0.defined(), "bmm: undefined operand");
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
