// graph_constants.cpp — the importer's constant folder (graph_internal.h): integer values that
// depend on neither the model input nor a trained parameter (Hugging Face's position and
// token-type ids, the all-true attention mask of unpadded input) are computed once on the host
// when the model is built, from the ops below; any other op, or a float value, is left to run
// on the device. Row-major int64 arithmetic; bool as 0/1. With a dynamic batch the sizes are
// folded too (aten.sym_size.int of the input by GraphModel, Python's _operator arithmetic on
// them here), for the running input's shape: the model refolds when that shape changes.
// A mask built from the attention-mask input is folded as a MaskExpr (which element of that
// input each element reads, and a constant factor), so the importer can tell a key padding mask.
#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "engine/core/error.h"
#include "engine/parallel/data_parallel.h"
#include "models/graph_internal.h"

namespace oomlab::graph {

using json = nlohmann::json;

namespace {
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

int64_t numel_of(const Shape& s) { return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>()); }

// out[i] = f(index of i in out's shape): the gather of every op below.
template <class F>
HostValue build(const Shape& shape, F f) {
  HostValue out{shape, std::vector<int64_t>(size_t(numel_of(shape)))};
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t i = 0; i < out.v.size(); ++i) {
    out.v[i] = f(idx);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

int64_t at(const HostValue& x, const std::vector<int64_t>& idx) {   // no allocation: called per element
  int64_t off = 0, stride = 1;
  for (size_t d = x.shape.size(); d-- > 0;) {
    off += (x.shape[d] == 1 ? 0 : idx.at(d)) * stride;   // size-1 dims broadcast
    stride *= x.shape[d];
  }
  return x.v.at(size_t(off));
}

int64_t wrap(int64_t d, size_t rank) { return d < 0 ? d + int64_t(rank) : d; }

struct Folder {
  const GraphNode& n;
  const std::map<std::string, HostValue>& known;
  bool is_ref(size_t i) const { return i < n.args.size() && n.args[i].is_object() && n.args[i].contains("ref"); }
  const HostValue& ref(size_t i) const { return known.at(n.args.at(i)["ref"].get<std::string>()); }
  int64_t integer(size_t i, int64_t dflt) const {
    if (i >= n.args.size() || n.args[i].is_null()) return dflt;
    return n.args[i].get<int64_t>();
  }
  bool integral(size_t i) const { return i < n.args.size() && n.args[i].is_number_integer(); }
  // A list of sizes whose entries are integers or references to folded sizes (dynamic batch).
  Shape sizes(size_t i) const {
    Shape s;
    for (const json& e : n.args.at(i)) s.push_back(e.is_object() ? known.at(e["ref"].get<std::string>()).v.at(0) : e.get<int64_t>());
    return s;
  }
  int64_t scalar(size_t i) const { return is_ref(i) ? ref(i).v.at(0) : n.args.at(i).get<int64_t>(); }
};

// An operand: a folded value, or an integer / bool literal as a 0-d value.
HostValue operand(const Folder& f, size_t i) {
  if (f.is_ref(i)) return f.ref(i);
  const json& a = f.n.args.at(i);
  return HostValue{{}, {a.is_boolean() ? int64_t(a.get<bool>()) : a.get<int64_t>()}};
}

// x op y elementwise with broadcasting (shapes right-aligned, size-1 dims stretched).
template <class Op> std::optional<HostValue> fold_binary(const Folder& f, Op op) {
  HostValue a = operand(f, 0), b = operand(f, 1);
  const size_t rank = std::max(a.shape.size(), b.shape.size());
  a.shape.insert(a.shape.begin(), rank - a.shape.size(), 1);
  b.shape.insert(b.shape.begin(), rank - b.shape.size(), 1);
  Shape out(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (a.shape[d] != b.shape[d] && a.shape[d] != 1 && b.shape[d] != 1) return std::nullopt;
    out[d] = std::max(a.shape[d], b.shape[d]);
  }
  return build(out, [&](const std::vector<int64_t>& idx) { return op(at(a, idx), at(b, idx)); });
}

// Hugging Face's mask construction: comparisons, bitwise and, cumsum, index, cat, full.
std::optional<HostValue> fold_mask_op(const Folder& f) {
  const std::string& op = f.n.op;
  if (op == "aten.sub.Tensor") return fold_binary(f, [](int64_t x, int64_t y) { return x - y; });
  if (op == "aten.ne.Scalar" || op == "aten.ne.Tensor") return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x != y); });
  if (op == "aten.eq.Scalar" || op == "aten.eq.Tensor") return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x == y); });
  if (op == "aten.le.Scalar" || op == "aten.le.Tensor") return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x <= y); });
  if (op == "aten.lt.Scalar" || op == "aten.lt.Tensor") return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x < y); });
  if (op == "aten.gt.Scalar" || op == "aten.gt.Tensor") return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x > y); });
  if (op == "aten.bitwise_and.Tensor" || op == "aten.logical_and.default")
    return fold_binary(f, [](int64_t x, int64_t y) { return int64_t((x != 0) && (y != 0)); });
  if (op == "aten.full.default") {
    const Shape s = f.sizes(0);
    const json& v = f.n.args.at(1);
    const int64_t value = v.is_boolean() ? int64_t(v.get<bool>()) : v.get<int64_t>();
    if (numel_of(s) > int64_t(kMaxBufferValues)) return std::nullopt;
    return HostValue{s, std::vector<int64_t>(size_t(numel_of(s)), value)};
  }
  if (op == "aten.cumsum.default") {
    HostValue y = f.ref(0);
    const int64_t dim = wrap(f.integer(1, 0), y.shape.size());
    const int64_t inner = strides_of(y.shape).at(size_t(dim)), len = y.shape.at(size_t(dim));
    for (size_t i = 0; i < y.v.size(); ++i)
      if ((int64_t(i) / inner) % len != 0) y.v[i] += y.v[i - size_t(inner)];
    return y;
  }
  if (op == "aten.cat.default") {
    std::vector<HostValue> parts;
    for (const json& e : f.n.args.at(0)) parts.push_back(f.known.at(e.at("ref").get<std::string>()));
    if (parts.empty()) return std::nullopt;
    const int64_t dim = wrap(f.integer(1, 0), parts[0].shape.size());
    Shape s = parts[0].shape;
    s[size_t(dim)] = 0;
    std::vector<int64_t> starts;
    for (const HostValue& p : parts) {
      starts.push_back(s[size_t(dim)]);
      s[size_t(dim)] += p.shape.at(size_t(dim));
    }
    return build(s, [&](std::vector<int64_t> idx) {
      size_t k = parts.size() - 1;
      while (starts[k] > idx[size_t(dim)]) --k;
      idx[size_t(dim)] -= starts[k];
      return at(parts[k], idx);
    });
  }
  // aten.index.Tensor(x, [i0, i1, ...]): x[i0, i1, ...] with the index tensors broadcast
  const HostValue& x = f.ref(0);
  std::vector<HostValue> index;
  for (const json& e : f.n.args.at(1)) {
    if (!e.is_object()) return std::nullopt;   // a None (a skipped dim) is not folded
    index.push_back(f.known.at(e.at("ref").get<std::string>()));
  }
  if (index.empty() || index.size() > x.shape.size()) return std::nullopt;
  size_t rank = 0;
  for (const HostValue& i : index) rank = std::max(rank, i.shape.size());
  Shape bshape(rank, 1);
  for (HostValue& i : index) {
    i.shape.insert(i.shape.begin(), rank - i.shape.size(), 1);
    for (size_t d = 0; d < rank; ++d) {
      if (i.shape[d] != 1 && bshape[d] != 1 && i.shape[d] != bshape[d]) return std::nullopt;
      bshape[d] = std::max(bshape[d], i.shape[d]);
    }
  }
  Shape s = bshape;
  s.insert(s.end(), x.shape.begin() + int64_t(index.size()), x.shape.end());
  return build(s, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> head(idx.begin(), idx.begin() + int64_t(rank)), src;
    for (const HostValue& i : index) {
      const int64_t v = at(i, head), size = x.shape[src.size()];
      if (v < -size || v >= size) throw std::out_of_range("index");
      src.push_back(v < 0 ? v + size : v);
    }
    src.insert(src.end(), idx.begin() + int64_t(rank), idx.end());
    return at(x, src);
  });
}

