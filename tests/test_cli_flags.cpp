// test_cli_flags.cpp — the flag table (experiments/cli/flag_table.h) is the one declaration
// of every flag: the README's synopses, docs/cli.md and the fuzz dictionary equal its rendering
// (run with OOMLAB_UPDATE_GOLDEN=1 to rewrite them from the table), the table is consistent (rules
// name flags of the same command, a rule's flag has a value to test), each kind of check and
// rule fires with its one wording, `--help` prints the table's text, and the RunSpec the
// CLI builds from no flags is RunSpec's own default.
// ctest tier: cli
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "experiments/cli/cli_args.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/flag_table.h"
#include "experiments/cli/run_spec_flags.h"
#include "experiments/train/train_command.h"

using namespace oomlab;

namespace {
std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

bool update_golden() {
  const char* v = std::getenv("OOMLAB_UPDATE_GOLDEN");
  return v && std::string(v) == "1";
}

const std::string kReadme = std::string(OOMLAB_SOURCE_DIR) + "/README.md";

// [begin, end) of the first ``` block after "### `oomlab COMMAND`", or npos.
std::pair<size_t, size_t> synopsis_block(const std::string& readme, const std::string& command) {
  const size_t head = readme.find("### `oomlab " + command + "`\n");
  if (head == std::string::npos) return {std::string::npos, std::string::npos};
  const size_t next = readme.find("\n#", head + 4);   // the section ends at the next heading
  const size_t open = readme.find("```\n", head);
  if (open == std::string::npos || open > next) return {std::string::npos, std::string::npos};
  const size_t close = readme.find("```\n", open + 4);
  if (close == std::string::npos) return {std::string::npos, std::string::npos};
  return {open + 4, close};
}

std::string error_of(const std::vector<std::string>& argv, const std::string& command) {
  try {
    CliArgs a(argv, command);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(FlagTable, ReadmeSynopsesAreTheTablesRendering) {
  std::string readme = read_text(kReadme);
  ASSERT_FALSE(readme.empty()) << kReadme;
  for (const CommandSpec& c : command_table()) {
    const auto [begin, end] = synopsis_block(readme, c.name);
    ASSERT_NE(begin, std::string::npos) << "README.md has no ### `oomlab " << c.name << "` section with a ``` block";
    const std::string want = synopsis(c.name);
    if (update_golden()) {
      readme.replace(begin, end - begin, want);
      continue;
    }
    EXPECT_EQ(readme.substr(begin, end - begin), want)
        << "README.md's synopsis of `oomlab " << c.name << "` differs from the flag table; "
        << "OOMLAB_UPDATE_GOLDEN=1 rewrites it";
  }
  if (update_golden()) write_text(kReadme, readme);
}

TEST(FlagTable, FuzzDictionaryIsTheTablesRendering) {
  const std::string path = std::string(OOMLAB_SOURCE_DIR) + "/tests/fuzz/fuzz_cli.dict";
  if (update_golden()) write_text(path, fuzz_dictionary());
  EXPECT_EQ(read_text(path), fuzz_dictionary())
      << path << " differs from the flag table; OOMLAB_UPDATE_GOLDEN=1 rewrites it";
}

TEST(FlagTable, CliReferenceIsTheTablesRendering) {
  const std::string path = std::string(OOMLAB_SOURCE_DIR) + "/docs/cli.md";
  if (update_golden()) write_text(path, cli_reference_markdown());
  EXPECT_EQ(read_text(path), cli_reference_markdown())
      << path << " differs from the flag table; OOMLAB_UPDATE_GOLDEN=1 rewrites it";
}

TEST(FlagTable, IsConsistent) {
  std::vector<std::string> commands;
  for (const CommandSpec& c : command_table()) commands.push_back(c.name);
  std::set<std::pair<std::string, std::string>> seen;
  for (const FlagSpec& f : flag_table()) {
    SCOPED_TRACE("--" + f.name);
    EXPECT_FALSE(f.help.empty());
    EXPECT_TRUE(f.kind == FlagKind::switch_ || !f.metavar.empty());
    EXPECT_TRUE(f.kind != FlagKind::choice || !f.choices.empty());
    for (const std::string& c : f.commands) {
      EXPECT_NE(std::find(commands.begin(), commands.end(), c), commands.end()) << c;
      EXPECT_TRUE(seen.insert({c, f.name}).second) << "declared twice for " << c;
      for (const std::string& n : f.requires_flags) EXPECT_NE(find_flag(c, n), nullptr) << c << " --" << n;
      for (const std::string& x : f.excludes) EXPECT_NE(find_flag(c, x), nullptr) << c << " --" << x;
      for (const FlagRule& w : f.applies_when) {
        const FlagSpec* other = find_flag(c, w.flag);
        ASSERT_NE(other, nullptr) << c << " --" << w.flag;
        EXPECT_TRUE(!other->default_value.empty() || other->required) << "--" << w.flag << " has no value to test";
        for (const std::string& v : w.values)
          EXPECT_TRUE(other->choices.empty() || std::count(other->choices.begin(), other->choices.end(), v)) << v;
      }
    }
  }
}

TEST(FlagTable, EachCheckFiresWithItsOneWording) {
  const struct {
    std::vector<std::string> argv;
    std::string command, message;
  } cases[] = {
      {{"--batch", "0"}, "train", "--batch must be >= 1 (got 0)"},
      {{"--workers", "65"}, "train", "--workers must be in 0..64 (got 65)"},
      {{"--lr", "0"}, "train", "--lr must be in (0, 1000000] (got 0)"},
      {{"--dropout", "1"}, "summary", "--dropout must be in [0, 1) (got 1)"},
      {{"--batch", "x"}, "train", "oomlab train: --batch expects an integer, got 'x'"},
      {{"--optimizer", "lamb"}, "train", "--optimizer must be sgd, adam or adamw (got 'lamb')"},
      {{"--device-memory", "lots"}, "train", "--device-memory: invalid size 'lots'"},
      {{"--max-bytes", "8GiB"}, "allreduce-bench", "--max-bytes must be at most 4.00 GiB (got 8GiB)"},
      {{"--input", "3,x"}, "summary", "invalid --input '3,x'"},
      {{"--init", ""}, "train", "--init needs a FILE.safetensors (got an empty value)"},
      {{}, "estimate", "oomlab estimate: --model is required (oomlab estimate --help)"},
      {{"--save-every", "2"}, "train", "--save-every needs --save"},
      {{"--epochs", "2", "--steps", "3"}, "train", "--epochs and --steps exclude each other: give one"},
      {{"--bucket-cap", "1M", "--parallel", "dp"},
       "train",
       "--bucket-cap applies to --parallel ddp or fsdp (this run has --parallel dp)"},
      {{"--seq-len", "64"},
       "train",
       "--seq-len applies to --dataset synthetic-seq (this run has --dataset fashion-mnist)"},
      {{"--algo", "ps", "--backend", "gloo"},
       "allreduce-bench",
       "--algo applies to --backend local (this run has --backend gloo)"},
      {{"--rank", "0"}, "allreduce-bench", "--rank needs --world-size"},
      {{"--nesterovv"}, "train", "oomlab train: unknown flag --nesterovv"},
      {{"resnet20"}, "train", "oomlab train: unexpected argument 'resnet20'"},
      {{"a", "b"}, "run", "oomlab run: unexpected argument 'b' (at most 1 positional argument)"},
      {{"--bogus"}, "models", "oomlab models: unknown flag --bogus (known: none: `oomlab models` takes no flags)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.command + " " + c.message);
    std::vector<std::string> argv = c.argv;
    if (c.command == "train") argv.insert(argv.begin(), {"--model", "mlp", "--dataset", "fashion-mnist"});
    const std::string e = error_of(argv, c.command);
    EXPECT_NE(e.find(c.message), std::string::npos) << e;
  }
  EXPECT_EQ(error_of({"--lr", "1e6", "--dataset", "synthetic", "--seq-len", "8", "--dataset=synthetic-seq"}, "train"),
            "oomlab train: flag --dataset is given twice");
  EXPECT_EQ(error_of({"--model", "bert-tiny", "--dataset", "synthetic-seq", "--seq-len", "8", "--half"}, "train"), "");
  // train names its model and data: no silent default (the third probe's minor finding)
  EXPECT_EQ(error_of({"--dataset", "synthetic"}, "train"), "oomlab train: --model is required (oomlab train --help)");
  EXPECT_EQ(error_of({"--model", "mlp"}, "train"), "oomlab train: --dataset is required (oomlab train --help)");
}

TEST(FlagTable, ReadingAnUndeclaredFlagIsAnInternalError) {
  CliArgs a({"--model", "mlp"}, "summary");
  EXPECT_THROW(a.get("optimizer"), InternalError);
  EXPECT_THROW(a.flag("half"), InternalError);
  EXPECT_EQ(a.get("amp"), "off");   // the table's default
  EXPECT_EQ(a.get_int("batch"), 1);
}

TEST(FlagTable, NoFlagsGiveRunSpecsOwnDefaults) {
  const RunSpec own;
  const RunSpec from_cli = train_spec(CliArgs({"--model", own.model, "--dataset", own.dataset}, "train"));
  EXPECT_EQ(from_cli.model, own.model);
  EXPECT_EQ(from_cli.dataset, own.dataset);
  EXPECT_EQ(from_cli.batch, own.batch);
  EXPECT_EQ(from_cli.epochs, own.epochs);
  EXPECT_EQ(from_cli.accumulate, own.accumulate);
  EXPECT_EQ(from_cli.seq_len, own.seq_len);
  EXPECT_EQ(from_cli.synthetic_size, own.synthetic_size);
  EXPECT_EQ(from_cli.eval_batches, own.eval_batches);
  EXPECT_EQ(from_cli.log_every, own.log_every);
  EXPECT_EQ(from_cli.workers, own.workers);
  EXPECT_EQ(from_cli.seed, own.seed);
  EXPECT_EQ(from_cli.devices, own.devices);
  EXPECT_EQ(from_cli.parallel, own.parallel);
  EXPECT_EQ(from_cli.on_oom, own.on_oom);
  EXPECT_EQ(from_cli.stop_on_nan, own.stop_on_nan);
  EXPECT_EQ(from_cli.amp, own.amp);
  EXPECT_EQ(from_cli.checkpoint.spec, own.checkpoint.spec);
  EXPECT_EQ(from_cli.device.str(), own.device.str());
}

// ArchOverrides::check_fits (the planner's own check, below the CLI) names each architecture
// flag's model use itself: the flag table's `models` column must say the same.
TEST(FlagTable, ArchFlagUsesAreTheTables) {
  for (const auto& [flag, use] : arch_flag_uses()) {
    const FlagSpec* f = find_flag("train", flag);
    ASSERT_NE(f, nullptr) << flag;
    EXPECT_EQ(f->models, use) << flag;
  }
  size_t arch_rows = 0;
  for (const FlagSpec* f : flags_of("train"))
    if (f->models.find("shape") != std::string::npos || f->name == "dropout" || f->name == "norm" ||
        f->name == "fuse-relu" || f->name == "attention")
      ++arch_rows;
  EXPECT_EQ(arch_rows, arch_flag_uses().size());
}

// A flag of a command that builds a RunSpec sets a field the table names (flag_table.h:
// RunSpecField), or is one of the few read by hand (run_spec_flags.cpp, commands.cpp): a new
// flag reaches the run through its row, its field and its consumer.
TEST(FlagTable, EveryRunFlagIsBoundOrReadByHand) {
  const std::set<std::string> by_hand = {
      "classes", "checkpoint", "loss-scale", "hidden", "layers", "heads", "max-positions", "dropout",
      "base-width", "depth", "norm", "fuse-relu", "attention", "json", "memory-snapshot", "chrome-trace", "by-module",
      "allow-tf32", "gpu", "cudnn-benchmark", "cudnn-deterministic", "cudnn-workspace-limit", "out", "dtype"};
  for (const char* command : {"train", "summary", "estimate", "step"})
    for (const FlagSpec* f : flags_of(command)) {
      const bool bound = !std::holds_alternative<std::monostate>(f->field);
      EXPECT_NE(bound, by_hand.count(f->name) > 0 && !(f->name == "classes" && std::string(command) != "train"))
          << command << " --" << f->name;
    }
}

TEST(FlagTable, HelpPrintsTheTable) {
  for (const CommandSpec& c : command_table()) {
    const std::string cmd = std::string(OOMLAB_BINARY_DIR) + "/oomlab " + c.name + " --help 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << cmd;
    EXPECT_EQ(out.rfind(command_help(c.name), 0), 0u) << cmd << "\n" << out;
  }
}
