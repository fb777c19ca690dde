// checked_math.cpp — overflow-checked size arithmetic (checked_math.h).
#include "engine/core/checked_math.h"

#include "engine/core/error.h"

namespace oomlab {
namespace {
std::string dims(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace

int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  OOMLAB_CHECK_T(ShapeError, a >= 0 && b >= 0, what, ": negative size (", a, " x ", b, ")");
  int64_t r = 0;
  OOMLAB_CHECK_T(ShapeError, !__builtin_mul_overflow(a, b, &r), what, ": ", a, " x ", b,
                 " is more than 2^63 - 1 (the size cannot be represented)");
  return r;
}

int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  OOMLAB_CHECK_T(ShapeError, a >= 0 && b >= 0, what, ": negative size (", a, " + ", b, ")");
  int64_t r = 0;
  OOMLAB_CHECK_T(ShapeError, !__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b,
                 " is more than 2^63 - 1 (the size cannot be represented)");
  return r;
}

int64_t checked_numel(const std::vector<int64_t>& shape, std::string_view what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    OOMLAB_CHECK_T(ShapeError, d >= 0, what, ": shape ", dims(shape), " has a negative dimension");
    OOMLAB_CHECK_T(ShapeError, !__builtin_mul_overflow(n, d, &n), what, ": shape ", dims(shape),
                   " has more than 2^63 - 1 elements (the size cannot be represented)");
  }
  return n;
}

size_t checked_nbytes(int64_t numel, size_t element_size, std::string_view what) {
  OOMLAB_CHECK_T(ShapeError, numel >= 0, what, ": negative element count ", numel);
  int64_t r = 0;
  OOMLAB_CHECK_T(ShapeError, !__builtin_mul_overflow(numel, int64_t(element_size), &r), what, ": ", numel,
                 " elements of ", element_size, " bytes are more than 2^63 - 1 bytes (the size cannot be represented)");
  return size_t(r);
}

}  // namespace oomlab
