// flag_table.h — every flag of every oomlab command, declared once (flag_table.cpp).
// Parsing (cli_args.h), value checks, the rules between flags, `--help`, the README's
// synopses (tests/test_cli_flags.cpp compares them) and the fuzz dictionary
// (tests/fuzz/fuzz_cli.dict, compared by the same test) all come from this table.
// Contracts:
//  * A flag is looked up by (command, name); a name may have one entry per command when its
//    meaning differs (--device of train vs allreduce-bench). Table order is synopsis order.
//  * Value checks by kind, with one wording each: an integer or number outside [lo, hi]
//    ("--batch must be >= 1 (got 0)"), a choice not in `choices` ("--optimizer must be one of
//    sgd, adam, adamw (got 'x')"), a size that is not one, an int list that is not positive.
//  * Rules between flags, checked after parsing, in table order, one wording each:
//    `requires` ("--save-every needs --save"), `excludes` ("--epochs and --steps exclude each
//    other: give one"), `applies_when` = {flag, values}: the flag has an effect only when
//    that flag's value (given or default) is one of `values` ("--bucket-cap applies to
//    --parallel ddp (this run has --parallel dp)"); a value with an index matches its kind
//    (--device cuda:1 is cuda). `models` = a use of the model table (model_arch.h:
//    model_uses): the flag, whatever its value, needs a model that has that use ("--dropout
//    applies to BERT models (bert-*) and the VGG classifier (vgg*); --model graph:g.json is
//    not one"), checked when the command knows its --model (check_model_flags). Rules that
//    need more than this (a value a parser reads) stay in the command's code, in the CLI
//    layer only. Two `output` flags naming the same file ("--json out.json --chrome-trace
//    out.json": one would silently replace the other), or an output naming the file an
//    `input` flag reads ("--init w.safetensors --json w.safetensors"), are an error before
//    any work.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "experiments/plan/run_spec.h"

namespace oomlab {

enum class FlagKind { switch_, text, integer, number, size, choice, int_list };

struct FlagRule {
  std::string flag;                 // the other flag
  std::vector<std::string> values;  // applies_when: the values that make this flag apply
};

// The RunSpec field a flag sets (run_spec_flags.cpp applies every bound flag of a command):
// a member of the field's type, converted from the checked value, or a setter for values
// that need a parser of their own (a device, a policy, a mode). A switch sets true; an
// optional member is set only when the flag has a value (given, or the table's default).
using RunSpecSetter = void (*)(RunSpec&, const std::string& value);
using RunSpecField = std::variant<std::monostate, bool RunSpec::*, int RunSpec::*, int64_t RunSpec::*,
                                  uint64_t RunSpec::*, double RunSpec::*, std::string RunSpec::*,
                                  std::optional<double> RunSpec::*, std::optional<std::string> RunSpec::*,
                                  RunSpecSetter>;

struct FlagSpec {
  std::string name;                       // without "--"
  std::vector<std::string> commands;      // the commands that accept it
  FlagKind kind = FlagKind::text;
  std::string metavar;                    // the synopsis' placeholder ("N", "SIZE"); choices: joined by '|'
  std::string help;                       // one line for --help
  std::string default_value;              // "" = none (the command decides); shown in --help
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;  // (lo, hi) instead of [lo, hi]
  std::vector<std::string> choices;       // kind choice
  bool required = false;
  std::vector<std::string> requires_flags;   // each must be given too
  std::vector<std::string> excludes;         // none may be given too
  std::vector<FlagRule> applies_when;        // each must hold (flag's value in values)
  std::string models;                        // a model use (model_arch.h) the flag needs; "" = any model
  bool output = false;                       // names a file the command writes: no two may name the same one
  bool input = false;   // names what it reads (--model's graph:FILE, --data-dir's npy files): no output may
  RunSpecField field;                        // what it sets in the command's RunSpec (monostate: read by hand)
};

const std::vector<FlagSpec>& flag_table();

// The commands of the oomlab executable: name, its positional argument ("" = none) and the
// one line `oomlab help` prints.
struct CommandSpec {
  std::string name, positional, summary;
};
const std::vector<CommandSpec>& command_table();
// "usage: oomlab <command> [flags]" and one line per command.
std::string main_usage();
// The entry of `name` for `command`, or nullptr.
const FlagSpec* find_flag(const std::string& command, const std::string& name);
std::vector<const FlagSpec*> flags_of(const std::string& command);

// "oomlab train --model M [--dataset ...] ...", wrapped at 100 columns with a two-space
// indent: what `--help` prints first and the README shows.
std::string synopsis(const std::string& command);
// The synopsis, then one line per flag (metavar, help, range, default) and the rules.
std::string command_help(const std::string& command);
// docs/cli.md: every command's synopsis and a table of its flags (tests/test_cli_flags.cpp
// keeps the file equal to it).
std::string cli_reference_markdown();
// libFuzzer dictionary lines: the commands, every flag, every choice.
std::string fuzz_dictionary();

}  // namespace oomlab
