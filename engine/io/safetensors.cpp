// safetensors.cpp — serialisation, validated parsing and load_into (see safetensors.h).
#include "engine/io/safetensors.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/io/atomic_file.h"

namespace oomlab {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // the reference implementation's limit

uint32_t crc32_of(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const size_t chunk = size_t(1) << 30;
  for (size_t off = 0; off < data.size(); off += chunk) {
    size_t n = std::min(chunk, data.size() - off);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + off), uInt(n));
  }
  return uint32_t(crc);
}

std::string crc_hex(uint32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", c);
  return buf;
}

// A cpu, contiguous tensor with the same values (no copy when `t` already is one).
Tensor host_contiguous(const Tensor& t, const std::string& name) {
  OOMLAB_CHECK(t.defined(), "safetensors: tensor '", name, "' is undefined");
  OOMLAB_CHECK_T(DeviceError, !t.device().is_meta(), "safetensors: tensor '", name, "' (", t.str(),
                 ") is on the meta device and has no data to save");
  NoGradGuard no_grad;
  if (t.device().is_cpu()) return t.is_contiguous() ? t : t.contiguous();
  Tensor src = t.is_contiguous() ? t : t.contiguous();
  Tensor h = Tensor::empty(t.shape(), t.dtype(), cpu_device());
  h.copy_(src);
  return h;
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

bool parse_safetensors_dtype(std::string_view s, DType& out) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (s == safetensors_dtype_name(DType(i))) { out = DType(i); return true; }
  return false;
}

std::string serialize_safetensors(const NamedTensors& tensors, const TensorMetadata& metadata) {
  std::set<std::string> seen;
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    OOMLAB_CHECK(!name.empty() && name != "__metadata__", "safetensors: invalid tensor name '", name, "'");
    OOMLAB_CHECK(seen.insert(name).second, "safetensors: duplicate tensor name '", name, "'");
    host.push_back(host_contiguous(t, name));
  }
  // Data layout: largest itemsize first (stable), so every tensor starts at a multiple of
  // its itemsize (the header is padded to 8) and mmap readers get aligned views, as the
  // reference writer does. The header lists tensors in insertion order.
  std::vector<size_t> layout(host.size());
  for (size_t i = 0; i < layout.size(); ++i) layout[i] = i;
  std::stable_sort(layout.begin(), layout.end(), [&](size_t a, size_t b) {
    return dtype_size(host[a].dtype()) > dtype_size(host[b].dtype());
  });
  std::vector<uint64_t> begin(host.size());
  uint64_t data_bytes = 0;
  for (size_t i : layout) { begin[i] = data_bytes; data_bytes += host[i].nbytes(); }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = nlohmann::ordered_json::object();  // filled below (needs the CRC)
  for (size_t i = 0; i < host.size(); ++i)
    header[tensors[i].first] = {{"dtype", safetensors_dtype_name(host[i].dtype())},
                                {"shape", host[i].shape()},
                                {"data_offsets", {begin[i], begin[i] + host[i].nbytes()}}};
  std::string data(size_t(data_bytes), '\0');
  for (size_t i = 0; i < host.size(); ++i)
    if (host[i].nbytes()) std::memcpy(data.data() + begin[i], host[i].raw_data(), host[i].nbytes());
  auto& meta = header["__metadata__"];
  for (const auto& [k, v] : metadata)
    if (k != kSafetensorsCrcKey) meta[k] = v;
  meta[kSafetensorsCrcKey] = crc_hex(crc32_of(data));

  std::string hjson;
  try {
    hjson = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(str_cat("safetensors: cannot encode the header (names and metadata must be UTF-8): ",
                             e.what()));
  }
  hjson.append((8 - hjson.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + hjson.size() + data.size());
  const uint64_t n = hjson.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += hjson;
  out += data;
  return out;
}

