// op_test_util.h — small helpers shared by the op tests (tests/test_ops_*.cpp): the
// message of an expected error, substring checks, element-wise closeness of host
// vectors, uint8 key-padding masks, and a tensor's bytes (for bit-for-bit comparisons).
// Gradient checks live in gradcheck.h.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace oomlab::testing {

// The message of the E (by default any oomlab error) that f() throws; "" when it throws none.
template <class E = Error, class F> std::string error_of(F&& f) {
  try { f(); } catch (const E& e) { return e.what(); }
  return "";
}

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// A uint8 tensor (e.g. a key_padding_mask, 1 = padded) from values.
inline Tensor u8_mask(const std::vector<double>& v, const Shape& s, Device dev = cpu_device()) {
  return Tensor::from_vector(v, s, DType::u8, dev);
}

// A host tensor's bytes in row-major order: EXPECT_EQ on two of them is a bitwise comparison.
inline std::vector<uint8_t> tensor_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

}  // namespace oomlab::testing
