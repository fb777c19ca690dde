// checked_math.h — size arithmetic that cannot wrap: element counts, byte sizes and step
// counts computed from user input (a batch of 10^12, an input of 2^62 x 2 x 2, 2^61 epochs).
// Contract: every result is exact or the call throws ShapeError naming `what` and the
// operands ("... needs more than 2^63 - 1 elements"), on every device including meta, so
// a size that cannot be represented is a clear error instead of a wrapped number.
// Operands must be >= 0 (a negative dimension is itself a ShapeError).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace oomlab {

int64_t checked_mul(int64_t a, int64_t b, std::string_view what);
int64_t checked_add(int64_t a, int64_t b, std::string_view what);
// The product of the dimensions (1 for a scalar).
int64_t checked_numel(const std::vector<int64_t>& shape, std::string_view what);
// numel * element_size as a byte count that fits int64 (so sums of a few stay exact).
size_t checked_nbytes(int64_t numel, size_t element_size, std::string_view what);

}  // namespace oomlab
