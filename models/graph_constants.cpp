// graph_constants.cpp — the importer's constant folder (graph_internal.h): integer values that
// depend on neither the model input nor a trained parameter (Hugging Face's position and
// token-type ids, the all-true attention mask of unpadded input) are computed once on the host
// when the model is built, from the ops below; any other op, or a float value, is left to run
// on the device. Row-major int64 arithmetic; bool as 0/1. With a dynamic batch the sizes are
// folded too (aten.sym_size.int of the input by GraphModel, Python's _operator arithmetic on
// them here), for the running input's shape: the model refolds when that shape changes.
// A mask built from the attention-mask input is folded as a MaskExpr (which element of that
// input each element reads, and a constant factor), so the importer can tell a key padding mask.
// Arguments are checked before use (graph_args.cpp): a dim out of range, an index past its
// extent, a negative size or integer arithmetic that overflows is a GraphArgError naming the
// argument; a value larger than kMaxFoldedValues elements is not folded (it runs on the device).
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

// The elements of a shape whose sizes came from the file (argument `arg`): sizes >= 0 and a
// product that fits int64, else GraphArgError.
int64_t numel_of(const Shape& s, size_t arg) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) bad_arg(arg, str_cat("size ", d, " in ", shape_str(s), " is negative"));
    if (__builtin_mul_overflow(n, d, &n)) bad_arg(arg, str_cat("shape ", shape_str(s), " has more than 2^63 elements"));
  }
  return n;
}

// A folded value above this many elements (512 MiB of int64) is left to the device
// (fold_node: nullopt): a hostile size is not a host allocation of its size. GPT-2's causal
// mask at T = 1024 folds up to batch 64.
constexpr int64_t kMaxFoldedValues = int64_t(1) << 26;

