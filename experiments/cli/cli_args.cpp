// cli_args.cpp — flag parsing against the flag table, and size/list parsing.
#include "experiments/cli/cli_args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/data/idx_reader.h"
#include "engine/data/npy_dataset.h"
#include "engine/io/file_kinds.h"
#include "experiments/cli/flag_table.h"

namespace oomlab {

namespace {
std::string known_flags(const std::string& command) {   // " --a --b", or " none: `oomlab X` takes no flags"
  std::string k;
  for (const FlagSpec* f : flags_of(command)) k += " --" + f->name;
  return k.empty() ? str_cat(" none: `oomlab ", command, "` takes no flags") : k;
}

size_t max_positionals(const std::string& command) {
  for (const CommandSpec& c : command_table())
    if (c.name == command) return c.positional.empty() ? 0 : 1;
  return 0;
}

std::string or_list(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i];
  return s;
}

std::string range_words(const FlagSpec& f) {
  const bool lo = !std::isinf(f.lo), hi = !std::isinf(f.hi);
  auto n = [](double v) {   // 1048576, not 1.04858e+06
    return v == std::floor(v) && std::fabs(v) < 1e15 ? std::to_string(int64_t(v)) : str_cat(v);
  };
  if (lo && hi) {
    if (f.kind == FlagKind::integer) return str_cat("in ", n(f.lo), "..", n(f.hi));
    return str_cat("in ", f.lo_open ? "(" : "[", n(f.lo), ", ", n(f.hi), f.hi_open ? ")" : "]");
  }
  if (lo) return str_cat(f.lo_open ? "> " : ">= ", n(f.lo));
  return str_cat(f.hi_open ? "< " : "<= ", n(f.hi));
}

bool in_range(const FlagSpec& f, double v) {
  return (f.lo_open ? v > f.lo : v >= f.lo) && (f.hi_open ? v < f.hi : v <= f.hi);
}

double parse_integer(const std::string& command, const std::string& key, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  OOMLAB_CHECK(!v.empty() && *end == '\0', "oomlab ", command, ": --", key, " expects an integer, got '", v, "'");
  OOMLAB_CHECK(errno != ERANGE, "oomlab ", command, ": --", key, " value '", v,
               "' is out of range (must fit in a signed 64-bit integer)");
  return double(x);
}

double parse_number(const std::string& command, const std::string& key, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  OOMLAB_CHECK(!v.empty() && *end == '\0' && std::isfinite(x), "oomlab ", command, ": --", key,
               " expects a number, got '", v, "'");
  return x;
}

// The value's kind and range, as the table declares them.
void check_value(const std::string& command, const FlagSpec& f, const std::string& v) {
  const std::string& key = f.name;
  switch (f.kind) {
    case FlagKind::integer:
    case FlagKind::number: {
      const double x = f.kind == FlagKind::integer ? parse_integer(command, key, v) : parse_number(command, key, v);
      OOMLAB_CHECK(in_range(f, x), "--", key, " must be ", range_words(f), " (got ", v, ")");
      break;
    }
    case FlagKind::size: {
      uint64_t bytes = 0;
      try {
        bytes = parse_size(v);
      } catch (const ValueError& e) {
        throw ValueError(str_cat("--", key, ": ", e.what()));
      }
      OOMLAB_CHECK(double(bytes) <= f.hi, "--", key, " must be at most ", format_bytes(f.hi), " (got ", v, ")");
      break;
    }
    case FlagKind::choice:
      OOMLAB_CHECK(std::find(f.choices.begin(), f.choices.end(), v) != f.choices.end(), "--", key, " must be ",
                   or_list(f.choices), " (got '", v, "')");
      break;
    case FlagKind::int_list: parse_int_list(v, "--" + key); break;
    case FlagKind::text: OOMLAB_CHECK(!v.empty(), "--", key, " needs a ", f.metavar, " (got an empty value)"); break;
    case FlagKind::switch_: break;
  }
}
}  // namespace

bool help_requested(const std::vector<std::string>& args) {
  return std::find(args.begin(), args.end(), "--help") != args.end() ||
         std::find(args.begin(), args.end(), "-h") != args.end();
}

CliArgs::CliArgs(const std::vector<std::string>& argv, const std::string& command) : command_(command) {
  parse(argv);
  for (const FlagSpec* f : flags_of(command_))
    OOMLAB_CHECK(!f->required || has(f->name), "oomlab ", command_, ": --", f->name, " is required (oomlab ", command_,
                 " --help)");
  check_rules();
}

