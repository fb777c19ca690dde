// optimizer.cpp — Optimizer base: parameter checks, the step loop (NoGradGuard, skip
// undefined grads, lazy state, version bumps), zero_grad, checkpoint export/import,
// and make_optimizer. The per-parameter math lives in sgd.cpp / adam.cpp.
#include "engine/optim/optimizer.h"

#include <cmath>
#include <unordered_set>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/io/json_count.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups)
    : name_(std::move(name)), groups_(std::move(groups)) {
  std::unordered_set<std::string> names;
  std::unordered_set<const TensorImpl*> impls;
  size_t total = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (const auto& [pname, p] : groups_[gi].params) {
      OOMLAB_CHECK(!pname.empty(), name_, ": parameter group ", gi, " has a parameter without a name");
      OOMLAB_CHECK(p.defined(), name_, ": parameter '", pname, "' is an undefined tensor");
      OOMLAB_CHECK(p.is_leaf(), name_, ": can't optimize a non-leaf tensor ('", pname, "')");
      OOMLAB_CHECK_T(DTypeError, dtype_is_floating(p.dtype()), name_, ": parameter '", pname,
                     "' has non-floating dtype ", dtype_name(p.dtype()));
      OOMLAB_CHECK(names.insert(pname).second, name_, ": parameter name '", pname,
                   "' appears more than once in the parameter groups");
      OOMLAB_CHECK(impls.insert(p.impl()).second, name_, ": parameter '", pname,
                   "' appears more than once in the parameter groups (under another name)");
      ++total;
    }
  }
  OOMLAB_CHECK(total > 0, name_, ": optimizer got an empty parameter list");
}

void Optimizer::validate_group(const ParamGroup& g, size_t index) const {
  OOMLAB_CHECK(std::isfinite(g.lr) && g.lr >= 0, name_, ": invalid learning rate ", g.lr, " in group ", index);
  OOMLAB_CHECK(std::isfinite(g.weight_decay) && g.weight_decay >= 0, name_, ": invalid weight_decay ",
               g.weight_decay, " in group ", index);
}

void Optimizer::step() {
  NoGradGuard no_grad;
  // 1. Check every parameter that has a gradient (and make its gradient contiguous).
  struct Work { const ParamGroup* group; const std::string* name; Tensor param, grad; ParamState* state; };
  std::vector<Work> work;
  for (const ParamGroup& g : groups_) {
    for (auto& [pname, p_ref] : g.params) {
      Tensor grad = p_ref.grad();
      if (!grad.defined()) continue;
      OOMLAB_CHECK_T(ShapeError, grad.shape() == p_ref.shape(), name_, ": grad of '", pname, "' has shape ",
                     shape_str(grad.shape()), " but the parameter has ", shape_str(p_ref.shape()));
      OOMLAB_CHECK_T(DTypeError, grad.dtype() == p_ref.dtype(), name_, ": grad of '", pname, "' is ",
                     dtype_name(grad.dtype()), " but the parameter is ", dtype_name(p_ref.dtype()));
      OOMLAB_CHECK_T(DeviceError, grad.device() == p_ref.device(), name_, ": grad of '", pname, "' is on ",
                     grad.device().str(), " but the parameter is on ", p_ref.device().str());
      OOMLAB_CHECK_T(ShapeError, p_ref.is_dense(), name_, ": parameter '", pname,
                     "' must be dense (contiguous or channels_last) for the fused update");
      MemoryContext ctx(pname, "optim");
      // The update walks parameter, gradient and state in memory order: one layout for all.
      const MemoryFormat f = p_ref.memory_format();
      work.push_back({&g, &pname, p_ref, grad.is_contiguous(f) ? grad : grad.contiguous(f), nullptr});
    }
  }
  // 2. Create the state every update needs before any update begins: an OutOfMemoryError
  //    here drops the state created by this call and leaves every parameter untouched.
  const size_t kinds = state_kinds().size();
  std::vector<std::vector<bool>> had;   // per work item: which state kinds existed before
  try {
    for (Work& w : work) {
      w.state = &state_[*w.name];
      if (w.state->tensors.empty()) w.state->tensors.resize(kinds);
      had.emplace_back(kinds);
      for (size_t k = 0; k < kinds; ++k) had.back()[k] = w.state->tensors[k].defined();
      MemoryContext ctx(*w.name, "optim");
      init_state(*w.group, w.param, *w.state);
    }
  } catch (...) {
    for (size_t i = 0; i < had.size(); ++i) {
      for (size_t k = 0; k < kinds; ++k)
        if (!had[i][k]) work[i].state->tensors[k] = Tensor();
      work[i].state->fresh = false;
    }
    throw;
  }
  // 3. The fused updates, one foreach launch per run of a group's parameters on one device
  //    and dtype: nothing is allocated from here on.
  for (size_t i = 0; i < work.size();) {
    size_t j = i;
    std::vector<UpdateItem> items;
    for (; j < work.size() && work[j].group == work[i].group && work[j].param.device() == work[i].param.device() &&
           work[j].param.dtype() == work[i].param.dtype(); ++j) {
      ++work[j].state->step;
      items.push_back({&work[j].param, &work[j].grad, work[j].state});
    }
    MemoryContext ctx(*work[i].name, "optim");
    update_group(*work[i].group, items);
    for (; i < j; ++i) {
      work[i].state->fresh = false;
      work[i].param.bump_version();
    }
  }
  ++step_count_;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& g : groups_)
    for (auto& [pname, p] : g.params) p.zero_grad(set_to_none);
}

