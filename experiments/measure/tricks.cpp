// tricks.cpp — the memory probes of `oomlab trick` (tricks.h), all on the meta device.
#include "experiments/measure/tricks.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/io/atomic_file.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/layers.h"
#include "engine/ops/elementwise.h"
#include "engine/optim/optimizer.h"
#include "engine/train/results.h"
#include "engine/train/train_step.h"
#include "models/model_zoo.h"

namespace oomlab {
using json = nlohmann::json;

namespace {
CachingAllocator& meta_allocator() { return allocator_for(meta_device()); }
int64_t allocated() { return meta_allocator().stat("allocated_bytes.all.current"); }

std::unique_ptr<Optimizer> sgd(nn::Module& m) {
  ParamGroup g;
  g.params = m.named_parameters();
  g.lr = 0.01;
  g.momentum = 0.9;
  return make_optimizer("sgd", {g});
}

// `blocks` x [Conv2d(C, C, 3, pad 1, no bias), BatchNorm2d(C), ReLU(inplace)] after a stem
// conv from 3 channels, on 3 x 32 x 32 inputs, then a classifier: a VGG/ResNet-style stack.
std::shared_ptr<nn::Sequential> conv_stack(int64_t blocks, int64_t channels, bool inplace_relu) {
  nn::LayerOptions o;
  o.device = meta_device();
  Generator g{0, 0};
  o.generator = &g;
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Conv2d>(3, channels, 3, nn::Conv2dOptions{1, 1, 1, 1, false}, o));
  for (int64_t i = 0; i < blocks; ++i) {
    s->push_back(std::make_shared<nn::Conv2d>(channels, channels, 3, nn::Conv2dOptions{1, 1, 1, 1, false}, o));
    s->push_back(std::make_shared<nn::BatchNorm2d>(channels, 1e-5, 0.1, o));
    s->push_back(std::make_shared<nn::ReLU>(inplace_relu));
  }
  s->push_back(std::make_shared<nn::Flatten>(1));
  s->push_back(std::make_shared<nn::Linear>(channels * 32 * 32, 10, true, o));
  return s;
}

// T9.2: N iterations adding each loss into a running total.
json graph_history(int64_t batch) {
  const int64_t iterations = 8;
  json variants = json::array();
  struct Variant { const char* name; bool train, detach; };
  for (const Variant v : {Variant{"train: total_loss += loss", true, false},
                          Variant{"train: total_loss += loss.detach() (or .item())", true, true},
                          Variant{"eval without no_grad: total_loss += loss", false, false}}) {
    reset_allocators();
    json per_iteration = json::array();
    {
      ModelConfig cfg = default_model_config("mlp");
      cfg.device = meta_device();
      nn::ModulePtr model = build_model("mlp", cfg);
      auto opt = sgd(*model);
      const Tensor x = Tensor::empty({batch, 1, 28, 28}, DType::f32, meta_device());
      const Tensor y = Tensor::empty({batch}, DType::i64, meta_device());
      Tensor total = Tensor::zeros({}, DType::f32, meta_device());
      for (int64_t i = 0; i < iterations; ++i) {
        opt->zero_grad(true);
        Tensor loss = task_loss((*model)(x), y);
        if (v.train) {
          loss.backward();
          opt->step();
        }
        total = add(total, v.detach ? loss.detach() : loss);
        loss = Tensor();
        per_iteration.push_back(allocated());
      }
    }
    const double growth = double(per_iteration[iterations - 1].get<int64_t>() - per_iteration[1].get<int64_t>()) /
                          double(iterations - 2);
    variants.push_back({{"variant", v.name}, {"allocated_after_iteration", per_iteration},
                        {"growth_bytes_per_iteration", growth}});
  }
  return {{"trick", "graph-history"}, {"model", "mlp"}, {"batch", batch}, {"iterations", iterations},
          {"claim", "total_loss += loss keeps every step's graph alive, so memory grows per iteration; "
                    "loss.item() / detach() does not"},
          {"variants", variants}};
}

// T9.3: keep every intermediate of a forward alive vs rebinding one name.
json del_intermediates(int64_t batch) {
  json variants = json::array();
  for (const bool grad : {false, true})
    for (const bool keep : {true, false}) {
      reset_allocators();
      int64_t peak = 0, start = 0;
      {
        auto net = conv_stack(4, 32, /*inplace_relu=*/false);
        const Tensor x = Tensor::empty({batch, 3, 32, 32}, DType::f32, meta_device());
        start = allocated();
        meta_allocator().reset_peak_stats();
        GradModeGuard mode(grad);
        std::vector<Tensor> kept{x};
        Tensor h = x;
        for (size_t i = 0; i < net->size(); ++i) {
          h = (*(*net)[i])(h);
          if (keep) kept.push_back(h);
        }
        peak = meta_allocator().stat("allocated_bytes.all.peak");
      }
      variants.push_back({{"variant", str_cat(grad ? "training (grad)" : "inference (no_grad)", ", ",
                                              keep ? "every intermediate named" : "x = layer(x)")},
                          {"grad", grad}, {"keep_intermediates", keep}, {"forward_peak_bytes", peak - start}});
    }
  return {{"trick", "del-intermediates"}, {"model", "conv stack: stem + 4 x (conv3x3 32, BN, ReLU), 3x32x32"},
          {"batch", batch},
          {"claim", "avoiding new names / del of intermediates in forward saves memory: true for inference, "
                    "mostly irrelevant in training where autograd keeps the activations anyway"},
          {"variants", variants}};
}

// T9.4: ReLU(inplace=True) vs out of place after BatchNorm.
json inplace_relu(int64_t batch) {
  const int64_t blocks = 4, channels = 32;
  json variants = json::array();
  for (const bool inplace : {false, true}) {
    reset_allocators();
    StepMemory m;
    {
      auto net = conv_stack(blocks, channels, inplace);
      auto opt = sgd(*net);
      const Tensor x = Tensor::empty({batch, 3, 32, 32}, DType::f32, meta_device());
      const Tensor y = Tensor::empty({batch}, DType::i64, meta_device());
      m = train_step(*net, *opt, x, y).memory;
    }
    variants.push_back({{"variant", inplace ? "ReLU(inplace=True)" : "ReLU()"}, {"inplace", inplace},
                        {"activation_bytes", m.after_forward - m.start_allocated},
                        {"forward_peak_bytes", m.forward_peak - m.start_allocated},
                        {"step_peak_bytes", m.step_peak}});
  }
  return {{"trick", "inplace-relu"}, {"model", "conv stack: stem + 4 x (conv3x3 32, BN, ReLU), 3x32x32"},
          {"batch", batch}, {"relus", blocks}, {"relu_output_bytes", batch * channels * 32 * 32 * 4},
          {"claim", "in-place ReLU saves one activation per ReLU"}, {"variants", variants}};
}

// T9.6: empty_cache between steps.
json empty_cache(int64_t batch) {
  reset_allocators();
  CachingAllocator& al = meta_allocator();
  json j = {{"trick", "empty-cache"}, {"model", "conv stack: stem + 4 x (conv3x3 32, BN, ReLU), 3x32x32"},
            {"batch", batch},
            {"claim", "empty_cache() returns reserved memory to the driver; allocated memory is unchanged and the "
                      "memory a framework can use does not grow"}};
  {
    auto net = conv_stack(4, 32, true);
    auto opt = sgd(*net);
    const Tensor x = Tensor::empty({batch, 3, 32, 32}, DType::f32, meta_device());
    const Tensor y = Tensor::empty({batch}, DType::i64, meta_device());
    train_step(*net, *opt, x, y);
    train_step(*net, *opt, x, y);
    auto snap = [&] {
      return json{{"allocated_bytes", al.stat("allocated_bytes.all.current")},
                  {"reserved_bytes", al.stat("reserved_bytes.all.current")},
                  {"segments", al.stat("segment.all.current")}};
    };
    j["before_empty_cache"] = snap();
    al.empty_cache();
    j["after_empty_cache"] = snap();
    al.reset_peak_stats();
    const int64_t device_allocs = al.stat("num_device_alloc");
    train_step(*net, *opt, x, y, /*track_memory=*/false);
    j["next_step"] = {{"reserved_peak_bytes", al.stat("reserved_bytes.all.peak")},
                      {"allocated_peak_bytes", al.stat("allocated_bytes.all.peak")},
                      {"device_allocations", al.stat("num_device_alloc") - device_allocs}};
  }
  reset_allocators();
  return j;
}

const std::vector<std::pair<std::string, std::function<json(int64_t)>>>& tricks() {
  static const std::vector<std::pair<std::string, std::function<json(int64_t)>>> t = {
      {"graph-history", graph_history}, {"del-intermediates", del_intermediates},
      {"inplace-relu", inplace_relu}, {"empty-cache", empty_cache}};
  return t;
}
}  // namespace

std::vector<std::string> trick_names() {
  std::vector<std::string> out;
  for (const auto& [n, f] : tricks()) out.push_back(n);
  return out;
}

json measure_trick(const std::string& name, int64_t batch) {
  OOMLAB_CHECK(batch >= 1, "a trick needs a batch of at least 1 sample (got ", batch, ")");
  for (const auto& [n, f] : tricks())
    if (n == name) {
      json j = f(batch);
      reset_allocators();
      return j;
    }
  std::string known;
  for (const std::string& n : trick_names()) known += (known.empty() ? "" : ", ") + n;
  throw ValueError(str_cat("unknown trick '", name, "' (", known, ")"));
}

}  // namespace oomlab
