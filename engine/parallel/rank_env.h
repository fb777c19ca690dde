// rank_env.h — who am I in a multi-process run: rank discovery from, first match wins,
//   1. flags: --rank R --world-size N [--local-rank L] (--master-addr / --master-port too);
//   2. torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
//   3. OpenMPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
//   4. PMI (MPICH / Hydra, Intel MPI): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS;
//   5. Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, and
//      the first host of SLURM_NODELIST ("node[03-05,9]" -> "node03") as the master;
//   6. none of these: a single process (rank 0 of 1).
// The rendezvous address: --master-addr, else MASTER_ADDR, else Slurm's first host, else
// 127.0.0.1; the port: --master-port, else MASTER_PORT, else 29500 (torchrun's default).
// A source that is present must be whole and consistent: a ValueError names the variable
// (or flag) that is missing or wrong — a rank without a size, a non-number, rank >= size,
// local rank >= local size, a port outside 1..65535.
// The job: the launcher that gave the ranks names it (run_id: torchrun's TORCHELASTIC_RUN_ID,
// OpenMPI's OMPI_MCA_ess_base_jobid, Slurm's SLURM_JOB_ID.SLURM_STEP_ID; "" for flags, PMI or
// a bare environment); rendezvous_job() adds the world size, and rank 0's store serves only
// ranks of its job (tcp_store.h), so a second job on the same MASTER_PORT cannot join the first.
#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace oomlab {

// The largest world size a launcher variable or a rank flag may name.
constexpr int kMaxWorldSize = 1 << 20;

struct RankInfo {
  int rank = 0, world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;   // -1: the source does not say
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";   // flags | torchrun | openmpi | pmi | slurm | single
  std::string run_id;              // the launcher's id of the job ("" when the source has none)
  // The communicator's rendezvous (store, connections) and each collective wait at most this long.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

struct RankFlags {   // the command line's part; unset = not given
  std::optional<int> rank, world_size, local_rank, master_port;
  std::optional<std::string> master_addr;
};

using EnvMap = std::map<std::string, std::string>;
EnvMap current_environment();

RankInfo discover_rank(const RankFlags& flags, const EnvMap& env);

// The rendezvous identity of a rank's job: "world size N" and ", run ID" when run_id is set.
std::string rendezvous_job(const RankInfo& r);

// Slurm's compressed host list -> its first host: "n[1-4],m" -> "n1", "gpu[07,09]" -> "gpu07".
std::string slurm_first_host(const std::string& nodelist);

}  // namespace oomlab
