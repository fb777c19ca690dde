// unet_layers.h — nn::ConvTranspose2d (torch.nn.ConvTranspose2d, groups 1, square
// kernel) over engine/ops/conv.h's conv_transpose2d. Contracts: weight
// [in_channels, out_channels, k, k] and bias [out_channels] as PyTorch; default init is
// PyTorch's U(+-1/sqrt(fan_in)) with fan_in = weight.size(1) * k * k (PyTorch computes it
// from dim 1 of the transposed weight), skipped with skip_init and on meta.
#pragma once
#include <cstdint>

#include "engine/nn/layers.h"
#include "engine/ops/conv.h"

namespace oomlab::nn {

class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
                  bool bias = true, const LayerOptions& opt = {});
  Tensor forward(const Tensor& x) override;   // [N, C, H, W] -> [N, K, (H-1)*stride + k, ...]
  const char* type_name() const override { return "ConvTranspose2d"; }
  void reset_parameters(Generator& gen);
  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size;
  ConvTranspose2dParams params;
};

}  // namespace oomlab::nn
