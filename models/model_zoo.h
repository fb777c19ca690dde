// model_zoo.h — build a model by name: the torchvision CNNs (vgg11/16[_bn], resnet18/34/50),
// He et al.'s CIFAR ResNets (resnet20/56), a small MLP and tiny-ff, BERT encoders for
// sequence classification (bert-tiny/mini/small/base, HF key names) and UNets for
// segmentation (unet, unet-small), all made of engine/nn layers.
// Contracts:
//  * Module names equal torchvision's state_dict keys (features.N / avgpool /
//    classifier.N; conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc), so parameter
//    counts match torchvision exactly (tests/test_models.cpp asserts them).
//  * Init is torchvision's (kaiming_normal fan_out/relu for convs, BN 1/0, VGG linear
//    N(0, 0.01) with bias 0, ResNet fc PyTorch default U(+-1/sqrt(fan_in))), drawn from a
//    local Generator seeded with ModelConfig::seed (reproducible, the default generator
//    is untouched). On meta nothing is initialised (no data is ever touched).
//  * Inputs too small for a model raise ShapeError naming the model and the input size.
//  * Unknown names raise ValueError listing the valid names.
//  * Every per-model fact (family, builder, input and task kind, default input, the flags
//    and techniques that apply) is a field of the model's row in models/model_table.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/nn/layers.h"
#include "engine/nn/module.h"

