// dataloader.h — batches from a Dataset with a background prefetch thread.
// Contracts:
//  * Epoch e visits the indices in order epoch_order(e): identity without shuffle, else a
//    Fisher-Yates permutation drawn from Generator{seed ^ mix(e), 0} — a pure function of
//    (seed, e, dataset size), so runs, resumes and thread timing never change it.
//  * next(batch) returns the epoch's batches in order and false once at the epoch's end;
//    the loader then moves to epoch e+1 (so `while (next(b))` loops run consecutive
//    epochs; set_epoch(e) jumps to the start of epoch e).
//  * state() = {epoch, cursor = batches already returned}; restore(state) on any loader
//    with the same (dataset, batch, shuffle, drop_last, seed) yields exactly the same
//    subsequent batches.
//  * workers > 0 (PyTorch's num_workers) builds batches on that many std::threads, worker
//    w building batches w, w + workers, ... of the epoch, each at most prefetch_factor
//    batches ahead of its turn (PyTorch's prefetch_factor); next() still returns them in
//    order, so the number of workers never changes what a run sees. An exception thrown
//    while building batch b is rethrown by the next() that would have returned b. The
//    destructor stops and joins the threads (never hangs, never throws). workers == 0
//    builds batches synchronously inside next(). Single consumer: not thread-safe itself.
//  * set_pinner(p) (PyTorch's pin_memory): after building a batch, the worker copies its
//    input then its target into one block from p (page-locked memory, pinned_host.h) held in
//    HostBatch::pinned; the vectors keep their values. A batch handed back to the loader
//    drops its block (the pinned pool reuses it once the copies queued from it are done).
//  * Token datasets: a batch's T is the longest sample in it (>= 1); shorter samples are
//    padded with id 0 on the right. Mask datasets fill `masks` instead of `labels`.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/data/dataset.h"

namespace oomlab {

struct HostBatch {
  std::vector<float> images;     // image inputs: n * C * H * W (empty for token inputs)
  std::vector<int64_t> tokens;   // token inputs: n * T, row-major, right-padded with 0 to
                                 // the batch's longest sample (T varies per batch)
  std::vector<int64_t> labels;   // class targets: n (empty for mask targets)
  std::vector<int64_t> masks;    // per-pixel targets: n * H * W (empty for class targets)
  int64_t n = 0;
  Shape shape;                   // input shape: {n, C, H, W} or {n, T}
  Shape target_shape;            // {n} or {n, H, W}
  DType input_dtype = DType::f32;
  // With a pinner: a pinned copy of the input bytes, then the target bytes at
  // pinned_target_offset (a multiple of 64); null otherwise.
  std::shared_ptr<void> pinned;
  size_t pinned_target_offset = 0;
  bool is_tokens() const { return input_dtype == DType::i64; }
  size_t input_bytes() const { return is_tokens() ? tokens.size() * 8 : images.size() * 4; }
  size_t target_bytes() const { return targets().size() * 8; }
  const std::vector<int64_t>& targets() const { return masks.empty() ? labels : masks; }
};

// A block of at least `bytes` page-locked bytes (pinned_host_alloc bound to a device).
using HostPinner = std::function<std::shared_ptr<void>(size_t bytes)>;

struct LoaderState {
  int64_t epoch = 0;
  int64_t cursor = 0;            // batches already returned in `epoch`
  bool operator==(const LoaderState&) const = default;
};

class DataLoader {
 public:
  DataLoader(const Dataset& dataset, int64_t batch_size, bool shuffle, bool drop_last, uint64_t seed,
             int workers = 1, int prefetch_factor = 2);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  bool next(HostBatch& out);
  // Before the first next(): batches carry a pinned copy from `pinner` (null: none).
  void set_pinner(HostPinner pinner);
  bool pins() const { return bool(pinner_); }
  void set_epoch(int64_t epoch);
  // Before the first next(): PyTorch's DistributedSampler (drop_last=False) over the epoch
  // order: padded with its first indices to a multiple of `world`, this rank taking every
  // world-th index from position `rank`; each rank sees ceil(N / world) samples and the
  // shards of one epoch are disjoint (padding aside). set_epoch reshuffles every rank alike.
  // Consecutive per-rank batches t of all ranks together are the samples of batch t of an
  // unsharded loader with world x batch (same seed), so DDP sees single-device batches.
  void set_shard(int rank, int world);
  int64_t shard_size() const;   // samples per epoch this loader visits (dataset size unsharded)
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t batch_size() const { return batch_; }
  int workers() const { return workers_; }
  int64_t epoch() const { return epoch_; }
  LoaderState state() const { return {epoch_, cursor_}; }
  void restore(const LoaderState& s);
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  const Dataset& dataset() const { return ds_; }

 private:
  void ensure_order();
  void build_batch(int64_t b, HostBatch& out) const;
  void make_batch(int64_t b, HostBatch& out) const;   // build_batch, then the pinned copy
  void start_workers();
  void stop_workers() noexcept;
  void worker_loop(int worker, int64_t first_batch);

  const Dataset& ds_;
  int64_t batch_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int workers_, prefetch_factor_;
  int64_t batches_per_epoch_ = 0;
  int shard_rank_ = 0, shard_world_ = 1;
  HostPinner pinner_;

  // Consumer side.
  int64_t epoch_ = 0, cursor_ = 0;
  std::vector<int64_t> order_;     // epoch_order(order_epoch_); read-only while a worker runs
  int64_t order_epoch_ = -1;

  // Shared with the workers (guarded by mu_; cursor_ too while they run).
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, HostBatch> ready_;             // built batches by index in the epoch
  std::map<int64_t, std::exception_ptr> errors_;   // a worker's failure, by the batch it was building
  std::vector<HostBatch> pool_;                    // returned buffers the workers reuse
  int workers_done_ = 0;
  std::atomic<bool> stop_{false};
};

}  // namespace oomlab
