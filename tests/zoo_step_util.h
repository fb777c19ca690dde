// zoo_step_util.h — whole-model training steps as the trainer runs them (host batch ->
// batch_input_to_device -> train_step), shared by the meta-trace tests on the CPU
// (tests/test_meta_trace.cpp: cpu:1, which takes the host -> device copy path cuda takes)
// and the CUDA model tests (tests/test_cuda_models.cpp):
//  * zoo_setup(name, dev): a small config and batch per model family;
//  * make_batch: a deterministic HostBatch (images or tokens with a padded row; labels or masks);
//  * record_steps(name, dev): the allocator trace and stats of two SGD steps on `dev`;
//  * expect_trace_equals_meta(name, meta, other): same events (action, size, layer/phase
//    frame) and the same stats; allocations tagged "workspace" (cuDNN / cuBLAS scratch,
//    which meta does not model) are left out, and with workspaces the segments and large
//    block sizes may differ by the workspace's effect on reuse (< 2 MiB).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_step.h"
#include "models/model_zoo.h"

namespace oomlab::testing {

struct ZooSetup { ModelConfig cfg; int64_t batch; };

inline ZooSetup zoo_setup(const std::string& name, Device dev) {
  ZooSetup s{default_model_config(name), 4};
  s.cfg.device = dev;
  if (model_input_kind(name) == InputKind::tokens) {
    s.cfg.vocab_size = 1000;
    s.cfg.seq_len = 16;
  } else if (model_task_kind(name) == TaskKind::segmentation) {
    s.cfg.height = s.cfg.width = 32;
    s.batch = 2;
  } else {
    s.cfg.num_classes = 10;
    const bool vgg = name.rfind("vgg", 0) == 0;
    if (s.cfg.height > 64) s.cfg.height = s.cfg.width = vgg ? 32 : 64;   // resnets: BN needs some spatial extent
    if (vgg) s.batch = 2;
  }
  return s;
}

inline HostBatch make_batch(const std::string& name, const ModelConfig& c, int64_t n, uint64_t seed) {
  HostBatch b;
  b.n = n;
  b.shape = model_input_shape(name, c, n);
  const int64_t K = c.num_classes;
  if (model_input_kind(name) == InputKind::tokens) {
    b.input_dtype = DType::i64;
    b.tokens = random_ints(shape_numel(b.shape), 1, c.vocab_size, seed);
    for (int64_t t = b.shape[1] - 3; t < b.shape[1]; ++t) b.tokens[size_t(b.shape[1] + t)] = 0;   // row 1 padded
  } else {
    Generator g{seed, 0};
    b.images.resize(size_t(shape_numel(b.shape)));
    for (float& x : b.images) x = float(2.0 * g.next_unit() - 1.0);
  }
  if (model_task_kind(name) == TaskKind::segmentation) {
    b.target_shape = {n, b.shape[2], b.shape[3]};
    b.masks = random_ints(shape_numel(b.target_shape), 0, K, seed + 1);
  } else {
    b.target_shape = {n};
    b.labels = random_ints(n, 0, K, seed + 1);
  }
  return b;
}

inline std::unique_ptr<Optimizer> sgd_for(nn::Module& m) {
  ParamGroup g;
  g.params = m.named_parameters();
  g.lr = 0.01;
  g.momentum = 0.9;
  return make_optimizer("sgd", {g});
}

inline std::string gtest_name(std::string s) {
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

struct Recorded { std::vector<TraceEvent> trace; std::map<std::string, int64_t> stats; };

inline Recorded record_steps(const std::string& name, Device dev) {
  reset_allocators();
  CachingAllocator& al = allocator_for(dev);
  al.record_history(true);
  {
    ZooSetup s = zoo_setup(name, dev);
    nn::ModulePtr m = build_model(name, s.cfg);
    auto opt = sgd_for(*m);
    for (int step = 0; step < 2; ++step) {
      HostBatch b = make_batch(name, s.cfg, s.batch, 10 + step);
      manual_seed(7);
      train_step(*m, *opt, batch_input_to_device(b, dev), batch_target_to_device(b, dev));
    }
  }
  Recorded r{al.trace(), al.stats()};
  al.record_history(false);
  return r;
}

inline std::vector<TraceEvent> without_workspace(const std::vector<TraceEvent>& t, bool drop_segments) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : t) {
    if (e.tag == "workspace") continue;
    if (drop_segments && (e.action == "segment_alloc" || e.action == "segment_free")) continue;
    out.push_back(e);
  }
  return out;
}

inline void expect_trace_equals_meta(const std::string& name, const Recorded& meta, const Recorded& dev) {
  const int64_t ws_peak = dev.stats.at("workspace_bytes.all.peak");
  // Workspace blocks share the pools, so they can change segment reuse: segments are
  // compared only when no workspace was allocated.
  const bool ws =
      ws_peak > 0 || std::any_of(dev.trace.begin(), dev.trace.end(), [](auto& e) { return e.tag == "workspace"; });
  std::vector<TraceEvent> m = without_workspace(meta.trace, ws), c = without_workspace(dev.trace, ws);
  ASSERT_GT(m.size(), 10u);
  for (size_t i = 0; i < std::min(m.size(), c.size()); ++i) {
    ASSERT_EQ(c[i].action, m[i].action) << name << " event " << i << " (" << m[i].frame << ")";
    // A segment a workspace created stays cached on the device only; a large request
    // served from it may split off a remainder that a fresh meta segment keeps.
    if (ws && std::max(c[i].size, m[i].size) > kSmallSize)
      ASSERT_LT(c[i].size > m[i].size ? c[i].size - m[i].size : m[i].size - c[i].size, kRoundLarge)
          << name << " event " << i << " (" << m[i].frame << ")";
    else
      ASSERT_EQ(c[i].size, m[i].size) << name << " event " << i << " (" << m[i].frame << ")";
    ASSERT_EQ(c[i].frame, m[i].frame) << name << " event " << i;
  }
  ASSERT_EQ(c.size(), m.size()) << name;
  // With workspaces, requested bytes (callers' sizes) do not depend on how blocks were split.
  const char* peak_key = ws ? "requested_bytes.all.peak" : "allocated_bytes.all.peak";
  const int64_t mp = meta.stats.at(peak_key), cp = dev.stats.at(peak_key);
  EXPECT_LE(mp, cp) << name;
  EXPECT_LE(cp, mp + ws_peak) << name;
  if (!ws) {
    EXPECT_EQ(dev.stats, meta.stats) << name;
  }
  std::printf("[   INFO   ] %s: peak %lld bytes (meta %lld), workspace peak %lld\n", name.c_str(), (long long)cp,
              (long long)mp, (long long)ws_peak);
}

}  // namespace oomlab::testing
