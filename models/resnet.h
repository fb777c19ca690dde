// resnet.h — residual blocks and the two ResNet families built from them.
//  * ResNet (torchvision v1.5; models/resnet.cpp): conv1 7x7/2, bn1, relu, maxpool 3x3/2,
//    layer1..4 (64/128/256/512 planes), avgpool, fc. Bottleneck puts the stride on its
//    3x3 conv (v1.5). resnet18 = Basic[2,2,2,2] 11,689,512 params; resnet34 =
//    Basic[3,4,6,3] 21,797,672; resnet50 = Bottleneck[3,4,6,3] 25,557,032 (1000 classes).
//  * CifarResNet (He et al. 2016, sec. 4.2; models/cifar_resnet.cpp): conv1 3x3/1 16ch,
//    bn1, relu, layer1..3 of n BasicBlocks (16/32/64 channels, stride 1/2/2), avgpool,
//    fc. resnet20: n=3, resnet56: n=9. Shortcut: the paper's CIFAR nets use option A
//    (identity + zero-padded channels, parameter-free); we use option B (1x1 conv + BN
//    projection when stride or width changes, torchvision's `downsample`) so the blocks
//    are exactly torchvision's BasicBlock. This adds 2 projections: 16*32 + 2*32 and
//    32*64 + 2*64 = 2,752 parameters. Totals (10 classes): resnet20 272,474 for 3x32x32
//    inputs (option A: 269,722 — the paper's "0.27M"), 272,186 for 1x28x28
//    Fashion-MNIST; resnet56 855,770 (3ch; paper 0.85M) and 855,482 (1ch).
// Module names follow torchvision: layer1.0.conv1, layer2.0.downsample.0/.1, fc.
// The residual sum is the out-of-place add (torchvision's `out += identity` is in
// place): one extra activation-sized buffer is live only between the add and the next op.
#pragma once
#include <memory>

#include "engine/nn/layers.h"
#include "models/model_zoo.h"

namespace oomlab {

class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, nn::ModulePtr downsample, bool inplace_relu,
             const nn::LayerOptions& o);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "BasicBlock"; }
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  nn::ModulePtr bn1, bn2;      // make_norm2d: BatchNorm2d, GroupNorm or Identity (--norm)
  std::shared_ptr<nn::ReLU> relu;
  nn::ModulePtr downsample;   // null when the shortcut is the identity
  bool fused_add_relu = false;   // --fuse-relu: the residual add and its relu as add_relu_
};

class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t expansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, nn::ModulePtr downsample, bool inplace_relu,
             const nn::LayerOptions& o);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "Bottleneck"; }
  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3;
  nn::ModulePtr bn1, bn2, bn3;
  std::shared_ptr<nn::ReLU> relu;
  nn::ModulePtr downsample;
  bool fused_add_relu = false;   // --fuse-relu: the residual add and its relu as add_relu_
};

// torchvision's _make_layer: `blocks` blocks of `planes`; the first gets the stride and,
// when stride != 1 or inplanes != planes * expansion, downsample = Sequential(conv1x1
// (stride, no bias), norm). Updates inplanes to planes * expansion. The norm layers are
// o.norm's (make_norm2d): torchvision's norm_layer.
// --fuse-relu (LayerOptions::fuse_relu): the normalisation a relu follows, as a
// BatchNorm2d that applies the relu itself (fused_relu) when fusing, else make_norm2d's;
// norm_relu runs norm then relu, skipping relu when the norm applied it.
nn::ModulePtr bn_before_relu(int64_t channels, const nn::LayerOptions& o);
Tensor norm_relu(nn::Module& norm, nn::ReLU& relu, const Tensor& x);

std::shared_ptr<nn::Sequential> make_resnet_layer(bool bottleneck, int64_t& inplanes, int64_t planes,
                                                  int64_t blocks, int64_t stride, bool inplace_relu,
                                                  const nn::LayerOptions& o);

}  // namespace oomlab
