// allreduce_bench.h — `oomlab allreduce-bench`: nccl-tests' all_reduce_perf for oomlab's
// communicators. For each size from --min-bytes to --max-bytes (x --step-factor): --warmup
// untimed calls, then --iters timed calls out of place and again in place; time is the mean
// per call (averaged over ranks, as nccl-tests does), algbw = size / time, busbw = algbw x
// 2(n-1)/n (all_reduce) or (n-1)/n (--collective reduce_scatter | all_gather, whose size is
// the whole buffer: reduce_scatter's send, all_gather's recv, a multiple of n elements; in
// place: recv is send's slice of this rank, or send recv's), #wrong = elements that differ
// from the exact expected reduction or gathered value (the check data
// of collective_check.h; N/A on meta, where no data moves). Printed in nccl-tests' columns
// and order; --json adds per-rank bytes sent / received per call and, in the same run,
// the host's memcpy bandwidth (one thread, the largest size) that busbw compares with.
// Backends: local (--ranks threads on cpu:0..N-1 or meta:0..N-1, --algo ring|ps); mpi, gloo,
// nccl (one rank per process: under a launcher, or started by rank_launcher.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/parallel/rank_env.h"

namespace oomlab {

// The benchmark's options (the flags', whose ranges and choices the flag table checks).
struct BenchOptions {
  std::string backend = "local", algo = "ring", device = "cpu", dtype = "float", op = "sum";
  std::string collective = "all_reduce";   // | reduce_scatter | all_gather (nccl-tests' *_perf)
  int ranks = 2;
  int64_t min_bytes = 8, max_bytes = int64_t(64) << 20, step_factor = 2, iters = 20, warmup = 5;
  double timeout_s = 300;
};
// The rules that need this build's backends or two values at once (ValueError); a process
// backend's algo becomes "-".
void check_bench_options(BenchOptions& o);

// How this process takes part: the launcher flags (else torchrun / mpirun / Slurm
// variables), whether --ranks was given, the command's arguments (to start the ranks itself
// when no launcher did) and the --json file ("" = none).
struct BenchLaunch {
  RankFlags rank_flags;
  bool ranks_given = false;
  std::vector<std::string> args;
  std::string json_out;
};
// Runs the benchmark, prints nccl-tests' table (rank 0) and writes the results; the exit
// status: 0, or kExitWrongResults when any element was wrong (exit_codes.h).
int run_allreduce_bench(BenchOptions o, const BenchLaunch& launch);

}  // namespace oomlab
