// rng.h — counter-based random numbers (Philox4x32-10, Salmon et al. 2011) and the
// per-logical-device generators (torch.cuda's per-device default generators).
// Contracts:
//  * The value drawn for element i of a call depends only on (seed, offset, i), never on
//    thread count or schedule; a Generator advances its offset by the number of 4-word
//    blocks each call consumes, so saving (seed, offset) saves the whole state.
//  * Each logical device (cpu:N, meta:N, cuda:N) has its own DeviceGenerator: ops that
//    draw (dropout) reserve their blocks from the generator of their tensor's device,
//    atomically, so device threads never share or race on an offset. get_state /
//    set_state save and restore it (checkpoints; recompute replays).
//  * manual_seed(s) seeds every device's generator, existing and future, at offset 0.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <mutex>

#include "engine/core/device.h"

namespace oomlab {

inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(M0) * ctr[0], p1 = uint64_t(M1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
           uint32_t(p0)};
    key[0] += W0; key[1] += W1;
  }
  return ctr;
}

// Uniform float in [0,1) from 24 random bits.
inline float uint_to_unit_float(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }

struct Generator {
  uint64_t seed = 0;
  uint64_t offset = 0;   // in 4-word blocks

  // The 4 random words of block `i` of a call starting at `base`.
  static std::array<uint32_t, 4> block(uint64_t seed, uint64_t base, uint64_t i) {
    uint64_t c = base + i;
    return philox4x32({uint32_t(c), uint32_t(c >> 32), 0u, 0u}, {uint32_t(seed), uint32_t(seed >> 32)});
  }
  // Block `i` (< kStreamBlocks) of stream `stream`: the 128-bit counter stream * 2^32 + i,
  // so streams never alias (a base of stream * 2^32 in block() wraps every 2^32 streams);
  // equal to block(seed, stream << 32, i) for stream < 2^32. One stream per dataset sample.
  static constexpr uint64_t kStreamBlocks = uint64_t(1) << 32;
  static std::array<uint32_t, 4> stream_block(uint64_t seed, uint64_t stream, uint64_t i) {
    return philox4x32({uint32_t(i), uint32_t(stream), uint32_t(stream >> 32), 0u},
                      {uint32_t(seed), uint32_t(seed >> 32)});
  }
  // Reserve n uniforms (ceil(n/4) blocks); returns the base to use with block().
  uint64_t reserve(uint64_t n) { uint64_t b = offset; offset += (n + 3) / 4; return b; }

  // Sequential helpers for host-side use (data shuffling, init). Each consumes one block.
  uint32_t next_u32() { return block(seed, offset++, 0)[0]; }
  double next_unit() {
    auto b = block(seed, offset++, 0);
    return (double(b[0] >> 5) * 67108864.0 + double(b[1] >> 6)) / 9007199254740992.0;
  }
  double next_normal() {  // Box-Muller, one block per draw
    auto b = block(seed, offset++, 0);
    double u1 = (double(b[0]) + 1.0) / 4294967297.0, u2 = double(b[1]) / 4294967296.0;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t next_below(uint64_t n) { return n ? (uint64_t(next_u32()) << 32 | next_u32()) % n : 0; }
};

class DeviceGenerator {
 public:
  explicit DeviceGenerator(uint64_t seed) : g_{seed, 0} {}
  Generator get_state() const;
  void set_state(const Generator& state);
  // Reserves n uniforms (ceil(n/4) blocks) atomically; returns the base for Generator::block.
  uint64_t reserve(uint64_t n);
  // Exclusive host-side use of the live state (sequential draws: init, shuffles).
  template <class F> decltype(auto) with(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    return f(g_);
  }

 private:
  mutable std::mutex mu_;
  Generator g_;
};

// The generator of a logical device (created on first use with the manual_seed seed).
DeviceGenerator& device_generator(const Device& device);
// (seed, base) of n draws for an op on `device`: reserved from `gen` when given, else from the
// device's generator (atomically: other device threads draw too). Dropout and fused attention
// use it, so both draw the same blocks from the same state.
// Under graph capture on `device` (this thread, begin_rng_capture) only graph-safe ops may
// draw, from the device's generator: their kernels add the replay's offset delta to `base`
// (engine/memory/device_graph.h), so every replay draws the blocks the same step would draw
// eagerly. Any other draw is a ValueError naming `op` (its numbers would repeat each replay).
std::pair<uint64_t, uint64_t> reserve_draws(Generator* gen, const Device& device, uint64_t n,
                                            const char* op = "an op", bool graph_safe = false);
// The capture of device's draws on this thread (DeviceGraph::capture); one at a time.
void begin_rng_capture(const Device& device);
void end_rng_capture();
void manual_seed(uint64_t seed);

}  // namespace oomlab
