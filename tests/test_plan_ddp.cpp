// test_plan_ddp.cpp — the planner with several GPUs (issue 52): `estimate --parallel ddp`
// is one rank's step with DistributedDataParallel's buckets, byte-equal to the per-rank peak
// of `train --device meta --parallel ddp`; the all-reduce time is the ring's 2(n-1)/n x
// bucket bytes at the link's datasheet rate (comm_time.h); with --zero 1|2 every rank's
// training peak is the estimate's and the state is sharded; `plan --gpus N` counts both in
// every candidate, and --verify cpu over 2 ranks measures the planned peak; a precision whose
// static bytes alone exceed the card is pruned without meta steps, with the same answer.
// ctest tier: cli
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_json_util.h"
#include "experiments/plan/comm_time.h"
#include "temp_dir_util.h"

using namespace oomlab;

namespace {
nlohmann::json run_ok(const std::string& args) { return run_json_ok(args, "plan_ddp"); }

int64_t sum(const nlohmann::json& a) {
  int64_t s = 0;
  for (const auto& v : a) s += v.get<int64_t>();
  return s;
}
}  // namespace

// The meta estimate of one rank equals what a two-rank meta training run's rank 1 holds.
TEST(PlanDdp, EstimateOfOneRankIsTheTrainingRanksPeakToTheByte) {
  struct Case { const char* model; const char* data; };
  for (const Case& c : {Case{"resnet20", "--dataset synthetic"},
                        Case{"bert-tiny --seq-len 128", "--dataset synthetic-seq"}}) {
    const std::string common = std::string("--model ") + c.model + " --batch 16 --optimizer adamw --parallel ddp "
                               "--devices 2";
    const nlohmann::json e = run_ok("estimate " + common);
    const nlohmann::json t = run_ok("train " + common + " " + c.data +
                                    " --device meta --steps 3 --synthetic-size 64 --eval-batches 0 --quiet");
    if (e.empty() || t.empty()) continue;
    const nlohmann::json& rank1 = t["memory"]["devices"]["meta:1"];
    EXPECT_EQ(e["metrics"]["exact"]["peak_allocated_bytes"], rank1["allocated_bytes.all.peak"]) << c.model;
    EXPECT_EQ(e["metrics"]["exact"]["peak_reserved_bytes"], rank1["reserved_bytes.all.peak"]) << c.model;
    // the buckets hold every gradient once (float32 model: as many bytes as the gradients)
    EXPECT_EQ(e["metrics"]["ddp"]["buckets_total_bytes"], e["metrics"]["exact"]["grads_bytes"]) << c.model;
    EXPECT_EQ(sum(e["metrics"]["ddp"]["bucket_bytes"]), e["metrics"]["ddp"]["buckets_total_bytes"]);
  }
  // without DDP no buckets; a smaller cap cuts more of them; the peak grows by about the buckets
  const nlohmann::json one = run_ok("estimate --model resnet20 --batch 16 --optimizer adamw");
  const nlohmann::json small = run_ok("estimate --model resnet20 --batch 16 --optimizer adamw --parallel ddp "
                                      "--bucket-cap 64KiB");
  ASSERT_FALSE(one.empty() || small.empty());
  EXPECT_FALSE(one["metrics"].contains("ddp"));
  EXPECT_GT(small["metrics"]["ddp"]["bucket_bytes"].size(), 2u);
  EXPECT_GE(small["metrics"]["exact"]["peak_allocated_bytes"].get<int64_t>(),
            one["metrics"]["exact"]["peak_allocated_bytes"].get<int64_t>() +
                small["metrics"]["ddp"]["buckets_total_bytes"].get<int64_t>());
}

