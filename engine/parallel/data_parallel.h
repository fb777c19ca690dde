// data_parallel.h — torch.nn.DataParallel and the source's BalancedDataParallel on the
// logical devices of one process (meta:0..N-1, cpu:0..N-1, cuda:0..N-1 on one or more GPUs).
// Each forward, as PyTorch's DataParallel.forward:
//   replicate: the module's parameters and buffers are copied from device 0 into the
//     replicas on devices 1..N-1 (Broadcast; the replicas' storage lives on their devices);
//   scatter:   the batch (on device 0) is cut along dim 0 and each chunk copied to its device;
//   parallel_apply: every replica runs its chunk on its own thread (grad mode and autocast
//     carried over, as PyTorch's parallel_apply does);
//   gather:    the outputs are copied to device 0 and concatenated there (the loss follows).
// Backward of the gathered output (one autograd node, "DataParallelGather"): its gradient is
// cut and copied back to the devices, every replica runs its backward on its own thread, and
// each parameter's gradient is the sum of the replicas' (ReduceAddCoalesced): the other
// devices' gradients are copied to device 0 and added there, then set as the module's .grad
// once (grad-ready hooks fire once, with the reduced gradient). The replicas' gradients are
// released after the reduction. BatchNorm running statistics are those replica 0 (the
// module itself) computed on its chunk; the other replicas' are overwritten next step.
// Device 0 therefore holds, beyond its chunk's activations: the whole input batch, the
// gathered outputs and the loss, the reduced gradients and the optimizer state — its own
// allocator's stats show them (the T6 claim the experiments measure).
// Chunking:
//  * DataParallel: torch.chunk(batch, N): chunks of ceil(B / N) samples, the last smaller;
//    when that makes fewer chunks than devices (B = 5 on 4 devices: 2+2+1) the last devices
//    idle, as in PyTorch. B < N is refused in training (ValueError naming both); without
//    grad (evaluation's last batch) it runs on min(B, N) devices, also for balanced DP.
//  * Balanced (gpu0_bsz >= 0): device 0 gets gpu0_bsz samples, the others share the rest
//    evenly, the first ones one more when it does not divide (the source's get_chunk_size:
//    3 devices, B = 8, gpu0_bsz 2 -> 2+3+3). With gradient accumulation the caller passes
//    gpu0_bsz / accumulate per micro-batch (the source's `gpu0_bsz // acc_grad`: batch 16
//    in 2 micro-batches with gpu0_bsz 4 -> 2+3+3 twice = 4+6+6). gpu0_bsz > B, or fewer than
//    one sample for each other device, is refused. (The source's code silently falls back to
//    even chunks when gpu0_bsz >= the others' share; here device 0 gets what is asked.)
// Counted work (set_count_work, for the planner's time model): each device thread's part of
// the parallel phases (its replica's forward and backward) under a FlopCounter of its own,
// and the bytes that thread allocated on its device; what the calling thread runs (replicate,
// scatter, gather, the loss, the reduction, the optimizer) stays in the caller's counter.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/core/flop_counter.h"
#include "engine/core/thread_budget.h"
#include "engine/nn/module.h"

namespace oomlab {

std::vector<int64_t> even_chunk_sizes(int64_t batch, int64_t devices);
std::vector<int64_t> balanced_chunk_sizes(int64_t batch, int64_t devices, int64_t gpu0_bsz);

// One device thread's counted work since the last reset (see the header).
struct DeviceWork {
  double flops[kNumMatrixKinds][kNumDTypes] = {};
  int64_t launches = 0, allocated_bytes = 0;
};

class DataParallel : public nn::Module {
 public:
  // `module` lives on devices[0]; replicas[i - 1] is a module of the same architecture on
  // devices[i] (its values are overwritten every forward). gpu0_bsz < 0: even chunks.
  DataParallel(nn::ModulePtr module, std::vector<nn::ModulePtr> replicas, std::vector<Device> devices,
               int64_t gpu0_bsz = -1);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return gpu0_bsz_ >= 0 ? "BalancedDataParallel" : "DataParallel"; }
  std::vector<int64_t> chunk_sizes(int64_t batch) const;
  nn::Module& module() { return *module_; }
  const std::vector<Device>& devices() const { return devices_; }
  int64_t gpu0_bsz() const { return gpu0_bsz_; }
  // On: from now, every device thread's work is counted into device_work()[i] (zeroed).
  void set_count_work(bool on);
  const std::vector<DeviceWork>& device_work() const { return work_; }

 private:
  // forward's phases (PyTorch's names): replicate, scatter, parallel_apply, gather; and the
  // gather's backward (the gradient back to the devices, their backwards, ReduceAddCoalesced).
  std::vector<int64_t> split_sizes(int64_t batch, bool grad) const;
  void replicate(size_t n);
  void counted(size_t i, const std::function<void()>& run);   // run on device i's thread
  std::vector<Tensor> scatter(const Tensor& x, const std::vector<int64_t>& sizes);
  Tensor gather(const std::vector<Tensor>& outs, const std::vector<int64_t>& sizes);
  size_t index_of(Device d) const;
  std::vector<Tensor> backward_replicas(const Tensor& g, std::vector<Tensor>& outs, const std::vector<int64_t>& sizes,
                                        const std::vector<Device>& used, const std::vector<Tensor>& params);
  std::vector<Tensor> reduce_replica_grads(std::vector<Tensor> reduced, size_t n, size_t nparams);

  nn::ModulePtr module_;
  std::vector<nn::ModulePtr> replicas_;   // [0] = module_
  std::vector<Device> devices_;
  int64_t gpu0_bsz_;
  bool count_work_ = false;
  std::vector<DeviceWork> work_;
  // While the wrapper lives, BLAS keeps the replicas' share of the cores (cores / N) between
  // the parallel phases too: a limit that rose for the loss and fell again each phase left
  // OpenBLAS's spinning worker threads competing with the replicas (2.3x slower steps of
  // ResNet-20 on 2 cpu devices, measured).
  std::unique_ptr<BlasThreadsGuard> blas_;
};

// A copy of `t` on `device` (no autograd). Same-type devices of different index copy
// directly (cpu memory, cuda UVA); meta copies allocate only.
Tensor copy_to_device(const Tensor& t, Device device);

}  // namespace oomlab
