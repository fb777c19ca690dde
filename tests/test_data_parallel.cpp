// test_data_parallel.cpp — DataParallel, BalancedDataParallel and DDP (engine/parallel):
// the source's worked examples (2+3+3; 4+6+6 with accumulation 2) and torch.chunk's split;
// without BatchNorm, DP / BDP on N logical devices and DDP over N rank threads give the
// weights of one device at the same global batch (float64 to 1e-12, also with gradient
// accumulation / no_sync); BN statistics come from replica 0; device 0's extra memory
// shows in its own stats; DDP's buckets (reverse order, 1 MiB first), broadcast from rank
// 0, a rank with another model failing on every rank; DistributedSampler's shards.
// ctest tier: ranks
// ctest slow: Models/DataParallelEquivalence.*/bert_mini
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/data/dataloader.h"
#include "engine/data/dataset.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/comm_queue.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/local_comm.h"
#include "engine/train/accumulation.h"
#include "engine/train/ddp_strategy.h"
#include "engine/train/half_mode.h"
#include "engine/train/train_step.h"
#include "models/model_zoo.h"
#include "tests/zoo_test_util.h"

using namespace oomlab;
using namespace oomlab::test;

namespace {
ModelConfig config_for(const std::string& name, DType dtype, int first_device = 0) {
  ModelConfig c = small_config(name, cpu_device(first_device));
  c.dtype = dtype;
  c.dropout = 0.0;
  return c;
}

Tensor input_of(const std::string& name, const ModelConfig& c, int64_t batch) {
  Tensor x = make_input(name, c, batch);
  return dtype_is_floating(x.dtype()) && x.dtype() != c.dtype ? x.to(c.dtype) : x;
}

std::unique_ptr<Optimizer> sgd(nn::Module& m) {
  ParamGroup g;
  g.params = m.named_parameters();
  g.lr = 0.05;
  g.momentum = 0.9;
  return make_optimizer("sgd", {g});
}

std::vector<Device> cpus(int n, int first = 0) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu_device(first + i));
  return d;
}

// Weights after `steps` SGD steps on one batch of `batch` samples: on one device (devices
// = 1, gpu0 < 0), or DP / BDP over `devices` cpu devices from cpu:first; `micro`
// micro-batches per step.
std::vector<double> dp_weights(const std::string& name, DType dtype, int64_t batch, int devices, int64_t gpu0,
                               int64_t micro, int steps = 2, int first = 0) {
  const ModelConfig c = config_for(name, dtype, first);
  nn::ModulePtr m = build_model(name, c);
  std::vector<nn::ModulePtr> replicas;
  for (int i = 1; i < devices; ++i) {
    ModelConfig ci = c;
    ci.device = cpu_device(first + i);
    ci.seed = c.seed + 100 + uint64_t(i);   // other values: replicate must overwrite them
    replicas.push_back(build_model(name, ci));
  }
  DataParallel dp(m, replicas, cpus(devices, first), gpu0);
  auto opt = sgd(*m);
  GradientAccumulation acc(micro);
  TrainStep step(dp, *opt, {&acc});
  const Tensor x = input_of(name, c, batch), y = make_target(name, c, batch);
  for (int i = 0; i < steps; ++i) step.run(x, y, false);
  return flat_weights(*m);
}