namespace {
template <class... M>
IoError bad(const std::string& file, const M&... msg) {
  return IoError(str_cat(file, ": ", msg...));
}

struct Entry { std::string name; DType dtype; Shape shape; uint64_t begin, end; };

// The 8-byte length, the JSON header (an object) and the data section after it.
nlohmann::ordered_json read_header(std::string_view bytes, const std::string& file, std::string_view& data) {
  if (bytes.size() < 8)
    throw bad(file, "file too short for a safetensors header (", bytes.size(), " bytes, need >= 8)");
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n == 0 || n > kMaxHeaderBytes)
    throw bad(file, "header length ", n, " is not sane (expected 1..", kMaxHeaderBytes, " bytes)");
  if (n > bytes.size() - 8)
    throw bad(file, "truncated file: header length ", n, " exceeds the ", bytes.size() - 8,
              " bytes after the length field");
  data = bytes.substr(size_t(8 + n));
  nlohmann::ordered_json header;
  try {
    // A name given twice would silently keep one of the tensors (JSON keeps the last).
    std::set<std::string> names;
    header = nlohmann::ordered_json::parse(bytes.substr(8, size_t(n)), [&](int depth,
                                                                           nlohmann::ordered_json::parse_event_t ev,
                                                                           nlohmann::ordered_json& v) {
      if (ev == nlohmann::ordered_json::parse_event_t::key && depth == 1 && !names.insert(v.get<std::string>()).second)
        throw bad(file, "the header names '", v.get<std::string>(), "' twice");
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    throw bad(file, "header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) throw bad(file, "header is not a JSON object");
  return header;
}

void read_metadata(const nlohmann::ordered_json& v, const std::string& file, TensorMetadata& out) {
  if (!v.is_object()) throw bad(file, "__metadata__ is not an object");
  for (auto m = v.begin(); m != v.end(); ++m) {
    if (!m.value().is_string()) throw bad(file, "__metadata__ value for '", m.key(), "' is not a string");
    out[m.key()] = m.value().get<std::string>();
  }
}

// One tensor's entry: dtype, shape (bounded), data_offsets inside the data section and
// spanning exactly the tensor's bytes.
Entry read_entry(const std::string& name, const nlohmann::ordered_json& v, uint64_t data_bytes,
                 const std::string& file) {
  if (!v.is_object()) throw bad(file, "entry '", name, "' is not an object");
  Entry e{name, DType::f32, {}, 0, 0};
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) throw bad(file, "tensor '", name, "' has no dtype string");
  if (!parse_safetensors_dtype(dt->get<std::string>(), e.dtype))
    throw bad(file, "tensor '", name, "' has unsupported dtype '", dt->get<std::string>(),
              "' (oomlab reads F32, F64, F16, BF16, I64, U8)");
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) throw bad(file, "tensor '", name, "' has no shape array");
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
      throw bad(file, "tensor '", name, "' has an invalid shape entry ", d.dump());
    uint64_t dv = d.get<uint64_t>();
    if (dv > (uint64_t(1) << 48) || (dv && numel > (uint64_t(1) << 48) / dv))
      throw bad(file, "tensor '", name, "' shape ", sh->dump(), " is too large");
    numel *= dv;
    e.shape.push_back(int64_t(dv));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    throw bad(file, "tensor '", name, "' has no valid data_offsets [begin, end]");
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end)
    throw bad(file, "tensor '", name, "' has data_offsets [", e.begin, ", ", e.end, "] with begin > end");
  if (e.end > data_bytes)
    throw bad(file, "truncated file: tensor '", name, "' data_offsets [", e.begin, ", ", e.end,
              "] run past the end of the ", data_bytes, "-byte data section");
  const uint64_t expect = numel * dtype_size(e.dtype);
  if (expect != e.end - e.begin)
    throw bad(file, "tensor '", name, "' of shape ", shape_str(e.shape), " and dtype ", dt->get<std::string>(),
              " needs ", expect, " bytes but data_offsets span ", e.end - e.begin);
  return e;
}

// The tensors tile the data section exactly: no gap, overlap or trailing bytes.
void check_tiling(const std::vector<Entry>& entries, uint64_t data_bytes, const std::string& file) {
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return entries[a].begin != entries[b].begin ? entries[a].begin < entries[b].begin : entries[a].end < entries[b].end;
  });
  uint64_t pos = 0;
  for (size_t i : order) {
    const Entry& e = entries[i];
    if (e.begin != pos)
      throw bad(file, "data_offsets are not contiguous: tensor '", e.name, "' starts at byte ", e.begin,
                " but the previous tensor ends at ", pos, e.begin > pos ? " (gap)" : " (overlap)");
    pos = e.end;
  }
  if (pos != data_bytes)
    throw bad(file, "data section has ", data_bytes, " bytes but the tensors cover ", pos,
              pos < data_bytes ? " (trailing bytes)" : "");
}
}  // namespace

