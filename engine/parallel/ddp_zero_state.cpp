// ddp_zero_state.cpp — ZeRO checkpoints in DistributedDataParallel's format
// (distributed_data_parallel.h zero_consolidate / zero_shard): every bucket's shards
// all-gathered into per-parameter tensors under DDP's names, and back, on any world size.
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/io/json_count.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/distributed_data_parallel.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

std::string shard_name(size_t bucket) { return str_cat("zero.shard", bucket); }

// "state.<param>.<kind>" split at the last dot; nullopt for another name.
std::optional<std::pair<std::string, std::string>> split_state_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (name.rfind("state.", 0) != 0 || dot == std::string::npos || dot <= 6) return std::nullopt;
  return std::make_pair(name.substr(6, dot - 6), name.substr(dot + 1));
}

std::map<std::string, Tensor> by_name(const nn::NamedTensors& ts) {
  std::map<std::string, Tensor> m;
  for (const auto& [n, t] : ts) m[n] = t;
  return m;
}

// The module's parameter names per optimizer group, in registration order: what DDP's
// optimizer holds (`groups` of them; a name whose group is not below that is a ValueError).
std::vector<std::vector<std::string>> parameter_names(const nn::Module& module, const ZeroGroupOf& group_of,
                                                      size_t groups) {
  std::vector<std::vector<std::string>> names(groups);
  for (const auto& [n, p] : module.named_parameters()) {
    const size_t g = group_of(n);
    OOMLAB_CHECK(g < groups, "ZeRO: parameter ", n, " belongs to optimizer group ", g, ", the state has ", groups);
    names[g].push_back(n);
  }
  return names;
}

// The JSON of `optimizer` with each group's parameters `names` and per-parameter steps.
json with_parameters(const json& optimizer, const std::vector<std::vector<std::string>>& names,
                     const std::map<std::string, int64_t>& steps) {
  json out = optimizer;
  for (size_t g = 0; g < names.size(); ++g) out["param_groups"][g]["params"] = names[g];
  out["state"] = json::object();
  for (const auto& [n, s] : steps) out["state"][n] = {{"step", s}};
  return out;
}
}  // namespace

DistributedDataParallel::ZeroState DistributedDataParallel::zero_consolidate(const nn::NamedTensors& optimizer_tensors,
                                                                             const json& optimizer) const {
  OOMLAB_CHECK(zero_stage_ > 0, "zero_consolidate: this reducer does not shard (ZeRO stage 0)");
  NoGradGuard no_grad;
  const int64_t world = queue_->world_size();
  auto gather = [&](const Bucket& b, const Tensor& shard) {
    // an offloaded shard goes through the device
    const Tensor send = shard.device() == queue_->device() ? shard : copy_to_device(shard, queue_->device());
    Tensor full = Tensor::empty({b.shard * world}, shard.dtype(), queue_->device());
    queue_->run([&](Communicator& c) { c.all_gather(send, full); });
    return full;
  };
  auto per_param = [&](const Bucket& b, const Tensor& full, const std::string& prefix, const std::string& suffix,
                       nn::NamedTensors& out) {
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const auto& [name, p] = params_[b.params[slot]];
      out.push_back({prefix + name + suffix, zero_unflat(full.narrow(0, b.offsets[slot], p.numel()), p)});
    }
  };
  std::map<std::string, int64_t> steps;
  ZeroState out;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    for (const auto& [tname, t] : optimizer_tensors)   // the same order on every rank: the gathers match
      if (const auto parts = split_state_name(tname); parts && parts->first == shard_name(i))
        per_param(b, gather(b, t), "state.", "." + parts->second, out.optimizer_tensors);
    if (b.shard_param.dtype() != b.dtype) per_param(b, gather(b, b.shard_param), "master.", "", out.masters);
    if (zero_stage_ == 3) per_param(b, gather(b, b.param_shard), "", "", out.params);
    const json& st = optimizer.at("state");
    if (st.contains(shard_name(i)))
      for (size_t k : b.params) steps[params_[k].first] = st[shard_name(i)].at("step").get<int64_t>();
  }
  out.optimizer = with_parameters(optimizer, parameter_names(module_, group_of_, optimizer.at("param_groups").size()),
                                  steps);
  return out;
}

