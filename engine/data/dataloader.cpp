// dataloader.cpp — epoch permutations, batch assembly and the prefetch thread.
// The worker for an epoch produces batches cursor..end in order into a bounded queue;
// set_epoch/restore/epoch end/destruction stop and join it, so it never outlives the
// state it reads (order_, ds_).
#include "engine/data/dataloader.h"

#include <algorithm>
#include <numeric>

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
                       int prefetch)
    : ds_(dataset), batch_(batch_size), shuffle_(shuffle), drop_last_(drop_last), seed_(seed), prefetch_(prefetch) {
  const int64_t n = ds_.size();
  OOMLAB_CHECK(batch_ > 0, "DataLoader: batch size must be positive, got ", batch_);
  OOMLAB_CHECK(prefetch_ >= 0, "DataLoader: prefetch must be >= 0, got ", prefetch_);
  OOMLAB_CHECK(!drop_last_ || n == 0 || batch_ <= n, "DataLoader: impossible batch: batch size ", batch_,
               " exceeds the ", n, " samples of ", ds_.name(), " and drop_last would leave no batch");
  batches_per_epoch_ = drop_last_ ? n / batch_ : (n + batch_ - 1) / batch_;
}

DataLoader::~DataLoader() { stop_worker(); }

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(size_t(ds_.size()));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (!shuffle_) return order;
  Generator g{seed_ ^ epoch_mix(epoch), 0};
  for (size_t i = order.size(); i > 1; --i) {  // Fisher-Yates, last position first
    size_t j = size_t(g.next_below(uint64_t(i)));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

void DataLoader::ensure_order() {
  if (order_epoch_ == epoch_) return;
  order_ = epoch_order(epoch_);
  order_epoch_ = epoch_;
}

void DataLoader::build_batch(int64_t b, HostBatch& out) const {
  const Shape s = ds_.sample_shape(), ts = ds_.target_shape();
  const bool tokens = ds_.is_tokens();
  const int64_t numel = tokens ? 0 : shape_numel(s), tnumel = shape_numel(ts);
  const int64_t begin = b * batch_;
  const int64_t n = std::min(batch_, ds_.size() - begin);
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

void DataLoader::start_worker() {
  ensure_order();
  stop_.store(false);
  worker_done_ = false;
  error_ = nullptr;
  worker_ = std::thread([this, first = cursor_] { worker_loop(first); });
}

void DataLoader::stop_worker() noexcept {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  try { worker_.join(); } catch (...) {}
  std::lock_guard<std::mutex> lk(mu_);
  while (!queue_.empty()) {  // keep the buffers for reuse
    pool_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  error_ = nullptr;
  worker_done_ = false;
  stop_.store(false);
}

void DataLoader::worker_loop(int64_t first_batch) {
  for (int64_t b = first_batch; b < batches_per_epoch_; ++b) {
    HostBatch hb;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_.load() || int64_t(queue_.size()) < prefetch_; });
      if (stop_.load()) return;
      if (!pool_.empty()) { hb = std::move(pool_.back()); pool_.pop_back(); }
    }
    try {
      build_batch(b, hb);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = std::current_exception();
      worker_done_ = true;
      cv_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_.load()) return;
      queue_.push_back(std::move(hb));
    }
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lk(mu_);
  worker_done_ = true;
  cv_.notify_all();
}

bool DataLoader::next(HostBatch& out) {
  if (cursor_ >= batches_per_epoch_) {  // epoch end: report it once, move to the next epoch
    stop_worker();
    ++epoch_;
    cursor_ = 0;
    return false;
  }
  if (prefetch_ == 0) {
    ensure_order();
    build_batch(cursor_, out);
    ++cursor_;
    return true;
  }
  if (!worker_.joinable()) start_worker();
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return !queue_.empty() || worker_done_; });
  if (!queue_.empty()) {
    if ((out.images.capacity() > 0 || out.tokens.capacity() > 0) && pool_.size() < size_t(prefetch_) + 1) pool_.push_back(std::move(out));
    out = std::move(queue_.front());
    queue_.pop_front();
    ++cursor_;
    lk.unlock();
    cv_.notify_all();
    return true;
  }
  std::exception_ptr err = error_;
  lk.unlock();
  stop_worker();  // joins; a later next() retries from the same cursor
  if (err) std::rethrow_exception(err);
  throw InternalError(str_cat("DataLoader: worker finished early at batch ", cursor_, " of ",
                              batches_per_epoch_));
}

void DataLoader::restore(const LoaderState& s) {
  OOMLAB_CHECK(s.epoch >= 0 && s.cursor >= 0 && s.cursor <= batches_per_epoch_,
               "DataLoader::restore: invalid state (epoch ", s.epoch, ", cursor ", s.cursor, ") for ",
               batches_per_epoch_, " batches per epoch");
  stop_worker();
  epoch_ = s.epoch;
  cursor_ = s.cursor;
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch == epoch_ && cursor_ == 0) return;
  restore({epoch, 0});
}

}  // namespace oomlab
