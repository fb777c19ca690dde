// bit_check_util.h — what the bit-for-bit host-twin checks (formula_check.cu, dropout_check.cu,
// cast_check.cu) share: the program's failure count, its seeded random source (seed 123),
// random float vectors, the dtype of a float type, and the comparison that prints one line per
// check (ok, or the mismatch count and the first mismatch) and counts a failure.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/dtype.h"

namespace oomlab::bit_check {

inline int failures = 0;
inline std::mt19937_64 rng(123);

template <class T> std::vector<T> randv(size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(rng));
  return v;
}
template <class T> constexpr DType dt() { return sizeof(T) == 4 ? DType::f32 : DType::f64; }
template <class T> bool same(T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }

template <class T> void check(const char* what, const std::vector<T>& cpu, const std::vector<T>& emu) {
  size_t bad = 0, first = SIZE_MAX;
  for (size_t i = 0; i < cpu.size(); ++i)
    if (!same(cpu[i], emu[i])) {
      if (first == SIZE_MAX) first = i;
      ++bad;
    }
  if (bad) {
    ++failures;
    std::printf("FAIL f%zu %-40s %zu/%zu mismatches; first at %zu: cpu %.17g emu %.17g\n", sizeof(T) * 8, what, bad,
                cpu.size(), first, double(cpu[first]), double(emu[first]));
  } else {
    std::printf("ok   %-40s %zu values\n", what, cpu.size());
  }
}

}  // namespace oomlab::bit_check
