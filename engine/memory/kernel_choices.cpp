// kernel_choices.cpp — the kernel-choice counts and the per-thread span sink (kernel_choices.h).
#include "engine/memory/kernel_choices.h"

#include <map>
#include <mutex>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/memory/caching_allocator.h"

namespace oomlab {
namespace {
using Key = std::tuple<std::string, std::string, std::string>;   // frame, op, choice
struct Choices {
  std::mutex mu;
  std::map<Key, int64_t> calls;
  std::vector<std::map<Key, int64_t>::const_iterator> order;   // first seen first
};
Choices& choices() { static auto* c = new Choices; return *c; }   // leaked: kernels may run at exit
thread_local std::vector<std::string>* t_sink = nullptr;
}  // namespace

void note_kernel_choice(const char* op, const std::string& choice) {
  if (t_sink != nullptr) t_sink->push_back(std::string(op) + ": " + choice);
  Key key{MemoryContext::current(), op, choice};
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mu);
  const auto [it, inserted] = c.calls.try_emplace(std::move(key), 0);
  ++it->second;
  if (inserted) c.order.push_back(it);
}

nlohmann::json kernel_choices_json() {
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mu);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& it : c.order)
    rows.push_back({{"frame", std::get<0>(it->first)}, {"op", std::get<1>(it->first)},
                    {"choice", std::get<2>(it->first)}, {"calls", it->second}});
  return rows;
}

void reset_kernel_choices() {
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mu);
  c.order.clear();
  c.calls.clear();
}

std::vector<std::string>* exchange_kernel_note_sink(std::vector<std::string>* sink) {
  std::vector<std::string>* previous = t_sink;
  t_sink = sink;
  return previous;
}

}  // namespace oomlab
