// cli_args.cpp — flag parsing and size/list parsing.
#include "experiments/cli/cli_args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"

namespace oomlab {

CliArgs::CliArgs(const std::vector<std::string>& argv, const std::set<std::string>& valued,
                 const std::set<std::string>& switches, const std::string& command, size_t max_positionals)
    : command_(command) {
  auto known = [&] {
    std::string k;
    for (const auto& f : valued) k += " --" + f;
    for (const auto& f : switches) k += " --" + f;
    return k;
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) {
      if (a.size() > 1 && a[0] == '-')
        throw ValueError(str_cat("oomlab ", command_, ": unknown flag '", a, "' (flags start with two dashes, e.g. -",
                                 a, "; known:", known(), ")"));
      if (positionals_.size() >= max_positionals) {
        std::string hint = max_positionals == 0 ? " (this command takes no positional arguments; "
                                                  "every setting is a flag, e.g. --model " + a + ")"
                                                : str_cat(" (at most ", max_positionals, " positional argument",
                                                          max_positionals == 1 ? "" : "s", ")");
        throw ValueError(str_cat("oomlab ", command_, ": unexpected argument '", a, "'", hint));
      }
      positionals_.push_back(a);
      continue;
    }
    std::string key = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
      inline_value = true;
    }
    OOMLAB_CHECK(!values_.count(key) && !switches_on_.count(key), "oomlab ", command_, ": flag --", key,
                 " is given twice");
    if (switches.count(key)) {
      OOMLAB_CHECK(!inline_value, "oomlab ", command_, ": flag --", key, " takes no value");
      switches_on_.insert(key);
    } else if (valued.count(key)) {
      if (!inline_value) {
        OOMLAB_CHECK(i + 1 < argv.size(), "oomlab ", command_, ": flag --", key, " needs a value");
        OOMLAB_CHECK(argv[i + 1].rfind("--", 0) != 0 || argv[i + 1].size() == 2, "oomlab ", command_, ": flag --",
                     key, " needs a value (got the flag ", argv[i + 1], "; write --", key, "=", argv[i + 1],
                     " if that is the value)");
        value = argv[++i];
      }
      values_[key] = value;
    } else {
      throw ValueError(str_cat("oomlab ", command_, ": unknown flag --", key, " (known:", known(), ")"));
    }
  }
}

bool CliArgs::has(const std::string& key) const { return values_.count(key) || switches_on_.count(key); }
bool CliArgs::flag(const std::string& key) const { return switches_on_.count(key) > 0; }

std::string CliArgs::get(const std::string& key, const std::string& def) const {
  auto it = values_.find(key);
  return it == values_.end() ? def : it->second;
}

std::optional<std::string> CliArgs::get_opt(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

int64_t CliArgs::get_int(const std::string& key, int64_t def) const {
  auto v = get_opt(key);
  if (!v) return def;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v->c_str(), &end, 10);
  OOMLAB_CHECK(!v->empty() && *end == '\0', "oomlab ", command_, ": --", key, " expects an integer, got '", *v, "'");
  OOMLAB_CHECK(errno != ERANGE, "oomlab ", command_, ": --", key, " value '", *v,
               "' is out of range (must fit in a signed 64-bit integer)");
  return x;
}

double CliArgs::get_double(const std::string& key, double def) const {
  auto v = get_opt(key);
  if (!v) return def;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  OOMLAB_CHECK(!v->empty() && *end == '\0' && std::isfinite(x), "oomlab ", command_, ": --", key,
               " expects a number, got '", *v, "'");
  return x;
}

uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit(end);
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB" || unit == "K") mult = 1024.0;
  else if (unit == "MiB" || unit == "M") mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  OOMLAB_CHECK(end != s.c_str() && mult > 0 && std::isfinite(v) && v > 0,
               "invalid size '", s, "' (examples: 11GiB, 512MiB, 16GB, 1048576)");
  const double bytes = v * mult;
  OOMLAB_CHECK(bytes >= 1, "invalid size '", s, "': it is less than 1 byte (examples: 11GiB, 512MiB, 16GB, 1048576)");
  OOMLAB_CHECK(bytes < 9223372036854775808.0, "invalid size '", s, "': too large (at most 2^63 - 1 bytes, 8 EiB)");
  return uint64_t(bytes);
}

std::vector<int64_t> parse_int_list(const std::string& s, const std::string& what) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string tok = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(tok.c_str(), &end, 10);
    OOMLAB_CHECK(errno != ERANGE, "invalid ", what, " '", s, "': ", tok, " is out of range");
    OOMLAB_CHECK(!tok.empty() && *end == '\0' && v > 0, "invalid ", what, " '", s,
                 "': expected positive integers separated by commas, e.g. 3,224,224");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024.0 && u < 4) { b /= 1024.0; ++u; }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

}  // namespace oomlab
