// dispatch.h — kernel tables (kernel_table[device type][dtype] -> function pointer) and
// the registry through which backends fill them.
// Contracts:
//  * Each op family declares its tables (with a per-op argument struct of raw pointers
//    and explicit dims) in its kernel header kernels/<family>.h, with
//    OOMLAB_KERNEL_TABLE; kernels/cpu and kernels/cuda fill them.
//  * A backend library (kernels/cpu, kernels/cuda) announces itself at static
//    initialisation with OOMLAB_REGISTER_BACKEND(name, fn); the libraries are linked
//    whole-archive, so linking one is what makes it available. The engine never names a
//    backend: the first table lookup (or allocator / hook request for an accelerator)
//    runs every announced registrar once, in announcement order.
//  * launch() on the meta device runs nothing (meta runs shapes and allocations only) but
//    refuses an op/dtype pair the emulated backend lacks, with that backend's message: meta
//    emulates the cpu backend (the one CI runs) unless a MetaEmulationGuard names another,
//    so a meta probe never accepts a run that would fail where it is meant to run.
//  * Kernels run only through launch(): get() is private, and every registered kernel is
//    wrapped in a check that throws InternalError when it runs outside a launch of itself
//    (see "the launch check" below; tests/test_devices.cpp plants such a bypass).
//  * A missing entry raises NotImplementedError "op 'X' has no cuda/bfloat16 kernel";
//    there is never a silent fallback to another device or dtype.
#pragma once
#include "engine/core/flop_counter.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/error.h"

#include <type_traits>

namespace oomlab {

// Called from a backend's static initialiser (OOMLAB_REGISTER_BACKEND); returns true.
bool announce_backend(const char* name, void (*register_fn)());
// Runs every announced backend's registrar exactly once (thread-safe, idempotent).
void ensure_kernels_registered();
// True when the backend `name` ("cpu", "cuda") was linked into this program.
bool backend_linked(const char* name);
inline bool built_with_cuda() { return backend_linked("cuda"); }

// The device type whose kernel tables meta launches check on this thread: cpu unless a
// MetaEmulationGuard is active (e.g. a --half run planned for cuda probed on meta first).
DeviceType meta_emulated_device_type();
class MetaEmulationGuard {
 public:
  explicit MetaEmulationGuard(DeviceType emulated);
  ~MetaEmulationGuard();
  MetaEmulationGuard(const MetaEmulationGuard&) = delete;
  MetaEmulationGuard& operator=(const MetaEmulationGuard&) = delete;
 private:
  DeviceType previous_;
};

// ---- the launch check ---------------------------------------------------------------
// Every kernel a backend registers is stored as a trampoline, checked_kernel<Args, F>,
// that first verifies the calling thread is inside KernelTable::launch for exactly this
// kernel (launch made the kernel's device current and recorded the kernel). A kernel
// reached any other way (a raw pointer kept from the table, called later or on another
// thread) throws InternalError naming the op before touching memory. Always on: the cost
// is one thread-local read per kernel call.
namespace dispatch_detail {
using AnyFn = void (*)();
AnyFn& launching_kernel();   // the kernel the calling thread is launching (thread-local)
// Records a registered kernel's (op, device, dtype) for the error message.
void describe_kernel(AnyFn kernel, const char* op, DeviceType d, DType t);
[[noreturn]] void kernel_ran_outside_launch(AnyFn kernel);

class LaunchScope {   // launch()'s record of the kernel it runs; nests
 public:
  explicit LaunchScope(AnyFn kernel) : previous_(launching_kernel()) { launching_kernel() = kernel; }
  ~LaunchScope() { launching_kernel() = previous_; }
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;
 private:
  AnyFn previous_;
};

template <class Args, auto F> void checked_kernel(const Args& args) {
  const AnyFn self = reinterpret_cast<AnyFn>(&checked_kernel<Args, F>);
  if (launching_kernel() != self) kernel_ran_outside_launch(self);
  F(args);
}
}  // namespace dispatch_detail

template <class Args> class KernelTable;
template <auto F, class Args> void set_kernel(KernelTable<Args>& table, DeviceType d, DType t);
struct KernelTableBypassForTest;

// The table of one op: a kernel per (device type, dtype). Engine code runs kernels only
// through launch(); there is no public way to obtain a kernel's pointer.
template <class Args>
class KernelTable {
 public:
  using Fn = void (*)(const Args&);
  explicit KernelTable(const char* op) : op_(op) {}
  // Runs the kernel for (device, dtype) with `d` as the thread's current device (what the
  // kernel's workspaces, streams and library handles use). On meta it runs nothing but
  // refuses, with that backend's own message, a dtype the emulated backend lacks.
  void launch(Device d, DType t, const Args& args) const {
    count_launch(t, args, op_);   // flop_counter.h: meta launches count too
    if (d.is_meta()) {
      get(Device{meta_emulated_device_type(), 0}, t);
      return;
    }
    Fn f = get(d, t);
    CurrentDeviceGuard guard(d);
    dispatch_detail::LaunchScope scope(reinterpret_cast<dispatch_detail::AnyFn>(f));
    f(args);
  }
  const char* op() const { return op_; }

 private:
  template <auto F, class A> friend void set_kernel(KernelTable<A>& table, DeviceType d, DType t);
  friend struct KernelTableBypassForTest;
  Fn get(Device d, DType t) const {
    ensure_kernels_registered();
    Fn f = fns_[int(d.type)][int(t)];
    if (!f)
      throw NotImplementedError(str_cat("op '", op_, "' has no ", device_type_name(d.type), "/",
                                        dtype_name(t), " kernel"));
    return f;
  }
  const char* op_;
  Fn fns_[kNumDeviceTypes][kNumDTypes] = {};
};

// Registers kernel F (a function `void(const Args&)`) for (d, t), wrapped in the launch
// check. Called from backend registrars only.
template <auto F, class Args> void set_kernel(KernelTable<Args>& table, DeviceType d, DType t) {
  static_assert(std::is_convertible_v<decltype(F), void (*)(const Args&)>,
                "set_kernel: F must be a void(const Args&) kernel of this table");
  auto* checked = &dispatch_detail::checked_kernel<Args, F>;
  dispatch_detail::describe_kernel(reinterpret_cast<dispatch_detail::AnyFn>(checked), table.op(), d, t);
  table.fns_[int(d)][int(t)] = checked;
}

// In a kernel header: declares `name##_kernels()`, the table of op `op` (one instance per
// program: an inline function's static).
#define OOMLAB_KERNEL_TABLE(name, Args, op) \
  inline ::oomlab::KernelTable<Args>& name##_kernels() { static ::oomlab::KernelTable<Args> t(op); return t; }

// Register one templated CPU kernel body for the float types.
#define OOMLAB_REGISTER_FLOAT_CPU(table, fn_template)                                            \
  do {                                                                                           \
    ::oomlab::set_kernel<&fn_template<float>>((table), ::oomlab::DeviceType::cpu, ::oomlab::DType::f32);  \
    ::oomlab::set_kernel<&fn_template<double>>((table), ::oomlab::DeviceType::cpu, ::oomlab::DType::f64); \
  } while (0)

// In one .cpp of a backend library: announces `fn` (void()) as the backend's registrar.
#define OOMLAB_REGISTER_BACKEND(name, fn) \
  [[maybe_unused]] static const bool oomlab_backend_announced_ = ::oomlab::announce_backend(name, fn)

}  // namespace oomlab
