// model_graph.cpp — the model-graph file reader (model_graph.h): JSON nesting bounded before
// nlohmann parses (a hostile file cannot exhaust the stack), then every field checked, with
// errors that name the file and the node or entry.
#include "engine/io/model_graph.h"

#include <filesystem>
#include <set>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"

namespace oomlab {

namespace {
using json = nlohmann::json;

constexpr size_t kMaxBytes = size_t(256) << 20;
constexpr int kMaxDepth = 32;
constexpr size_t kMaxRank = 8;
constexpr int64_t kMaxNumel = int64_t(1) << 48;
constexpr size_t kMaxName = 512;

[[noreturn]] void fail(const std::string& file, const std::string& where, const std::string& what) {
  throw IoError(str_cat("graph ", file, ": ", where.empty() ? "" : where + ": ", what));
}

// The deepest [ / { nesting outside strings; scanning stops once it exceeds kMaxDepth.
int nesting_depth(std::string_view s) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxDepth) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

const json& field(const json& obj, const char* key, const std::string& file, const std::string& where) {
  if (!obj.is_object()) fail(file, where, "expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) fail(file, where, str_cat("missing \"", key, "\""));
  return *it;
}

std::string text_field(const json& obj, const char* key, const std::string& file, const std::string& where,
                       bool optional = false) {
  if (optional && (!obj.is_object() || !obj.contains(key))) return "";
  const json& v = field(obj, key, file, where);
  if (!v.is_string()) fail(file, where, str_cat("\"", key, "\" must be a string"));
  std::string s = v.get<std::string>();
  if (!optional && s.empty()) fail(file, where, str_cat("\"", key, "\" is empty"));
  if (s.size() > kMaxName) fail(file, where, str_cat("\"", key, "\" is longer than ", kMaxName, " characters"));
  return s;
}

bool known_dtype(const std::string& d) {
  static const std::set<std::string> k = {"float32", "float64", "float16", "bfloat16",
                                          "int64",   "int32",   "uint8",   "bool"};
  return k.count(d) > 0;
}

GraphTensor tensor_spec(const json& j, const std::string& file, const std::string& where, bool named) {
  GraphTensor t;
  if (named) t.name = text_field(j, "name", file, where);
  const json& shape = field(j, "shape", file, where);
  if (!shape.is_array() || shape.size() > kMaxRank)
    fail(file, where, str_cat("\"shape\" must be a list of at most ", kMaxRank, " sizes"));
  int64_t numel = 1;
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxNumel)
      fail(file, where, str_cat("shape ", shape.dump(), ": every size must be an integer in 0..2^48"));
    t.shape.push_back(d.get<int64_t>());
    if (t.shape.back() != 0 && numel > kMaxNumel / t.shape.back())
      fail(file, where, str_cat("shape ", shape.dump(), " has more than 2^48 elements"));
    numel *= t.shape.back();
  }
  t.dtype = text_field(j, "dtype", file, where);
  if (!known_dtype(t.dtype)) fail(file, where, str_cat("unknown dtype \"", t.dtype, "\""));
  return t;
}

struct Names {   // what a reference may name so far: name -> number of outputs
  std::map<std::string, size_t> outputs;
  void add(const std::string& name, size_t n, const std::string& file, const std::string& where) {
    if (!outputs.emplace(name, n).second) fail(file, where, str_cat("the name '", name, "' is defined twice"));
  }
};

// An integer buffer's values (position ids): a list of numel integers.
std::vector<int64_t> buffer_values(const json& v, const GraphParameter& p, const std::string& file,
                                   const std::string& where) {
  const bool integral = p.dtype == "int64" || p.dtype == "int32" || p.dtype == "uint8" || p.dtype == "bool";
  if (!p.buffer || !integral) fail(file, where, "\"values\" are only for integer buffers");
  if (!v.is_array() || int64_t(v.size()) != shape_numel(p.shape) || v.size() > kMaxBufferValues)
    fail(file, where, str_cat("\"values\" must be a list of ", shape_numel(p.shape), " integers (at most ",
                              kMaxBufferValues, ")"));
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const json& e : v) {
    if (!e.is_number_integer())
      fail(file, where, str_cat("\"values\": ", e.dump().substr(0, 40), " is not an integer"));
    out.push_back(e.get<int64_t>());
  }
  return out;
}