// Python's arithmetic on sizes (torch.export's _operator nodes over the symbolic batch).
std::optional<HostValue> fold_size_arith(const Folder& f) {
  const int64_t a = f.scalar(0), b = f.scalar(1);
  const std::string& op = f.n.op;
  if (op == "_operator.mul") return HostValue{{}, {a * b}};
  if (op == "_operator.add") return HostValue{{}, {a + b}};
  if (op == "_operator.sub") return HostValue{{}, {a - b}};
  if (b == 0) return std::nullopt;
  const int64_t q = a / b;   // floordiv: Python rounds toward negative infinity
  return HostValue{{}, {(a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q}};
}

std::optional<HostValue> fold_view(const Folder& f) {
  const HostValue& x = f.ref(0);
  if (f.n.op == "aten.unsqueeze.default") {
    HostValue y = x;
    y.shape.insert(y.shape.begin() + wrap(f.integer(1, 0), x.shape.size() + 1), 1);
    return y;
  }
  if (f.n.op == "aten.slice.Tensor") {
    const int64_t dim = wrap(f.integer(1, 0), x.shape.size()), size = x.shape.at(size_t(dim));
    int64_t start = wrap(f.integer(2, 0), size_t(size)), end = std::min(f.integer(3, size), size), step = f.integer(4, 1);
    if (end < 0) end += size;
    if (step <= 0 || start < 0 || start > end) return std::nullopt;
    Shape s = x.shape;
    s[size_t(dim)] = (end - start + step - 1) / step;
    return build(s, [&](std::vector<int64_t> idx) {
      idx[size_t(dim)] = start + idx[size_t(dim)] * step;
      return at(x, idx);
    });
  }
  if (f.n.op == "aten.expand.default") {
    Shape s = f.sizes(1);
    if (s.size() < x.shape.size()) return std::nullopt;
    HostValue src = x;
    src.shape.insert(src.shape.begin(), s.size() - x.shape.size(), 1);
    for (size_t d = 0; d < s.size(); ++d) {
      if (s[d] == -1) s[d] = src.shape[d];
      if (src.shape[d] != 1 && src.shape[d] != s[d]) return std::nullopt;
    }
    return build(s, [&](const std::vector<int64_t>& idx) { return at(src, idx); });
  }
  HostValue y = x;   // view / reshape
  Shape s = f.sizes(1);
  for (int64_t& d : s)
    if (d == -1) d = numel_of(x.shape) / std::max<int64_t>(1, -numel_of(s));
  if (numel_of(s) != numel_of(x.shape)) return std::nullopt;
  y.shape = s;
  return y;
}

std::optional<HostValue> fold_arith(const Folder& f) {
  const HostValue& x = f.ref(0);
  if (f.n.op == "aten.gather.default") {
    const int64_t dim = wrap(f.integer(1, 0), x.shape.size());
    const HostValue& index = f.ref(2);
    return build(index.shape, [&](std::vector<int64_t> idx) {
      idx[size_t(dim)] = at(index, idx);
      return at(x, idx);
    });
  }
  if (f.n.op == "aten.ge.Scalar") {
    if (!f.integral(1)) return std::nullopt;
    const int64_t s = f.integer(1, 0);
    HostValue y = x;
    for (int64_t& e : y.v) e = e >= s ? 1 : 0;
    return y;
  }
  // aten.add.Tensor: a constant plus an integer or a constant of the same shape
  if (f.n.kwargs.contains("alpha") && f.n.kwargs["alpha"] != 1) return std::nullopt;
  HostValue y = x;
  if (f.integral(1)) {
    for (int64_t& e : y.v) e += f.integer(1, 0);
    return y;
  }
  if (!f.is_ref(1) || f.ref(1).shape != x.shape) return std::nullopt;
  for (size_t i = 0; i < y.v.size(); ++i) y.v[i] += f.ref(1).v[i];
  return y;
}
std::optional<HostValue> fold(const GraphNode& n, const std::map<std::string, HostValue>& known);
}  // namespace

