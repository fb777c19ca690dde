// parallel_train.cpp — the --parallel set-ups of `oomlab train` (parallel_train.h).
#include "experiments/train/parallel_train.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "engine/core/error.h"
#include "engine/core/thread_budget.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/checkpoint_plan.h"
#include "engine/parallel/comm_queue.h"
#include "engine/parallel/comm_registry.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/local_comm.h"
#include "engine/parallel/rank_env.h"
#include "engine/parallel/sync_batchnorm.h"
#include "engine/train/channels_last.h"
#include "engine/train/half_mode.h"
#include "engine/train/results.h"
#include "engine/train/trainer.h"
#include "experiments/launch/rank_launcher.h"

namespace oomlab {
using json = nlohmann::json;

namespace {
// The activation-checkpointing segments the model was planned with (results config).
void record_segments(TrainerConfig& t, nn::Module& m) {
  t.config["checkpoint_segments"] = applied_checkpoint_segments(m);
}

bool under_launcher() { return discover_rank({}, current_environment()).source != "single"; }

std::string ddp_backend(const RunSpec& c) {
  if (!c.backend.empty()) return c.backend;
  return c.device.type == DeviceType::cuda ? "nccl" : "gloo";
}
}  // namespace

std::optional<int> self_launch_ddp(const RunSpec& c, const std::vector<std::string>& args) {
  if (c.parallel != ParallelMode::ddp || c.backend.empty() || c.backend == "local" || under_launcher())
    return std::nullopt;
  std::vector<std::string> job = {"train"};
  job.insert(job.end(), args.begin(), args.end());
  return launch_local_job(c.backend, int(c.devices), job);
}

void check_parallel_config(const RunSpec& c) {
  const int64_t n = c.devices;
  OOMLAB_CHECK(n <= int64_t(kMaxDeviceIndex - c.device.index), "--devices ", n, " from ", c.device.str(),
               " goes past the last logical device index ", kMaxDeviceIndex - 1);
  if (c.parallel == ParallelMode::none) {
    OOMLAB_CHECK(n == 1, "--devices ", n, " needs --parallel dp, bdp, ddp or fsdp");
    return;
  }
  const int64_t step = c.batch * c.accumulate;
  if (c.parallel == ParallelMode::dp || c.parallel == ParallelMode::bdp) {
    OOMLAB_CHECK(!c.half, "--half with --parallel ", parallel_mode_name(c.parallel),
                 " is not supported (the replicas stay float32)");
    if (c.parallel == ParallelMode::dp)
      OOMLAB_CHECK(c.batch >= n, "--parallel dp: a batch of ", c.batch, " samples cannot be split over ", n,
                   " devices (DataParallel needs --batch >= --devices)");
    if (c.parallel == ParallelMode::bdp) {
      OOMLAB_CHECK(c.gpu0_bsz >= 0, "--parallel bdp needs --gpu0-bsz B0 (device 0's samples per step)");
      OOMLAB_CHECK(c.gpu0_bsz <= step, "--gpu0-bsz ", c.gpu0_bsz, " is larger than the ", step,
                   " samples of a step (--batch ", c.batch, " x --accumulate ", c.accumulate, ")");
      balanced_chunk_sizes(c.batch, n, c.gpu0_bsz / c.accumulate);   // the others get at least one each
    }
    return;
  }
  // ddp
  check_zero_supported(c);
  OOMLAB_CHECK(c.on_oom == OnOom::raise, "--on-oom ", on_oom_name(c.on_oom),
               " with --parallel ddp is not supported (every rank "
               "would have to agree on skipping or splitting)");
  if (under_launcher()) {
    const int world = discover_rank({}, current_environment()).world_size;
    OOMLAB_CHECK(n == 1 || n == world, "--devices ", n, " under a launcher that started ", world,
                 " ranks: the launcher starts the ranks (one device each)");
    require_comm_backend(ddp_backend(c), "--backend");
  } else if (!c.backend.empty() && c.backend != "local") {   // self_launch_ddp starts the processes
    require_comm_backend(c.backend, "--backend");
  }
}

std::vector<Device> parallel_devices(const RunSpec& c) {
  if (c.parallel == ParallelMode::ddp && under_launcher()) {
    const RankInfo info = discover_rank({}, current_environment());
    return {c.device.type == DeviceType::cuda ? Device{DeviceType::cuda, c.device.index + info.local_rank} : c.device};
  }
  std::vector<Device> out;
  for (int64_t i = 0; i < c.devices; ++i) out.push_back(Device{c.device.type, c.device.index + int(i)});
  return out;
}

namespace {
json train_dp(const RunSpec& c, TrainerConfig t, const ModelBuilder& build, const Dataset& train_set,
              const Dataset& test_set) {
  const std::vector<Device> devices = parallel_devices(c);
  nn::ModulePtr model = build(devices[0]);
  record_segments(t, *model);
  std::vector<nn::ModulePtr> replicas;
  for (size_t i = 1; i < devices.size(); ++i) replicas.push_back(build(devices[i]));
  if (c.channels_last)   // the replicas laid out as the module (the trainer converts the module)
    for (nn::ModulePtr& r : replicas) channels_last_model(*r);
  const int64_t gpu0 = c.parallel == ParallelMode::bdp ? c.gpu0_bsz / c.accumulate : -1;   // per micro-batch
  DataParallel dp(model, replicas, devices, gpu0);
  t.device = devices[0];
  t.devices = devices;
  t.forward_module = &dp;
  json results = train_model(*model, train_set, test_set, t);
  results["metrics"]["data_parallel"] = {{"devices", devices.size()},
                                         {"chunk_sizes", dp.chunk_sizes(c.batch)},
                                         {"gpu0_bsz", c.parallel == ParallelMode::bdp ? json(c.gpu0_bsz) : json()}};
  return results;
}

// One DDP rank: its model on its device, SyncBN if asked, the reducer, the trainer.
json train_rank(const RunSpec& c, TrainerConfig t, const ModelBuilder& build, const Dataset& train_set,
                const Dataset& test_set, Communicator& comm) {
  auto queue = std::make_shared<CommQueue>(comm);
  nn::ModulePtr model = build(comm.device());
  record_segments(t, *model);
  if (c.sync_bn)
    convert_sync_batchnorm(*model, [queue](const Tensor& x) {
      queue->run([&](Communicator& cm) { cm.all_reduce(x, ReduceOp::sum); });
    });
  if (c.half) half_model(*model, DType::f16);   // before the reducer, as model.half() before DDP(model)
  // and model.to(memory_format=torch.channels_last): ZeRO's shards hold the weights as laid out
  if (c.channels_last) channels_last_model(*model);
  const LrGroups groups = c.lr_groups;   // ZeRO cuts its shards by the optimizer groups
  DistributedDataParallel ddp(*model, queue, c.bucket_cap, c.zero_stage, c.zero_stage > 0 && c.master_weights,
                              c.offload, [groups](const std::string& name) { return lr_group_of(groups, name); });
  t.device = comm.device();
  t.devices = {comm.device()};
  t.ddp = &ddp;
  json results = train_model(*model, train_set, test_set, t);
  results["metrics"]["ddp"]["sync_bn"] = c.sync_bn;
  results["metrics"]["ddp"]["bucket_cap"] = c.bucket_cap;
  results["metrics"]["ddp"]["zero_stage"] = c.zero_stage;
  results["metrics"]["ddp"]["offload"] = zero_offload_name(c.offload);
  if (c.offload != ZeroOffload::none)   // the host's allocator: every rank of this process offloads there
    results["metrics"]["ddp"]["offload_host_peak_bytes"] =
        allocator_for(offload_host(comm.device())).stat("allocated_bytes.all.peak");
  return results;
}
}  // namespace

json train_parallel(const RunSpec& c, TrainerConfig t, const ModelBuilder& build, const Dataset& train_set,
                    const Dataset& test_set) {
  check_parallel_config(c);
  t.config["parallel"] = parallel_mode_name(c.parallel);
  t.config["devices"] = c.devices;
  t.config["global_batch"] = c.batch;   // samples per micro-batch over all devices / ranks (ddp: below)
  if (c.parallel == ParallelMode::none) {
    nn::ModulePtr model = build(c.device);
    record_segments(t, *model);
    return train_model(*model, train_set, test_set, t);
  }
  if (c.parallel == ParallelMode::dp || c.parallel == ParallelMode::bdp) {
    t.config["gpu0_bsz"] = c.gpu0_bsz;
    return train_dp(c, t, build, train_set, test_set);
  }
  t.config["bucket_cap"] = c.bucket_cap;
  t.config["sync_bn"] = c.sync_bn;
  t.config["zero"] = c.zero_stage;
  t.config["offload"] = zero_offload_name(c.offload);
  if (under_launcher()) {
    RankInfo info = discover_rank({}, current_environment());
    info.timeout = std::chrono::milliseconds(int64_t(c.timeout_s * 1000));   // a missing peer ends the run
    const std::string backend = ddp_backend(c);
    t.config["backend"] = backend;
    t.config["world_size"] = info.world_size;
    t.config["global_batch"] = c.batch * info.world_size;
    std::unique_ptr<Communicator> comm = make_communicator(backend, info, parallel_devices(c)[0]);
    return train_rank(c, t, build, train_set, test_set, *comm);
  }
  const std::vector<Device> devices = parallel_devices(c);
  t.config["backend"] = "local";
  t.config["world_size"] = int64_t(devices.size());
  t.config["global_batch"] = c.batch * int64_t(devices.size());
  json rank0;
  std::mutex build_mu;   // models are built one at a time
  ModelBuilder build_one = [&](Device d) {
    std::lock_guard<std::mutex> lk(build_mu);
    return build(d);
  };
  const int budget = std::max(1, hardware_threads() / int(devices.size()));
  run_local_ranks(devices, AllReduceAlgo::ring, [&](LocalCommunicator& comm) {
    ThreadBudgetGuard guard(budget);
    CurrentDeviceGuard current(comm.device());
    json r = train_rank(c, t, build_one, train_set, test_set, comm);
    if (comm.rank() == 0) rank0 = std::move(r);
  });
  rank0["context"] = results_context(devices);
  rank0["memory"] = memory_json(devices, "the whole run");
  return rank0;
}

}  // namespace oomlab
