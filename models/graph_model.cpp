// graph_model.cpp — the model-graph importer (graph_model.h): the module tree from the
// parameters' dotted names, the constants folded on the host, the values' lifetimes, then a
// forward that interprets the nodes in order with oomlab's ops (graph_nodes.cpp), freeing
// each value where eager PyTorch would.
#include "models/graph_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/ops/concat.h"
#include "engine/ops/embedding.h"
#include "engine/parallel/data_parallel.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/forward_observer.h"
#include "engine/nn/layers.h"
#include "models/graph_internal.h"

namespace oomlab {
namespace graph {

Tensor GraphLeaf::forward(const Tensor&) { throw InternalError("a graph model's submodules do not run alone"); }

GraphLeaf* GraphLeaf::child(const std::string& name, const std::string& type) {
  for (auto& [n, m] : named_children())
    if (n == name) return static_cast<GraphLeaf*>(m);
  return register_module(name, std::make_shared<GraphLeaf>(type)).get();
}

namespace {
DType dtype_from(const std::string& d, const std::string& where) {
  OOMLAB_CHECK_T(NotImplementedError, d != "int32" && d != "bool", where, ": dtype ", d,
                 " has no oomlab tensor type yet");
  return parse_dtype(d);   // the format's other names are oomlab's (dtype_name)
}

void init_tensor(Tensor& t, const GraphParameter& p, Generator& gen) {
  if (t.device().is_meta()) return;
  if (!p.values.empty()) {   // an integer buffer the exporter wrote out (position ids)
    Tensor host = Tensor::empty(t.shape(), DType::i64, cpu_device());
    std::copy(p.values.begin(), p.values.end(), host.data<int64_t>());
    t.copy_(host.to(t.dtype()));
    return;
  }
  const std::string leaf = p.name.substr(p.name.rfind('.') + 1);
  if (p.buffer) return nn::init::constant_(t, leaf == "running_var" ? 1.0 : 0.0);
  if (leaf == "weight" && t.dim() >= 2) {
    const double b = 1.0 / std::sqrt(double(nn::init::fan_in(t)));
    return nn::init::uniform_(t, -b, b, gen);
  }
  nn::init::constant_(t, leaf == "weight" ? 1.0 : 0.0);
}

// The path and every ancestor of a module path ("layer1.0.conv1": "layer1", "layer1.0", itself).
std::vector<std::string> module_and_ancestors(const std::string& path) {
  std::vector<std::string> out;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1))
    out.push_back(path.substr(0, dot));
  if (!path.empty()) out.push_back(path);
  return out;
}
// uint8 [B, T], 1 where the id is 0 (padding), as the zoo's BERT derives its mask (on the
// ids' device: token_inputs).
Tensor key_padding_of(const Tensor& ids) {
  OOMLAB_CHECK_T(DTypeError, ids.dtype() == DType::i64,
                 "a graph with an attention-mask input takes int64 token ids, got ", ids.str());
  return token_inputs(ids, /*positions_and_types=*/false, /*padding=*/true).padding;
}
}  // namespace

GraphModel::GraphModel(ModelGraph g, const ModelConfig& cfg) : GraphLeaf("GraphModel"), g_(std::move(g)), cfg_(cfg) {
  if (g_.inputs.size() == 2) mask_input_ = g_.inputs[1].name;   // build_graph_model checked its shape
  classifier_output_ = std::any_of(g_.nodes.begin(), g_.nodes.end(), [&](const GraphNode& n) {
    return n.name == g_.outputs[0] && n.outputs.at(0).shape.size() == 2;
  });
  build_tree();
  fold_constants(g_.inputs[0].shape);
  plan_lifetimes();
  plan_parameter_reads();
}

std::map<std::string, std::string> GraphModel::module_types() const {
  std::map<std::string, std::string> types = g_.module_types;
  for (const GraphNode& n : g_.nodes)
    if (!n.module.empty() && !n.module_type.empty()) types.emplace(n.module, n.module_type);
  return types;
}

