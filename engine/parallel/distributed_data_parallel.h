// distributed_data_parallel.h — torch.nn.parallel.DistributedDataParallel's reducer: one
// model replica per rank, gradients averaged across ranks in buckets during backward.
// Contracts (PyTorch's behaviour; every collective goes through the rank's CommQueue):
//  * Construction verifies that every rank has the same model (parameter count, names,
//    shapes and dtypes: one all_gather of a signature; every rank throws the same
//    ValueError naming the first rank that differs from rank 0, so none hangs), then
//    broadcasts all parameters and buffers from rank 0.
//  * Buckets: the parameters that require grad, in reverse registration order (the order
//    backward produces their gradients), gathered per dtype (PyTorch's
//    _compute_bucket_assignment_by_size: one open bucket per dtype, so a half model's
//    float32 BatchNorm parameters do not cut its float16 buckets) and closed once they hold
//    >= the cap: each dtype's first bucket 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES), its
//    others bucket_cap_bytes (25 MiB by default, --bucket-cap); buckets ordered by their
//    first parameter. Each bucket is a flat
//    buffer on the rank's device, allocated once under the frame "DistributedDataParallel/
//    buckets" (DDP's known cost of one extra gradient copy), visible in the device's stats.
//  * prepare_for_backward(sync): sync = false is no_sync() (gradient accumulation's
//    micro-batches but the last): gradients only accumulate locally. With sync, each
//    parameter's grad-ready hook copies its (accumulated) gradient into its bucket; a bucket
//    whose parameters are all ready is all-reduced (avg) on the communication thread as
//    soon as every earlier bucket was launched (buckets go out in order), overlapping the
//    rest of backward.
//  * finalize_backward(): waits for every bucket and copies the averaged values back into
//    the parameters' .grad. A parameter that got no gradient is a ValueError naming it
//    (PyTorch's find_unused_parameters is not supported).
//  * broadcast_buffers(): buffers (BatchNorm running statistics) from rank 0, called before
//    every forward (PyTorch's broadcast_buffers=True).
//  * stats(): synchronised backwards, all-reduce seconds (each bucket's time on the
//    communication thread), exposed seconds (finalize's wait after backward ended) and the
//    share hidden behind backward: 1 - exposed / all-reduce.
//  * ZeRO (zero_stage 1 or 2; Rajbhandari et al. 2020, ddp_zero.cpp): the same buckets, each
//    padded to world x shard elements; rank r owns elements [r x shard, (r+1) x shard) of
//    every bucket, and the optimizer updates only those (optimizer_parameters(): one flat
//    "zero.shard<b>" tensor per bucket, in the bucket's dtype, or float32 for a 16-bit
//    bucket with master_weights: the masters, sharded): optimizer state / world. A bucket's
//    buffer exists only while it is reduced (allocated when its first gradient is ready,
//    freed once its reduce_scatter (avg) is done: waited for when the next bucket is
//    launched, so at most two are alive, the last one at finalize). Stage 1 keeps the full
//    gradients, reduces on the last micro-batch only (as no_sync) and writes each reduced
//    slice back into them; stage 2 frees each gradient once it is in its bucket, reduces
//    every micro-batch (DeepSpeed's stage 2 under accumulation) and sums the slices in a
//    bucket-dtype buffer of shard elements. prepare_shard_grads() before the optimizer step
//    gives each shard its gradient (in the shard's dtype); gather_parameters() after it
//    frees those, then all-gathers every bucket's updated shards (in the bucket's dtype) into
//    the parameters, one bucket-sized buffer at a time. zero_model_grads() clears the
//    module's gradients (the optimizer's zero_grad only sees the shards). Reduce-scatter +
//    all-gather move the bytes of DDP's all-reduce (the paper's 2 Psi for stages 1 and 2).
//  * ZeRO stage 3 (FSDP's FULL_SHARD, ddp_zero3.cpp): the units are each module's own
//    parameters (one per dtype), in reverse module order, each unit's parameters views of
//    one storage of world x shard elements that exists only while the unit is gathered; a
//    rank keeps its shard of every unit (param_shard; the float32 master beside it with
//    master_weights). Module call hooks (engine/nn/module_hooks.h, on the constructing
//    thread; an imported graph calls them around each run of a module's nodes) all-gather a
//    module's units before its forward and free them after it; the
//    output gets a pre-backward node that gathers them again when backward reaches it; once
//    every gradient of a unit is ready the unit is freed and its gradients reduced as in
//    stage 2 (with checkpointing: a checkpointed block's output is not aliased, and a
//    segment's re-run keeps what it gathers until then). Prefetch (FSDP's forward_prefetch
//    and backward_prefetch=BACKWARD_PRE): from the second forward on, a module's hook also
//    starts the all-gather of the next module's units in the first forward's call order,
//    and a pre-backward node that of the module before it (unless its gradients are done),
//    on the communication thread, overlapping this module's work: one unit more alive; a
//    prefetched unit left unused is released when backward ends. After the optimizer step the
//    shards stay shards (no all-gather). A unit holds each parameter in its memory order
//    (zero_flat: a channels_last weight stays channels_last). Parameters shared by two
//    modules, and parameters neither contiguous nor channels_last, are refused.
//    materialize_parameters() gathers every unit for good (reading the weights).
//  * ZeRO with parameter groups (group_of): buckets and units are cut per (dtype, group),
//    each shard belongs to its parameters' group (zero_shard_groups), and the consolidated
//    checkpoint's JSON lists each group's parameters as DDP's optimizer does.
//  * ZeRO-Offload (offload, with a ZeRO stage; Ren et al. 2021, DeepSpeed's offload_optimizer
//    and ZeRO-Infinity's offload_param): optimizer: each shard the optimizer updates (and so
//    its state, which the optimizer allocates beside it) lives on the host (offload_host),
//    its gradient goes there (stages 2 and 3: each bucket's reduced slice as soon as it is
//    reduced, summed there over micro-batches; stage 1: before the step) and the updated
//    shard back to the device for the all-gather (stage 3: into the parameters' device
//    shard); params (stage 3): the
//    parameters' shards live on the host too, copied to the device for each gather. The
//    copies are plain, synchronous ones: no pinned buffers, no copy stream yet.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/nn/module.h"
#include "engine/nn/module_hooks.h"
#include "engine/parallel/comm_queue.h"
#include "engine/parallel/zero_offload.h"