// ---------------------------------------------------------------- checkpoints
NamedTensors Optimizer::state_tensors() const {
  NamedTensors out;
  const std::vector<std::string> kinds = state_kinds();
  for (const ParamGroup& g : groups_) {
    for (const auto& [pname, p] : g.params) {
      auto it = state_.find(pname);
      if (it == state_.end()) continue;
      for (size_t k = 0; k < it->second.tensors.size() && k < kinds.size(); ++k)
        if (it->second.tensors[k].defined())
          out.emplace_back("state." + pname + "." + kinds[k], it->second.tensors[k]);
    }
  }
  return out;
}

nlohmann::json Optimizer::state_json() const {
  nlohmann::json j;
  j["optimizer"] = name_;
  j["step_count"] = step_count_;
  j["param_groups"] = nlohmann::json::array();
  j["state"] = nlohmann::json::object();
  for (const ParamGroup& g : groups_) {
    nlohmann::json gj;
    gj["lr"] = g.lr;
    gj["momentum"] = g.momentum;
    gj["dampening"] = g.dampening;
    gj["weight_decay"] = g.weight_decay;
    gj["beta1"] = g.beta1;
    gj["beta2"] = g.beta2;
    gj["eps"] = g.eps;
    gj["nesterov"] = g.nesterov;
    gj["params"] = nlohmann::json::array();
    for (const auto& [pname, p] : g.params) {
      gj["params"].push_back(pname);
      auto it = state_.find(pname);
      if (it != state_.end() && it->second.step > 0) j["state"][pname] = {{"step", it->second.step}};
    }
    j["param_groups"].push_back(std::move(gj));
  }
  return j;
}

std::unordered_map<std::string, const Tensor*> Optimizer::parameter_index() const {
  std::unordered_map<std::string, const Tensor*> params;
  for (const ParamGroup& g : groups_)
    for (const auto& [pname, p] : g.params) params[pname] = &p;
  return params;
}

// One group's entry: the same parameters in the same order, then its hyper-parameters.
void Optimizer::load_group_json(const nlohmann::json& gj, size_t gi, ParamGroup& ng, const std::string& ctx) const {
  const auto& names = gj.at("params");
  const auto& cur = groups_[gi].params;
  OOMLAB_CHECK(names.is_array() && names.size() == cur.size(), ctx, "group ", gi, " has ",
               names.is_array() ? names.size() : 0, " parameters in the state, ", cur.size(), " in the optimizer");
  for (size_t k = 0; k < cur.size(); ++k)
    OOMLAB_CHECK(names[k].get<std::string>() == cur[k].first, ctx, "group ", gi, " parameter ", k, " is '",
                 names[k].get<std::string>(), "' in the state but '", cur[k].first, "' in the optimizer");
  ng.lr = gj.at("lr").get<double>();
  ng.momentum = gj.at("momentum").get<double>();
  ng.dampening = gj.at("dampening").get<double>();
  ng.weight_decay = gj.at("weight_decay").get<double>();
  ng.beta1 = gj.at("beta1").get<double>();
  ng.beta2 = gj.at("beta2").get<double>();
  ng.eps = gj.at("eps").get<double>();
  ng.nesterov = gj.at("nesterov").get<bool>();
  validate_group(ng, gi);
}

Optimizer::LoadedJson Optimizer::parse_state_json(const nlohmann::json& j, const std::string& ctx) const {
  LoadedJson out{groups_, {}, 0};
  const auto params = parameter_index();
  try {
    OOMLAB_CHECK(j.is_object(), ctx, "state is not a JSON object");
    const std::string saved = j.at("optimizer").get<std::string>();
    OOMLAB_CHECK(saved == name_, ctx, "the state was saved by optimizer '", saved, "', this one is '", name_, "'");
    out.step_count = json_count(j.at("step_count"), ctx + "step_count");
    const auto& gjs = j.at("param_groups");
    OOMLAB_CHECK(gjs.is_array() && gjs.size() == groups_.size(), ctx, "the state has ",
                 gjs.is_array() ? gjs.size() : 0, " parameter groups, the optimizer has ", groups_.size());
    for (size_t gi = 0; gi < groups_.size(); ++gi) load_group_json(gjs[gi], gi, out.groups[gi], ctx);
    const auto& sj = j.at("state");
    OOMLAB_CHECK(sj.is_object(), ctx, "'state' is not an object");
    for (auto it = sj.begin(); it != sj.end(); ++it) {
      OOMLAB_CHECK(params.count(it.key()), ctx, "state for unknown parameter '", it.key(), "'");
      const int64_t st = json_count(it.value().at("step"), str_cat(ctx, "the step of parameter '", it.key(), "'"));
      if (st > 0) out.steps[it.key()] = st;
    }
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(ctx + "malformed state JSON: " + e.what());
  }
  return out;
}