namespace {
// The checks zero_shard makes of a DDP-format optimizer JSON before it reads anything: its
// groups hold the module's parameters as this run's groups do.
void check_consolidated_json(const json& j, const nn::Module& module, const ZeroGroupOf& group_of) {
  OOMLAB_CHECK(j.is_object() && j.contains("param_groups") && j["param_groups"].is_array() &&
                   !j["param_groups"].empty() && j.contains("state") && j["state"].is_object(),
               "ZeRO resume: the optimizer state has no param_groups or state");
  const std::vector<std::vector<std::string>> names = parameter_names(module, group_of, j["param_groups"].size());
  for (size_t g = 0; g < names.size(); ++g) {
    const json& saved = j["param_groups"][g].at("params");
    OOMLAB_CHECK(saved.is_array() && saved.size() == names[g].size(), "ZeRO resume: the checkpoint's optimizer "
                 "group ", g, " holds ", saved.is_array() ? saved.size() : 0, " parameters, this run's ",
                 names[g].size(), " (another --lr-groups?)");
    for (size_t k = 0; k < names[g].size(); ++k)
      OOMLAB_CHECK(saved[k].is_string() && saved[k].get<std::string>() == names[g][k], "ZeRO resume: group ", g,
                   " parameter ", k, " is ", saved[k].dump(), " in the checkpoint, '", names[g][k], "' in this run");
  }
}
}  // namespace

DistributedDataParallel::ZeroState DistributedDataParallel::zero_shard(const ZeroState& in) {
  OOMLAB_CHECK(zero_stage_ > 0, "zero_shard: this reducer does not shard (ZeRO stage 0)");
  try {
    return shard_consolidated(in);
  } catch (const nlohmann::json::exception& e) {   // a field of the wrong type or missing
    throw ValueError(str_cat("ZeRO resume: malformed optimizer state: ", e.what()));
  }
}

DistributedDataParallel::ZeroState DistributedDataParallel::shard_consolidated(const ZeroState& in) {
  check_consolidated_json(in.optimizer, module_, group_of_);
  NoGradGuard no_grad;
  const int64_t world = queue_->world_size(), rank = queue_->rank();
  const std::map<std::string, Tensor> state = by_name(in.optimizer_tensors), masters = by_name(in.masters),
                                      params = by_name(in.params);
  // The bucket's flat elements from one tensor per parameter (`key` names it), this rank's slice.
  auto own_slice = [&](const Bucket& b, const std::map<std::string, Tensor>& from,
                       const std::function<std::string(const std::string&)>& key, DType dtype) {
    Tensor flat = Tensor::zeros({b.shard * world}, dtype, queue_->device());
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const auto& [name, p] = params_[b.params[slot]];
      const auto it = from.find(key(name));
      OOMLAB_CHECK(it != from.end(), "ZeRO resume: tensor ", key(name), " is missing from the checkpoint");
      OOMLAB_CHECK_T(ShapeError, it->second.shape() == p.shape(), "ZeRO resume: ", key(name), " has shape ",
                     shape_str(it->second.shape()), ", the parameter ", shape_str(p.shape()));
      flat.narrow(0, b.offsets[slot], p.numel()).copy_(zero_flat(it->second, p));
    }
    return flat.narrow(0, rank * b.shard, b.shard).contiguous();
  };
  const json& saved_steps = in.optimizer["state"];
  ZeroState out;
  std::map<std::string, int64_t> steps;
  std::vector<std::vector<std::string>> shards(in.optimizer["param_groups"].size());
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    shards.at(b.group).push_back(shard_name(i));
    if (zero_stage_ == 3) b.param_shard.copy_(own_slice(b, params, [](const std::string& n) { return n; }, b.dtype));
    if (b.shard_param.dtype() != b.dtype)
      b.shard_param.copy_(own_slice(b, masters, [](const std::string& n) { return "master." + n; }, DType::f32));
    else if (zero_stage_ < 3)   // from the module's parameters, which the checkpoint loaded
      copy_flat_range(b, rank * b.shard, b.shard_param, Side::values, /*into_tensors=*/false);
    std::set<std::string> kinds;
    std::optional<int64_t> step;
    for (size_t k : b.params) {
      const std::string& name = params_[k].first;
      const int64_t s =
          saved_steps.contains(name) ? json_count(saved_steps[name].at("step"), "ZeRO resume: the step of " + name) : 0;
      OOMLAB_CHECK(!step || *step == s, "ZeRO resume: the parameters of bucket ", i, " have different step counts (",
                   name, ": ", s, ", the bucket's first: ", *step, ")");
      step = s;
      for (const auto& [tname, t] : in.optimizer_tensors)
        if (const auto parts = split_state_name(tname); parts && parts->first == name) kinds.insert(parts->second);
    }
    if (step.value_or(0) > 0) steps[shard_name(i)] = *step;
    for (const std::string& kind : kinds)
      out.optimizer_tensors.push_back(
          {str_cat("state.", shard_name(i), ".", kind),
           own_slice(b, state, [&](const std::string& n) { return "state." + n + "." + kind; },
                     b.shard_param.dtype())});
  }
  out.optimizer = with_parameters(in.optimizer, shards, steps);
  return out;
}

}  // namespace oomlab