SafetensorsContents parse_safetensors(std::string_view bytes, const std::string& file) {
  std::string_view data;
  const nlohmann::ordered_json header = read_header(bytes, file, data);
  std::vector<Entry> entries;
  SafetensorsContents out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") read_metadata(it.value(), file, out.metadata);
    else entries.push_back(read_entry(it.key(), it.value(), data.size(), file));
  }
  check_tiling(entries, data.size(), file);
  if (auto c = out.metadata.find(kSafetensorsCrcKey); c != out.metadata.end()) {
    const std::string actual = crc_hex(crc32_of(data));
    if (c->second != actual)
      throw bad(file, "CRC32 mismatch: header records ", c->second, " but the data section hashes to ", actual,
                " (file corrupt)");
  }
  for (const Entry& e : entries) {  // header order (our writer: insertion order)
    Tensor t = Tensor::empty(e.shape, e.dtype, cpu_device());
    if (e.end > e.begin) std::memcpy(t.raw_data(), data.data() + e.begin, size_t(e.end - e.begin));
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors, const TensorMetadata& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

SafetensorsContents read_safetensors(const std::string& path) {
  std::string bytes = read_file(path);
  return parse_safetensors(bytes, path);
}

LoadReport load_into(const std::string& path, const NamedTensors& targets, bool strict,
                     const std::map<std::string, std::string>& aliases) {
  SafetensorsContents file = read_safetensors(path);
  std::map<std::string, const Tensor*> in_file;
  for (const auto& [name, t] : file.tensors) in_file[name] = &t;
  std::set<std::string> wanted;
  LoadReport report;
  std::vector<std::string> problems;
  for (const auto& [name, t] : targets) {
    OOMLAB_CHECK(wanted.insert(name).second, "load_into: duplicate target name '", name, "'");
    OOMLAB_CHECK(t.defined(), "load_into: target '", name, "' is undefined");
    auto it = in_file.find(name);
    if (it == in_file.end()) { report.missing.push_back(name); continue; }
    const Tensor& src = *it->second;
    if (src.shape() != t.shape())
      problems.push_back(str_cat("shape mismatch for '", name, "': file has ", shape_str(src.shape()),
                                 ", target has ", shape_str(t.shape())));
    if (src.dtype() != t.dtype())
      problems.push_back(str_cat("dtype mismatch for '", name, "': file has ", dtype_name(src.dtype()),
                                 ", target has ", dtype_name(t.dtype())));
    if (!t.is_dense())
      problems.push_back(str_cat("target '", name, "' (", t.str(), ") is not dense"));
  }
  for (const auto& [name, t] : file.tensors) {
    auto alias = aliases.find(name);
    if (alias != aliases.end()) {   // a tied weight's other name: the same values, read once
      auto kept = in_file.find(alias->second);
      if (kept != in_file.end() && (t.shape() != kept->second->shape() || t.dtype() != kept->second->dtype() ||
                                    (dtype_is_floating(t.dtype()) && t.to_vector() != kept->second->to_vector())))
        problems.push_back(str_cat("'", name, "' is tied to '", alias->second, "' but holds other values"));
      continue;
    }
    if (!wanted.count(name)) report.unexpected.push_back(name);
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  std::vector<std::string> names;
  if (strict && !report.missing.empty())
    names.push_back(str_cat("missing keys (", report.missing.size(), "): ", join(report.missing)));
  if (strict && !report.unexpected.empty())
    names.push_back(str_cat("unexpected keys (", report.unexpected.size(), "): ", join(report.unexpected)));
  problems.insert(problems.begin(), names.begin(), names.end());
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += "; " + p;
    throw IoError(str_cat(path, ": cannot load into ", targets.size(), " tensors: ", msg.substr(2)));
  }
  for (const auto& [name, t] : targets) {
    auto it = in_file.find(name);
    if (it == in_file.end()) continue;
    Tensor dst = t;
    dst.copy_(*it->second);
  }
  report.metadata = std::move(file.metadata);
  return report;
}

}  // namespace oomlab
