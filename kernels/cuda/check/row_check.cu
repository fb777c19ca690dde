// row_check.cu — part of cuda_formula_check (formula_check.cu holds main and the file's
// contract): the row kernels' host twins — layer_norm, softmax and masked_softmax in the lane
// order of row_lanes.cuh (lane_sum8), with its fused multiply-adds — against the CPU kernels
// bit for bit, float32 and float64. Failures count in bit_check_util.h's shared counter.
#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/cuda/check/bit_check_util.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/layernorm.h"
#include "kernels/softmax.h"

using namespace oomlab;
using namespace oomlab::cuda;
using namespace oomlab::bit_check;

namespace {
const Device CPU = cpu_device();

// The CPU's lane_sum order (lane k: columns k, k+8, ...; tail into lane 0), with the
// fused flag as row_lanes.cuh's lane_sum8 passes it.
template <class Acc> double lane_sum_h(int64_t C, Acc acc) {
  double s[8] = {};
  const int64_t C8 = C & ~int64_t(7);
  for (int k = 0; k < 8; ++k)
    for (int64_t j = k; j < C8; j += 8) s[k] = acc(s[k], j, true);
  for (int64_t j = C8; j < C; ++j) s[0] = acc(s[0], j, j == C - 1 && ((C - C8) & 1));
  double r = 0;
  for (int k = 0; k < 8; ++k) r = r + s[k];
  return r;
}
template <class T> void test_layer_norm() {
  for (int64_t H : {1, 7, 8, 13, 64, 100, 257}) {
    const int64_t rows = 37;
    auto x = randv<T>(rows * H, -3, 5), w = randv<T>(H, 0.5, 1.5), b = randv<T>(H, -1, 1),
         dy = randv<T>(rows * H, -1, 1);
    for (int mode = 0; mode < 4; ++mode) {
      const T* wp = (mode & 1) ? w.data() : nullptr;
      const T* bp = (mode & 2) ? b.data() : nullptr;
      std::vector<T> y(rows * H), mean(rows), rstd(rows), ye(rows * H), me(rows), re(rows);
      LayerNormArgs a{x.data(), wp,      bp,      y.data(), mean.data(), rstd.data(), nullptr,
                      nullptr,  nullptr, nullptr, rows,     H,           1e-5};
      layer_norm_forward_kernels().launch(CPU, dt<T>(), a);
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x.data() + r * H;
        double mu = lane_sum_h(H, [&](double s, int64_t j, bool) { return s + double(xr[j]); }) / double(H);
        double var = lane_sum_h(H,
                                [&](double s, int64_t j, bool f) {
                                  double d = double(xr[j]) - mu;
                                  return add_prod(s, d, d, f);
                                }) /
                     double(H);
        double rs = 1.0 / std::sqrt(var + 1e-5);
        me[r] = T(mu);
        re[r] = T(rs);
        for (int64_t j = 0; j < H; ++j)
          ye[r * H + j] = layer_norm_y(xr[j], T(mu), T(rs), wp ? wp + j : nullptr, bp ? bp + j : nullptr);
      }
      check("ln mean", mean, me);
      check("ln rstd", rstd, re);
      check("ln y", y, ye);
      // backward
      std::vector<T> dx(rows * H), dw(H), db(H), dxe(rows * H), dwe(H), dbe(H);
      LayerNormArgs ab{x.data(),  wp,        nullptr,   nullptr, mean.data(), rstd.data(), dy.data(),
                       dx.data(), dw.data(), db.data(), rows,    H,           1e-5};
      layer_norm_backward_kernels().launch(CPU, dt<T>(), ab);
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x.data() + r * H;
        const T* gr = dy.data() + r * H;
        const T m = mean[r], s = rstd[r];
        auto wdy = [&](int64_t j) { return wp ? mul_rn(gr[j], wp[j]) : gr[j]; };
        double sg = lane_sum_h(H, [&](double acc, int64_t j, bool) { return acc + double(wdy(j)); });
        double sgx = lane_sum_h(H, [&](double acc, int64_t j, bool f) {
          return add_prod(acc, double(wdy(j)), double(mul_rn(sub_rn(xr[j], m), s)), f);
        });
        T ma = T(sg / double(H)), mb = T(sgx / double(H));
        for (int64_t j = 0; j < H; ++j) dxe[r * H + j] = layer_norm_dx(wdy(j), xr[j], m, s, ma, mb);
      }
      for (int64_t c = 0; c < H; ++c) {
        double aw = 0, ab2 = 0;
        for (int64_t r = 0; r < rows; ++r) {
          T g = dy[r * H + c];
          {
            T xh = mul_rn(sub_rn(x[r * H + c], mean[r]), rstd[r]);
            if constexpr (sizeof(T) == 8)
              aw = fma_rn(double(g), double(xh), aw);
            else
              aw += double(mul_rn(g, xh));
          }
          ab2 += double(g);
        }
        dwe[c] = T(aw);
        dbe[c] = T(ab2);
      }
      check("ln dx", dx, dxe);
      check("ln dw (sequential rows)", dw, dwe);
      check("ln db (sequential rows)", db, dbe);
    }
  }
}