// The same with DDP over `ranks` threads, each taking a contiguous slice of the batch.
std::vector<double> ddp_weights(const std::string& name, DType dtype, int64_t batch, int ranks, int64_t micro,
                                int64_t bucket_cap = kDdpDefaultBucketCap, int steps = 2, int first = 0) {
  const ModelConfig c = config_for(name, dtype);
  const Tensor x = input_of(name, c, batch), y = make_target(name, c, batch);
  std::vector<double> out;
  run_local_ranks(cpus(ranks, first), AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
    CurrentDeviceGuard dev(comm.device());
    ModelConfig mc = c;
    mc.device = comm.device();
    mc.seed = c.seed + uint64_t(comm.rank()) * 7;   // rank 0's weights must be broadcast
    nn::ModulePtr m = build_model(name, mc);
    auto queue = std::make_shared<CommQueue>(comm);
    DistributedDataParallel ddp(*m, queue, bucket_cap);
    auto opt = sgd(*m);
    GradientAccumulation acc(micro);
    DdpStrategy sync(ddp);
    TrainStep step(*m, *opt, {&acc, &sync});
    const int64_t per = batch / ranks;
    const Tensor xr = copy_to_device(x.narrow(0, comm.rank() * per, per), comm.device());
    const Tensor yr = copy_to_device(y.narrow(0, comm.rank() * per, per), comm.device());
    for (int i = 0; i < steps; ++i) step.run(xr, yr, false);
    if (comm.rank() == 0) out = flat_weights(*m);
  });
  return out;
}
}  // namespace

