// dataloader.cpp — epoch permutations, batch assembly and the worker threads.
// The workers of an epoch build batches cursor..end (worker w every workers-th one) into
// ready_, each bounded to prefetch_factor batches ahead of its turn; set_epoch / restore /
// epoch end / destruction stop and join them, so they never outlive the state they read
// (order_, ds_).
#include "engine/data/dataloader.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "engine/core/checked_math.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"

namespace oomlab {
namespace {

uint64_t epoch_mix(int64_t epoch) {  // splitmix64 of the epoch: distinct keys per epoch
  uint64_t x = uint64_t(epoch) + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

DataLoader::DataLoader(const Dataset& dataset, int64_t batch_size, bool shuffle, bool drop_last, uint64_t seed,
                       int workers, int prefetch_factor)
    : ds_(dataset), batch_(batch_size), shuffle_(shuffle), drop_last_(drop_last), seed_(seed), workers_(workers),
      prefetch_factor_(prefetch_factor) {
  const int64_t n = ds_.size();
  OOMLAB_CHECK(batch_ > 0, "DataLoader: batch size must be positive, got ", batch_);
  OOMLAB_CHECK(workers_ >= 0 && workers_ <= 64, "DataLoader: workers must be in 0..64, got ", workers_);
  OOMLAB_CHECK(prefetch_factor_ >= 1, "DataLoader: prefetch_factor must be >= 1, got ", prefetch_factor_);
  // each epoch holds its order of every sample: a size it cannot represent is a ShapeError
  checked_nbytes(n, sizeof(int64_t), str_cat("DataLoader: the epoch order of ", ds_.name()));
  OOMLAB_CHECK(!drop_last_ || n == 0 || batch_ <= n, "DataLoader: impossible batch: batch size ", batch_,
               " exceeds the ", n, " samples of ", ds_.name(), " and drop_last would leave no batch");
  batches_per_epoch_ = drop_last_ ? n / batch_ : (n + batch_ - 1) / batch_;
}

DataLoader::~DataLoader() { stop_workers(); }

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(size_t(ds_.size()));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (shuffle_) {
    Generator g{seed_ ^ epoch_mix(epoch), 0};
    for (size_t i = order.size(); i > 1; --i) {  // Fisher-Yates, last position first
      size_t j = size_t(g.next_below(uint64_t(i)));
      std::swap(order[i - 1], order[j]);
    }
  }
  if (shard_world_ == 1 || order.empty()) return order;
  // DistributedSampler: pad to world x shard length with the order's first indices
  // (repeated as often as needed), then every world-th index from this rank's position.
  const size_t n = order.size(), total = size_t(shard_size() * shard_world_);
  for (size_t i = n; i < total; ++i) order.push_back(order[i % n]);
  std::vector<int64_t> shard;
  shard.reserve(size_t(shard_size()));
  for (size_t i = size_t(shard_rank_); i < total; i += size_t(shard_world_)) shard.push_back(order[i]);
  return shard;
}

int64_t DataLoader::shard_size() const {
  return shard_world_ == 1 ? ds_.size() : (ds_.size() + shard_world_ - 1) / shard_world_;
}

void DataLoader::set_shard(int rank, int world) {
  OOMLAB_CHECK(threads_.empty() && order_epoch_ < 0, "DataLoader::set_shard: batches were already requested");
  OOMLAB_CHECK(world >= 1 && rank >= 0 && rank < world, "DataLoader::set_shard: rank ", rank,
               " is not in a world of ", world);
  shard_rank_ = rank;
  shard_world_ = world;
  const int64_t n = shard_size();
  OOMLAB_CHECK(!drop_last_ || n == 0 || batch_ <= n, "impossible batch: a batch of ", batch_,
               " samples per rank exceeds the ", n, " samples of each of the ", world, " ranks' shards of ", ds_.name(),
               " (", ds_.size(), " samples)");
  batches_per_epoch_ = drop_last_ ? n / batch_ : (n + batch_ - 1) / batch_;
}

void DataLoader::ensure_order() {
  if (order_epoch_ == epoch_) return;
  order_ = epoch_order(epoch_);
  order_epoch_ = epoch_;
}

void DataLoader::set_pinner(HostPinner pinner) {
  OOMLAB_CHECK(threads_.empty(), "DataLoader::set_pinner: workers are already running");
  pinner_ = std::move(pinner);
}

void DataLoader::make_batch(int64_t b, HostBatch& out) const {
  out.pinned.reset();   // a reused buffer's block goes back to the pool
  out.pinned_target_offset = 0;
  build_batch(b, out);
  if (!pinner_) return;
  const size_t in = out.input_bytes(), tgt = out.target_bytes();
  out.pinned_target_offset = (in + 63) / 64 * 64;
  out.pinned = pinner_(out.pinned_target_offset + tgt);
  char* p = static_cast<char*>(out.pinned.get());
  if (in) std::memcpy(p, out.is_tokens() ? static_cast<const void*>(out.tokens.data()) : out.images.data(), in);
  if (tgt) std::memcpy(p + out.pinned_target_offset, out.targets().data(), tgt);
}

void DataLoader::build_batch(int64_t b, HostBatch& out) const {
  const Shape s = ds_.sample_shape(), ts = ds_.target_shape();
  const bool tokens = ds_.is_tokens();
  const int64_t numel = tokens ? 0 : shape_numel(s), tnumel = shape_numel(ts);
  const int64_t begin = b * batch_;
  const int64_t n = std::min(batch_, int64_t(order_.size()) - begin);
  out.n = n;
  out.input_dtype = tokens ? DType::i64 : DType::f32;
  out.target_shape = {n};
  out.target_shape.insert(out.target_shape.end(), ts.begin(), ts.end());
  std::vector<int64_t>& targets = ts.empty() ? out.labels : out.masks;
  (ts.empty() ? out.masks : out.labels).clear();
  targets.resize(size_t(n * tnumel));
  if (!tokens) {
    out.tokens.clear();
    out.shape = {n};
    out.shape.insert(out.shape.end(), s.begin(), s.end());
    out.images.resize(size_t(n * numel));
    for (int64_t i = 0; i < n; ++i) {
      if (stop_.load(std::memory_order_relaxed)) return;  // abandoned; the batch is discarded
      ds_.get(order_[size_t(begin + i)], out.images.data() + i * numel, targets.data() + i * tnumel);
    }
    return;
  }
  out.images.clear();
  std::vector<std::vector<int64_t>> seqs(static_cast<size_t>(n));
  int64_t t_max = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (stop_.load(std::memory_order_relaxed)) return;
    ds_.get_tokens(order_[size_t(begin + i)], seqs[size_t(i)], targets.data() + i * tnumel);
    t_max = std::max<int64_t>(t_max, int64_t(seqs[size_t(i)].size()));
  }
  out.shape = {n, t_max};
  out.tokens.assign(size_t(n * t_max), 0);
  for (int64_t i = 0; i < n; ++i)
    std::copy(seqs[size_t(i)].begin(), seqs[size_t(i)].end(), out.tokens.begin() + i * t_max);
}

void DataLoader::start_workers() {
  ensure_order();
  stop_.store(false);
  workers_done_ = 0;
  ready_.clear();
  errors_.clear();
  for (int w = 0; w < workers_; ++w) threads_.emplace_back([this, w, first = cursor_] { worker_loop(w, first); });
}

void DataLoader::stop_workers() noexcept {
  if (threads_.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  for (std::thread& t : threads_) try { t.join(); } catch (...) {}
  threads_.clear();
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [b, hb] : ready_) pool_.push_back(std::move(hb));   // keep the buffers for reuse
  ready_.clear();
  errors_.clear();
  workers_done_ = 0;
  stop_.store(false);
}

void DataLoader::worker_loop(int worker, int64_t first_batch) {
  const int64_t ahead = int64_t(workers_) * prefetch_factor_;
  for (int64_t b = first_batch + worker; b < batches_per_epoch_; b += workers_) {
    HostBatch hb;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_.load() || b < cursor_ + ahead; });
      if (stop_.load()) return;
      if (!pool_.empty()) { hb = std::move(pool_.back()); pool_.pop_back(); }
    }
    try {
      make_batch(b, hb);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      errors_[b] = std::current_exception();
      ++workers_done_;
      cv_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_.load()) return;
      ready_[b] = std::move(hb);
    }
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lk(mu_);
  ++workers_done_;
  cv_.notify_all();
}

