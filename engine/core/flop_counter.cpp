// flop_counter.cpp — the thread's active counter (flop_counter.h).
#include "engine/core/flop_counter.h"

namespace oomlab {
namespace {
thread_local FlopCounter* g_active = nullptr;
}  // namespace

const char* matrix_kind_name(MatrixKind k) {
  switch (k) {
    case MatrixKind::gemm: return "gemm";
    case MatrixKind::conv: return "conv";
    case MatrixKind::conv_channels_last: return "conv_channels_last";
    case MatrixKind::attention: return "attention";
  }
  return "?";
}

FlopCounter::FlopCounter() : previous_(g_active) { g_active = this; }
FlopCounter::~FlopCounter() { g_active = previous_; }

FlopCounter* FlopCounter::active() { return g_active; }

double FlopCounter::flops(DType t) const {
  double s = 0;
  for (const auto& kind : by_kind_) s += kind[int(t)];
  return s;
}

double FlopCounter::total() const {
  double s = 0;
  for (const auto& kind : by_kind_)
    for (double f : kind) s += f;
  return s;
}

}  // namespace oomlab
