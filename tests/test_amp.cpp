// test_amp.cpp — mixed precision: the bulk float16 / bfloat16 conversions equal the scalar
// ones bit for bit; every 16-bit CPU kernel is "widen, float32 kernel, round back"
// (table-driven over the ops on the autocast and --half paths, forward and backward);
// the autocast policy (what each op computes and returns in), the cast cache, float32
// master weights; GradScaler (unscale, skip, backoff, growth, state) and the fp16
// gradient underflow it cures; the meta device reproduces the CPU's allocation trace
// under autocast and refuses op/dtype pairs the CPU lacks with the CPU's message.
// ctest tier: models
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "engine/autograd/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_export.h"
#include "engine/nn/checkpoint_plan.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/concat.h"
#include "engine/ops/conv.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/embedding.h"
#include "engine/ops/layernorm.h"
#include "engine/ops/linear.h"
#include "engine/ops/loss.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax.h"
#include "engine/ops/upsample.h"
#include "engine/optim/optimizer.h"
#include "engine/train/mixed_precision.h"
#include "engine/train/train_step.h"
#include "experiments/plan/memory_report.h"
#include "models/model_zoo.h"
#include "tests/zoo_test_util.h"

using namespace oomlab;
using namespace oomlab::test;

namespace {

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Deterministic values uniform in [-2 scale, 2 scale) (float32, cpu).
Tensor randn(const Shape& s, uint64_t seed, double scale = 1.0) {
  Generator g{seed, 0};
  std::vector<double> v(size_t(shape_numel(s)));
  for (double& x : v) x = (g.next_unit() - 0.5) * 4.0 * scale;
  return Tensor::from_vector(v, s, DType::f32, cpu_device());
}

// Bit patterns of a float tensor (any dtype -> float32 first).
std::vector<uint32_t> float_bits(const Tensor& t) {
  std::vector<uint32_t> out;
  for (double v : t.to(DType::f32).contiguous().to_vector()) out.push_back(bits(float(v)));
  return out;
}

}  // namespace

// ---- conversions -------------------------------------------------------------------------

