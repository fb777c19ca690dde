// flag_help.cpp — what the flag table renders (flag_table.h): the command list, each
// command's synopsis and --help, and the fuzz dictionary. Deterministic text: the README's
// synopses and tests/fuzz/fuzz_cli.dict are compared with it by tests/test_cli_flags.cpp.
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "experiments/cli/flag_table.h"

namespace oomlab {
namespace {
constexpr size_t kWidth = 100;

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%lld", (long long)v);   // 1048576
  else std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string token(const FlagSpec& f) {
  std::string t = "--" + f.name + (f.kind == FlagKind::switch_ ? "" : " " + f.metavar);
  return f.required ? t : "[" + t + "]";
}

// "an integer >= 1", "a number in (0, 1e6]", ...: the range as --help states it.
std::string range_text(const FlagSpec& f) {
  const bool lo = !std::isinf(f.lo), hi = !std::isinf(f.hi);
  if (f.kind == FlagKind::size) return hi ? "at most " + num(f.hi) + " bytes" : "";
  if (f.kind != FlagKind::integer && f.kind != FlagKind::number) return "";
  if (lo && hi) {
    if (f.kind == FlagKind::integer) return num(f.lo) + ".." + num(f.hi);
    return std::string(f.lo_open ? "(" : "[") + num(f.lo) + ", " + num(f.hi) + (f.hi_open ? ")" : "]");
  }
  if (lo) return std::string(f.lo_open ? "> " : ">= ") + num(f.lo);
  if (hi) return std::string(f.hi_open ? "< " : "<= ") + num(f.hi);
  return "";
}

std::string rules_text(const FlagSpec& f) {
  std::string r;
  auto add = [&](const std::string& s) { r += (r.empty() ? "" : "; ") + s; };
  for (const auto& n : f.requires_flags) add("needs --" + n);
  for (const auto& x : f.excludes) add("not with --" + x);
  for (const FlagRule& w : f.applies_when) {
    std::string vals;
    for (const auto& v : w.values) vals += (vals.empty() ? "" : "|") + v;
    add("only with --" + w.flag + " " + vals);
  }
  return r;
}
}  // namespace

const std::vector<CommandSpec>& command_table() {
  static const std::vector<CommandSpec> commands = {
      {"train", "", "train a model (--model M --dataset fashion-mnist|synthetic|...|npy)"},
      {"summary", "", "per-layer outputs, params and saved-for-backward bytes of a model"},
      {"estimate", "", "the source's memory formula vs the exact meta-device peak"},
      {"plan", "", "what fits a card and trains fastest: precision, checkpointing, attention, micro-batch"},
      {"run", "FOLDER", "run an experiment folder: oomlab run experiments/NN_name [--profile quick|full]"},
      {"models", "", "list the model zoo"},
      {"amp-policy", "", "the autocast policy table (--amp fp16|bf16): which ops run in which dtype"},
      {"trick", "", "exact memory probes of practical tricks (graph-history, del-intermediates, ...)"},
      {"allreduce-bench", "", "nccl-tests-style all-reduce benchmark of the communicators"},
      {"step", "", "one SGD step on your npy batch and safetensors weights; writes loss, grads, new weights"}};
  return commands;
}

std::string main_usage() {
  std::string s = "usage: oomlab <command> [flags]\ncommands:\n";
  for (const CommandSpec& c : command_table()) {
    std::string name = c.name;
    name.resize(std::max<size_t>(name.size() + 1, 17), ' ');
    s += "  " + name + c.summary + "\n";
  }
  return s + "run `oomlab <command> --help` for the flags of a command, `oomlab --version` for the build\n";
}

std::string synopsis(const std::string& command) {
  std::string out = "oomlab " + command, line = out;
  for (const CommandSpec& c : command_table())
    if (c.name == command && !c.positional.empty()) {
      out += " " + c.positional;
      line = out;
    }
  for (const FlagSpec* f : flags_of(command)) {
    const std::string t = token(*f);
    if (line.size() + 1 + t.size() > kWidth) {
      out += "\n  " + t;
      line = "  " + t;
    } else {
      out += " " + t;
      line += " " + t;
    }
  }
  return out + "\n";
}

std::string command_help(const std::string& command) {
  std::ostringstream s;
  s << synopsis(command);
  for (const FlagSpec* f : flags_of(command)) {
    std::string head = "--" + f->name + (f->kind == FlagKind::switch_ ? "" : " " + f->metavar);
    if (head.size() < 28) head.resize(28, ' ');
    std::string notes = range_text(*f);
    const std::string rules = rules_text(*f);
    if (!rules.empty()) notes += (notes.empty() ? "" : "; ") + rules;
    if (!f->default_value.empty()) notes += (notes.empty() ? "" : "; ") + std::string("default ") + f->default_value;
    if (f->required) notes += (notes.empty() ? "" : "; ") + std::string("required");
    s << "  " << head << " " << f->help << (notes.empty() ? "" : " (" + notes + ")") << "\n";
  }
  return s.str();
}

namespace {
// A markdown table cell: '|' escaped.
std::string cell(std::string text) {
  for (size_t i = 0; (i = text.find('|', i)) != std::string::npos; i += 2) text.replace(i, 1, "\\|");
  return text;
}
}  // namespace

std::string cli_reference_markdown() {
  std::ostringstream s;
  s << "# oomlab command-line reference\n\n"
       "Generated from the flag table (`experiments/cli/flag_table.cpp`): `tests/test_cli_flags.cpp` keeps\n"
       "this file equal to the table's rendering, and `OOMLAB_UPDATE_GOLDEN=1 ctest -R FlagTable`\n"
       "rewrites it. Do not edit it by hand. What the commands do and the results they write:\n"
       "[REFERENCE.md](REFERENCE.md).\n\n| command | what it does |\n|---|---|\n";
  for (const CommandSpec& c : command_table())
    s << "| [`" << c.name << "`](#oomlab-" << c.name << ") | " << cell(c.summary) << " |\n";
  for (const CommandSpec& c : command_table()) {
    s << "\n## oomlab " << c.name << "\n\n```\n" << synopsis(c.name) << "```\n";
    const std::vector<const FlagSpec*> flags = flags_of(c.name);
    if (flags.empty()) continue;
    s << "\n| flag | value | meaning | range, rules, default |\n|---|---|---|---|\n";
    for (const FlagSpec* f : flags) {
      std::string notes = range_text(*f);
      const std::string rules = rules_text(*f);
      if (!rules.empty()) notes += (notes.empty() ? "" : "; ") + rules;
      if (!f->default_value.empty()) notes += (notes.empty() ? "" : "; ") + std::string("default ") + f->default_value;
      if (f->required) notes += (notes.empty() ? "" : "; ") + std::string("required");
      const std::string value = f->kind == FlagKind::switch_ ? "" : "`" + f->metavar + "`";
      s << "| `--" << f->name << "` | " << cell(value) << " | " << cell(f->help) << " | " << cell(notes) << " |\n";
    }
  }
  return s.str();
}

std::string fuzz_dictionary() {
  std::string s = "# libFuzzer dictionary for fuzz_cli: the commands, flags and choices of the flag table\n"
                  "# (experiments/cli/flag_table.cpp; tests/test_cli_flags.cpp keeps this file equal to it).\n";
  std::set<std::string> seen;
  auto add = [&](const std::string& w) {
    if (seen.insert(w).second) s += "\"" + w + "\"\n";
  };
  for (const CommandSpec& c : command_table()) add(c.name);
  for (const FlagSpec& f : flag_table()) add("--" + f.name);
  for (const FlagSpec& f : flag_table())
    for (const auto& c : f.choices) add(c);
  for (const char* v : {"0", "1", "-1", "1e308", "nan", "inf", "11GiB", "3,224,224", "cpu", "meta", "cuda:1", "--help"})
    add(v);
  return s;
}

}  // namespace oomlab
