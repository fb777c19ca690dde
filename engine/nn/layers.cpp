// layers.cpp — torch.nn layers on top of engine/ops, and nn::init fills.
// Init fills write host memory directly (cpu) or a host staging tensor copied to the
// device (cuda; the staging buffer lives in the cpu allocator, so the device's allocation
// sequence is the same as on meta). Random fills consume ceil(n/4) Philox blocks of the
// given Generator; block b yields elements 4b..4b+3, so values do not depend on threads.
// BatchNorm2d increments num_batches_tracked (int64) on its device (add_scalar_inplace: no
// host round trip, no synchronisation).
#include "engine/nn/layers.h"

#include "engine/autograd/checkpoint.h"

#include <cmath>
#include <numeric>

#include "engine/core/error.h"
#include "engine/ops/activation.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/groupnorm.h"
#include "engine/ops/dropout.h"
#include "engine/ops/linear.h"

namespace oomlab::nn {

// ------------------------------------------------------------------------------------
// nn::init
namespace {

inline double unit_open(uint32_t w) { return (double(w) + 0.5) * (1.0 / 4294967296.0); }  // (0,1)

template <class T, class BlockFn, class Conv>
void fill_typed(T* p, int64_t n, BlockFn f, Conv conv) {
  const int64_t nb = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (nb >= 4096)
  for (int64_t b = 0; b < nb; ++b) {
    double v[4];
    f(b, v);
    for (int64_t j = 0, i = 4 * b; j < 4 && i < n; ++j, ++i) p[i] = conv(v[j]);
  }
}

// Writes f's values (4 per block index) into t, whatever its floating dtype and device.
template <class BlockFn>
void fill_blocks(Tensor& t, BlockFn f) {
  if (t.device().is_meta() || t.numel() == 0) return;
  OOMLAB_CHECK_T(ShapeError, t.is_contiguous(), "nn::init: tensor ", t.str(), " must be contiguous");
  Tensor host = t.device().is_cpu() ? t : Tensor::empty(t.shape(), t.dtype(), cpu_device());
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::f32: fill_typed(host.data<float>(), n, f, [](double v) { return float(v); }); break;
    case DType::f64: fill_typed(host.data<double>(), n, f, [](double v) { return v; }); break;
    case DType::f16: fill_typed(host.data<uint16_t>(), n, f, [](double v) { return float_to_half(float(v)); }); break;
    case DType::bf16: fill_typed(host.data<uint16_t>(), n, f, [](double v) { return float_to_bf16(float(v)); }); break;
    default:
      throw DTypeError(str_cat("nn::init: cannot fill ", t.str(), " (floating dtypes only)"));
  }
  if (t.device().is_cpu()) t.bump_version();
  else t.copy_(host);
}

}  // namespace

namespace init {

void constant_(Tensor& t, double value) {
  if (!dtype_is_floating(t.dtype()) || !t.device().is_cpu()) { t.fill_(value); return; }
  fill_blocks(t, [value](int64_t, double* v) { v[0] = v[1] = v[2] = v[3] = value; });
}

void uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  if (t.device().is_meta()) return;
  const uint64_t seed = gen.seed, base = gen.reserve(uint64_t(t.numel()));
  fill_blocks(t, [=](int64_t b, double* v) {
    auto w = Generator::block(seed, base, uint64_t(b));
    for (int j = 0; j < 4; ++j) v[j] = lo + (hi - lo) * unit_open(w[j]);
  });
}

void normal_(Tensor& t, double mean, double std, Generator& gen) {
  if (t.device().is_meta()) return;
  const uint64_t seed = gen.seed, base = gen.reserve(uint64_t(t.numel()));
  fill_blocks(t, [=](int64_t b, double* v) {   // Box-Muller: two normals per word pair
    auto w = Generator::block(seed, base, uint64_t(b));
    for (int j = 0; j < 4; j += 2) {
      double r = std::sqrt(-2.0 * std::log(unit_open(w[j]))), th = 6.283185307179586 * unit_open(w[j + 1]);
      v[j] = mean + std * r * std::cos(th);
      v[j + 1] = mean + std * r * std::sin(th);
    }
  });
}

int64_t fan_in(const Tensor& w) {
  OOMLAB_CHECK_T(ShapeError, w.dim() >= 2, "fan_in: needs a weight of dim >= 2, got ", w.str());
  int64_t rf = 1;
  for (int64_t d = 2; d < w.dim(); ++d) rf *= w.size(d);
  return w.size(1) * rf;
}

