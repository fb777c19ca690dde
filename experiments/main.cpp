// main.cpp — the `oomlab` command line (the application's top: it sees the CLI commands and
// the runner): train | summary | estimate | run | models | amp-policy |
// trick | allreduce-bench | step | help.
// Contract: exit codes as commands.h (kExit*): an oomlab::Error prints "oomlab: error:
// <message>" and exits 2, out of memory (the device's or the host's std::bad_alloc) exits 3
// with the phase named, divergence 4 (cmd_train), anything unexpected "oomlab: internal
// error" and 70; output files are written atomically or not at all.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "experiments/cli/allreduce_bench.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/parity_step.h"
#include "experiments/cli/tricks.h"
#include "experiments/runner/run_command.h"
#include "experiments/cli/child_process.h"

namespace {
const char* kUsage =
    "usage: oomlab <command> [flags]\n"
    "commands:\n"
    "  train     train a model (--model M --dataset fashion-mnist|synthetic ...)\n"
    "  summary   per-layer outputs, params and saved-for-backward bytes of a model\n"
    "  estimate  the source's memory formula vs the exact meta-device peak\n"
    "  run       run an experiment folder: oomlab run experiments/NN_name [--profile quick|full]\n"
    "  models    list the model zoo\n"
    "  amp-policy  the autocast policy table (--amp fp16|bf16): which ops run in which dtype\n"
    "  trick     exact memory probes of practical tricks (graph-history, del-intermediates, ...)\n"
    "  allreduce-bench  nccl-tests-style all-reduce benchmark of the communicators (--backend local ...)\n"
    "  step      one SGD step on your npy batch and safetensors weights; writes loss, grads, new weights\n"
    "run `oomlab <command> --help` for the flags of a command\n";
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);   // progress lines appear promptly in logs
  if (argc < 2) { std::fputs(kUsage, stderr); return 2; }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "help" || cmd == "--help" || cmd == "-h") { std::fputs(kUsage, stdout); return 0; }
  try {
    if (cmd == "train") return oomlab::cmd_train(args);
    if (cmd == "summary") return oomlab::cmd_summary(args);
    if (cmd == "estimate") return oomlab::cmd_estimate(args);
    if (cmd == "run") return oomlab::cmd_run(args);
    if (cmd == "models") return oomlab::cmd_models(args);
    if (cmd == "amp-policy") return oomlab::cmd_amp_policy(args);
    if (cmd == "trick") return oomlab::cmd_trick(args);
    if (cmd == "allreduce-bench") return oomlab::cmd_allreduce_bench(args);
    if (cmd == "step") return oomlab::cmd_step(args);
    std::fprintf(stderr, "oomlab: error: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const oomlab::Interrupted& e) {
    std::fprintf(stderr, "oomlab: %s\n", e.what());
    return 128 + e.signal;
  } catch (const oomlab::OutOfMemoryError& e) {
    std::fprintf(stderr, "oomlab: error: %s\n", e.what());
    return oomlab::kExitOutOfMemory;
  } catch (const oomlab::InternalError& e) {
    std::fprintf(stderr, "oomlab: internal error: %s\n", e.what());
    return oomlab::kExitInternal;
  } catch (const oomlab::Error& e) {
    std::fprintf(stderr, "oomlab: error: %s\n", e.what());
    return oomlab::kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "oomlab: error: out of host memory (std::bad_alloc): the request needs more RAM than "
                         "this machine can give; try a smaller --batch or model\n");
    return oomlab::kExitOutOfMemory;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oomlab: internal error: %s\n", e.what());
    return oomlab::kExitInternal;
  }
}
