// version.h — `oomlab --version`: the version, the commit and build it was made from, and how
// each backend is present (linked in, or a library loaded at its first use: lazy_backend.h).
// Contract: loads no backend (it starts as fast as a CPU-only build).
#pragma once
#include <string>

namespace oomlab {
inline constexpr const char* kOomlabVersion = "0.1.0";   // also every results file's oomlab_version
std::string version_line();   // two lines, each ending in '\n'
}  // namespace oomlab