int64_t fan_out(const Tensor& w) {
  OOMLAB_CHECK_T(ShapeError, w.dim() >= 2, "fan_out: needs a weight of dim >= 2, got ", w.str());
  int64_t rf = 1;
  for (int64_t d = 2; d < w.dim(); ++d) rf *= w.size(d);
  return w.size(0) * rf;
}

void kaiming_normal_fan_out_relu_(Tensor& w, Generator& gen) {
  int64_t fo = fan_out(w);
  normal_(w, 0.0, fo > 0 ? std::sqrt(2.0 / double(fo)) : 0.0, gen);
}

}  // namespace init

namespace {
// Runs init(gen) with the options' generator, or exclusively with the device's own.
template <class F> void with_generator(const LayerOptions& o, F&& init) {
  if (o.generator) init(*o.generator);
  else device_generator(o.device).with(init);
}

// PyTorch's reset_parameters for Linear/Conv: kaiming_uniform(a=sqrt(5)) on the weight
// reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias uses the same bound.
void default_init(Tensor& w, Tensor& b, Generator& gen) {
  int64_t fi = init::fan_in(w);
  double bound = fi > 0 ? 1.0 / std::sqrt(double(fi)) : 0.0;
  init::uniform_(w, -bound, bound, gen);
  if (b.defined()) init::uniform_(b, -bound, bound, gen);
}
}  // namespace

// ------------------------------------------------------------------------------------
Linear::Linear(int64_t in, int64_t out, bool has_bias, const LayerOptions& opt)
    : in_features(in), out_features(out) {
  OOMLAB_CHECK(in >= 0 && out >= 0, "Linear: features must be >= 0, got in=", in, " out=", out);
  weight = register_parameter("weight", Tensor::empty({out, in}, opt.dtype, opt.device));
  if (has_bias) bias = register_parameter("bias", Tensor::empty({out}, opt.dtype, opt.device));
  if (!opt.skip_init) with_generator(opt, [&](Generator& g) { reset_parameters(g); });
}

void Linear::reset_parameters(Generator& gen) { default_init(weight, bias, gen); }

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

// ------------------------------------------------------------------------------------
Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, const Conv2dOptions& o, const LayerOptions& opt)
    : in_channels(in), out_channels(out), kernel_size(k) {
  OOMLAB_CHECK(in > 0 && out > 0 && k > 0, "Conv2d: channels and kernel_size must be > 0, got in=", in,
               " out=", out, " kernel=", k);
  OOMLAB_CHECK(o.groups > 0 && in % o.groups == 0 && out % o.groups == 0, "Conv2d: groups=", o.groups,
               " must divide in_channels=", in, " and out_channels=", out);
  OOMLAB_CHECK(o.stride > 0 && o.padding >= 0 && o.dilation > 0, "Conv2d: bad stride=", o.stride,
               " padding=", o.padding, " dilation=", o.dilation);
  params = Conv2dParams{o.stride, o.stride, o.padding, o.padding, o.dilation, o.dilation, o.groups};
  weight = register_parameter("weight", Tensor::empty({out, in / o.groups, k, k}, opt.dtype, opt.device));
  if (o.bias) bias = register_parameter("bias", Tensor::empty({out}, opt.dtype, opt.device));
  if (!opt.skip_init) with_generator(opt, [&](Generator& g) { reset_parameters(g); });
}

void Conv2d::reset_parameters(Generator& gen) { default_init(weight, bias, gen); }

Tensor Conv2d::forward(const Tensor& x) {
  return fused_relu ? conv2d_relu(x, weight, bias, params) : conv2d(x, weight, bias, params);
}

