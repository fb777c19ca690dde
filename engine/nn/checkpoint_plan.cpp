// checkpoint_plan.cpp — policy parsing, block/chain discovery (a probe forward watched by
// the forward observer), segment planning, and the per-thread segment runner that
// Module::operator() calls for planned modules.
#include "engine/nn/checkpoint_plan.h"

#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/forward_observer.h"

namespace oomlab {

namespace {
const char* kForms =
    "none, all, every:K (K >= 1), sqrt, selective[:attention,core,gelu,<ModuleType>...], budget:SIZE (e.g. 4GiB)";

int64_t parse_positive(std::string_view spec, std::string_view text) {
  int64_t v = 0;
  bool ok = !text.empty() && text.size() <= 18;
  for (char c : text) ok = ok && c >= '0' && c <= '9';
  if (ok) for (char c : text) v = v * 10 + (c - '0');
  OOMLAB_CHECK(ok && v >= 1, "checkpoint policy '", spec, "': every:K needs a whole number K >= 1 (got '", text,
               "'); accepted: ", kForms);
  return v;
}

std::string kind_type(const std::string& kind) { return checkpoint_kind_type(kind); }

bool is_sequential(const nn::Module& m) { return std::string_view(m.type_name()) == "Sequential"; }

void collect_blocks(nn::Module& m, std::set<const nn::Module*>& out) {
  for (auto& [name, child] : m.named_children()) {
    if (!is_sequential(*child) && is_sequential(m)) out.insert(child);
    else collect_blocks(*child, out);
  }
}
}  // namespace

std::string checkpoint_kind_type(const std::string& kind) {
  if (kind == "attention") return "BertSelfAttention";
  if (kind == "core") return "DotProductAttention";
  if (kind == "gelu") return "BertIntermediate";
  return kind;
}

CheckpointPolicy parse_checkpoint_policy(std::string_view spec) {
  CheckpointPolicy p;
  p.spec = std::string(spec);
  using K = CheckpointPolicy::Kind;
  if (spec == "none") { p.kind = K::none; return p; }
  if (spec == "all") { p.kind = K::all; return p; }
  if (spec == "sqrt") { p.kind = K::sqrt; return p; }
  if (spec.rfind("every:", 0) == 0) {
    p.kind = K::every;
    p.every = parse_positive(spec, spec.substr(6));
    return p;
  }
  if (spec.rfind("budget:", 0) == 0) {
    p.kind = K::budget;
    p.budget = std::string(spec.substr(7));
    OOMLAB_CHECK(!p.budget.empty(), "checkpoint policy '", spec,
                 "': budget: needs a size (e.g. budget:4GiB); accepted: ", kForms);
    return p;
  }
  if (spec == "selective" || spec.rfind("selective:", 0) == 0) {
    p.kind = K::selective;
    std::string_view list = spec.size() > 9 ? spec.substr(10) : std::string_view("attention,gelu");
    OOMLAB_CHECK(!list.empty(), "checkpoint policy '", spec, "': selective: needs a list of kinds; accepted: ", kForms);
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      std::string_view k = list.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      OOMLAB_CHECK(!k.empty(), "checkpoint policy '", spec, "': empty kind in the selective list; accepted: ", kForms);
      p.selective.emplace_back(k);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    p.spec = "selective:";
    for (size_t i = 0; i < p.selective.size(); ++i) p.spec += (i ? "," : "") + p.selective[i];
    return p;
  }
  throw ValueError(str_cat("'", spec, "' is not a checkpoint policy; accepted: ", kForms));
}

nlohmann::json CheckpointPlan::to_json() const {
  return {{"policy", policy}, {"segments", segments}, {"blocks", blocks}};
}

std::vector<std::vector<std::string>> checkpoint_chains(nn::Module& model, const Tensor& sample) {
  if (auto* own = dynamic_cast<CheckpointPlanner*>(&model)) return own->checkpoint_chains();
  std::set<const nn::Module*> blocks;
  collect_blocks(model, blocks);
  struct Seen { std::string name; std::shared_ptr<TensorImpl> in, out; };
  std::vector<Seen> seen;
  std::map<std::string, int> calls;   // block name -> calls per forward
  {
    const bool was_training = model.is_training();
    model.eval();
    struct Restore { nn::Module& m; bool t; ~Restore() { m.train(t); } } restore{model, was_training};
    NoGradGuard no_grad;
    nn::ForwardObserverGuard watch([&](const nn::Module& m, const Tensor& in, const Tensor& out) {
      if (!blocks.count(&m)) return;
      ++calls[m.full_name()];
      seen.push_back({m.full_name(), in.impl_ptr(), out.impl_ptr()});
    });
    model(sample);
  }
  std::vector<std::vector<std::string>> chains;
  for (size_t i = 0; i < seen.size(); ++i) {
    const bool links = i > 0 && seen[i].in && seen[i].in == seen[i - 1].out;
    if (!links) chains.emplace_back();
    chains.back().push_back(seen[i].name);
  }
  // A module called more than once per forward (shared weights) cannot be planned by name.
  for (const auto& [name, c] : calls)
    OOMLAB_CHECK(c == 1, "checkpoint: module '", name, "' runs ", c,
                 " times per forward; a planned segment must run once");
  return chains;
}

CheckpointPlan plan_checkpoints(nn::Module& model, const Tensor& sample, const CheckpointPolicy& policy) {
  using K = CheckpointPolicy::Kind;
  CheckpointPlan plan;
  plan.policy = policy.spec;
  if (policy.kind == K::none) return plan;
  OOMLAB_CHECK(policy.kind != K::budget, "checkpoint policy ", policy.spec,
               ": a budget is resolved by the command that knows the batch and optimizer (train, estimate)");
  if (auto* own = dynamic_cast<CheckpointPlanner*>(&model)) return own->plan_checkpoints(policy);
  if (policy.kind == K::selective) {
    std::set<std::string> types;
    for (const auto& k : policy.selective) types.insert(kind_type(k));
    std::set<std::string> found_types;
    std::string taken_prefix;   // modules inside a chosen one are skipped (pre-order walk)
    for (auto& [name, m] : model.named_modules()) {
      if (name.empty()) continue;
      if (!types.count(m->type_name())) continue;
      found_types.insert(m->type_name());
      if (!taken_prefix.empty() && name.rfind(taken_prefix + ".", 0) == 0) continue;
      ++plan.blocks;
      if (m->modifies_input()) continue;
      plan.segments.push_back({m->full_name()});
      taken_prefix = name;
    }
    for (const auto& k : policy.selective)
      OOMLAB_CHECK(found_types.count(kind_type(k)), "checkpoint policy ", policy.spec, ": the model has no ",
                   kind_type(k), " module (selective kind '", k,
                   "'); kinds: attention, core, gelu (BERT) or a module type name of this model");
    return plan;
  }
  const auto chains = checkpoint_chains(model, sample);
  std::map<std::string, nn::Module*> by_name;
  for (auto& [name, m] : model.named_modules()) by_name[name] = m;
  for (const auto& chain : chains) {
    const int64_t n = int64_t(chain.size());
    plan.blocks += n;
    int64_t k = policy.kind == K::all ? 1 : policy.kind == K::every ? policy.every
                                                                     : int64_t(std::ceil(std::sqrt(double(n))));
    std::vector<std::string> seg;
    for (int64_t i = 0; i < n; ++i) {
      // a segment closes after k blocks, unless the next block would start one by
      // modifying its (kept) input in place: then it joins this segment
      if (int64_t(seg.size()) >= k && !by_name.at(chain[size_t(i)])->modifies_input()) {
        plan.segments.push_back(std::move(seg));
        seg.clear();
      }
      if (seg.empty() && by_name.at(chain[size_t(i)])->modifies_input()) continue;   // chain head in place
      seg.push_back(chain[size_t(i)]);
    }
    if (!seg.empty()) plan.segments.push_back(std::move(seg));
  }
  if (!plan.segments.empty()) plan.segments.pop_back();   // the last one would be re-run at once
  return plan;
}

int64_t applied_checkpoint_segments(nn::Module& model) {
  if (auto* own = dynamic_cast<CheckpointPlanner*>(&model)) return own->applied_segments();
  int64_t segments = 0;
  for (auto& [name, sub] : model.named_modules()) segments = std::max(segments, sub->checkpoint_role().segment + 1);
  return segments;
}

void apply_checkpoint_plan(nn::Module& model, const CheckpointPlan& plan) {
  if (auto* own = dynamic_cast<CheckpointPlanner*>(&model)) return own->apply_checkpoint_plan(plan);
  for (auto& [name, m] : model.named_modules()) m->set_checkpoint_role({});
  for (size_t s = 0; s < plan.segments.size(); ++s) {
    const auto& seg = plan.segments[s];
    for (size_t i = 0; i < seg.size(); ++i)
      model.submodule(seg[i])->set_checkpoint_role({int64_t(s), i == 0, i + 1 == seg.size()});
  }
}

namespace nn {
namespace {
struct OpenSegment {
  std::unique_ptr<CheckpointSegment> segment;
  int64_t id = -1;
  std::string name;
  Tensor last_output;
};
thread_local OpenSegment t_open;

// Side inputs of the module and its descendants: a parent may set a member of a grandchild
// before the call (BertEncoder sets layer.N.attention.self.mask); members set inside the
// block's own forward are undefined at entry and set again by the re-run itself.
std::vector<Tensor*> subtree_side_inputs(Module& module) {
  std::vector<Tensor*> out;
  for (auto& [name, m] : module.named_modules())
    for (Tensor* p : m->side_inputs()) out.push_back(p);
  return out;
}
}  // namespace

Tensor checkpointed_forward(Module& module, const Tensor& x) {
  const Module::CheckpointRole& role = module.checkpoint_role();
  if (role.first) {
    OOMLAB_CHECK_T(AutogradError, !t_open.segment, "checkpoint: segment starting at '", module.full_name(),
                   "' opened while the one starting at '", t_open.name, "' is still open");
    t_open.segment = std::make_unique<CheckpointSegment>(module.full_name(), x);
    t_open.id = role.segment;
    t_open.name = module.full_name();
  } else {
    OOMLAB_CHECK_T(AutogradError, t_open.segment && t_open.id == role.segment && x.defined() &&
                                      t_open.last_output.defined() && x.impl() == t_open.last_output.impl(),
                   "checkpoint: '", module.full_name(), "' was planned to continue the segment started at '",
                   t_open.name, "' but it does not take the previous block's output");
  }
  std::vector<Tensor> side;
  for (Tensor* p : subtree_side_inputs(module)) side.push_back(*p);
  Module* m = &module;
  t_open.segment->add_step(side, [m](const Tensor& in, const std::vector<Tensor>& values) {
    std::vector<Tensor*> ptrs = subtree_side_inputs(*m);
    std::vector<Tensor> before;
    for (size_t i = 0; i < ptrs.size(); ++i) { before.push_back(*ptrs[i]); *ptrs[i] = values[i]; }
    struct Put { std::vector<Tensor*>& p; std::vector<Tensor>& v;
                 ~Put() { for (size_t i = 0; i < p.size(); ++i) *p[i] = v[i]; } } put{ptrs, before};
    MemoryContext ctx(m->memory_label(), "recompute");
    return m->forward(in);
  });
  Tensor y;
  try {
    y = module.forward(x);
  } catch (...) {
    t_open = OpenSegment{};
    throw;
  }
  if (role.last) t_open = OpenSegment{};
  else t_open.last_output = y;
  return y;
}
}  // namespace nn

}  // namespace oomlab
