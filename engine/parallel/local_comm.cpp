// local_comm.cpp — the local backend's synchronisation and its algorithms (local_comm.h).
// Locking: the world mutex guards the slots and is released around every data movement.
// Step numbers are absolute (steps_ counts every step of earlier collectives; all ranks run
// the same collectives, so their counts agree), so a peer's counter is never stale.
#include "engine/parallel/local_comm.h"
#include "engine/parallel/local_comm_util.h"

#include <cstring>
#include <algorithm>
#include <exception>
#include <thread>

#include "engine/core/backend.h"
#include "kernels/copy.h"

namespace oomlab {
using namespace local_detail;

const char* all_reduce_algo_name(AllReduceAlgo a) { return a == AllReduceAlgo::ring ? "ring" : "ps"; }

AllReduceAlgo parse_all_reduce_algo(const std::string& s) {
  if (s == "ring") return AllReduceAlgo::ring;
  if (s == "ps") return AllReduceAlgo::parameter_server;
  throw ValueError(str_cat("unknown all-reduce algorithm '", s, "' (ring or ps)"));
}

LocalWorld::LocalWorld(int size) : slots_(static_cast<size_t>(std::max(size, 0))) {
  OOMLAB_CHECK(size >= 1 && size <= 1024, "a local world has 1..1024 ranks, not ", size);
}

namespace {
std::atomic<bool> g_kernel_path_on_cpu{false};
}  // namespace

void LocalCommunicator::use_kernel_path_on_cpu_for_tests(bool on) { g_kernel_path_on_cpu = on; }

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalWorld> world, int rank, Device device, AllReduceAlgo algo)
    : world_(std::move(world)), rank_(rank), device_(device), algo_(algo),
      kernel_path_(device.is_cpu() ? g_kernel_path_on_cpu.load() : !device.is_meta()) {
  OOMLAB_CHECK(world_ && rank_ >= 0 && rank_ < world_->size(), "local communicator: rank ", rank_,
               " is not in a world of ", world_ ? world_->size() : 0);
}

void LocalCommunicator::move(void* dst, const void* src, size_t bytes) {
  if (!moves_data() || bytes == 0 || dst == src) return;
  if (!on_accelerator()) { std::memcpy(dst, src, bytes); return; }
  CopyArgs a{};
  a.out = dst; a.out_dtype = DType::u8; a.in = src; a.in_dtype = DType::u8;
  a.ndim = 1; a.shape[0] = int64_t(bytes); a.in_strides[0] = 1; a.out_strides[0] = 1;
  copy_kernels().launch(device_, DType::u8, a);
}

void LocalCommunicator::reduce(DType d, ReduceOp op, void* dst, const void* a, const void* b, int64_t n) {
  if (moves_data() && n > 0) reduce_pair_kernels().launch(device_, d, ReducePairArgs{dst, a, b, n, pair_op(op)});
}

void LocalCommunicator::divide(DType d, void* p, int64_t n) {
  if (moves_data() && n > 0) divide_count_kernels().launch(device_, d, DivideCountArgs{p, n, world_size()});
}

void LocalCommunicator::settle() {
  if (on_accelerator()) device_synchronize(device_);
}

LocalCommunicator::~LocalCommunicator() {
  std::lock_guard<std::mutex> lk(world_->mu_);
  world_->slots_[size_t(rank_)].left = true;
  world_->cv_.notify_all();
}

void LocalCommunicator::fail(const std::string& why) {
  std::lock_guard<std::mutex> lk(world_->mu_);
  if (world_->failure_.empty()) world_->failure_ = str_cat("rank ", rank_, " failed: ", why);
  world_->cv_.notify_all();
}

// The waiter counts itself in sleepers_ before it first checks ready(), and counter writers
// (step_done) store the counter before they read sleepers_ (all seq_cst): either the check
// sees the new counter, or the writer sees a sleeper and notifies under the lock, which this
// rank holds until it sleeps. Counting after the check loses the wake-up of a write between
// the two: the rank then slept its whole timeout (300 s) and went on as if nothing happened.
void LocalCommunicator::wait(Lock& lk, const std::function<bool()>& ready, int peer, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  LocalWorld& w = *world_;
  struct Sleeper {
    std::atomic<int>& n;
    explicit Sleeper(std::atomic<int>& count) : n(count) { ++n; }
    ~Sleeper() { --n; }
  } counted(w.sleepers_);
  for (;;) {
    if (ready()) return;   // what this rank waited for happened: a later failure is not its
    if (!w.failure_.empty())
      throw CommError(str_cat("local rank ", rank_, ": ", call_, " aborted: ", w.failure_));
    for (int p = 0; p < w.size(); ++p)
      if ((peer < 0 || p == peer) && p != rank_ && w.slots_[size_t(p)].left) {
        w.failure_ = str_cat("rank ", p, " left the world while rank ", rank_, " waited for it ", what, " in ", call_);
        w.cv_.notify_all();
        throw CommError(str_cat("local rank ", rank_, ": ", w.failure_));
      }
    if (w.before_sleep_) w.before_sleep_();
    const std::cv_status st = w.cv_.wait_until(lk, deadline);
    if (st == std::cv_status::timeout && !ready() && w.failure_.empty()) {
      const double s = std::chrono::duration<double>(timeout_).count();
      w.failure_ = str_cat("rank ", rank_, " timed out after ", s, " s waiting for ",
                           peer >= 0 ? str_cat("rank ", peer) : std::string("the other ranks"), " ", what, " in ",
                           call_);
      w.cv_.notify_all();
      throw CommTimeoutError(str_cat("local: ", w.failure_));
    }
  }
}

