// measure_commands.cpp — the command-line faces of the measurements in experiments/measure:
// `oomlab trick`, `oomlab step` and `oomlab allreduce-bench` (flags read here, once; the
// work is the measurement's).
#include <cstdio>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/file_kinds.h"
#include "engine/train/results.h"
#include "experiments/cli/cli_args.h"
#include "experiments/cli/cli_output.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/flag_table.h"
#include "experiments/cli/run_spec_flags.h"
#include "experiments/measure/allreduce_bench.h"
#include "experiments/measure/parity_step.h"
#include "experiments/measure/tricks.h"

namespace oomlab {
namespace {
BenchOptions bench_options(const CliArgs& a) {
  BenchOptions o;
  o.backend = a.get("backend");
  o.algo = a.get("algo");
  o.device = a.get("device");
  o.dtype = a.get("dtype");
  o.op = a.get("op");
  o.collective = a.get("collective");
  o.ranks = int(a.get_int("ranks"));
  o.min_bytes = int64_t(parse_size(a.get("min-bytes")));
  o.max_bytes = int64_t(parse_size(a.get("max-bytes")));
  o.step_factor = a.get_int("step-factor");
  o.iters = a.get_int("iters");
  o.warmup = a.get_int("warmup");
  o.timeout_s = a.get_double("timeout");
  check_bench_options(o);
  return o;
}
}  // namespace

void check_allreduce_bench_args(const std::vector<std::string>& args) {
  CliArgs a(args, "allreduce-bench");
  bench_options(a);
  if (a.has("json")) check_output_file(a.get("json"), "--json");
}

int cmd_allreduce_bench(const std::vector<std::string>& args) {
  if (help_requested(args)) {
    std::printf("%s  nccl-tests' all_reduce_perf columns; sizes take K/M/G (binary) suffixes; without --rank, "
                "torchrun / mpirun / Slurm variables give the rank\n", command_help("allreduce-bench").c_str());
    return 0;
  }
  CliArgs a(args, "allreduce-bench");
  BenchLaunch launch;
  if (a.has("rank")) launch.rank_flags.rank = int(a.get_int("rank"));
  if (a.has("world-size")) launch.rank_flags.world_size = int(a.get_int("world-size"));
  if (a.has("master-addr")) launch.rank_flags.master_addr = a.get("master-addr");
  if (a.has("master-port")) launch.rank_flags.master_port = int(a.get_int("master-port"));
  launch.ranks_given = a.has("ranks");
  launch.args = args;
  launch.json_out = a.get("json");
  return run_allreduce_bench(bench_options(a), launch);
}

int cmd_trick(const std::vector<std::string>& args) {
  if (help_requested(args)) {
    std::printf("%s  exact meta-device memory probes of the source's practical tricks (T9)\n",
                command_help("trick").c_str());
    return 0;
  }
  CliArgs a(args, "trick");
  const std::string out = a.get("json");
  if (!out.empty()) check_output_file(out, "--json");
  const nlohmann::json m = measure_trick(a.get("name"), a.get_int("batch"));
  std::printf("%s\n", m.dump(2).c_str());
  if (!out.empty())
    write_json_atomic(out, make_results("trick", meta_device(), {{"trick", m["trick"]}}, m,
                                        "the trick's last probe (metrics has each probe's figures)"));
  return 0;
}

int cmd_step(const std::vector<std::string>& args) {
  if (help_requested(args)) {
    std::printf("%sOne SGD step on the whole train split of DIR (npy files, see `oomlab train --dataset npy`);\n"
                "writes loss, logits, grad/<param> and after/<state_dict key> to FILE.safetensors.\n",
                command_help("step").c_str());
    return 0;
  }
  CliArgs a(args, "step");
  const RunSpec spec = step_spec(a);
  const DType dtype = a.get("dtype") == "float64" ? DType::f64 : DType::f32;
  const ParityStepDone done = run_parity_step(spec, a.get("out"), dtype);
  cli_printf("step: %s %s batch %lld: loss %.10g -> %s\n", spec.model.c_str(), a.get("dtype").c_str(),
             static_cast<long long>(done.batch), done.loss, a.get("out").c_str());
  return 0;
}

}  // namespace oomlab
