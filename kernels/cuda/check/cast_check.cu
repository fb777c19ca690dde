// cast_check.cu — a CPU-only check that the copy kernel's dtype casts (kernels/cuda/cast_math.cuh,
// what copy.cu's convert_kernel runs) equal the CPU copy kernel's for every pair of dtypes:
// every 16-bit pattern of float16 / bfloat16, and for the others edge values (subnormals of
// every format included) and random bit patterns, through the bulk path and the strided
// index walk (where 16-bit NaNs are quieted). The twin runs with the host FPU in IEEE mode,
// as a GPU converts; the CPU kernel as it runs in production. Built by CMake in CUDA builds
// as `cuda_cast_check` (nvcc host code with -ffp-contract=off) and run by ctest as
// CudaFormulaCheck.CastsMatchTheCpuCopyKernelBitForBit; prints one line per dtype pair and
// exits 1 on a mismatch.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <xmmintrin.h>

#include "engine/core/dispatch.h"
#include "kernels/copy.h"
#include "kernels/cuda/cast_math.cuh"
#include "kernels/cuda/check/bit_check_util.h"

using namespace oomlab;
using namespace oomlab::cuda;

namespace {
using namespace oomlab::bit_check;   // failures, rng
const Device CPU = cpu_device();

// The GPU converts in IEEE mode (no flush-to-zero); the CPU backend's threads run with
// FTZ/DAZ. So the twin runs with the host FPU's flush bits cleared (as a GPU would
// convert), and the CPU kernel as it runs in production: a CPU cast that flushed a
// subnormal would differ here (the H100 run's float64 -> float32 / bfloat16 failure).
struct IeeeMode {   // clears MXCSR's FTZ (bit 15) and DAZ (bit 6) for a scope
  unsigned saved = _mm_getcsr();
  IeeeMode() { _mm_setcsr(saved & ~0x8040u); }
  ~IeeeMode() { _mm_setcsr(saved); }
};

// Source elements of dtype t (raw bytes): every 16-bit pattern for f16 / bf16; for the
// others, edge values (subnormals of every format included) and random bit patterns.
std::vector<uint8_t> cast_sources(DType t, int64_t& n) {
  const double edges[] = {0.0, -0.0, 1.0, -1.5, 2.5, 3.5, 1.0 / 3.0, 255.0, 256.0, 300.7, -3.2, 65504.0, 65520.0,
                          1e10, -1e10, 1e-8, 6e-8, -6e-8, 3e-5, 6.1e-5, 1e-40, -1e-40, 9.2e-41, 1.4e-45, 7e-46,
                          1.1754942e-38, 1.17549435e-38, -1e-39, 2e-310, -5e-324, 1e-320, 3.4e38, 3.5e38, 1e300,
                          INFINITY, -INFINITY, NAN, -NAN, 9.3e18, -9.3e18, 1e19, -1e19, 3e9 + 7, -3e9, 0.1, 1e-3};
  std::vector<uint8_t> out;
  auto push = [&](const void* p, size_t k) { out.insert(out.end(), (const uint8_t*)p, (const uint8_t*)p + k); };
  const size_t es = dtype_size(t);
  if (t == DType::f16 || t == DType::bf16) {
    for (uint32_t b = 0; b < 65536 + 13; ++b) {
      uint16_t h = uint16_t(b * 40503u);
      push(&h, 2);
    }  // a tail past the 8-wide blocks
  } else {
    IeeeMode ieee;
    for (double e : edges) {
      uint8_t buf[8];
      if (t == DType::u8) e = std::fabs(std::fmod(std::isfinite(e) ? e : 7.0, 256.0));
      if (t == DType::i64) e = std::isfinite(e) ? std::fmod(std::trunc(e), 9e18) : -5.0;
      cast::store(buf, t, 0, e);
      push(buf, es);
    }
    for (int k = 0; k < 4096; ++k) {   // random patterns, a quarter of them subnormal
      uint64_t r = rng();
      if (t == DType::f32 && (k & 3) == 0) r &= 0x807fffffull;
      if (t == DType::f64 && (k & 3) == 0) r &= 0x800fffffffffffffull;
      if (t == DType::f64 && (k & 3) == 1) r = (r & 0x800fffffffffffffull) | (uint64_t(0x360 + k % 0x30) << 52);
      push(&r, es);
    }
  }
  n = int64_t(out.size() / es);
  return out;
}

// What the GPU does with one element (copy.cu): a same-dtype copy moves bits (cudaMemcpy,
// or strided_kernel quieting 16-bit NaNs); a conversion goes through cast::load / store.
void emulate_cast(const uint8_t* in, DType src, uint8_t* out, DType dst, int64_t i, bool strided) {
  if (src != dst) {
    cast::store(out, dst, i, cast::load(in, src, i));
    return;
  }
  const size_t es = dtype_size(src);
  std::memcpy(out + size_t(i) * es, in + size_t(i) * es, es);
  if (strided && (src == DType::f16 || src == DType::bf16)) {
    uint16_t v;
    std::memcpy(&v, out + size_t(i) * 2, 2);
    v = src == DType::f16 ? cast::quiet_f16_nan(v) : cast::quiet_bf16_nan(v);
    std::memcpy(out + size_t(i) * 2, &v, 2);
  }
}

void test_casts() {
  const DType all[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::u8};
  for (DType src : all)
    for (DType dst : all) {
      int64_t n = 0;
      const std::vector<uint8_t> in = cast_sources(src, n);
      const size_t os = dtype_size(dst);
      for (int strided = 0; strided < 2; ++strided) {   // the bulk path and the index walk
        const int64_t m = strided ? n / 2 : n, step = strided ? 2 : 1;
        std::vector<uint8_t> cpu(size_t(m) * os * step, 0xAB), emu = cpu;
        CopyArgs a{};
        a.ndim = 1;
        a.shape[0] = m;
        a.in_strides[0] = step;
        a.out_strides[0] = step;
        a.in = in.data();
        a.in_dtype = src;
        a.out = cpu.data();
        a.out_dtype = dst;
        copy_kernels().launch(CPU, src, a);
        {
          IeeeMode ieee;
          for (int64_t i = 0; i < m; ++i) emulate_cast(in.data(), src, emu.data(), dst, i * step, strided != 0);
        }
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < m; ++i)
          if (std::memcmp(&cpu[size_t(i * step) * os], &emu[size_t(i * step) * os], os) != 0) {
            if (first < 0) first = i;
            ++bad;
          }
        char what[96];
        snprintf(what, sizeof what, "cast %s -> %s%s", dtype_name(src), dtype_name(dst), strided ? " (strided)" : "");
        if (bad) {
          ++failures;
          IeeeMode ieee;
          printf("FAIL %-40s %lld/%lld mismatches; first source %.17g\n", what, (long long)bad, (long long)m,
                 cast::load(in.data(), src, first * step));
        } else {
          printf("ok   %-40s %lld values\n", what, (long long)m);
        }
      }
    }
}

}  // namespace

int main() {
  ensure_kernels_registered();
  test_casts();
  printf("%d failures\n", failures);
  return failures != 0;
}
