// allreduce_bench.h — `oomlab allreduce-bench`: nccl-tests' all_reduce_perf for oomlab's
// communicators. For each size from --min-bytes to --max-bytes (x --step-factor): --warmup
// untimed calls, then --iters timed calls out of place and again in place; time is the mean
// per call (averaged over ranks, as nccl-tests does), algbw = size / time, busbw = algbw x
// 2(n-1)/n, #wrong = elements that differ from the exact expected reduction (the check data
// of collective_check.h; N/A on meta, where no data moves). Printed in nccl-tests' columns
// and order; --json adds per-rank bytes sent / received per call and, in the same run,
// the host's memcpy bandwidth (one thread, the largest size) that busbw compares with.
// Backends: local (--ranks threads on cpu:0..N-1 or meta:0..N-1, --algo ring|ps); mpi, gloo,
// nccl (one rank per process: under a launcher, or started by rank_launcher.h).
#pragma once
#include <set>
#include <string>
#include <vector>

namespace oomlab {

int cmd_allreduce_bench(const std::vector<std::string>& args);
// Parses and checks the arguments as the command would, running nothing (ValueError / IoError).
void check_allreduce_bench_args(const std::vector<std::string>& args);

}  // namespace oomlab