TEST(DataParallelChunks, EvenChunksAreTorchChunk) {
  EXPECT_EQ(even_chunk_sizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(even_chunk_sizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(even_chunk_sizes(5, 4), (std::vector<int64_t>{2, 2, 1}));   // the fourth device idles, as in PyTorch
  EXPECT_EQ(even_chunk_sizes(7, 1), (std::vector<int64_t>{7}));
  try {
    even_chunk_sizes(3, 4);
    FAIL() << "a batch smaller than the devices must be refused";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("batch of 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4 devices"), std::string::npos) << e.what();
  }
}

// The source's worked examples: 3 devices that fit 3 samples each, device 0 only 2.
TEST(DataParallelChunks, SourceWorkedExamples) {
  EXPECT_EQ(balanced_chunk_sizes(8, 3, 2), (std::vector<int64_t>{2, 3, 3}));
  // batch 16 as 2 accumulation steps with gpu0_bsz 4: gpu0_bsz // acc_grad = 2 per micro-batch
  // of 8 -> 2+3+3 twice, 4+6+6 per optimizer step.
  const int64_t batch = 16, acc = 2, gpu0 = 4;
  const std::vector<int64_t> micro = balanced_chunk_sizes(batch / acc, 3, gpu0 / acc);
  EXPECT_EQ(micro, (std::vector<int64_t>{2, 3, 3}));
  std::vector<int64_t> per_step(3);
  for (int64_t k = 0; k < acc; ++k)
    for (size_t i = 0; i < 3; ++i) per_step[i] += micro[i];
  EXPECT_EQ(per_step, (std::vector<int64_t>{4, 6, 6}));
  EXPECT_EQ(balanced_chunk_sizes(9, 3, 2), (std::vector<int64_t>{2, 4, 3}));   // the remainder to the first others
  EXPECT_EQ(balanced_chunk_sizes(7, 3, 0), (std::vector<int64_t>{0, 4, 3}));
  EXPECT_EQ(balanced_chunk_sizes(8, 3, 6), (std::vector<int64_t>{6, 1, 1}));
  EXPECT_THROW(balanced_chunk_sizes(8, 3, 9), ValueError);    // more than the batch
  EXPECT_THROW(balanced_chunk_sizes(8, 3, 7), ValueError);    // nothing left for device 2
}

class DataParallelEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(DataParallelEquivalence, SameWeightsAsOneDeviceWithoutBatchNorm) {
  const std::string name = GetParam();
  const std::vector<double> one = dp_weights(name, DType::f64, 12, 1, -1, 1);
  EXPECT_LT(max_rel_diff(dp_weights(name, DType::f64, 12, 3, -1, 1), one), 1e-12) << "dp on 3 devices";
  EXPECT_LT(max_rel_diff(dp_weights(name, DType::f64, 12, 2, -1, 1), one), 1e-12) << "dp on 2 devices";
  EXPECT_LT(max_rel_diff(dp_weights(name, DType::f64, 12, 3, 2, 1), one), 1e-12) << "bdp 2+5+5";
  EXPECT_LT(max_rel_diff(dp_weights(name, DType::f64, 12, 3, 1, 2), one), 1e-12) << "bdp, 2 micro-batches";
  const std::vector<double> one32 = dp_weights(name, DType::f32, 12, 1, -1, 1);
  EXPECT_LT(max_rel_diff(dp_weights(name, DType::f32, 12, 3, -1, 1), one32), 1e-5) << "float32";
}

TEST_P(DataParallelEquivalence, DdpOverThreadsEqualsOneDevice) {
  const std::string name = GetParam();
  const std::vector<double> one = dp_weights(name, DType::f64, 12, 1, -1, 1);
  EXPECT_LT(max_rel_diff(ddp_weights(name, DType::f64, 12, 2, 1), one), 1e-12) << "2 ranks";
  EXPECT_LT(max_rel_diff(ddp_weights(name, DType::f64, 12, 3, 1), one), 1e-12) << "3 ranks";
  EXPECT_LT(max_rel_diff(ddp_weights(name, DType::f64, 12, 2, 2), one), 1e-12) << "2 ranks, no_sync + 2 micro";
  EXPECT_LT(max_rel_diff(ddp_weights(name, DType::f64, 12, 2, 1, 4096), one), 1e-12) << "4 KiB buckets";
}

// Devices other than 0 take the copy paths an accelerator takes (replicas, scatter, gather,
// per-batch index tensors): DP and BDP on cpu:1..3, and DDP on cpu:2..3 with the
// communicator's accelerator data path (copy and collective kernels, settle points), equal
// one device on cpu:0.
TEST_P(DataParallelEquivalence, OnDevicesOtherThanZero) {
  const std::string name = GetParam();
  const std::vector<double> one = dp_weights(name, DType::f64, 12, 1, -1, 1);
  EXPECT_LT(max_rel_diff(dp_weights(name, DType::f64, 12, 3, -1, 1, 2, 1), one), 1e-12) << "dp on cpu:1..3";
  EXPECT_LT(max_rel_diff(dp_weights(name, DType::f64, 12, 3, 2, 1, 2, 1), one), 1e-12) << "bdp on cpu:1..3";
  LocalCommunicator::use_kernel_path_on_cpu_for_tests(true);
  EXPECT_LT(max_rel_diff(ddp_weights(name, DType::f64, 12, 2, 1, kDdpDefaultBucketCap, 2, 2), one), 1e-12)
      << "ddp on cpu:2..3, accelerator data path";
  LocalCommunicator::use_kernel_path_on_cpu_for_tests(false);
}

INSTANTIATE_TEST_SUITE_P(Models, DataParallelEquivalence, ::testing::Values("mlp", "bert-mini"), [](const auto& info) {
  return info.param == "bert-mini" ? std::string("bert_mini") : info.param;
});

// BatchNorm: running statistics are replica 0's, i.e. those of device 0's chunk.
TEST(DataParallel, BatchNormStatisticsComeFromReplicaZero) {
  const ModelConfig c = config_for("resnet20", DType::f64);
  const Tensor x = input_of("resnet20", c, 6);
  nn::ModulePtr m = build_model("resnet20", c);
  ModelConfig c1 = c;
  c1.device = cpu_device(1);
  DataParallel dp(m, {build_model("resnet20", c1)}, cpus(2));
  dp.train();
  dp(x);
  nn::ModulePtr ref = build_model("resnet20", c);
  ref->train();
  (*ref)(x.narrow(0, 0, 3));
  const auto a = m->named_buffers(), b = ref->named_buffers();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LT(max_rel_diff(a[i].second.to_vector(), b[i].second.to_vector()), 1e-14) << a[i].first;
}

// Device 0 holds the whole batch, the gathered outputs, the reduced gradients and the
// optimizer state: its peak is above the others'; the others are all alike.
TEST(DataParallel, DeviceZeroCarriesTheExtraMemory) {
  reset_allocators();
  std::vector<Device> devs;
  for (int i = 0; i < 3; ++i) devs.push_back(meta_device(i));
  ModelConfig c = small_config("resnet20", meta_device(0));
  nn::ModulePtr m = build_model("resnet20", c);
  std::vector<nn::ModulePtr> reps;
  for (int i = 1; i < 3; ++i) {
    c.device = meta_device(i);
    reps.push_back(build_model("resnet20", c));
  }
  DataParallel dp(m, reps, devs);
  auto opt = sgd(*m);
  c.device = meta_device(0);
  TrainStep step(dp, *opt);
  // Two steps: from the second on, the optimizer state lives on device 0 through the step.
  for (int i = 0; i < 2; ++i) step.run(input_on_device("resnet20", c, 24), target_on_device("resnet20", c, 24), false);
  const int64_t p0 = allocator_for(devs[0]).stat("allocated_bytes.all.peak");
  const int64_t p1 = allocator_for(devs[1]).stat("allocated_bytes.all.peak");
  const int64_t p2 = allocator_for(devs[2]).stat("allocated_bytes.all.peak");
  EXPECT_EQ(p1, p2);
  EXPECT_GT(p0, p1);
  int64_t params = 0;
  for (const Tensor& p : m->parameters()) params += p.numel() * 4;
  EXPECT_GE(p0 - p1, params) << "at least the optimizer's momentum buffers, held through step 2";
  // Replicas' gradients are released after the reduction.
  for (const Tensor& p : reps[0]->parameters()) EXPECT_FALSE(p.grad().defined());
}

// Evaluation's last batch may be smaller than the split: it runs on fewer devices.
TEST(DataParallel, AnEvaluationTailSmallerThanTheDevicesRuns) {
  const ModelConfig c = config_for("mlp", DType::f64);
  nn::ModulePtr m = build_model("mlp", c);
  std::vector<nn::ModulePtr> reps;
  for (int i = 1; i < 4; ++i) {
    ModelConfig ci = c;
    ci.device = cpu_device(i);
    reps.push_back(build_model("mlp", ci));
  }
  const Tensor x = input_of("mlp", c, 2);
  Tensor want;
  {
    NoGradGuard ng;
    want = (*m)(x);
  }
  for (int64_t gpu0 : {int64_t(-1), int64_t(2)}) {
    DataParallel dp(m, reps, cpus(4), gpu0);
    NoGradGuard ng;
    EXPECT_LT(max_rel_diff(dp(x).to_vector(), want.to_vector()), 1e-14);
    GradModeGuard g(true);
    EXPECT_THROW(dp(x), ValueError) << "in training the split is refused";
  }
}

TEST(DataParallel, BadSetUpsAreClearErrors) {
  const ModelConfig c = config_for("mlp", DType::f32);
  nn::ModulePtr m = build_model("mlp", c);
  EXPECT_THROW(DataParallel(m, {}, cpus(2)), ValueError);                        // a replica missing
  EXPECT_THROW(DataParallel(m, {build_model("mlp", c)}, cpus(2)), ValueError);   // replica on the wrong device
  DataParallel dp(m, {}, cpus(1));
  EXPECT_THROW(dp(input_of("mlp", c, 4).reshape({-1})), ShapeError);
}

TEST(Ddp, BucketsRunInReverseOrderFirstOneMiB) {
  run_local_ranks(cpus(2), AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
    ModelConfig c = small_config("mlp", comm.device());
    nn::ModulePtr m = build_model("mlp", c);
    auto queue = std::make_shared<CommQueue>(comm);
    DistributedDataParallel ddp(*m, queue, 256 << 10);
    const auto names = ddp.bucket_parameters();
    const auto params = m->named_parameters();
    ASSERT_FALSE(names.empty());
    EXPECT_EQ(names.front().front(), params.back().first);   // the last parameter goes first
    EXPECT_EQ(names.back().back(), params.front().first);
    int64_t total = 0;
    for (int64_t b : ddp.bucket_bytes()) total += b;
    int64_t want = 0;
    for (const auto& [n, p] : params) want += p.numel() * 4;
    EXPECT_EQ(total, want);
    const auto bytes = ddp.bucket_bytes();
    for (size_t i = 0; i + 1 < bytes.size(); ++i) {   // every bucket but the last reached its cap
      const int64_t cap = i == 0 ? 256 << 10 : 256 << 10;
      EXPECT_GE(bytes[i], cap) << "bucket " << i;
    }
  });
}

