// test_rank_env.cpp — rank discovery (engine/parallel/rank_env.h), table-driven: each
// launcher's variables, the precedence flags > torchrun > OpenMPI > PMI > Slurm > single,
// the rendezvous address and port, Slurm host lists, the job's run id (from the launcher
// that gave the ranks only), and every inconsistency as a ValueError naming the variable.
// ctest tier: ranks
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/parallel/rank_env.h"

using namespace oomlab;

namespace {
struct Case {
  const char* name;
  RankFlags flags;
  EnvMap env;
  RankInfo want;
};
struct Bad {
  const char* name;
  RankFlags flags;
  EnvMap env;
  const char* message;
};
RankInfo info(int rank, int size, int local, int local_size, const char* addr, int port, const char* source) {
  RankInfo r;
  r.rank = rank;
  r.world_size = size;
  r.local_rank = local;
  r.local_world_size = local_size;
  r.master_addr = addr;
  r.master_port = port;
  r.source = source;
  return r;
}
RankFlags flags(std::optional<int> rank, std::optional<int> size) {
  RankFlags f;
  f.rank = rank;
  f.world_size = size;
  return f;
}
}  // namespace

TEST(RankEnv, EachLauncherAndThePrecedence) {
  const EnvMap torchrun = {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29400"}};
  const EnvMap ompi = {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const EnvMap pmi = {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}};
  const EnvMap slurm = {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"},
                        {"SLURM_NTASKS_PER_NODE", "3(x2)"}, {"SLURM_NODELIST", "gpu[07-08]"}};
  EnvMap both = ompi;
  both.insert(torchrun.begin(), torchrun.end());
  EnvMap slurm_and_pmi = slurm;
  slurm_and_pmi.insert(pmi.begin(), pmi.end());
  EnvMap slurm_master = slurm;
  slurm_master["MASTER_ADDR"] = "login1";
  RankFlags with_addr = flags(1, 2);
  with_addr.master_addr = "node9";
  with_addr.master_port = 1234;
  const Case cases[] = {
      {"nothing: one process", {}, {}, info(0, 1, 0, 1, "127.0.0.1", 29500, "single")},
      {"torchrun", {}, torchrun, info(3, 8, 1, 2, "10.0.0.1", 29400, "torchrun")},
      {"openmpi", {}, ompi, info(2, 4, 0, 2, "127.0.0.1", 29500, "openmpi")},
      {"pmi without local ids", {}, pmi, info(1, 2, 1, -1, "127.0.0.1", 29500, "pmi")},
      {"slurm: master from the node list", {}, slurm, info(5, 6, 2, 3, "gpu07", 29500, "slurm")},
      {"torchrun before openmpi", {}, both, info(3, 8, 1, 2, "10.0.0.1", 29400, "torchrun")},
      {"pmi before slurm", {}, slurm_and_pmi, info(1, 2, 1, -1, "gpu07", 29500, "pmi")},
      {"MASTER_ADDR before slurm's host", {}, slurm_master, info(5, 6, 2, 3, "login1", 29500, "slurm")},
      {"flags before everything", flags(0, 3), both, info(0, 3, 0, -1, "10.0.0.1", 29400, "flags")},
      {"flag address and port", with_addr, torchrun, info(1, 2, 1, -1, "node9", 1234, "flags")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RankInfo r = discover_rank(c.flags, c.env);
    EXPECT_EQ(r.rank, c.want.rank);
    EXPECT_EQ(r.world_size, c.want.world_size);
    EXPECT_EQ(r.local_rank, c.want.local_rank);
    EXPECT_EQ(r.local_world_size, c.want.local_world_size);
    EXPECT_EQ(r.master_addr, c.want.master_addr);
    EXPECT_EQ(r.master_port, c.want.master_port);
    EXPECT_EQ(r.source, c.want.source);
  }
}

// The run id comes from the launcher that gave the ranks, never from another's leftovers:
// ranks started by flags inside a Slurm step, or by PMI, have none.
TEST(RankEnv, TheJobIsTheRanksLaunchersRunId) {
  const EnvMap torchrun = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_RUN_ID", "f00d"},
                           {"SLURM_JOB_ID", "77"}};
  const EnvMap ompi = {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_MCA_ess_base_jobid", "830603265"}, {"TORCHELASTIC_RUN_ID", "stale"}};
  const EnvMap slurm = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"},
                        {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "2"}};
  const EnvMap pmi = {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"SLURM_JOB_ID", "77"}};
  EXPECT_EQ(rendezvous_job(discover_rank({}, torchrun)), "world size 2, run f00d");
  EXPECT_EQ(rendezvous_job(discover_rank({}, ompi)), "world size 4, run 830603265");
  EXPECT_EQ(rendezvous_job(discover_rank({}, slurm)), "world size 3, run 77.2");
  EXPECT_EQ(rendezvous_job(discover_rank({}, pmi)), "world size 2");
  EXPECT_EQ(rendezvous_job(discover_rank(flags(1, 2), slurm)), "world size 2");
  EXPECT_EQ(rendezvous_job(discover_rank({}, {})), "world size 1");
}

TEST(RankEnv, InconsistenciesNameTheVariable) {
  const Bad cases[] = {
      {"rank without size", {}, {{"RANK", "0"}}, "torchrun: RANK is set but WORLD_SIZE is not"},
      {"size without rank",
       {},
       {{"OMPI_COMM_WORLD_SIZE", "2"}},
       "openmpi: OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not"},
      {"rank too large", {}, {{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "torchrun: RANK=4 is not below WORLD_SIZE=4"},
      {"not a number", {}, {{"RANK", "one"}, {"WORLD_SIZE", "4"}}, "RANK='one' is not an integer"},
      {"zero world", {}, {{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}, "PMI_SIZE=0 is outside 1.."},
      {"local rank too large",
       {},
       {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
       "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
      {"local rank beyond the world, no local size",
       {},
       {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "7"}},
       "torchrun: LOCAL_RANK=7 is not below WORLD_SIZE=1"},
      {"slurm tasks per node above the tasks",
       {},
       {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_NTASKS_PER_NODE", "4"}},
       "SLURM_NTASKS_PER_NODE=4 is outside 1..1"},
      {"slurm local id beyond the node",
       {},
       {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "3"}, {"SLURM_NTASKS_PER_NODE", "2"}},
       "SLURM_LOCALID=3 is not below SLURM_NTASKS_PER_NODE=2"},
      {"bad port", {}, {{"MASTER_PORT", "70000"}}, "MASTER_PORT=70000 is outside 1..65535"},
      {"flag rank alone", flags(1, std::nullopt), {}, "rank flags: a rank without a world size"},
      {"flag rank too large", flags(2, 2), {}, "rank 2 is not in 0..1"},
      {"bad slurm list",
       {},
       {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_NODELIST", "n[1-2"}},
       "unmatched ["},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    try {
      discover_rank(c.flags, c.env);
      ADD_FAILURE() << "expected a ValueError";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

TEST(RankEnv, SlurmHostLists) {
  EXPECT_EQ(slurm_first_host("node1"), "node1");
  EXPECT_EQ(slurm_first_host("a,b"), "a");
  EXPECT_EQ(slurm_first_host("gpu[07-09,12]"), "gpu07");
  EXPECT_EQ(slurm_first_host("rack[3,5]-n[1-2]"), "rack3-n1");
  EXPECT_EQ(slurm_first_host("x[10-11],y[1-2]"), "x10");
  EXPECT_THROW(slurm_first_host(""), ValueError);
}