TEST(AmpConvert, BulkEqualsScalarForEveryHalfAndManyFloats) {
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint16_t> all(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
    std::vector<float> f(all.size());
    low_to_float(t, all.data(), f.data(), int64_t(all.size()));
    for (size_t i = 0; i < all.size(); ++i) {
      const float ref = t == DType::f16 ? half_to_float(all[i]) : bf16_to_float(all[i]);
      if (std::isnan(ref)) ASSERT_TRUE(std::isnan(f[i])) << i;
      else ASSERT_EQ(bits(ref), bits(f[i])) << "half bits " << i;
    }
    // floats: random bit patterns plus the rounding boundaries of every half exponent
    std::vector<float> in;
    Generator g{7, 0};
    for (int i = 0; i < 400000; ++i) {
      uint32_t u = uint32_t(g.next_unit() * 4294967295.0);
      float x; std::memcpy(&x, &u, 4);
      in.push_back(x);
    }
    for (float x : {0.0f, -0.0f, 65504.0f, 65520.0f, 65519.99f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-9f, INFINITY,
                    -INFINITY, NAN, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048})
      in.push_back(x);
    std::vector<uint16_t> out(in.size());
    float_to_low(t, in.data(), out.data(), int64_t(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t ref = t == DType::f16 ? float_to_half(in[i]) : float_to_bf16(in[i]);
      ASSERT_EQ(ref, out[i]) << "float bits " << bits(in[i]);
    }
  }
}

// ---- 16-bit kernels = float32 kernels on widened inputs, rounded --------------------------
// Each row runs an op (forward, then backward with a fixed upstream gradient) twice: on
// 16-bit inputs, and in float32 on the same (already 16-bit-representable) values. The
// 16-bit outputs and input gradients must equal the float32 ones rounded to 16 bits, bit
// for bit: the CPU's low-precision numerics are exactly "compute in float32, store low".
struct KernelRow {
  const char* name;
  std::vector<Shape> inputs;   // floating inputs (gradients checked for each)
  std::function<Tensor(const std::vector<Tensor>&)> op;
  bool one_kernel = true;      // the forward is one kernel: bit-identical; else rounded between kernels
};

// |a - b| <= ulps 16-bit ulps of the largest |b| (what rounding between kernels and 16-bit
// saved tensors can cost; a wrong kernel is off by O(1)).
void expect_close(const std::vector<double>& a, const std::vector<double>& b, DType low, double ulps,
                  const char* what) {
  ASSERT_EQ(a.size(), b.size());
  double big = 0;
  for (double v : b) big = std::max(big, std::fabs(v));
  const double tol = ulps * (low == DType::f16 ? 1.0 / 1024 : 1.0 / 128) * big;
  for (size_t k = 0; k < a.size(); ++k) ASSERT_LE(std::fabs(a[k] - b[k]), tol) << what << " at " << k;
}

class HalfKernels : public ::testing::TestWithParam<KernelRow> {};

TEST_P(HalfKernels, EqualFloat32KernelRounded) {
  const KernelRow& row = GetParam();
  for (DType low : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(row.name) + " " + dtype_name(low));
    std::vector<Tensor> lo, hi;
    for (size_t i = 0; i < row.inputs.size(); ++i) {
      Tensor base = randn(row.inputs[i], 100 + i).to(low);   // representable in `low`
      lo.push_back(base.clone().set_requires_grad(true));
      hi.push_back(base.to(DType::f32).set_requires_grad(true));
    }
    DeviceGenerator& gen = device_generator(cpu_device());
    gen.set_state(Generator{9, 0});
    Tensor ylo = row.op(lo);
    gen.set_state(Generator{9, 0});
    Tensor yhi = row.op(hi);
    ASSERT_EQ(ylo.dtype(), low);
    if (row.one_kernel) EXPECT_EQ(float_bits(ylo), float_bits(yhi.to(low)));
    else expect_close(ylo.to(DType::f32).to_vector(), yhi.to_vector(), low, 2, "output");
    Tensor g = randn(ylo.shape(), 77).to(low);
    ylo.backward(g);
    yhi.backward(g.to(DType::f32));
    for (size_t i = 0; i < lo.size(); ++i) {
      ASSERT_TRUE(lo[i].grad().defined()) << i;
      ASSERT_EQ(lo[i].grad().dtype(), low);
      // backward kernels read 16-bit saved tensors (y of softmax / sigmoid) and round
      // between kernels: within a few 16-bit ulps of the float32 op's gradient.
      expect_close(lo[i].grad().to(DType::f32).to_vector(), hi[i].grad().to_vector(), low, 8, "grad");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, HalfKernels,
    ::testing::Values(
        KernelRow{"linear", {{5, 7}, {3, 7}, {3}}, [](const auto& v) { return linear(v[0], v[1], v[2]); }, false},
        KernelRow{"linear_no_bias", {{5, 7}, {3, 7}}, [](const auto& v) { return linear(v[0], v[1], Tensor()); }},
        KernelRow{"bmm", {{2, 4, 5}, {2, 5, 3}}, [](const auto& v) { return bmm(v[0], v[1]); }},
        KernelRow{"conv2d",
                  {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}},
                  [](const auto& v) {
                    return conv2d(v[0], v[1], v[2], Conv2dParams{1, 1, 1, 1});
                  },
                  false},
        KernelRow{"conv2d_no_bias",
                  {{2, 3, 6, 6}, {4, 3, 3, 3}},
                  [](const auto& v) {
                    return conv2d(v[0], v[1], Tensor(), Conv2dParams{1, 1, 1, 1});
                  }},
        KernelRow{"relu", {{4, 9}}, [](const auto& v) { return relu(v[0]); }},
        KernelRow{"gelu", {{4, 9}}, [](const auto& v) { return gelu(v[0]); }},
        KernelRow{"sigmoid", {{4, 9}}, [](const auto& v) { return sigmoid(v[0]); }},
        KernelRow{"dropout", {{4, 33}}, [](const auto& v) { return dropout(v[0], 0.3, true); }},
        KernelRow{"softmax", {{3, 10}}, [](const auto& v) { return softmax(v[0]); }},
        KernelRow{"log_softmax", {{3, 10}}, [](const auto& v) { return log_softmax(v[0]); }},
        KernelRow{"layer_norm", {{4, 8}, {8}, {8}}, [](const auto& v) { return layer_norm(v[0], v[1], v[2], 1e-5); }},
        KernelRow{"max_pool2d",
                  {{2, 3, 6, 6}},
                  [](const auto& v) {
                    return max_pool2d(v[0], Pool2dParams{2, 2, 2, 2});
                  }},
        KernelRow{"avg_pool2d",
                  {{2, 3, 6, 6}},
                  [](const auto& v) {
                    return avg_pool2d(v[0], Pool2dParams{2, 2, 2, 2});
                  }},
        KernelRow{"upsample_bilinear", {{2, 3, 4, 4}}, [](const auto& v) { return upsample2x(v[0], "bilinear"); }},
        KernelRow{"add", {{3, 5}, {3, 5}}, [](const auto& v) { return add(v[0], v[1]); }},
        KernelRow{"mul", {{3, 5}, {3, 5}}, [](const auto& v) { return mul(v[0], v[1]); }}),
    [](const auto& info) { return std::string(info.param.name); });

// BatchNorm with a 16-bit input keeps float32 weight, bias and statistics (cuDNN's rule):
// output and input gradient equal the float32 op's rounded, parameter grads are float32.
TEST(HalfKernels, BatchNormTakesHalfInputWithFloatParameters) {
  for (DType low : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor x = randn({4, 3, 5, 5}, 3).to(low);
    Tensor xl = x.clone().set_requires_grad(true), xh = x.to(DType::f32).set_requires_grad(true);
    auto params = [] {
      return std::make_tuple(Tensor::ones({3}).set_requires_grad(true), Tensor::zeros({3}).set_requires_grad(true),
                             Tensor::zeros({3}), Tensor::ones({3}));
    };
    auto [wl, bl, ml, vl] = params();
    auto [wh, bh, mh, vh] = params();
    Tensor yl = batch_norm(xl, wl, bl, ml, vl, true, 0.1, 1e-5);
    Tensor yh = batch_norm(xh, wh, bh, mh, vh, true, 0.1, 1e-5);
    ASSERT_EQ(yl.dtype(), low);
    EXPECT_EQ(float_bits(yl), float_bits(yh.to(low)));
    EXPECT_EQ(float_bits(ml), float_bits(mh));   // float32 running stats, same values
    EXPECT_EQ(float_bits(vl), float_bits(vh));
    Tensor g = randn(yl.shape(), 5).to(low);
    yl.backward(g);
    yh.backward(g.to(DType::f32));
    EXPECT_EQ(wl.grad().dtype(), DType::f32);
    EXPECT_EQ(float_bits(xl.grad()), float_bits(xh.grad().to(low)));
    EXPECT_EQ(float_bits(wl.grad()), float_bits(wh.grad()));
  }
}

// ---- autocast policy -----------------------------------------------------------------------

TEST(Autocast, OpsComputeAndReturnWhatThePolicySays) {
  Tensor x = randn({4, 8}, 1), w = randn({6, 8}, 2).set_requires_grad(true), b = randn({6}, 3).set_requires_grad(true);
  for (DType low : {DType::f16, DType::bf16}) {
    AutocastGuard amp(low);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), low) << "lower";
    EXPECT_EQ(softmax(y).dtype(), DType::f32) << "fp32";
    EXPECT_EQ(layer_norm(y, Tensor(), Tensor(), 1e-5).dtype(), DType::f32);
    EXPECT_EQ(sum_all(y).dtype(), DType::f32);
    EXPECT_EQ(add(y, randn({4, 6}, 4)).dtype(), DType::f32) << "promote";
    EXPECT_EQ(relu(y).dtype(), low) << "unlisted: input dtype";
    Tensor img = randn({2, 3, 6, 6}, 5);
    Tensor c = conv2d(img, randn({4, 3, 3, 3}, 6), Tensor(), Conv2dParams{});
    EXPECT_EQ(c.dtype(), low);
    Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
    Tensor bn = batch_norm(c, Tensor::ones({4}), Tensor::zeros({4}), rm, rv, true, 0.1, 1e-5);
    EXPECT_EQ(bn.dtype(), low) << "fp32_compute keeps the input dtype";
    EXPECT_EQ(cross_entropy(y, Tensor::from_vector_i64({0, 1, 2, 3}, {4})).dtype(), DType::f32);
    EXPECT_EQ(cat({y, randn({4, 6}, 7)}, 1).dtype(), DType::f32);
    Tensor f64 = Tensor::ones({4, 8}, DType::f64);
    EXPECT_EQ(linear(f64, w.to(DType::f64), Tensor()).dtype(), DType::f64) << "float64 is never lowered";
  }
  EXPECT_EQ(linear(x, w, b).dtype(), DType::f32) << "off outside the guard";
}

