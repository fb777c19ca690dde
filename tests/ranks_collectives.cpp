// ranks_collectives.cpp — the process backends (mpi, gloo) against the serial reference:
// one process per rank, started by a real launcher (ctest runs `mpirun -np N --oversubscribe`
// for N = 1..4, tests/ranks_failure.py torchrun-style processes). Each process runs these
// tests with its rank's communicator: OOMLAB_COMM names the backend, the rank comes from
// the launcher's variables (rank_env.h), OOMLAB_COMM_TIMEOUT (seconds, default 60) bounds
// every wait.
// RanksFailure.* run only when tests/ranks_failure.py sets OOMLAB_RANKS_SCENARIO: the last
// rank dies (SIGKILL) or hangs before an all_reduce; the others must fail with a clear error
// within the timeout (gloo: CommError / CommTimeoutError thrown here; mpi: the watchdog ends
// the process, or mpirun ends the job when a rank dies) — the driver checks what happened.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "engine/parallel/comm_registry.h"
#include "tests/collective_suite.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

Communicator& comm() {
  static std::unique_ptr<Communicator> c = [] {
    const std::string backend = env_or("OOMLAB_COMM", "mpi");
    auto made = make_communicator(backend, discover_rank({}, current_environment()), Device{DeviceType::cpu, 0});
    made->set_timeout(std::chrono::milliseconds(int64_t(1000 * std::stod(env_or("OOMLAB_COMM_TIMEOUT", "60")))));
    return made;
  }();
  return *c;
}
}  // namespace

TEST(Ranks, AllReduceEveryDTypeAndOp) {
  Communicator& c = comm();
  SCOPED_TRACE(str_cat(c.backend(), " rank ", c.rank(), " of ", c.world_size()));
  check_all_reduce(c);
}

TEST(Ranks, BroadcastReduceAllGatherReduceScatter) { check_other_collectives(comm()); }

TEST(Ranks, RanksEndBitIdenticalOnRandomData) { check_identical_results(comm()); }

TEST(Ranks, MaxPropagatesNaN) { check_max_propagates_nan(comm()); }

TEST(Ranks, ByteCountsAreTheRing) {
  Communicator& c = comm();
  const int n = c.world_size();
  const int64_t count = 1 << 12;
  Tensor t = Tensor::ones({count}, DType::f32, c.device());
  c.reset_stats();
  c.all_reduce(t, ReduceOp::sum);
  const int64_t ring = n > 1 ? count * 4 * 2 * (n - 1) / n : 0;
  EXPECT_EQ(c.stats().bytes_sent, ring);
  EXPECT_EQ(c.stats().bytes_received, ring);
  EXPECT_EQ(t.to_vector()[0], double(n));
}

// A gloo rank writing to a dead peer's socket gets EPIPE (gloo's CommError follows), not a
// SIGPIPE that ends the process with no message: RanksFailure.gloo_kill once saw rank 0 exit on
// signal 13. A socket pair with its reading end closed stands for the dead peer.
TEST(Ranks, GlooRankSurvivesWritingToAClosedSocket) {
  if (comm().backend() != "gloo") GTEST_SKIP() << "gloo only: mpi ranks keep their launcher's SIGPIPE";
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  ::close(fds[1]);
  const char byte = 1;
  errno = 0;
  EXPECT_EQ(::write(fds[0], &byte, 1), -1);
  EXPECT_EQ(errno, EPIPE);
  ::close(fds[0]);
}

// The last rank dies or hangs; the others call all_reduce and must not hang.
TEST(RanksFailure, PeerDiesOrHangs) {
  const std::string scenario = env_or("OOMLAB_RANKS_SCENARIO", "");
  if (scenario.empty()) GTEST_SKIP() << "run by tests/ranks_failure.py";
  Communicator& c = comm();
  Tensor t = Tensor::ones({1 << 16}, DType::f32, c.device());
  c.all_reduce(t, ReduceOp::sum);   // everyone is connected
  if (c.rank() == c.world_size() - 1) {
    std::fprintf(stderr, "rank %d: %s\n", c.rank(), scenario == "kill" ? "killing itself" : "hanging");
    std::fflush(stderr);
    if (scenario == "kill") std::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(600));
  }
  try {
    c.all_reduce(t, ReduceOp::sum);
    ADD_FAILURE() << "rank " << c.rank() << ": all_reduce returned although the last rank is gone";
  } catch (const CommError& e) {
    std::fprintf(stderr, "rank %d caught %s: %s\n", c.rank(),
                 dynamic_cast<const CommTimeoutError*>(&e) ? "CommTimeoutError" : "CommError", e.what());
    std::fflush(stderr);
  }
  std::_Exit(::testing::Test::HasFailure() ? 1 : 0);   // not the communicator's destructor: the peer is gone
}
