// transformer_layers.h — torch.nn layers for transformer encoders: Embedding, LayerNorm,
// GELU and Tanh, each a thin Module over the op of the same name (engine/ops/
// transformer_ops.h; Tanh is composed as 2*sigmoid(2x) - 1 from vision/elementwise ops,
// so it saves the sigmoid output). Contracts:
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

// tanh(x) = 2 * sigmoid(2x) - 1, differentiable (composed from existing ops).
Tensor tanh_composed(const Tensor& x);

}  // namespace oomlab::nn
