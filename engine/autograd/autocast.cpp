// autocast.cpp — the autocast policy table, thread-local autocast state and cast cache
// (autocast.h).
#include "engine/autograd/autocast.h"

#include <map>
#include <utility>

#include "engine/core/error.h"
#include "engine/memory/memory_export.h"

namespace oomlab {

namespace {
struct CacheKey {
  const void* impl;
  uint64_t version;
  DType dtype;
  bool operator<(const CacheKey& o) const {
    return std::tie(impl, version, dtype) < std::tie(o.impl, o.version, o.dtype);
  }
};

struct AutocastState {
  std::optional<DType> dtype;
  // key -> index into `entries` (source, cast: the source keeps impl alive). Entries are
  // released in reverse insertion order, never in key (heap address) order, so the
  // allocator trace of clearing the cache is the same on every run and device.
  std::map<CacheKey, size_t> cache;
  std::vector<std::pair<Tensor, Tensor>> entries;
  int64_t casts = 0;
  AutocastObserver observer;
};
thread_local AutocastState state;

void report(const char* op, DType from, DType to) {
  if (state.observer) state.observer(op, from, to);
  if (OpProfiler::enabled()) {
    const int64_t now = trace_clock_us();
    OpProfiler::record(OpSpan{str_cat("autocast ", op, ": ", dtype_name(from), " -> ", dtype_name(to)), now, 0, 0,
                              "autocast", {}});
  }
}

Tensor cast(const Tensor& t, DType to, const char* op) {
  report(op, t.dtype(), to);
  if (t.dtype() == to) return t;
  const bool cacheable = t.is_leaf() && t.requires_grad();
  if (!cacheable) { ++state.casts; return t.to(to); }
  const CacheKey key{t.impl(), t.version(), to};
  auto it = state.cache.find(key);
  if (it != state.cache.end()) return state.entries[it->second].second;
  ++state.casts;
  Tensor c = t.to(to);
  state.cache.emplace(key, state.entries.size());
  state.entries.emplace_back(t, c);
  return c;
}
}  // namespace

const char* cast_policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::lower: return "lower";
    case CastPolicy::fp32: return "fp32";
    case CastPolicy::fp32_compute: return "fp32_compute";
    case CastPolicy::promote: return "promote";
  }
  return "?";
}

const std::vector<AutocastRule>& autocast_rules() {
  static const std::vector<AutocastRule> rules = {
      {"linear", CastPolicy::lower, "GEMM in the autocast dtype (float32 accumulation), output in it"},
      {"matmul", CastPolicy::lower, "GEMM in the autocast dtype"},
      {"bmm", CastPolicy::lower, "batched GEMM in the autocast dtype (attention q k^T and probs v)"},
      {"conv2d", CastPolicy::lower, "convolution in the autocast dtype (float32 accumulation)"},
      {"conv_transpose2d", CastPolicy::lower, "transposed convolution in the autocast dtype"},
      {"softmax", CastPolicy::fp32, "exp and row sums overflow half: float32 in and out"},
      {"log_softmax", CastPolicy::fp32, "float32 in and out"},
      {"masked_softmax", CastPolicy::fp32, "attention probabilities in float32"},
      {"fused_attention", CastPolicy::lower,
       "q, k, v in the autocast dtype and saved in it, as PyTorch's scaled_dot_product_attention; the kernels "
       "compute in float32 on copies made for the call (float32 log-sum-exp); output in the autocast dtype"},
      {"layer_norm", CastPolicy::fp32, "mean / variance in float32, float32 output"},
      {"group_norm", CastPolicy::fp32, "group mean / variance in float32, float32 output"},
      {"cross_entropy", CastPolicy::fp32, "logits cast to float32, float32 loss"},
      {"nll_loss", CastPolicy::fp32, "float32 loss"},
      {"pixel_cross_entropy", CastPolicy::fp32, "logits cast to float32, float32 loss"},
      {"sum", CastPolicy::fp32, "reductions accumulate and return float32"},
      {"mean", CastPolicy::fp32, "reductions accumulate and return float32"},
      {"batch_norm", CastPolicy::fp32_compute,
       "input kept (half in, half out); weight, bias and running stats float32, math in float32 (cuDNN)"},
      {"add", CastPolicy::promote, "mixed inputs: the wider dtype"},
      {"sub", CastPolicy::promote, "mixed inputs: the wider dtype"},
      {"mul", CastPolicy::promote, "mixed inputs: the wider dtype"},
      {"add_", CastPolicy::promote, "in place: the addend is cast to the destination's dtype"},
      {"cat", CastPolicy::promote, "mixed inputs: the widest dtype"},
  };
  return rules;
}