// ZeRO: the estimate of one rank of 4 (a meta world: nothing moved) equals every rank's peak
// of a four-rank meta training run; stage 1 cuts AdamW's state to a quarter, stage 2 the
// gradients too, stage 3 the parameters too; stages 1 and 2 send what DDP's all-reduce sends
// (reduce-scatter + all-gather).
TEST(PlanDdp, ZeroEstimateIsEveryTrainingRanksPeakAndShardsTheState) {
  const std::string common = "--model resnet20 --batch 16 --optimizer adamw --parallel ddp --devices 4";
  const nlohmann::json ddp = run_ok("estimate " + common);
  for (const char* z : {"1", "2", "3"}) {
    const nlohmann::json e = run_ok("estimate " + common + " --zero " + z);
    const nlohmann::json t = run_ok("train " + common + " --zero " + z + " --dataset synthetic --device meta "
                                    "--steps 3 --synthetic-size 64 --eval-batches 0 --quiet");
    if (e.empty() || t.empty() || ddp.empty()) return;
    for (const auto& [dev, stats] : t["memory"]["devices"].items()) {
      EXPECT_EQ(e["metrics"]["exact"]["peak_allocated_bytes"], stats["allocated_bytes.all.peak"]) << z << dev;
      EXPECT_EQ(e["metrics"]["exact"]["peak_reserved_bytes"], stats["reserved_bytes.all.peak"]) << z << dev;
    }
    const int64_t full_state = ddp["metrics"]["exact"]["optimizer_state_bytes"].get<int64_t>();
    const int64_t state = e["metrics"]["exact"]["optimizer_state_bytes"].get<int64_t>();
    EXPECT_GE(state, full_state / 4) << z;
    EXPECT_LE(state, full_state / 4 + 4096) << z;   // a few padding elements per bucket
    const int64_t grads = e["metrics"]["exact"]["grads_bytes"].get<int64_t>();
    const int64_t full_grads = ddp["metrics"]["exact"]["grads_bytes"].get<int64_t>();
    if (std::string(z) == "1") {
      EXPECT_EQ(grads, full_grads) << "stage 1 keeps the full gradients";
    } else {   // stages 2 and 3: the shard backward sums into
      EXPECT_GE(grads, full_grads / 4);
      EXPECT_LE(grads, full_grads / 4 + 2048);
    }
    const int64_t params = e["metrics"]["exact"]["params_bytes"].get<int64_t>();
    const int64_t full_params = ddp["metrics"]["exact"]["params_bytes"].get<int64_t>();
    if (std::string(z) == "3") {   // a rank keeps its shard of every parameter
      EXPECT_GE(params, full_params / 4);
      EXPECT_LE(params, full_params / 4 + 2048);
    } else {
      EXPECT_EQ(params, full_params);
    }
    if (std::string(z) != "3") {
      EXPECT_NEAR(e["metrics"]["ddp"]["bytes_sent_per_step"].get<double>(),   // the buckets' padding aside
                  ddp["metrics"]["ddp"]["bytes_sent_per_step"].get<double>(), 4 * 4 * 8) << z;
    }
  }
  // issue 53's bar command: BERT-large's size, stage 3 over 64 ranks, one rank exactly
  const nlohmann::json large = run_ok("estimate --model bert-base --hidden 1024 --layers 24 --heads 16 --batch 8 "
                                      "--parallel ddp --zero 3 --devices 64");
  if (!large.empty()) {
    const double per_rank = large["metrics"]["exact"]["params_bytes"].get<double>();
    EXPECT_NEAR(per_rank, 4.0 * large["metrics"]["params"].get<double>() / 64, per_rank * 0.01);
  }
  // model.half() with ZeRO's float32 masters sharded (and a ShardedGradScaler's loss scaling)
  const std::string half = common + " --half --master-weights --zero 2";
  const nlohmann::json eh = run_ok("estimate " + half);
  const nlohmann::json th = run_ok("train " + half + " --dataset synthetic --device meta --steps 3 "
                                   "--synthetic-size 64 --eval-batches 0 --quiet");
  if (!eh.empty() && !th.empty()) {
    EXPECT_EQ(eh["metrics"]["exact"]["peak_allocated_bytes"],
              th["memory"]["devices"]["meta:3"]["allocated_bytes.all.peak"]);
  }
  // channels_last weights under stage 3: the units keep their layout, the peak is the training's
  const std::string cl = common + " --zero 3 --channels-last";
  const nlohmann::json ec = run_ok("estimate " + cl);
  const nlohmann::json tc = run_ok("train " + cl + " --dataset synthetic --device meta --steps 3 "
                                   "--synthetic-size 64 --eval-batches 0 --quiet");
  if (!ec.empty() && !tc.empty()) {
    for (const auto& [dev, stats] : tc["memory"]["devices"].items())
      EXPECT_EQ(ec["metrics"]["exact"]["peak_allocated_bytes"], stats["allocated_bytes.all.peak"]) << dev;
  }
  const CliRun bad = run_oomlab("train " + common + " --zero 3 --dataset synthetic --steps 1 --ema 0.99");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--ema"), std::string::npos) << bad.output;
}

