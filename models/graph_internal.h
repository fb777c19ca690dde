// graph_internal.h — the model-graph importer's pieces shared by its files (not a public
// header; the importer's contracts are in graph_model.h):
//   graph_model.cpp     the module tree, value lifetimes, the forward loop, the public API;
//   graph_nodes.cpp     one handler per supported op (run_node, graph_supported_ops);
//   graph_pointwise.cpp arithmetic (broadcasting, with numbers), activations, shape ops;
//   graph_args.cpp      the checks of values read from the file (dims, indices, integer
//                       arithmetic) and NodeCtx's argument accessors;
//   graph_zero3.cpp     ZeRO-3's parameter gathers around each module's run of nodes;
//   graph_constants.cpp constant folding: nodes that depend on neither the model input nor a
//                       trainable parameter (position ids, an all-true attention mask) are
//                       evaluated once on the host, at build time; so is the shape of a mask
//                       built from the attention-mask input (MaskExpr).
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/model_graph.h"
#include "engine/nn/checkpoint_plan.h"
#include "engine/nn/module.h"
#include "engine/nn/module_hooks.h"
#include "models/model_zoo.h"

namespace oomlab::graph {

// An integer constant on the host (bool as 0/1), row-major.
struct HostValue {
  Shape shape;
  std::vector<int64_t> v;
};

// A value built from the attention-mask input (graph_constants.cpp: fold_mask_expr): element e
// is cst[e] && mask[src[e]], mask being that input flattened ([B * T], nonzero = attend);
// cst (0/1) and src (flat indices) have the value's shape. The input itself: cst all ones,
// src 0 .. B*T - 1.
struct MaskExpr {
  HostValue cst, src;
};

struct Value {
  std::vector<Tensor> outs;              // a node's outputs (undefined where oomlab does not compute one)
  Tensor transposed_of;                  // a permute [1, 0] / t of this 2-D parameter, not materialised
  const HostValue* constant = nullptr;   // a folded constant, the model's (no device tensor until one is needed)
  const MaskExpr* mask = nullptr;        // built from the attention-mask input (only attention reads it)
};

// A module of the tree: holds the parameters and buffers registered under its path.
class GraphLeaf : public nn::Module {
 public:
  explicit GraphLeaf(std::string type) : type_(std::move(type)) {}
  Tensor forward(const Tensor&) override;
  const char* type_name() const override { return type_.c_str(); }
  Tensor add_tensor(const std::string& name, Tensor t, bool buffer) {
    return buffer ? register_buffer(name, std::move(t)) : register_parameter(name, std::move(t));
  }
  GraphLeaf* child(const std::string& name, const std::string& type);

 private:
  std::string type_;
};

// A checkpointed run of nodes [begin, end): one tensor in (`input`), one out (`output`).
struct GraphSegment {
  size_t begin = 0, end = 0;
  std::string input, output, name;
};

class GraphModel : public GraphLeaf, public CheckpointPlanner {
 public:
  GraphModel(ModelGraph g, const ModelConfig& cfg);
  Tensor forward(const Tensor& x) override;
  // graph_checkpoint.cpp: blocks are the modules a Sequential or ModuleList holds (ResNet's
  // layerN.M, BERT's encoder.layer.N, GPT-2's transformer.h.N, ViT's encoder layers);
  // selective picks modules by type name (or kind: attention, gelu).
  CheckpointPlan plan_checkpoints(const CheckpointPolicy& policy) override;
  void apply_checkpoint_plan(const CheckpointPlan& plan) override;
  std::vector<std::vector<std::string>> checkpoint_chains() override;
  int64_t applied_segments() const override { return int64_t(segments_.size()); }
  const ModelGraph& graph() const { return g_; }
  const ModelConfig& config() const { return cfg_; }
  bool last_use(const std::string& name, size_t node) const {
    auto it = last_use_.find(name);
    return it != last_use_.end() && it->second == node && !held_.count(name);
  }
  bool batched(const std::string& name) const { return batched_.count(name) > 0; }
  int uses(const std::string& name) const {   // nodes that reference the value
    auto it = uses_.find(name);
    return it == uses_.end() ? 0 : it->second;
  }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  int64_t example_batch() const { return g_.inputs[0].shape.empty() ? 0 : g_.inputs[0].shape[0]; }
  bool dynamic_batch() const { return g_.dynamic_batch; }
  int64_t batch = 0;   // the running forward's
  std::map<const HostValue*, int> mask_kinds;   // attention masks already classified (graph_nodes.cpp), per fold
  // The running forward's key padding mask (uint8 [B, T], 1 = padding: id 0), when the graph
  // takes an attention-mask input; kept until the next forward (checkpointing re-runs read it).
  const Tensor& key_padding() const { return key_padding_; }
  bool folded(const std::string& name) const { return constants_.count(name) || mask_exprs_.count(name); }
  std::map<std::string, std::string> producer;   // node name -> its op (getitem: "getitem:<source op>")

