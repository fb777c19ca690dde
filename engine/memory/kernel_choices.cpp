// kernel_choices.cpp — the kernel-choice counts and the per-thread span sink (kernel_choices.h).
#include "engine/memory/kernel_choices.h"

#include <map>
#include <mutex>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/memory/caching_allocator.h"

namespace oomlab {
namespace {
struct Choices {
  std::mutex mu;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;   // -> position in rows
  std::vector<nlohmann::json> rows;
};
Choices& choices() { static auto* c = new Choices; return *c; }   // leaked: kernels may run at exit
thread_local std::vector<std::string>* t_sink = nullptr;
}  // namespace

void note_kernel_choice(const char* op, const std::string& choice) {
  if (t_sink != nullptr) t_sink->push_back(std::string(op) + ": " + choice);
  auto key = std::make_tuple(MemoryContext::current(), std::string(op), choice);
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.index.find(key);
  if (it != c.index.end()) {
    c.rows[it->second]["calls"] = c.rows[it->second]["calls"].get<int64_t>() + 1;
    return;
  }
  c.rows.push_back({{"frame", std::get<0>(key)}, {"op", std::get<1>(key)}, {"choice", choice}, {"calls", 1}});
  c.index.emplace(std::move(key), c.rows.size() - 1);
}

nlohmann::json kernel_choices_json() {
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mu);
  return nlohmann::json(c.rows);
}

void reset_kernel_choices() {
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mu);
  c.index.clear();
  c.rows.clear();
}

std::vector<std::string>* exchange_kernel_note_sink(std::vector<std::string>* sink) {
  std::vector<std::string>* previous = t_sink;
  t_sink = sink;
  return previous;
}

}  // namespace oomlab
