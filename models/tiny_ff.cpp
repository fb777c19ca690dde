// tiny_ff.cpp — the "tiny feed-forward" network of the AMP comparison table. The source
// does not specify it further; oomlab uses Sequential(Flatten, Linear(C*H*W, 512), ReLU,
// Linear(512, 512), ReLU, Linear(512, num_classes)) with PyTorch's default Linear init
// drawn from Generator{cfg.seed}. For 1x28x28 and 10 classes: 669,706 parameters.
// State-dict keys: 1.weight, 1.bias, 3.weight, 3.bias, 5.weight, 5.bias.
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "models/model_zoo.h"

namespace oomlab {

nn::ModulePtr build_tiny_ff(const std::string& name, const ModelConfig& cfg) {
  OOMLAB_CHECK_T(ValueError, name == "tiny-ff", "build_tiny_ff: '", name, "' is not tiny-ff");
  Generator gen{cfg.seed, 0};
  nn::LayerOptions o;
  o.device = cfg.device;
  o.dtype = cfg.dtype;
  o.generator = &gen;
  const int64_t in = cfg.in_channels * cfg.height * cfg.width;
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Flatten>(1),
      std::make_shared<nn::Linear>(in, 512, true, o),
      std::make_shared<nn::ReLU>(cfg.inplace_relu),
      std::make_shared<nn::Linear>(512, 512, true, o),
      std::make_shared<nn::ReLU>(cfg.inplace_relu),
      std::make_shared<nn::Linear>(512, cfg.num_classes, true, o),
  });
}

}  // namespace oomlab
