// peak_by_module.cpp — the live blocks at a step's peak, by module and category
// (peak_by_module.h): the allocator's live blocks at the step's start, its trace replayed.
#include "experiments/plan/peak_by_module.h"

#include <algorithm>
#include <cstdio>

#include "engine/core/byte_sizes.h"
#include "engine/core/error.h"

namespace oomlab {

namespace {
std::string pad_right(const std::string& s, size_t n) { return s.size() >= n ? s : s + std::string(n - s.size(), ' '); }
std::string pad_left(const std::string& s, size_t n) { return s.size() >= n ? s : std::string(n - s.size(), ' ') + s; }
std::string mib_text(int64_t bytes) {
  if (bytes == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", double(bytes) / double(1 << 20));
  return buf;
}
}  // namespace

nlohmann::json PeakByModule::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const ModulePeakBytes& m : modules) {
    nlohmann::json r = {{"module", m.module}, {"total_bytes", m.total}};
    for (const auto& [category, bytes] : m.bytes) r[category + "_bytes"] = bytes;
    rows.push_back(std::move(r));
  }
  return {{"peak_allocated_bytes", peak_allocated_bytes}, {"peak_frame", peak_frame},
          {"categories", peak_categories()}, {"modules", std::move(rows)}};
}

std::string PeakByModule::table(size_t top) const {
  static const std::vector<std::pair<std::string, const char*>> cols = {
      {"parameters", "params"}, {"buffers", "buffers"}, {"gradients", "grads"}, {"optimizer_state", "optim"},
      {"inputs", "inputs"}, {"activations", "activ."}, {"backward", "bwd"}, {"other", "other"}};
  std::string out = str_cat("  at the peak (", format_bytes(double(peak_allocated_bytes)), ", reached in ", peak_frame,
                            "), by module (MiB):\n  ", pad_right("module", 36));
  for (const auto& c : cols) out += pad_left(c.second, 9);
  out += pad_left("total", 10) + "\n";
  auto line = [&](const std::string& name, const std::map<std::string, int64_t>& bytes, int64_t total) {
    out += "  " + pad_right(name.size() > 35 ? "..." + name.substr(name.size() - 32) : name, 36);
    for (const auto& c : cols) out += pad_left(mib_text(bytes.at(c.first)), 9);
    out += pad_left(mib_text(total), 10) + "\n";
  };
  std::map<std::string, int64_t> rest;
  int64_t rest_total = 0;
  for (const std::string& c : peak_categories()) rest[c] = 0;
  for (size_t i = 0; i < modules.size(); ++i) {
    if (i < top) {
      line(modules[i].module, modules[i].bytes, modules[i].total);
      continue;
    }
    for (const auto& [c, b] : modules[i].bytes) rest[c] += b;
    rest_total += modules[i].total;
  }
  if (modules.size() > top) line(str_cat("(", modules.size() - top, " more modules)"), rest, rest_total);
  return out;
}

std::string OwnedTensors::owner_of(const std::string& name) const {
  const bool state = name.rfind("state.", 0) == 0;   // "state.<param>.<kind>": the param's owner
  const std::string n = state ? name.substr(6, name.rfind('.') - 6) : name;
  const size_t dot = n.rfind('.');
  return dot == std::string::npos ? root_ : n.substr(0, dot);
}

void OwnedTensors::add(const std::string& category, const std::string& name, const Tensor& t) {
  add_module(category, owner_of(name), t);
}

void OwnedTensors::add_module(const std::string& category, const std::string& module, const Tensor& t) {
  if (!t.defined() || t.storage()->data == nullptr) return;
  by_addr_.try_emplace(reinterpret_cast<uint64_t>(t.storage()->data), category, module);   // a tied tensor: first name
}

const std::pair<std::string, std::string>* OwnedTensors::find(uint64_t addr) const {
  auto it = by_addr_.find(addr);
  return it == by_addr_.end() ? nullptr : &it->second;
}

void PeakByModuleRecorder::arm() {
  armed_ = true;
  if (al_.recording_history()) return;   // --memory-snapshot's history continues
  al_.record_history(true);
  owns_trace_ = true;
}