void GraphModel::build_tree() {
  const std::map<std::string, std::string> types = module_types();
  Generator gen{cfg_.seed, 0};
  auto module_at = [&](const std::string& dotted, size_t end) {   // the chain to dotted[0, end)
    GraphLeaf* m = this;
    std::string path;
    size_t start = 0;
    while (start < end) {
      size_t dot = dotted.find('.', start);
      if (dot == std::string::npos || dot > end) dot = end;
      if (!path.empty()) path += '.';
      path.append(dotted, start, dot - start);
      m = m->child(dotted.substr(start, dot - start), types.count(path) ? types.at(path) : "Module");
      start = dot + 1;
    }
    return m;
  };
  for (const GraphParameter& p : g_.parameters) {
    const size_t last_dot = p.name.rfind('.');
    GraphLeaf* m = last_dot == std::string::npos ? this : module_at(p.name, last_dot);
    const size_t start = last_dot == std::string::npos ? 0 : last_dot + 1;
    const std::string where = str_cat("graph ", g_.file, ": parameter '", p.name, "'");
    // float32 tensors take the model's dtype; buffers only a float64 one (model.double()), as
    // BatchNorm keeps float32 statistics in a --half model
    const DType file_dt = dtype_from(p.dtype, where);
    const bool follows = file_dt == DType::f32 && (!p.buffer || cfg_.dtype == DType::f64);
    const DType dt = follows ? cfg_.dtype : file_dt;
    Tensor t = Tensor::empty(p.shape, dt, cfg_.device);
    init_tensor(t, p, gen);
    // a non-persistent buffer lives on the device but outside the state_dict (not registered)
    tensors_[p.name] = p.persistent ? m->add_tensor(p.name.substr(start), t, p.buffer) : t;
    if (!p.values.empty()) buffer_constants_[p.name] = HostValue{p.shape, p.values};
  }
  for (const GraphNode& n : g_.nodes)   // modules without tensors (ReLU, MaxPool2d) too, for summary's rows
    if (!n.module.empty()) module_at(n.module, n.module.size());
}

// The dim of the input an aten.sym_size.int node reads: an int64 in range (JSON's unsigned 2^64 - 1
// is an error, not dim -1), negative dims counting from the end.
size_t GraphModel::input_dim_read(const GraphNode& n, const Shape& input_shape) const {
  int64_t given = 0;
  try {
    given = arg_integer(n.args[1], 1);
  } catch (const GraphArgError& e) {
    throw ValueError(node_where(g_.file, n) + e.what());
  }
  const int64_t d = given + (given < 0 ? int64_t(input_shape.size()) : 0);
  OOMLAB_CHECK_T(ShapeError, d >= 0 && d < int64_t(input_shape.size()), "graph ", g_.file, ": node '", n.name,
                 "' reads dim ", given, " of an input of shape ", shape_str(input_shape));
  return size_t(d);
}

// A node all of whose references are folded constants (integer buffers with values, or
// nodes folded before it) and whose op the folder evaluates is folded, and so is a size of
// the input (aten.sym_size.int: a dynamic batch) for `input_shape`; values derived from the
// model input are "batched" (in a static export a view of one scales its dim 0 with the
// running batch).
void GraphModel::fold_constants(const Shape& input_shape) {
  constants_ = buffer_constants_;
  folded_for_ = input_shape;
  mask_kinds.clear();
  batched_ = {g_.inputs[0].name};
  mask_exprs_.clear();
  if (!mask_input_.empty()) {   // the attention mask: element e reads itself
    batched_.insert(mask_input_);
    HostValue ones{input_shape, std::vector<int64_t>(size_t(shape_numel(input_shape)), 1)}, src = ones;
    std::iota(src.v.begin(), src.v.end(), int64_t(0));
    mask_exprs_[mask_input_] = MaskExpr{std::move(ones), std::move(src)};
  }
  for (const GraphNode& n : g_.nodes) {
    bool all_constant = true, any_batched = false;
    for (const std::string& r : n.refs) {
      all_constant = all_constant && constants_.count(r);
      any_batched = any_batched || batched_.count(r);
    }
    if (any_batched) batched_.insert(n.name);
    const bool of_input = n.refs.size() == 1 && (n.refs[0] == g_.inputs[0].name || n.refs[0] == mask_input_);
    if (n.op == "aten.sym_size.int" && of_input && n.args.size() == 2 && n.args[1].is_number_integer()) {
      constants_[n.name] = HostValue{{}, {input_shape[input_dim_read(n, input_shape)]}};
      continue;
    }
    if (n.op == "aten._assert_tensor_metadata.default") {   // a check torch.export leaves: nothing to run
      constants_[n.name] = HostValue{{0}, {}};
      continue;
    }
    const bool on_mask =
        std::any_of(n.refs.begin(), n.refs.end(), [&](const std::string& r) { return mask_exprs_.count(r) > 0; });
    try {
      if (on_mask) {
        if (std::optional<MaskExpr> e = fold_mask_expr(n, constants_, mask_exprs_)) mask_exprs_[n.name] = std::move(*e);
        continue;
      }
      if (!all_constant) continue;
      if (std::optional<HostValue> c = fold_node(n, constants_)) constants_[n.name] = std::move(*c);
    } catch (const GraphArgError& e) {   // an argument no op could take: the file, node and argument named
      throw ValueError(node_where(g_.file, n) + e.what());
    }
  }
}

