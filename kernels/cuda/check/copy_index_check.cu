// copy_index_check.cu — a CPU-only check of copy.cu's 32-bit offsets (copy_index.cuh, behind
// OOMLAB_CUDA_COPY_FASTDIV): FastDiv32 equals n / d for edge and random divisors and
// numerators below 2^31, and the 32-bit offsets equal the int64 reference offsets for every index of
// small geometries and random indices of large ones (BERT's head-layout permutes, channels_last
// conversions, random shapes and strides), with fits32 refusing what 31 bits cannot hold.
// The same functions run on the GPU (mul_hi32 is __umulhi there). Built by CMake in CUDA
// builds as `cuda_copy_index_check` and run by ctest as
// CudaFormulaCheck.CopyOffsetsIn32BitsMatchTheReference; exits 1 on a mismatch.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cuda/copy_index.cuh"

using namespace oomlab::cuda;

namespace {
int failures = 0;
std::mt19937_64 rng(7);

void check_divisions() {
  std::vector<uint32_t> ds;
  for (uint32_t d = 1; d <= 2000; ++d) ds.push_back(d);
  for (int s = 1; s < 31; ++s)
    for (int64_t e : {-1, 0, 1}) ds.push_back(uint32_t((int64_t(1) << s) + e));
  ds.push_back(0x7fffffffu);
  for (int k = 0; k < 2000; ++k) ds.push_back(uint32_t(rng() % 0x7fffffffu) + 1);
  int64_t checked = 0;
  for (uint32_t d : ds) {
    const FastDiv32 f = FastDiv32::make(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 0x7ffffffeu, 0x7fffffffu - d};
    for (int k = 0; k < 64; ++k) ns.push_back(uint32_t(rng() % 0x7fffffffu));
    for (uint32_t n : ns) {
      if (n >= 0x7fffffffu) continue;
      ++checked;
      if (f.div(n) != n / d) {
        if (++failures < 10) std::printf("FAIL %u / %u: fast %u, exact %u\n", n, d, f.div(n), n / d);
      }
    }
  }
  std::printf("%s  FastDiv32 against n / d: %lld pairs\n", failures ? "FAIL" : "ok  ", (long long)checked);
}

// A geometry of `dims` (outermost first) with the input a permutation of a contiguous buffer
// (in_order[k]: the k-th input dimension's position in that buffer) and the output contiguous.
Geom permuted(const std::vector<int64_t>& dims, const std::vector<int>& in_order) {
  Geom g{};
  g.ndim = int(dims.size());
  std::vector<int64_t> buffer_st(dims.size());
  int64_t st = 1;
  for (int k = int(dims.size()) - 1; k >= 0; --k) {   // the input buffer's dims, in_order's order
    int src = 0;
    while (in_order[size_t(src)] != k) ++src;
    buffer_st[size_t(src)] = st;
    st *= dims[size_t(src)];
  }
  int64_t out = 1;
  for (int d = g.ndim - 1; d >= 0; --d) {
    g.shape[d] = dims[size_t(d)];
    g.in_st[d] = buffer_st[size_t(d)];
    g.out_st[d] = out;
    out *= dims[size_t(d)];
  }
  return g;
}

int64_t numel(const Geom& g) {
  int64_t n = 1;
  for (int d = 0; d < g.ndim; ++d) n *= g.shape[d];
  return n;
}

void check_geometry(const char* what, const Geom& g, bool every) {
  const int64_t n = numel(g);
  if (!fits32(g, n)) {
    std::printf("FAIL %s: fits32 refused a geometry of %lld elements\n", what, (long long)n);
    ++failures;
    return;
  }
  const Geom32 h = to_geom32(g);
  int64_t bad = 0, count = every ? n : 100000;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = every ? k : int64_t(rng() % uint64_t(n));
    int64_t io, oo;
    uint32_t io32, oo32;
    offsets(g, i, io, oo);
    offsets(h, uint32_t(i), io32, oo32);
    bad += io != int64_t(io32) || oo != int64_t(oo32);
  }
  failures += bad != 0;
  std::printf("%s  %s: %lld indices, %lld mismatches\n", bad ? "FAIL" : "ok  ", what, (long long)count, (long long)bad);
}

void check_geometries() {
  check_geometry("BERT head layout [B, T, NH, D] -> [B, NH, T, D]", permuted({32, 12, 128, 64}, {0, 2, 1, 3}), false);
  check_geometry("and back", permuted({32, 128, 12, 64}, {0, 2, 1, 3}), false);
  check_geometry("NCHW -> NHWC [128, 56, 56, 64]", permuted({128, 56, 56, 64}, {0, 2, 3, 1}), false);
  check_geometry("a transpose [3, 7]", permuted({3, 7}, {1, 0}), true);
  for (int t = 0; t < 40; ++t) {   // random shapes (1..6 dims) and permutations, every index
    const int nd = 1 + int(rng() % 6);
    std::vector<int64_t> dims;
    std::vector<int> order;
    for (int d = 0; d < nd; ++d) {
      dims.push_back(1 + int64_t(rng() % 9));
      order.push_back(d);
    }
    std::shuffle(order.begin(), order.end(), rng);
    check_geometry("random permute", permuted(dims, order), true);
  }
  Geom big = permuted({1 << 16, 1 << 16}, {1, 0});   // 2^32 elements: not 32-bit
  if (fits32(big, numel(big))) {
    std::printf("FAIL fits32 accepted 2^32 elements\n");
    ++failures;
  }
  Geom wide = permuted({2, 3}, {0, 1});
  wide.in_st[0] = int64_t(1) << 31;   // an offset past 2^31
  if (fits32(wide, numel(wide))) {
    std::printf("FAIL fits32 accepted an offset past 2^31\n");
    ++failures;
  }
}
}  // namespace

int main() {
  check_divisions();
  check_geometries();
  std::printf("%d failures\n", failures);
  return failures != 0;
}
