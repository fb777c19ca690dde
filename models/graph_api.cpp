// graph_api.cpp — the importer's public queries and its entry point (graph_model.h): a
// `graph:FILE` model name and its cached graph, the tied names, the config and token shape a
// graph implies, whether it takes an attention mask, the ops it lacks, and build_graph_model,
// which refuses a graph with missing ops or other inputs before building a GraphModel
// (graph_model.cpp).
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "engine/core/error.h"
#include "models/graph_internal.h"
#include "models/graph_model.h"

namespace oomlab {

bool is_graph_model(const std::string& name) { return name.rfind("graph:", 0) == 0; }

namespace {
std::mutex graph_cache_mu;
std::map<std::string, std::unique_ptr<ModelGraph>>& graph_cache() {
  static std::map<std::string, std::unique_ptr<ModelGraph>> cache;
  return cache;
}
}  // namespace

const ModelGraph& graph_of_model(const std::string& name) {
  const std::string path = name.substr(6);
  std::lock_guard<std::mutex> lock(graph_cache_mu);
  auto& slot = graph_cache()[path];
  if (!slot) slot = std::make_unique<ModelGraph>(read_model_graph(path));
  return *slot;
}

void forget_graph_models() {
  std::lock_guard<std::mutex> lock(graph_cache_mu);
  graph_cache().clear();
}

std::map<std::string, std::string> graph_tied_names(const std::string& name) {
  std::map<std::string, std::string> out;
  if (!is_graph_model(name)) return out;
  const nlohmann::json& tied = graph_of_model(name).exporter.value("tied", nlohmann::json::object());
  if (!tied.is_object()) return out;
  for (auto& [other, kept] : tied.items())
    if (kept.is_string()) out[other] = kept.get<std::string>();
  return out;
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

BertShape graph_token_shape(const std::string& name) {
  const ModelGraph& g = graph_of_model(name);
  BertShape s;
  const GraphTensor& in = g.inputs.at(0);
  OOMLAB_CHECK_T(ValueError, in.shape.size() == 2, "graph ", g.file, ": not a token model (its input is ",
                 shape_str(in.shape), ")");
  s.seq_len = s.max_positions = in.shape[1];
  std::map<std::string, Shape> shapes;
  for (const GraphParameter& p : g.parameters) shapes[p.name] = p.shape;
  bool vocab_found = false;
  s.layers = 0;
  std::set<std::string> ids = {in.name}, from_input = {in.name};   // the input ids and their views
  for (const GraphNode& n : g.nodes) {
    const bool view = n.op == "aten.view.default" || n.op == "aten._unsafe_view.default" ||
                      n.op == "aten.reshape.default" || n.op == "aten.unsqueeze.default";
    bool derived = false;
    for (const std::string& r : n.refs) derived = derived || from_input.count(r);
    if (derived) from_input.insert(n.name);
    if (view && !n.refs.empty() && ids.count(n.refs[0])) ids.insert(n.name);
    if (n.op == "aten.embedding.default" && n.refs.size() >= 2 && shapes.count(n.refs[0])) {
      const Shape& w = shapes[n.refs[0]];
      OOMLAB_CHECK_T(ShapeError, w.size() == 2, graph::node_where(g.file, n), "argument 0: the weight '", n.refs[0],
                     "' of shape ", shape_str(w), " is not a table [rows, dim]");
      if (ids.count(n.refs[1]) && !vocab_found) {
        s.vocab_size = w.at(0), s.hidden = w.at(1), vocab_found = true;
      } else if (!from_input.count(n.refs[1])) {   // ids not from the input: the position table
        s.max_positions = w.at(0);
      }
    }
    if (n.op == "aten.scaled_dot_product_attention.default" && n.outputs.at(0).shape.size() == 4) {
      s.heads = n.outputs[0].shape[1];
      ++s.layers;
    }
  }
  OOMLAB_CHECK_T(ValueError, vocab_found, "graph ", g.file, ": no embedding of the input ids");
  s.intermediate = 4 * s.hidden;
  return s;
}

bool graph_has_mask_input(const ModelGraph& g) {
  return g.inputs.size() == 2 && g.inputs[0].dtype == "int64" && g.inputs[1].dtype == "int64" &&
         g.inputs[0].shape.size() == 2 && g.inputs[1].shape == g.inputs[0].shape;
}

namespace {
bool op_supported(const std::string& op) {
  return graph::supported_ops().count(op) || graph::pointwise_ops().count(op);
}
}  // namespace

std::vector<std::string> graph_missing_ops(const ModelGraph& g) {
  std::vector<std::string> out;
  for (const GraphNode& n : g.nodes)
    if (!op_supported(n.op))
      out.push_back(str_cat(n.op, " (node '", n.name, "'",
                            n.module.empty() ? "" : str_cat(", module '", n.module, "'"),
                            n.module_type.empty() ? "" : str_cat(" (", n.module_type, ")"), ")"));
  return out;
}

nn::ModulePtr build_graph_model(const ModelGraph& g, const ModelConfig& cfg) {
  const std::vector<std::string> missing = graph_missing_ops(g);
  if (!missing.empty()) {
    std::string list, modules;   // the user's modules first: an nn.LSTM, not only its nodes
    std::set<std::string> seen;
    for (const std::string& m : missing) list += "\n  " + m;
    for (const GraphNode& n : g.nodes)
      if (!op_supported(n.op) && !n.module.empty() && seen.insert(n.module).second)
        modules +=
            str_cat(modules.empty() ? "" : ", ", n.module, n.module_type.empty() ? "" : " (" + n.module_type + ")");
    throw NotImplementedError(str_cat("graph ", g.file, ": ", missing.size(),
                                      " node(s) use ops oomlab does not have yet",
                                      modules.empty() ? "" : ", in module(s) " + modules, ":", list));
  }
  OOMLAB_CHECK_T(NotImplementedError, (g.inputs.size() == 1 || graph_has_mask_input(g)) && g.outputs.size() == 1,
                 "graph ", g.file, ": one input (or token ids and an attention mask of their shape, int64) and one "
                 "output are supported, got ", g.inputs.size(), " and ", g.outputs.size());
  return std::make_shared<graph::GraphModel>(g, cfg);
}

}  // namespace oomlab