// Tensors named state.<param>.<kind> matched to (parameter, kind), each checked; then every
// kind a group requires present for each parameter with a step.
Optimizer::GivenTensors Optimizer::match_state_tensors(const NamedTensors& tensors, const LoadedJson& loaded,
                                                       const std::string& ctx) const {
  const std::vector<std::string> kinds = state_kinds();
  const auto params = parameter_index();
  GivenTensors given;
  for (const auto& [tname, t] : tensors) {
    const std::string prefix = "state.";
    size_t dot = tname.rfind('.');
    OOMLAB_CHECK(tname.rfind(prefix, 0) == 0 && dot != std::string::npos && dot > prefix.size(), ctx,
                 "unexpected state tensor name '", tname, "' (expected state.<param>.<kind>)");
    std::string pname = tname.substr(prefix.size(), dot - prefix.size()), kind = tname.substr(dot + 1);
    size_t k = 0;
    while (k < kinds.size() && kinds[k] != kind) ++k;
    OOMLAB_CHECK(k < kinds.size(), ctx, "state tensor '", tname, "' has unknown kind '", kind, "' for ", name_);
    auto pit = params.find(pname);
    OOMLAB_CHECK(pit != params.end(), ctx, "state tensor '", tname, "' names unknown parameter '", pname, "'");
    OOMLAB_CHECK(loaded.steps.count(pname), ctx, "state tensor '", tname, "' given for a parameter with step 0");
    OOMLAB_CHECK(t.defined(), ctx, "state tensor '", tname, "' is undefined");
    OOMLAB_CHECK_T(ShapeError, t.shape() == pit->second->shape(), ctx, "state tensor '", tname, "' has shape ",
                   shape_str(t.shape()), " but parameter '", pname, "' has ", shape_str(pit->second->shape()));
    OOMLAB_CHECK_T(DTypeError, dtype_is_floating(t.dtype()), ctx, "state tensor '", tname, "' has dtype ",
                   dtype_name(t.dtype()));
    auto& slot = given[pname];
    slot.resize(kinds.size(), nullptr);
    OOMLAB_CHECK(slot[k] == nullptr, ctx, "state tensor '", tname, "' given twice");
    slot[k] = &t;
  }
  for (size_t gi = 0; gi < loaded.groups.size(); ++gi)
    for (const std::string& kind : required_state_kinds(loaded.groups[gi])) {
      size_t k = 0;
      while (kinds[k] != kind) ++k;
      for (const auto& [pname, p] : loaded.groups[gi].params) {
        if (!loaded.steps.count(pname)) continue;
        auto git = given.find(pname);
        OOMLAB_CHECK(git != given.end() && git->second[k] != nullptr, ctx, "missing state tensor 'state.", pname,
                     ".", kind, "'");
      }
    }
  return given;
}

// Fresh tensors on each parameter's device / dtype, in group / parameter order.
void Optimizer::commit_state(LoadedJson loaded, const GivenTensors& given) {
  const size_t kinds = state_kinds().size();
  NoGradGuard no_grad;
  std::unordered_map<std::string, ParamState> new_state;
  for (const ParamGroup& g : loaded.groups)
    for (const auto& [pname, p] : g.params) {
      auto sit = loaded.steps.find(pname);
      if (sit == loaded.steps.end()) continue;
      ParamState s;
      s.step = sit->second;
      s.tensors.resize(kinds);
      if (auto git = given.find(pname); git != given.end())
        for (size_t k = 0; k < kinds; ++k) {
          if (!git->second[k]) continue;
          s.tensors[k] = empty_like(p);
          s.tensors[k].copy_(*git->second[k]);
        }
      new_state.emplace(pname, std::move(s));
    }
  groups_ = std::move(loaded.groups);
  state_ = std::move(new_state);
  step_count_ = loaded.step_count;
}

void Optimizer::load_state(const nlohmann::json& j, const NamedTensors& tensors) {
  const std::string ctx = name_ + " load_state: ";
  LoadedJson loaded = parse_state_json(j, ctx);
  const GivenTensors given = match_state_tensors(tensors, loaded, ctx);
  commit_state(std::move(loaded), given);
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamGroup> groups) {
  if (name == "sgd") return make_sgd(std::move(groups));
  if (name == "adam") return make_adam(std::move(groups), false);
  if (name == "adamw") return make_adam(std::move(groups), true);
  throw ValueError(str_cat("unknown optimizer '", name, "' (expected sgd, adam or adamw)"));
}

}  // namespace oomlab
