// run_spec.cpp — the typed run's own parsers and the model/technique rules (run_spec.h).
#include "experiments/plan/run_spec.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "engine/autograd/autocast.h"
#include "engine/core/error.h"
#include "models/model_table.h"

namespace oomlab {

ParallelMode parse_parallel_mode(const std::string& text) {
  if (text == "none") return ParallelMode::none;
  if (text == "dp") return ParallelMode::dp;
  if (text == "bdp") return ParallelMode::bdp;
  if (text == "ddp") return ParallelMode::ddp;
  throw ValueError(str_cat("'", text, "' is not a parallel mode (none, dp, bdp, ddp)"));
}

const char* parallel_mode_name(ParallelMode mode) {
  switch (mode) {
    case ParallelMode::none: return "none";
    case ParallelMode::dp: return "dp";
    case ParallelMode::bdp: return "bdp";
    case ParallelMode::ddp: return "ddp";
  }
  return "none";
}

LrGroups parse_lr_groups(const std::string& text) {
  LrGroups out;
  if (text.empty()) return out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    OOMLAB_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), "--lr-groups: '", item,
                 "' is not NAME_PREFIX=FACTOR (e.g. fc.=10)");
    const std::string prefix = item.substr(0, eq), num = item.substr(eq + 1);
    char* end = nullptr;
    const double f = std::strtod(num.c_str(), &end);
    OOMLAB_CHECK(end && *end == '\0' && std::isfinite(f) && f > 0, "--lr-groups: the factor of '", prefix,
                 "' must be a positive number (got '", num, "')");
    for (const auto& [p, unused] : out) OOMLAB_CHECK(p != prefix, "--lr-groups: '", prefix, "' is given twice");
    out.push_back({prefix, f});
  }
  OOMLAB_CHECK(!out.empty() && text.back() != ',', "--lr-groups: an empty group in '", text, "'");
  return out;
}

std::string lr_groups_text(const LrGroups& groups) {
  std::string s;
  for (const auto& [prefix, factor] : groups) {
    std::ostringstream f;
    f << factor;   // shortest round-trip for the factors people write (10, 0.1, 2.5)
    s += (s.empty() ? "" : ",") + prefix + "=" + f.str();
  }
  return s;
}

RunSpec RunSpec::for_model(const std::string& model) {
  RunSpec s;
  s.model = model;
  s.num_classes = 0;
  s.seq_len = 0;
  return s;
}

const char* RunSpec::amp_text() const { return amp_name(amp); }

void check_run_model_techniques(const RunSpec& spec) {
  const ModelEntry model = model_entry(spec.model);
  if (spec.channels_last)
    OOMLAB_CHECK(model.has_technique("channels-last"), "--channels-last: ", spec.model,
                 " is a token model, which has no 4-D [N, C, H, W] tensor to lay out; use it with an image model");
  if (!spec.cuda_graphs) return;
  OOMLAB_CHECK(spec.loss_scale.kind == LossScaleSpec::Kind::none, "--cuda-graphs needs a run without loss scaling ",
               "(--amp bf16, or --loss-scale none): the scaler checks the gradients on the host every step (this run: ",
               "--loss-scale ", spec.loss_scale.str(), ")");
  OOMLAB_CHECK(model.has_technique("cuda-graphs"), "--cuda-graphs: ", spec.model,
               " is an imported token model, whose integer constants are copied from the host every step, which a ",
               "captured step cannot hold; the zoo's bert-* models and the image models can be graphed");
}

// --zero: what the shards do not carry yet is refused by name (the optimizer holds one
// flat shard per bucket, not the model's parameters).
void check_zero_supported(const RunSpec& c) {
  OOMLAB_CHECK(c.offload != ZeroOffload::params || c.zero_stage == 3,
               "--offload params needs --zero 3 (only stage 3 shards the parameters)");
  OOMLAB_CHECK(c.offload == ZeroOffload::none || c.zero_stage > 0, "--offload ", zero_offload_name(c.offload),
               " needs --zero 1|2|3 (it offloads the rank's shards)");
  if (c.zero_stage == 0) return;
  const char* with = c.zero_stage == 3 && c.ema_decay > 0 ? "--ema (the parameters are sharded)" : nullptr;
  OOMLAB_CHECK(with == nullptr, "--zero ", c.zero_stage, " with ", with, " is not supported yet");
}

}  // namespace oomlab
