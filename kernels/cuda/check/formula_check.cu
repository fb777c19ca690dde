// formula_check.cu — a CPU-only check that the per-element formulas of the pointwise CUDA
// kernels (kernels/cuda/pointwise_math.cuh, launch_utils.cuh: exp_f32) and, in row_check.cu
// (the same program), the row-sum order of row_lanes.cuh reproduce the CPU kernels bit for
// bit, float32 and float64 (the copy kernel's dtype casts: cast_check.cu; dropout and Philox:
// dropout_check.cu).
// It runs the host versions of those functions (explicit fma / rounded ops) next to the
// CPU kernels from the tables; no GPU needed. Built by CMake in CUDA builds as
// `cuda_formula_check` (nvcc host code with -ffp-contract=off, so the explicit fmas are
// the only fused operations) and run by ctest as CudaFormulaCheck.*; prints one line per
// check and exits 1 on a mismatch.
// Not checked here (no CPU twin or GPU-only arithmetic): half types, exp/log of the GPU's
// libm (softmax exp, lse log, float64 exp/erf), the column / loss reductions' tree order.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <cmath>
#include <functional>

#include "kernels/activation.h"
#include "kernels/cuda/check/bit_check_util.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/elementwise.h"
#include "kernels/loss.h"
#include "kernels/optim.h"
#include "kernels/upsample.h"

using namespace oomlab;
using namespace oomlab::cuda;

using namespace oomlab::bit_check;
const Device CPU = cpu_device();
void run_row_checks();   // row_check.cu: layer_norm, softmax, masked_softmax

template <class T> void test_elementwise() {
  const int64_t n = 100003;
  auto a = randv<T>(n, -10, 10), b = randv<T>(n, -10, 10);
  for (double alpha : {1.0, -0.3, 1.7})
    for (double beta : {0.0, 1.0, -2.5e-3})
      for (double gamma : {0.0, 0.1}) {
        std::vector<T> out(n), emu(n);
        axpby_kernels().launch(CPU, dt<T>(), AxpbyArgs{out.data(), a.data(), b.data(), alpha, beta, gamma, n});
        for (int64_t i = 0; i < n; ++i) emu[i] = axpby2(T(alpha), a[i], T(beta), b[i], T(gamma));
        check("axpby2", out, emu);
        axpby_kernels().launch(CPU, dt<T>(), AxpbyArgs{out.data(), a.data(), nullptr, alpha, beta, gamma, n});
        for (int64_t i = 0; i < n; ++i) emu[i] = axpby1(T(alpha), a[i], T(gamma));
        check("axpby1", out, emu);
      }
  std::vector<T> out(n), emu(n);
  mul_kernels().launch(CPU, dt<T>(), MulArgs{out.data(), a.data(), b.data(), 0.37, n});
  for (int64_t i = 0; i < n; ++i) emu[i] = mul3(a[i], b[i], T(0.37));
  check("mul", out, emu);
}

template <class T> void test_optim() {
  const int64_t n = 50001;
  auto p0 = randv<T>(n, -1, 1), g = randv<T>(n, -0.1, 0.1), b0 = randv<T>(n, -0.1, 0.1);
  for (double mom : {0.0, 0.9})
    for (double wd : {0.0, 5e-4})
      for (int nest = 0; nest < 2; ++nest)
        for (int first = 0; first < 2; ++first)
          for (double damp : {0.0, 0.1}) {
            if (mom == 0 && (nest || first || damp != 0)) continue;
            std::vector<T> p = p0, b = b0, pe = p0, be = b0;
            SgdArgs a{p.data(),    g.data(), mom != 0 ? b.data() : nullptr, 0.05, mom, damp, wd, bool(nest),
                      bool(first), n};
            sgd_kernels().launch(CPU, dt<T>(), a);
            SgdConst<T> k{T(0.05), T(wd), T(mom), T(1.0 - damp), wd != 0, bool(first), bool(nest)};
            for (int64_t i = 0; i < n; ++i) sgd_elem(k, mom != 0, pe[i], g[i], be[i]);
            check("sgd p", p, pe);
            if (mom != 0) check("sgd buf", b, be);
          }
  auto m0 = randv<T>(n, -0.01, 0.01), v0 = randv<T>(n, 0, 1e-4);
  for (int dec = 0; dec < 2; ++dec)
    for (double wd : {0.0, 1e-2})
      for (double beta1 : {0.9, 0.3}) {
        std::vector<T> p = p0, m = m0, v = v0, pe = p0, me = m0, ve = v0;
        const double lr = 1e-3, beta2 = 0.999, eps = 1e-8;
        const int t = 7;
        AdamArgs a{p.data(),
                   g.data(),
                   m.data(),
                   v.data(),
                   lr,
                   beta1,
                   beta2,
                   eps,
                   wd,
                   lr / (1 - std::pow(beta1, t)),
                   std::sqrt(1 - std::pow(beta2, t)),
                   bool(dec),
                   n};
        adam_kernels().launch(CPU, dt<T>(), a);
        const AdamConst<T> k = make_adam_const<T>(a);
        const bool decay = wd != 0, low = (1.0 - beta1) < 0.5;
        for (int64_t i = 0; i < n; ++i) {
          if (!decay)
            low ? adam_elem<T, false, false, true>(k, pe[i], g[i], me[i], ve[i])
                : adam_elem<T, false, false, false>(k, pe[i], g[i], me[i], ve[i]);
          else if (dec)
            low ? adam_elem<T, true, true, true>(k, pe[i], g[i], me[i], ve[i])
                : adam_elem<T, true, true, false>(k, pe[i], g[i], me[i], ve[i]);
          else
            low ? adam_elem<T, true, false, true>(k, pe[i], g[i], me[i], ve[i])
                : adam_elem<T, true, false, false>(k, pe[i], g[i], me[i], ve[i]);
        }
        check("adam p", p, pe);
        check("adam m", m, me);
        check("adam v", v, ve);
      }
}

