// graph_model.cpp — the model-graph importer (graph_model.h): the module tree from the
// parameters' dotted names, then a forward that interprets the nodes in order with oomlab's
// ops, freeing each value after its last use.
#include "models/graph_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/forward_observer.h"
#include "engine/nn/layers.h"
#include "engine/ops/activation.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"

namespace oomlab {

namespace {
using json = nlohmann::json;

const std::set<std::string>& supported_ops() {
  static const std::set<std::string> ops = {
      "aten.convolution.default", "aten._native_batch_norm_legit_no_training.default", "aten.relu.default",
      "aten.add.Tensor", "aten.max_pool2d_with_indices.default", "aten.mean.dim", "aten._adaptive_avg_pool2d.default",
      "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.permute.default",
      "aten.t.default", "aten.addmm.default", "getitem"};
  return ops;
}

// A module of the tree: holds the parameters and buffers registered under its path.
class GraphLeaf : public nn::Module {
 public:
  explicit GraphLeaf(std::string type) : type_(std::move(type)) {}
  Tensor forward(const Tensor&) override { throw InternalError("a graph model's submodules do not run alone"); }
  const char* type_name() const override { return type_.c_str(); }
  Tensor add_tensor(const std::string& name, Tensor t, bool buffer) {
    return buffer ? register_buffer(name, std::move(t)) : register_parameter(name, std::move(t));
  }
  GraphLeaf* child(const std::string& name, const std::string& type) {
    for (auto& [n, m] : named_children())
      if (n == name) return static_cast<GraphLeaf*>(m);
    return register_module(name, std::make_shared<GraphLeaf>(type)).get();
  }

 private:
  std::string type_;
};

DType dtype_from(const std::string& d, const std::string& where) {
  OOMLAB_CHECK_T(NotImplementedError, d != "int32" && d != "bool", where, ": dtype ", d,
                 " has no oomlab tensor type yet");
  return parse_dtype(d);   // the format's other names are oomlab's (dtype_name)
}

struct Value {
  std::vector<Tensor> outs;   // a node's outputs (undefined where oomlab does not compute one)
  Tensor transposed_of;       // a permute [1, 0] / t of this 2-D tensor, not materialised
};

class GraphModel;
Value run_node(GraphModel& m, const GraphNode& n, std::map<std::string, Value>& env, size_t index);

class GraphModel : public GraphLeaf {
 public:
  GraphModel(ModelGraph g, const ModelConfig& cfg) : GraphLeaf("GraphModel"), g_(std::move(g)) {
    build_tree(cfg);
    plan_lifetimes();
  }
  Tensor forward(const Tensor& x) override;
  const ModelGraph& graph() const { return g_; }
  bool last_use(const std::string& name, size_t node) const {
    auto it = last_use_.find(name);
    return it != last_use_.end() && it->second == node && !held_.count(name);
  }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  int64_t example_batch() const { return g_.inputs[0].shape.empty() ? 0 : g_.inputs[0].shape[0]; }
  int64_t batch = 0;   // the running forward's
  std::map<std::string, std::string> producer;   // node name -> its op (getitem: "getitem:<source op>")

