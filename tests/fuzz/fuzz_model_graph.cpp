// fuzz_model_graph.cpp — libFuzzer target for the model-graph reader (engine/io/model_graph.h)
// and the importer behind it (models/graph_model.h).
// Input: the bytes of a graph file, given to parse_model_graph(bytes, name); a graph that
// parses is then written to a temp file and run as `oomlab summary` and `oomlab estimate`
// run it (fuzz_graph_run.h: the meta device; the last byte picks batch, optimizer and
// checkpoint policy).
// Expected rejections: oomlab::Error (IoError naming the file and the node or entry; the
// importer's errors naming file, node and argument).
// Findings: any other exception, a sanitizer report, or a parsed graph that disagrees with
// its own contract: a node referencing a name not defined before it, a shape of rank > 8
// or with a negative size, a getitem whose index is out of its source's outputs; an
// InternalError while building or running the model.
// Seeds: tests/fuzz/corpus/fuzz_model_graph/ (a small CNN in the exporter's layout, a BERT
// attention block, a toy GPT-2 with a symbolic batch: size nodes, module types, a tied head).
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "engine/core/error.h"
#include "engine/io/model_graph.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_graph_run.h"

using oomlab_fuzz::fuzz_require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const oomlab::ModelGraph g =
        oomlab::parse_model_graph(std::string_view(reinterpret_cast<const char*>(data), size), "g.json");
    std::set<std::string> defined;
    auto check_shape = [](const oomlab::Shape& s) {
      fuzz_require(s.size() <= 8, "rank > 8");
      for (int64_t d : s) fuzz_require(d >= 0, "negative size");
    };
    for (const auto& t : g.inputs) { check_shape(t.shape); defined.insert(t.name); }
    for (const auto& p : g.parameters) { check_shape(p.shape); defined.insert(p.name); }
    for (const auto& n : g.nodes) {
      for (const auto& r : n.refs) fuzz_require(defined.count(r) == 1, "reference to a name not defined before");
      for (const auto& o : n.outputs) check_shape(o.shape);
      defined.insert(n.name);
    }
    for (const auto& r : g.outputs) fuzz_require(defined.count(r) == 1, "output not defined");
    (void)g.parameter_count();
  } catch (const oomlab::Error&) {
    return 0;
  }
  static oomlab_fuzz::TempFile file("fuzz_model_graph.json");
  oomlab_fuzz::run_graph_file(file.write(std::string_view(reinterpret_cast<const char*>(data), size)), data[size - 1]);
  return 0;
}