void LocalCommunicator::enter(const std::string& call, const void* send, void* recv) {
  settle();   // what produced send / recv is done before a peer may read them
  // The caller holds no lock; enter takes it only to publish.
  std::lock_guard<std::mutex> lk(world_->mu_);
  call_ = call;
  OOMLAB_CHECK_T(CommError, world_->failure_.empty(), "local rank ", rank_, ": ", call, " on a broken world: ",
                 world_->failure_);
  LocalWorld::Slot& s = world_->slots_[size_t(rank_)];
  s.send = send;
  s.recv = recv;
  s.call = call;
  ++s.generation;
  world_->cv_.notify_all();
}

const LocalWorld::Slot& LocalCommunicator::peer(Lock& lk, int p) {
  LocalWorld& w = *world_;
  const int64_t gen = w.slots_[size_t(rank_)].generation;
  const LocalWorld::Slot& s = w.slots_[size_t(p)];
  wait(lk, [&] { return s.generation >= gen; }, p, "to enter the collective");
  if (s.generation != gen || s.call != call_) {
    w.failure_ = str_cat("collectives differ: rank ", rank_, " called ", call_, " while rank ", p, " called ", s.call);
    w.cv_.notify_all();
    throw CommError(str_cat("local: ", w.failure_));
  }
  return s;
}

void LocalCommunicator::step_done(int64_t step, int reader_of) {
  settle();   // this step's reads and writes are done before the peers are told
  world_->slots_[size_t(rank_)].progress.store(step);
  if (reader_of >= 0) world_->slots_[size_t(reader_of)].consumed.store(step);
  wake();
}

void LocalCommunicator::wake() {
  if (world_->sleepers_.load() == 0) return;   // seq_cst, after the counter's store: see wait()
  std::lock_guard<std::mutex> lk(world_->mu_);
  world_->cv_.notify_all();
}

