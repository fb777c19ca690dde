// npy.h — read NumPy .npy files (numpy.lib.format versions 1.0, 2.0 and 3.0), the arrays
// `np.save` writes, so users can feed oomlab exactly the batches they feed PyTorch.
// Layout: "\x93NUMPY" | major | minor | header length (u16 little-endian in 1.0, u32 in
// 2.0/3.0) | header: a Python dict literal {'descr': '<f4', 'fortran_order': False,
// 'shape': (N, C, H, W), } padded with spaces and a newline | the data, C order.
// Contracts:
//  * Element types read: float32 ('<f4'), float64 ('<f8'), int64 ('<i8'), int32 ('<i4'),
//    uint8 ('|u1') and bool ('|b1'); '=' and '|' byte orders count as little-endian (this
//    reader runs on little-endian hosts only). Big-endian data, object ('|O') or structured
//    arrays, Fortran order, a data section whose length is not numel x itemsize, a shape
//    whose element count overflows, and every malformed header are IoErrors naming the file
//    and what is wrong (with the fix where there is one, e.g. np.ascontiguousarray).
//  * The data is kept as the file's bytes; the typed accessors convert on read.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab {

enum class NpyType { f32, f64, i64, i32, u8, b1 };
const char* npy_type_name(NpyType t);   // "float32", "float64", "int64", "int32", "uint8", "bool"

struct NpyArray {
  std::string file;             // where it came from (for error messages)
  NpyType type = NpyType::f32;
  Shape shape;                  // () for a 0-d array
  std::vector<uint8_t> data;    // numel x itemsize bytes, C order, little-endian
  int64_t numel() const { return shape_numel(shape); }
  size_t itemsize() const;
  bool is_integer() const {
    return type == NpyType::i64 || type == NpyType::i32 || type == NpyType::u8 || type == NpyType::b1;
  }
  // Element i converted (integers and bool exactly; floats rounded toward zero is never
  // done: int_at on a float array is an InternalError, callers check is_integer()).
  int64_t int_at(int64_t i) const;
  double float_at(int64_t i) const;   // any type
};

NpyArray parse_npy(std::string_view bytes, const std::string& file_name);
NpyArray read_npy(const std::string& path);   // IoError when it cannot be read

}  // namespace oomlab
