// graph_pointwise.cpp — the importer's handlers for arithmetic, activations and the shape ops
// of torchvision's mobile and transformer models and GPT-2 (graph_internal.h):
//   add / sub / mul / div.Tensor: tensor op tensor broadcasts (broadcast.h); tensor op number
//     is add_scalar / scale (div by a number multiplies by its reciprocal: within an ulp of
//     PyTorch's quotient, and saves nothing, as PyTorch's DivBackward with a scalar);
//   sigmoid, silu, hardswish, hardsigmoid (activation.h), pow.Tensor_Scalar;
//   squeeze.dims, cat, expand of a device value (a stride-0 view), split_with_sizes (views),
//   mm by a transposed weight (linear without bias), alias, and an as_strided that only
//   restates its input's contiguous layout (ConvNeXt's avgpool).
#include <algorithm>

#include "engine/core/error.h"
#include "engine/ops/activation.h"
#include "engine/ops/broadcast.h"
#include "engine/ops/concat.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "models/graph_internal.h"

namespace oomlab::graph {

using json = nlohmann::json;

const std::set<std::string>& pointwise_ops() {
  static const std::set<std::string> ops = {
      "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor", "aten.sigmoid.default", "aten.silu.default",
      "aten.hardswish.default", "aten.hardsigmoid.default", "aten.pow.Tensor_Scalar", "aten.squeeze.dims",
      "aten.cat.default", "aten.split_with_sizes.default", "aten.mm.default", "aten.alias.default",
      "aten.as_strided.default", "aten.expand.default", "aten.slice.Tensor", "aten.bmm.default"};
  return ops;
}

namespace {
Value one(Tensor t) { return {{std::move(t)}, {}, {}}; }

// a op b where either may be a number (Python scalars stay literals in the export).
Value arithmetic(const NodeCtx& c, BinaryOp op) {
  if (c.n.kwargs.contains("alpha") && c.n.kwargs["alpha"] != 1) c.unsupported("alpha != 1");
  const bool a_num = !c.value(0), b_num = !c.value(1);
  if (a_num && b_num) c.unsupported("arithmetic on two numbers");
  if (!a_num && !b_num) return one(broadcast_binary(op, c.tensor(0), c.tensor(1)));
  const Tensor t = c.tensor(a_num ? 1 : 0);
  const double s = c.number(a_num ? 0 : 1, 0.0);
  switch (op) {
    case BinaryOp::add: return one(add_scalar(t, s));
    case BinaryOp::sub: return one(a_num ? add_scalar(scale(t, -1.0), s) : add_scalar(t, -s));
    case BinaryOp::mul: return one(scale(t, s));
    case BinaryOp::div:
      if (a_num) c.unsupported("a number divided by a tensor");
      return one(scale(t, 1.0 / s));
  }
  c.unsupported("this arithmetic");
}

std::vector<Tensor> tensor_list(const NodeCtx& c, size_t i) {
  std::vector<Tensor> out;
  for (const json& e : c.arg(i)) {
    if (!e.is_object() || !e.contains("ref"))
      c.unsupported(str_cat("argument ", i, " (a list of tensors was expected)"));
    const Value& v = c.env.at(e["ref"].get<std::string>());
    if (v.outs.empty() || !v.outs[0].defined())
      c.unsupported(str_cat("argument ", i, " (an output oomlab does not compute)"));
    out.push_back(v.outs[0]);
  }
  return out;
}

Value shape_op(const NodeCtx& c) {
  const std::string& op = c.n.op;
  if (op == "aten.cat.default") {
    const std::vector<Tensor> ts = tensor_list(c, 0);
    if (ts.empty()) bad_arg(0, "an empty list of tensors");
    return one(cat(ts, c.dim(1, ts[0].dim())));
  }
  if (op == "aten.mm.default" || op == "aten.bmm.default") {   // x @ W^T (bmm: W^T expanded over x's dim 0)
    const Value* wt = c.value(1);
    if (!wt || !wt->transposed_of.defined())
      c.unsupported("a matrix product whose second matrix is not a transposed weight");
    return one(linear(c.tensor(0), wt->transposed_of, Tensor()));
  }
  const Value* src = c.value(0);
  if (op == "aten.expand.default" && src && src->transposed_of.defined())
    return transposed_over_batch(c, *src, "an expand of a transposed weight other than over a batch");
  const Tensor x = c.tensor(0);
  if (op == "aten.alias.default") return one(x);
  if (op == "aten.expand.default") return one(expand(x, c.ints(1)));
  if (op == "aten.squeeze.dims") {   // drops the listed dims of size 1 (others stay, as PyTorch)
    std::vector<int64_t> dims = c.ints(1);
    for (int64_t& d : dims) d = checked_dim(d, std::max<int64_t>(x.dim(), 1), 1);   // a 0-d value takes dim 0 or -1
    Shape s;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (x.size(d) != 1 || std::find(dims.begin(), dims.end(), d) == dims.end()) s.push_back(x.size(d));
    return one(x.reshape(s));
  }
  if (op == "aten.slice.Tensor") {   // x[a:b] along a dim, step 1: a narrow view
    const int64_t d = c.dim(1, x.dim()), size = x.size(d);
    int64_t start = c.integer(2, 0), end = c.integer(3, size);
    if (c.integer(4, 1) != 1) c.unsupported("a slice with a step other than 1");
    start = std::clamp(start < 0 ? start + size : start, int64_t(0), size);
    end = std::clamp(end < 0 ? end + size : end, start, size);
    if (start == 0 && end == size) return one(x);   // x[:]: eager indexing returns x itself (no SliceBackward)
    return one(x.narrow(d, start, end - start));
  }
  if (op == "aten.split_with_sizes.default") {
    Value v;
    v.outs = split(x, c.ints(1), c.dim(2, x.dim()));
    return v;
  }
  // aten.as_strided: only as the identity on a contiguous layout (strides of size-1 dims are free)
  const Shape shape = c.ints(1), strides = c.ints(2);
  const Shape want = contiguous_strides(x.shape());
  bool same = shape == x.shape() && x.is_contiguous() && strides.size() == want.size() &&
              (!c.arg(3).is_number_integer() || c.arg(3).get<int64_t>() == 0);
  for (size_t d = 0; same && d < strides.size(); ++d) same = shape[d] == 1 || strides[d] == want[d];
  if (!same)
    c.unsupported(str_cat("as_strided to ", shape_str(shape), " strides ", shape_str(strides), " of ", x.str()));
  return one(x);
}
}  // namespace

Value transposed_over_batch(const NodeCtx& c, const Value& src, const char* what) {
  const Shape s = c.ints(1), w = src.transposed_of.shape();
  if (s.size() != 3 || s[1] != w[1] || s[2] != w[0]) c.unsupported(what);
  return {{}, src.transposed_of, {}};
}

Value pointwise_node(const NodeCtx& c) {
  const std::string& op = c.n.op;
  if (op == "aten.sub.Tensor") return arithmetic(c, BinaryOp::sub);
  if (op == "aten.mul.Tensor") return arithmetic(c, BinaryOp::mul);
  if (op == "aten.div.Tensor") {
    if (c.n.kwargs.contains("rounding_mode") && !c.n.kwargs["rounding_mode"].is_null())
      c.unsupported("a rounding division");
    return arithmetic(c, BinaryOp::div);
  }
  if (op == "aten.sigmoid.default") return one(sigmoid(c.tensor(0)));
  if (op == "aten.silu.default") return one(silu(c.tensor(0)));
  if (op == "aten.hardswish.default") return one(hardswish(c.tensor(0)));
  if (op == "aten.hardsigmoid.default") return one(hardsigmoid(c.tensor(0)));
  if (op == "aten.pow.Tensor_Scalar") return one(pow_scalar(c.tensor(0), c.number(1, 1.0)));
  return shape_op(c);
}

Value add_node(const NodeCtx& c) { return arithmetic(c, BinaryOp::add); }

}  // namespace oomlab::graph
