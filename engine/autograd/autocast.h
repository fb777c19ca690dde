// autocast.h — automatic mixed precision (torch.autocast): a thread-local autocast dtype
// (float16 or bfloat16) under which ops cast their inputs by a per-op policy table, and
// the cast cache.
// Contracts:
//  * The policy table (autocast_rules()) is data: `oomlab amp-policy` prints it, the ops
//    consult it by name through the helpers below, and a test checks that every op the
//    helpers are called with has a row. Policies, in the spirit of PyTorch's autocast lists:
//      lower         float32 floating inputs are cast to the autocast dtype (GEMMs, convs)
//      fp32          float16 / bfloat16 inputs are cast to float32 (softmax, norms, losses,
//                    sums): the op computes and returns float32
//      fp32_compute  inputs are not cast; the op keeps float32 parameters and statistics and
//                    computes in float32, returning the input's dtype (batch_norm, as cuDNN)
//      promote       mixed floating inputs are cast to the widest of them (add, mul, cat)
//    Ops without a row run in their input's dtype (relu, gelu, dropout, pooling, views).
//    float64 is never lowered; integer tensors are never cast.
//  * Casts are differentiable (Tensor::to): gradients flow back in the source dtype, so
//    parameters, their gradients and the optimizer state stay float32 (master weights).
//  * Cast cache: while the outermost AutocastGuard lives, a leaf tensor that requires grad
//    (a parameter) is cast at most once per (tensor, version): a weight used by several
//    calls in one forward costs one copy; the cache is dropped when that guard ends (the
//    end of the forward), as PyTorch's. Checkpoint recomputation re-enters autocast with
//    a fresh cache (engine/autograd/checkpoint.h saves the dtype with the segment).
//  * Each cast decision is reported to the installed AutocastObserver (the per-op dtype
//    audit of `oomlab summary`) and, when the op profiler runs, as an instant event
//    "autocast <op>: <from> -> <to>" in the Chrome trace.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab {

enum class CastPolicy { lower, fp32, fp32_compute, promote };
const char* cast_policy_name(CastPolicy p);   // "lower", "fp32", "fp32_compute", "promote"

struct AutocastRule {
  const char* op;        // the op's name as the helpers are called with it
  CastPolicy policy;
  const char* why;       // one line: what the op does in each mode
};
const std::vector<AutocastRule>& autocast_rules();
// The rule for `op`; InternalError when the table has none (a helper called with a typo).
const AutocastRule& autocast_rule(const char* op);

// --amp: "off" -> nullopt, "fp16"/"float16" -> f16, "bf16"/"bfloat16" -> bf16; anything
// else is a ValueError naming the accepted values.
std::optional<DType> parse_amp(const std::string& text);
const char* amp_name(std::optional<DType> amp);   // "off", "fp16", "bf16"

// The calling thread's autocast dtype (nullopt: autocast off).
std::optional<DType> autocast_dtype();

// Enters autocast with `dtype` (nullopt: off) for the scope; the outermost guard owns the
// cast cache and clears it on exit.
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<DType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
 private:
  std::optional<DType> previous_;
  bool owns_cache_;
};

// Op-side helpers (no-ops when autocast is off or t is undefined / not floating).
Tensor autocast_lower(const Tensor& t, const char* op);   // float32 -> the autocast dtype
Tensor autocast_fp32(const Tensor& t, const char* op);    // float16 / bfloat16 -> float32
// promote: both cast to the wider floating dtype (float64 > float32 > bfloat16, float16).
void autocast_promote(Tensor& a, Tensor& b, const char* op);
void autocast_promote(std::vector<Tensor>& ts, const char* op);   // all to the widest
// fp32_compute ops report their decision (nothing is cast).
void autocast_note(const Tensor& input, const char* op);

// (op, input dtype, compute dtype): one call per autocast decision of the calling thread.
using AutocastObserver = std::function<void(const char* op, DType from, DType to)>;
class AutocastObserverGuard {
 public:
  explicit AutocastObserverGuard(AutocastObserver observer);
  ~AutocastObserverGuard();
  AutocastObserverGuard(const AutocastObserverGuard&) = delete;
  AutocastObserverGuard& operator=(const AutocastObserverGuard&) = delete;
 private:
  AutocastObserver previous_;
};

// Casts made since the thread's cache was created (cached weight casts count once), for
// tests of the cache.
int64_t autocast_cast_count();

}  // namespace oomlab
