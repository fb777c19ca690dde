// graph_args.cpp — the importer's checks of values read from a graph file (graph_internal.h):
// dims and indices normalised and range-checked, integer arithmetic checked for overflow and
// division by zero, as PyTorch checks them when the op runs; and NodeCtx's accessors of a
// node's arguments, which name the argument when it is not what the op takes. Nothing read
// from the file indexes memory before it passed one of these.
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/core/error.h"
#include "models/graph_internal.h"

namespace oomlab::graph {

using json = nlohmann::json;

void bad_arg(size_t arg, const std::string& what) { throw GraphArgError(str_cat("argument ", arg, ": ", what)); }

std::string node_where(const std::string& file, const GraphNode& n) {
  std::string module;   // the user's module the node came from (an LSTM decomposed into matmuls)
  if (!n.module.empty())
    module = str_cat(" in module '", n.module, "'", n.module_type.empty() ? "" : str_cat(" (", n.module_type, ")"));
  return str_cat("graph ", file, ": node '", n.name, "' (", n.op, ")", module, ": ");
}

int64_t checked_dim(int64_t d, int64_t rank, size_t arg, bool insert) {
  const int64_t extent = insert ? rank + 1 : rank;   // unsqueeze may put the new dim last
  if (extent <= 0 || d < -extent || d >= extent)
    bad_arg(arg, str_cat("dim ", d, " is out of range for a ", rank, "-D value (expected ", -extent, " <= dim < ",
                         extent, ")"));
  return d < 0 ? d + extent : d;
}

int64_t checked_index(int64_t i, int64_t size, size_t arg) {
  if (i < -size || i >= size)
    bad_arg(arg, str_cat("index ", i, " is out of range for a dim of size ", size));
  return i < 0 ? i + size : i;
}

int64_t arg_add(int64_t a, int64_t b, size_t arg) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) bad_arg(arg, str_cat(a, " + ", b, " overflows a 64-bit integer"));
  return r;
}

int64_t arg_sub(int64_t a, int64_t b, size_t arg) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) bad_arg(arg, str_cat(a, " - ", b, " overflows a 64-bit integer"));
  return r;
}

int64_t arg_mul(int64_t a, int64_t b, size_t arg) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) bad_arg(arg, str_cat(a, " * ", b, " overflows a 64-bit integer"));
  return r;
}

int64_t arg_floordiv(int64_t a, int64_t b, size_t arg) {
  if (b == 0) bad_arg(arg, str_cat(a, " // 0 divides by zero"));
  if (b == -1 && a == std::numeric_limits<int64_t>::min())
    bad_arg(arg, str_cat(a, " // -1 overflows a 64-bit integer"));
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

namespace {
// An integer the file spells as one that fits int64 (JSON's unsigned 2^64 - 1 is not -1).
bool is_int64(const json& a) {
  return a.is_number_integer() && !(a.is_number_unsigned() && a.get<uint64_t>() > uint64_t(INT64_MAX));
}
}  // namespace

int64_t arg_integer(const json& a, size_t arg) {
  if (!is_int64(a)) bad_arg(arg, str_cat(a.dump().substr(0, 60), " where an integer was expected"));
  return a.get<int64_t>();
}

[[noreturn]] void NodeCtx::unsupported(const std::string& what) const {
  throw NotImplementedError(str_cat(node_where(m.graph().file, n), what, " is not supported yet"));
}

const json& NodeCtx::arg(size_t i) const {
  static const json null_value;
  return i < n.args.size() ? n.args[i] : null_value;
}

const Value* NodeCtx::value(size_t i) const {
  const json& a = arg(i);
  return a.is_object() && a.contains("ref") ? &env.at(a["ref"].get<std::string>()) : nullptr;
}

Tensor NodeCtx::tensor(size_t i) const {
  const Value* v = value(i);
  if (!v) return Tensor();
  if (v->transposed_of.defined()) unsupported("a permuted weight used other than by addmm");
  if (v->mask) unsupported("the attention-mask input used other than as a key padding mask of attention");
  if (v->outs.empty() && v->constant) return to_device(*v->constant, m.config().device);
  if (v->outs.empty() || !v->outs[0].defined())
    unsupported(str_cat("argument ", i, " (an output oomlab does not compute)"));
  return v->outs[0];
}

std::vector<int64_t> NodeCtx::ints(size_t i, std::vector<int64_t> dflt) const {
  const json& a = arg(i);
  if (a.is_null()) return dflt;
  if (!a.is_array()) bad_arg(i, str_cat(a.dump().substr(0, 60), " where a list of integers was expected"));
  std::vector<int64_t> out;
  for (const json& e : a) {
    if (e.is_object() && e.contains("ref")) {   // a size node (dynamic batch), folded on the host
      const Value& v = env.at(e["ref"].get<std::string>());
      if (!v.constant || v.constant->v.size() != 1)
        unsupported(str_cat("argument ", i, " (a size not known on the host)"));
      out.push_back(v.constant->v[0]);
      continue;
    }
    if (!is_int64(e)) bad_arg(i, str_cat(a.dump().substr(0, 60), " where a list of integers was expected"));
    out.push_back(e.get<int64_t>());
  }
  return out;
}

int64_t NodeCtx::integer(size_t i, int64_t dflt) const {
  const json& a = arg(i);
  if (a.is_null()) return dflt;
  return arg_integer(a, i);
}

int64_t NodeCtx::dim(size_t i, int64_t rank, int64_t dflt, bool insert) const {
  return checked_dim(integer(i, dflt), rank, i, insert);
}

double NodeCtx::number(size_t i, double dflt) const {
  const json& a = arg(i);
  if (a.is_null()) return dflt;
  if (a.is_number()) return a.get<double>();
  if (a.is_object() && a.contains("float")) {
    const std::string f = a["float"];
    return f == "nan" ? NAN : (f == "inf" ? INFINITY : -INFINITY);
  }
  unsupported(str_cat("argument ", i, " ", a.dump().substr(0, 60), " where a number was expected"));
}

}  // namespace oomlab::graph
