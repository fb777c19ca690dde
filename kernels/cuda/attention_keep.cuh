// attention_keep.cuh — the dropout factor of fused attention's element e (attention_tiled.cu,
// attention_flash.cu): philox_block(seed, base + e / 4) word e % 4, kept when its top 24
// bits are >= thr (the dropout kernels' rule), as 1 / (1 - p) or 0; consecutive elements
// share one Philox block, cached.
#pragma once
#include <cstdint>

#include "kernels/cuda/launch_utils.cuh"

namespace oomlab::cuda {

struct AttentionKeep {
  uint64_t seed, base, cached = ~uint64_t(0);
  uint32_t thr;
  float kept;
  U4 w{};
  __host__ __device__ float operator()(uint64_t e) {
    if (e / 4 != cached) w = philox_block(seed, base + (cached = e / 4));
    const uint64_t r = e % 4;   // selected, not indexed: an indexed w would live in local memory
    const uint32_t word = r == 0 ? w.w[0] : r == 1 ? w.w[1] : r == 2 ? w.w[2] : w.w[3];
    return (word >> 8) >= thr ? kept : 0.0f;
  }
};

}  // namespace oomlab::cuda
