// rng.cpp — the default generator.
#include "engine/core/rng.h"

namespace oomlab {
Generator& default_generator() { static Generator g; return g; }
void manual_seed(uint64_t seed) { default_generator() = Generator{seed, 0}; }
}  // namespace oomlab
