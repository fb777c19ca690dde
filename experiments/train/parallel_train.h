// parallel_train.h — `oomlab train --parallel none|dp|bdp|ddp`: the data-parallel set-ups
// around the engine's trainer (engine/parallel: DataParallel, DistributedDataParallel,
// SyncBatchNorm; engine/train: the trainer's DDP mode).
//  * dp / bdp: one process, --devices N logical devices from --device's index on
//    (--device meta --devices 4: meta:0..3); the model on the first, a replica on each
//    other; --batch is the global (micro-)batch, scattered over the devices; bdp gives
//    device 0 --gpu0-bsz samples of each optimizer step (gpu0_bsz / --accumulate per
//    micro-batch, the source's rule).
//  * ddp without a launcher: N ranks as threads of this process, each on its own logical
//    device, over the local communicator (ring); with --backend gloo|mpi|nccl and no launcher,
//    --devices rank processes are started as allreduce-bench does (self_launch_ddp); with a launcher (mpirun, torchrun
//    variables, srun: engine/parallel/rank_env.h) this process is one rank on --device
//    (cuda: index + local rank) over --backend (gloo, mpi, nccl). --batch is per rank
//    (PyTorch's DistributedSampler + per-process DataLoader). Results: rank 0's, with
//    every local device's memory; only rank 0 writes files.
//  * Bad combinations are ValueErrors naming the flags, before any work (check_parallel_config).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/nn/module.h"
#include "engine/train/trainer.h"
#include "experiments/train/train_command.h"

namespace oomlab {

void check_parallel_config(const RunSpec& c);
// The logical devices this process trains on (all ranks' for ddp threads; this rank's
// under a launcher).
std::vector<Device> parallel_devices(const RunSpec& c);

// ddp with --backend gloo|mpi|nccl outside any launcher: starts --devices rank processes of
// `oomlab train <args>` (rank_launcher.h: mpirun, or torchrun-style children) and returns the
// job's exit status; nullopt when this process should train itself.
std::optional<int> self_launch_ddp(const RunSpec& c, const std::vector<std::string>& args);

using ModelBuilder = std::function<nn::ModulePtr(Device)>;
// Builds the model(s), wraps them as c.parallel says and runs train_model; `t` is the
// single-device trainer config (its device is replaced per rank).
nlohmann::json train_parallel(const RunSpec& c, TrainerConfig t, const ModelBuilder& build,
                              const Dataset& train_set, const Dataset& test_set);

}  // namespace oomlab
