// dropout_check.cu — a CPU-only check of the CUDA dropout kernels' arithmetic against the CPU
// kernels, bit for bit, float32 and float64: Philox4x32-10 (launch_utils.cuh's philox_block)
// against Generator::block, the scalar kernels' keep rule and products, and dropout_math.cuh's
// vectorized bodies (OOMLAB_CUDA_DROPOUT_VEC) called once per Philox block as the GPU's threads
// call them, forward (y, mask) and backward (dx), on an aligned buffer with a partial last block
// and on a view one element in (their scalar form). Built by CMake in CUDA builds as
// `cuda_dropout_check` (nvcc host code with -ffp-contract=off) and run by ctest as
// CudaFormulaCheck.DropoutMatchesTheCpuBitForBit; exits 1 on a mismatch.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/rng.h"   // Generator::block
#include "kernels/cuda/check/bit_check_util.h"
#include "kernels/cuda/dropout_math.cuh"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/dropout.h"

using namespace oomlab;
using namespace oomlab::cuda;

namespace {
using namespace oomlab::bit_check;
const Device CPU = cpu_device();

template <class T> struct HostIO {   // dropout_math.cuh's IO on the host: T computes in T
  using C = T;
  static T ld(T v) { return v; }
  static T st(T v) { return v; }
};

// dropout_math.cuh's vectorized bodies (OOMLAB_CUDA_DROPOUT_VEC), one call per Philox block as
// the GPU's threads make them, against the CPU kernel's y / mask (from `a`) and its backward;
// then on a view one element in (not aligned to the vector: the bodies' scalar form).
// n elements of T at a 64-byte boundary (as the caching allocator's blocks are), copied from src.
template <class T> struct Aligned {
  std::vector<unsigned char> raw;
  T* p;
  explicit Aligned(const std::vector<T>& src) : raw(src.size() * sizeof(T) + 64) {
    p = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(raw.data()) + 63) & ~uintptr_t(63));
    std::memcpy(p, src.data(), src.size() * sizeof(T));
  }
  std::vector<T> from(int64_t skip, int64_t len) const { return std::vector<T>(p + skip, p + skip + len); }
};

template <class T>
void check_dropout_quads(const DropoutArgs& a, const std::vector<T>& x, const std::vector<T>& y,
                         const std::vector<uint8_t>& m) {
  const int64_t n = a.n;
  const uint32_t thr = uint32_t(std::ceil(a.p * 16777216.0));
  const T scale = T(1.0 / (1.0 - a.p));
  const std::vector<T> dy_all = randv<T>(n, -1, 1);
  for (int64_t skip : {0, 1}) {
    const int64_t len = n - skip;
    const T* xs = x.data() + skip;
    std::vector<T> yc(len), dy(dy_all.begin() + skip, dy_all.end()), dxc(len);
    std::vector<uint8_t> mc(len);
    DropoutArgs c{xs, yc.data(), mc.data(), nullptr, nullptr, len, a.p, a.seed, a.base};
    dropout_forward_kernels().launch(CPU, dt<T>(), c);
    DropoutArgs g{nullptr, nullptr, mc.data(), dy.data(), dxc.data(), len, a.p, a.seed, a.base};
    dropout_backward_kernels().launch(CPU, dt<T>(), g);
    // the GPU side's buffers, aligned, and views `skip` elements in
    const std::vector<T> zeros(static_cast<size_t>(n));
    const std::vector<uint8_t> zero_bytes(static_cast<size_t>(n));
    Aligned<T> xe{x}, ye{zeros}, dye{dy_all}, dxe{zeros};
    Aligned<uint8_t> me{zero_bytes}, mce{zero_bytes};
    std::memcpy(mce.p + skip, mc.data(), size_t(len));
    const bool vec = dropout_vec_aligned(xe.p + skip, ye.p + skip, me.p + skip, sizeof(T));
    if (vec != (skip == 0)) {
      printf("FAIL dropout_vec_aligned(%s view) = %d\n", skip ? "offset" : "aligned", int(vec));
      ++failures;
    }
    for (int64_t q = 0; q < (len + 3) / 4; ++q) {
      dropout_fwd_quad<HostIO<T>>(xe.p + skip, ye.p + skip, me.p + skip, len, thr, scale, a.seed, a.base, q, vec);
      dropout_bwd_quad<HostIO<T>>(dye.p + skip, mce.p + skip, dxe.p + skip, len, scale, q, vec);
    }
    check(skip ? "dropout quads, offset view: y" : "dropout quads: y", yc, ye.from(skip, len));
    check(skip ? "dropout quads, offset view: mask" : "dropout quads: mask", mc, me.from(skip, len));
    check(skip ? "dropout quads, offset view: dx" : "dropout quads: dx", dxc, dxe.from(skip, len));
    if (skip == 0) {
      check("dropout quads vs the CPU's y above", y, ye.from(0, n));
      check("dropout quads vs the CPU's mask above", m, me.from(0, n));
    }
  }
}

template <class T> void test_dropout() {
  for (double p : {0.1, 0.5, 0.9}) {
    const int64_t n = 100003;
    auto x = randv<T>(n, -1, 1);
    std::vector<T> y(n), ye(n);
    std::vector<uint8_t> m(n), me(n);
    DropoutArgs a{x.data(), y.data(), m.data(), nullptr, nullptr, n, p, 0x1234567890abcdefull, 77};
    dropout_forward_kernels().launch(CPU, dt<T>(), a);
    const uint32_t thr = uint32_t(std::ceil(p * 16777216.0));
    const T scale = T(1.0 / (1.0 - p));
    for (int64_t b = 0; b < (n + 3) / 4; ++b) {
      U4 w = philox_block(a.seed, a.base + b);
      for (int k = 0; k < 4 && 4 * b + k < n; ++k) {
        int64_t i = 4 * b + k;
        uint8_t keep = (w.w[k] >> 8) >= thr;
        me[i] = keep;
        ye[i] = mul_rn(x[i], mul_rn(T(keep), scale));
      }
    }
    check("dropout mask", m, me);
    check("dropout y", y, ye);
    check_dropout_quads<T>(a, x, y, m);
    // also vs Generator::block
    auto blk = Generator::block(a.seed, a.base, 5);
    U4 w = philox_block(a.seed, a.base + 5);
    if (blk[0] != w.w[0] || blk[3] != w.w[3]) {
      printf("FAIL philox vs Generator::block\n");
      ++failures;
    }
  }
}

}  // namespace

int main() {
  ensure_kernels_registered();
  test_dropout<float>();
  test_dropout<double>();
  printf("%d failures\n", failures);
  return failures != 0;
}
