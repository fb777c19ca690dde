// rng.cpp — the per-device generators (rng.h): one DeviceGenerator per logical device,
// created on first use, never destroyed (tensors of static objects may draw at exit).
#include "engine/core/rng.h"

#include "engine/core/error.h"

#include <map>
#include <memory>

namespace oomlab {
namespace {
struct Generators {
  std::mutex mu;
  uint64_t seed = 0;   // the last manual_seed
  std::map<std::pair<int, int>, std::unique_ptr<DeviceGenerator>> by_device;
};
Generators& generators() { static Generators* g = new Generators; return *g; }
}  // namespace

Generator DeviceGenerator::get_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return g_;
}

void DeviceGenerator::set_state(const Generator& state) {
  std::lock_guard<std::mutex> lock(mu_);
  g_ = state;
}

uint64_t DeviceGenerator::reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  return g_.reserve(n);
}

DeviceGenerator& device_generator(const Device& device) {
  Generators& gs = generators();
  std::lock_guard<std::mutex> lock(gs.mu);
  auto& slot = gs.by_device[{int(device.type), device.index}];
  if (!slot) slot = std::make_unique<DeviceGenerator>(gs.seed);
  return *slot;
}

void manual_seed(uint64_t seed) {
  Generators& gs = generators();
  std::lock_guard<std::mutex> lock(gs.mu);
  gs.seed = seed;
  for (auto& [key, g] : gs.by_device) g->set_state(Generator{seed, 0});
}

namespace {
thread_local bool t_capturing = false;
thread_local Device t_capture_device;
}  // namespace

void begin_rng_capture(const Device& device) {
  t_capturing = true;
  t_capture_device = device;
}
void end_rng_capture() { t_capturing = false; }

std::pair<uint64_t, uint64_t> reserve_draws(Generator* gen, const Device& device, uint64_t n, const char* op,
                                            bool graph_safe) {
  OOMLAB_CHECK(!t_capturing || !(device == t_capture_device) || (graph_safe && gen == nullptr), "graph capture: ", op,
               " draws random numbers it cannot draw afresh on each replay (every replay would repeat the captured "
               "ones); run it without graphs, or without its randomness (dropout 0)");
  uint64_t seed = 0;
  if (gen) {
    seed = gen->seed;
    return {seed, gen->reserve(n)};
  }
  const uint64_t base = device_generator(device).with([&](Generator& g) {
    seed = g.seed;
    return g.reserve(n);
  });
  return {seed, base};
}

}  // namespace oomlab
