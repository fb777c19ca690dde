// cli_args.h — strict command-line flags for the oomlab subcommands.
// Contract: every flag a command accepts is declared up front; an unknown flag, a
// missing value or a malformed number raises ValueError naming the flag, so a typo never
// silently runs the default. Accepts "--key value" and "--key=value"; bare "--flag" for
// booleans. Every word is consumed or rejected: a positional beyond `max_positionals`
// ("train vgg11": did you mean --model vgg11?), a single-dash word ("-json"), a flag given
// twice, and a flag whose value would be the next flag ("--json --quiet") are ValueErrors.
// A value may start with one dash (a negative number: "--lr -1" reaches the range check).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace oomlab {

class CliArgs {
 public:
  // `valued`: flags that take a value; `switches`: boolean flags; at most `max_positionals`
  // words that are not flags are kept (positionals()).
  CliArgs(const std::vector<std::string>& argv, const std::set<std::string>& valued,
          const std::set<std::string>& switches, const std::string& command, size_t max_positionals = 0);
  bool has(const std::string& key) const;
  std::string get(const std::string& key, const std::string& def) const;
  std::optional<std::string> get_opt(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_double(const std::string& key, double def) const;
  bool flag(const std::string& key) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::set<std::string> switches_on_;
  std::vector<std::string> positionals_;
};

// "11GiB", "512MiB", "1.5GB", "4096" (bytes) -> bytes; ValueError on bad input, on a
// result below 1 byte ("0.5") and on one of 2^63 bytes or more. get_int: ValueError on
// a value outside int64 (naming the flag).
uint64_t parse_size(const std::string& s);
// "3,224,224" -> {3,224,224}; ValueError on bad input.
std::vector<int64_t> parse_int_list(const std::string& s, const std::string& what);
std::string format_bytes(double bytes);   // "1.23 GiB"

}  // namespace oomlab