template <class T> void test_sigmoid_gelu() {
  const int64_t n = 400001;
  auto x = randv<T>(n, -120, 100);
  auto xs = randv<T>(n, -6, 6);
  x.insert(x.end(), xs.begin(), xs.end());
  const int64_t N = int64_t(x.size());
  auto dy = randv<T>(N, -1, 1);
  std::vector<T> y(N), emu(N), dx(N);
  sigmoid_forward_kernels().launch(CPU, dt<T>(), SigmoidArgs{x.data(), y.data(), nullptr, nullptr, N});
  for (int64_t i = 0; i < N; ++i) emu[i] = sigmoid_fwd(x[i]);
  check("sigmoid fwd", y, emu);
  sigmoid_backward_kernels().launch(CPU, dt<T>(), SigmoidArgs{nullptr, y.data(), dy.data(), dx.data(), N});
  for (int64_t i = 0; i < N; ++i) emu[i] = sigmoid_bwd(y[i], dy[i]);
  check("sigmoid bwd", dx, emu);
  for (int th = 0; th < 2; ++th) {
    gelu_forward_kernels().launch(CPU, dt<T>(), GeluArgs{xs.data(), y.data(), nullptr, nullptr, n, bool(th)});
    std::vector<T> yy(y.begin(), y.begin() + n), ee(n);
    for (int64_t i = 0; i < n; ++i) ee[i] = gelu_fwd(xs[i], bool(th));
    check(th ? "gelu tanh fwd" : "gelu erf fwd", yy, ee);
    gelu_backward_kernels().launch(CPU, dt<T>(), GeluArgs{xs.data(), nullptr, dy.data(), dx.data(), n, bool(th)});
    std::vector<T> dd(dx.begin(), dx.begin() + n);
    for (int64_t i = 0; i < n; ++i) ee[i] = gelu_bwd(xs[i], dy[i], bool(th));
    check(th ? "gelu tanh bwd" : "gelu erf bwd", dd, ee);
  }
}