void PeakByModuleRecorder::before_forward(int64_t micro, int64_t) {
  if (!armed_ || micro != 0) return;   // an out-of-memory retry marks again
  at_start_.clear();
  start_bytes_ = 0;
  for (const SegmentInfo& s : al_.segments())
    for (const BlockInfo& b : s.blocks)
      if (b.allocated) at_start_[b.addr] = Live{b.size, b.frame};
  for (const auto& [addr, live] : at_start_) start_bytes_ += int64_t(live.size);
  first_event_ = al_.trace().size();
  marked_ = true;
}

PeakByModuleRecorder::~PeakByModuleRecorder() {
  if (!owns_trace_) return;
  al_.record_history(false);
  al_.clear_trace();
}

namespace {
struct Frame { std::string layer, phase; };
Frame split_frame(const std::string& f) {
  const size_t slash = f.rfind('/');
  if (slash == std::string::npos) return {f, ""};
  return {f.substr(0, slash), f.substr(slash + 1)};
}

// The category of a block the caller did not name, by the phase it was allocated in.
std::string category_of_phase(const std::string& phase, bool survives_step) {
  if (phase == "fwd" || phase == "recompute") return "activations";
  if (phase == "bwd") return "backward";
  if (phase == "optim" && survives_step) return "optimizer_state";
  return "other";
}

std::vector<ModulePeakBytes> rows_of(const std::map<std::string, std::map<std::string, int64_t>>& by_module) {
  std::vector<ModulePeakBytes> rows;
  for (const auto& [module, bytes] : by_module) {
    ModulePeakBytes r{module, {}, 0};
    for (const std::string& c : peak_categories()) {
      auto it = bytes.find(c);
      r.bytes[c] = it == bytes.end() ? 0 : it->second;
      r.total += r.bytes[c];
    }
    rows.push_back(std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.total > b.total; });
  return rows;
}
}  // namespace

PeakByModule PeakByModuleRecorder::finish(const OwnedTensors& owned, int64_t expected_peak) const {
  const std::vector<TraceEvent> trace = al_.trace();
  OOMLAB_CHECK_T(InternalError, marked_ && trace.size() >= first_event_, "--by-module: no step ran since arm()");
  // Pass 1: the first event at which the live bytes reach their maximum.
  int64_t bytes = start_bytes_, peak = start_bytes_;
  size_t peak_end = first_event_;   // events [first_event_, peak_end) lead to the peak
  for (size_t i = first_event_; i < trace.size(); ++i) {
    const TraceEvent& e = trace[i];
    if (e.action == "alloc") bytes += int64_t(e.size);
    if (e.action == "free_completed") bytes -= int64_t(e.size);
    if (bytes > peak) peak = bytes, peak_end = i + 1;
  }
  OOMLAB_CHECK_T(InternalError, peak == expected_peak, "--by-module: the replayed trace peaks at ", peak,
                 " bytes, the step at ", expected_peak, " (the trace lost events)");
  // Pass 2: the live set there, then which of it the rest of the step frees.
  std::map<uint64_t, Live> live = at_start_;
  PeakByModule out;
  out.peak_allocated_bytes = peak;
  for (size_t i = first_event_; i < peak_end; ++i) {
    const TraceEvent& e = trace[i];
    if (e.action == "alloc") live[e.addr] = Live{e.size, e.frame};
    if (e.action == "free_completed") live.erase(e.addr);
    if (i + 1 == peak_end) out.peak_frame = e.frame;
  }
  std::map<uint64_t, bool> survives;
  for (const auto& [addr, l] : live) survives[addr] = true;
  for (size_t i = peak_end; i < trace.size(); ++i)
    if (trace[i].action == "free_completed" && survives.count(trace[i].addr)) survives[trace[i].addr] = false;
  std::map<std::string, std::map<std::string, int64_t>> by_module;
  for (const auto& [addr, l] : live) {
    const auto* known = survives[addr] ? owned.find(addr) : nullptr;
    const Frame f = split_frame(l.frame);
    const std::string module = known ? known->second : f.phase == "optim" ? owned.owner_of(f.layer) : f.layer;
    by_module[module.empty() ? "(no module)" : module]
             [known ? known->first : category_of_phase(f.phase, survives[addr])] += int64_t(l.size);
  }
  out.modules = rows_of(by_module);
  return out;
}

}  // namespace oomlab
