// fuzz_rank_env.cpp — libFuzzer target for rank discovery (engine/parallel/rank_env.h): the
// launcher environment the third probe varied by hand (torchrun, mpirun, PMI and Slurm
// variables, MASTER_ADDR / MASTER_PORT, the rank flags).
// Input: lines "KEY=VALUE" (the environment); a line "--rank=R", "--world-size=N",
// "--local-rank=L", "--master-port=P" or "--master-addr=A" sets that flag.
// Expected rejections: oomlab::Error (ValueError naming the variable). Findings: any other
// exception, a sanitizer report, or an accepted result that contradicts itself: a rank or
// local rank outside 0..world_size-1, a local world size above the world's, a port outside
// 1..65535, an empty master address.
// Seeds: tests/fuzz/corpus/fuzz_rank_env/ (each launcher's variables); dictionary:
// tests/fuzz/fuzz_rank_env.dict.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "engine/core/error.h"
#include "engine/parallel/rank_env.h"
#include "tests/fuzz/fuzz_common.h"

using oomlab_fuzz::fuzz_require;

namespace {
// A flag line's integer (std::stoi's exceptions are the fuzzer's input errors, not findings).
bool to_int(const std::string& s, int* out) {
  try {
    size_t used = 0;
    *out = std::stoi(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

void parse_line(const std::string& line, oomlab::EnvMap& env, oomlab::RankFlags& flags) {
  const size_t eq = line.find('=');
  if (eq == std::string::npos) return;
  const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
  int n = 0;
  if (k == "--master-addr") flags.master_addr = v;
  else if (k.rfind("--", 0) != 0) env[k] = v;
  else if (!to_int(v, &n)) return;
  else if (k == "--rank") flags.rank = n;
  else if (k == "--world-size") flags.world_size = n;
  else if (k == "--local-rank") flags.local_rank = n;
  else if (k == "--master-port") flags.master_port = n;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  oomlab::EnvMap env;
  oomlab::RankFlags flags;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string line; std::getline(in, line);) parse_line(line, env, flags);
  try {
    const oomlab::RankInfo r = oomlab::discover_rank(flags, env);
    fuzz_require(r.world_size >= 1, "world size below 1");
    fuzz_require(r.rank >= 0 && r.rank < r.world_size, "rank outside 0..world_size-1");
    fuzz_require(r.local_rank >= 0 && r.local_rank < r.world_size, "local rank outside 0..world_size-1");
    fuzz_require(r.local_world_size == -1 || (r.local_world_size >= 1 && r.local_world_size <= r.world_size),
                 "local world size outside 1..world_size");
    fuzz_require(r.master_port >= 1 && r.master_port <= 65535, "master port outside 1..65535");
    fuzz_require(!r.master_addr.empty(), "empty master address");
  } catch (const oomlab::Error&) {
  }
  return 0;
}