// Values die where eager PyTorch frees them: after their last use, but a value a module call
// takes from outside (its input, held by the caller's frame) lives until the call's last node,
// as `x = self.layer1(x)` keeps layer1's input and a residual block keeps its identity. A call
// is a maximal run of consecutive nodes inside the module (a ReLU module used three times in a
// block makes three calls).
void GraphModel::plan_lifetimes() {
  for (const GraphTensor& t : g_.inputs) held_.insert(t.name);
  for (const GraphParameter& p : g_.parameters) held_.insert(p.name);
  for (const std::string& o : g_.outputs) held_.insert(o);
  const size_t count = g_.nodes.size();
  std::vector<std::vector<std::string>> calls(count);   // the modules node i runs inside
  std::vector<std::map<std::string, size_t>> begin(count), end(count);
  for (size_t i = 0; i < count; ++i) {   // a folded node (a size, a constant) continues the run before it
    calls[i] = folded(g_.nodes[i].name) && i > 0 ? calls[i - 1] : module_and_ancestors(g_.nodes[i].module);
    for (const std::string& m : calls[i]) begin[i][m] = i > 0 && begin[i - 1].count(m) ? begin[i - 1][m] : i;
  }
  for (size_t i = count; i-- > 0;)
    for (const std::string& m : calls[i]) end[i][m] = i + 1 < count && end[i + 1].count(m) ? end[i + 1][m] : i;
  std::map<std::string, size_t> produced_at;
  for (size_t i = 0; i < count; ++i) {
    const GraphNode& n = g_.nodes[i];
    for (const std::string& r : std::set<std::string>(n.refs.begin(), n.refs.end())) ++uses_[r];
    for (const std::string& r : n.refs) {
      size_t& last = last_use_[r];
      last = std::max(last, i);
      auto made = produced_at.find(r);
      if (made == produced_at.end()) continue;   // inputs and parameters are held anyway
      for (const std::string& m : calls[i])
        if (made->second < begin[i][m]) last = std::max(last, end[i][m]);
    }
    produced_at[n.name] = i;
    producer[n.name] = n.op == "getitem" ? "getitem:" + producer[n.refs.at(0)] : n.op;
  }
  dies_after_.assign(count, {});
  for (auto& [name, last] : last_use_)
    if (!held_.count(name)) dies_after_[last].push_back(name);
}

std::map<std::string, Value> GraphModel::base_env() {
  std::map<std::string, Value> env;
  for (auto& [name, t] : tensors_) env[name].outs = {t};
  for (auto& [name, c] : constants_) env[name].constant = &c;
  for (auto& [name, e] : mask_exprs_) env[name].mask = &e;
  return env;
}

// A graph with an attention-mask input runs at its exported length: shorter token batches
// (a data loader pads to the batch's longest sample) are padded with id 0 to it, as a
// tokenizer's padding="max_length" would; the mask then hides that padding. Only for a
// [B, K] output (a classifier), whose shape the padding leaves alone.
Tensor GraphModel::padded_to_export(const Tensor& x) const {
  const GraphTensor& in = g_.inputs[0];
  if (mask_input_.empty() || x.dim() != 2 || x.size(1) >= in.shape[1]) return x;
  OOMLAB_CHECK_T(ShapeError, classifier_output_, "graph ", g_.file, ": token ids of length ", x.size(1),
                 " for a model exported at ", in.shape[1], " whose output is not [batch, classes]: pad the batches to ",
                 in.shape[1]);
  return cat({x, Tensor::zeros({x.size(0), in.shape[1] - x.size(1)}, DType::i64, x.device())}, 1);
}