 private:
  std::map<std::string, Value> base_env();   // parameters, buffers, folded constants
  Tensor padded_to_export(const Tensor& x) const;
  void run_nodes(std::map<std::string, Value>& env, size_t begin, size_t end);
  void run_segment(std::map<std::string, Value>& env, const GraphSegment& seg);
  std::optional<GraphSegment> segment_of(size_t begin, size_t end, const std::string& name) const;
  std::pair<size_t, size_t> node_range(const std::string& module) const;   // {0, 0}: not one run
  bool overwrites_input(const GraphSegment& seg) const;
  std::map<std::string, std::string> module_types() const;   // the file's table and the nodes' own
  std::vector<GraphSegment> segments_;   // the applied checkpoint plan, in node order
  void build_tree();
  void plan_lifetimes();
  // ZeRO-3 (graph_zero3.cpp): each run of a module's nodes gathers the modules whose
  // parameters it reads and frees them after, through the module call hooks.
  struct ShardedRun {
    const nn::ModuleCallHooks* hooks = nullptr;   // none installed: nothing to do
    std::vector<nn::Module*> owners;
    std::vector<size_t> made;                     // the run's nodes
    size_t last = 0;                              // its last node
  };
  void plan_parameter_reads();
  ShardedRun begin_sharded_run(size_t i, size_t end);
  void end_sharded_run(const ShardedRun& run, std::map<std::string, Value>& env);
  std::vector<std::vector<nn::Module*>> reads_;   // per node: the parameter owners it reads
  void fold_constants(const Shape& input_shape);
  size_t input_dim_read(const GraphNode& n, const Shape& input_shape) const;
  ModelGraph g_;
  ModelConfig cfg_;
  std::map<std::string, Tensor> tensors_;              // parameters and buffers by state_dict name
  std::map<std::string, HostValue> buffer_constants_;  // integer buffers with values
  std::map<std::string, HostValue> constants_;         // those and the nodes folded for folded_for_
  std::string mask_input_;                             // the attention-mask input's name ("" if none)
  bool classifier_output_ = false;                     // the output is [batch, classes]
  std::map<std::string, MaskExpr> mask_exprs_;         // it and the nodes folded from it, for folded_for_
  Tensor key_padding_;
  Shape folded_for_;                                   // the input shape constants_ were folded for
  std::set<std::string> batched_;                      // values derived from the model input
  std::map<std::string, size_t> last_use_;
  std::map<std::string, int> uses_;
  std::vector<std::vector<std::string>> dies_after_;   // per node: the values freed after it
  std::set<std::string> held_;                         // inputs, parameters, outputs: never freed
};

// An argument read from the file that cannot be used as it is: a dim out of range, an index
// past a list or a size, integer arithmetic that overflows or divides by zero. Its message
// names the argument ("argument 1: dim 5 is out of range for a 3-D value"); the importer's
// callers (run_node, GraphModel::fold_constants) prefix the file and node (node_where), so
// the user reads one line naming file, node and argument.
struct GraphArgError : ValueError { using ValueError::ValueError; };
[[noreturn]] void bad_arg(size_t arg, const std::string& what);
// An integer argument as int64: JSON's unsigned integers above 2^63 - 1 (2^64 - 1 is not -1)
// and non-integers are a GraphArgError naming argument `arg`.
int64_t arg_integer(const nlohmann::json& a, size_t arg);
// "graph F: node 'n' (op) in module 'm' (Type): ", the prefix of every error about node n (the
// module part when the file names one: the user's module, not only an internal node).
std::string node_where(const std::string& file, const GraphNode& n);
// `d` as a dim of a value of rank `rank`, normalised to [0, rank) (insert: [0, rank], where
// unsqueeze puts a new dim), as PyTorch's maybe_wrap_dim; GraphArgError otherwise.
int64_t checked_dim(int64_t d, int64_t rank, size_t arg, bool insert = false);
// `i` as an index into an extent of `size`, normalised to [0, size) (negative from the end).
int64_t checked_index(int64_t i, int64_t size, size_t arg);
// a + b, a - b, a * b of values from the file, or GraphArgError naming the argument.
int64_t arg_add(int64_t a, int64_t b, size_t arg);
int64_t arg_sub(int64_t a, int64_t b, size_t arg);
int64_t arg_mul(int64_t a, int64_t b, size_t arg);
// Python's a // b (rounds toward negative infinity); b == 0 and INT64_MIN // -1 are errors.
int64_t arg_floordiv(int64_t a, int64_t b, size_t arg);

struct NodeCtx {
  GraphModel& m;
  const GraphNode& n;
  std::map<std::string, Value>& env;
  size_t index;
  [[noreturn]] void unsupported(const std::string& what) const;
  const nlohmann::json& arg(size_t i) const;
  const Value* value(size_t i) const;   // the Value an argument references, or nullptr
  Tensor tensor(size_t i) const;        // a device tensor (a folded constant is copied over)
  std::vector<int64_t> ints(size_t i, std::vector<int64_t> dflt = {}) const;
  int64_t integer(size_t i, int64_t dflt) const;   // an integer literal (null: dflt), else GraphArgError
  int64_t dim(size_t i, int64_t rank, int64_t dflt = 0, bool insert = false) const;   // checked_dim of integer(i)
  double number(size_t i, double dflt) const;   // a literal, {"float": "-inf"} included
  bool may_overwrite_first() const;
};

const std::set<std::string>& supported_ops();
// A value this op produced may be overwritten by its only reader (conv, BatchNorm and add
// outputs: nothing saves them): NodeCtx::may_overwrite_first and checkpointing's planner.
bool overwritable_producer(const std::string& op);
// W^T (a transposed weight) expanded or viewed over a batch as bmm's operand: stays a
// transposed weight when `shape` is [k, in, out] of it, else names `what` as unsupported.
Value transposed_over_batch(const NodeCtx& c, const Value& src, const char* what);
// graph_pointwise.cpp: arithmetic, activations and shape ops (pointwise_ops() names them);
// add_node is add.Tensor when it cannot run in place (a number, a broadcast).
const std::set<std::string>& pointwise_ops();
Value pointwise_node(const NodeCtx& c);
Value add_node(const NodeCtx& c);
Value run_node(GraphModel& m, const GraphNode& n, std::map<std::string, Value>& env, size_t index);
// The folded value of node n from its arguments' folded values, or nullopt when n's op
// is not one the folder evaluates (it then runs on the device like any other node).
std::optional<HostValue> fold_node(const GraphNode& n, const std::map<std::string, HostValue>& known);
// Node n folded over a MaskExpr argument (the others constant): views, index, a bool / int64
// copy, an and with a constant; nullopt for any other use.
std::optional<MaskExpr> fold_mask_expr(const GraphNode& n, const std::map<std::string, HostValue>& known,
                                       const std::map<std::string, MaskExpr>& exprs);
Tensor to_device(const HostValue& c, Device device);   // int64 tensor (meta: allocation only)

}  // namespace oomlab::graph