template <class T> void test_softmax() {
  for (int64_t C : {1, 5, 8, 10, 33, 1000}) {
    const int64_t N = 23;
    auto x = randv<T>(N * C, -20, 20), dy = randv<T>(N * C, -1, 1);
    for (int lg = 0; lg < 2; ++lg) {
      std::vector<T> y(N * C), ye(N * C), dx(N * C), dxe(N * C);
      softmax_forward_kernels().launch(CPU, dt<T>(), SoftmaxArgs{x.data(), y.data(), nullptr, nullptr, N, C, bool(lg)});
      for (int64_t r = 0; r < N; ++r) {
        const T* xr = x.data() + r * C;
        // lane max
        T m[8];
        for (auto& v : m) v = xr[0];
        int64_t C8 = C & ~7;
        for (int k = 0; k < 8; ++k)
          for (int64_t j = k; j < C8; j += 8) m[k] = xr[j] > m[k] ? xr[j] : m[k];
        for (int64_t j = C8; j < C; ++j) m[0] = xr[j] > m[0] ? xr[j] : m[0];
        T mx = m[0];
        for (int k = 1; k < 8; ++k) mx = m[k] > mx ? m[k] : mx;
        double sum = lane_sum_h(C, [&](double s, int64_t j, bool) { return s + double(exp_libm(sub_rn(xr[j], mx))); });
        if (lg) {
          T lse = T(std::log(sum));
          for (int64_t j = 0; j < C; ++j) ye[r * C + j] = sub_rn(sub_rn(xr[j], mx), lse);
        } else {
          T inv = T(1.0 / sum);
          for (int64_t j = 0; j < C; ++j) ye[r * C + j] = mul_rn(exp_libm(sub_rn(xr[j], mx)), inv);
        }
      }
      check(lg ? "log_softmax fwd" : "softmax fwd", y, ye);
      softmax_backward_kernels().launch(CPU,
                                     dt<T>(), SoftmaxArgs{nullptr, y.data(), dy.data(), dx.data(), N, C, bool(lg)});
      for (int64_t r = 0; r < N; ++r) {
        const T* yr = y.data() + r * C;
        const T* gr = dy.data() + r * C;
        if (lg) {
          T s = T(lane_sum_h(C, [&](double a, int64_t j, bool) { return a + double(gr[j]); }));
          for (int64_t j = 0; j < C; ++j) dxe[r * C + j] = fma_rn(-exp_libm(yr[j]), s, gr[j]);
        } else {
          T s = T(
              lane_sum_h(C, [&](double a, int64_t j, bool f) { return add_prod(a, double(gr[j]), double(yr[j]), f); }));
          for (int64_t j = 0; j < C; ++j) dxe[r * C + j] = mul_rn(yr[j], sub_rn(gr[j], s));
        }
      }
      check(lg ? "log_softmax bwd" : "softmax bwd", dx, dxe);
    }
  }
}

template <class T> void test_masked_softmax() {
  for (int64_t C : {1, 7, 16, 45, 128}) {
    const int64_t rows = 24, rpb = 6, nb = 4;
    auto x = randv<T>(rows * C, -8, 8), dy = randv<T>(rows * C, -1, 1);
    std::vector<uint8_t> mask(nb * C);
    for (int64_t i = 0; i < nb * C; ++i) mask[i] = (rng() % 4) == 0;
    for (int64_t j = 0; j < C; ++j) mask[2 * C + j] = 1;  // batch 2 fully padded
    for (int mm = 0; mm < 2; ++mm) {
      const uint8_t* mp = mm ? mask.data() : nullptr;
      std::vector<T> y(rows * C), ye(rows * C), dx(rows * C), dxe(rows * C);
      const double scale = 0.125;
      masked_softmax_forward_kernels().launch(
          CPU, dt<T>(), MaskedSoftmaxArgs{x.data(), mp, y.data(), nullptr, nullptr, rows, C, rpb, scale});
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* mr = mp ? mp + (r / rpb) * C : nullptr;
        int kept = 0;
        if (mr)
          for (int64_t j = 0; j < C; ++j) kept += mr[j] == 0;
        if (mr && kept == 0) {
          for (int64_t j = 0; j < C; ++j) ye[r * C + j] = T(0);
          continue;
        }
        auto score = [&](int64_t j) { return (mr && mr[j]) ? T(-INFINITY) : mul_rn(T(scale), x[r * C + j]); };
        T mx = -INFINITY;
        for (int64_t j = 0; j < C; ++j) {
          T v = score(j);
          mx = v > mx ? v : mx;
        }
        auto e = [&](int64_t j) { return exp_nonpos(sub_rn(score(j), mx)); };
        double sum = lane_sum_h(C, [&](double s, int64_t j, bool) { return s + double(e(j)); });
        T inv = T(1.0 / sum);
        for (int64_t j = 0; j < C; ++j) ye[r * C + j] = mul_rn(e(j), inv);
      }
      check(mm ? "masked_softmax fwd (mask)" : "masked_softmax fwd", y, ye);
      masked_softmax_backward_kernels().launch(
          CPU, dt<T>(), MaskedSoftmaxArgs{nullptr, nullptr, y.data(), dy.data(), dx.data(), rows, C, rpb, scale});
      for (int64_t r = 0; r < rows; ++r) {
        const T* yr = y.data() + r * C;
        const T* gr = dy.data() + r * C;
        T s =
            T(lane_sum_h(C, [&](double a, int64_t j, bool f) { return add_prod(a, double(gr[j]), double(yr[j]), f); }));
        for (int64_t j = 0; j < C; ++j) dxe[r * C + j] = mul_rn(mul_rn(T(scale), yr[j]), sub_rn(gr[j], s));
      }
      check("masked_softmax bwd", dx, dxe);
    }
  }
}
}  // namespace

void run_row_checks() {
  test_layer_norm<float>();
  test_layer_norm<double>();
  test_softmax<float>();
  test_softmax<double>();
  test_masked_softmax<float>();
  test_masked_softmax<double>();
}
