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
//    --parallel ddp (this run has --parallel dp)"). Rules that need more than this (a value
//    a parser reads, the model's family) stay in the command's code, in the CLI layer only.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace oomlab {

enum class FlagKind { switch_, text, integer, number, size, choice, int_list };

struct FlagRule {
  std::string flag;                 // the other flag
  std::vector<std::string> values;  // applies_when: the values that make this flag apply
};

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
// libFuzzer dictionary lines: the commands, every flag, every choice.
std::string fuzz_dictionary();

}  // namespace oomlab
