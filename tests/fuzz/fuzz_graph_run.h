// fuzz_graph_run.h — what the graph fuzz targets (fuzz_model_graph, fuzz_graph_values) do
// with a graph file that may be hostile: read it as `--model graph:PATH`, then run it as
// `oomlab summary` and `oomlab estimate` do (experiments/plan/memory_report.h: the per-layer
// summary and two training steps on the meta device), forgetting the cached graph before and
// after (the targets rewrite one file). An oomlab::Error is the expected rejection; an
// InternalError (a bug, exit 70 in the CLI) escapes as a finding, as does anything else.
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/error.h"
#include "experiments/plan/memory_report.h"
#include "models/graph_model.h"

namespace oomlab_fuzz {

// how: bits 0-1 the batch (1-4), bit 2 adam instead of sgd, bits 3-4 the checkpoint policy
// (none, all, sqrt, selective:attention).
inline void run_graph_file(const std::string& path, uint8_t how) {
  static const char* const kPolicies[] = {"none", "all", "sqrt", "selective:attention"};
  oomlab::RunSpec spec = oomlab::RunSpec::for_model("graph:" + path);
  spec.checkpoint = oomlab::parse_checkpoint_policy(kPolicies[(how >> 3) & 3]);
  const int64_t batch = 1 + (how & 3);
  oomlab::forget_graph_models();
  try {
    (void)oomlab::summarize_model(spec, batch);
    (void)oomlab::estimate_memory(spec, batch, (how & 4) ? "adam" : "sgd");
  } catch (const oomlab::InternalError&) {
    throw;
  } catch (const oomlab::Error&) {
  }
  oomlab::forget_graph_models();
}

}  // namespace oomlab_fuzz
