// test_cli_collectives.cpp — `oomlab allreduce-bench --collective reduce_scatter |
// all_gather` (nccl-tests' reduce_scatter_perf, all_gather_perf) on the local threads (3
// ranks: sizes a multiple of 3 elements), meta and gloo processes: every element checked
// out of place and in place, none wrong, and busbw = algbw x (n-1)/n (all_reduce's 2(n-1)/n).
// ctest tier: cli
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "temp_dir_util.h"

namespace {
nlohmann::json bench(const std::string& args) {
  TempDir d("cli_collectives");
  const CliRun r = run_oomlab("allreduce-bench " + args + " --max-bytes 96K --iters 2 --warmup 1 --json " +
                              d.file("b.json"));
  EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
  if (r.code != 0) return {};
  std::ifstream in(d.file("b.json"));
  return nlohmann::json::parse(in);
}
}  // namespace

TEST(CliCollectives, ReduceScatterAndAllGatherAreCheckedOnEveryBackend) {
  struct Case { const char* where; int ranks; bool checked; };
  for (const char* col : {"reduce_scatter", "all_gather", "all_reduce"})
    for (const Case& c : {Case{"--device cpu --ranks 3", 3, true}, Case{"--device meta --ranks 4", 4, false},
                          Case{"--backend gloo --ranks 2 --op avg", 2, true}}) {
      const nlohmann::json j = bench(std::string("--collective ") + col + " " + c.where);
      if (j.empty()) continue;
      const std::string what = std::string(col) + " " + c.where;
      EXPECT_EQ(j["config"]["collective"], col) << what;
      EXPECT_EQ(j["metrics"]["wrong_total"], 0) << what;
      ASSERT_FALSE(j["metrics"]["rows"].empty()) << what;
      const double factor = (std::string(col) == "all_reduce" ? 2.0 : 1.0) * (c.ranks - 1) / c.ranks;
      for (const auto& row : j["metrics"]["rows"]) {
        if (std::string(col) != "all_reduce")   // whole buffers of a multiple of the ranks' elements
          EXPECT_EQ(row["count"].get<int64_t>() % c.ranks, 0) << what;
        EXPECT_EQ(row["out_of_place"]["wrong"].is_null(), !c.checked) << what;
        const double alg = row["out_of_place"]["algbw_GBps"].get<double>();
        EXPECT_NEAR(row["out_of_place"]["busbw_GBps"].get<double>(), alg * factor, 1e-9 * (alg + 1)) << what;
      }
    }
}

// A --max-bytes below one element per rank holds no reduce_scatter / all_gather buffer: one
// exit-2 line naming it (was: an empty size list, then a segfault), on threads and processes
// (said once, before the rank processes start).
TEST(CliCollectives, AMaxBytesBelowOneElementPerRankIsRefused) {
  for (const char* where : {"--ranks 3", "--device meta --ranks 8", "--backend gloo --ranks 3"})
    for (const char* col : {"reduce_scatter", "all_gather"}) {
      const CliRun r = run_oomlab(std::string("allreduce-bench --collective ") + col + " " + where +
                                  " --min-bytes 8 --max-bytes 8 --iters 1 --warmup 0");
      EXPECT_EQ(r.code, 2) << col << " " << where << "\n" << r.output;
      const std::string line = std::string("--max-bytes 8 holds no ") + col + " buffer over";
      const size_t at = r.output.find(line);
      EXPECT_NE(at, std::string::npos) << col << " " << where << "\n" << r.output;
      EXPECT_EQ(r.output.find(line, at + 1), std::string::npos) << "said more than once:\n" << r.output;
    }
}

// The memcpy roof of a message under 9 bytes (--max-bytes 8 on one rank) stays inside its
// buffer (its 9 timed copies indexed past an 8-byte vector: UBSan's finding through
// scripts/cli_probe.py on the sanitizer build).
TEST(CliCollectives, TheMemcpyRoofOfATinyMessageStaysInItsBuffer) {
  for (const char* bytes : {"2", "8"}) {
    const CliRun r = run_oomlab(std::string("allreduce-bench --ranks 1 --dtype half --min-bytes 2 --max-bytes ") +
                                bytes + " --iters 1 --warmup 0");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("# memcpy bandwidth"), std::string::npos) << r.output;
  }
}
