// collective_check.cpp — check data and expected reductions (collective_check.h).
#include "engine/parallel/collective_check.h"

#include <algorithm>
#include <vector>

namespace oomlab {

double check_value(int rank, int64_t i) { return double((int64_t(rank) * 7 + i * 3) % 17) - 8.0; }

Tensor check_input(int rank, int64_t count, DType dtype, Device device, int64_t offset) {
  if (dtype == DType::i64) {
    std::vector<int64_t> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) v[size_t(i)] = int64_t(check_value(rank, i + offset));
    return Tensor::from_vector_i64(v, {count}, device);
  }
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = check_value(rank, i + offset);
  return Tensor::from_vector(v, {count}, dtype, device);
}

double expected_reduction(ReduceOp op, DType dtype, int world, int64_t i) {
  double acc = check_value(0, i);
  for (int r = 1; r < world; ++r)
    acc = op == ReduceOp::max ? std::max(acc, check_value(r, i)) : acc + check_value(r, i);
  if (op != ReduceOp::avg) return acc;
  if (dtype == DType::i64) return double(int64_t(acc) / world);
  if (dtype == DType::f64) return acc / world;
  const float f = float(acc) / float(world);
  if (dtype == DType::f32) return f;
  return Tensor::from_vector({double(f)}, {1}, dtype).to_vector()[0];   // one rounding to 16 bits
}

int64_t count_wrong(const Tensor& out, ReduceOp op, int world, int64_t offset) {
  const int64_t n = out.numel();
  // The expected values repeat with period 17 in i: compute one period.
  std::vector<double> period(17);
  for (int64_t k = 0; k < 17; ++k) period[size_t(k)] = expected_reduction(op, out.dtype(), world, k);
  int64_t wrong = 0;
  if (out.dtype() == DType::i64) {
    const std::vector<int64_t> v = out.to_vector_i64();
    for (int64_t i = 0; i < n; ++i) wrong += double(v[size_t(i)]) != period[size_t((i + offset) % 17)];
  } else {
    const std::vector<double> v = out.to_vector();
    for (int64_t i = 0; i < n; ++i) wrong += v[size_t(i)] != period[size_t((i + offset) % 17)];
  }
  return wrong;
}

}  // namespace oomlab
