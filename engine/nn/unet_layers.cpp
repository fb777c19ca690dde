// unet_layers.cpp — nn::ConvTranspose2d (see the header).
#include "engine/nn/unet_layers.h"

#include <cmath>

#include "engine/core/error.h"

namespace oomlab::nn {

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, int64_t k, int64_t stride, bool has_bias,
                                 const LayerOptions& opt)
    : in_channels(in), out_channels(out), kernel_size(k) {
  OOMLAB_CHECK_T(ValueError, in > 0 && out > 0 && k > 0 && stride > 0,
                 "ConvTranspose2d: channels, kernel_size and stride must be > 0, got in=", in, " out=", out,
                 " k=", k, " stride=", stride);
  params.stride = stride;
  weight = register_parameter("weight", Tensor::empty({in, out, k, k}, opt.dtype, opt.device));
  if (has_bias) bias = register_parameter("bias", Tensor::empty({out}, opt.dtype, opt.device));
  if (!opt.skip_init) {
    if (opt.generator) reset_parameters(*opt.generator);
    else device_generator(opt.device).with([&](Generator& g) { reset_parameters(g); });
  }
}

void ConvTranspose2d::reset_parameters(Generator& gen) {
  const int64_t fi = init::fan_in(weight);
  const double bound = fi > 0 ? 1.0 / std::sqrt(double(fi)) : 0.0;
  init::uniform_(weight, -bound, bound, gen);
  if (bias.defined()) init::uniform_(bias, -bound, bound, gen);
}

Tensor ConvTranspose2d::forward(const Tensor& x) { return conv_transpose2d(x, weight, bias, params); }

}  // namespace oomlab::nn