// Checks one ARG (recursively), collecting the names it references.
void check_arg(const json& a, int depth, const Names& names, GraphNode& node, const std::string& file,
               const std::string& where) {
  if (a.is_null() || a.is_boolean() || a.is_number() || a.is_string()) return;
  if (a.is_array()) {
    for (const json& e : a) check_arg(e, depth + 1, names, node, file, where);
    return;
  }
  if (a.is_object() && a.size() == 1 && a.contains("float")) {   // JSON has no inf or nan
    const json& f = a["float"];
    if (!f.is_string() || (f != "inf" && f != "-inf" && f != "nan"))
      fail(file, where,
           str_cat("{\"float\": ...} must hold \"inf\", \"-inf\" or \"nan\"; got ", f.dump().substr(0, 80)));
    return;
  }
  if (!a.is_object() || a.size() != 1 || !a.contains("ref") || !a["ref"].is_string())
    fail(file, where, str_cat("an argument must be null, a bool, a number, a string, a list, {\"float\": \"inf\"} or "
                              "{\"ref\": name}; got ", a.dump().substr(0, 80)));
  const std::string ref = a["ref"].get<std::string>();
  auto it = names.outputs.find(ref);
  if (it == names.outputs.end())
    fail(file, where, str_cat("'", ref, "' is not an input, a parameter or an earlier node"));
  const bool getitem_source = node.op == "getitem" && depth == 0 && node.refs.empty();
  if (it->second != 1 && !getitem_source)
    fail(file, where, str_cat("'", ref, "' has ", it->second, " outputs: only a getitem node may take it"));
  node.refs.push_back(ref);
}

GraphNode read_node(const json& j, size_t i, const Names& names, const std::string& file) {
  GraphNode n;
  n.name = text_field(j, "name", file, str_cat("node ", i));
  const std::string where = str_cat("node '", n.name, "'");
  n.op = text_field(j, "op", file, where);
  n.module = text_field(j, "module", file, where, true);
  n.module_type = text_field(j, "module_type", file, where, true);
  n.args = field(j, "args", file, where);
  if (!n.args.is_array()) fail(file, where, "\"args\" must be a list");
  for (size_t k = 0; k < n.args.size(); ++k) check_arg(n.args[k], 0, names, n, file, str_cat(where, " arg ", k));
  n.kwargs = j.value("kwargs", json::object());
  if (!n.kwargs.is_object()) fail(file, where, "\"kwargs\" must be an object");
  for (auto it = n.kwargs.begin(); it != n.kwargs.end(); ++it)
    check_arg(*it, 1, names, n, file, str_cat(where, " kwarg '", it.key(), "'"));
  const json& outs = field(j, "outputs", file, where);
  if (!outs.is_array() || outs.empty()) fail(file, where, "\"outputs\" must be a non-empty list");
  for (size_t k = 0; k < outs.size(); ++k)
    n.outputs.push_back(tensor_spec(outs[k], file, str_cat(where, " output ", k), false));
  if (n.op == "getitem") {
    const json& a = n.args;
    if (a.size() != 2 || !a[0].is_object() || !a[1].is_number_integer() || a[1].get<int64_t>() < 0 ||
        size_t(a[1].get<int64_t>()) >= names.outputs.at(n.refs.at(0)) || n.outputs.size() != 1)
      fail(file, where,
           "getitem takes [{\"ref\": a multi-output node}, an index below its output count] and has one output");
  }
  return n;
}
}  // namespace

int64_t ModelGraph::parameter_count() const {
  int64_t n = 0;
  for (const GraphParameter& p : parameters)
    if (!p.buffer) n += shape_numel(p.shape);
  return n;
}

int64_t ModelGraph::buffer_count() const {
  int64_t n = 0;
  for (const GraphParameter& p : parameters)
    if (p.buffer) n += shape_numel(p.shape);
  return n;
}

