// graph_nodes.cpp — the importer's op handlers (graph_internal.h): one function per op family,
// each mapping a core-ATen node onto oomlab's ops with the semantics graph_model.h states, and
// naming the node in a NotImplementedError for a use it does not support.
#include <algorithm>
#include <cmath>

#include "engine/autograd/checkpoint.h"
#include "engine/core/error.h"
#include "engine/nn/transformer_layers.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/embedding.h"
#include "engine/ops/layernorm.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "models/graph_internal.h"

namespace oomlab::graph {

using json = nlohmann::json;

const std::set<std::string>& supported_ops() {
  static const std::set<std::string> ops = {
      // CNNs (torchvision's eval export)
      "aten.convolution.default", "aten._native_batch_norm_legit_no_training.default", "aten.relu.default",
      "aten.add.Tensor", "aten.max_pool2d_with_indices.default", "aten.mean.dim", "aten._adaptive_avg_pool2d.default",
      "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.permute.default",
      "aten.t.default", "aten.addmm.default", "getitem",
      // transformer encoders (Hugging Face's BERT)
      "aten.embedding.default", "aten.native_layer_norm.default", "aten.gelu.default", "aten.tanh.default",
      "aten.select.int", "aten.clone.default", "aten.scaled_dot_product_attention.default",
      // evaluated on the host when constant (graph_constants.cpp)
      "aten.arange.start_step", "aten.arange.default", "aten.slice.Tensor", "aten.expand.default",
      "aten.gather.default", "aten.unsqueeze.default", "aten.ge.Scalar",
      // sizes of a dynamic batch, folded on the host
      "aten.sym_size.int", "_operator.mul", "_operator.add", "_operator.sub", "_operator.floordiv",
      // masks built from positions (GPT-2's causal mask), folded on the host
      "aten.full.default", "aten.cumsum.default", "aten.index.Tensor", "aten.ne.Scalar", "aten.ne.Tensor",
      "aten.eq.Scalar", "aten.eq.Tensor", "aten.le.Scalar", "aten.le.Tensor", "aten.lt.Scalar", "aten.lt.Tensor",
      "aten.gt.Scalar", "aten.gt.Tensor", "aten.bitwise_and.Tensor", "aten.logical_and.default",
      "aten._assert_tensor_metadata.default",
      // the attention-mask input's conversion, folded with the mask it builds
      "aten._to_copy.default"};
  return ops;
}

// The first argument may be overwritten: its value dies here, this node is its only reader
// (no other op saved it: a LayerNorm before a residual add does) and a kernel that saves no
// output produced it (what torchvision's in-place ReLU and residual add rely on).
bool NodeCtx::may_overwrite_first() const {
  const json& a = arg(0);
  if (!a.is_object() || !a.contains("ref")) return false;
  const std::string src = a["ref"].get<std::string>();
  if (!m.last_use(src, index) || m.uses(src) != 1 || !m.producer.count(src)) return false;   // no other reader saved it
  return overwritable_producer(m.producer.at(src));
}

bool overwritable_producer(const std::string& op) {
  return op == "aten.convolution.default" || op == "getitem:aten._native_batch_norm_legit_no_training.default" ||
         op == "aten.add.Tensor";
}

namespace {
Value conv(const NodeCtx& c) {
  if (c.arg(6).is_boolean() && c.arg(6).get<bool>()) c.unsupported("a transposed convolution");
  const auto st = c.ints(3, {1, 1}), pad = c.ints(4, {0, 0}), dil = c.ints(5, {1, 1});
  if (st.size() != 2 || pad.size() != 2 || dil.size() != 2) c.unsupported("a convolution that is not 2-D");
  Conv2dParams p{st[0], st[1], pad[0], pad[1], dil[0], dil[1], c.integer(8, 1)};
  return {{conv2d(c.tensor(0), c.tensor(1), c.tensor(2), p)}, {}, {}};
}

Value batch_norm_node(const NodeCtx& c) {
  const bool training = c.m.is_training();
  if (training && checkpoint_recomputing()) {   // a checkpointed segment's re-run: running stats untouched
    Tensor none_mean, none_var;
    return {{batch_norm(c.tensor(0), c.tensor(1), c.tensor(2), none_mean, none_var, true, c.number(5, 0.1),
                        c.number(6, 1e-5)), Tensor(), Tensor()}, {}, {}};
  }
  Tensor rm = c.tensor(3), rv = c.tensor(4);
  Tensor y = batch_norm(c.tensor(0), c.tensor(1), c.tensor(2), rm, rv, training, c.number(5, 0.1), c.number(6, 1e-5));
  auto counter = c.m.tensors().find(c.n.module + ".num_batches_tracked");
  if (training && counter != c.m.tensors().end()) {
    Tensor t = counter->second;
    add_scalar_inplace(t, 1.0);
  }
  return {{y, Tensor(), Tensor()}, {}, {}};
}

Value elementwise(const NodeCtx& c) {
  if (c.n.op == "aten.relu.default") {
    if (!c.may_overwrite_first()) return {{relu(c.tensor(0))}, {}, {}};
    Tensor x = c.tensor(0);
    return {{relu_(x)}, {}, {}};
  }
  if (c.n.kwargs.contains("alpha") && c.n.kwargs["alpha"] != 1) c.unsupported("add with alpha != 1");
  if (!c.value(0) || !c.value(1)) return add_node(c);   // a number
  const Tensor a = c.tensor(0), b = c.tensor(1);
  if (a.shape() != b.shape() || !c.may_overwrite_first()) return {{add(a, b)}, {}, {}};
  Tensor x = a;
  return {{add_(x, b)}, {}, {}};
}

Value pooling(const NodeCtx& c) {
  const Tensor x = c.tensor(0);
  if (c.n.op == "aten.max_pool2d_with_indices.default") {
    const auto k = c.ints(1), st = c.ints(2, k), pad = c.ints(3, {0, 0}), dil = c.ints(4, {1, 1});
    if (k.size() != 2 || st.size() != 2 || pad.size() != 2 || dil != std::vector<int64_t>{1, 1} ||
        (c.arg(5).is_boolean() && c.arg(5).get<bool>()))
      c.unsupported("a max pool other than 2-D, dilation 1, floor mode");
    return {{max_pool2d(x, Pool2dParams{k[0], k[1], st[0], st[1], pad[0], pad[1]}), Tensor()}, {}, {}};
  }
  if (c.n.op == "aten._adaptive_avg_pool2d.default") {
    const auto o = c.ints(1);
    if (o.size() != 2) c.unsupported("an adaptive pool that is not 2-D");
    return {{adaptive_avg_pool2d(x, o[0], o[1])}, {}, {}};
  }
  auto dims = c.ints(1);   // aten.mean.dim: over H and W only
  for (int64_t& d : dims) d = d < 0 ? d + x.dim() : d;
  std::sort(dims.begin(), dims.end());
  if (x.dim() != 4 || dims != std::vector<int64_t>{2, 3}) c.unsupported("a mean other than over H and W of NCHW");
  Tensor y = adaptive_avg_pool2d(x, 1, 1);
  const bool keep = c.arg(2).is_boolean() && c.arg(2).get<bool>();
  return {{keep ? y : y.reshape({x.size(0), x.size(1)})}, {}, {}};
}

// A literal shape of a value derived from the input, in a static export: its dim 0 holds the
// example's batch (alone or times other sizes, [B*T, H]) and follows the running batch.
Shape batch_following(const NodeCtx& c, Shape shape) {
  const int64_t b0 = c.m.example_batch(), b = c.m.batch;
  if (c.m.dynamic_batch()) return shape;   // sizes that follow the batch are size nodes
  if (!c.value(0) || !c.m.batched(c.arg(0)["ref"].get<std::string>()) || shape.empty() || b == b0 || shape[0] < 0)
    return shape;
  if (b0 <= 0 || shape[0] % b0 != 0)
    c.unsupported(str_cat("a view whose dim 0 (", shape[0], ") is not a multiple of the batch"));
  shape[0] = arg_mul(shape[0] / b0, b, 1);
  return shape;
}

Value shape_node(const NodeCtx& c) {
  if (c.n.op == "aten.permute.default" || c.n.op == "aten.t.default") {
    const Tensor w = c.tensor(0);
    const std::vector<int64_t> dims = c.n.op == "aten.t.default" ? std::vector<int64_t>{1, 0} : c.ints(1);
    if (w.dim() == 2 && dims == std::vector<int64_t>{1, 0} && !c.m.batched(c.arg(0)["ref"].get<std::string>()))
      return {{}, w, {}};   // a weight's transpose: addmm runs it as linear
    return {{w.permute(dims)}, {}, {}};
  }
  if (c.n.op == "aten.addmm.default") {   // bias + x @ W^T (nn.Linear) or bias + x @ M (GPT-2's Conv1D)
    const Value* wt = c.value(2);
    if (wt && wt->transposed_of.defined()) return {{linear(c.tensor(1), wt->transposed_of, c.tensor(0))}, {}, {}};
    const Tensor m = c.tensor(2);
    if (m.dim() != 2) c.unsupported("addmm of a matrix that is not 2-D");
    return {{linear(c.tensor(1), m.transpose(0, 1), c.tensor(0))}, {}, {}};
  }
  if (c.n.op == "aten.clone.default") return {{c.tensor(0).clone()}, {}, {}};
  const Value* src = c.value(0);
  if (src && src->transposed_of.defined()) return transposed_over_batch(c, *src, "a view of a transposed weight");
  const Tensor x = c.tensor(0);
  if (c.n.op == "aten.select.int") {   // x[:, i]: a narrow without the dim
    const int64_t dim = c.dim(1, x.dim()), i = checked_index(c.integer(2, 0), x.size(dim), 2);
    Shape s = x.shape();
    s.erase(s.begin() + dim);
    return {{x.narrow(dim, i, 1).reshape(s)}, {}, {}};
  }
  if (c.n.op == "aten.unsqueeze.default") {
    Shape s = x.shape();
    s.insert(s.begin() + c.dim(1, x.dim(), 0, /*insert=*/true), 1);
    return {{x.reshape(s)}, {}, {}};
  }
  if (c.n.op != "aten.view.default" && c.n.op != "aten._unsafe_view.default" && c.n.op != "aten.reshape.default")
    c.unsupported("this op on a value computed on the device (it is evaluated only when constant)");
  return {{x.reshape(batch_following(c, c.ints(1)))}, {}, {}};
}

Value transformer_node(const NodeCtx& c) {
  if (c.n.op == "aten.embedding.default") {
    const int64_t pad = c.integer(2, -1);
    const Value* ids = c.value(1);
    if (ids && ids->outs.empty() && ids->constant) {   // constant ids (positions): one row per sample
      HostValue rows = *ids->constant;
      const Tensor w = c.tensor(0);
      const int64_t rows_in_table = w.dim() == 2 ? w.size(0) : 0;   // (embedding names another rank)
      for (int64_t id : rows.v)   // checked here: a device kernel would read past the table
        if (rows_in_table > 0 && (id < 0 || id >= rows_in_table))
          bad_arg(1, str_cat("constant id ", id, " is out of range for an embedding of ", rows_in_table, " rows"));
      if (!rows.shape.empty() && rows.shape[0] == 1 && c.m.batch != 1) {
        const size_t per = rows.v.size();
        rows.shape[0] = c.m.batch;
        for (int64_t b = 1; b < c.m.batch; ++b) rows.v.insert(rows.v.end(), rows.v.begin(), rows.v.begin() + per);
      }
      return {{embedding(c.tensor(0), to_device(rows, c.m.config().device), pad)}, {}, {}};
    }
    return {{embedding(c.tensor(0), c.tensor(1), pad)}, {}, {}};
  }
  if (c.n.op == "aten.native_layer_norm.default") {
    const Tensor x = c.tensor(0);
    const auto normalized = c.ints(1);
    if (normalized.size() != 1 || normalized[0] != x.size(x.dim() - 1))
      c.unsupported("a layer norm over more than the last dim");
    return {{layer_norm(x, c.tensor(2), c.tensor(3), c.number(4, 1e-5)), Tensor(), Tensor()}, {}, {}};
  }
  if (c.n.op == "aten.gelu.default") {
    const std::string approx =
        c.n.kwargs.contains("approximate") ? c.n.kwargs["approximate"].get<std::string>() : "none";
    return {{gelu(c.tensor(0), approx)}, {}, {}};
  }
  return {{nn::tanh_composed(c.tensor(0))}, {}, {}};   // aten.tanh.default
}

// A constant boolean attention mask [..., Tq, Tk]: true everywhere (Hugging Face's mask for
// unpadded input), exactly key <= query in every leading slice (a causal decoder's), or other.
enum class MaskKind { all_true, causal, other, padding, padding_causal };
MaskKind mask_kind(const HostValue& m) {
  if (std::all_of(m.v.begin(), m.v.end(), [](int64_t x) { return x != 0; })) return MaskKind::all_true;
  if (m.shape.size() < 2) return MaskKind::other;
  const int64_t tq = m.shape[m.shape.size() - 2], tk = m.shape.back();
  for (size_t e = 0; e < m.v.size(); ++e) {
    const int64_t i = int64_t(e) / tk % tq, j = int64_t(e) % tk;
    if ((m.v[e] != 0) != (j <= i)) return MaskKind::other;
  }
  return MaskKind::causal;
}

// A mask built from the attention-mask input [B, T]: [B, 1 or heads, Tq, T] whose element
// [b, h, i, j] reads mask[b, j] (key padding), its constant part all-true or causal.
MaskKind mask_expr_kind(const MaskExpr& e, int64_t batch) {
  const Shape& s = e.cst.shape;
  if (s.size() != 4 || s[0] != batch || e.src.shape != s) return MaskKind::other;
  const int64_t tq = s[2], tk = s[3];
  bool all = true, causal = true;
  for (size_t k = 0; k < e.cst.v.size(); ++k) {
    const int64_t b = int64_t(k) / (s[1] * tq * tk), i = int64_t(k) / tk % tq, j = int64_t(k) % tk;
    if (e.src.v[k] != b * tk + j) return MaskKind::other;
    all = all && e.cst.v[k] != 0;
    causal = causal && (e.cst.v[k] != 0) == (j <= i);
  }
  return all ? MaskKind::padding : (causal ? MaskKind::padding_causal : MaskKind::other);
}

// aten.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=False,
// scale=None): oomlab's attention, eager or fused (--attention); the mask may only be a
// constant that masks nothing or exactly the causal one (is_causal=True does the same), or
// the attention-mask input's key padding (with or without the causal one).
Value attention_node(const NodeCtx& c) {
  auto kw = [&](const char* name, size_t pos) -> json {
    if (c.n.kwargs.contains(name)) return c.n.kwargs[name];
    return c.arg(pos);
  };
  const Tensor q = c.tensor(0), k = c.tensor(1), v = c.tensor(2);
  const json mask = kw("attn_mask", 3);
  const json p = kw("dropout_p", 4), causal_arg = kw("is_causal", 5), sc = kw("scale", 6);
  bool causal = causal_arg.is_boolean() && causal_arg.get<bool>();
  Tensor padding;   // key padding (uint8 [B, Tk], 1 = padded), from the attention-mask input
  if (mask.is_object()) {
    const Value* mv = &c.env.at(mask["ref"].get<std::string>());
    MaskKind kind = MaskKind::other;
    const HostValue* key = mv->mask ? &mv->mask->cst : (mv->outs.empty() ? mv->constant : nullptr);
    if (key) {   // classified once per fold: every layer shares the mask
      auto [it, fresh] = c.m.mask_kinds.emplace(key, 0);
      if (fresh) it->second = int(mv->mask ? mask_expr_kind(*mv->mask, c.m.batch) : mask_kind(*mv->constant));
      kind = MaskKind(it->second);
    }
    if (kind == MaskKind::other)
      c.unsupported("an attention mask other than a constant all-true or causal one, or the attention-mask input's "
                    "key padding");
    causal = causal || kind == MaskKind::causal || kind == MaskKind::padding_causal;
    if (kind == MaskKind::padding || kind == MaskKind::padding_causal) padding = c.m.key_padding();
  }
  if (p.is_number() && p.get<double>() != 0.0) c.unsupported("attention dropout in the exported graph");
  const double want = 1.0 / std::sqrt(double(q.size(q.dim() - 1)));
  if (sc.is_number() && std::abs(sc.get<double>() - want) > 1e-9 * want)
    c.unsupported("an attention scale other than 1/sqrt(head dim)");
  const bool training = c.m.is_training();
  return {{c.m.config().fused_attention
               ? fused_scaled_dot_product_attention(q, k, v, padding, 0.0, training, nullptr, causal)
               : scaled_dot_product_attention(q, k, v, padding, 0.0, training, nullptr, causal)},
          {},
          {}};
}
}  // namespace

namespace {
Value dispatch(const NodeCtx& c) {
  const GraphNode& n = c.n;
  if (n.op == "getitem") {
    const Value& src = c.env.at(n.refs.at(0));
    const int64_t i = c.integer(1, 0);
    if (i < 0 || size_t(i) >= src.outs.size())
      bad_arg(1, str_cat("output ", i, " of '", n.refs[0], "', which has ", src.outs.size(), " output(s) in oomlab"));
    return {{src.outs[size_t(i)]}, {}, {}};
  }
  if (n.op == "aten.convolution.default") return conv(c);
  if (n.op == "aten._native_batch_norm_legit_no_training.default") return batch_norm_node(c);
  if (n.op == "aten.relu.default" || n.op == "aten.add.Tensor") return elementwise(c);
  if (n.op == "aten.max_pool2d_with_indices.default" || n.op == "aten.mean.dim" ||
      n.op == "aten._adaptive_avg_pool2d.default")
    return pooling(c);
  if (n.op == "aten.embedding.default" || n.op == "aten.native_layer_norm.default" || n.op == "aten.gelu.default" ||
      n.op == "aten.tanh.default")
    return transformer_node(c);
  if (n.op == "aten.scaled_dot_product_attention.default") return attention_node(c);
  if (pointwise_ops().count(n.op)) return pointwise_node(c);
  return shape_node(c);
}
}  // namespace

// Errors of the ops a node runs name the node: an argument from the file (GraphArgError) and
// an op's own check of the shapes, dtypes or values it was given (ShapeError, ...) keep their
// type with the file and node in front; out of memory and interrupts pass unchanged.
Value run_node(GraphModel& m, const GraphNode& n, std::map<std::string, Value>& env, size_t index) {
  const NodeCtx c{m, n, env, index};
  const auto where = [&] { return node_where(m.graph().file, n); };
  try {
    return dispatch(c);
  } catch (const json::exception& e) {   // an argument of another JSON type than the op takes
    c.unsupported(str_cat("its arguments ", n.args.dump().substr(0, 80), " (", e.what(), ")"));
  } catch (const GraphArgError& e) {
    throw ValueError(where() + e.what());
  } catch (const ShapeError& e) {
    throw ShapeError(where() + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(where() + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(where() + e.what());
  } catch (const ValueError& e) {
    throw ValueError(where() + e.what());
  } catch (const std::out_of_range& e) {   // a reference or index no check above caught: still the file's
    throw ValueError(where() + "an argument refers past what it indexes (" + e.what() + ")");
  }
}

}  // namespace oomlab::graph
