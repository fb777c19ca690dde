// flop_counter.cpp — the thread's active counter (flop_counter.h).
#include "engine/core/flop_counter.h"

namespace oomlab {
namespace {
thread_local FlopCounter* g_active = nullptr;
}  // namespace

FlopCounter::FlopCounter() : previous_(g_active) { g_active = this; }
FlopCounter::~FlopCounter() { g_active = previous_; }

FlopCounter* FlopCounter::active() { return g_active; }

double FlopCounter::total() const {
  double s = 0;
  for (double f : by_dtype_) s += f;
  return s;
}

}  // namespace oomlab
