// model_graph.h — oomlab's model-graph file (issue 32): a user's PyTorch model as
// scripts/export_model.py writes it from torch.export (decomposed to core ATen ops), read
// and checked here; building a module from it is the importer's job (models/graph_model.h).
// Format "oomlab-graph", version 1: one JSON object
//   {"format": "oomlab-graph", "version": 1,
//    "exporter": {...}                     provenance, free-form (torch version, model spec)
//    "dynamic_batch": true | false         optional (false): the batch was exported symbolic, so
//                                          every size that follows it is a size node
//                                          (aten.sym_size.int of the input, _operator.mul ...)
//                                          referenced from shape lists, and literal sizes never do
//    "modules": {path: type}               optional: every module's type by path, containers
//                                          (Sequential, ModuleList) included
//    "inputs": [TENSOR...]                 the example input(s); dim 0 is the batch
//    "parameters": [TENSOR + "kind": "parameter" | "buffer"]   state_dict names and shapes; an
//                                          integer buffer may add "values": [numel integers]
//                                          (at most 2^20: position ids, which are not weights);
//                                          a buffer may add "persistent": false (not in the
//                                          state_dict, as PyTorch's non-persistent buffers)
//    "nodes": [{"name": N, "op": "aten.convolution.default", "args": [ARG...], "kwargs": {K: ARG},
//               "outputs": [TENSOR-SPEC...], "module": "layer1.0.conv1", "module_type": "Conv2d"}]
//    "outputs": [{"ref": N}...]}
//   TENSOR = {"name": N, "shape": [d...], "dtype": D}; TENSOR-SPEC = {"shape", "dtype"}.
//   ARG = null | bool | number | string | [ARG...] | {"float": "inf" | "-inf" | "nan"} |
//   {"ref": N}: a value (the non-finite floats JSON cannot spell, such as a mask's fill value,
//   as objects) or a reference to an input, a parameter or an earlier node. A node with several outputs is referenced
//   only by "getitem" nodes, whose args are [{"ref": N}, index].
// Contracts: every malformed, truncated or hostile file is an IoError naming the file and,
// where there is one, the node or entry ("graph f.json: node 'conv2' arg 1: ..."): wrong
// format or version, JSON nested deeper than 32 or larger than 256 MiB, duplicate or empty
// names, a reference to a name not defined before, a shape with a negative or huge extent
// (rank <= 8, numel <= 2^48), an unknown dtype, a multi-output node used as one tensor.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/tensor.h"
#include <nlohmann/json.hpp>

namespace oomlab {

struct GraphTensor {
  std::string name;   // empty for a node's output spec
  Shape shape;
  std::string dtype;  // "float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool"
};

struct GraphParameter : GraphTensor {
  bool buffer = false;           // a buffer (running stats, counters): in state_dict, not trained
  std::vector<int64_t> values;   // an integer buffer's values when the file has them (position ids)
  bool persistent = true;        // false: a buffer outside the state_dict (register_buffer(persistent=False))
};
inline constexpr size_t kMaxBufferValues = size_t(1) << 20;

struct GraphNode {
  std::string name, op, module, module_type;
  nlohmann::json args;                // validated ARGs (see above)
  nlohmann::json kwargs;              // {name: ARG} (optional in the file; {} when absent)
  std::vector<GraphTensor> outputs;   // one per output, in order
  std::vector<std::string> refs;      // the names args reference, in order of appearance
};

struct ModelGraph {
  std::string file;
  int version = 1;
  nlohmann::json exporter;
  bool dynamic_batch = false;
  std::map<std::string, std::string> module_types;   // "modules" (may be empty)
  std::vector<GraphTensor> inputs;
  std::vector<GraphParameter> parameters;
  std::vector<GraphNode> nodes;
  std::vector<std::string> outputs;
  int64_t parameter_count() const;   // elements of the parameters (buffers excluded)
  int64_t buffer_count() const;
};

constexpr int kModelGraphVersion = 1;

// Parses and checks `text` (the file's contents; `file` names it in errors).
ModelGraph parse_model_graph(std::string_view text, const std::string& file);
// Reads `path` (IoError when missing or unreadable) and parses it.
ModelGraph read_model_graph(const std::string& path);

}  // namespace oomlab