TEST(Autocast, EveryOpThePolicyNamesHasOneRowAndUnknownNamesAreInternalErrors) {
  std::set<std::string> seen;
  for (const AutocastRule& r : autocast_rules()) EXPECT_TRUE(seen.insert(r.op).second) << r.op;
  EXPECT_THROW(autocast_rule("convolution"), InternalError);
  EXPECT_THROW(parse_amp("fp8"), ValueError);
  EXPECT_EQ(parse_amp("off"), std::nullopt);
  EXPECT_EQ(parse_amp("bf16"), DType::bf16);
}

// A weight used by several calls in one forward is cast once per version; the cache dies
// with the outermost guard; an in-place update (version bump) gets a fresh cast.
TEST(Autocast, CastCacheOneCastPerWeightPerVersionPerForward) {
  Tensor w = randn({6, 8}, 2).set_requires_grad(true);
  Tensor x = randn({4, 8}, 1);
  const int64_t before = autocast_cast_count();
  {
    AutocastGuard amp(DType::bf16);
    linear(x, w, Tensor());
    linear(x, w, Tensor());
    { AutocastGuard inner(DType::bf16); linear(x, w, Tensor()); }   // nested: same cache
    EXPECT_EQ(autocast_cast_count() - before, 1 + 3) << "w once, the non-leaf x each call";
    { NoGradGuard ng; w.bump_version(); }
    linear(x, w, Tensor());
    EXPECT_EQ(autocast_cast_count() - before, 2 + 4);
  }
  AutocastGuard again(DType::bf16);
  linear(x, w, Tensor());
  EXPECT_EQ(autocast_cast_count() - before, 3 + 5) << "a new forward casts again";
}