// out[i] = f(index of i in out's shape): the gather of every op below. `arg` names where the
// shape came from.
template <class F>
HostValue build(const Shape& shape, F f, size_t arg = 0) {
  const int64_t numel = numel_of(shape, arg);
  if (numel > kMaxFoldedValues) throw std::length_error("a folded value too large to hold on the host");
  HostValue out{shape, std::vector<int64_t>(size_t(numel))};
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


struct Folder {
  const GraphNode& n;
  const std::map<std::string, HostValue>& known;
  bool is_ref(size_t i) const { return i < n.args.size() && n.args[i].is_object() && n.args[i].contains("ref"); }
  const HostValue& ref(size_t i) const { return known.at(n.args.at(i)["ref"].get<std::string>()); }
  int64_t integer(size_t i, int64_t dflt) const {
    if (i >= n.args.size() || n.args[i].is_null()) return dflt;
    return arg_integer(n.args[i], i);
  }
  int64_t dim(size_t i, size_t rank, bool insert = false) const {
    return checked_dim(integer(i, 0), int64_t(rank), i, insert);
  }
  bool integral(size_t i) const { return i < n.args.size() && n.args[i].is_number_integer(); }
  // A list of sizes whose entries are integers or references to folded sizes (dynamic batch).
  Shape sizes(size_t i) const {
    Shape s;
    for (const json& e : n.args.at(i))
      s.push_back(e.is_object() ? known.at(e["ref"].get<std::string>()).v.at(0) : arg_integer(e, i));
    if (s.size() > 8) bad_arg(i, str_cat("a shape of rank ", s.size(), " (at most 8)"));
    return s;
  }
  int64_t scalar(size_t i) const { return is_ref(i) ? ref(i).v.at(0) : arg_integer(n.args.at(i), i); }
};

// A bool or integer literal as int64; anything else (a float: 0.5 compared with) is not
// folded (std::domain_error: fold_node's nullopt).
int64_t literal(const json& a, size_t arg) {
  if (a.is_boolean()) return int64_t(a.get<bool>());
  if (!a.is_number_integer()) throw std::domain_error("not an integer literal");
  return arg_integer(a, arg);
}

// An operand: a folded value, or an integer / bool literal as a 0-d value.
HostValue operand(const Folder& f, size_t i) {
  if (f.is_ref(i)) return f.ref(i);
  return HostValue{{}, {literal(f.n.args.at(i), i)}};
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
  if (op == "aten.sub.Tensor") return fold_binary(f, [](int64_t x, int64_t y) { return arg_sub(x, y, 1); });
  if (op == "aten.ne.Scalar" || op == "aten.ne.Tensor")
    return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x != y); });
  if (op == "aten.eq.Scalar" || op == "aten.eq.Tensor")
    return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x == y); });
  if (op == "aten.le.Scalar" || op == "aten.le.Tensor")
    return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x <= y); });
  if (op == "aten.lt.Scalar" || op == "aten.lt.Tensor")
    return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x < y); });
  if (op == "aten.gt.Scalar" || op == "aten.gt.Tensor")
    return fold_binary(f, [](int64_t x, int64_t y) { return int64_t(x > y); });
  if (op == "aten.bitwise_and.Tensor" || op == "aten.logical_and.default")
    return fold_binary(f, [](int64_t x, int64_t y) { return int64_t((x != 0) && (y != 0)); });
  if (op == "aten.full.default") {
    const Shape s = f.sizes(0);
    const json& v = f.n.args.at(1);
    const int64_t value = literal(v, 1);
    return build(s, [&](const std::vector<int64_t>&) { return value; }, 0);
  }
  if (op == "aten.cumsum.default") {
    HostValue y = f.ref(0);
    const int64_t dim = f.dim(1, std::max<size_t>(y.shape.size(), 1));
    if (y.shape.empty() || y.v.empty()) return y;   // a 0-d value is its own cumsum
    const int64_t inner = strides_of(y.shape)[size_t(dim)], len = y.shape[size_t(dim)];
    for (size_t i = 0; i < y.v.size(); ++i)
      if ((int64_t(i) / inner) % len != 0) y.v[i] = arg_add(y.v[i], y.v[i - size_t(inner)], 0);
    return y;
  }
  if (op == "aten.cat.default") {
    std::vector<HostValue> parts;
    for (const json& e : f.n.args.at(0)) parts.push_back(f.known.at(e.at("ref").get<std::string>()));
    if (parts.empty()) return std::nullopt;
    const size_t dim = size_t(f.dim(1, parts[0].shape.size()));
    Shape s = parts[0].shape;
    s[dim] = 0;
    const Shape others_of_first = s;
    std::vector<int64_t> starts;
    for (const HostValue& p : parts) {
      Shape others = p.shape;
      if (others.size() == s.size()) others[dim] = 0;
      if (others != others_of_first)
        bad_arg(0, str_cat("cat of ", shape_str(parts[0].shape), " and ", shape_str(p.shape),
                           ": sizes must match except in dim ", dim));
      starts.push_back(s[dim]);
      s[dim] = arg_add(s[dim], p.shape[dim], 0);
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
    for (const HostValue& i : index) src.push_back(checked_index(at(i, head), x.shape[src.size()], 1));
    src.insert(src.end(), idx.begin() + int64_t(rank), idx.end());
    return at(x, src);
  });
}

// Python's arithmetic on sizes (torch.export's _operator nodes over the symbolic batch).
std::optional<HostValue> fold_size_arith(const Folder& f) {
  const int64_t a = f.scalar(0), b = f.scalar(1);
  const std::string& op = f.n.op;
  if (op == "_operator.mul") return HostValue{{}, {arg_mul(a, b, 1)}};
  if (op == "_operator.add") return HostValue{{}, {arg_add(a, b, 1)}};
  if (op == "_operator.sub") return HostValue{{}, {arg_sub(a, b, 1)}};
  return HostValue{{}, {arg_floordiv(a, b, 1)}};
}