std::optional<HostValue> fold_node(const GraphNode& n, const std::map<std::string, HostValue>& known) {
  try {
    return fold(n, known);
  } catch (const std::exception&) {   // arguments of other types or out of range: left to the device, which names them
    return std::nullopt;
  }
}

namespace {
std::optional<HostValue> fold(const GraphNode& n, const std::map<std::string, HostValue>& known) {
  for (const GraphTensor& o : n.outputs)   // integers only: float constants run on the device
    if (o.dtype != "int64" && o.dtype != "bool") return std::nullopt;
  const Folder f{n, known};
  if (n.op.rfind("_operator.", 0) == 0) return fold_size_arith(f);
  if (n.op == "aten.arange.start_step" || n.op == "aten.arange.default") {
    const bool one = n.op == "aten.arange.default";
    const int64_t start = one ? 0 : f.scalar(0), end = one ? f.scalar(0) : f.scalar(1),
                  step = one ? 1 : f.integer(2, 1);
    if (step <= 0 || end < start || end - start > int64_t(kMaxBufferValues)) return std::nullopt;
    return build({(end - start + step - 1) / step}, [&](const std::vector<int64_t>& idx) { return start + idx[0] * step; });
  }
  if (n.op == "aten.full.default" || n.op == "aten.cat.default") return fold_mask_op(f);
  if (!f.is_ref(0)) return std::nullopt;
  if (n.op == "aten.unsqueeze.default" || n.op == "aten.slice.Tensor" || n.op == "aten.expand.default" ||
      n.op == "aten.view.default" || n.op == "aten._unsafe_view.default" || n.op == "aten.reshape.default")
    return fold_view(f);
  if (n.op == "aten.gather.default" || n.op == "aten.ge.Scalar" || n.op == "aten.add.Tensor") return fold_arith(f);
  return fold_mask_op(f);
}
}  // namespace

