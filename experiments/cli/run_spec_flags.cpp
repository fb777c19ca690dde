// run_spec_flags.cpp — flags into a RunSpec, each parsed once (run_spec_flags.h): the
// flags the table binds to a field, then those read by hand.
#include "experiments/cli/run_spec_flags.h"

#include "engine/autograd/autocast.h"
#include "engine/core/error.h"

#include <cstdlib>
#include <variant>
#include "experiments/cli/cli_args.h"
#include "experiments/cli/flag_table.h"
#include "models/graph_model.h"
#include "models/model_table.h"
#include "models/model_zoo.h"

namespace oomlab {
namespace {
template <class... F> struct Overloaded : F... { using F::operator()...; };
template <class... F> Overloaded(F...) -> Overloaded<F...>;

// Every flag given to this command whose table row names a model use, checked against `model`.
void check_model_flags(const CliArgs& a, const std::string& model) {
  for (const FlagSpec* f : flags_of(a.command()))
    if (!f->models.empty() && a.has(f->name)) check_model_use(f->name, f->models, model);
}

}  // namespace

ArchOverrides arch_flags(const CliArgs& a, const std::string& model) {
  ArchOverrides o;
  o.hidden = a.get_int("hidden", 0);
  o.layers = a.get_int("layers", 0);
  o.heads = a.get_int("heads", 0);
  o.max_positions = a.get_int("max-positions", 0);
  o.base_width = a.get_int("base-width", 0);
  o.depth = a.get_int("depth", 0);
  if (a.has("dropout")) o.dropout = a.get_double("dropout");
  o.norm = a.get("norm");
  o.attention = a.get("attention");
  o.fuse_relu = a.get("fuse-relu");
  check_model_flags(a, model);
  return o;
}

namespace {

// --checkpoint: its text parsed here and nowhere else; a budget's SIZE is checked too.
CheckpointPolicy checkpoint_flag(const CliArgs& a) {
  CheckpointPolicy p = with_flag_name("checkpoint", [&] { return parse_checkpoint_policy(a.get("checkpoint")); });
  if (p.kind == CheckpointPolicy::Kind::budget) {
    try {
      p.budget_bytes = parse_size(p.budget);
      OOMLAB_CHECK(p.budget_bytes > 0, "must be > 0");
    } catch (const ValueError& e) {
      throw ValueError(str_cat("--checkpoint ", p.spec, ": bad size '", p.budget, "': ", e.what()));
    }
  }
  return p;
}

// --loss-scale, after the bound --amp / --half / --master-weights. The table rules out
// --master-weights without --half and --half with --amp fp16|bf16; here: --loss-scale
// without 16-bit training has no effect, and --half scales the loss only with
// --master-weights (auto: dynamic there, none for plain --half).
void loss_scale_flag(const CliArgs& a, RunSpec& s) {
  OOMLAB_CHECK(!a.has("loss-scale") || s.amp || s.half, "--loss-scale has no effect without --amp fp16|bf16 or --half");
  const std::string given = a.has("loss-scale") ? a.get("loss-scale") : "auto";
  OOMLAB_CHECK(!s.half || s.master_weights || given == "auto" || given == "none", "--loss-scale ", given,
               " with --half needs --master-weights: unscaling float16 gradients in float16 flushes the small ones "
               "to zero again (PyTorch's GradScaler refuses them too)");
  const bool fp16 = s.amp == DType::f16 || s.master_weights;
  s.loss_scale = with_flag_name("loss-scale", [&] { return parse_loss_scale(given, fp16); });
}

// Every flag of this command the table binds to a RunSpec field (flag_table.h), from its
// checked value (given, or the table's default); a switch only when given.
void apply_bound_flags(const CliArgs& a, RunSpec& s) {
  for (const FlagSpec* f : flags_of(a.command())) {
    if (std::holds_alternative<std::monostate>(f->field)) continue;
    if (f->kind == FlagKind::switch_ && !a.flag(f->name)) continue;
    if (f->kind != FlagKind::switch_ && !a.has(f->name) && f->default_value.empty()) continue;
    const std::string v = f->kind == FlagKind::switch_ ? "" : a.get(f->name);
    const bool size = f->kind == FlagKind::size;
    auto whole = [&] { return size ? int64_t(parse_size(v)) : int64_t(std::strtoll(v.c_str(), nullptr, 10)); };
    std::visit(Overloaded{[](std::monostate) {},
                          [&](bool RunSpec::*m) { s.*m = true; },
                          [&](int RunSpec::*m) { s.*m = int(whole()); },
                          [&](int64_t RunSpec::*m) { s.*m = whole(); },
                          [&](uint64_t RunSpec::*m) { s.*m = uint64_t(whole()); },
                          [&](double RunSpec::*m) { s.*m = std::strtod(v.c_str(), nullptr); },
                          [&](std::string RunSpec::*m) { s.*m = v; },
                          [&](std::optional<double> RunSpec::*m) { s.*m = std::strtod(v.c_str(), nullptr); },
                          [&](std::optional<std::string> RunSpec::*m) { s.*m = v; },
                          [&](RunSpecSetter set) { set(s, v); }},
               f->field);
  }
}

// The flags read by hand: those that depend on others (the architecture on the model, the
// loss scale on the precision, an imported classifier's classes) or need a check of their own.
void model_and_technique_flags(const CliArgs& a, RunSpec& s) {
  s.arch = arch_flags(a, s.model);
  s.checkpoint = checkpoint_flag(a);
  loss_scale_flag(a, s);
  check_run_model_techniques(s);
}

// --classes for train: synthetic-seq is binary; npy infers max label + 1 unless --classes
// says more; an imported classifier's data have the classes of its output (--classes does
// not apply to it: the model table's "classes"); else 10.
void train_classes_flag(const CliArgs& a, RunSpec& c) {
  const bool seq = c.dataset == "synthetic-seq", npy = c.dataset == "npy";
  const int64_t graph_classes = is_graph_model(c.model) ? graph_model_config(c.model).num_classes : 0;
  c.num_classes = a.get_int("classes", c.dataset == "synthetic-seg" ? 4 : seq ? 2 : graph_classes > 0 ? graph_classes
                                                                                 : npy ? 0 : c.num_classes);
  OOMLAB_CHECK(!seq || graph_classes == 0 || graph_classes >= 2,
               "--dataset synthetic-seq is a 2-class task and --model ", c.model, " has ", graph_classes,
               " output class(es)");
  OOMLAB_CHECK(!npy || a.has("data-dir"), "--dataset npy needs --data-dir DIR holding train_inputs.npy and "
               "train_labels.npy (README: \"Your own data\")");
}
}  // namespace

RunSpec train_spec(const CliArgs& a) {
  RunSpec c;
  apply_bound_flags(a, c);
  model_and_technique_flags(a, c);
  train_classes_flag(a, c);
  return c;
}

RunSpec plan_spec(const CliArgs& a) {
  RunSpec s = RunSpec::for_model(a.get("model"));
  apply_bound_flags(a, s);
  model_entry(s.model);   // an unknown model (or an unreadable graph file) is named first
  return s;
}

RunSpec step_spec(const CliArgs& a) {
  RunSpec s = RunSpec::for_model(a.get("model"));
  apply_bound_flags(a, s);
  s.arch = arch_flags(a, s.model);
  return s;
}

RunSpec model_spec(const CliArgs& a) {
  RunSpec s = RunSpec::for_model(a.get("model"));
  apply_bound_flags(a, s);
  model_and_technique_flags(a, s);
  return s;
}

}  // namespace oomlab
