// ema.cpp — WeightEma: shadow copies, in-place EMA update through the axpby kernel
// (no temporaries), zero-copy swap_in/swap_out, checkpoint state.
#include "engine/optim/ema.h"

#include <unordered_map>
#include <unordered_set>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/io/json_count.h"
#include "kernels/elementwise.h"

namespace oomlab {

WeightEma::WeightEma(const NamedTensors& tensors, double decay) : decay_(0) {
  set_decay(decay);
  NoGradGuard no_grad;
  std::unordered_set<std::string> names;
  auto add = [&](const std::string& name, const Tensor& t, bool average) {
    OOMLAB_CHECK(t.defined(), "WeightEma: tensor '", name, "' is undefined");
    OOMLAB_CHECK(names.insert(name).second, "WeightEma: name '", name, "' appears twice");
    OOMLAB_CHECK_T(ShapeError, t.is_dense(), "WeightEma: tensor '", name,
                   "' must be dense (contiguous or channels_last)");
    OOMLAB_CHECK_T(DTypeError, !average || dtype_is_floating(t.dtype()), "WeightEma: parameter '", name,
                   "' has non-floating dtype ", dtype_name(t.dtype()));
    Tensor shadow = empty_like(t);   // laid out as t: the average walks memory order
    shadow.copy_(t);
    entries_.push_back({name, t, shadow, average});
  };
  for (const auto& [name, t] : tensors) {
    OOMLAB_CHECK(t.defined(), "WeightEma: tensor '", name, "' is undefined");
    add(name, t, t.requires_grad());
  }
}

void WeightEma::set_decay(double decay) {
  OOMLAB_CHECK(decay >= 0 && decay <= 1, "WeightEma: decay must be in [0, 1], got ", decay);
  decay_ = decay;
}

void WeightEma::update() {
  OOMLAB_CHECK(!swapped_, "WeightEma: update() while the EMA weights are swapped in; call swap_out() first");
  NoGradGuard no_grad;
  for (Entry& e : entries_) {
    if (!e.average) {
      e.shadow.copy_(e.model);
      continue;
    }
    e.shadow.bump_version();
    axpby_kernels().launch(e.shadow.device(), e.shadow.dtype(),
                           AxpbyArgs{e.shadow.raw_data(), e.shadow.raw_data(), e.model.raw_data(), decay_,
                                     1.0 - decay_, 0.0, e.shadow.numel()});
  }
  ++num_updates_;
}

void WeightEma::swap_values(Entry& e) {
  TensorImpl* m = e.model.impl();
  TensorImpl* s = e.shadow.impl();
  bool whole = m->offset == 0 && m->storage->nbytes == e.model.nbytes() && m->storage.use_count() == 1 &&
               s->offset == 0 && s->storage->nbytes == e.shadow.nbytes() && s->storage.use_count() == 1;
  if (whole) {
    std::swap(m->storage, s->storage);
  } else {
    Tensor tmp = Tensor::empty(e.model.shape(), e.model.dtype(), e.model.device());
    tmp.copy_(e.model);
    e.model.copy_(e.shadow);
    e.shadow.copy_(tmp);
  }
  e.model.bump_version();
  e.shadow.bump_version();
}

void WeightEma::swap_in() {
  OOMLAB_CHECK(!swapped_, "WeightEma: swap_in() called twice without swap_out()");
  NoGradGuard no_grad;
  for (Entry& e : entries_) swap_values(e);
  swapped_ = true;
}

void WeightEma::swap_out() {
  OOMLAB_CHECK(swapped_, "WeightEma: swap_out() without a matching swap_in()");
  NoGradGuard no_grad;
  for (Entry& e : entries_) swap_values(e);
  swapped_ = false;
}

NamedTensors WeightEma::state_tensors() const {
  NamedTensors out;
  for (const Entry& e : entries_) out.emplace_back("ema." + e.name, swapped_ ? e.model : e.shadow);
  return out;
}

nlohmann::json WeightEma::state_json() const {
  nlohmann::json j;
  j["decay"] = decay_;
  j["num_updates"] = num_updates_;
  j["params"] = nlohmann::json::array();
  j["buffers"] = nlohmann::json::array();
  for (const Entry& e : entries_) j[e.average ? "params" : "buffers"].push_back(e.name);
  return j;
}

void WeightEma::load_state(const NamedTensors& tensors, const nlohmann::json& j) {
  const char* ctx = "WeightEma load_state: ";
  OOMLAB_CHECK(!swapped_, ctx, "not allowed while the EMA weights are swapped in");
  double decay = decay_;
  int64_t updates = num_updates_;
  if (!j.is_null()) {
    std::vector<std::string> params, buffers;
    try {
      decay = j.at("decay").get<double>();
      updates = json_count(j.at("num_updates"), std::string(ctx) + "num_updates");
      params = j.at("params").get<std::vector<std::string>>();
      buffers = j.at("buffers").get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception& e) {
      throw ValueError(std::string(ctx) + "malformed state JSON: " + e.what());
    }
    OOMLAB_CHECK(decay >= 0 && decay <= 1, ctx, "decay must be in [0, 1], got ", decay);
    std::vector<std::string> mine_p, mine_b;
    for (const Entry& e : entries_) (e.average ? mine_p : mine_b).push_back(e.name);
    OOMLAB_CHECK(params == mine_p, ctx, "the state's parameter names do not match this model's (",
                 params.size(), " vs ", mine_p.size(), " parameters)");
    OOMLAB_CHECK(buffers == mine_b, ctx, "the state's buffer names do not match this model's (",
                 buffers.size(), " vs ", mine_b.size(), " buffers)");
  }
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < entries_.size(); ++i) index["ema." + entries_[i].name] = i;
  std::vector<const Tensor*> src(entries_.size(), nullptr);
  for (const auto& [name, t] : tensors) {
    auto it = index.find(name);
    OOMLAB_CHECK(it != index.end(), ctx, "unexpected tensor '", name, "'");
    OOMLAB_CHECK(src[it->second] == nullptr, ctx, "tensor '", name, "' given twice");
    const Entry& e = entries_[it->second];
    OOMLAB_CHECK(t.defined(), ctx, "tensor '", name, "' is undefined");
    OOMLAB_CHECK_T(ShapeError, t.shape() == e.shadow.shape(), ctx, "tensor '", name, "' has shape ",
                   shape_str(t.shape()), " but the model's has ", shape_str(e.shadow.shape()));
    src[it->second] = &t;
  }
  for (size_t i = 0; i < entries_.size(); ++i)
    OOMLAB_CHECK(src[i] != nullptr, ctx, "missing tensor 'ema.", entries_[i].name, "'");
  NoGradGuard no_grad;
  for (size_t i = 0; i < entries_.size(); ++i) entries_[i].shadow.copy_(*src[i]);
  decay_ = decay;
  num_updates_ = updates;
}

}  // namespace oomlab