// Master weights: after an autocast training step, parameters, gradients and optimizer
// state are float32; gradients agree with the float32 step to bfloat16 precision.
TEST(Autocast, ParametersGradientsAndOptimizerStateStayFloat32) {
  for (const std::string name : {"resnet20", "bert-tiny", "unet-small", "tiny-ff"}) {
    SCOPED_TRACE(name);
    ModelConfig c = small_config(name, cpu_device());
    nn::ModulePtr m = build_model(name, c);
    ParamGroup g;
    g.params = m->named_parameters();
    g.lr = 1e-3;
    auto opt = make_optimizer("adam", {g});
    AutocastStrategy amp(DType::bf16);
    TrainStep step(*m, *opt, {&amp});
    step.run(make_input(name, c, 2), make_target(name, c, 2), false);
    for (const auto& [n, p] : m->named_parameters()) {
      EXPECT_EQ(p.dtype(), DType::f32) << n;
      ASSERT_TRUE(p.grad().defined()) << n;
      EXPECT_EQ(p.grad().dtype(), DType::f32) << n;
    }
    for (const auto& [n, t] : opt->state_tensors()) {
      if (dtype_is_floating(t.dtype())) {
        EXPECT_EQ(t.dtype(), DType::f32) << n;
      }
    }
  }
}

// Activation checkpointing under autocast: the re-run casts as the forward did, so the
// gradients are bit-identical to no checkpointing.
TEST(Autocast, CheckpointRecomputeRunsUnderTheForwardsAutocast) {
  for (const std::string name : {"resnet20", "bert-tiny"}) {
    SCOPED_TRACE(name);
    auto grads = [&](const std::string& policy) {
      ModelConfig c = small_config(name, cpu_device());
      nn::ModulePtr m = build_model(name, c);
      apply_checkpoint_plan(*m, plan_checkpoints(*m, model_probe_input(name, c), parse_checkpoint_policy(policy)));
      device_generator(cpu_device()).set_state(Generator{4, 0});
      {
        AutocastGuard amp(DType::f16);
        Tensor loss = cross_entropy((*m)(make_input(name, c, 2)), make_target(name, c, 2));
        loss.backward();   // backward outside autocast in real steps; inside is also fine
      }
      std::vector<std::vector<uint32_t>> out;
      for (const auto& [n, p] : m->named_parameters()) out.push_back(float_bits(p.grad()));
      return out;
    };
    EXPECT_EQ(grads("none"), grads("all"));
  }
}

