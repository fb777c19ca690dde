// test_plan_dp.cpp — DataParallel and balanced DataParallel in the planner (issue 52):
// `estimate --parallel dp|bdp` gives every device's peak, byte-equal to `train --device meta`
// with the same wrapper; the devices' counted work adds up to the one-device step's; the
// copies are the model states and the scattered input at the link's rate (comm_time.h);
// `plan --gpus N` searches DataParallel (not with half) and balances device 0 from the
// DataParallel candidate it starts from, each peak the estimate's.
// ctest tier: cli
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_json_util.h"
#include "experiments/plan/comm_time.h"
#include "experiments/plan/memory_report.h"
#include "experiments/plan/planner.h"
#include "temp_dir_util.h"

using namespace oomlab;

namespace {
nlohmann::json run_ok(const std::string& args) { return run_json_ok(args, "plan_dp"); }

double matrix_flops(const StepCost& c) {
  double s = 0;
  for (const auto& [kind, by_dtype] : c.flops)
    for (const auto& [dtype, flops] : by_dtype) s += flops;
  return s;
}
}  // namespace

// Each device of the estimate holds what the same device of a meta training run holds.
TEST(PlanDp, EstimateOfEveryDeviceIsTheTrainingRunsPeakToTheByte) {
  struct Case { const char* model; const char* data; const char* mode; };
  for (const Case& c : {Case{"resnet20", "--dataset synthetic", "--parallel dp"},
                        Case{"resnet20", "--dataset synthetic", "--parallel bdp --gpu0-bsz 2"},
                        Case{"bert-tiny --seq-len 64", "--dataset synthetic-seq", "--parallel dp"}}) {
    const std::string common =
        std::string("--model ") + c.model + " --batch 16 --optimizer adamw --devices 4 " + c.mode;
    const nlohmann::json e = run_ok("estimate " + common);
    const nlohmann::json t = run_ok("train " + common + " " + c.data +
                                    " --device meta --steps 3 --synthetic-size 64 --eval-batches 0 --quiet");
    if (e.empty() || t.empty()) continue;
    const nlohmann::json& devices = e["metrics"]["data_parallel"]["devices"];
    ASSERT_EQ(devices.size(), 4u) << common;
    int64_t fullest = 0, samples = 0;
    for (const auto& d : devices) {
      const nlohmann::json& trained = t["memory"]["devices"][d["device"].get<std::string>()];
      EXPECT_EQ(d["peak_allocated_bytes"], trained["allocated_bytes.all.peak"]) << common << " " << d["device"];
      EXPECT_EQ(d["peak_reserved_bytes"], trained["reserved_bytes.all.peak"]) << common << " " << d["device"];
      fullest = std::max(fullest, d["peak_reserved_bytes"].get<int64_t>());
      samples += d["chunk"].get<int64_t>();
    }
    EXPECT_EQ(samples, 16) << common;
    EXPECT_EQ(e["metrics"]["data_parallel"]["max_peak_reserved_bytes"], fullest) << common;
    EXPECT_EQ(e["metrics"]["exact"]["peak_reserved_bytes"], devices[0]["peak_reserved_bytes"]) << common;
  }
  EXPECT_EQ(run_oomlab("estimate --model resnet20 --batch 16 --parallel bdp --devices 4").code, 2);
  EXPECT_EQ(run_oomlab("estimate --model resnet20 --batch 3 --parallel dp --devices 4").code, 2);
  EXPECT_EQ(run_oomlab("estimate --model resnet20 --batch 8 --parallel dp --devices 4 --half").code, 2);
}

// The replicas do the step's matrix work between them: their counted FLOPs add up to one
// device's step at the same batch, and device 0's step cost holds its own replica's.
TEST(PlanDp, TheDevicesWorkAddsUpToTheOneDeviceStep) {
  RunSpec s = RunSpec::for_model("resnet20");
  const MemoryEstimate one = estimate_memory(s, 32, "adamw");
  s.parallel = ParallelMode::bdp;
  s.devices = 4;
  s.gpu0_bsz = 5;   // 5 + 9 + 9 + 9
  const MemoryEstimate e = estimate_memory(s, 32, "adamw");
  ASSERT_EQ(e.dp_devices.size(), 4u);
  double spread = 0;
  for (const DpDeviceEstimate& d : e.dp_devices) spread += matrix_flops(d.work);
  EXPECT_NEAR(spread, matrix_flops(one.step_cost), 1e-9 * spread);
  EXPECT_NEAR(matrix_flops(e.step_cost), matrix_flops(e.dp_devices[0].work), 1e-9 * spread);   // the rest: no matrices
  EXPECT_EQ(e.dp_devices[0].chunk, 5);
  EXPECT_NEAR(matrix_flops(e.dp_devices[1].work), matrix_flops(e.dp_devices[0].work) * 9 / 5, 1e-9 * spread);
  EXPECT_GT(e.dp_devices[1].work.allocated_bytes, e.dp_devices[0].work.allocated_bytes);
}