std::optional<HostValue> fold_view(const Folder& f) {
  const HostValue& x = f.ref(0);
  if (f.n.op == "aten.unsqueeze.default") {
    HostValue y = x;
    y.shape.insert(y.shape.begin() + f.dim(1, x.shape.size(), /*insert=*/true), 1);
    return y;
  }
  if (f.n.op == "aten.slice.Tensor") {
    const int64_t dim = f.dim(1, x.shape.size()), size = x.shape[size_t(dim)], step = f.integer(4, 1);
    if (step <= 0) bad_arg(4, str_cat("slice step ", step, " (must be positive)"));
    // PyTorch's bounds: negative from the end, then clamped to [0, size]
    const auto bound = [&](int64_t i) { return std::clamp(i < 0 ? i + size : i, int64_t(0), size); };
    const int64_t start = bound(f.integer(2, 0)), end = std::max(start, bound(f.integer(3, size)));
    Shape s = x.shape;
    s[size_t(dim)] = end == start ? 0 : (end - start - 1) / step + 1;
    return build(s, [&](std::vector<int64_t> idx) {
      idx[size_t(dim)] = start + idx[size_t(dim)] * step;
      return at(x, idx);
    });
  }
  if (f.n.op == "aten.expand.default") {
    Shape s = f.sizes(1);
    if (s.size() < x.shape.size())
      bad_arg(1, str_cat("expand of ", shape_str(x.shape), " to fewer dims ", shape_str(s)));
    HostValue src = x;
    const size_t added = s.size() - x.shape.size();
    src.shape.insert(src.shape.begin(), added, 1);
    for (size_t d = 0; d < s.size(); ++d) {
      if (s[d] == -1 && d >= added) s[d] = src.shape[d];
      if (s[d] < 0 || (src.shape[d] != 1 && src.shape[d] != s[d]))
        bad_arg(1, str_cat("expand of ", shape_str(x.shape), " to ", shape_str(f.sizes(1))));
    }
    return build(s, [&](const std::vector<int64_t>& idx) { return at(src, idx); }, 1);
  }
  HostValue y = x;   // view / reshape: as Tensor::reshape, one -1 inferred
  Shape s = f.sizes(1);
  const auto inferred = std::find(s.begin(), s.end(), -1);
  Shape known = s;
  if (inferred != s.end()) known.erase(known.begin() + (inferred - s.begin()));
  const int64_t n = int64_t(x.v.size()), rest = numel_of(known, 1);
  if (inferred != s.end() && rest != 0 && n % rest == 0) *inferred = n / rest;
  if (inferred != s.end() ? *inferred < 0 : rest != n)
    bad_arg(1, str_cat("shape ", shape_str(f.sizes(1)), " is invalid for a value of shape ", shape_str(x.shape)));
  y.shape = s;
  return y;
}

