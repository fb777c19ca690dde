// module.cpp — nn::Module: registration of parameters/buffers/children, recursive
// traversal in PyTorch's order (own tensors first, then children in registration order,
// pre-order), dotted names kept in sync with the tree (set_prefix renames the whole
// subtree when a module is attached), train/eval propagation, and operator() labelling
// every allocation of a forward with MemoryContext(full_name(), "fwd"; "recompute" during a
// checkpoint re-run), running checkpoint-planned modules through checkpointed_forward, and then telling
// the forward observer (if any). The root module (empty full_name) is labelled with its
// type_name().
#include "engine/nn/module.h"
#include "engine/nn/module_hooks.h"

#include <optional>

#include "engine/memory/memory_export.h"

#include <algorithm>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/checkpoint_plan.h"
#include "engine/nn/forward_observer.h"

namespace oomlab::nn {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
void check_name(const std::string& name, const char* what) {
  OOMLAB_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module: ", what, " name '", name,
               "' must be non-empty and contain no '.'");
}
template <class V> bool has_key(const V& v, const std::string& name) {
  return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
}
}  // namespace

Tensor Module::operator()(const Tensor& x) {
  const std::string label = memory_label();
  MemoryContext ctx(label, checkpoint_recomputing() ? "recompute" : "fwd");
  std::string span_name;             // outlives the span (OpSpanScope keeps the pointer)
  std::optional<OpSpanScope> span;   // Chrome-trace span per leaf layer when profiling
  if (children_.empty() && OpProfiler::enabled()) {
    span_name = label + "/fwd";
    span.emplace(span_name.c_str(), 0, x.defined() ? x.device() : cpu_device());
  }
  Tensor y;
  const ModuleCallHooks* hooks = module_call_hooks();   // engine/nn/module_hooks.h (ZeRO-3)
  try {
    if (hooks && hooks->before) hooks->before(*this);
    y = checkpoint_role_.segment >= 0 && grad_enabled() && !checkpoint_recomputing()
            ? checkpointed_forward(*this, x)   // engine/nn/checkpoint_plan.h
            : forward(x);
    if (hooks && hooks->after) y = hooks->after(*this, y);
  } catch (...) {
    // A forward abandoned midway (an out-of-memory error a step recovers from) must not
    // leave a residual or key/value set by a parent behind: they hold the graph built so
    // far, every activation of the attempt, until the next forward replaces them.
    for (auto& [name, m] : named_modules())
      for (Tensor* t : m->side_inputs()) *t = Tensor();
    throw;
  }
  notify_forward(*this, x, y);   // engine/nn/forward_observer.h (no-op unless installed)
  return y;
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_name(name, "parameter");
  OOMLAB_CHECK(t.defined(), "Module: parameter '", name, "' is undefined");
  OOMLAB_CHECK(!has_key(params_, name) && !has_key(buffers_, name) && !has_key(children_, name),
               "Module: attribute '", name, "' already registered in ", type_name());
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(t.dtype()), "Module: parameter '", name,
                 "' must be floating point, got ", dtype_name(t.dtype()));
  t.set_requires_grad(true);
  t.set_name(join(full_name_, name));
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name(name, "buffer");
  OOMLAB_CHECK(t.defined(), "Module: buffer '", name, "' is undefined");
  OOMLAB_CHECK(!has_key(params_, name) && !has_key(buffers_, name) && !has_key(children_, name),
               "Module: attribute '", name, "' already registered in ", type_name());
  if (t.requires_grad()) t.set_requires_grad(false);
  t.set_name(join(full_name_, name));
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name, "submodule");
  OOMLAB_CHECK(m != nullptr, "Module: submodule '", name, "' is null");
  OOMLAB_CHECK(!has_key(params_, name) && !has_key(buffers_, name) && !has_key(children_, name),
               "Module: attribute '", name, "' already registered in ", type_name());
  m->set_prefix(join(full_name_, name));
  children_.emplace_back(name, std::move(m));
}

void Module::set_prefix(const std::string& prefix) {
  full_name_ = prefix;
  for (auto& [n, t] : params_) t.set_name(join(prefix, n));
  for (auto& [n, t] : buffers_) t.set_name(join(prefix, n));
  for (auto& [n, c] : children_) c->set_prefix(join(prefix, n));
}

Tensor Module::param(const std::string& name) const {
  for (const auto& [n, t] : params_)
    if (n == name) return t;
  throw ValueError(str_cat(type_name(), " has no parameter '", name, "'"));
}

Tensor Module::buffer(const std::string& name) const {
  for (const auto& [n, t] : buffers_)
    if (n == name) return t;
  throw ValueError(str_cat(type_name(), " has no buffer '", name, "'"));
}

void Module::collect(NamedTensors& out, const std::string& prefix, bool params, bool buffers) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(join(prefix, n), t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(join(prefix, n), t);
  for (const auto& [n, c] : children_) c->collect(out, join(prefix, n), params, buffers);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect(out, "", true, false);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect(out, "", false, true);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect(out, "", true, true);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors mine = state_dict();
  for (auto& entry : mine) {   // (no structured bindings: clang 14 cannot capture them)
    const std::string& name = entry.first;
    Tensor& dst = entry.second;
    auto it = std::find_if(state.begin(), state.end(), [&](const auto& p) { return p.first == name; });
    if (it == state.end()) {
      OOMLAB_CHECK(!strict, "load_state_dict: missing key '", name, "'");
      continue;
    }
    OOMLAB_CHECK_T(ShapeError, it->second.shape() == dst.shape(), "load_state_dict: '", name, "' has shape ",
                   shape_str(it->second.shape()), " in the state dict but ", shape_str(dst.shape()),
                   " in the model");
    dst.copy_(it->second);
  }
  if (strict)
    for (const auto& entry : state)
      OOMLAB_CHECK(std::any_of(mine.begin(), mine.end(), [&](const auto& p) { return p.first == entry.first; }),
                   "load_state_dict: unexpected key '", entry.first, "'");
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::vector<std::pair<std::string, Module*>> stack{{"", this}};
  while (!stack.empty()) {   // explicit pre-order walk
    auto [prefix, m] = stack.back();
    stack.pop_back();
    out.emplace_back(prefix, m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(join(prefix, it->first), it->second.get());
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [n, c] : children_) out.emplace_back(n, c.get());
  return out;
}

Module* Module::submodule(const std::string& path) {
  if (path.empty()) return this;
  size_t dot = path.find('.');
  std::string head = path.substr(0, dot);
  for (auto& [n, c] : children_)
    if (n == head) return dot == std::string::npos ? c.get() : c->submodule(path.substr(dot + 1));
  throw ValueError(str_cat(type_name(), " has no submodule '", path, "'"));
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (auto& [n, t] : named_parameters()) t.zero_grad(set_to_none);
}

}  // namespace oomlab::nn