 private:
  void build_tree(const ModelConfig& cfg);
  void plan_lifetimes();
  ModelGraph g_;
  std::map<std::string, Tensor> tensors_;       // parameters and buffers by state_dict name
  std::map<std::string, size_t> last_use_;
  std::vector<std::vector<std::string>> dies_after_;   // per node: the values freed after it
  std::set<std::string> held_;                  // inputs, parameters, outputs: never freed
};

void init_tensor(Tensor& t, const std::string& name, bool buffer, Generator& gen) {
  if (t.device().is_meta()) return;
  const std::string leaf = name.substr(name.rfind('.') + 1);
  if (buffer) return nn::init::constant_(t, leaf == "running_var" ? 1.0 : 0.0);
  if (leaf == "weight" && t.dim() >= 2) {
    const double b = 1.0 / std::sqrt(double(nn::init::fan_in(t)));
    return nn::init::uniform_(t, -b, b, gen);
  }
  nn::init::constant_(t, leaf == "weight" ? 1.0 : 0.0);
}

void GraphModel::build_tree(const ModelConfig& cfg) {
  std::map<std::string, std::string> types;
  for (const GraphNode& n : g_.nodes)
    if (!n.module.empty() && !n.module_type.empty()) types.emplace(n.module, n.module_type);
  Generator gen{cfg.seed, 0};
  auto module_at = [&](const std::string& dotted, size_t end) {   // the chain to dotted[0, end)
    GraphLeaf* m = this;
    std::string path;
    size_t start = 0;
    while (start < end) {
      size_t dot = dotted.find('.', start);
      if (dot == std::string::npos || dot > end) dot = end;
      if (!path.empty()) path += '.';
      path.append(dotted, start, dot - start);
      m = m->child(dotted.substr(start, dot - start), types.count(path) ? types[path] : "Module");
      start = dot + 1;
    }
    return m;
  };
  for (const GraphParameter& p : g_.parameters) {
    const size_t last_dot = p.name.rfind('.');
    GraphLeaf* m = last_dot == std::string::npos ? this : module_at(p.name, last_dot);
    const size_t start = last_dot == std::string::npos ? 0 : last_dot + 1;
    const std::string where = str_cat("graph ", g_.file, ": parameter '", p.name, "'");
    const DType dt = p.buffer || dtype_from(p.dtype, where) != DType::f32 ? dtype_from(p.dtype, where) : cfg.dtype;
    Tensor t = Tensor::empty(p.shape, dt, cfg.device);
    init_tensor(t, p.name, p.buffer, gen);
    tensors_[p.name] = m->add_tensor(p.name.substr(start), t, p.buffer);
  }
  for (const GraphNode& n : g_.nodes)   // modules without tensors (ReLU, MaxPool2d) too, for summary's rows
    if (!n.module.empty()) module_at(n.module, n.module.size());
}

// The path and every ancestor of a module path ("layer1.0.conv1": "layer1", "layer1.0", itself).
std::vector<std::string> module_and_ancestors(const std::string& path) {
  std::vector<std::string> out;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1))
    out.push_back(path.substr(0, dot));
  if (!path.empty()) out.push_back(path);
  return out;
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
  for (size_t i = 0; i < count; ++i) {
    calls[i] = module_and_ancestors(g_.nodes[i].module);
    for (const std::string& m : calls[i]) begin[i][m] = i > 0 && begin[i - 1].count(m) ? begin[i - 1][m] : i;
  }
  for (size_t i = count; i-- > 0;)
    for (const std::string& m : calls[i]) end[i][m] = i + 1 < count && end[i + 1].count(m) ? end[i + 1][m] : i;
  std::map<std::string, size_t> produced_at;
  for (size_t i = 0; i < count; ++i) {
    const GraphNode& n = g_.nodes[i];
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

Tensor GraphModel::forward(const Tensor& x) {
  std::map<std::string, Value> env;
  env[g_.inputs[0].name].outs = {x};
  batch = x.dim() > 0 ? x.size(0) : 0;
  for (auto& [name, t] : tensors_) env[name].outs = {t};
  Tensor run_input;   // the first tensor input of the current module's run of nodes
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const GraphNode& n = g_.nodes[i];
    if (i == 0 || g_.nodes[i - 1].module != n.module)
      run_input = n.refs.empty() || env.at(n.refs[0]).outs.empty() ? Tensor() : env.at(n.refs[0]).outs[0];
    {
      MemoryContext ctx(n.module.empty() ? memory_label() : n.module, "fwd");
      env[n.name] = run_node(*this, n, env, i);
    }
    const bool run_ends = i + 1 == g_.nodes.size() || g_.nodes[i + 1].module != n.module;
    if (run_ends && !n.module.empty() && !env[n.name].outs.empty()) {   // summary's per-layer rows
      nn::Module* m = submodule(n.module);
      if (m->is_leaf_module()) nn::notify_forward(*m, run_input, env[n.name].outs[0]);
    }
    for (const std::string& r : dies_after_[i]) env.erase(r);
  }
  const Value& out = env.at(g_.outputs[0]);
  OOMLAB_CHECK_T(NotImplementedError, !out.outs.empty() && out.outs[0].defined(), "graph ", g_.file,
                 ": the output '", g_.outputs[0], "' is not a tensor oomlab computed");
  return out.outs[0];
}
// ---- the ops -------------------------------------------------------------------------
struct NodeCtx {
  GraphModel& m;
  const GraphNode& n;
  std::map<std::string, Value>& env;
  size_t index;
  [[noreturn]] void unsupported(const std::string& what) const {
    throw NotImplementedError(str_cat("graph ", m.graph().file, ": node '", n.name, "' (", n.op, "): ", what,
                                      " is not supported yet"));
  }
  const json& arg(size_t i) const {
    static const json null_value;
    return i < n.args.size() ? n.args[i] : null_value;
  }
  const Value* value(size_t i) const {   // the Value an argument references, or nullptr
    const json& a = arg(i);
    return a.is_object() ? &env.at(a["ref"].get<std::string>()) : nullptr;
  }
  Tensor tensor(size_t i) const {
    const Value* v = value(i);
    if (!v) return Tensor();
    if (v->transposed_of.defined()) unsupported("a permuted weight used other than by addmm");
    if (v->outs.empty() || !v->outs[0].defined()) unsupported(str_cat("argument ", i, " (an output oomlab does not compute)"));
    return v->outs[0];
  }
  std::vector<int64_t> ints(size_t i, std::vector<int64_t> dflt = {}) const {
    const json& a = arg(i);
    if (a.is_null()) return dflt;
    std::vector<int64_t> out;
    for (const json& e : a) {
      if (!e.is_number_integer()) unsupported(str_cat("argument ", i, " ", a.dump()));
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  // The first argument may be overwritten: its value dies here and a kernel that saves no
  // output produced it (what torchvision's in-place ReLU and residual add rely on).
  bool may_overwrite_first() const {
    const json& a = arg(0);
    if (!a.is_object()) return false;
    const std::string src = a["ref"].get<std::string>();
    if (!m.last_use(src, index) || !m.producer.count(src)) return false;
    const std::string& op = m.producer.at(src);
    return op == "aten.convolution.default" || op == "getitem:aten._native_batch_norm_legit_no_training.default" ||
           op == "aten.add.Tensor";
  }
};

Value conv(const NodeCtx& c) {
  if (c.arg(6).is_boolean() && c.arg(6).get<bool>()) c.unsupported("a transposed convolution");
  const auto st = c.ints(3, {1, 1}), pad = c.ints(4, {0, 0}), dil = c.ints(5, {1, 1});
  if (st.size() != 2 || pad.size() != 2 || dil.size() != 2) c.unsupported("a convolution that is not 2-D");
  Conv2dParams p{st[0], st[1], pad[0], pad[1], dil[0], dil[1], c.arg(8).is_number_integer() ? c.arg(8).get<int64_t>() : 1};
  return {{conv2d(c.tensor(0), c.tensor(1), c.tensor(2), p)}, {}};
}

Value batch_norm_node(const NodeCtx& c) {
  Tensor rm = c.tensor(3), rv = c.tensor(4);
  const bool training = c.m.is_training();
  Tensor y = batch_norm(c.tensor(0), c.tensor(1), c.tensor(2), rm, rv, training, c.arg(5).get<double>(),
                        c.arg(6).get<double>());
  auto counter = c.m.tensors().find(c.n.module + ".num_batches_tracked");
  if (training && counter != c.m.tensors().end()) {
    Tensor t = counter->second;
    add_scalar_inplace(t, 1.0);
  }
  return {{y, Tensor(), Tensor()}, {}};
}

Value elementwise(const NodeCtx& c) {
  if (c.n.op == "aten.relu.default") {
    if (!c.may_overwrite_first()) return {{relu(c.tensor(0))}, {}};
    Tensor x = c.tensor(0);
    return {{relu_(x)}, {}};
  }
  if (c.n.kwargs.contains("alpha") && c.n.kwargs["alpha"] != 1) c.unsupported("add with alpha != 1");
  if (!c.may_overwrite_first()) return {{add(c.tensor(0), c.tensor(1))}, {}};
  Tensor a = c.tensor(0);
  return {{add_(a, c.tensor(1))}, {}};
}

Value pooling(const NodeCtx& c) {
  const Tensor x = c.tensor(0);
  if (c.n.op == "aten.max_pool2d_with_indices.default") {
    const auto k = c.ints(1), st = c.ints(2, k), pad = c.ints(3, {0, 0}), dil = c.ints(4, {1, 1});
    if (k.size() != 2 || st.size() != 2 || pad.size() != 2 || dil != std::vector<int64_t>{1, 1} ||
        (c.arg(5).is_boolean() && c.arg(5).get<bool>()))
      c.unsupported("a max pool other than 2-D, dilation 1, floor mode");
    return {{max_pool2d(x, Pool2dParams{k[0], k[1], st[0], st[1], pad[0], pad[1]}), Tensor()}, {}};
  }
  if (c.n.op == "aten._adaptive_avg_pool2d.default") {
    const auto o = c.ints(1);
    if (o.size() != 2) c.unsupported("an adaptive pool that is not 2-D");
    return {{adaptive_avg_pool2d(x, o[0], o[1])}, {}};
  }
  auto dims = c.ints(1);   // aten.mean.dim: over H and W only
  for (int64_t& d : dims) d = d < 0 ? d + x.dim() : d;
  std::sort(dims.begin(), dims.end());
  if (x.dim() != 4 || dims != std::vector<int64_t>{2, 3}) c.unsupported("a mean other than over H and W of NCHW");
  Tensor y = adaptive_avg_pool2d(x, 1, 1);
  const bool keep = c.arg(2).is_boolean() && c.arg(2).get<bool>();
  return {{keep ? y : y.reshape({x.size(0), x.size(1)})}, {}};
}

Value shape_node(const NodeCtx& c) {
  if (c.n.op == "aten.permute.default" || c.n.op == "aten.t.default") {
    const Tensor w = c.tensor(0);
    if (w.dim() != 2 || (c.n.op == "aten.permute.default" && c.ints(1) != std::vector<int64_t>{1, 0}))
      c.unsupported("a permute other than a 2-D transpose");
    return {{}, w};
  }
  if (c.n.op == "aten.addmm.default") {
    const Value* wt = c.value(2);
    if (!wt || !wt->transposed_of.defined()) c.unsupported("addmm whose second matrix is not a transposed weight");
    return {{linear(c.tensor(1), wt->transposed_of, c.tensor(0))}, {}};
  }
  Shape shape = c.ints(1);   // view / _unsafe_view / reshape: the example batch follows the run's
  if (!shape.empty() && shape[0] == c.m.example_batch() && c.m.batch != c.m.example_batch()) shape[0] = c.m.batch;
  return {{c.tensor(0).reshape(shape)}, {}};
}

Value run_node(GraphModel& m, const GraphNode& n, std::map<std::string, Value>& env, size_t index) {
  const NodeCtx c{m, n, env, index};
  if (n.op == "getitem") {
    const Value& src = env.at(n.refs.at(0));
    return {{src.outs.at(size_t(n.args[1].get<int64_t>()))}, {}};
  }
  if (n.op == "aten.convolution.default") return conv(c);
  if (n.op == "aten._native_batch_norm_legit_no_training.default") return batch_norm_node(c);
  if (n.op == "aten.relu.default" || n.op == "aten.add.Tensor") return elementwise(c);
  if (n.op == "aten.max_pool2d_with_indices.default" || n.op == "aten.mean.dim" ||
      n.op == "aten._adaptive_avg_pool2d.default")
    return pooling(c);
  return shape_node(c);
}
}  // namespace

bool is_graph_model(const std::string& name) { return name.rfind("graph:", 0) == 0; }

const ModelGraph& graph_of_model(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<ModelGraph>> cache;
  const std::string path = name.substr(6);
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[path];
  if (!slot) slot = std::make_unique<ModelGraph>(read_model_graph(path));
  return *slot;
}

ModelConfig graph_model_config(const std::string& name) {
  const ModelGraph& g = graph_of_model(name);
  ModelConfig cfg;
  const GraphTensor& in = g.inputs.at(0);
  const std::string where = str_cat("graph ", g.file, ": ");
  if (in.dtype == "int64" && in.shape.size() == 2) {
    cfg.seq_len = in.shape[1];
  } else {
    OOMLAB_CHECK_T(NotImplementedError, in.shape.size() == 4 && in.dtype == "float32", where,
                   "the example input must be float32 [N, C, H, W] or int64 [N, T], got ", in.dtype, " ",
                   shape_str(in.shape));
    cfg.in_channels = in.shape[1];
    cfg.height = in.shape[2];
    cfg.width = in.shape[3];
  }
  for (const GraphNode& n : g.nodes)
    if (n.name == g.outputs.at(0) && n.outputs[0].shape.size() == 2) cfg.num_classes = n.outputs[0].shape[1];
  return cfg;
}

std::vector<std::string> graph_missing_ops(const ModelGraph& g) {
  std::vector<std::string> out;
  for (const GraphNode& n : g.nodes)
    if (!supported_ops().count(n.op))
      out.push_back(str_cat(n.op, " (node '", n.name, "'", n.module.empty() ? "" : str_cat(", module '", n.module, "'"), ")"));
  return out;
}

nn::ModulePtr build_graph_model(const ModelGraph& g, const ModelConfig& cfg) {
  const std::vector<std::string> missing = graph_missing_ops(g);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += "\n  " + m;
    throw NotImplementedError(str_cat("graph ", g.file, ": ", missing.size(), " node(s) use ops oomlab does not have yet:",
                                      list));
  }
  OOMLAB_CHECK_T(NotImplementedError, g.inputs.size() == 1 && g.outputs.size() == 1, "graph ", g.file,
                 ": one input and one output are supported, got ", g.inputs.size(), " and ", g.outputs.size());
  return std::make_shared<GraphModel>(g, cfg);
}

}  // namespace oomlab
