// local_comm_util.h — small helpers shared by the local backend's files (local_comm.cpp,
// local_all_reduce.cpp): element ranges of a ring's chunks, byte offsets, call texts.
#pragma once
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/error.h"

namespace oomlab::local_detail {

struct Range {
  int64_t lo, hi;
  int64_t size() const { return hi - lo; }
};
// Chunk i of n of [lo, hi): near-equal, element aligned (chunks may be empty when hi-lo < n).
inline Range chunk(int64_t lo, int64_t hi, int n, int i) {
  return {lo + (hi - lo) * i / n, lo + (hi - lo) * (i + 1) / n};
}
// Element `elem` of buffer p; null stays null (meta buffers have no data: no arithmetic on null).
inline char* at(void* p, int64_t elem, DType d) {
  return p ? static_cast<char*>(p) + elem * int64_t(dtype_size(d)) : nullptr;
}
inline const char* at(const void* p, int64_t elem, DType d) {
  return p ? static_cast<const char*>(p) + elem * int64_t(dtype_size(d)) : nullptr;
}
inline int64_t bytes_of(int64_t elems, DType d) { return elems * int64_t(dtype_size(d)); }
inline std::string call_text(const char* name, int64_t count, DType d, const std::string& extra) {
  return str_cat(name, "(", dtype_name(d), " x ", count, extra.empty() ? "" : ", ", extra, ")");
}
inline std::vector<int> others(int n, int me) {
  std::vector<int> v;
  for (int p = 0; p < n; ++p)
    if (p != me) v.push_back(p);
  return v;
}

}  // namespace oomlab::local_detail
