// argmax_row.cuh — the row argmax of loss.cu's count_correct kernel (training accuracy on CUDA),
// written for two executors: the GPU (one warp a row, the lanes' bests merged by
// __shfl_down_sync) and kernels/cuda/check/argmax_check.cu, which runs the same scan and merge
// for 32 emulated lanes on the host against kernels/loss.h's count_correct_rows.
// Order (torch.argmax's): NaN above every number, and among equals (NaNs included) the first
// index. Lane l scans j = l, l + 32, ... (increasing, so its best is its first maximum); a
// shuffle tree with offsets 16, 8, 4, 2, 1 merges lane pairs; lane 0 holds the row's argmax.
// bj = -1: no element seen (a lane past C).
#pragma once
#include <cstdint>

namespace oomlab::argmax_row {

struct Best {
  double v;
  long long j;
};

// Whether (v, j) beats b under the order above.
__host__ __device__ inline bool beats(double v, long long j, const Best& b) {
  if (b.j < 0) return j >= 0;
  if (j < 0) return false;
  const bool vn = v != v, bn = b.v != b.v;
  if (vn || bn) return vn && (!bn || j < b.j);
  return v > b.v || (v == b.v && j < b.j);
}

// Lane `lane`'s best over its columns; value(j) is element j of the row as a double.
template <class Value> __host__ __device__ Best lane_best(int lane, int64_t C, Value value) {
  Best b{0.0, -1};
  for (int64_t j = lane; j < C; j += 32) {
    const double v = value(j);
    if (beats(v, j, b)) b = Best{v, j};
  }
  return b;
}

// One step of the merge tree: the lane's best against the one `offset` lanes up.
__host__ __device__ inline Best merge(const Best& mine, const Best& up) { return beats(up.v, up.j, mine) ? up : mine; }

}  // namespace oomlab::argmax_row
