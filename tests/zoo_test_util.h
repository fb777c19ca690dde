// zoo_test_util.h — small zoo models and deterministic batches for whole-model tests
// (checkpointing, mixed precision): small_config shrinks inputs / sequences so every model
// runs in milliseconds; make_input / make_target build fixed inputs on the config's device.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/module.h"
#include "models/model_zoo.h"

namespace oomlab::test {

inline ModelConfig small_config(const std::string& name, Device dev) {
  ModelConfig c = default_model_config(name);
  c.device = dev;
  c.seed = 5;
  if (model_input_kind(name) == InputKind::tokens) {
    c.seq_len = 12;
    if (name == "bert-base") c.hidden = 96, c.heads = 12, c.max_positions = 16;
  } else if (model_task_kind(name) == TaskKind::segmentation) {
    c.height = c.width = 16;
  } else if (c.height > 32) {
    c.height = c.width = 32;
  }
  return c;
}

inline Tensor make_input(const std::string& name, const ModelConfig& c, int64_t batch) {
  Shape s = model_input_shape(name, c, batch);
  if (model_input_kind(name) == InputKind::tokens) {
    std::vector<int64_t> ids(size_t(shape_numel(s)));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 9 == 8 ? 0 : int64_t(1 + (i * 7919) % 997);
    return Tensor::from_vector_i64(ids, s, c.device);
  }
  Generator g{11, 0};
  std::vector<double> v(size_t(shape_numel(s)));
  for (double& f : v) f = g.next_unit();
  return Tensor::from_vector(v, s, DType::f32, c.device);
}

inline Tensor make_target(const std::string& name, const ModelConfig& c, int64_t batch) {
  if (model_task_kind(name) == TaskKind::segmentation) {
    std::vector<int64_t> t(size_t(batch * c.height * c.width));
    for (size_t i = 0; i < t.size(); ++i) t[i] = int64_t(i % size_t(c.num_classes));
    return Tensor::from_vector_i64(t, {batch, c.height, c.width}, c.device);
  }
  std::vector<int64_t> t(static_cast<size_t>(batch));
  for (size_t i = 0; i < t.size(); ++i) t[i] = int64_t(i) % c.num_classes;
  return Tensor::from_vector_i64(t, {batch}, c.device);
}

// Every parameter's values, in registration order, as one vector (cpu models).
inline std::vector<double> flat_weights(nn::Module& m) {
  std::vector<double> out;
  for (const auto& [n, p] : m.named_parameters()) {
    const std::vector<double> v = p.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Largest |a - b| relative to the largest |a| (a and b of one size).
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0, scale = 0;
  for (double v : a) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst / std::max(scale, 1e-30);
}

// make_input / make_target on c.device; on meta, unfilled tensors of the same shapes (meta
// has no values), so a test can run the same step on cpu and meta and compare traces.
inline Tensor input_on_device(const std::string& name, const ModelConfig& c, int64_t batch) {
  if (!c.device.is_meta()) return make_input(name, c, batch);
  return Tensor::empty(model_input_shape(name, c, batch),
                       model_input_kind(name) == InputKind::tokens ? DType::i64 : DType::f32, c.device);
}
inline Tensor target_on_device(const std::string& name, const ModelConfig& c, int64_t batch) {
  if (!c.device.is_meta()) return make_target(name, c, batch);
  ModelConfig host = c;
  host.device = cpu_device();
  return Tensor::empty(make_target(name, host, batch).shape(), DType::i64, c.device);
}

// The meta device's allocation trace equals the CPU's: same events, sizes and frames, and
// the same peak.
inline void expect_same_trace(const std::vector<TraceEvent>& cpu, const std::vector<TraceEvent>& meta,
                              const std::map<std::string, int64_t>& cpu_stats,
                              const std::map<std::string, int64_t>& meta_stats) {
  ASSERT_EQ(cpu.size(), meta.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].action, meta[i].action) << i;
    ASSERT_EQ(cpu[i].size, meta[i].size) << i << " " << cpu[i].frame;
    ASSERT_EQ(cpu[i].frame, meta[i].frame) << i;
  }
  EXPECT_EQ(cpu_stats.at("allocated_bytes.all.peak"), meta_stats.at("allocated_bytes.all.peak"));
}

}  // namespace oomlab::test