// PyTorch keeps one open bucket per dtype: model.half()'s float32 BatchNorm parameters,
// interleaved with float16 convolutions, do not cut the float16 buckets (resnet20: 0.54 MB
// of float16 weights -> one float16 bucket under the first 1 MiB cap, one float32 bucket).
TEST(Ddp, BucketsAreGatheredPerDtypeAsPyTorchDoes) {
  run_local_ranks(cpus(1), AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
    ModelConfig c = small_config("resnet20", comm.device());
    nn::ModulePtr m = build_model("resnet20", c);
    half_model(*m, DType::f16);
    auto queue = std::make_shared<CommQueue>(comm);
    DistributedDataParallel ddp(*m, queue);
    const auto names = ddp.bucket_parameters();
    ASSERT_EQ(names.size(), 2u);
    std::map<std::string, DType> dtype_of;
    int64_t f16_bytes = 0, f32_bytes = 0;
    for (const auto& [n, t] : m->named_parameters()) {
      dtype_of[n] = t.dtype();
      (t.dtype() == DType::f16 ? f16_bytes : f32_bytes) += t.numel() * int64_t(dtype_size(t.dtype()));
    }
    for (const auto& bucket : names)
      for (const std::string& n : bucket) EXPECT_EQ(dtype_of[n], dtype_of[bucket.front()]) << n;
    // the bucket holding the last registered parameter (the fc's, float16) goes first
    EXPECT_EQ(names.front().front(), m->named_parameters().back().first);
    const auto bytes = ddp.bucket_bytes();
    EXPECT_EQ(bytes[0], dtype_of[names[0].front()] == DType::f16 ? f16_bytes : f32_bytes);
    EXPECT_EQ(bytes[0] + bytes[1], f16_bytes + f32_bytes);
  });
}

