// attention_mma_check.cu — a CPU-only run of the 16-bit tensor-core fused-attention kernels
// (attention_mma.cuh, behind OOMLAB_CUDA_MMA_ATTENTION): the kernels' own bodies executed by a
// host emulation of each thread block (128 host threads, a barrier for __syncthreads), with
// the warp-collective parts emulated from the lanes' registers: each lane posts its operand
// fragments to an exchange array, and after a barrier computes its accumulator elements from
// its warp's fragments as the PTX ISA lays out mma.m16n8k16 (A(row, k) in lane (row % 8) * 4
// + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k % 2; B(k, n) in lane n * 4 + (k % 8)
// / 2, register k >= 8; C(row, n) in lane (row % 8) * 4 + (n / 2), element 2 (row >= 8) + n % 2);
// the quad reductions as the two xor shuffles add ((v0 + v1) + (v2 + v3)); packing rounds to
// nearest even as __floats2half2_rn / __floats2bfloat162_rn. Block by block over the launch
// grid attention_mma.cu uses, for float16 and bfloat16 inputs, against the CPU kernels
// (kernels/cpu/attention_cpu.cpp) on the same values. The probabilities and dS are rounded
// to the 16-bit type for their products (as FlashAttention does), hence the bars: out, dq,
// dk, dv within 1e-2 (bfloat16) or 2e-3 (float16) of the largest magnitude of each, lse
// within 1e-5 (it never passes through 16 bits), -inf rows exact.
// What this cannot show: the GPU's accumulation order inside an mma, shared-memory limits,
// register spills. Cases: partial tiles, padding (a fully padded batch too), dropout,
// causal, Tq != Tk.
// Built as `cuda_attention_mma_check` in CUDA builds and run by ctest; exits 1 on a mismatch.
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/dtype.h"
#include "kernels/attention.h"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/check/attention_check_util.h"

using namespace oomlab;
using namespace oomlab::mma;

namespace {
using namespace attention_check;   // the shared cases, buffers, reference and comparison

struct HostBlock {
  std::barrier<> bar{kThreads};
  // double-buffered exchanges: call n uses buffer n % 2, so a lane may post call n + 1's
  // values while others still read call n's (call n + 2 waits for everyone at n + 1's barrier)
  float quad[2][kThreads];
  uint32_t a[2][kThreads][4], b[2][kThreads][2];
};

template <bool F16> float unpack(uint16_t h) { return F16 ? half_to_float(h) : bf16_to_float(h); }
template <bool F16> uint16_t round16(float v) { return F16 ? float_to_half(v) : float_to_bf16(v); }

template <bool F16> struct HostCtx {
  int t;
  int64_t x, y;
  HostBlock* blk;
  mutable int calls = 0;   // collective calls so far (every thread makes the same ones)
  int tid() const { return t; }
  int64_t bx() const { return x; }
  int64_t by() const { return y; }
  void sync() const { blk->bar.arrive_and_wait(); }
  template <class Op> float quad(float v, Op op) const {
    float* q = blk->quad[calls++ & 1];
    q[t] = v;
    sync();
    const int g = t & ~3;
    return op(op(q[g], q[g + 1]), op(q[g + 2], q[g + 3]));
  }
  float quad_max(float v) const { return quad(v, [](float p, float q) { return std::fmax(p, q); }); }
  float quad_sum(float v) const { return quad(v, [](float p, float q) { return p + q; }); }
  uint32_t pack(float lo, float hi) const { return uint32_t(round16<F16>(lo)) | uint32_t(round16<F16>(hi)) << 16; }
  static float half_of(uint32_t word, int k) { return unpack<F16>(uint16_t(k % 2 ? word >> 16 : word & 0xffffu)); }
  void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) const {
    const int buf = calls++ & 1;
    std::memcpy(blk->a[buf][t], a, sizeof a);
    std::memcpy(blk->b[buf][t], b, sizeof b);
    sync();
    const int w0 = t & ~31, lane = t & 31;
    for (int e = 0; e < 4; ++e) {
      const int row = lane / 4 + 8 * (e / 2), n = 2 * (lane % 4) + e % 2;
      double s = 0;
      for (int k = 0; k < 16; ++k) {
        const float av = half_of(blk->a[buf][w0 + (row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k);
        const float bv = half_of(blk->b[buf][w0 + n * 4 + (k % 8) / 2][k >= 8], k);
        s += double(av) * double(bv);
      }
      c[e] = float(double(c[e]) + s);
    }
  }
};

template <bool F16, class Smem, class Body> void run_grid(int64_t gx, int64_t gy, Body body) {
  run_blocks<HostBlock, Smem>(gx, gy, kThreads, [&](int t, int64_t bx, int64_t by, HostBlock& b, Smem& s) {
    body(HostCtx<F16>{t, bx, by, &b}, s);
  });
}

int64_t blocks(int64_t rows) { return (rows + kRows - 1) / kRows; }


template <bool F16> void check(const Case& c) {
  std::mt19937 rng(uint32_t(c.Tq * 7 + c.Tk));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](int64_t n) {   // values of the 16-bit type, as the op's float32 copies hold
    std::vector<float> v(size_t(c.B * c.NH * n * kD));
    for (float& x : v) x = unpack<F16>(round16<F16>(u(rng)));
    return v;
  };
  const std::vector<float> q = fill(c.Tq), k = fill(c.Tk), v = fill(c.Tk), g = fill(c.Tq);
  FusedAttentionArgs e = case_args(c, q, k, v, g);
  e.from_16bit = true;
  e.from_f16 = F16;
  const Buffers want = cpu_reference(e);
  Buffers got(e);
  got.point(e);
  const uint32_t thr = threshold(c.p);
  const int64_t BH = c.B * c.NH;
  run_grid<F16, FwdSmem>(blocks(c.Tq), BH, [&](const HostCtx<F16>& x, FwdSmem& s) { fwd_body(x, e, thr, s); });
  // the backward reads the forward's out as the op saves it: rounded to the 16-bit type
  std::vector<float> out16 = got.out;
  for (float& o : out16) o = unpack<F16>(round16<F16>(o));
  FusedAttentionArgs eb = e;
  eb.out = out16.data();
  run_grid<F16, DqSmem>(blocks(c.Tq), BH, [&](const HostCtx<F16>& x, DqSmem& s) { dq_body(x, eb, thr, s); });
  run_grid<F16, DkvSmem>(blocks(c.Tk), BH, [&](const HostCtx<F16>& x, DkvSmem& s) { dkv_body(x, eb, thr, s); });
  expect_buffers(std::string(F16 ? "mma f16: " : "mma bf16: ") + c.name, got, want, F16 ? 2e-3 : 1e-2, 1e-5);
}

template <bool F16> void check_all() {
  for (const Case& c : tensor_core_cases()) check<F16>(c);
}

}  // namespace

int main() {
  ensure_kernels_registered();
  check_all<false>();
  check_all<true>();
  printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
