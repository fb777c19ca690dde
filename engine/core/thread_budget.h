// thread_budget.h — how many CPU threads a device thread may use, so that N device threads
// sharing the cores (DataParallel replicas, ranks on logical devices) do not oversubscribe
// them, and the runner of several device threads.
// Contracts:
//  * hardware_threads(): the threads the process may use: OpenMP's maximum when first
//    asked (OMP_NUM_THREADS, else the cores).
//  * ThreadBudgetGuard(n): while alive, OpenMP regions started by the calling thread use at
//    most n threads; BLAS (a process-wide setting in OpenBLAS) uses the smallest budget of
//    all live guards, restored when the last one ends. Backends register the BLAS setter
//    (register_blas_threads_hook; the CPU backend does). Guards nest.
//  * run_on_devices(devices, fn): runs fn(device) on one std::thread per device, all at
//    once, each with that device current (CurrentDeviceGuard) and a budget of
//    max(1, hardware_threads() / devices.size()); waits for all of them, then rethrows the
//    first exception in device order. A single device runs on the calling thread.
#pragma once
#include <functional>
#include <vector>

#include "engine/core/device.h"

namespace oomlab {

int hardware_threads();
int thread_budget();   // the calling thread's budget (hardware_threads() outside any guard)

// While alive, BLAS runs with at most n threads (the smallest limit of all live guards and
// budgets, never more than its setting before the first one, which is restored after the
// last). Thread-safe:
// kernels that must not let BLAS thread (CPU conv) hold one with n = 1. With the OpenMP
// build of OpenBLAS (the one CMakeLists.txt links), setting its thread count also calls
// omp_set_num_threads on the calling thread: a kernel that opens its own parallel region
// under a guard reads omp_get_max_threads() before constructing it and passes num_threads
// (conv_cpu.cpp, attention_cpu.cpp).
class BlasThreadsGuard {
 public:
  explicit BlasThreadsGuard(int threads);
  ~BlasThreadsGuard();
  BlasThreadsGuard(const BlasThreadsGuard&) = delete;
  BlasThreadsGuard& operator=(const BlasThreadsGuard&) = delete;

 private:
  int threads_;
};

class ThreadBudgetGuard {
 public:
  explicit ThreadBudgetGuard(int threads);
  ~ThreadBudgetGuard();
  ThreadBudgetGuard(const ThreadBudgetGuard&) = delete;
  ThreadBudgetGuard& operator=(const ThreadBudgetGuard&) = delete;

 private:
  int previous_;
  BlasThreadsGuard blas_;
};

// set(n) limits the BLAS library to n threads; get() reads its current setting.
void register_blas_threads_hook(void (*set)(int threads), int (*get)());

void run_on_devices(const std::vector<Device>& devices, const std::function<void(Device)>& fn);

}  // namespace oomlab
