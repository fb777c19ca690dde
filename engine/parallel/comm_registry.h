// comm_registry.h — the process-level communicator backends (one rank per process: mpi,
// gloo and nccl), registered by their own libraries when the build has them (CMake links
// them whole-archive, as it does the kernel backends; nccl registers with the CUDA kernels). The local backend is not
// here: its ranks are threads of one process (local_comm.h).
// make_communicator(name, ...) and require_comm_backend throw ValueError naming the backends
// this build has; a name no linked library registered loads the lazy backends first (nccl is
// in the CUDA library).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/parallel/communicator.h"
#include "engine/parallel/rank_env.h"

namespace oomlab {

using CommFactory = std::function<std::unique_ptr<Communicator>(const RankInfo& rank, Device device)>;

void register_comm_backend(const std::string& name, CommFactory factory);
std::vector<std::string> comm_backends();   // registered names, sorted (lazy backends' once loaded)
// True when `name` is registered, after loading the lazy backends (engine/core/lazy_backend.h) if it is not.
bool comm_backend_available(const std::string& name);
// Throws ValueError "<what> '<name>' is not in this build (it has: local, ...)" unless available.
void require_comm_backend(const std::string& name, const std::string& what = "communicator backend");
std::unique_ptr<Communicator> make_communicator(const std::string& name, const RankInfo& rank, Device device);

}  // namespace oomlab
