// npy.cpp — the .npy reader (see npy.h): magic, version, header dict, data length.
#include "engine/io/npy.h"

#include <bit>
#include <cctype>
#include <cstring>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"

namespace oomlab {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

constexpr size_t kMaxHeaderBytes = size_t(1) << 20;   // numpy's own limit is far smaller

// The header dict, as much of Python's literal syntax as np.save writes: string keys, and
// values that are strings, True/False, or tuples of non-negative integers.
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& file) : s_(s), file_(file) {}

  void parse(std::string& descr, bool& fortran, Shape& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') { ++i_; break; }
      const std::string key = string_literal();
      expect(':');
      skip_ws();
      if (key == "descr") {
        descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        have_fortran = true;
      } else if (key == "shape") {
        shape = tuple();
        have_shape = true;
      } else {
        fail("unexpected key '" + key + "' (a .npy header has descr, fortran_order and shape)");
      }
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      expect('}');
      break;
    }
    skip_ws();
    if (i_ != s_.size()) fail("text after the header dict");
    if (!have_descr || !have_fortran || !have_shape)
      fail(std::string("the header lacks '") + (!have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape") +
           "'");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw IoError(str_cat(file_, ": not a valid .npy file: header: ", what));
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(str_cat("expected '", c, "' at byte ", i_));
    ++i_;
  }
  std::string string_literal() {
    skip_ws();
    const char q = peek();
    if (q != '\'' && q != '"') fail(str_cat("expected a quoted string at byte ", i_));
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") { i_ += 4; return true; }
    if (s_.substr(i_, 5) == "False") { i_ += 5; return false; }
    fail("fortran_order must be True or False");
  }
  Shape tuple() {
    expect('(');
    Shape out;
    while (true) {
      skip_ws();
      if (peek() == ')') { ++i_; return out; }
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail(str_cat("expected a dimension at byte ", i_));
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (__builtin_mul_overflow(v, int64_t(10), &v) || __builtin_add_overflow(v, int64_t(peek() - '0'), &v))
          fail("a dimension does not fit in 64 bits");
        ++i_;
      }
      if (peek() == 'L') ++i_;   // Python 2 longs
      out.push_back(v);
      if (out.size() > 32) fail("more than 32 dimensions");
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      expect(')');
      return out;
    }
  }

  std::string_view s_;
  const std::string& file_;
  size_t i_ = 0;
};

NpyType parse_descr(const std::string& d, const std::string& file) {
  auto bad = [&](const std::string& why) -> IoError {
    return IoError(str_cat(file, ": .npy element type '", d, "' is not supported (", why,
                           "; oomlab reads float32, float64, int64, int32, uint8 and bool)"));
  };
  if (d.size() < 2) throw bad("unknown type");
  const char order = d[0];
  const std::string kind = d.substr(1);
  if (order == '>' && kind != "u1" && kind != "b1")
    throw bad("big-endian; save x.astype(x.dtype.newbyteorder('<'))");
  if (order != '<' && order != '|' && order != '=' && order != '>') throw bad("unknown byte order");
  if (kind == "f4") return NpyType::f32;
  if (kind == "f8") return NpyType::f64;
  if (kind == "i8") return NpyType::i64;
  if (kind == "i4") return NpyType::i32;
  if (kind == "u1") return NpyType::u8;
  if (kind == "b1") return NpyType::b1;
  if (kind == "O") throw bad("object arrays hold pickled Python objects");
  throw bad("unsupported type");
}

}  // namespace

const char* npy_type_name(NpyType t) {
  switch (t) {
    case NpyType::f32: return "float32";
    case NpyType::f64: return "float64";
    case NpyType::i64: return "int64";
    case NpyType::i32: return "int32";
    case NpyType::u8: return "uint8";
    case NpyType::b1: return "bool";
  }
  return "?";
}

size_t NpyArray::itemsize() const {
  switch (type) {
    case NpyType::f64: case NpyType::i64: return 8;
    case NpyType::f32: case NpyType::i32: return 4;
    case NpyType::u8: case NpyType::b1: return 1;
  }
  return 1;
}

int64_t NpyArray::int_at(int64_t i) const {
  const uint8_t* p = data.data() + size_t(i) * itemsize();
  switch (type) {
    case NpyType::i64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    case NpyType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case NpyType::u8: return *p;
    case NpyType::b1: return *p != 0;
    default: break;
  }
  throw InternalError(str_cat(file, ": int_at on a ", npy_type_name(type), " array"));
}

double NpyArray::float_at(int64_t i) const {
  const uint8_t* p = data.data() + size_t(i) * itemsize();
  switch (type) {
    case NpyType::f32: { float v; std::memcpy(&v, p, 4); return v; }
    case NpyType::f64: { double v; std::memcpy(&v, p, 8); return v; }
    default: return double(int_at(i));
  }
}

NpyArray parse_npy(std::string_view bytes, const std::string& file_name) {
  auto bad = [&](const std::string& why) { return IoError(str_cat(file_name, ": not a valid .npy file: ", why)); };
  static constexpr char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view(kMagic, 6))
    throw bad(bytes.size() < 10 ? "shorter than the 10-byte preamble" : "no \\x93NUMPY magic at the start");
  const uint8_t major = uint8_t(bytes[6]), minor = uint8_t(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) throw bad(str_cat("format version ", int(major), ".", int(minor),
                                                               " (this reader knows 1.0, 2.0 and 3.0)"));
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
    offset = 10;
  } else {
    if (bytes.size() < 12) throw bad("shorter than the 12-byte preamble of format 2.0/3.0");
    for (int k = 0; k < 4; ++k) header_len |= size_t(uint8_t(bytes[8 + k])) << (8 * k);
    offset = 12;
  }
  if (header_len > kMaxHeaderBytes) throw bad(str_cat("header length ", header_len, " is implausible"));
  if (bytes.size() - offset < header_len)
    throw bad(str_cat("the header claims ", header_len, " bytes but the file has ", bytes.size() - offset,
                      " after the preamble"));

  NpyArray a;
  a.file = file_name;
  std::string descr;
  bool fortran = false;
  HeaderParser(bytes.substr(offset, header_len), file_name).parse(descr, fortran, a.shape);
  a.type = parse_descr(descr, file_name);
  if (fortran)
    throw bad("fortran_order arrays are not supported; save np.ascontiguousarray(x) instead");
  int64_t numel = 1;
  for (int64_t d : a.shape)
    if (__builtin_mul_overflow(numel, d, &numel)) throw bad("the shape's element count overflows 64 bits");
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(uint64_t(numel), uint64_t(a.itemsize()), &nbytes)) throw bad("the data size overflows");
  const size_t have = bytes.size() - offset - header_len;
  if (nbytes != have)
    throw bad(str_cat("the header's shape ", shape_str(a.shape), " of ", npy_type_name(a.type), " needs ", nbytes,
                      " data bytes, the file has ", have, have < nbytes ? " (truncated?)" : ""));
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + offset + header_len;
  a.data.assign(p, p + nbytes);
  return a;
}

NpyArray read_npy(const std::string& path) { return parse_npy(read_file(path), path); }

}  // namespace oomlab