// ---- GradScaler ------------------------------------------------------------------------------

TEST(GradScaler, UnscalesSkipsOnInfBacksOffAndGrows) {
  Tensor p = Tensor::ones({3}).set_requires_grad(true);
  ParamGroup g;
  g.params = {{"p", p}};
  g.lr = 1.0;
  auto opt = make_optimizer("sgd", {g});
  LossScaleSpec spec = parse_loss_scale("dynamic", true);
  GradScaler scaler(spec, /*growth_interval=*/3);
  EXPECT_EQ(scaler.scale(), 65536.0f);
  auto run = [&](double grad_value) {
    p.set_grad(Tensor::full({3}, grad_value * scaler.scale()));
    const bool go = scaler.before_optimizer_step(*opt);
    scaler.after_optimizer_step(*opt, go);
    return go;
  };
  EXPECT_TRUE(run(0.5));
  EXPECT_EQ(p.grad().to_vector(), std::vector<double>(3, 0.5)) << "unscaled in place";
  EXPECT_FALSE(run(INFINITY));
  EXPECT_TRUE(scaler.found_inf());
  EXPECT_EQ(scaler.scale(), 32768.0f) << "x0.5 on inf";
  EXPECT_FALSE(run(NAN));
  EXPECT_EQ(scaler.scale(), 16384.0f);
  EXPECT_TRUE(run(1)); EXPECT_TRUE(run(1));
  EXPECT_EQ(scaler.scale(), 16384.0f);
  EXPECT_TRUE(run(1));
  EXPECT_EQ(scaler.scale(), 32768.0f) << "x2 after growth_interval clean steps";
  EXPECT_EQ(scaler.growth_tracker(), 0);
  // state round trip
  GradScaler other(spec, 3);
  other.load_state(scaler.state_json());
  EXPECT_EQ(other.scale(), scaler.scale());
  EXPECT_THROW(other.load_state({{"scale", -1}, {"growth_tracker", 0}}), ValueError);
  EXPECT_THROW(other.load_state({{"scale", 1}, {"growth_tracker", UINT64_MAX}}), ValueError);
  // PyTorch's defaults
  GradScaler torch_default(spec);
  EXPECT_EQ(torch_default.scale(), 65536.0f);
  EXPECT_EQ(parse_loss_scale("auto", false).kind, LossScaleSpec::Kind::none) << "bf16: no scaling by default";
  EXPECT_EQ(parse_loss_scale("static:128", true).str(), "static:128");
  EXPECT_THROW(parse_loss_scale("static:0", true), ValueError);
  EXPECT_THROW(parse_loss_scale("static:x", true), ValueError);
  EXPECT_THROW(parse_loss_scale("sometimes", true), ValueError);
}

// The failure the source warns about: float16 gradients of a small loss underflow to zero
// without loss scaling (the weight learns nothing); with the scaler they are the float32
// gradients to half precision.
TEST(GradScaler, CuresFloat16GradientUnderflow) {
  Tensor x = randn({64, 32}, 1);
  Tensor w0 = randn({16, 32}, 2, 0.1);
  auto grad_of = [&](std::optional<DType> amp, GradScaler* scaler) {
    Tensor w = w0.clone().set_requires_grad(true);
    Tensor loss;
    {
      AutocastGuard guard(amp);
      loss = scale(mean_all(linear(x, w, Tensor())), 1e-6);   // a small loss: dL/dy = 1e-6 / 1024 ~ 1e-9
    }
    Tensor root = scaler ? scaler->backward_root(loss, 0, 1) : loss;
    root.backward();
    if (scaler) {
      ParamGroup g;
      g.params = {{"w", w}};
      auto opt = make_optimizer("sgd", {g});
      EXPECT_TRUE(scaler->before_optimizer_step(*opt));
    }
    return w.grad().to_vector();
  };
  const std::vector<double> ref = grad_of(std::nullopt, nullptr);
  const std::vector<double> plain = grad_of(DType::f16, nullptr);
  GradScaler scaler(parse_loss_scale("dynamic", true));
  const std::vector<double> scaled = grad_of(DType::f16, &scaler);
  int zeros = 0;
  for (double v : plain) zeros += v == 0.0;
  EXPECT_EQ(zeros, int(plain.size())) << "fp16 gradients underflow to zero without scaling";
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) err += (scaled[i] - ref[i]) * (scaled[i] - ref[i]), norm += ref[i] * ref[i];
  EXPECT_GT(norm, 0.0);
  EXPECT_LT(std::sqrt(err / norm), 5e-3) << "with the scaler they are float32's to half precision";
}