const AutocastRule& autocast_rule(const char* op) {
  for (const AutocastRule& r : autocast_rules())
    if (std::string_view(r.op) == op) return r;
  throw InternalError(str_cat("autocast: op '", op, "' has no row in the policy table"));
}

std::optional<DType> parse_amp(const std::string& text) {
  if (text == "off" || text == "none") return std::nullopt;
  if (text == "fp16" || text == "float16") return DType::f16;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  throw ValueError(str_cat("unknown autocast mode '", text, "' (expected off, fp16 or bf16)"));
}

const char* amp_name(std::optional<DType> amp) {
  if (!amp) return "off";
  return *amp == DType::f16 ? "fp16" : "bf16";
}

std::optional<DType> autocast_dtype() { return state.dtype; }

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : previous_(state.dtype), owns_cache_(false) {
  OOMLAB_CHECK(!dtype || *dtype == DType::f16 || *dtype == DType::bf16,
               "autocast: dtype must be float16 or bfloat16, got ", dtype_name(*dtype));
  if (dtype && !state.dtype) owns_cache_ = true;   // entering autocast: this guard's cache
  state.dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  state.dtype = previous_;
  if (owns_cache_) {
    state.cache.clear();
    while (!state.entries.empty()) state.entries.pop_back();
  }
}

Tensor autocast_lower(const Tensor& t, const char* op) {
  if (!state.dtype || !t.defined() || t.dtype() != DType::f32) {
    if (state.dtype && t.defined() && dtype_is_floating(t.dtype())) report(op, t.dtype(), t.dtype());
    return t;
  }
  (void)autocast_rule(op);
  return cast(t, *state.dtype, op);
}

Tensor autocast_fp32(const Tensor& t, const char* op) {
  if (!state.dtype || !t.defined() || !dtype_is_floating(t.dtype())) return t;
  (void)autocast_rule(op);
  if (t.dtype() != DType::f16 && t.dtype() != DType::bf16) { report(op, t.dtype(), t.dtype()); return t; }
  return cast(t, DType::f32, op);
}

void autocast_promote(Tensor& a, Tensor& b, const char* op) {
  if (!state.dtype || !a.defined() || !b.defined() || a.dtype() == b.dtype()) return;
  if (!dtype_is_floating(a.dtype()) || !dtype_is_floating(b.dtype())) return;
  (void)autocast_rule(op);
  const DType to = a.dtype() == DType::f64 || b.dtype() == DType::f64 ? DType::f64 : DType::f32;
  if (a.dtype() != to) a = cast(a, to, op);
  if (b.dtype() != to) b = cast(b, to, op);
}

void autocast_promote(std::vector<Tensor>& ts, const char* op) {
  if (!state.dtype || ts.size() < 2) return;
  for (int pass = 0; pass < 2; ++pass)   // the first pass finds the widest in ts[0], the second spreads it
    for (size_t i = 1; i < ts.size(); ++i) autocast_promote(ts[0], ts[i], op);
}

void autocast_note(const Tensor& input, const char* op) {
  if (!state.dtype || !input.defined()) return;
  (void)autocast_rule(op);
  report(op, input.dtype(), DType::f32);
}

AutocastObserverGuard::AutocastObserverGuard(AutocastObserver observer) : previous_(std::move(state.observer)) {
  state.observer = std::move(observer);
}
AutocastObserverGuard::~AutocastObserverGuard() { state.observer = std::move(previous_); }

int64_t autocast_cast_count() { return state.casts; }

}  // namespace oomlab
