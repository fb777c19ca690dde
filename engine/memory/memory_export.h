// memory_export.h — exporters for an allocator's state and history, plus op-span timing.
// Contracts: memory_snapshot_json() returns the dict torch.cuda.memory._snapshot() returns
// ({segments, device_traces, allocator_settings}), which pytorch.org/memory_viz opens as
// JSON; frames are {"filename": layer, "line": 0, "name": phase} from MemoryContext.
// chrome_trace_json() returns a Chrome/Perfetto trace: one "X" event per OpSpan (tid =
// stream; args.kernels: the kernel choices of its calls, kernel_choices.h; args.device_us:
// its device time, below; an OpSpan of another category, e.g. "autocast", is an "i" instant event), "C" counters
// "allocated"/"reserved" (bytes) after every allocator trace event, and an "i" instant event per oom. Both only build
// json; writing files is the caller's. All timestamps (allocator trace, OpSpan) share the trace_clock_us() origin.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/device.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {

// Microseconds on a steady clock since the first call in this process (defined in
// caching_allocator.cpp; allocator TraceEvent::time_us uses it too).
int64_t trace_clock_us();

struct OpSpan {
  std::string name;
  int64_t ts_us = 0, dur_us = 0;
  int tid = 0;  // stream: 0 compute, others for comm / copy streams
  std::string category = "op";   // "op": an "X" span; anything else: an instant "i" event (dur 0)
  std::vector<std::string> kernels;   // kernel choices of the calls inside (kernel_choices.h): span args
  // Device time between the span's start and end on its device's compute stream (the
  // backend's span timer: CUDA events), or -1 (a host device, a backend without one, a span
  // recorded during graph capture). Unlike dur_us it needs no synchronisation; where the
  // host, not the device, sets the pace it includes the device's idle time inside the span.
  int64_t device_us = -1;
  int64_t device_timer = -1;                 // the timer's handle until take() resolves it
  DeviceType device_type = DeviceType::cpu;  // whose timer
};

// Process-wide, thread-safe span recorder; off by default.
class OpProfiler {
 public:
  static void enable(bool on);
  static bool enabled();
  static void record(OpSpan span);
  static std::vector<OpSpan> take();  // returns and clears the recorded spans, device times resolved
};

// Times its own lifetime and records it when the profiler was enabled at construction,
// with the kernel choices noted on this thread meanwhile (and not by an inner span), and,
// when `device` has a span timer (BackendHooks) and tid is 0 (the compute stream), the
// device time of the work queued meanwhile.
class OpSpanScope {
 public:
  explicit OpSpanScope(const char* name, int tid = 0, Device device = cpu_device());
  ~OpSpanScope();
  OpSpanScope(const OpSpanScope&) = delete;
  OpSpanScope& operator=(const OpSpanScope&) = delete;
 private:
  const char* name_;
  int tid_;
  Device device_;
  int64_t device_timer_ = -1;
  int64_t start_us_ = -1;  // -1: not recording
  std::vector<std::string> kernels_;
  std::vector<std::string>* outer_sink_ = nullptr;
};

nlohmann::json memory_snapshot_json(const CachingAllocator& alloc);
nlohmann::json chrome_trace_json(const CachingAllocator& alloc, const std::vector<OpSpan>& spans);

}  // namespace oomlab