namespace oomlab {

inline constexpr int64_t kDdpDefaultBucketCap = int64_t(25) << 20;

inline constexpr int64_t kDdpFirstBucketCap = int64_t(1) << 20;

struct DdpStats {
  int64_t synced_backwards = 0, buckets_reduced = 0;
  double allreduce_seconds = 0, exposed_seconds = 0;
  double hidden_share() const;   // 1 - exposed / allreduce, in [0, 1]; 0 without all-reduces
  nlohmann::json to_json() const;
};

// ZeRO with parameter groups (--lr-groups): each parameter's optimizer group by name; a
// bucket (stage 3: a unit) holds one group's parameters only. nullptr: one group.
using ZeroGroupOf = std::function<size_t(const std::string& name)>;

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, std::shared_ptr<CommQueue> queue,
                          int64_t bucket_cap_bytes = kDdpDefaultBucketCap, int zero_stage = 0,
                          bool master_weights = false, ZeroOffload offload = ZeroOffload::none,
                          ZeroGroupOf group_of = nullptr);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  void prepare_for_backward(bool sync);
  void finalize_backward();
  void broadcast_buffers();

  CommQueue& queue() { return *queue_; }
  const DdpStats& stats() const { return stats_; }
  int zero_stage() const { return zero_stage_; }
  // ZeRO: the optimizer group of each shard optimizer_parameters() lists, in its order.
  std::vector<size_t> zero_shard_groups() const;
  ZeroOffload offload() const { return offload_; }
  // What the optimizer updates: the module's parameters (stage 0), or this rank's shards.
  nn::NamedTensors optimizer_parameters() const;
  // ZeRO: bytes of one shard of every bucket in the buckets' dtypes (stage 2's gradient sums).
  int64_t zero_bucket_shard_bytes() const;
  // ZeRO: bytes of the shards the optimizer updates that are copies (stages 1 and 2; stage
  // 3's float32 masters), not the parameters' own shards.
  int64_t zero_optimizer_copy_bytes() const;
  // ZeRO-Offload: bytes of the shards kept on the host (the optimizer's; with params the
  // parameters' own too), the optimizer's state aside.
  int64_t zero_host_shard_bytes() const;
  void zero_model_grads();     // ZeRO: the module's gradients set to none
  void prepare_shard_grads();  // ZeRO: each shard's gradient, before the optimizer step
  void gather_parameters();    // ZeRO: every rank's updated shards into the parameters
  void materialize_parameters();   // ZeRO-3: every unit gathered and kept (to read the weights)
  // ZeRO checkpoints in DDP's format (ddp_zero_state.cpp). zero_consolidate (every rank
  // calls it: it all-gathers) turns the optimizer's shard state (its state_tensors() and
  // state_json(), parameters "zero.shard<b>") into DDP's: "state.<param>.<kind>" tensors and
  // a JSON over the module's parameters in order; the 16-bit buckets' float32 masters as
  // "master.<param>"; with stage 3 the parameters' values (gathered copies). zero_shard
  // (no communication; any world size) is the reverse: from a DDP-format state it sets each
  // shard (from `params` for stage 3, the module's own parameters for stages 1-2, `masters`
  // for 16-bit buckets with masters) and returns this rank's optimizer tensors and JSON for
  // Optimizer::load_state. ValueError naming a missing tensor or parameter, a parameter list
  // that is not the module's, more than one parameter group, or a bucket whose parameters
  // have different step counts; ShapeError for a tensor of the wrong shape.
  struct ZeroState {
    nn::NamedTensors params, optimizer_tensors, masters;
    nlohmann::json optimizer;
  };
  ZeroState zero_consolidate(const nn::NamedTensors& optimizer_tensors, const nlohmann::json& optimizer) const;
  ZeroState zero_shard(const ZeroState& consolidated);
  // Bucket sizes in bytes (their parameters', padding aside), in launch order; parameter
  // names per bucket.
  std::vector<int64_t> bucket_bytes() const;
  std::vector<std::vector<std::string>> bucket_parameters() const;

 private:
  struct Bucket {
    Tensor flat;                             // the bucket's buffer on the device
    std::vector<size_t> params;              // indices into params_
    std::vector<int64_t> offsets;            // element offset of each parameter in flat
    int64_t pending = 0;
    CommQueue::Work work;
    int64_t numel = 0, shard = 0;            // ZeRO: its elements, and each rank's share (padded)
    DType dtype = DType::f32;
    Tensor shard_param;                      // ZeRO: this rank's elements, what the optimizer updates
    Tensor reduced;                          // ZeRO: the reduce_scatter's output until finish_zero
    Tensor grad_sum;                         // ZeRO stage 2: the reduced slices summed over micro-batches
    std::shared_ptr<Storage> unit;           // ZeRO-3: the parameters' storage (world x shard elements)
    Tensor param_shard;                      // ZeRO-3: this rank's elements of the parameters (bucket dtype)
    size_t group = 0;                        // ZeRO: the optimizer group of its parameters
    CommQueue::Work gather;                  // ZeRO-3: a prefetch's all-gather, until waited for
    Tensor gather_send;                      // ZeRO-3: its device copy of an offloaded shard
  };
  void assign_buckets(Device dev, int64_t bucket_cap_bytes);
  void make_shards(Device dev, bool master_weights);           // ZeRO (ddp_zero.cpp)
  void assign_units();                                // ZeRO-3 (ddp_zero3.cpp)
  void shard_parameter_storage(Device dev);
  void install_module_hooks();
  void gather_unit(Bucket& b);
  void release_unit(Bucket& b);
  void prefetch_unit(Bucket& b);               // ZeRO-3: its all-gather started, not waited for
  void prefetch_next(const nn::Module& m, int direction);   // the module after (+1) / before (-1) m
  void release_prefetched();
  void fill_zero_bucket(Bucket& b, size_t slot, const Tensor& grad, size_t param);
  void launch_zero(Bucket& b);
  void finish_zero(Bucket& b);
  // Copies between a bucket's flat elements [begin, begin + flat.numel()) and `flat`, on
  // the parameters' values or their gradients; to_bucket_side: into those tensors.
  enum class Side { values, grads };
  // ZeRO's flat order of a parameter's elements is its memory order (a channels_last
  // weight's NHWC one): `t` (the parameter, its gradient or a saved tensor of its shape) as
  // numel() elements in that order (a view when t is laid out as the parameter), and back.
  static Tensor zero_flat(const Tensor& t, const Tensor& param);
  static Tensor zero_unflat(const Tensor& flat, const Tensor& param);
  void copy_flat_range(const Bucket& b, int64_t begin, const Tensor& flat, Side side, bool into_tensors) const;
  ZeroState shard_consolidated(const ZeroState& in);   // zero_shard's work (ddp_zero_state.cpp)
  void on_grad_ready(size_t param, Tensor& grad);
  void launch_ready();

  nn::Module& module_;
  std::shared_ptr<CommQueue> queue_;
  std::vector<std::pair<std::string, Tensor>> params_;   // requiring grad, registration order
  std::vector<size_t> bucket_of_;                        // param index -> bucket
  std::vector<Bucket> buckets_;
  std::vector<bool> ready_;                              // param index -> its hook fired this backward
  size_t next_launch_ = 0;
  bool sync_ = false, in_backward_ = false;
  int zero_stage_ = 0;
  ZeroOffload offload_ = ZeroOffload::none;
  ZeroGroupOf group_of_;                                 // ZeRO: parameter name -> optimizer group
  bool materialized_ = false;                                      // ZeRO-3: units kept gathered
  std::unordered_map<const nn::Module*, std::vector<size_t>> units_of_;   // ZeRO-3: module -> buckets
  std::vector<const nn::Module*> unit_order_;                      // ZeRO-3: first forward's call order
  std::unordered_map<const nn::Module*, size_t> order_index_;      // ZeRO-3: its position there
  bool order_recorded_ = false;                                    // ZeRO-3: a backward has begun
  std::unique_ptr<nn::ModuleCallHooksGuard> hooks_;               // ZeRO-3, on the constructing thread
  DdpStats stats_;
  std::shared_ptr<bool> alive_;                          // hooks outliving the reducer do nothing
};

}  // namespace oomlab