// --offload: each rank's device peak is still the training's exactly; the optimizer's shards
// and state (and with params the parameters' shards) leave the device for the host, whose
// bytes the estimate reports; misuse is one clear error.
TEST(PlanDdp, OffloadMovesTheShardsToTheHostExactly) {
  const std::string common = "--model resnet20 --batch 16 --optimizer adamw --parallel ddp --devices 4";
  struct Case { const char* flags; bool stage3; };
  for (const Case& c : {Case{" --zero 2", false}, Case{" --zero 3", true}}) {
    const nlohmann::json on_device = run_ok("estimate " + common + c.flags);
    for (const char* o : {" --offload optimizer", " --offload params"}) {
      const bool params = std::string(o).find("params") != std::string::npos;
      if (params && !c.stage3) continue;
      const std::string flags = common + c.flags + o;
      const nlohmann::json e = run_ok("estimate " + flags);
      const nlohmann::json t = run_ok("train " + flags + " --dataset synthetic --device meta --steps 3 "
                                      "--synthetic-size 64 --eval-batches 0 --quiet");
      if (e.empty() || t.empty() || on_device.empty()) return;
      for (const auto& [dev, stats] : t["memory"]["devices"].items())
        EXPECT_EQ(e["metrics"]["exact"]["peak_allocated_bytes"], stats["allocated_bytes.all.peak"]) << flags << dev;
      const nlohmann::json& x = e["metrics"]["exact"];
      const nlohmann::json& x0 = on_device["metrics"]["exact"];
      EXPECT_EQ(x["optimizer_state_bytes"], 0) << flags;
      // the state and the shards the optimizer updates (stage 3: the parameters' own shards,
      // whose device twin stays unless params are offloaded too)
      const int64_t shards = c.stage3 ? x0["params_bytes"].get<int64_t>()
                                      : on_device["metrics"]["ddp"]["zero_shard_bytes"].get<int64_t>();
      const int64_t moved = x0["optimizer_state_bytes"].get<int64_t>() + shards;
      const int64_t host = e["metrics"]["ddp"]["offload_host_bytes"].get<int64_t>();
      EXPECT_EQ(host, moved) << flags;
      EXPECT_GT(e["metrics"]["ddp"]["offload_host_peak_bytes"].get<int64_t>(), host) << flags << ": gradients too";
      EXPECT_EQ(x["params_bytes"].get<int64_t>() == 0, params) << flags;
      EXPECT_LT(x["peak_allocated_bytes"].get<int64_t>(), x0["peak_allocated_bytes"].get<int64_t>()) << flags;
    }
  }
  for (const char* bad : {" --offload optimizer", " --zero 2 --offload params"}) {
    const CliRun r = run_oomlab("estimate " + common + bad);
    EXPECT_EQ(r.code, 2) << bad << r.output;
    EXPECT_NE(r.output.find("--offload"), std::string::npos) << r.output;
  }
}

// bert-base on a T4 with 1.5 GiB left: nothing fits without ZeRO-Offload, so the planner
// searches it (one GPU: a world of one) and recommends it, its peak the estimate's; where
// something fits, offload is not searched.
TEST(PlanDdp, OffloadIsSearchedWhenNothingElseFits) {
  const nlohmann::json p = run_ok("plan --model bert-base --seq-len 128 --gpu t4 --reserve 14.5GiB --global-batch 8");
  ASSERT_TRUE(p["metrics"].contains("recommended")) << p.dump().substr(0, 2000);
  int offloaded = 0;
  for (const auto& c : p["metrics"]["candidates"]) {
    if (c["offload"] == "") {
      EXPECT_FALSE(c["fits"].get<bool>()) << c.dump();
    }
    offloaded += c["offload"] != "" && c["fits"].get<bool>();
  }
  EXPECT_GT(offloaded, 0);
  const nlohmann::json& c = p["metrics"]["candidates"][p["metrics"]["recommended"]["candidate"].get<size_t>()];
  const std::string flags = p["metrics"]["recommended"]["train_flags"].get<std::string>();
  EXPECT_NE(flags.find("--parallel ddp --devices 1 --zero "), std::string::npos) << flags;
  EXPECT_NE(flags.find("--offload " + c["offload"].get<std::string>()), std::string::npos) << flags;
  EXPECT_GT(c["offload_ms"].get<double>(), 0);
  std::string est = "estimate --model bert-base --seq-len 128 --optimizer adamw --parallel ddp --devices 1 --batch " +
                    std::to_string(c["micro_batch"].get<int64_t>()) + " --zero " +
                    std::to_string(c["zero"].get<int>()) + " --offload " + c["offload"].get<std::string>();
  if (c["precision"] == "half") est += " --half --master-weights";
  if (c["precision"] == "bf16" || c["precision"] == "fp16") est += " --amp " + c["precision"].get<std::string>();
  if (c["checkpoint"] != "none") est += " --checkpoint " + c["checkpoint"].get<std::string>();
  if (c["attention"] == "fused") est += " --attention fused";
  const nlohmann::json e = run_ok(est);
  if (!e.empty()) {
    EXPECT_EQ(e["metrics"]["exact"]["peak_reserved_bytes"], c["peak_reserved_bytes"]) << est;
  }
  const nlohmann::json fits = run_ok("plan --model resnet20 --gpu h100-sxm --global-batch 64");
  for (const auto& k : fits["metrics"]["candidates"]) EXPECT_EQ(k["offload"], "") << k.dump();
}