Tensor GraphModel::forward(const Tensor& x0) {
  const Tensor x = padded_to_export(x0);
  batch = x.dim() > 0 ? x.size(0) : 0;
  if (x.shape() != folded_for_) fold_constants(x.shape());
  if (!mask_input_.empty()) key_padding_ = key_padding_of(x);
  std::map<std::string, Value> env = base_env();
  env[g_.inputs[0].name].outs = {x};
  const bool checkpointing = grad_enabled() && !checkpoint_recomputing() && !segments_.empty();
  size_t i = 0;
  for (const GraphSegment& seg : segments_) {
    if (!checkpointing) break;
    run_nodes(env, i, seg.begin);
    run_segment(env, seg);
    i = seg.end;
  }
  run_nodes(env, i, g_.nodes.size());
  const Value& out = env.at(g_.outputs[0]);
  OOMLAB_CHECK_T(NotImplementedError, !out.outs.empty() && out.outs[0].defined(), "graph ", g_.file,
                 ": the output '", g_.outputs[0], "' is not a tensor oomlab computed");
  return out.outs[0];
}

// Nodes [begin, end) in order (folded ones are already in env), each labelled with its module
// path and phase; values freed after their last use; summary's per-layer rows at the end of
// each leaf module's run of nodes (not while a checkpointed segment is re-run).
void GraphModel::run_nodes(std::map<std::string, Value>& env, size_t begin, size_t end) {
  Tensor run_input;   // the first tensor input of the current module's run of nodes
  const std::string* run_module = nullptr;   // (folded nodes, sizes among them, belong to no run)
  const char* phase = checkpoint_recomputing() ? "recompute" : "fwd";
  ShardedRun sharded;   // ZeRO-3's gathers (graph_zero3.cpp)
  for (size_t i = begin; i < end; ++i) {
    const GraphNode& n = g_.nodes[i];
    if (!folded(n.name)) {
      if (!run_module || *run_module != n.module) {
        const Value* first = n.refs.empty() || !env.count(n.refs[0]) ? nullptr : &env.at(n.refs[0]);
        run_input = first && !first->outs.empty() ? first->outs[0] : Tensor();
        sharded = begin_sharded_run(i, end);
      }
      run_module = &n.module;
      MemoryContext ctx(n.module.empty() ? memory_label() : n.module, phase);
      env[n.name] = run_node(*this, n, env, i);
    }
    size_t next = i + 1;
    while (next < end && folded(g_.nodes[next].name)) ++next;
    const bool run_ends = !folded(n.name) && (next == end || g_.nodes[next].module != n.module);
    if (run_ends) end_sharded_run(sharded, env);
    const Value& out = env[n.name];
    if (run_ends && !n.module.empty() && !out.outs.empty() && out.outs[0].defined() && run_input.defined() &&
        !checkpoint_recomputing()) {
      nn::Module* m = submodule(n.module);
      if (m->is_leaf_module()) nn::notify_forward(*m, run_input, out.outs[0]);
    }
    for (const std::string& r : dies_after_[i]) env.erase(r);
  }
}

// A checkpointed segment (graph_checkpoint.cpp plans them): its nodes run once under a
// CheckpointSegment, which keeps only its input; backward re-runs them from that input.
void GraphModel::run_segment(std::map<std::string, Value>& env, const GraphSegment& seg) {
  const Tensor x = env.at(seg.input).outs.at(0);
  CheckpointSegment cs(seg.name, x);
  cs.add_step({}, [this, seg](const Tensor& in, const std::vector<Tensor>&) {
    std::map<std::string, Value> replay = base_env();
    replay[seg.input].outs = {in};
    run_nodes(replay, seg.begin, seg.end);
    return replay.at(seg.output).outs.at(0);
  });
  run_nodes(env, seg.begin, seg.end);
}

}  // namespace graph
}  // namespace oomlab
