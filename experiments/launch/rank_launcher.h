// rank_launcher.h — a one-machine job launcher for the process backends, so that
// `oomlab allreduce-bench --backend mpi|gloo --ranks N` run outside any launcher starts its
// own N ranks (what `mpirun -np N` or `torchrun --nproc-per-node N` would do):
//  * mpi: runs `mpirun -np N --oversubscribe <this executable> <args>` (mpirun from PATH;
//    as root, OpenMPI's OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) are set for that child only);
//  * gloo, nccl: N children of this executable with torchrun's variables (RANK, LOCAL_RANK,
//    WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port); when
//    one exits non-zero the others get SIGTERM (then SIGKILL after 5 s), as torchrun does.
// Each child gets SIGTERM when the launcher goes (PR_SET_PDEATHSIG), kill -9 included: no
// rank outlives its job.
// Without OMP_NUM_THREADS in the environment, each rank gets OMP_NUM_THREADS = cores / N
// (at least 1; torchrun sets 1), said on stderr: N processes oversubscribing the cores with
// OpenMP and BLAS threads ran ResNet-20 DDP steps 2.5x slower (measured, 2 ranks on 2 cores).
// Returns the job's exit status: 0 when every rank exited 0, else the first failure's
// status (128 + signal for a rank killed by a signal). IoError when nothing could start.
#pragma once
#include <string>
#include <vector>

namespace oomlab {

int launch_local_job(const std::string& backend, int ranks, const std::vector<std::string>& args);

}  // namespace oomlab
