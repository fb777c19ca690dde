// test_graph_parallel.cpp — an imported graph under DataParallel, BalancedDataParallel and
// DDP (engine/parallel): a toy GPT-2 export (tests/fixtures/graphs/tiny_gpt2.json: causal
// attention, layer norm, Conv1D linears, a tied head, next-token loss) trained two SGD steps
// in float64 on one device, DP / BDP over logical CPU devices and DDP over rank threads gives
// the same weights to 1e-12: the graph's replicas and slices compute the one-device step; so
// do ZeRO stages 1-3 over rank threads (stage 3 gathers per run of a module's nodes).
// ctest tier: ranks
#include <gtest/gtest.h>

#include "engine/optim/optimizer.h"
#include "engine/parallel/comm_queue.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/local_comm.h"
#include "engine/train/ddp_strategy.h"
#include "engine/train/train_step.h"
#include "models/model_zoo.h"
#include "tests/zoo_test_util.h"

using namespace oomlab;
using namespace oomlab::test;

namespace {
const std::string kModel = "graph:" + std::string(OOMLAB_SOURCE_DIR) + "/tests/fixtures/graphs/tiny_gpt2.json";

ModelConfig config(Device d, uint64_t seed) {
  ModelConfig c;
  c.device = d;
  c.dtype = DType::f64;
  c.seq_len = 16;
  c.seed = seed;
  return c;
}

Tensor ids(int64_t batch) {
  std::vector<int64_t> v(size_t(batch * 16));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 37 + 11) % 64);
  return Tensor::from_vector_i64(v, {batch, 16});
}

std::unique_ptr<Optimizer> sgd(nn::Module& m) {
  ParamGroup g;
  g.params = m.named_parameters();
  g.lr = 0.1;
  return make_optimizer("sgd", {g});
}

std::vector<double> dp_weights(int devices, int64_t gpu0) {
  nn::ModulePtr m = build_model(kModel, config(cpu_device(0), 1));
  std::vector<nn::ModulePtr> replicas;
  std::vector<Device> ds = {cpu_device(0)};
  for (int i = 1; i < devices; ++i) {
    replicas.push_back(build_model(kModel, config(cpu_device(i), 50 + uint64_t(i))));   // replicate overwrites
    ds.push_back(cpu_device(i));
  }
  DataParallel dp(m, replicas, ds, gpu0);
  auto opt = sgd(*m);
  TrainStep step(dp, *opt, {});
  const Tensor x = ids(12), y = Tensor::zeros({12}, DType::i64);
  for (int s = 0; s < 2; ++s) step.run(x, y, false);
  return flat_weights(*m);
}

std::vector<double> ddp_weights(int ranks, int zero = 0) {
  const Tensor x = ids(12), y = Tensor::zeros({12}, DType::i64);
  std::vector<Device> ds;
  for (int i = 0; i < ranks; ++i) ds.push_back(cpu_device(i));
  std::vector<double> out;
  run_local_ranks(ds, AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
    CurrentDeviceGuard dev(comm.device());
    nn::ModulePtr m = build_model(kModel, config(comm.device(), 1 + uint64_t(comm.rank()) * 7));   // broadcast from 0
    auto queue = std::make_shared<CommQueue>(comm);
    DistributedDataParallel ddp(*m, queue, kDdpDefaultBucketCap, zero);
    ParamGroup g;   // ZeRO: the optimizer updates this rank's shards
    g.params = ddp.optimizer_parameters();
    g.lr = 0.1;
    auto opt = make_optimizer("sgd", {g});
    DdpStrategy sync(ddp);
    TrainStep step(*m, *opt, {&sync});
    const int64_t per = 12 / ranks;
    const Tensor xr = copy_to_device(x.narrow(0, comm.rank() * per, per), comm.device());
    const Tensor yr = copy_to_device(y.narrow(0, comm.rank() * per, per), comm.device());
    for (int s = 0; s < 2; ++s) step.run(xr, yr, false);
    ddp.materialize_parameters();   // ZeRO-3: every rank gathers (a collective)
    if (comm.rank() == 0) out = flat_weights(*m);
  });
  return out;
}
}  // namespace

TEST(GraphParallel, DpBdpAndDdpEqualOneDevice) {
  const std::vector<double> one = dp_weights(1, -1);
  nn::ModulePtr fresh = build_model(kModel, config(cpu_device(0), 1));
  EXPECT_GT(max_rel_diff(one, flat_weights(*fresh)), 1e-4) << "the steps trained (not a vacuous comparison)";
  EXPECT_LT(max_rel_diff(dp_weights(3, -1), one), 1e-12) << "dp on 3 devices";
  EXPECT_LT(max_rel_diff(dp_weights(3, 2), one), 1e-12) << "bdp 2+5+5";
  EXPECT_LT(max_rel_diff(ddp_weights(2), one), 1e-12) << "ddp, 2 ranks";
  EXPECT_LT(max_rel_diff(ddp_weights(3), one), 1e-12) << "ddp, 3 ranks";
  // ZeRO-3 (FSDP's FULL_SHARD): each module's run of nodes gathers the parameters it reads,
  // the tied head's read of the token embedding included
  for (int zero : {1, 2, 3}) EXPECT_LT(max_rel_diff(ddp_weights(2, zero), one), 1e-12) << "zero " << zero;
  EXPECT_LT(max_rel_diff(ddp_weights(3, 3), one), 1e-12) << "zero 3, 3 ranks";
}
