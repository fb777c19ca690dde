// memory_export.cpp — memory_viz snapshot and Chrome-trace builders, OpProfiler.
// Contracts: the snapshot mirrors torch.cuda.memory._snapshot() field for field (oom
// trace entries carry "device_free" instead of "addr", as PyTorch's do); counter values
// in the Chrome trace are absolute: the baseline is the allocator's current stats minus
// the net effect of the recorded trace, so a trace started mid-run still reads true.
#include "engine/memory/memory_export.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include "engine/core/backend.h"
#include "engine/memory/kernel_choices.h"

namespace oomlab {

using nlohmann::json;

namespace {

// "layer/phase" -> [{"filename": layer, "line": 0, "name": phase}]; "" -> [].
json frames_of(const std::string& frame) {
  json frames = json::array();
  if (frame.empty()) return frames;
  const size_t slash = frame.rfind('/');
  const std::string layer = slash == std::string::npos ? frame : frame.substr(0, slash);
  const std::string phase = slash == std::string::npos ? "" : frame.substr(slash + 1);
  frames.push_back({{"filename", layer}, {"line", 0}, {"name", phase}});
  return frames;
}

struct ProfilerState {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::vector<OpSpan> spans;
};
ProfilerState& profiler() { static ProfilerState* s = new ProfilerState; return *s; }

}  // namespace

json memory_snapshot_json(const CachingAllocator& alloc) {
  const int device = alloc.device().index;
  json segments = json::array();
  for (const SegmentInfo& seg : alloc.segments()) {
    json blocks = json::array();
    uint64_t allocated = 0, requested = 0;
    for (const BlockInfo& b : seg.blocks) {
      if (b.allocated) { allocated += b.size; requested += b.requested; }
      blocks.push_back({{"address", b.addr},
                        {"size", b.size},
                        {"requested_size", b.allocated ? b.requested : 0},
                        {"state", b.allocated ? "active_allocated" : "inactive"},
                        {"frames", frames_of(b.allocated ? b.frame : "")}});
    }
    segments.push_back({{"device", device},
                        {"address", seg.addr},
                        {"total_size", seg.total_size},
                        {"allocated_size", allocated},
                        {"active_size", allocated},
                        {"requested_size", requested},
                        {"stream", 0},
                        {"segment_type", seg.small_pool ? "small" : "large"},
                        {"segment_pool_id", json::array({0, seg.pool_id})},
                        {"is_expandable", false},
                        {"frames", json::array()},
                        {"blocks", std::move(blocks)}});
  }
  json trace = json::array();
  for (const TraceEvent& e : alloc.trace()) {
    json entry = {{"action", e.action}, {"size", e.size}, {"stream", 0},
                  {"time_us", e.time_us}, {"frames", frames_of(e.frame)}};
    entry[e.action == "oom" ? "device_free" : "addr"] = e.addr;
    trace.push_back(std::move(entry));
  }
  // device_traces[i] belongs to device i: pad the lists of the other devices.
  json device_traces = json::array();
  for (int i = 0; i < device; ++i) device_traces.push_back(json::array());
  device_traces.push_back(std::move(trace));
  return {{"segments", std::move(segments)},
          {"device_traces", std::move(device_traces)},
          {"allocator_settings", {{"PYTORCH_CUDA_ALLOC_CONF", ""},
                                  {"max_split_size", -1},
                                  {"expandable_segments", false}}}};
}

json chrome_trace_json(const CachingAllocator& alloc, const std::vector<OpSpan>& spans) {
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", "oomlab " + alloc.device().str()}}}});
  std::set<int> tids;
  for (const OpSpan& s : spans) {
    tids.insert(s.tid);
    if (s.category == "op") {
      json e = {{"name", s.name},  {"cat", "op"}, {"ph", "X"},   {"ts", s.ts_us},
                {"dur", s.dur_us}, {"pid", 0},    {"tid", s.tid}};
      if (!s.kernels.empty()) e["args"]["kernels"] = s.kernels;
      if (s.device_us >= 0) e["args"]["device_us"] = s.device_us;
      events.push_back(std::move(e));
    }
    else   // a decision at one instant (autocast casts), thread-scoped
      events.push_back({{"name", s.name}, {"cat", s.category}, {"ph", "i"}, {"s", "t"}, {"ts", s.ts_us},
                        {"pid", 0}, {"tid", s.tid}});
  }
  for (int tid : tids)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", tid},
                      {"args", {{"name", "stream " + std::to_string(tid)}}}});

  const std::vector<TraceEvent> trace = alloc.trace();
  int64_t allocated = alloc.stat("allocated_bytes.all.current");
  int64_t reserved = alloc.stat("reserved_bytes.all.current");
  for (const TraceEvent& e : trace) {  // rewind to the values before the first event
    const auto n = int64_t(e.size);
    if (e.action == "alloc") allocated -= n;
    else if (e.action == "free_completed") allocated += n;
    else if (e.action == "segment_alloc") reserved -= n;
    else if (e.action == "segment_free") reserved += n;
  }
  allocated = std::max<int64_t>(allocated, 0);
  reserved = std::max<int64_t>(reserved, 0);
  for (const TraceEvent& e : trace) {
    const auto n = int64_t(e.size);
    if (e.action == "oom") {
      events.push_back({{"name", "oom"}, {"ph", "i"}, {"s", "p"}, {"ts", e.time_us}, {"pid", 0},
                        {"tid", 0}, {"args", {{"requested", e.size}, {"device_free", e.addr},
                                              {"frame", e.frame}}}});
      continue;
    }
    if (e.action == "alloc") allocated += n;
    else if (e.action == "free_completed") allocated -= n;
    else if (e.action == "segment_alloc") reserved += n;
    else if (e.action == "segment_free") reserved -= n;
    else continue;  // free_requested changes nothing
    events.push_back({{"name", "memory"}, {"ph", "C"}, {"ts", e.time_us}, {"pid", 0},
                      {"args", {{"allocated", allocated}, {"reserved", reserved}}}});
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

void OpProfiler::enable(bool on) { profiler().on.store(on); }
bool OpProfiler::enabled() { return profiler().on.load(std::memory_order_relaxed); }

void OpProfiler::record(OpSpan span) {
  ProfilerState& p = profiler();
  std::lock_guard<std::mutex> lock(p.mu);
  p.spans.push_back(std::move(span));
}

std::vector<OpSpan> OpProfiler::take() {
  ProfilerState& p = profiler();
  std::lock_guard<std::mutex> lock(p.mu);
  std::vector<OpSpan> out;
  out.swap(p.spans);
  std::set<DeviceType> timed;
  for (OpSpan& s : out) {
    if (s.device_timer < 0) continue;
    timed.insert(s.device_type);
    try {
      s.device_us = backend_hooks(s.device_type).span_timer_elapsed_us(s.device_timer);
    } catch (...) {   // a mark that cannot be read leaves the span without device time
    }
    s.device_timer = -1;
  }
  for (DeviceType t : timed) backend_hooks(t).span_timer_reset();
  return out;
}

OpSpanScope::OpSpanScope(const char* name, int tid, Device device) : name_(name), tid_(tid), device_(device) {
  if (!OpProfiler::enabled()) return;
  if (tid == 0 && device.type != DeviceType::cpu && !device.is_meta()) {
    try {
      const BackendHooks h = backend_hooks(device.type);
      if (h.span_timer_start) device_timer_ = h.span_timer_start(device.index);
    } catch (...) {   // an untimed span rather than a failed op
      device_timer_ = -1;
    }
  }
  start_us_ = trace_clock_us();
  outer_sink_ = exchange_kernel_note_sink(&kernels_);
}

OpSpanScope::~OpSpanScope() {
  if (start_us_ < 0) return;
  exchange_kernel_note_sink(outer_sink_);
  const int64_t end_us = trace_clock_us();
  try {
    if (device_timer_ >= 0) backend_hooks(device_.type).span_timer_stop(device_timer_);
  } catch (...) {
    device_timer_ = -1;
  }
  try {
    std::vector<std::string> kernels;   // each choice once, in first-seen order
    for (std::string& k : kernels_)
      if (std::find(kernels.begin(), kernels.end(), k) == kernels.end()) kernels.push_back(std::move(k));
    OpProfiler::record(OpSpan{name_ != nullptr ? name_ : "", start_us_, end_us - start_us_, tid_, "op",
                              std::move(kernels), -1, device_timer_, device_.type});
  } catch (...) {  // destructors never throw; a lost span is acceptable
  }
}

}  // namespace oomlab
