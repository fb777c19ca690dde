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
using attention_check::expect_close;
using attention_check::failures;
using attention_check::padded_tail;

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
        for (int k = 0; k < K; ++k) s += double(tf32(a[i * lda + k])) * double(tf32(BCol ? bm[n * ldb + k] : bm[k * ldb + n]));
        c[i * ldc + n] = float(s);
      }
  }
};

template <class Smem, class Body> void run_grid(int64_t gx, int64_t gy, Body body) {
  attention_check::run_blocks<HostBlock, Smem>(
      gx, gy, kThreads, [&](int t, int64_t bx, int64_t by, HostBlock& b, Smem& s) { body(HostCtx{t, bx, by, &b}, s); });
}

int64_t blocks(int64_t rows) { return (rows + kRows - 1) / kRows; }


struct Case {
  std::string name;
  int64_t B, NH, Tq, Tk;
  double p;
  bool causal;
  std::vector<uint8_t> mask;
};

void check(const Case& c) {
  const int64_t BH = c.B * c.NH;
  std::mt19937 rng(uint32_t(c.Tq * 7 + c.Tk));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) {   // bfloat16 values: TF32 keeps them
      uint32_t b;
      x = u(rng);
      std::memcpy(&b, &x, 4);
      b &= 0xffff0000u;
      std::memcpy(&x, &b, 4);
    }
    return v;
  };
  const std::vector<float> q = fill(size_t(BH * c.Tq * kD)), k = fill(size_t(BH * c.Tk * kD)),
                           v = fill(size_t(BH * c.Tk * kD)), g = fill(size_t(BH * c.Tq * kD));
  FusedAttentionArgs a{q.data(), k.data(), v.data(), c.mask.empty() ? nullptr : c.mask.data(), nullptr, nullptr,
                       g.data(), nullptr, nullptr, nullptr, BH, c.NH, c.Tq, c.Tk, kD, kD, 0.125, c.p, 0x5eedull,
                       0x1000ull, c.causal, true};
  auto buffers = [&](FusedAttentionArgs& r, std::vector<std::vector<float>>& b) {
    b = {std::vector<float>(size_t(BH * c.Tq * kD)), std::vector<float>(size_t(BH * c.Tq)),
         std::vector<float>(size_t(BH * c.Tq * kD)), std::vector<float>(size_t(BH * c.Tk * kD)),
         std::vector<float>(size_t(BH * c.Tk * kD))};
    r.out = b[0].data(); r.lse = b[1].data(); r.dq = b[2].data(); r.dk = b[3].data(); r.dv = b[4].data();
  };
  std::vector<std::vector<float>> want, got;
  FusedAttentionArgs r = a, e = a;
  buffers(r, want);
  buffers(e, got);
  fused_attention_forward_kernels().launch(cpu_device(), DType::f32, r);
  fused_attention_backward_kernels().launch(cpu_device(), DType::f32, r);
  const uint32_t thr = uint32_t(std::ceil(c.p * 16777216.0));
  run_grid<FwdSmem>(blocks(c.Tq), BH, [&](const HostCtx& x, FwdSmem& s) { fwd_body(x, e, thr, s); });
  run_grid<DqSmem>(blocks(c.Tq), BH, [&](const HostCtx& x, DqSmem& s) { dq_body(x, e, thr, s); });
  run_grid<DkvSmem>(blocks(c.Tk), BH, [&](const HostCtx& x, DkvSmem& s) { dkv_body(x, e, thr, s); });
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  for (int t = 0; t < 5; ++t) expect_close("tc: " + c.name, names[t], got[size_t(t)], want[size_t(t)], t == 1 ? 1e-5 : 3e-3);
}

}  // namespace

int main() {
  ensure_kernels_registered();
  check({"one partial tile", 1, 1, 16, 16, 0.0, false, {}});
  check({"partial tiles, padding", 2, 2, 70, 100, 0.0, false, padded_tail(2, 100, {90, 37})});
  check({"a batch all padded", 2, 1, 33, 65, 0.0, false, padded_tail(2, 65, {60, 0})});
  check({"dropout 0.1", 1, 2, 70, 96, 0.1, false, padded_tail(1, 96, {80})});
  check({"causal", 1, 2, 130, 130, 0.0, true, {}});
  check({"causal, dropout, Tq < Tk", 2, 1, 64, 97, 0.2, true, padded_tail(2, 97, {97, 90})});
  printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
