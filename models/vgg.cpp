// vgg.cpp — torchvision's VGG (Simonyan & Zisserman 2014): vgg11 (cfg A), vgg16 (cfg D),
// with or without BatchNorm after each conv. Module names are torchvision's:
// features.N (conv / [bn] / relu / pool in sequence), avgpool, classifier.0..6.
// Parameter counts (num_classes=1000): vgg11 132,863,336; vgg11_bn 132,868,840;
// vgg16 138,357,544; vgg16_bn 138,365,992 — the classifier's Linear(25088, 4096) alone
// holds 102.8M of them. Inputs must be >= 32x32 (5 max-pools); smaller inputs raise
// ShapeError naming the model and the input size (torchvision fails inside max_pool2d).
// --fuse-relu (ModelConfig::fuse_relu): each feature ReLU is applied by the layer before it
// (Conv2d::fused_relu: conv2d_relu; vgg*_bn: BatchNorm2d::fused_relu) and passes x through,
// bit-identical, the modules and their names unchanged; the classifier's ReLUs stay as they are.
#include <memory>

#include "engine/core/error.h"
#include "engine/nn/layers.h"
#include "models/model_zoo.h"

namespace oomlab {

namespace {

class VGG : public nn::Module {
 public:
  VGG(std::string model_name, const std::vector<int>& plan, bool batch_norm, const ModelConfig& cfg)
      : model_name_(std::move(model_name)) {
    nn::LayerOptions o = zoo_layer_options(cfg);
    auto feats = std::make_shared<nn::Sequential>();
    int64_t in = cfg.in_channels;
    for (int v : plan) {
      if (v == 0) {   // 'M'
        feats->push_back(std::make_shared<nn::MaxPool2d>(2, 2));
        ++num_pools_;
        continue;
      }
      auto conv = std::make_shared<nn::Conv2d>(in, v, 3, nn::Conv2dOptions{.padding = 1}, o);
      auto relu = std::make_shared<nn::ReLU>(cfg.inplace_relu);
      feats->push_back(conv);
      if (batch_norm) {
        auto bn = std::make_shared<nn::BatchNorm2d>(v, 1e-5, 0.1, o);
        bn->fused_relu = cfg.fuse_relu;   // --fuse-relu: batch_norm_relu, as the ResNets
        feats->push_back(bn);
      } else {
        conv->fused_relu = cfg.fuse_relu;   // --fuse-relu: conv2d_relu, the relu in the bias pass
      }
      relu->applied_by_previous = cfg.fuse_relu;
      feats->push_back(relu);
      in = v;
    }
    features = register_module("features", feats);
    avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(7, 7));
    classifier = register_module("classifier", std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Linear>(in * 7 * 7, 4096, true, o),
        std::make_shared<nn::ReLU>(cfg.inplace_relu),
        std::make_shared<nn::Dropout>(cfg.classifier_dropout),
        std::make_shared<nn::Linear>(4096, 4096, true, o),
        std::make_shared<nn::ReLU>(cfg.inplace_relu),
        std::make_shared<nn::Dropout>(cfg.classifier_dropout),
        std::make_shared<nn::Linear>(4096, cfg.num_classes, true, o),
    }));
    init_torchvision_weights(*this, cfg, LinearInit::normal_0_01);
  }

  Tensor forward(const Tensor& x) override {
    OOMLAB_CHECK_T(ShapeError, x.dim() == 4, model_name_, ": expected an NCHW input, got ", x.str());
    check_min_input(model_name_, x.size(1), x.size(2), x.size(3), int64_t(1) << num_pools_,
                    "its 5 max-pools halve the size 5 times");
    Tensor h = (*features)(x);
    h = (*avgpool)(h);
    return (*classifier)(h.flatten(1));
  }
  const char* type_name() const override { return "VGG"; }

  std::shared_ptr<nn::Sequential> features, classifier;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;

 private:
  std::string model_name_;
  int num_pools_ = 0;
};

// torchvision cfgs; 0 marks a max-pool ('M').
const std::vector<int> kCfgA = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
const std::vector<int> kCfgD = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};

}  // namespace

nn::ModulePtr build_vgg(const std::string& name, const ModelConfig& cfg) {
  if (name == "vgg11") return std::make_shared<VGG>(name, kCfgA, false, cfg);
  if (name == "vgg11_bn") return std::make_shared<VGG>(name, kCfgA, true, cfg);
  if (name == "vgg16") return std::make_shared<VGG>(name, kCfgD, false, cfg);
  if (name == "vgg16_bn") return std::make_shared<VGG>(name, kCfgD, true, cfg);
  throw ValueError(str_cat("build_vgg: '", name, "' is not a VGG (vgg11, vgg11_bn, vgg16, vgg16_bn)"));
}

}  // namespace oomlab