// ------------------------------------------------------------------------------------
BatchNorm2d::BatchNorm2d(int64_t c, double eps, double momentum, const LayerOptions& opt)
    : num_features(c), eps(eps), momentum(momentum) {
  OOMLAB_CHECK(c > 0, "BatchNorm2d: num_features must be > 0, got ", c);
  weight = register_parameter("weight", Tensor::empty({c}, opt.dtype, opt.device));
  bias = register_parameter("bias", Tensor::empty({c}, opt.dtype, opt.device));
  running_mean = register_buffer("running_mean", Tensor::empty({c}, opt.dtype, opt.device));
  running_var = register_buffer("running_var", Tensor::empty({c}, opt.dtype, opt.device));
  num_batches_tracked = register_buffer("num_batches_tracked", Tensor::empty({}, DType::i64, opt.device));
  // Deterministic fills happen even with skip_init (they draw no random numbers).
  init::constant_(weight, 1.0);
  init::constant_(bias, 0.0);
  init::constant_(running_mean, 0.0);
  init::constant_(running_var, 1.0);
  if (opt.device.is_cpu() || opt.device.is_meta()) num_batches_tracked.fill_(0.0);
  else num_batches_tracked.copy_(Tensor::zeros({}, DType::i64, cpu_device()));   // once, at construction
}

GroupNorm::GroupNorm(int64_t groups, int64_t c, double eps, const LayerOptions& opt)
    : num_groups(groups), num_channels(c), eps(eps) {
  OOMLAB_CHECK(groups >= 1 && c >= 1 && c % groups == 0, "GroupNorm: ", c, " channels cannot be split into ",
               groups, " groups");
  weight = register_parameter("weight", Tensor::empty({c}, opt.dtype, opt.device));
  bias = register_parameter("bias", Tensor::empty({c}, opt.dtype, opt.device));
  init::constant_(weight, 1.0);
  init::constant_(bias, 0.0);
}

Tensor GroupNorm::forward(const Tensor& x) { return group_norm(x, num_groups, weight, bias, eps); }

ModulePtr make_norm2d(int64_t c, const LayerOptions& o) {
  switch (o.norm) {
    case NormKind::batch: return std::make_shared<BatchNorm2d>(c, 1e-5, 0.1, o);
    case NormKind::group: return std::make_shared<GroupNorm>(std::gcd(int64_t(32), c), c, 1e-5, o);
    case NormKind::none: return std::make_shared<Identity>();
  }
  return nullptr;
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  bool training = is_training();
  const bool sync = training && sync_all_reduce;   // SyncBatchNorm (statistics over all ranks)
  auto run = [&](Tensor& rm, Tensor& rv) {
    if (sync) {
      Tensor y = sync_batch_norm(x, weight, bias, rm, rv, true, momentum, eps, sync_all_reduce);
      return fused_relu ? relu_(y) : y;
    }
    return fused_relu ? batch_norm_relu(x, weight, bias, rm, rv, training, momentum, eps)
                      : batch_norm(x, weight, bias, rm, rv, training, momentum, eps);
  };
  if (training && checkpoint_recomputing()) {   // the re-run of a checkpointed segment:
    Tensor no_mean, no_var;                     // same batch statistics, running stats untouched
    return run(no_mean, no_var);
  }
  Tensor y = run(running_mean, running_var);
  if (training) add_scalar_inplace(num_batches_tracked, 1.0);   // on the device; no-op on meta
  return y;
}

// ------------------------------------------------------------------------------------
Tensor ReLU::forward(const Tensor& x) {
  if (applied_by_previous) return x;   // the layer before rectified x (--fuse-relu)
  if (!inplace) return relu(x);
  Tensor y = x;
  return relu_(y);
}

MaxPool2d::MaxPool2d(int64_t k, int64_t s, int64_t p) {
  if (s == 0) s = k;
  OOMLAB_CHECK(k > 0 && s > 0 && p >= 0 && 2 * p <= k, "MaxPool2d: bad kernel_size=", k, " stride=", s,
               " padding=", p, " (padding must be at most half the kernel)");
  params = Pool2dParams{k, k, s, s, p, p};
}
Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, params); }

AvgPool2d::AvgPool2d(int64_t k, int64_t s, int64_t p) {
  if (s == 0) s = k;
  OOMLAB_CHECK(k > 0 && s > 0 && p >= 0 && 2 * p <= k, "AvgPool2d: bad kernel_size=", k, " stride=", s,
               " padding=", p, " (padding must be at most half the kernel)");
  params = Pool2dParams{k, k, s, s, p, p};
}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, params); }

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, out_h, out_w); }

Dropout::Dropout(double p) : p(p) {
  OOMLAB_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

// ------------------------------------------------------------------------------------
Sequential::Sequential(std::vector<ModulePtr> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(ModulePtr m) {
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : items_) h = (*m)(h);
  return h;
}

}  // namespace oomlab::nn
