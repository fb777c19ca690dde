// resnet.cpp — torchvision's ResNet v1.5 (resnet18/34/50) and the residual blocks shared
// with the CIFAR ResNets (models/resnet.h documents the architecture and counts).
// Forward of a block: conv1 -> bn1 -> relu -> conv2 -> bn2 (-> relu -> conv3 -> bn3),
// + shortcut (identity or downsample(x)), relu. Each submodule runs through operator(),
// so allocations are labelled e.g. "layer1.0.conv1/fwd"; the residual add and the final
// relu's output are labelled with the block ("layer1.0/fwd" / "layer1.0.relu/fwd").
// --fuse-relu (ModelConfig::fuse_relu): each BatchNorm a relu follows applies it
// (nn::BatchNorm2d::fused_relu, batch_norm_relu) and that relu call is skipped (norm_relu);
// the residual add and the relu after it run as one in-place add_relu_.
#include "models/resnet.h"

#include "engine/core/error.h"
#include "engine/ops/activation.h"
#include "engine/ops/elementwise.h"

namespace oomlab {

namespace {
std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride, const nn::LayerOptions& o) {
  return std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2dOptions{.stride = stride, .padding = 1, .bias = false}, o);
}
std::shared_ptr<nn::Conv2d> conv1x1(int64_t in, int64_t out, int64_t stride, const nn::LayerOptions& o) {
  return std::make_shared<nn::Conv2d>(in, out, 1, nn::Conv2dOptions{.stride = stride, .bias = false}, o);
}
nn::ModulePtr bn(int64_t c, const nn::LayerOptions& o) { return nn::make_norm2d(c, o); }
}  // namespace

nn::ModulePtr bn_before_relu(int64_t c, const nn::LayerOptions& o) {
  nn::ModulePtr m = bn(c, o);
  if (auto* b = dynamic_cast<nn::BatchNorm2d*>(m.get()); b && o.fuse_relu) b->fused_relu = true;
  return m;
}

Tensor norm_relu(nn::Module& norm, nn::ReLU& relu, const Tensor& x) {
  Tensor h = norm(x);
  const auto* b = dynamic_cast<const nn::BatchNorm2d*>(&norm);
  return b && b->fused_relu ? h : relu(h);
}

BasicBlock::BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, nn::ModulePtr ds, bool inplace_relu,
                       const nn::LayerOptions& o) {
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride, o));
  bn1 = register_module("bn1", bn_before_relu(planes, o));
  relu = register_module("relu", std::make_shared<nn::ReLU>(inplace_relu));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1, o));
  bn2 = register_module("bn2", bn(planes, o));
  if (ds) downsample = register_module("downsample", ds);
  fused_add_relu = o.fuse_relu;
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = norm_relu(*bn1, *relu, (*conv1)(x));
  out = (*bn2)((*conv2)(out));
  Tensor identity = downsample ? (*downsample)(x) : x;
  if (fused_add_relu) return add_relu_(out, identity);   // one pass, in place
  add_(out, identity);   // in place, as torchvision
  return (*relu)(out);
}

Bottleneck::Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, nn::ModulePtr ds, bool inplace_relu,
                       const nn::LayerOptions& o) {
  const int64_t width = planes;   // base_width 64, groups 1
  conv1 = register_module("conv1", conv1x1(inplanes, width, 1, o));
  bn1 = register_module("bn1", bn_before_relu(width, o));
  conv2 = register_module("conv2", conv3x3(width, width, stride, o));
  bn2 = register_module("bn2", bn_before_relu(width, o));
  conv3 = register_module("conv3", conv1x1(width, planes * expansion, 1, o));
  bn3 = register_module("bn3", bn(planes * expansion, o));
  relu = register_module("relu", std::make_shared<nn::ReLU>(inplace_relu));
  if (ds) downsample = register_module("downsample", ds);
  fused_add_relu = o.fuse_relu;
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = norm_relu(*bn1, *relu, (*conv1)(x));
  out = norm_relu(*bn2, *relu, (*conv2)(out));
  out = (*bn3)((*conv3)(out));
  Tensor identity = downsample ? (*downsample)(x) : x;
  if (fused_add_relu) return add_relu_(out, identity);   // one pass, in place
  add_(out, identity);   // in place, as torchvision
  return (*relu)(out);
}

std::shared_ptr<nn::Sequential> make_resnet_layer(bool bottleneck, int64_t& inplanes, int64_t planes,
                                                  int64_t blocks, int64_t stride, bool inplace_relu,
                                                  const nn::LayerOptions& o) {
  const int64_t expansion = bottleneck ? Bottleneck::expansion : BasicBlock::expansion;
  auto layer = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < blocks; ++i) {
    int64_t s = i == 0 ? stride : 1;
    nn::ModulePtr ds;
    if (i == 0 && (stride != 1 || inplanes != planes * expansion))
      ds = std::make_shared<nn::Sequential>(
          std::vector<nn::ModulePtr>{conv1x1(inplanes, planes * expansion, stride, o), bn(planes * expansion, o)});
    if (bottleneck) layer->push_back(std::make_shared<Bottleneck>(inplanes, planes, s, ds, inplace_relu, o));
    else layer->push_back(std::make_shared<BasicBlock>(inplanes, planes, s, ds, inplace_relu, o));
    inplanes = planes * expansion;
  }
  return layer;
}

namespace {

class ResNet : public nn::Module {
 public:
  ResNet(bool bottleneck, const std::vector<int64_t>& layers, const ModelConfig& cfg) {
    nn::LayerOptions o = zoo_layer_options(cfg);
    int64_t inplanes = 64;
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(
        cfg.in_channels, 64, 7, nn::Conv2dOptions{.stride = 2, .padding = 3, .bias = false}, o));
    bn1 = register_module("bn1", bn_before_relu(64, o));
    relu = register_module("relu", std::make_shared<nn::ReLU>(cfg.inplace_relu));
    maxpool = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1));
    const int64_t planes[4] = {64, 128, 256, 512};
    for (int i = 0; i < 4; ++i)
      stages[i] = register_module("layer" + std::to_string(i + 1),
                                  make_resnet_layer(bottleneck, inplanes, planes[i], layers[size_t(i)],
                                                    i == 0 ? 1 : 2, cfg.inplace_relu, o));
    avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1, 1));
    fc = register_module("fc", std::make_shared<nn::Linear>(inplanes, cfg.num_classes, true, o));
    init_torchvision_weights(*this, cfg, LinearInit::pytorch_default);
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = (*maxpool)(norm_relu(*bn1, *relu, (*conv1)(x)));
    for (auto& s : stages) h = (*s)(h);
    h = (*avgpool)(h);
    return (*fc)(h.flatten(1));
  }
  const char* type_name() const override { return "ResNet"; }

  std::shared_ptr<nn::Conv2d> conv1;
  nn::ModulePtr bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> maxpool;
  std::shared_ptr<nn::Sequential> stages[4];
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;
};

}  // namespace

nn::ModulePtr build_resnet(const std::string& name, const ModelConfig& cfg) {
  if (name == "resnet18") return std::make_shared<ResNet>(false, std::vector<int64_t>{2, 2, 2, 2}, cfg);
  if (name == "resnet34") return std::make_shared<ResNet>(false, std::vector<int64_t>{3, 4, 6, 3}, cfg);
  if (name == "resnet50") return std::make_shared<ResNet>(true, std::vector<int64_t>{3, 4, 6, 3}, cfg);
  throw ValueError(str_cat("build_resnet: '", name, "' is not an ImageNet ResNet (resnet18, resnet34, resnet50)"));
}

}  // namespace oomlab
