// cifar_resnet.cpp — He et al. 2016's CIFAR ResNets (resnet20: n=3, resnet56: n=9) with
// torchvision-style BasicBlocks and option-B (1x1 conv + BN) projection shortcuts; see
// models/resnet.h for the architecture, the shortcut choice and the parameter counts.
// Default input 1x28x28 (Fashion-MNIST); any size >= 1 works (global average pool).
#include "engine/core/error.h"
#include "models/resnet.h"

namespace oomlab {

namespace {

class CifarResNet : public nn::Module {
 public:
  CifarResNet(int64_t n, const ModelConfig& cfg) {
    nn::LayerOptions o = zoo_layer_options(cfg);
    int64_t inplanes = 16;
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(
        cfg.in_channels, 16, 3, nn::Conv2dOptions{.stride = 1, .padding = 1, .bias = false}, o));
    bn1 = register_module("bn1", bn_before_relu(16, o));
    relu = register_module("relu", std::make_shared<nn::ReLU>(cfg.inplace_relu));
    const int64_t planes[3] = {16, 32, 64};
    for (int i = 0; i < 3; ++i)
      stages[i] = register_module("layer" + std::to_string(i + 1),
                                  make_resnet_layer(false, inplanes, planes[i], n, i == 0 ? 1 : 2,
                                                    cfg.inplace_relu, o));
    avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1, 1));
    fc = register_module("fc", std::make_shared<nn::Linear>(inplanes, cfg.num_classes, true, o));
    init_torchvision_weights(*this, cfg, LinearInit::pytorch_default);
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = norm_relu(*bn1, *relu, (*conv1)(x));
    for (auto& s : stages) h = (*s)(h);
    h = (*avgpool)(h);
    return (*fc)(h.flatten(1));
  }
  const char* type_name() const override { return "CifarResNet"; }

  std::shared_ptr<nn::Conv2d> conv1;
  nn::ModulePtr bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> stages[3];
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;
};

}  // namespace

nn::ModulePtr build_cifar_resnet(const std::string& name, const ModelConfig& cfg) {
  if (name == "resnet20") return std::make_shared<CifarResNet>(3, cfg);
  if (name == "resnet56") return std::make_shared<CifarResNet>(9, cfg);
  throw ValueError(str_cat("build_cifar_resnet: '", name, "' is not a CIFAR ResNet (resnet20, resnet56)"));
}

}  // namespace oomlab
