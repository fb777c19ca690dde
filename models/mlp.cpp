// mlp.cpp — the small MLP baseline: Sequential(Flatten, Linear(C*H*W, 256), ReLU,
// Linear(256, 128), ReLU, Linear(128, num_classes)), PyTorch's default Linear init drawn
// from Generator{cfg.seed}. For 1x28x28 and 10 classes: 235,146 parameters.
// State-dict keys: 1.weight, 1.bias, 3.weight, 3.bias, 5.weight, 5.bias.
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "models/model_zoo.h"

namespace oomlab {

nn::ModulePtr build_mlp(const std::string& name, const ModelConfig& cfg) {
  OOMLAB_CHECK(name == "mlp", "build_mlp: '", name, "' is not the MLP (mlp)");
  Generator gen{cfg.seed, 0};
  nn::LayerOptions o;
  o.device = cfg.device;
  o.dtype = cfg.dtype;
  o.generator = &gen;   // layers draw their default init in construction order
  const int64_t in = cfg.in_channels * cfg.height * cfg.width;
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Flatten>(1),
      std::make_shared<nn::Linear>(in, 256, true, o),
      std::make_shared<nn::ReLU>(cfg.inplace_relu),
      std::make_shared<nn::Linear>(256, 128, true, o),
      std::make_shared<nn::ReLU>(cfg.inplace_relu),
      std::make_shared<nn::Linear>(128, cfg.num_classes, true, o),
  });
}

}  // namespace oomlab
