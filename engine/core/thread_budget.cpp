// thread_budget.cpp — per-thread CPU budgets (thread_budget.h): the thread's OpenMP
// thread count (libgomp keeps it per thread) and a process-wide BLAS limit that follows
// the smallest live budget.
#include "engine/core/thread_budget.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <set>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/dispatch.h"

namespace oomlab {
namespace {
thread_local int t_budget = 0;   // 0: no guard on this thread

struct BlasLimit {
  std::mutex mu;
  void (*set)(int) = nullptr;
  int (*get)() = nullptr;
  std::multiset<int> live;        // limits of the live guards
  int original = 0;               // the BLAS setting before the first guard
  int applied = -1;               // what set() was last called with
};
BlasLimit& blas_limit() { static BlasLimit* b = new BlasLimit; return *b; }

void apply_blas_limit(BlasLimit& b) {   // b.mu held
  if (!b.set) return;
  const int want = b.live.empty() ? b.original : std::min(b.original, *b.live.begin());   // limits never raise
  if (want != b.applied) {
    b.set(want);
    b.applied = b.live.empty() ? -1 : want;
  }
}
}  // namespace

int hardware_threads() {
  static const int n = std::max(1, omp_get_max_threads());
  return n;
}

int thread_budget() { return t_budget > 0 ? t_budget : hardware_threads(); }

void register_blas_threads_hook(void (*set)(int), int (*get)()) {
  BlasLimit& b = blas_limit();
  std::lock_guard<std::mutex> lock(b.mu);
  b.set = set;
  b.get = get;
}

// OpenBLAS's OpenMP build sizes each call by the calling thread's OpenMP thread count, and
// its setter (the BLAS hook) also sets that count on whichever thread calls it: here, the
// thread whose guard happened to change the process-wide limit. So every guard puts its
// thread's count back as it was (a stack per thread: guards nest), or a thread's BLAS calls
// would run with a count that depends on other threads' timing: with OpenBLAS's K blocking
// depending on the thread count, float64 DDP runs differed in the last bits run to run
// (Zero.EveryStageTrainsAsDdp, resnet20 on 4 thread ranks: up to 4e-12 relative).
thread_local std::vector<int> t_omp_threads_before;

BlasThreadsGuard::BlasThreadsGuard(int threads) : threads_(std::max(1, threads)) {
  t_omp_threads_before.push_back(omp_get_max_threads());
  BlasLimit& b = blas_limit();
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.live.empty() && b.get) b.original = b.get();
  b.live.insert(threads_);
  apply_blas_limit(b);
  omp_set_num_threads(std::min(t_omp_threads_before.back(), threads_));
}

BlasThreadsGuard::~BlasThreadsGuard() {
  {
    BlasLimit& b = blas_limit();
    std::lock_guard<std::mutex> lock(b.mu);
    auto it = b.live.find(threads_);
    if (it != b.live.end()) b.live.erase(it);
    apply_blas_limit(b);
  }
  omp_set_num_threads(t_omp_threads_before.back());
  t_omp_threads_before.pop_back();
}

ThreadBudgetGuard::ThreadBudgetGuard(int threads)
    : previous_(std::exchange(t_budget, std::max(1, threads))), blas_(std::max(1, threads)) {
  omp_set_num_threads(t_budget);
}

ThreadBudgetGuard::~ThreadBudgetGuard() {
  t_budget = previous_;
  omp_set_num_threads(previous_ > 0 ? previous_ : hardware_threads());
}

void run_on_devices(const std::vector<Device>& devices, const std::function<void(Device)>& fn) {
  if (devices.empty()) return;
  ensure_kernels_registered();   // backends register the BLAS hook with their kernels
  if (devices.size() == 1) {
    CurrentDeviceGuard current(devices[0]);
    fn(devices[0]);
    return;
  }
  const int budget = std::max(1, hardware_threads() / int(devices.size()));
  std::vector<std::exception_ptr> errors(devices.size());
  std::vector<std::thread> threads;
  threads.reserve(devices.size());
  for (size_t i = 0; i < devices.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        ThreadBudgetGuard guard(budget);
        CurrentDeviceGuard current(devices[i]);
        fn(devices[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace oomlab