// Every rank's trace is the same, with activation checkpointing too: a reduce-scatter's work
// item once kept its bucket alive on the queue's thread, so the free (and the peak) came at a
// time that differed between ranks and runs (mlp, zero 2 + checkpoint all: 3426816 or
// 3791360 bytes).
TEST(PlanDdp, ZeroRanksPeakAlikeWithCheckpointing) {
  for (const char* z : {"2", "3"})
    for (const char* policy : {"all", "sqrt"}) {
      const std::string common = std::string("--model mlp --batch 8 --optimizer adamw --parallel ddp --devices 4 "
                                             "--zero ") + z + " --checkpoint " + policy;
      const nlohmann::json e = run_ok("estimate " + common);
      const nlohmann::json t = run_ok("train " + common + " --dataset synthetic --device meta --steps 3 "
                                      "--synthetic-size 64 --eval-batches 0 --quiet");
      if (e.empty() || t.empty()) continue;
      for (const auto& [dev, stats] : t["memory"]["devices"].items())
        EXPECT_EQ(stats["allocated_bytes.all.peak"], e["metrics"]["exact"]["peak_allocated_bytes"])
            << z << policy << dev;
    }
}

// An imported graph under FSDP (ZeRO-3 gathering per run of a module's nodes; the toy GPT-2's
// tied head reads the token embedding a second time): the estimate is every training rank's
// peak, with checkpointing too, and the parameters a rank keeps are its shards.
TEST(PlanDdp, FsdpOnAnImportedGraphIsEveryRanksPeak) {
  const std::string g = "graph:" + std::string(OOMLAB_SOURCE_DIR) + "/tests/fixtures/graphs/tiny_gpt2.json";
  const std::string common = "--model " + g + " --batch 8 --seq-len 16 --optimizer adamw --devices 4";
  const nlohmann::json ddp = run_ok("estimate " + common + " --parallel ddp");
  for (const char* policy : {"none", "all"}) {
    const std::string fsdp = common + " --parallel fsdp --checkpoint " + policy;
    const nlohmann::json e = run_ok("estimate " + fsdp);
    const nlohmann::json t = run_ok("train " + fsdp + " --dataset synthetic-seq --device meta --steps 3 "
                                    "--synthetic-size 64 --eval-batches 0 --quiet");
    if (e.empty() || t.empty() || ddp.empty()) return;
    for (const auto& [dev, stats] : t["memory"]["devices"].items())
      EXPECT_EQ(stats["allocated_bytes.all.peak"], e["metrics"]["exact"]["peak_allocated_bytes"]) << policy << dev;
    const int64_t params = e["metrics"]["exact"]["params_bytes"].get<int64_t>();
    const int64_t full = ddp["metrics"]["exact"]["params_bytes"].get<int64_t>();
    EXPECT_GE(params, full / 4) << policy;
    EXPECT_LE(params, full / 4 + 4096) << policy;
    // 3 Psi and more: the tied embedding is gathered again for the head, forward and backward
    EXPECT_GT(e["metrics"]["ddp"]["bytes_sent_per_step"].get<double>(),
              1.5 * ddp["metrics"]["ddp"]["bytes_sent_per_step"].get<double>()) << policy;
  }
}

TEST(PlanDdp, TheAllReduceIsTheRingsBytesAtTheLinksRate) {
  GpuSpec g;
  g.link_gbps = 300;
  g.link = "NVLink 3";
  const CommTime two = ddp_comm_time({int64_t(100e6), int64_t(50e6)}, 2, g);   // 2(n-1)/n = 1
  EXPECT_DOUBLE_EQ(two.total_ms, 150e6 / 300e9 * 1e3);
  EXPECT_DOUBLE_EQ(two.last_bucket_ms, 50e6 / 300e9 * 1e3);
  const CommTime eight = ddp_comm_time({int64_t(100e6)}, 8, g);                  // 2 x 7 / 8
  EXPECT_DOUBLE_EQ(eight.total_ms, 1.75 * 100e6 / 300e9 * 1e3);
  EXPECT_EQ(ddp_comm_time({int64_t(100e6)}, 1, g).total_ms, 0);                  // one rank: nothing to reduce
  g.link_gbps = 0;
  EXPECT_LT(ddp_comm_time({int64_t(100e6)}, 8, g).total_ms, 0);                  // link unknown: said, not 0
  EXPECT_EQ(find_gpu("a100-80gb").link_gbps, 300);
  EXPECT_EQ(find_gpu("rtx4090").link_gbps, 32);
  for (const GpuSpec& c : gpu_table()) EXPECT_GT(c.link_gbps, 0) << c.name;
}

