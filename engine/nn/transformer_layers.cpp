// transformer_layers.cpp — Embedding, LayerNorm, GELU, Tanh and DotProductAttention modules
// (see the header).
#include "engine/nn/transformer_layers.h"

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/embedding.h"
#include "engine/ops/layernorm.h"

namespace oomlab::nn {

Embedding::Embedding(int64_t num, int64_t dim, int64_t padding_idx, const LayerOptions& opt)
    : num_embeddings(num), embedding_dim(dim), padding_idx(padding_idx) {
  OOMLAB_CHECK_T(ValueError, num > 0 && dim > 0, "Embedding: num_embeddings and embedding_dim must be > 0, got ",
                 num, " and ", dim);
  OOMLAB_CHECK_T(ValueError, padding_idx < num, "Embedding: padding_idx ", padding_idx,
                 " must be < num_embeddings ", num);
  weight = register_parameter("weight", Tensor::empty({num, dim}, opt.dtype, opt.device));
  if (!opt.skip_init) {
    if (opt.generator) reset_parameters(*opt.generator);
    else device_generator(opt.device).with([&](Generator& g) { reset_parameters(g); });
  }
}

void Embedding::reset_parameters(Generator& gen, double std) {
  if (weight.device().is_meta()) return;
  init::normal_(weight, 0.0, std, gen);
  if (padding_idx >= 0) {
    NoGradGuard ng;
    Tensor row = weight.detach().narrow(0, padding_idx, 1);
    init::constant_(row, 0.0);
    weight.bump_version();
  }
}

Tensor Embedding::forward(const Tensor& ids) { return embedding(weight, ids, padding_idx); }

LayerNorm::LayerNorm(int64_t d, double e, const LayerOptions& opt) : dim(d), eps(e) {
  OOMLAB_CHECK_T(ValueError, d > 0, "LayerNorm: dim must be > 0, got ", d);
  weight = register_parameter("weight", Tensor::empty({d}, opt.dtype, opt.device));
  bias = register_parameter("bias", Tensor::empty({d}, opt.dtype, opt.device));
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.device().is_meta()) return;
  init::constant_(weight, 1.0);
  init::constant_(bias, 0.0);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight, bias, eps); }

Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }

DotProductAttention::DotProductAttention(double p, bool fused) : p(p), fused(fused) {
  OOMLAB_CHECK_T(ValueError, p >= 0.0 && p < 1.0, "DotProductAttention: dropout must be in [0, 1), got ", p);
}

Tensor DotProductAttention::forward(const Tensor& q) {
  OOMLAB_CHECK_T(ValueError, key.defined() && value.defined(),
                 "DotProductAttention: set key and value before calling it (forward takes q)");
  return fused ? fused_scaled_dot_product_attention(q, key, value, mask, p, is_training())
               : scaled_dot_product_attention(q, key, value, mask, p, is_training());
}

Tensor tanh_composed(const Tensor& x) { return add_scalar(scale(sigmoid(scale(x, 2.0)), 2.0), -1.0); }

Tensor Tanh::forward(const Tensor& x) { return tanh_composed(x); }

}  // namespace oomlab::nn