template <class T> void test_upsample() {
  for (int64_t H : {1, 2, 3, 5})
    for (int64_t W : {1, 2, 3, 4, 7}) {
      const int64_t NC = 3;
      auto x = randv<T>(NC * H * W, -2, 2), dy = randv<T>(NC * 4 * H * W, -1, 1);
      for (int bl = 0; bl < 2; ++bl) {
        std::vector<T> y(NC * 4 * H * W), ye(y.size()), dx(NC * H * W), dxe(dx.size());
        Upsample2xArgs a{NC, H, W, bool(bl), x.data(), y.data(), dy.data(), dx.data()};
        upsample2x_forward_kernels().launch(CPU, dt<T>(), a);
        upsample2x_backward_kernels().launch(CPU, dt<T>(), a);
        const int64_t H2 = 2 * H, W2 = 2 * W;
        for (int64_t i = 0; i < int64_t(y.size()); ++i) {
          const int64_t ow = i % W2, oh = (i / W2) % H2, pl = i / (W2 * H2);
          const T* xp = x.data() + pl * H * W;
          if (!bl) {
            ye[i] = xp[(oh >> 1) * W + (ow >> 1)];
            continue;
          }
          const Tap th = axis_tap(oh, H);
          const T* r0 = xp + th.i0 * W;
          const T* r1 = xp + th.i1 * W;
          T v0 = bilinear_row_at<T>([&](int64_t k) { return r0[k]; }, W, ow);
          T v1 = bilinear_row_at<T>([&](int64_t k) { return r1[k]; }, W, ow);
          ye[i] = fma_rn(T(th.l0), v0, mul_rn(T(th.l1), v1));
        }
        for (int64_t i = 0; i < int64_t(dx.size()); ++i) {
          const int64_t w = i % W, h = (i / W) % H, pl = i / (W * H);
          const T* gp = dy.data() + pl * 4 * H * W;
          if (!bl) {
            const T* g0 = gp + 2 * h * W2 + 2 * w;
            const T* g1 = g0 + W2;
            dxe[i] = add_rn(add_rn(add_rn(g0[0], g0[1]), g1[0]), g1[1]);
            continue;
          }
          T d = 0;
          bool first = true;
          axis_gather(h, H, [&](int64_t oh, double lh) {
            const T* gr = gp + oh * W2;
            T R = bilinear_row_adjoint_at<T>([&](int64_t k) { return gr[k]; }, W, w);
            d = first ? mul_rn(T(lh), R) : fma_rn(T(lh), R, d);
            first = false;
          });
          dxe[i] = d;
        }
        char buf[64];
        snprintf(buf, 64, "upsample %s H%ld W%ld", bl ? "bil" : "nn", long(H), long(W));
        check((std::string(buf) + " fwd").c_str(), y, ye);
        check((std::string(buf) + " bwd").c_str(), dx, dxe);
      }
    }
}

template <class T> void test_pixel_ce() {
  const int64_t N = 3, C = 5, HW = 300;
  auto x = randv<T>(N * C * HW, -6, 6);
  std::vector<int64_t> tgt(N * HW);
  for (auto& t : tgt) {
    int r = int(rng() % 7);
    t = r < 5 ? r : -100;
  }
  std::vector<T> lp(N * C * HW), lpe(lp.size()), d(lp.size()), de(lp.size());
  T loss = 0, dloss = T(1.3);
  PixelCrossEntropyArgs a{x.data(), lp.data(), tgt.data(), &loss, &dloss, d.data(), N, C, HW};
  pixel_cross_entropy_forward_kernels().launch(CPU, dt<T>(), a);
  pixel_cross_entropy_backward_kernels().launch(CPU, dt<T>(), a);
  int64_t count = 0;
  for (int64_t i = 0; i < N * HW; ++i) {
    const int64_t n = i / HW, p = i % HW;
    const T* xb = x.data() + n * C * HW + p;
    T mx = xb[0];
    for (int64_t c = 1; c < C; ++c) {
      T v = xb[c * HW];
      mx = v > mx ? v : mx;
    }
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += double(exp_t(sub_rn(xb[c * HW], mx)));
    T lse = T(std::log(sum));
    for (int64_t c = 0; c < C; ++c) lpe[n * C * HW + c * HW + p] = sub_rn(sub_rn(xb[c * HW], mx), lse);
    int64_t t = tgt[i];
    count += (t != -100 && t >= 0 && t < C);
  }
  check("pixel ce logp", lp, lpe);
  T w = T(double(dloss) / double(count));
  for (int64_t i = 0; i < N * C * HW; ++i) {
    const int64_t n = i / (C * HW), rem = i % (C * HW), c = rem / HW, p = rem % HW;
    int64_t t = tgt[n * HW + p];
    bool k = t != -100 && t >= 0 && t < C;
    T v = mul_rn(exp_t(lp[i]), k ? w : T(0));
    if (k && t == c) v = sub_rn(v, w);
    de[i] = v;
  }
  check("pixel ce grad", d, de);
}

int main() {
  ensure_kernels_registered();
  test_elementwise<float>();
  test_elementwise<double>();
  test_optim<float>();
  test_optim<double>();
  test_sigmoid_gelu<float>();
  test_sigmoid_gelu<double>();
  run_row_checks();   // row_check.cu
  test_upsample<float>();
  test_upsample<double>();
  test_pixel_ce<float>();
  test_pixel_ce<double>();
  printf("%d failures\n", failures);
  return failures != 0;
}