TEST(PlanDp, TheCopiesAreTheModelStatesAndTheScatteredInputAtTheLinksRate) {
  GpuSpec g;
  g.link_gbps = 100;
  g.link = "test link";
  const CommTime t = dp_comm_time(DpCopyBytes{int64_t(10e6), int64_t(8e6), int64_t(4e6), {1, 1, 1, 1}}, g);
  // 3 x 10 MB replicated + 3/4 of 4 MB scattered + 3 x 8 MB reduced, at 100 GB/s
  EXPECT_DOUBLE_EQ(t.total_ms, (30e6 + 3e6 + 24e6) / 100e9 * 1e3);
  EXPECT_DOUBLE_EQ(t.last_bucket_ms, 24e6 / 100e9 * 1e3);
  EXPECT_EQ(dp_comm_time(DpCopyBytes{1, 1, 1, {4}}, g).total_ms, 0);   // one device: nothing moves
  g.link_gbps = 0;
  EXPECT_LT(dp_comm_time(DpCopyBytes{1, 1, 1, {2, 2}}, g).total_ms, 0);
}

// bert-tiny s128 on 4 x 150 MiB usable: DataParallel fits 16 samples per device (device 0
// holds the optimizer state and the whole batch); balanced DataParallel, from there, fits 32
// with fewer on device 0. Every peak is the estimate's.
TEST(PlanDp, PlanSearchesDataParallelAndBalancesDeviceZero) {
  const nlohmann::json p =
      run_ok("plan --model bert-tiny --seq-len 128 --gpus 4 --device-memory 1174MiB --global-batch 128");
  ASSERT_TRUE(p.contains("metrics"));
  const uint64_t usable = 150ull << 20;
  int dp = 0, checked = 0, refused_half = 0;
  const nlohmann::json* balanced = nullptr;
  for (const auto& c : p["metrics"]["candidates"]) {
    if (c["parallel"] == "dp" && c["precision"] == "half")
      refused_half += c["why_not"].get<std::string>().find("--half") != std::string::npos;
    if (c["parallel"] == "bdp") balanced = &c;
    if ((c["parallel"] != "dp" && c["parallel"] != "bdp") || !c["fits"].get<bool>()) continue;
    if (c["parallel"] == "dp" && ++dp > 3) continue;   // the estimate of three DataParallel ones and the balanced one
    std::string est = "estimate --model bert-tiny --seq-len 128 --optimizer adamw --devices 4 --batch " +
                      std::to_string(c["micro_batch"].get<int64_t>() * 4) + " --parallel " +
                      c["parallel"].get<std::string>();
    if (c["parallel"] == "bdp") est += " --gpu0-bsz " + std::to_string(c["gpu0_bsz"].get<int64_t>());
    if (c["precision"] == "bf16") est += " --amp bf16";
    if (c["precision"] == "fp16") est += " --amp fp16";
    if (c["checkpoint"] != "none") est += " --checkpoint " + c["checkpoint"].get<std::string>();
    if (c["attention"] == "fused") est += " --attention fused";
    const nlohmann::json e = run_ok(est);
    ++checked;
    EXPECT_EQ(e["metrics"]["data_parallel"]["max_peak_reserved_bytes"], c["peak_reserved_bytes"]) << est;
    EXPECT_LE(c["peak_reserved_bytes"].get<uint64_t>(), usable) << est;
  }
  EXPECT_EQ(checked, 4);
  EXPECT_GT(refused_half, 0) << "half with DataParallel is refused by name";
  ASSERT_NE(balanced, nullptr);
  ASSERT_TRUE((*balanced)["fits"].get<bool>()) << balanced->dump();
  EXPECT_EQ((*balanced)["micro_batch"], 32) << balanced->dump();
  EXPECT_LT((*balanced)["gpu0_bsz"].get<int64_t>(), 32) << balanced->dump();
  // its base: the first DataParallel candidate that fits (no times under --device-memory), 16 per device
  for (const auto& c : p["metrics"]["candidates"])
    if (c["parallel"] == "dp" && c["fits"].get<bool>()) {
      EXPECT_EQ(c["micro_batch"], 16) << c.dump();
      break;
    }
}

// The candidate as train flags: DataParallel's --batch is the step's over all devices, and
// balanced DataParallel's --gpu0-bsz is per optimizer step (train's), as are their specs.
TEST(PlanDp, BalancedCandidateAsTrainFlags) {
  PlanRequest r;
  r.model = RunSpec::for_model("resnet20");
  r.gpu = find_gpu("a100-80gb");
  r.gpus = 4;
  r.global_batch = 256;
  PlanCandidate c;
  c.precision = "bf16";
  c.checkpoint = "none";
  c.parallel = "bdp";
  c.micro_batch = 32;
  c.accumulate = 2;
  c.gpu0_bsz = 20;
  const std::string flags = train_flags(r, c);
  EXPECT_NE(flags.find("--batch 128 "), std::string::npos) << flags;
  EXPECT_NE(flags.find("--parallel bdp --devices 4 --gpu0-bsz 40"), std::string::npos) << flags;
  const RunSpec s = candidate_train_spec(r, c);
  EXPECT_EQ(s.batch, 128);
  EXPECT_EQ(s.gpu0_bsz, 40);
  EXPECT_EQ(s.parallel, ParallelMode::bdp);
  EXPECT_NE(pytorch_settings(r, c).find("BalancedDataParallel(gpu0_bsz=20)"), std::string::npos);
}
