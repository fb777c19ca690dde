// process.h — whether another process still runs, for the cleanup of what a killed one left
// (temp files of atomic writes, checkpoint temp folders, `oomlab run` scratch folders).
// Contract: process_gone(pid) is true when no process has that id, or when it has exited and
// waits to be reaped (a zombie: kill(pid, 0) still succeeds for it); false for this process
// and for a live one, including one of another user (EPERM).
#pragma once

namespace oomlab {

bool process_gone(long pid);

}  // namespace oomlab
