// half_mode.cpp — model.half() with BatchNorm kept float32, its input/output casts, and
// float32 master weights (half_mode.h).
#include "engine/train/half_mode.h"

#include <string_view>

#include "engine/nn/layers.h"

#include <cstring>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {

namespace {
// Gives `t` (all handles sharing its impl) a converted copy of its values.
void convert_in_place(Tensor& t, DType dtype) {
  if (!dtype_is_floating(t.dtype()) || t.dtype() == dtype) return;
  OOMLAB_CHECK(!t.grad().defined(), "half_model: ", t.name(), " already has a gradient (convert before training)");
  Tensor c = t.detach().to(dtype);
  TensorImpl* impl = t.impl();
  impl->storage = c.storage();
  impl->shape = c.shape();
  impl->strides = c.strides();
  impl->offset = c.offset();
  impl->dtype = dtype;
}
}  // namespace

void half_model(nn::Module& model, DType dtype) {
  OOMLAB_CHECK(dtype == DType::f16 || dtype == DType::bf16, "half_model: dtype must be float16 or bfloat16 (got ",
               dtype_name(dtype), ")");
  NoGradGuard ng;
  MemoryContext ctx("model", "half");
  for (auto& [name, m] : model.named_modules()) {
    if (dynamic_cast<nn::BatchNorm2d*>(m) != nullptr) continue;   // kept float32 (SyncBatchNorm too)
    const std::string_view type = m->type_name();   // an imported graph's BatchNorm modules, by their type
    if (type == "BatchNorm1d" || type == "BatchNorm2d" || type == "SyncBatchNorm") continue;
    // A module's own tensors (relative names without a dot): its children are visited on
    // their own, so a BatchNorm inside a container keeps float32.
    for (auto& [n, t] : m->named_parameters()) if (n.find('.') == std::string::npos) convert_in_place(t, dtype);
    for (auto& [n, t] : m->named_buffers()) if (n.find('.') == std::string::npos) convert_in_place(t, dtype);
  }
}

Tensor HalfIO::model_input(const Tensor& x) {
  if (!dtype_is_floating(x.dtype()) || x.dtype() == dtype_) return x;
  MemoryContext ctx("input", "half");
  return x.to(dtype_);
}

Tensor HalfIO::model_output(const Tensor& logits) {
  if (!float32_outputs_ || logits.dtype() == DType::f32) return logits;
  MemoryContext ctx("loss", "fwd");
  return logits.to(DType::f32);
}

MasterWeights::MasterWeights(nn::Module& model) {
  NoGradGuard ng;
  MemoryContext ctx("optimizer", "master");
  for (auto& [name, p] : model.named_parameters()) {
    if (p.dtype() == DType::f32) {   // BatchNorm's: its own master
      masters_.push_back({name, p});
      continue;
    }
    OOMLAB_CHECK(p.dtype() == DType::f16 || p.dtype() == DType::bf16, "master weights: ", name, " is ",
                 dtype_name(p.dtype()), " (expected a 16-bit or float32 parameter)");
    Tensor m = p.detach().to(DType::f32);
    m.set_requires_grad(true);
    m.set_name(name);
    pairs_.push_back({p, m});
    masters_.push_back({name, m});
  }
}

void MasterWeights::before_forward(int64_t micro, int64_t) {
  if (micro != 0) return;   // gradients accumulate over the micro-batches of a step
  for (Pair& pr : pairs_) pr.model.zero_grad(/*set_to_none=*/true);
}

bool MasterWeights::before_optimizer_step(Optimizer&) {
  NoGradGuard ng;
  MemoryContext ctx("optimizer", "master_grad");
  for (Pair& pr : pairs_) {
    Tensor g = pr.model.grad();
    if (!g.defined()) continue;
    pr.master.set_grad(g.to(DType::f32));
    pr.model.zero_grad(/*set_to_none=*/true);
  }
  return true;
}

void MasterWeights::after_optimizer_step(Optimizer&, bool stepped) {
  if (!stepped) return;
  NoGradGuard ng;
  for (Pair& pr : pairs_) pr.model.copy_(pr.master);   // rounded to 16 bits
}

nn::NamedTensors MasterWeights::state_tensors() const {
  nn::NamedTensors out;
  for (const Pair& pr : pairs_) out.push_back({"master." + pr.master.name(), pr.master});
  return out;
}

void MasterWeights::load_state(const nn::NamedTensors& tensors) {
  for (Pair& pr : pairs_) {
    const std::string key = "master." + pr.master.name();
    const Tensor* found = nullptr;
    for (const auto& [n, t] : tensors)
      if (n == key) found = &t;
    OOMLAB_CHECK(found, "master weights: tensor ", key, " is missing");
    OOMLAB_CHECK(found->shape() == pr.master.shape() && found->dtype() == DType::f32, "master weights: ", key, " is ",
                 found->str(), ", expected ", pr.master.str());
    pr.master.copy_(*found);
    pr.master.bump_version();
    pr.model.copy_(pr.master);
  }
}

}  // namespace oomlab