// plan --gpus 8: the recommended candidate's peak is estimate --parallel ddp's at its
// micro-batch, and its time holds the all-reduce of its buckets, named as unmeasured.
TEST(PlanDdp, PlanWithEightGpusCountsBucketsAndTheAllReduce) {
  const nlohmann::json p = run_ok("plan --model resnet50 --gpus 8 --gpu a100-80gb --global-batch 512");
  ASSERT_TRUE(p["metrics"].contains("recommended")) << p.dump();
  const nlohmann::json& c = p["metrics"]["candidates"][p["metrics"]["recommended"]["candidate"].get<size_t>()];
  EXPECT_GT(c["comm_ms"].get<double>(), 0);
  EXPECT_GT(c["predicted_ms"].get<double>(), c["comm_ms"].get<double>());
  bool named = false;
  for (const auto& u : c["unseen_features"]) named |= u.get<std::string>().find("communication") != std::string::npos;
  EXPECT_TRUE(named) << c.dump();
  std::string flags = p["metrics"]["recommended"]["train_flags"].get<std::string>();
  EXPECT_NE(flags.find("--parallel ddp --devices 8"), std::string::npos) << flags;
  EXPECT_NE(c["precision"], "half") << "no calibration pair ran half: not recommended where others fit";
  int stages = 0;   // the search covers ZeRO 0-3 (a candidate of each stage exists)
  for (const auto& k : p["metrics"]["candidates"]) stages |= 1 << k["zero"].get<int>();
  EXPECT_EQ(stages, 15);
  std::string est = "estimate --model resnet50 --optimizer adamw --parallel ddp --devices 8 --batch " +
                    std::to_string(c["micro_batch"].get<int64_t>());
  if (c["precision"] == "bf16") est += " --amp bf16";
  if (c["precision"] == "fp16") est += " --amp fp16";
  if (c["checkpoint"] != "none") est += " --checkpoint " + c["checkpoint"].get<std::string>();
  if (c["channels_last"].get<bool>()) est += " --channels-last";
  if (c["fuse_relu"].get<bool>()) est += " --fuse-relu on";
  if (c["zero"].get<int>() > 0) est += " --zero " + std::to_string(c["zero"].get<int>());
  if (c["precision"] == "bf16" || c["precision"] == "fp16" || c["precision"] == "fp32" || c["precision"] == "tf32") {
    const nlohmann::json e = run_ok(est);
    EXPECT_EQ(e["metrics"]["exact"]["peak_reserved_bytes"], c["peak_reserved_bytes"]) << est;
  }
  // --verify cpu trains the recommendation over 2 CPU ranks: rank 0's measured peak is the plan's
  const nlohmann::json v = run_ok("plan --model tiny-ff --gpus 2 --gpu h100-sxm --global-batch 16 --verify cpu");
  ASSERT_TRUE(v["metrics"].contains("verify")) << v.dump();
  EXPECT_EQ(v["metrics"]["verify"]["measured_peak_reserved_bytes"],
            v["metrics"]["verify"]["predicted_peak_reserved_bytes"]);
  // one GPU: no buckets, no communication
  const nlohmann::json one = run_ok("plan --model resnet50 --gpu a100-80gb --global-batch 64");
  for (const auto& k : one["metrics"]["candidates"]) EXPECT_EQ(k["comm_ms"].get<double>(), 0);
}

// bert-base's weights, gradients and AdamW state (~1.7 GB) cannot fit 1.5 GiB less 1 GiB:
// after each precision's first meta step the rest of that precision is pruned, and the
// answer (nothing fits, exit 2) is the one the full search gives.
TEST(PlanDdp, APrecisionWhoseStaticBytesExceedTheCardIsPrunedWithoutMetaSteps) {
  TempDir d("plan_prune");
  const CliRun r = run_oomlab("plan --model bert-base --seq-len 128 --device-memory 1536MiB --global-batch 8");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nothing fits"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ruled out by their static bytes"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" 0 ruled out by their static bytes"), std::string::npos) << r.output;
  // where everything fits, nothing is pruned
  const nlohmann::json fit = run_ok("plan --model resnet20 --gpu h100-sxm --global-batch 64");
  EXPECT_EQ(fit["metrics"]["pruned"], 0);
}