TEST(Ddp, ParametersAndBuffersComeFromRankZero) {
  std::vector<std::vector<double>> w(3);
  run_local_ranks(cpus(3), AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
    ModelConfig c = small_config("resnet20", comm.device());
    c.seed = 40 + uint64_t(comm.rank());
    nn::ModulePtr m = build_model("resnet20", c);
    for (auto& [n, b] : m->named_buffers())
      if (b.dtype() == DType::f32) b.fill_(double(comm.rank()));
    DistributedDataParallel ddp(*m, std::make_shared<CommQueue>(comm));
    std::vector<double> v = flat_weights(*m);
    for (auto& [n, b] : m->named_buffers())
      if (b.dtype() == DType::f32) v.push_back(b.to_vector()[0]);
    w[size_t(comm.rank())] = v;
  });
  EXPECT_EQ(w[1], w[0]);
  EXPECT_EQ(w[2], w[0]);
}

TEST(Ddp, ARankWithAnotherModelFailsOnEveryRankWithoutHanging) {
  std::vector<std::string> errors(3);
  EXPECT_THROW(run_local_ranks(cpus(3), AllReduceAlgo::ring,
                               [&](LocalCommunicator& comm) {
                                 nn::LayerOptions o;
                                 o.device = comm.device();
                                 nn::Linear m(4, comm.rank() == 2 ? 5 : 3, true, o);
                                 try {
                                   DistributedDataParallel ddp(m, std::make_shared<CommQueue>(comm));
                                 } catch (const ValueError& e) {
                                   errors[size_t(comm.rank())] = e.what();
                                   throw;
                                 }
                               },
                               std::chrono::seconds(20)),
               ValueError);
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("rank 2's model differs from rank 0's"), std::string::npos) << e;
    EXPECT_NE(e.find("25 elements"), std::string::npos) << e;   // 4x5 + 5 against 4x3 + 3
    EXPECT_NE(e.find("15 elements"), std::string::npos) << e;
  }
}

