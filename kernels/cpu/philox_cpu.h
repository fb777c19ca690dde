// philox_cpu.h — the CPU kernels' vectorisable Philox4x32-10 (dropout, fused attention's
// dropout replay): philox_batch fills w[k][b] = Generator::block(seed, first + b)[k]
// (engine/core/rng.h) for b < nb <= kPhiloxBatch, structure-of-arrays so the rounds vectorise.
#pragma once
#include <cstdint>

namespace oomlab {

constexpr int64_t kPhiloxBatch = 64;   // blocks per batch = 256 elements

inline void philox_batch(uint64_t seed, uint64_t first, int64_t nb, uint32_t w[4][kPhiloxBatch]) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  uint32_t* c0 = w[0]; uint32_t* c1 = w[1]; uint32_t* c2 = w[2]; uint32_t* c3 = w[3];
  for (int64_t b = 0; b < nb; ++b) {
    const uint64_t c = first + uint64_t(b);
    c0[b] = uint32_t(c); c1[b] = uint32_t(c >> 32); c2[b] = 0; c3[b] = 0;
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
#pragma omp simd
    for (int64_t b = 0; b < nb; ++b) {
      const uint64_t p0 = uint64_t(M0) * c0[b], p1 = uint64_t(M1) * c2[b];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[b] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[b] ^ k1;
      c1[b] = uint32_t(p1); c3[b] = uint32_t(p0); c0[b] = n0; c2[b] = n2;
    }
    k0 += W0; k1 += W1;
  }
}

}  // namespace oomlab