void CliArgs::parse(const std::vector<std::string>& argv) {
  const size_t max_pos = max_positionals(command_);
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) {
      if (a.size() > 1 && a[0] == '-')
        throw ValueError(str_cat("oomlab ", command_, ": unknown flag '", a, "' (flags start with two dashes, e.g. -",
                                 a, "; known:", known_flags(command_), ")"));
      OOMLAB_CHECK(
          positionals_.size() < max_pos, "oomlab ", command_, ": unexpected argument '", a, "'",
          max_pos == 0
              ? " (this command takes no positional arguments; every setting is a flag, e.g. --model " + a + ")"
              : str_cat(" (at most ", max_pos, " positional argument)"));
      positionals_.push_back(a);
      continue;
    }
    std::string key = a.substr(2), value;
    const size_t eq = key.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    }
    const FlagSpec* f = find_flag(command_, key);
    OOMLAB_CHECK(f, "oomlab ", command_, ": unknown flag --", key, " (known:", known_flags(command_), ")");
    OOMLAB_CHECK(!has(key), "oomlab ", command_, ": flag --", key, " is given twice");
    if (f->kind == FlagKind::switch_) {
      OOMLAB_CHECK(!inline_value, "oomlab ", command_, ": flag --", key, " takes no value");
      switches_on_.insert(key);
      continue;
    }
    if (!inline_value) {
      OOMLAB_CHECK(i + 1 < argv.size(), "oomlab ", command_, ": flag --", key, " needs a value");
      OOMLAB_CHECK(argv[i + 1].rfind("--", 0) != 0 || argv[i + 1].size() == 2, "oomlab ", command_, ": flag --", key,
                   " needs a value (got the flag ", argv[i + 1], "; write --", key, "=", argv[i + 1],
                   " if that is the value)");
      value = argv[++i];
    }
    check_value(command_, *f, value);
    values_[key] = value;
  }
}

namespace {
// The files an input flag's value names: --model's graph:FILE (none for a zoo model), the
// npy and Fashion-MNIST files of a --data-dir folder, else the value itself.
std::vector<std::string> input_files(const FlagSpec& f, const std::string& value) {
  if (f.name == "data-dir") {
    std::vector<std::string> files = npy_dataset_files(value);
    for (std::string& idx : fashion_mnist_files(value)) files.push_back(std::move(idx));
    return files;
  }
  if (f.name != "model") return {value};
  if (value.rfind("graph:", 0) == 0) return {value.substr(6)};
  return {};
}
}  // namespace

// No two outputs name one file, and no output names a file an input flag reads.
void CliArgs::check_outputs() const {
  std::vector<const FlagSpec*> outputs, inputs;
  for (const FlagSpec* f : flags_of(command_)) {
    if (f->output && values_.count(f->name)) outputs.push_back(f);
    if (f->input && values_.count(f->name)) inputs.push_back(f);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& a = values_.at(outputs[i]->name);
    for (size_t j = i + 1; j < outputs.size(); ++j)
      OOMLAB_CHECK(!same_output_file(a, values_.at(outputs[j]->name)), "--", outputs[i]->name, " and --",
                   outputs[j]->name, " name the same file ", a,
                   ": each output needs its own (one would replace the other)");
    for (const FlagSpec* in : inputs)
      for (const std::string& file : input_files(*in, values_.at(in->name)))
        OOMLAB_CHECK(!same_output_file(a, file), "--", outputs[i]->name, " names ", a, ", a file --", in->name,
                     " reads: writing it would replace your input (give the output another name)");
  }
}

// The rules between flags, in table order, one wording each (flag_table.h).
void CliArgs::check_rules() const {
  check_outputs();
  for (const FlagSpec* f : flags_of(command_)) {
    if (!has(f->name)) continue;
    for (const std::string& n : f->requires_flags)
      OOMLAB_CHECK(has(n), "--", f->name, " needs --", n);
    for (const std::string& x : f->excludes)
      OOMLAB_CHECK(!has(x), "--", f->name, " and --", x, " exclude each other: give one");
    for (const FlagRule& w : f->applies_when) {
      const std::string v = value_or_default(w.flag).value_or("");
      const bool holds = std::any_of(w.values.begin(), w.values.end(), [&](const std::string& x) {
        return v == x || v.rfind(x + ":", 0) == 0;   // cuda:1 is cuda
      });
      OOMLAB_CHECK(holds, "--", f->name, " applies to --", w.flag, " ", or_list(w.values), " (this run has --", w.flag,
                   " ", v, ")");
    }
  }
}

std::optional<std::string> CliArgs::value_or_default(const std::string& key) const {
  const FlagSpec* f = find_flag(command_, key);
  OOMLAB_CHECK_T(InternalError, f, "oomlab ", command_, ": the code reads --", key,
                 ", which the flag table does not declare for this command");
  if (auto it = values_.find(key); it != values_.end()) return it->second;
  if (!f->default_value.empty()) return f->default_value;
  return std::nullopt;
}

bool CliArgs::has(const std::string& key) const { return values_.count(key) || switches_on_.count(key); }

bool CliArgs::flag(const std::string& key) const {
  value_or_default(key);   // declared?
  return switches_on_.count(key) > 0;
}

std::string CliArgs::get(const std::string& key, const std::string& def) const {
  return value_or_default(key).value_or(def);
}

std::optional<std::string> CliArgs::get_opt(const std::string& key) const {
  value_or_default(key);
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

int64_t CliArgs::get_int(const std::string& key, int64_t def) const {
  const auto v = value_or_default(key);
  return v ? int64_t(std::strtoll(v->c_str(), nullptr, 10)) : def;   // checked when parsed
}

double CliArgs::get_double(const std::string& key, double def) const {
  const auto v = value_or_default(key);
  return v ? std::strtod(v->c_str(), nullptr) : def;
}

}  // namespace oomlab