std::optional<HostValue> fold_arith(const Folder& f) {
  const HostValue& x = f.ref(0);
  if (f.n.op == "aten.gather.default") {
    const size_t dim = size_t(f.dim(1, x.shape.size()));
    const HostValue& index = f.ref(2);
    bool fits = index.shape.size() == x.shape.size();   // PyTorch: same rank, no larger elsewhere
    for (size_t d = 0; fits && d < x.shape.size(); ++d) fits = d == dim || index.shape[d] <= x.shape[d];
    if (!fits)
      bad_arg(2, str_cat("gather of ", shape_str(x.shape), " with an index of shape ", shape_str(index.shape)));
    return build(index.shape, [&](std::vector<int64_t> idx) {
      const int64_t i = at(index, idx);
      if (i < 0 || i >= x.shape[dim])
        bad_arg(2, str_cat("index ", i, " is out of range for dim ", dim, " of size ", x.shape[dim]));
      idx[dim] = i;
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
    for (int64_t& e : y.v) e = arg_add(e, f.integer(1, 0), 1);
    return y;
  }
  if (!f.is_ref(1) || f.ref(1).shape != x.shape) return std::nullopt;
  for (size_t i = 0; i < y.v.size(); ++i) y.v[i] = arg_add(y.v[i], f.ref(1).v[i], 1);
  return y;
}
std::optional<HostValue> fold(const GraphNode& n, const std::map<std::string, HostValue>& known);
}  // namespace

std::optional<HostValue> fold_node(const GraphNode& n, const std::map<std::string, HostValue>& known) {
  try {
    return fold(n, known);
  } catch (const GraphArgError&) {   // an argument no device op could take either: named now
    throw;
  } catch (
      const std::exception&) {  // arguments of other types, a value too large: left to the device, which names them
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
    if (step <= 0 || end < start) return std::nullopt;   // a descending range runs on the device
    const int64_t count = end == start ? 0 : (arg_sub(end, start, 1) - 1) / step + 1;
    return build({count}, [&](const std::vector<int64_t>& idx) { return start + idx[0] * step; });
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
std::optional<HostValue> broadcast_to(HostValue x, const Shape& shape) {
  if (x.shape.size() > shape.size()) return std::nullopt;
  x.shape.insert(x.shape.begin(), shape.size() - x.shape.size(), 1);
  for (size_t d = 0; d < shape.size(); ++d)
    if (x.shape[d] != 1 && x.shape[d] != shape[d]) return std::nullopt;
  return build(shape, [&](const std::vector<int64_t>& idx) { return at(x, idx); });
}
}  // namespace

namespace {
std::optional<MaskExpr> fold_mask(const GraphNode& n, const std::map<std::string, HostValue>& known,
                                  const std::map<std::string, MaskExpr>& exprs);
}  // namespace

std::optional<MaskExpr> fold_mask_expr(const GraphNode& n, const std::map<std::string, HostValue>& known,
                                       const std::map<std::string, MaskExpr>& exprs) {
  try {
    return fold_mask(n, known, exprs);
  } catch (const GraphArgError&) {
    throw;
  } catch (const std::exception&) {   // as fold_node: not folded, and attention names the mask it cannot use
    return std::nullopt;
  }
}

namespace {
std::optional<MaskExpr> fold_mask(const GraphNode& n, const std::map<std::string, HostValue>& known,
                                  const std::map<std::string, MaskExpr>& exprs) {
  std::string expr_ref;
  for (const std::string& r : n.refs) {
    if (!exprs.count(r)) continue;
    if (!expr_ref.empty() && expr_ref != r) return std::nullopt;   // two masks combined
    expr_ref = r;
  }
  const MaskExpr& e = exprs.at(expr_ref);
  if (n.op == "aten._to_copy.default") {   // to bool or an integer type: 0/1 stays 0/1
    const std::string dt =
        n.kwargs.contains("dtype") && n.kwargs["dtype"].is_string() ? n.kwargs["dtype"].get<std::string>() : "";
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
    std::optional<HostValue> src = broadcast_to(e.src, cst->shape);
    if (!src) return std::nullopt;
    return MaskExpr{std::move(*cst), std::move(*src)};
  }
  const bool gather = n.op == "aten.index.Tensor" || n.op == "aten.unsqueeze.default" || n.op == "aten.slice.Tensor" ||
                      n.op == "aten.expand.default" || n.op == "aten.view.default" ||
                      n.op == "aten._unsafe_view.default" || n.op == "aten.reshape.default";
  if (!gather || n.refs.empty() || n.refs[0] != expr_ref) return std::nullopt;   // the mask must be what is gathered
  std::optional<HostValue> cst = part(e.cst), src = part(e.src);
  if (!cst || !src) return std::nullopt;
  return MaskExpr{std::move(*cst), std::move(*src)};
}
}  // namespace

Tensor to_device(const HostValue& c, Device device) {
  if (device.is_meta()) return Tensor::empty(c.shape, DType::i64, device);   // allocation only
  Tensor host = Tensor::from_vector_i64(c.v, c.shape);
  return device == host.device() ? host : copy_to_device(host, device);
}

}  // namespace oomlab::graph
