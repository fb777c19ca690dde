// batchnorm_nhwc.cuh — the bodies of batchnorm_nhwc.cu's split kernels (channels_last
// batch_norm, x as [M, C] rows), written for an executor context as attention_tiled.cuh's:
// the GPU runs them with DeviceCtx (block_ctx.cuh), and kernels/cuda/check/
// bn_nhwc_check.cu runs the very same bodies on the host, block by block with one host
// thread per GPU thread, against the CPU's batchnorm_rows_cpu.cpp.
// Layout: kThreads = 256 threads per block, thread t is channel lane t % 32 and row lane
// t / 32 (a warp: 32 adjacent channels of one row, coalesced); block (bx, by) owns rows
// [bx*chunk, (bx+1)*chunk) of channels [by*32, by*32 + 32). Partials: each thread sums its
// rows (m0 + row lane, then + 8, ...) in double; the 8 row lanes are added in order 0..7 and
// lane (c, 0) writes part[(c*S + bx)*NV + k]; channel_total adds a channel's S partials in
// split order, once per channel, into the [C][NV] totals the next pass reads. Every thread of a block reaches each
// sync() the same number of times. IO<T> converts between storage and compute types (ld / st), as batchnorm.cu's loads.
// Training statistics: two passes (sum, then squared deviations from the mean), or one pass
// of shifted sums {sum(x-K), sum((x-K)^2)}, K the channel's first element x[0, c] (bn_math.cuh,
// batchnorm.cu's rule for float32 and 16-bit inputs; behind cuda_bn_cl_one_pass() here).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/cuda/bn_math.cuh"
#include "kernels/cuda/launch_utils.cuh"

