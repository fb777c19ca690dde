// layers.h — the torch.nn layers oomlab's models are built from: Linear, Conv2d,
// BatchNorm2d, ReLU, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Dropout, Flatten,
// Sequential, Identity, plus nn::init (in-place initialisers driven by an explicit
// Philox Generator so a model's init is reproducible from one seed).
// Contracts:
//  * Parameter/buffer names and shapes are PyTorch's (weight [out, in] / [K, C/g, R, S],
//    bias, running_mean, running_var, num_batches_tracked as an int64 scalar).
//  * LayerOptions picks device/dtype; default init is PyTorch's (uniform
//    +-1/sqrt(fan_in) for Linear/Conv2d weight and bias; BN weight 1, bias 0) drawn from
//    options.generator (default generator if null). skip_init skips the random draws
//    (weights stay unwritten until the model zoo re-initialises them); deterministic
//    fills (BN weight/bias, running stats) always happen. On meta nothing is written.
//  * The forward of each layer is the op of the same name (engine/ops): see those
//    headers for what is saved for backward.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/rng.h"
#include "engine/nn/module.h"
#include "engine/ops/conv.h"
#include "engine/ops/pool.h"
#include "engine/ops/sync_batchnorm.h"

namespace oomlab::nn {

// The 2-d normalisation a block builds (torchvision's norm_layer): BatchNorm2d, GroupNorm
// with gcd(32, C) groups (Wu & He's G = 32 where the channels allow), or none (Identity).
enum class NormKind { batch, group, none };

struct LayerOptions {
  Device device = cpu_device();
  DType dtype = DType::f32;
  NormKind norm = NormKind::batch;   // used by blocks that build a normalisation (make_norm2d)
  Generator* generator = nullptr;   // nullptr: the generator of `device` (rng.h)
  bool skip_init = false;           // no random init (contents undefined until initialised)
  bool fused_attention = false;     // attention blocks use fused_scaled_dot_product_attention
  bool fuse_relu = false;           // models fuse BatchNorm2d + relu (fused_relu) and add + relu
};

// ---- nn::init: in-place fills (no autograd). No-ops on meta. Random fills draw from
// `gen` through counter-based Philox blocks, so values are independent of thread count.
namespace init {
void constant_(Tensor& t, double value);
void uniform_(Tensor& t, double lo, double hi, Generator& gen);
void normal_(Tensor& t, double mean, double std, Generator& gen);
// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (weights of dim >= 2).
int64_t fan_in(const Tensor& w);
int64_t fan_out(const Tensor& w);
// torch.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu"): std = sqrt(2 / fan_out).
void kaiming_normal_fan_out_relu_(Tensor& w, Generator& gen);
}  // namespace init

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, const LayerOptions& opt = {});
  Tensor forward(const Tensor& x) override;   // x [N, in] -> [N, out]
  const char* type_name() const override { return "Linear"; }
  void reset_parameters(Generator& gen);      // PyTorch default init
  Tensor weight, bias;                        // bias undefined when bias=false
  int64_t in_features, out_features;
};

struct Conv2dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv2dOptions& o = {},
         const LayerOptions& opt = {});
  Tensor forward(const Tensor& x) override;   // x [N, C, H, W] -> [N, K, P, Q]
  const char* type_name() const override { return "Conv2d"; }
  void reset_parameters(Generator& gen);      // PyTorch default init
  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size;
  Conv2dParams params;
  // Set by a model whose relu follows this conv (--fuse-relu; models/vgg.cpp): forward is
  // conv2d_relu (the relu in the bias pass, bit-identical) and the model's ReLU passes through.
  bool fused_relu = false;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       const LayerOptions& opt = {});
  Tensor forward(const Tensor& x) override;   // training: batch stats + running update
  const char* type_name() const override { return sync_all_reduce ? "SyncBatchNorm" : "BatchNorm2d"; }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t num_features;
  double eps, momentum;
  // Set (engine/parallel/sync_batchnorm.h: convert_sync_batchnorm): training forwards use
  // sync_batch_norm with this all-reduce (statistics over every rank; a checkpoint re-run
  // communicates again, so ranks stay in step). Empty: ordinary BatchNorm2d. Eval and
  // state_dict names are unchanged either way.
  AllReduceSumFn sync_all_reduce;
  // Set by a model whose relu follows this layer (--fuse-relu; models/resnet.cpp
  // norm_relu): forward returns relu(batch_norm(x)) through batch_norm_relu's fused kernels
  // (bit-identical; SyncBatchNorm: sync_batch_norm, then relu_), and the model skips its relu.
  bool fused_relu = false;
};

// torch.nn.GroupNorm(num_groups, num_channels, eps, affine=True): weight 1, bias 0; no
// running statistics, so training and evaluation compute the same thing.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, const LayerOptions& opt = {});
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "GroupNorm"; }
  Tensor weight, bias;
  int64_t num_groups, num_channels;
  double eps;
};

class ReLU : public Module {
 public:
  explicit ReLU(bool inplace = false) : inplace(inplace) {}
  Tensor forward(const Tensor& x) override;   // inplace: relu_ on x's storage
  bool modifies_input() const override { return inplace && !applied_by_previous; }
  const char* type_name() const override { return "ReLU"; }
  bool inplace;
  // Set by a model that fused this relu into the layer before it (--fuse-relu: a Conv2d's
  // fused_relu in models/vgg.cpp): forward returns x, which that layer already rectified.
  bool applied_by_previous = false;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0 /* 0: = kernel */, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "MaxPool2d"; }
  Pool2dParams params;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0 /* 0: = kernel */, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "AvgPool2d"; }
  Pool2dParams params;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : out_h(out_h), out_w(out_w) {}
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "AdaptiveAvgPool2d"; }
  int64_t out_h, out_w;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;   // identity in eval; default generator
  const char* type_name() const override { return "Dropout"; }
  double p;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1) : start_dim(start_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim); }
  const char* type_name() const override { return "Flatten"; }
  int64_t start_dim;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  const char* type_name() const override { return "Identity"; }
};

// The normalisation layer o.norm names, for c channels (see NormKind).
ModulePtr make_norm2d(int64_t c, const LayerOptions& o);

// Children are named "0", "1", ... in insertion order; forward chains them, each child
// called through operator() so its allocations carry its own name.
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<ModulePtr> modules);
  void push_back(ModulePtr m);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "Sequential"; }
  size_t size() const { return items_.size(); }
  const ModulePtr& operator[](size_t i) const { return items_.at(i); }
 private:
  std::vector<ModulePtr> items_;
};

}  // namespace oomlab::nn
