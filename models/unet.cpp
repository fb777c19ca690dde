// unet.cpp — UNet (Ronneberger et al. 2015 layout, with BatchNorm): `unet` (base 64,
// depth 4) and `unet-small` (base 16, depth 4); see model_zoo.h for the layout and keys.
// Forward: each encoder level's double-conv output is kept as the skip, then max-pooled;
// the decoder upsamples with ConvTranspose2d(2x2, stride 2), concatenates [skip, up]
// along channels (the skip is released right after), and double-convs. Init:
// torchvision's (Conv2d kaiming_normal fan_out/relu, bias 0; BN 1/0) plus PyTorch's
// default for the transposed convs, from Generator{cfg.seed}; nothing on meta.
#include <cmath>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/nn/unet_layers.h"
#include "engine/ops/concat.h"
#include "models/model_zoo.h"

namespace oomlab {

int64_t unet_depth(const std::string& name, const ModelConfig& cfg) {
  OOMLAB_CHECK_T(ValueError, name == "unet" || name == "unet-small", "build_unet: '", name,
                 "' is not a UNet (unet, unet-small)");
  OOMLAB_CHECK_T(ValueError, cfg.depth >= 0 && cfg.depth <= 8, name, ": depth must be in 1..8 (0 = preset 4), got ",
                 cfg.depth);
  return cfg.depth > 0 ? cfg.depth : 4;
}

int64_t unet_base_width(const std::string& name, const ModelConfig& cfg) {
  OOMLAB_CHECK_T(ValueError, cfg.base_width >= 0, name, ": base_width must be > 0 (0 = preset), got ",
                 cfg.base_width);
  if (cfg.base_width > 0) return cfg.base_width;
  return name == "unet-small" ? 16 : 64;
}

namespace {

void check_unet_input(const std::string& model, int64_t c, int64_t h, int64_t w, int64_t depth) {
  const int64_t m = int64_t(1) << depth;
  OOMLAB_CHECK_T(ShapeError, h > 0 && w > 0 && h % m == 0 && w % m == 0, model, ": input ", c, "x", h, "x", w,
                 " is not supported; height and width must be divisible by ", m, " (2^depth, depth ", depth,
                 "); resize or pad the images");
}

std::shared_ptr<nn::Sequential> double_conv(int64_t in, int64_t out, bool inplace, const nn::LayerOptions& o) {
  auto conv = [&](int64_t i) {
    return std::make_shared<nn::Conv2d>(i, out, 3, nn::Conv2dOptions{.padding = 1, .bias = false}, o);
  };
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      conv(in), std::make_shared<nn::BatchNorm2d>(out, 1e-5, 0.1, o), std::make_shared<nn::ReLU>(inplace),
      conv(out), std::make_shared<nn::BatchNorm2d>(out, 1e-5, 0.1, o), std::make_shared<nn::ReLU>(inplace)});
}

class UNet : public nn::Module {
 public:
  UNet(const std::string& name, const ModelConfig& cfg)
      : model(name), depth(unet_depth(name, cfg)), in_channels(cfg.in_channels) {
    const int64_t base = unet_base_width(name, cfg);
    check_unet_input(name, cfg.in_channels, cfg.height, cfg.width, depth);
    nn::LayerOptions o = zoo_layer_options(cfg);
    encoder = register_module("encoder", std::make_shared<nn::Sequential>());
    int64_t c = cfg.in_channels;
    for (int64_t i = 0; i < depth; ++i) {
      encoder->push_back(double_conv(c, base << i, cfg.inplace_relu, o));
      c = base << i;
    }
    pool = register_module("pool", std::make_shared<nn::MaxPool2d>(2, 2));
    bottleneck = register_module("bottleneck", double_conv(c, base << depth, cfg.inplace_relu, o));
    c = base << depth;
    up = register_module("up", std::make_shared<nn::Sequential>());
    decoder = register_module("decoder", std::make_shared<nn::Sequential>());
    for (int64_t i = depth - 1; i >= 0; --i) {
      up->push_back(std::make_shared<nn::ConvTranspose2d>(c, c / 2, 2, 2, true, o));
      decoder->push_back(double_conv(c, c / 2, cfg.inplace_relu, o));
      c /= 2;
    }
    final = register_module("final", std::make_shared<nn::Conv2d>(c, cfg.num_classes, 1, nn::Conv2dOptions{}, o));
    init_weights(cfg);
  }

  Tensor forward(const Tensor& x) override {
    OOMLAB_CHECK_T(ShapeError, x.dim() == 4 && x.size(1) == in_channels, model, ": expects input [B, ", in_channels,
                   ", H, W], got ", shape_str(x.shape()));
    check_unet_input(model, x.size(1), x.size(2), x.size(3), depth);
    std::vector<Tensor> skips;
    Tensor h = x;
    for (int64_t i = 0; i < depth; ++i) {
      skips.push_back((*(*encoder)[size_t(i)])(h));
      h = (*pool)(skips.back());
    }
    h = (*bottleneck)(h);
    for (int64_t i = 0; i < depth; ++i) {
      Tensor u = (*(*up)[size_t(i)])(h);
      h = cat({skips.back(), u}, 1);
      skips.pop_back();
      u = Tensor();
      h = (*(*decoder)[size_t(i)])(h);
    }
    return (*final)(h);
  }
  const char* type_name() const override { return "UNet"; }

  void init_weights(const ModelConfig& cfg) {
    if (cfg.device.is_meta()) return;
    init_torchvision_weights(*this, cfg, LinearInit::pytorch_default);
    Generator gen{cfg.seed, 1};   // a second stream for the transposed convs
    for (auto& [n, m] : named_modules())
      if (auto* t = dynamic_cast<nn::ConvTranspose2d*>(m)) t->reset_parameters(gen);
  }

  std::string model;
  int64_t depth, in_channels;
  std::shared_ptr<nn::Sequential> encoder, up, decoder, bottleneck;
  std::shared_ptr<nn::MaxPool2d> pool;
  std::shared_ptr<nn::Conv2d> final;
};

}  // namespace

nn::ModulePtr build_unet(const std::string& name, const ModelConfig& cfg) { return std::make_shared<UNet>(name, cfg); }

}  // namespace oomlab