ModelGraph parse_model_graph(std::string_view text, const std::string& file) {
  if (text.size() > kMaxBytes) fail(file, "", str_cat("larger than ", kMaxBytes >> 20, " MiB"));
  if (nesting_depth(text) > kMaxDepth) fail(file, "", str_cat("JSON nested deeper than ", kMaxDepth, " levels"));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) fail(file, "", "not valid JSON (truncated or corrupt)");
  if (!j.is_object() || !j.contains("format") || j["format"] != "oomlab-graph")
    fail(file, "",
         "not an oomlab graph (\"format\": \"oomlab-graph\" missing); write one with scripts/export_model.py");
  const json& v = field(j, "version", file, "");
  if (!v.is_number_integer() || v.get<int64_t>() != kModelGraphVersion)
    fail(file, "",
         str_cat("version ", v.dump(), " is not supported (this oomlab reads version ", kModelGraphVersion, ")"));
  ModelGraph g;
  g.file = file;
  g.exporter = j.value("exporter", json::object());
  if (j.contains("modules")) {
    if (!j["modules"].is_object()) fail(file, "", "\"modules\" must be an object {path: type}");
    for (auto& [path, type] : j["modules"].items()) {
      if (!type.is_string() || path.empty() || path.size() > 1000 || type.get<std::string>().size() > 200)
        fail(file, "", str_cat("\"modules\": entry '", path.substr(0, 60), "' must map a path to a type name"));
      g.module_types[path] = type.get<std::string>();
    }
  }
  if (j.contains("dynamic_batch")) {
    if (!j["dynamic_batch"].is_boolean()) fail(file, "", "\"dynamic_batch\" must be true or false");
    g.dynamic_batch = j["dynamic_batch"].get<bool>();
  }
  Names names;
  const json& inputs = field(j, "inputs", file, "");
  if (!inputs.is_array() || inputs.empty()) fail(file, "", "\"inputs\" must be a non-empty list");
  for (size_t i = 0; i < inputs.size(); ++i) {
    g.inputs.push_back(tensor_spec(inputs[i], file, str_cat("input ", i), true));
    names.add(g.inputs.back().name, 1, file, str_cat("input ", i));
  }
  const json& params = field(j, "parameters", file, "");
  if (!params.is_array()) fail(file, "", "\"parameters\" must be a list");
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string where = str_cat("parameter ", i);
    GraphParameter p;
    static_cast<GraphTensor&>(p) = tensor_spec(params[i], file, where, true);
    const std::string kind = text_field(params[i], "kind", file, where);
    if (kind != "parameter" && kind != "buffer")
      fail(file, where, str_cat("\"kind\" must be parameter or buffer, got \"", kind, "\""));
    p.buffer = kind == "buffer";
    if (params[i].contains("values")) p.values = buffer_values(params[i]["values"], p, file, where);
    if (params[i].contains("persistent")) {
      if (!params[i]["persistent"].is_boolean() || !p.buffer)
        fail(file, where, "\"persistent\" must be true or false, on a buffer");
      p.persistent = params[i]["persistent"].get<bool>();
    }
    names.add(p.name, 1, file, where);
    g.parameters.push_back(std::move(p));
  }
  const json& nodes = field(j, "nodes", file, "");
  if (!nodes.is_array()) fail(file, "", "\"nodes\" must be a list");
  for (size_t i = 0; i < nodes.size(); ++i) {
    g.nodes.push_back(read_node(nodes[i], i, names, file));
    names.add(g.nodes.back().name, g.nodes.back().outputs.size(), file, str_cat("node '", g.nodes.back().name, "'"));
  }
  const json& outs = field(j, "outputs", file, "");
  if (!outs.is_array() || outs.empty()) fail(file, "", "\"outputs\" must be a non-empty list of {\"ref\": name}");
  GraphNode sink;
  for (size_t k = 0; k < outs.size(); ++k) check_arg(outs[k], 1, names, sink, file, str_cat("output ", k));
  if (sink.refs.size() != outs.size()) fail(file, "", "\"outputs\" must be a list of {\"ref\": name}");
  g.outputs = sink.refs;
  return g;
}

ModelGraph read_model_graph(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);   // before reading: /proc files, huge files
  if (!ec && size > kMaxBytes) fail(path, "", str_cat("larger than ", kMaxBytes >> 20, " MiB"));
  return parse_model_graph(read_file(path), path);
}

}  // namespace oomlab
