// run_spec_flags.h — the edge: the RunSpec (experiments/plan/run_spec.h) a command builds
// from its parsed flags, each flag read and its value parsed and checked here, once.
// Ranges, choices and the rules between flags are the flag table's (flag_table.h); here
// the checks that need a parser (sizes, policies, precisions) or the model (a flag that
// does not apply to the chosen model is a ValueError naming it, from the model-use table).
// No file is read: data and outputs are checked by the commands.
#pragma once
#include "experiments/plan/run_spec.h"

namespace oomlab {
class CliArgs;

// The architecture flags (--hidden ... --norm) for `model`, each checked against the
// model-use table (ValueError naming a flag the model has no use for).
ArchOverrides arch_flags(const CliArgs& a, const std::string& model);

// `oomlab train`'s run (no file is read; check_train_config checks the rest).
RunSpec train_spec(const CliArgs& a);
// `oomlab summary` / `oomlab estimate`'s run: the model, its input and the techniques; batch
// and optimizer as the command's flags give them (summary: no optimizer).
RunSpec model_spec(const CliArgs& a);

// `oomlab plan`'s model: the model and its input (the searched techniques are the planner's).
RunSpec plan_spec(const CliArgs& a);

// `oomlab step`'s run: the model, its data (--data-dir), weights (--init), --lr and device;
// --out and --dtype are the step's own (measure_commands.cpp).
RunSpec step_spec(const CliArgs& a);

}  // namespace oomlab