void LocalCommunicator::wait_counter(const std::atomic<int64_t>& counter, int64_t target, int peer, const char* what) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  for (int i = 0;; ++i) {   // ~20 us spinning, then yielding up to 200 us: a handoff between running threads
    if (counter.load() >= target) return;
    if ((i & 63) == 63) {
      const auto dt = clock::now() - t0;
      if (dt > std::chrono::microseconds(200)) break;
      if (dt > std::chrono::microseconds(20)) std::this_thread::yield();
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  Lock lk(world_->mu_);
  wait(lk, [&] { return counter.load() >= target; }, peer, what);
}

void LocalCommunicator::set_progress_locked(int64_t step) {
  settle();
  world_->slots_[size_t(rank_)].progress.store(step);
  world_->cv_.notify_all();
}

// The end of a collective that is not a ring: nothing of this rank's is read any more, so
// its consumed counter catches up (a later ring step waits for consumed >= its step).
void LocalCommunicator::finish(int64_t end) {
  LocalWorld::Slot& me = world_->slots_[size_t(rank_)];
  me.progress.store(end);
  if (me.consumed.load() < end) me.consumed.store(end);
  steps_ = end;
  world_->cv_.notify_all();
}

void LocalCommunicator::wait_readers_done(Lock& lk, const std::vector<int>& readers, int64_t step) {
  for (int p : readers) {
    const LocalWorld::Slot& s = world_->slots_[size_t(p)];
    wait(lk, [&] { return s.progress >= step; }, p, "to finish reading this rank's buffer");
  }
}


void LocalCommunicator::do_broadcast(Buf send, Buf recv, int root) {
  const int n = world_size();
  if (rank_ == root) move(recv.data, send.data, recv.bytes());
  enter(call_text("broadcast", recv.count, recv.dtype, str_cat("root ", root)), send.data, recv.data);
  if (n == 1) return;
  const int64_t base = steps_, bytes = int64_t(recv.bytes());
  Lock lk(world_->mu_);
  if (rank_ == root) {
    set_progress_locked(base + 1);
    wait_readers_done(lk, others(n, root), base + 1);
    stats_.bytes_sent += bytes * (n - 1);
  } else {
    const void* src = peer(lk, root).recv;
    lk.unlock();
    move(recv.data, src, size_t(bytes));
    stats_.bytes_received += bytes;
    lk.lock();
    set_progress_locked(base + 1);
  }
  finish(base + 1);
}

void LocalCommunicator::do_reduce(Buf send, Buf recv, ReduceOp op, int root) {
  const int n = world_size();
  if (rank_ == root) move(recv.data, send.data, recv.bytes());
  enter(call_text("reduce", recv.count, recv.dtype, str_cat(reduce_op_name(op), ", root ", root)), send.data,
        recv.data);
  const int64_t base = steps_, bytes = int64_t(recv.bytes());
  Lock lk(world_->mu_);
  if (rank_ == root) {
    for (int p : others(n, root)) {
      const void* src = peer(lk, p).send;
      lk.unlock();
      reduce(recv.dtype, op, recv.data, recv.data, src, recv.count);
      stats_.bytes_received += bytes;
      lk.lock();
    }
    if (op == ReduceOp::avg) divide(recv.dtype, recv.data, recv.count);
    set_progress_locked(base + 1);
  } else {
    // Not peer(): the root may already be in its next collective (it waits for nobody).
    const LocalWorld::Slot& r = world_->slots_[size_t(root)];
    wait(lk, [&] { return r.progress >= base + 1; }, root, "to reduce");
    stats_.bytes_sent += bytes;
    set_progress_locked(base + 1);
  }
  finish(base + 1);
}

void LocalCommunicator::do_all_gather(Buf send, Buf recv) {
  const int n = world_size();
  const int64_t cnt = send.count, bytes = int64_t(send.bytes());
  char* mine = at(recv.data, cnt * rank_, recv.dtype);
  move(mine, send.data, size_t(bytes));
  enter(call_text("all_gather", cnt, send.dtype, ""), send.data, recv.data);
  const int64_t base = steps_;
  Lock lk(world_->mu_);
  for (int p : others(n, rank_)) {
    const void* src = peer(lk, p).send;
    lk.unlock();
    move(at(recv.data, cnt * p, recv.dtype), src, size_t(bytes));
    stats_.bytes_received += bytes;
    stats_.bytes_sent += bytes;
    lk.lock();
  }
  set_progress_locked(base + 1);
  wait_readers_done(lk, others(n, rank_), base + 1);
  finish(base + 1);
}

void LocalCommunicator::do_reduce_scatter(Buf send, Buf recv, ReduceOp op) {
  const int n = world_size();
  const int64_t cnt = recv.count, bytes = int64_t(recv.bytes());
  const char* mine = at(send.data, cnt * rank_, send.dtype);
  move(recv.data, mine, size_t(bytes));
  enter(call_text("reduce_scatter", cnt, recv.dtype, reduce_op_name(op)), send.data, recv.data);
  const int64_t base = steps_;
  Lock lk(world_->mu_);
  for (int p : others(n, rank_)) {
    const void* src = peer(lk, p).send;
    lk.unlock();
    reduce(recv.dtype, op, recv.data, recv.data, at(src, cnt * rank_, recv.dtype), cnt);
    stats_.bytes_received += bytes;
    stats_.bytes_sent += bytes;
    lk.lock();
  }
  if (op == ReduceOp::avg) divide(recv.dtype, recv.data, cnt);
  set_progress_locked(base + 1);
  wait_readers_done(lk, others(n, rank_), base + 1);
  finish(base + 1);
}

void LocalCommunicator::do_barrier() {
  enter("barrier()", nullptr, nullptr);
  LocalWorld& w = *world_;
  Lock lk(w.mu_);
  const int64_t gen = w.barrier_generation_;
  if (++w.barrier_waiting_ == w.size()) {
    w.barrier_waiting_ = 0;
    ++w.barrier_generation_;
    w.cv_.notify_all();
    return;
  }
  wait(lk, [&] { return w.barrier_generation_ != gen; }, -1, "to reach the barrier");
}

void run_local_ranks(const std::vector<Device>& devices, AllReduceAlgo algo,
                     const std::function<void(LocalCommunicator&)>& fn, std::chrono::milliseconds timeout) {
  const int n = int(devices.size());
  auto world = std::make_shared<LocalWorld>(n);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<char> comm_error(static_cast<size_t>(n),
                               0);  // not vector<bool>: ranks write their own entries concurrently
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<LocalCommunicator> comm;
      try {
        comm = std::make_unique<LocalCommunicator>(world, r, devices[size_t(r)], algo);
        comm->set_timeout(timeout);
        fn(*comm);
      } catch (const CommError& e) {
        errors[size_t(r)] = std::current_exception();
        comm_error[size_t(r)] = 1;
        if (comm) comm->fail(e.what());
      } catch (const std::exception& e) {
        errors[size_t(r)] = std::current_exception();
        if (comm) comm->fail(e.what());
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        if (comm) comm->fail("unknown exception");
      }
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (errors[size_t(r)] && !comm_error[size_t(r)]) std::rethrow_exception(errors[size_t(r)]);
  for (int r = 0; r < n; ++r)
    if (errors[size_t(r)]) std::rethrow_exception(errors[size_t(r)]);
}

}  // namespace oomlab