bool DataLoader::next(HostBatch& out) {
  if (cursor_ >= batches_per_epoch_) {  // epoch end: report it once, move to the next epoch
    stop_workers();
    ++epoch_;
    cursor_ = 0;
    return false;
  }
  if (workers_ == 0) {
    ensure_order();
    make_batch(cursor_, out);
    ++cursor_;
    return true;
  }
  if (threads_.empty()) start_workers();
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return ready_.count(cursor_) || errors_.count(cursor_) || workers_done_ == workers_; });
  if (auto it = ready_.find(cursor_); it != ready_.end()) {
    if ((out.images.capacity() > 0 || out.tokens.capacity() > 0) &&
        pool_.size() < size_t(workers_ * prefetch_factor_) + 1) {
      out.pinned.reset();
      pool_.push_back(std::move(out));
    }
    out = std::move(it->second);
    ready_.erase(it);
    ++cursor_;
    lk.unlock();
    cv_.notify_all();
    return true;
  }
  std::exception_ptr err = errors_.count(cursor_) ? errors_[cursor_] : nullptr;
  lk.unlock();
  stop_workers();  // joins; a later next() retries from the same cursor
  if (err) std::rethrow_exception(err);
  throw InternalError(str_cat("DataLoader: workers finished early at batch ", cursor_, " of ", batches_per_epoch_));
}

void DataLoader::restore(const LoaderState& s) {
  OOMLAB_CHECK(s.epoch >= 0 && s.cursor >= 0 && s.cursor <= batches_per_epoch_,
               "DataLoader::restore: invalid state (epoch ", s.epoch, ", cursor ", s.cursor, ") for ",
               batches_per_epoch_, " batches per epoch");
  stop_workers();
  epoch_ = s.epoch;
  cursor_ = s.cursor;
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch == epoch_ && cursor_ == 0) return;
  restore({epoch, 0});
}

}  // namespace oomlab