// ---- meta = cpu under autocast; meta refuses what the cpu lacks ------------------------------

TEST(Autocast, MetaTraceEqualsCpuForAmpSteps) {
  for (const std::string name : {"resnet20", "bert-tiny", "unet-small", "tiny-ff"}) {
    for (DType low : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(name + " " + dtype_name(low));
      auto record = [&](Device dev) {
        reset_allocators();
        CachingAllocator& al = allocator_for(dev);
        const ModelConfig c = small_config(name, dev);
        nn::ModulePtr m = build_model(name, c);
        Tensor x = input_on_device(name, c, 2), t = target_on_device(name, c, 2);
        ParamGroup g;
        g.params = m->named_parameters();
        g.lr = 1e-3;
        auto opt = make_optimizer("adam", {g});
        AutocastStrategy amp(low);
        // A dynamic 2^16 scale may overflow and skip the CPU's first step (values decide;
        // meta has none): a small static scale keeps both on the same path.
        GradScaler scaler(parse_loss_scale("static:8", true));
        TrainStep step(*m, *opt, {&amp, &scaler});
        al.record_history(true);
        step.run(x, t, true);
        EXPECT_FALSE(scaler.found_inf());
        auto trace = al.trace();
        auto stats = al.stats();
        al.record_history(false);
        return std::make_pair(trace, stats);
      };
      auto [cpu, cpu_stats] = record(cpu_device());
      auto [meta, meta_stats] = record(meta_device());
      expect_same_trace(cpu, meta, cpu_stats, meta_stats);
    }
  }
}

TEST(Autocast, MetaRefusesAnOpDtypeTheCpuLacksWithTheCpusMessage) {
  auto message = [](Device dev) {
    Tensor t = Tensor::zeros({4}, DType::i64, dev);
    try {
      sum_all(t);
    } catch (const NotImplementedError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string cpu = message(cpu_device());
  EXPECT_NE(cpu.find("has no cpu/int64 kernel"), std::string::npos) << cpu;
  EXPECT_EQ(message(meta_device()), cpu);
}

// ---- the per-op dtype audit: summary rows and Chrome-trace events ------------------------------

TEST(Autocast, SummaryShowsEachLayersComputeDtype) {
  RunSpec spec = RunSpec::for_model("bert-tiny");
  spec.seq_len = 16;
  spec.amp = DType::bf16;
  const ModelSummary s = summarize_model(spec, 2);
  std::map<std::string, std::string> by_type;
  for (const LayerRow& r : s.layers) by_type[r.type] = r.compute_dtype;
  EXPECT_EQ(by_type["Linear"], "bfloat16");
  EXPECT_EQ(by_type["LayerNorm"], "float32");
  EXPECT_EQ(by_type["Embedding"], "float32") << "unlisted: the weight's dtype";
  spec.amp = std::nullopt;
  for (const LayerRow& r : summarize_model(spec, 2).layers) EXPECT_EQ(r.compute_dtype, r.output_dtype) << r.name;
}

TEST(Autocast, DecisionsAreInstantEventsInTheChromeTrace) {
  OpProfiler::take();
  OpProfiler::enable(true);
  {
    AutocastGuard amp(DType::f16);
    linear(randn({2, 4}, 1), randn({3, 4}, 2).set_requires_grad(true), Tensor());
  }
  OpProfiler::enable(false);
  const std::vector<OpSpan> spans = OpProfiler::take();
  const nlohmann::json trace = chrome_trace_json(allocator_for(cpu_device()), spans);
  int casts = 0;
  for (const auto& e : trace["traceEvents"])
    if (e.value("cat", "") == "autocast") {
      EXPECT_EQ(e["ph"], "i");
      casts += e["name"] == "autocast linear: float32 -> float16";
    }
  EXPECT_EQ(casts, 2) << "input and weight: " << trace.dump();
}