TEST(Ddp, NoSyncKeepsGradientsLocalAndStatsCountSyncedBackwards) {
  run_local_ranks(cpus(2), AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
    ModelConfig c = config_for("mlp", DType::f64);
    c.device = comm.device();
    nn::ModulePtr m = build_model("mlp", c);
    DistributedDataParallel ddp(*m, std::make_shared<CommQueue>(comm));
    Tensor x = input_of("mlp", c, 4 + 4 * comm.rank());   // different data per rank
    ddp.prepare_for_backward(/*sync=*/false);
    task_loss((*m)(x), make_target("mlp", c, x.size(0))).backward();
    ddp.finalize_backward();
    const std::vector<double> local = m->parameters()[0].grad().to_vector();
    std::vector<double> other(local.size());
    Tensor g = m->parameters()[0].grad().clone();
    comm.all_reduce(g, ReduceOp::sum);   // the peers' local gradients differ
    EXPECT_GT(max_rel_diff(g.to_vector(), local), 0.1);
    EXPECT_EQ(ddp.stats().synced_backwards, 0);
    ddp.prepare_for_backward(true);
    task_loss((*m)(x), make_target("mlp", c, x.size(0))).backward();
    ddp.finalize_backward();
    EXPECT_EQ(ddp.stats().synced_backwards, 1);
    EXPECT_GT(ddp.stats().allreduce_seconds, 0.0);
    EXPECT_GE(ddp.stats().hidden_share(), 0.0);
    EXPECT_LE(ddp.stats().hidden_share(), 1.0);
  });
}

// DistributedSampler: disjoint shards padded to equal length; the ranks' batch t together
// is the unsharded loader's batch t of world x batch; set_epoch reshuffles.
TEST(DistributedSampler, ShardsArePaddedDisjointAndMatchTheGlobalBatch) {
  SyntheticImageDataset ds({1, 2, 2}, 10, 3, 1);
  const int world = 3;
  std::vector<std::vector<int64_t>> shards;
  for (int r = 0; r < world; ++r) {
    DataLoader l(ds, 2, true, false, 7, 0);
    l.set_shard(r, world);
    EXPECT_EQ(l.shard_size(), 4);
    EXPECT_EQ(l.batches_per_epoch(), 2);
    shards.push_back(l.epoch_order(0));
    EXPECT_NE(l.epoch_order(1), l.epoch_order(0)) << "set_epoch / the next epoch reshuffles";
  }
  DataLoader whole(ds, 6, true, false, 7, 0);
  std::vector<int64_t> order = whole.epoch_order(0);
  std::multiset<int64_t> seen;
  for (const auto& s : shards) seen.insert(s.begin(), s.end());
  EXPECT_EQ(seen.size(), 12u);
  for (int64_t i = 0; i < 10; ++i) EXPECT_GE(seen.count(i), 1u);
  EXPECT_EQ(seen.count(order[0]), 2u);   // the padding repeats the order's first indices
  EXPECT_EQ(seen.count(order[1]), 2u);
  for (size_t j = 0; j < 4; ++j)         // position r + world * j of the (padded) global order
    for (int r = 0; r < world; ++r) EXPECT_EQ(shards[size_t(r)][j], order[(size_t(r) + world * j) % 10]);
  DataLoader bad(ds, 5, true, true, 7, 0);
  EXPECT_THROW(bad.set_shard(0, 3), ValueError);   // 5 per rank from shards of 4
  EXPECT_THROW(whole.set_shard(3, 3), ValueError);
}
