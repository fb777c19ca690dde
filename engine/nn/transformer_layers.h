// transformer_layers.h — torch.nn layers for transformer encoders: Embedding, LayerNorm,
// GELU, Tanh and DotProductAttention, each a thin Module over the op of the same name
// (engine/ops/embedding.h, layernorm.h, activation.h; Tanh is composed as 2*sigmoid(2x) - 1
// from activation / elementwise ops, so it saves the sigmoid output; DotProductAttention
// runs scaled_dot_product_attention, engine/ops/attention.h). Contracts:
//  * Parameter names/shapes are PyTorch's: Embedding.weight [num, dim]; LayerNorm.weight
//    and .bias [dim]. LayerNorm is initialised 1/0 (deterministic, skipped on meta);
//    Embedding draws N(0, 1) from options.generator unless skip_init (the zoo re-inits).
//  * padding_idx < 0 means none; otherwise that row gets no gradient (and zero init).
#pragma once
#include <cstdint>
#include <string>

#include "engine/nn/layers.h"

namespace oomlab::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1,
            const LayerOptions& opt = {});
  Tensor forward(const Tensor& ids) override;   // ids int64 [...] -> [..., dim]
  const char* type_name() const override { return "Embedding"; }
  void reset_parameters(Generator& gen, double std = 1.0);   // N(0, std), padding row 0
  Tensor weight;
  int64_t num_embeddings, embedding_dim, padding_idx;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, const LayerOptions& opt = {});
  Tensor forward(const Tensor& x) override;     // over the last dim
  const char* type_name() const override { return "LayerNorm"; }
  void reset_parameters();                      // weight 1, bias 0
  Tensor weight, bias;
  int64_t dim;
  double eps;
};

class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "GELU"; }
  std::string approximate;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "Tanh"; }
};

// The attention core: dropout(masked_softmax(q k^T / sqrt(D), mask)) v over heads
// [B, NH, T, D] (scaled_dot_product_attention: QK^T bmm, masked softmax, dropout on the
// probabilities, PV bmm). A parameterless leaf, so it adds no state_dict keys, and
// `oomlab summary` gives the bytes it saves for backward a row of its own: the head-layout
// copies of q, k and v plus the seq^2-sized softmax output, dropout mask and dropped
// probabilities. forward(q) takes q; the caller sets `key`, `value` and `mask` (uint8
// [B, T], 1 = padding, or undefined) before the call and clears them after (like a
// residual); dropout applies in training mode with probability p.
class DotProductAttention : public Module {
 public:
  explicit DotProductAttention(double p = 0.0, bool fused = false);
  Tensor forward(const Tensor& q) override;
  const char* type_name() const override { return "DotProductAttention"; }
  std::vector<Tensor*> side_inputs() override { return {&key, &value, &mask}; }
  Tensor key, value, mask;
  double p;
  bool fused;   // fused_scaled_dot_product_attention: saves q, k, v, the output and one lse per row
};

// tanh(x) = 2 * sigmoid(2x) - 1, differentiable (composed from existing ops).
Tensor tanh_composed(const Tensor& x);

}  // namespace oomlab::nn
