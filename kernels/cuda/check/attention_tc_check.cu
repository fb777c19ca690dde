// attention_tc_check.cu — a CPU-only run of the tensor-core fused-attention kernels
// (attention_tc.cuh, behind OOMLAB_CUDA_TC_ATTENTION): the kernels' own bodies executed by a
// host emulation of each thread block (128 host threads, a barrier for __syncthreads, an
// exchange array for the lane-pair shuffles; a warp's WMMA product computed by its lane 0
// with operands rounded to TF32 as __float_to_tf32 does, round to nearest with ties away),
// block by block over the launch grid attention_tc.cu uses, against the CPU kernels
// (kernels/cpu/attention_cpu.cpp). Inputs are bfloat16 values (what the op's float32 copies
// of 16-bit tensors hold), so TF32 keeps them exactly; the probabilities and dS are rounded
// to TF32 for their products, hence the bar: out, dq, dk, dv within 3e-3 of the largest
// magnitude of each, lse within 1e-5 (it never passes through TF32), -inf rows exact.
// What this cannot show: WMMA's fragment layouts on the GPU (taken from the CUDA
// Programming Guide: row-major A, B(k, n) at b[n*ldb + k] col-major or b[k*ldb + n]
// row-major), shared-memory limits, the GPU's accumulation order. Cases: partial tiles,
// padding (a fully padded batch too), dropout, causal, Tq != Tk.
// Built as `cuda_attention_tc_check` in CUDA builds and run by ctest; exits 1 on a mismatch.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/dispatch.h"
#include "kernels/attention.h"
#include "kernels/cuda/check/attention_check_util.h"
#include "kernels/cuda/attention_tc.cuh"

using namespace oomlab;
using namespace oomlab::tc;

namespace {
using namespace attention_check;   // the shared cases, buffers, reference and comparison

float tf32(float v) {   // cvt.rna.tf32.f32: 10 mantissa bits, round to nearest, ties away from zero
  if (!std::isfinite(v)) return v;
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&v, &u, 4);
  return v;
}

struct HostBlock {
  std::barrier<> bar{kThreads};
  float xchg[kThreads];
};

struct HostCtx {
  int t;
  int64_t x, y;
  HostBlock* b;
  int tid() const { return t; }
  int64_t bx() const { return x; }
  int64_t by() const { return y; }
  void sync() const { b->bar.arrive_and_wait(); }
  template <class Op> float pair(float v, Op op) const {
    b->xchg[t] = v;
    sync();
    const float r = op(b->xchg[t & ~1], b->xchg[t | 1]);
    sync();
    return r;
  }
  float pair_max(float v) const { return pair(v, [](float p, float q) { return std::fmax(p, q); }); }
  float pair_sum(float v) const { return pair(v, [](float p, float q) { return p + q; }); }
  template <bool BCol>
  void mma(float* c, int ldc, const float* a, int lda, const float* bm, int ldb, int K, bool accumulate) const {
    if (t % 32 != 0) return;   // the warp's product, by its lane 0
    for (int i = 0; i < 16; ++i)
      for (int n = 0; n < 16; ++n) {
        double s = accumulate ? double(c[i * ldc + n]) : 0.0;
        for (int k = 0; k < K; ++k)
          s += double(tf32(a[i * lda + k])) * double(tf32(BCol ? bm[n * ldb + k] : bm[k * ldb + n]));
        c[i * ldc + n] = float(s);
      }
  }
};

template <class Smem, class Body> void run_grid(int64_t gx, int64_t gy, Body body) {
  run_blocks<HostBlock, Smem>(
      gx, gy, kThreads, [&](int t, int64_t bx, int64_t by, HostBlock& b, Smem& s) { body(HostCtx{t, bx, by, &b}, s); });
}

int64_t blocks(int64_t rows) { return (rows + kRows - 1) / kRows; }



void check(const Case& c) {
  std::mt19937 rng(uint32_t(c.Tq * 7 + c.Tk));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](int64_t n) {
    std::vector<float> v(size_t(c.B * c.NH * n * kD));
    for (float& x : v) {   // bfloat16 values: TF32 keeps them
      uint32_t b;
      x = u(rng);
      std::memcpy(&b, &x, 4);
      b &= 0xffff0000u;
      std::memcpy(&x, &b, 4);
    }
    return v;
  };
  const std::vector<float> q = fill(c.Tq), k = fill(c.Tk), v = fill(c.Tk), g = fill(c.Tq);
  FusedAttentionArgs e = case_args(c, q, k, v, g);
  e.from_16bit = true;
  const Buffers want = cpu_reference(e);
  Buffers got(e);
  got.point(e);
  const uint32_t thr = threshold(c.p);
  const int64_t BH = c.B * c.NH;
  run_grid<FwdSmem>(blocks(c.Tq), BH, [&](const HostCtx& x, FwdSmem& s) { fwd_body(x, e, thr, s); });
  run_grid<DqSmem>(blocks(c.Tq), BH, [&](const HostCtx& x, DqSmem& s) { dq_body(x, e, thr, s); });
  run_grid<DkvSmem>(blocks(c.Tk), BH, [&](const HostCtx& x, DkvSmem& s) { dkv_body(x, e, thr, s); });
  expect_buffers("tc: " + c.name, got, want, 3e-3, 1e-5);
}

}  // namespace

int main() {
  ensure_kernels_registered();
  for (const Case& c : tensor_core_cases()) check(c);
  printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