namespace oomlab::bn_nhwc {

using cuda::DeviceIO;   // the GPU's IO<T> (launch_utils.cuh)

constexpr int kLanes = 32, kRows = 8, kThreads = kLanes * kRows;

struct Smem {
  double part[kRows][kLanes][2];
};

// Row splits S and their length: about 2048 blocks in all, >= 8 rows per thread; shapes only.
struct Split {
  int64_t M, C, S, chunk, tiles;
};
__host__ __device__ inline Split split_for(int64_t M, int64_t C) {
  Split s{M, C, 1, M, (C + kLanes - 1) / kLanes};
  const int64_t by_size = (M + kRows * 8 - 1) / (kRows * 8), by_grid = 2048 / s.tiles > 0 ? 2048 / s.tiles : 1;
  int64_t S = by_size < by_grid ? by_size : by_grid;
  S = S < 1 ? 1 : (S > 65535 ? 65535 : S);
  s.S = S;
  s.chunk = (M + S - 1) / S;
  return s;
}

template <class Ctx> __host__ __device__ inline int64_t channel_of(const Ctx& x) {
  return x.by() * kLanes + x.tid() % kLanes;
}

// f(o, acc) adds element o's NV terms (o = m*C + c, c this thread's channel) into acc.
template <int NV, class Ctx, class F>
__host__ __device__ void block_partials(const Ctx& x, const Split& sp, double* part, Smem& sm, F f) {
  const int lane = x.tid() % kLanes, row = x.tid() / kLanes;
  const int64_t c = channel_of(x), m0 = x.bx() * sp.chunk, m1 = m0 + sp.chunk < sp.M ? m0 + sp.chunk : sp.M;
  double acc[NV];
  for (int k = 0; k < NV; ++k) acc[k] = 0.0;
  if (c < sp.C)
    for (int64_t m = m0 + row; m < m1; m += kRows) f(m * sp.C + c, acc);
  for (int k = 0; k < NV; ++k) sm.part[row][lane][k] = acc[k];
  x.sync();
  if (row == 0 && c < sp.C)
    for (int k = 0; k < NV; ++k) {
      double t = 0.0;
      for (int r = 0; r < kRows; ++r) t += sm.part[r][lane][k];
      part[(c * sp.S + x.bx()) * NV + k] = t;
    }
  x.sync();   // sm.part is free again
}

// Channel c's totals: its S partials added in split order into tot[c*NV + k]. Run once per
// channel (totals kernel: one thread a channel) between a partials pass and the pass that
// reads the totals; each block used to add them itself, a serial loop of S strided loads
// repeated in all S x tiles blocks (3x the NCHW kernels' time on an H200, kit run of afbeb1e).
template <int NV> __host__ __device__ void channel_total(const Split& sp, const double* part, int64_t c, double* tot) {
  for (int k = 0; k < NV; ++k) {
    double t = 0.0;
    for (int64_t s = 0; s < sp.S; ++s) t += part[(c * sp.S + s) * NV + k];
    tot[c * NV + k] = t;
  }
}

// f(o) for this thread's elements of its channel in the block's rows.
template <class Ctx, class F> __host__ __device__ void for_rows(const Ctx& x, const Split& sp, F f) {
  const int64_t c = channel_of(x);
  if (c >= sp.C) return;
  const int64_t m0 = x.bx() * sp.chunk, m1 = m0 + sp.chunk < sp.M ? m0 + sp.chunk : sp.M;
  for (int64_t m = m0 + x.tid() / kLanes; m < m1; m += kRows) f(m * sp.C + c);
}

// The fused relu's store and dy mask (batchnorm.cu's bn_out / masked_dy).
template <class IO, class T> __host__ __device__ T out(typename IO::C v, bool relu) {
  return relu && !(v > 0 || v != v) ? IO::st(typename IO::C(0)) : IO::st(v);
}
template <class IO, class T> __host__ __device__ typename IO::C masked(const T* dy, const T* ym, int64_t o) {
  return ym && IO::ld(ym[o]) <= typename IO::C(0) ? typename IO::C(0) : IO::ld(dy[o]);
}

struct Stats {   // the training forward's scalars
  double eps, momentum;
  bool relu;
};

// Training forward, pass 1 (sum) and pass 2 (squared deviations from pass 1's mean).
template <class IO, class T, class Ctx>
__host__ __device__ void sum_body(const Ctx& x, const Split& sp, const T* in, double* part1, Smem& sm) {
  block_partials<1>(x, sp, part1, sm, [&](int64_t o, double* acc) { acc[0] += double(IO::ld(in[o])); });
}
template <class IO, class T, class Ctx>
__host__ __device__ void sqdev_body(const Ctx& x, const Split& sp, const T* in, const double* tot1, double* part2,
                                    Smem& sm) {
  const int64_t c = channel_of(x);
  const double mean = c < sp.C ? tot1[c] / double(sp.M) : 0.0;
  block_partials<1>(x, sp, part2, sm, [&](int64_t o, double* acc) {
    const double d = double(IO::ld(in[o])) - mean;
    acc[0] += d * d;
  });
}
// One-pass training forward, pass 1: part[(c*S + s)*2 + {0, 1}] = {sum(x-K), sum((x-K)^2)},
// K = in[c] (row 0 of channel c: the same value in every block).
template <class IO, class T, class Ctx>
__host__ __device__ void shifted_sums_body(const Ctx& x, const Split& sp, const T* in, double* part, Smem& sm) {
  const int64_t c = channel_of(x);
  const double K = c < sp.C ? double(IO::ld(in[c])) : 0.0;
  block_partials<2>(x, sp, part, sm, [&](int64_t o, double* acc) {
    const double d = double(IO::ld(in[o])) - K;
    acc[0] += d;
    acc[1] += d * d;
  });
}

// A channel's statistics from the totals of the pass(es) before: two-pass (tot1 = sums,
// tot2 = squared deviations) or one-pass (tot1 = [C][2] shifted sums, tot2 unused).
template <class IO, class T> struct TrainStats {
  const T* in;
  const double *tot1, *tot2;
  bool one_pass;
  __host__ __device__ cuda::ShiftedStats of(int64_t c, int64_t M) const {
    if (one_pass) return cuda::stats_from_shifted_sums(double(IO::ld(in[c])), tot1[c * 2], tot1[c * 2 + 1], M);
    return {tot1[c] / double(M), tot2[c] / double(M), tot2[c] / double(M - 1)};
  }
};

// Training forward, last pass: statistics, y; split 0 writes saved and running statistics.
template <class IO, class T, class P, class Ctx>
__host__ __device__ void train_apply_body(const Ctx& x, const Split& sp, const T* in, T* y, TrainStats<IO, T> ts,
                                          Stats st, const P* w, const P* b, P* rm, P* rv, P* sm_out, P* si_out) {
  const int64_t c = channel_of(x);
  if (c >= sp.C) return;
  const cuda::ShiftedStats s = ts.of(c, sp.M);
  const double mean = s.mean, invstd = 1.0 / sqrt(s.var + st.eps);
  if (x.bx() == 0 && x.tid() / kLanes == 0) {
    if (sm_out) sm_out[c] = P(mean);
    if (si_out) si_out[c] = P(invstd);
    if (rm) {
      rm[c] = P((1.0 - st.momentum) * double(rm[c]) + st.momentum * mean);
      rv[c] = P((1.0 - st.momentum) * double(rv[c]) + st.momentum * s.var_unbiased);
    }
  }
  const double scd = w ? double(w[c]) * invstd : invstd;
  const P scale = P(scd), shift = P((b ? double(b[c]) : 0.0) - mean * scd);
  for_rows(x, sp, [&](int64_t o) { y[o] = out<IO, T>(fma(IO::ld(in[o]), scale, shift), st.relu); });
}

// A backward pass's statistics: the saved ones (training) or the running ones (eval).
template <class P> struct BackwardSrc {
  bool training, need_xmu;
  double eps;
  const P *rm, *rv, *sm, *si;
  __host__ __device__ void stats(int64_t c, double& mean, double& invstd) const {
    mean = 0.0;
    invstd = 0.0;
    if (training) {
      if (need_xmu) mean = double(sm[c]);
      if (si) invstd = double(si[c]);
    } else {
      if (need_xmu) mean = double(rm[c]);
      if (rv) invstd = 1.0 / sqrt(double(rv[c]) + eps);
    }
  }
};

// Backward, pass 1: {sum dy, sum dy*(x-mean)} partials.
template <class IO, class T, class P, class Ctx>
__host__ __device__ void backward_sums_body(const Ctx& x, const Split& sp, const T* dy, const T* in,
                                            BackwardSrc<P> src, double* part, const T* ym, Smem& sm) {
  const int64_t c = channel_of(x);
  double mean = 0.0, invstd = 0.0;
  if (c < sp.C) src.stats(c, mean, invstd);
  block_partials<2>(x, sp, part, sm, [&](int64_t o, double* acc) {
    const double g = double(masked<IO>(dy, ym, o));
    acc[0] += g;
    if (src.need_xmu) acc[1] += g * (double(IO::ld(in[o])) - mean);
  });
}

// Backward, pass 2: dbias / dweight (split 0) and dx, batchnorm.cu's formulas.
template <class IO, class T, class P, class Ctx>
__host__ __device__ void backward_apply_body(const Ctx& x, const Split& sp, const T* dy, const T* in, T* dx,
                                             BackwardSrc<P> src, const P* w, const double* tot2, P* dw, P* db,
                                             const T* ym) {
  const int64_t c = channel_of(x);
  if (c >= sp.C) return;
  const double tot[2] = {tot2[c * 2], tot2[c * 2 + 1]};
  double mean, invstd;
  src.stats(c, mean, invstd);
  if (x.bx() == 0 && x.tid() / kLanes == 0) {
    if (db) db[c] = P(tot[0]);
    if (dw) dw[c] = P(tot[1] * invstd);
  }
  if (!dx) return;
  const P wt = P((w ? double(w[c]) : 1.0) * invstd);
  if (src.training) {
    const P mu = P(mean), dmean = P(tot[0] / double(sp.M)), k = P(invstd * invstd * tot[1] / double(sp.M));
    for_rows(x, sp,
             [&](int64_t o) { dx[o] = IO::st((masked<IO>(dy, ym, o) - dmean - (IO::ld(in[o]) - mu) * k) * wt); });
  } else {
    for_rows(x, sp, [&](int64_t o) { dx[o] = IO::st(wt * masked<IO>(dy, ym, o)); });
  }
}

}  // namespace oomlab::bn_nhwc
