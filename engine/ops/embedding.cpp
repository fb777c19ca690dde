// embedding.cpp — embedding(weight [V, H], ids int64 [...], padding_idx) -> [..., H], as
// F.embedding: a row gather. Backward (weight only; ids are not differentiable) adds each
// output-grad row into the row of its id, in index order (repeated ids accumulate; rows
// == padding_idx get zero gradient; padding_idx < 0 means none). Saves the ids only.
// ids are range-checked on the host for cpu tensors (ValueError naming the id); meta has
// no data and a cuda check would synchronise. Allocations: forward contiguous copies if
// any, out; backward contiguous(g) if any, dweight [V, H]. token_inputs: embedding.h.
#include "engine/ops/embedding.h"

#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "kernels/embedding.h"

namespace oomlab {

Tensor embedding(const Tensor& weight0, const Tensor& ids0, int64_t padding_idx) {
  OOMLAB_CHECK_T(ValueError, weight0.defined() && ids0.defined(), "embedding: undefined weight or ids");
  OOMLAB_CHECK_T(ShapeError, weight0.dim() == 2, "embedding: weight must be 2-D [num_embeddings, dim], got ",
                 shape_str(weight0.shape()));
  OOMLAB_CHECK_T(DTypeError, ids0.dtype() == DType::i64, "embedding: ids must be int64, got ",
                 dtype_name(ids0.dtype()));
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(weight0.dtype()), "embedding: weight must be floating point, got ",
                 dtype_name(weight0.dtype()));
  OOMLAB_CHECK_T(DeviceError, weight0.device() == ids0.device(), "embedding: weight on ",
                 weight0.device().str(), " but ids on ", ids0.device().str());
  const int64_t V = weight0.size(0), H = weight0.size(1);
  OOMLAB_CHECK_T(ValueError, padding_idx < V, "embedding: padding_idx ", padding_idx,
                 " must be within num_embeddings (", V, ")");
  Tensor ids = ids0.contiguous();
  const int64_t N = ids.numel();
  if (ids.device().is_cpu()) {
    const int64_t* p = ids.data<int64_t>();
    for (int64_t i = 0; i < N; ++i)
      OOMLAB_CHECK_T(ValueError, p[i] >= 0 && p[i] < V, "embedding: index ", p[i], " (position ", i,
                     ") is out of range for an embedding of ", V, " rows (expected 0 <= id < ", V, ")");
  }
  Tensor w = weight0.contiguous();
  Shape out_shape = ids.shape();
  out_shape.push_back(H);
  Tensor out = Tensor::empty(out_shape, w.dtype(), w.device());
  embedding_forward_kernels().launch(w.device(), w.dtype(),
                                     EmbeddingArgs{w.raw_data(), ids.data<int64_t>(), out.raw_data(), nullptr,
                                                   nullptr, N, V, H, padding_idx});
  return attach_grad_fn(out, "embedding", {weight0}, [&]() -> BackwardFn {
    SavedTensor sids(ids, "embedding");
    const DType dt = w.dtype();
    return [sids, N, V, H, padding_idx, dt](const Tensor& g0, const std::vector<bool>&) {
      Tensor ids = sids.unpack();
      Tensor g = g0.contiguous();
      Tensor dw = Tensor::empty({V, H}, dt, g.device());
      embedding_backward_kernels().launch(g.device(), dt,
                                          EmbeddingArgs{nullptr, ids.data<int64_t>(), nullptr, g.raw_data(),
                                                        dw.raw_data(), N, V, H, padding_idx});
      return std::vector<Tensor>{dw};
    };
  });
}

TokenInputs token_inputs(const Tensor& ids0, bool positions_and_types, bool padding) {
  OOMLAB_CHECK_T(DTypeError, ids0.defined() && ids0.dtype() == DType::i64 && ids0.dim() == 2,
                 "token_inputs: token ids must be int64 [batch, seq_len], got ",
                 ids0.defined() ? ids0.str() : std::string("undefined"));
  const Tensor ids = ids0.contiguous();
  const int64_t B = ids.size(0), T = ids.size(1);
  const Device dev = ids.device();
  TokenInputs out;
  if (positions_and_types) {
    out.positions = Tensor::empty({B, T}, DType::i64, dev);
    out.types = Tensor::empty({B, T}, DType::i64, dev);
  }
  if (padding) out.padding = Tensor::empty({B, T}, DType::u8, dev);
  auto ptr = [](const Tensor& t) -> void* { return t.defined() ? t.raw_data() : nullptr; };
  token_inputs_kernels().launch(dev, DType::i64,
                                TokenInputsArgs{ids.data<int64_t>(), static_cast<int64_t*>(ptr(out.positions)),
                                                static_cast<int64_t*>(ptr(out.types)),
                                                static_cast<uint8_t*>(ptr(out.padding)), B, T});
  return out;
}

}  // namespace oomlab
