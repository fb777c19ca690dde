// rank_env.cpp — rank discovery from flags and launcher variables (rank_env.h).
#include "engine/parallel/rank_env.h"

#include <cerrno>
#include <cstdlib>

#include "engine/core/error.h"

extern char** environ;

namespace oomlab {
namespace {
std::optional<std::string> get(const EnvMap& env, const std::string& k) {
  auto it = env.find(k);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

int to_int(const std::string& name, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  OOMLAB_CHECK(!v.empty() && end && *end == '\0' && errno == 0, name, "='", v, "' is not an integer");
  OOMLAB_CHECK(x >= lo && x <= hi, name, "=", x, " is outside ", lo, "..", hi);
  return int(x);
}

std::optional<int> env_int(const EnvMap& env, const std::string& k, int lo, int hi) {
  const auto v = get(env, k);
  if (!v) return std::nullopt;
  return to_int(k, *v, lo, hi);
}

// The job id of the launcher that gave the ranks (ranks given by flags or PMI have none).
std::string launcher_run_id(const std::string& source, const EnvMap& env) {
  std::optional<std::string> id;
  if (source == "torchrun") id = get(env, "TORCHELASTIC_RUN_ID");
  if (source == "openmpi") id = get(env, "OMPI_MCA_ess_base_jobid");
  if (source == "slurm" && (id = get(env, "SLURM_JOB_ID"))) {
    if (auto step = get(env, "SLURM_STEP_ID")) *id += "." + *step;
  }
  return id.value_or("");
}

// A launcher's variables: rank and size both or neither; local rank / size optional.
std::optional<RankInfo> from_env(const EnvMap& env, const std::string& source, const std::string& rank_var,
                                 const std::string& size_var, const std::string& local_rank_var,
                                 const std::string& local_size_var) {
  const bool has_rank = env.count(rank_var) > 0, has_size = env.count(size_var) > 0;
  if (!has_rank && !has_size) return std::nullopt;
  OOMLAB_CHECK(has_rank, source, ": ", size_var, " is set but ", rank_var, " is not");
  OOMLAB_CHECK(has_size, source, ": ", rank_var, " is set but ", size_var, " is not");
  RankInfo r;
  r.source = source;
  r.world_size = *env_int(env, size_var, 1, kMaxWorldSize);
  r.rank = *env_int(env, rank_var, 0, kMaxWorldSize);
  OOMLAB_CHECK(r.rank < r.world_size, source, ": ", rank_var, "=", r.rank, " is not below ", size_var, "=",
               r.world_size);
  r.local_rank = env_int(env, local_rank_var, 0, kMaxWorldSize).value_or(r.rank);   // none given: one node
  r.local_world_size = local_size_var.empty() ? -1 : env_int(env, local_size_var, 1, kMaxWorldSize).value_or(-1);
  OOMLAB_CHECK(r.local_rank < r.world_size, source, ": ", local_rank_var, "=", r.local_rank, " is not below ", size_var,
               "=", r.world_size);   // a node runs at most the world's ranks, whether or not its size is given
  if (r.local_world_size > 0)
    OOMLAB_CHECK(r.local_rank < r.local_world_size, source, ": ", local_rank_var, "=", r.local_rank, " is not below ",
                 local_size_var, "=", r.local_world_size);
  OOMLAB_CHECK(r.local_world_size <= r.world_size, source, ": ", local_size_var, "=", r.local_world_size,
               " exceeds ", size_var, "=", r.world_size);
  return r;
}
}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::string slurm_first_host(const std::string& nodelist) {
  OOMLAB_CHECK(!nodelist.empty(), "SLURM_NODELIST is empty");
  // The first entry ends at the first comma outside brackets.
  size_t depth = 0, end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[') ++depth;
    else if (nodelist[i] == ']') {
      OOMLAB_CHECK(depth > 0, "SLURM_NODELIST='", nodelist, "' has an unmatched ]");
      --depth;
    } else if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  const std::string first = nodelist.substr(0, end);
  std::string host;   // each [range] group replaced by its first number, leading zeros kept
  for (size_t i = 0; i < first.size();) {
    if (first[i] != '[') { host += first[i++]; continue; }
    const size_t rb = first.find(']', i);
    OOMLAB_CHECK(rb != std::string::npos, "SLURM_NODELIST='", nodelist, "' has an unmatched [");
    const std::string range = first.substr(i + 1, rb - i - 1);
    const std::string lo = range.substr(0, range.find_first_of(",-"));
    OOMLAB_CHECK(!lo.empty(), "SLURM_NODELIST='", nodelist, "' has an empty range");
    host += lo;
    i = rb + 1;
  }
  return host;
}

RankInfo discover_rank(const RankFlags& f, const EnvMap& env) {
  RankInfo r;
  if (f.rank || f.world_size) {
    OOMLAB_CHECK(f.rank.has_value(), "rank flags: a world size without a rank");
    OOMLAB_CHECK(f.world_size.has_value(), "rank flags: a rank without a world size");
    OOMLAB_CHECK(*f.world_size >= 1, "the world size must be >= 1 (got ", *f.world_size, ")");
    OOMLAB_CHECK(*f.rank >= 0 && *f.rank < *f.world_size, "rank ", *f.rank, " is not in 0..", *f.world_size - 1,
                 " (the world size is ", *f.world_size, ")");
    r.rank = *f.rank;
    r.world_size = *f.world_size;
    r.local_rank = f.local_rank.value_or(r.rank);
    r.local_world_size = -1;
    OOMLAB_CHECK(r.local_rank >= 0 && r.local_rank < r.world_size, "local rank ", r.local_rank, " is not in 0..",
                 r.world_size - 1);
    r.source = "flags";
  } else if (auto t = from_env(env, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")) {
    r = *t;
  } else if (auto o = from_env(env, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")) {
    r = *o;
  } else if (auto p = from_env(env, "pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")) {
    r = *p;
  } else if (auto s = from_env(env, "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "")) {
    r = *s;
    if (auto per_node = get(env, "SLURM_NTASKS_PER_NODE"))   // "2" or "2(x3)": the first count
      r.local_world_size = to_int("SLURM_NTASKS_PER_NODE", per_node->substr(0, per_node->find('(')), 1, r.world_size);
    OOMLAB_CHECK(r.local_world_size < 0 || r.local_rank < r.local_world_size, "slurm: SLURM_LOCALID=", r.local_rank,
                 " is not below SLURM_NTASKS_PER_NODE=", r.local_world_size);
  }
  r.run_id = launcher_run_id(r.source, env);
  if (f.master_addr) r.master_addr = *f.master_addr;
  else if (auto a = get(env, "MASTER_ADDR")) r.master_addr = *a;
  else if (auto nodes = get(env, "SLURM_STEP_NODELIST") ? get(env, "SLURM_STEP_NODELIST") : get(env, "SLURM_NODELIST"))
    r.master_addr = slurm_first_host(*nodes);   // inside a Slurm job, whoever launched the ranks
  OOMLAB_CHECK(!r.master_addr.empty(), f.master_addr ? "the master address" : "MASTER_ADDR", " is empty");
  if (f.master_port) r.master_port = to_int("the master port", std::to_string(*f.master_port), 1, 65535);
  else if (auto p = env_int(env, "MASTER_PORT", 1, 65535)) r.master_port = *p;
  return r;
}

std::string rendezvous_job(const RankInfo& r) {
  return str_cat("world size ", r.world_size, r.run_id.empty() ? "" : ", run " + r.run_id);
}

}  // namespace oomlab
