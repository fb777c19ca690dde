// cli_args.h — strict command-line flags for the oomlab subcommands, checked against the
// flag table (flag_table.h), which declares every flag once.
// Contract: an unknown flag, a missing value, a value of the wrong kind or outside its range,
// a missing required flag and a broken rule between flags (needs / excludes / applies only
// with) raise ValueError naming the flag, so a typo never silently runs the default.
// Accepts "--key value" and "--key=value"; bare "--flag" for switches. Every word is consumed
// or rejected: a positional the command does not take ("train vgg11": did you mean --model
// vgg11?), a single-dash word ("-json"), a flag given twice, and a flag whose value would be
// the next flag ("--json --quiet") are ValueErrors. A value may start with one dash (a
// negative number: "--lr -1" reaches the range check).
#pragma once
#include "engine/core/byte_sizes.h"   // parse_size, parse_int_list, format_bytes
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace oomlab {

class CliArgs {
 public:
  CliArgs(const std::vector<std::string>& argv, const std::string& command);
  bool has(const std::string& key) const;
  // The given value, else the table's default, else `def`. Asking for a flag the table does
  // not declare for this command is an InternalError (the code and the table drifted apart).
  std::string get(const std::string& key, const std::string& def = "") const;
  std::optional<std::string> get_opt(const std::string& key) const;   // the given value only
  int64_t get_int(const std::string& key, int64_t def = 0) const;
  double get_double(const std::string& key, double def = 0) const;
  bool flag(const std::string& key) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  const std::string& command() const { return command_; }

 private:
  void parse(const std::vector<std::string>& argv);
  void check_rules() const;
  void check_outputs() const;   // of check_rules: outputs apart from each other and the inputs
  std::optional<std::string> value_or_default(const std::string& key) const;
  std::string command_;
  std::map<std::string, std::string> values_;
  std::set<std::string> switches_on_;
  std::vector<std::string> positionals_;
};

// "--help" or "-h" anywhere among the arguments.
bool help_requested(const std::vector<std::string>& args);



}  // namespace oomlab