namespace oomlab {

struct ModelConfig {
  int64_t num_classes = 10;
  int64_t in_channels = 3, height = 224, width = 224;
  Device device = cpu_device();
  DType dtype = DType::f32;
  // The ResNets' normalisation layer (torchvision's norm_layer; resnet*): --norm bn|gn|none.
  // Other models refuse anything but batch.
  nn::NormKind norm = nn::NormKind::batch;
  bool inplace_relu = true;
  uint64_t seed = 0;
  // Sequence models (bert-*): tokens [B, seq_len] int64, id 0 = padding (the attention
  // mask is derived from it). 0 = the preset's value.
  int64_t seq_len = 128, vocab_size = 0, hidden = 0, layers = 0, heads = 0, max_positions = 0;
  double dropout = 0.1;
  // bert-*: the attention core as one fused op (--attention fused: output + log-sum-exp
  // saved, never the seq x seq probabilities) instead of bmm, softmax, dropout, bmm.
  bool fused_attention = false;
  // resnet*: each BatchNorm followed by a relu, and each residual add followed by one, runs
  // as one fused op (--fuse-relu on; batch_norm_relu, add_relu_: bit-identical, fewer passes).
  bool fuse_relu = false;
  // VGG: the classifier's two Dropout layers (torchvision's `dropout` argument).
  double classifier_dropout = 0.5;
  // UNet: base width (0 = preset) and depth (levels, 0 = preset).
  int64_t base_width = 0, depth = 0;
};

// What a model consumes and predicts (the trainer, summary and estimate use these).
enum class InputKind { image, tokens };           // float [B,C,H,W] | int64 [B,T]
enum class TaskKind { classification, segmentation };   // target [B] | [B,H,W]
InputKind model_input_kind(const std::string& name);
TaskKind model_task_kind(const std::string& name);
// The input shape of a batch for this config: [B, C, H, W] or [B, seq_len].
Shape model_input_shape(const std::string& name, const ModelConfig& cfg, int64_t batch);
// A one-sample input of that shape on cfg.device (images 0, token ids 1: no padding), for
// probes that only need the model's structure (checkpoint planning).
Tensor model_probe_input(const std::string& name, const ModelConfig& cfg);

// Valid names: vgg11 vgg11_bn vgg16 vgg16_bn resnet18 resnet34 resnet50 resnet20 resnet56 mlp
// bert-tiny bert-mini bert-small bert-base unet unet-small tiny-ff.
std::vector<std::string> model_names();
nn::ModulePtr build_model(const std::string& name, const ModelConfig& cfg);

// The input a model is meant for: 224x224x3 for the ImageNet models, 28x28x1
// (Fashion-MNIST) for resnet20/56, mlp and tiny-ff, 256x256x3 for unet, 64x64x3 for
// unet-small; 0 for the token models (bert-*: see model_input_shape).
int64_t default_image_size(const std::string& name);
int64_t default_in_channels(const std::string& name);
// ModelConfig{} with in_channels/height/width set to the model's defaults; bert-*:
// seq_len 128, num_classes 2; unet*: num_classes 2.
ModelConfig default_model_config(const std::string& name);
// Smallest height/width the model accepts (vgg: 32 because of its 5 max-pools; unet: 16
// = 2^depth for the preset depth, and sizes must also be multiples of it; others 1).
int64_t min_image_size(const std::string& name);

// ---- per-family builders (one file each; `name` must belong to the family) ----
// VGG (models/vgg.cpp): features = cfg A (vgg11) / D (vgg16) 3x3 convs (+BN for *_bn)
// with 2x2 max-pools, avgpool = AdaptiveAvgPool2d(7, 7), classifier = Linear(25088, 4096),
// ReLU, Dropout(0.5), Linear(4096, 4096), ReLU, Dropout(0.5), Linear(4096, num_classes).
nn::ModulePtr build_vgg(const std::string& name, const ModelConfig& cfg);
// ResNet (models/resnet.cpp): torchvision v1.5 (Bottleneck stride on the 3x3 conv).
nn::ModulePtr build_resnet(const std::string& name, const ModelConfig& cfg);
// CIFAR ResNet (models/cifar_resnet.cpp): see models/resnet.h for the shortcut choice.
nn::ModulePtr build_cifar_resnet(const std::string& name, const ModelConfig& cfg);
// MLP (models/mlp.cpp): Sequential(Flatten, Linear(C*H*W, 256), ReLU, Linear(256, 128),
// ReLU, Linear(128, num_classes)); keys "1.weight", "3.weight", "5.weight" (+ biases).
nn::ModulePtr build_mlp(const std::string& name, const ModelConfig& cfg);

// BERT (models/bert.cpp): HF BertForSequenceClassification; names bert-tiny (2 layers,
// hidden 128, 2 heads), bert-mini (4/256/4), bert-small (4/512/8), bert-base (12/768/12);
// ModelConfig's hidden/layers/heads/vocab_size/max_positions/seq_len override the preset
// when non-zero. Keys: bert.embeddings.*, bert.encoder.layer.N.*, bert.pooler.dense.*,
// classifier.*. Input int64 ids [B, T], id 0 = padding; output logits [B, num_classes].
struct BertShape {
  int64_t vocab_size = 30522, hidden = 768, layers = 12, heads = 12, intermediate = 3072;
  int64_t max_positions = 512, type_vocab_size = 2, seq_len = 128;
};
// Resolves preset + overrides; ValueError for hidden % heads != 0 (naming both),
// seq_len > max_positions, or an unknown name.
BertShape bert_shape(const std::string& name, const ModelConfig& cfg);
// Parameters of HF BertModel (embeddings + encoder + pooler, no classifier).
int64_t bert_parameter_count(const BertShape& s);
nn::ModulePtr build_bert(const std::string& name, const ModelConfig& cfg);
// UNet (models/unet.cpp), Ronneberger et al. 2015 layout with BN: `unet` (base 64,
// depth 4), `unet-small` (base 16, depth 4); cfg.base_width/depth override. Encoder level
// i: double conv (3x3 pad 1, no bias, BN, ReLU, twice) to base*2^i channels then 2x2
// max-pool; bottleneck double conv to base*2^depth; decoder: ConvTranspose2d 2x2 stride 2
// halving channels, cat([skip, up], 1), double conv; final 1x1 conv (with bias) to
// num_classes. Keys: encoder.I.{0,1,3,4}.*, bottleneck.*, up.I.*, decoder.I.*, final.*.
// H and W must be divisible by 2^depth (ShapeError naming the model and the size).
// Output: logits [B, num_classes, H, W].
int64_t unet_depth(const std::string& name, const ModelConfig& cfg);
int64_t unet_base_width(const std::string& name, const ModelConfig& cfg);
nn::ModulePtr build_unet(const std::string& name, const ModelConfig& cfg);
// tiny-ff (models/tiny_ff.cpp): the AMP table's "tiny feed-forward" network; the source
// does not specify it further, so it is Sequential(Flatten, Linear(C*H*W, 512), ReLU,
// Linear(512, 512), ReLU, Linear(512, num_classes)) with PyTorch's default init.
// Keys: 1.*, 3.*, 5.*.
nn::ModulePtr build_tiny_ff(const std::string& name, const ModelConfig& cfg);

// ---- helpers shared by the family builders (models/model_zoo.cpp) ----
// Layer options for a zoo model: cfg's device/dtype, skip_init (init_torchvision_weights
// initialises everything afterwards from one seeded generator).
nn::LayerOptions zoo_layer_options(const ModelConfig& cfg);
enum class LinearInit { normal_0_01, pytorch_default };   // VGG / ResNet classifier init
// torchvision's init over model.named_modules() in pre-order with Generator{cfg.seed}:
// Conv2d kaiming_normal(fan_out, relu) and bias 0; BatchNorm2d weight 1, bias 0; Linear
// per `linear`. No-op on meta.
void init_torchvision_weights(nn::Module& model, const ModelConfig& cfg, LinearInit linear);
// Throws ShapeError "<model>: input CxHxW is too small ..." if h or w < min_size.
void check_min_input(const std::string& model, int64_t c, int64_t h, int64_t w, int64_t min_size,
                     const char* why);

}  // namespace oomlab