namespace {
// x broadcast to `shape` (right-aligned, size-1 dims stretched).
HostValue broadcast_to(HostValue x, const Shape& shape) {
  x.shape.insert(x.shape.begin(), shape.size() - std::min(shape.size(), x.shape.size()), 1);
  return build(shape, [&](const std::vector<int64_t>& idx) { return at(x, idx); });
}
}  // namespace

std::optional<MaskExpr> fold_mask_expr(const GraphNode& n, const std::map<std::string, HostValue>& known,
                                       const std::map<std::string, MaskExpr>& exprs) {
  std::string expr_ref;
  for (const std::string& r : n.refs) {
    if (!exprs.count(r)) continue;
    if (!expr_ref.empty() && expr_ref != r) return std::nullopt;   // two masks combined
    expr_ref = r;
  }
  const MaskExpr& e = exprs.at(expr_ref);
  if (n.op == "aten._to_copy.default") {   // to bool or an integer type: 0/1 stays 0/1
    const std::string dt = n.kwargs.contains("dtype") && n.kwargs["dtype"].is_string() ? n.kwargs["dtype"].get<std::string>() : "";
    if (dt != "bool" && dt != "int64" && dt != "int32") return std::nullopt;
    return e;
  }
  std::map<std::string, HostValue> local;   // the node's references, the mask as one of its parts
  for (const std::string& r : n.refs)
    if (r != expr_ref) {
      if (!known.count(r)) return std::nullopt;
      local[r] = known.at(r);
    }
  auto part = [&](const HostValue& v) {
    local[expr_ref] = v;
    return fold_node(n, local);
  };
  if (n.op == "aten.bitwise_and.Tensor" || n.op == "aten.logical_and.default") {
    std::optional<HostValue> cst = part(e.cst);
    if (!cst) return std::nullopt;
    HostValue src = broadcast_to(e.src, cst->shape);
    return MaskExpr{std::move(*cst), std::move(src)};
  }
  const bool gather = n.op == "aten.index.Tensor" || n.op == "aten.unsqueeze.default" || n.op == "aten.slice.Tensor" ||
                      n.op == "aten.expand.default" || n.op == "aten.view.default" ||
                      n.op == "aten._unsafe_view.default" || n.op == "aten.reshape.default";
  if (!gather || n.refs.empty() || n.refs[0] != expr_ref) return std::nullopt;   // the mask must be what is gathered
  std::optional<HostValue> cst = part(e.cst), src = part(e.src);
  if (!cst || !src) return std::nullopt;
  return MaskExpr{std::move(*cst), std::move(*src)};
}

Tensor to_device(const HostValue& c, Device device) {
  if (device.is_meta()) return Tensor::empty(c.shape, DType::i64, device);   // allocation only
  Tensor host = Tensor::from_vector_i64(c.v, c.shape);
  return device == host.device() ? host : copy_to_device(host, device);
}

}  // namespace oomlab::graph
