// collective_check.h — the data nccl-tests-style checks use: rank r's element i is a small
// integer (exact in float16, bfloat16 and every wider dtype, so any summation order gives
// the same bits), and the expected result of a reduction over n ranks rounded as the
// backends round it (avg: the exact sum divided once in float32 for 16-bit dtypes, in the
// dtype otherwise; int64 truncates). Shared by the collective tests and allreduce-bench.
#pragma once
#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/parallel/communicator.h"

namespace oomlab {

double check_value(int rank, int64_t i);
Tensor check_input(int rank, int64_t count, DType dtype, Device device, int64_t offset = 0);
double expected_reduction(ReduceOp op, DType dtype, int world, int64_t i);
// Elements of `out` (cpu) that differ from expected_reduction(op, dtype, world, offset + i).
int64_t count_wrong(const Tensor& out, ReduceOp op, int world, int64_t offset = 0);

}  // namespace oomlab
