// exit_codes.h — what the oomlab executable's exit status means (README "Exit codes"); the
// matrix runner reads a child's status with them (child_process.h).
#pragma once

namespace oomlab {
// Exit codes of the oomlab executable (README "Exit codes"): 0 success; 2 usage or input
// error (bad flag or value, unknown model, corrupt or missing file, invalid experiment
// spec, unwritable output); 3 out of memory (device or host; the message names the phase);
// 4 training diverged (a NaN/Inf loss with --on-nan stop; the results are still written);
// 5 a benchmark found wrong results (allreduce-bench #wrong > 0); 70 internal error (a bug
// in oomlab: please report it).
inline constexpr int kExitUsage = 2, kExitOutOfMemory = 3, kExitDiverged = 4, kExitWrongResults = 5, kExitInternal = 70;
}  // namespace oomlab
