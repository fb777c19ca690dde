// test_comm_local.cpp — the local communicator (engine/parallel/local_comm.h) against a
// serial reference: every collective x dtype x world size 1..4 (and 7) x in-place /
// out-of-place, all-reduce with both algorithms. Inputs are small integers, exact in every
// dtype whatever the summation order, so results are compared bit for bit (avg: the exact
// sum divided once, as the backend does). Also: ranks end bit-identical on random float32
// data; NaN propagates through max; the byte counts of ring (2(n-1)/n x size per rank) and
// parameter server ((n-1) x size at rank 0) and the server's staging memory on meta; a rank
// that throws, leaves or hangs makes the others fail with CommError / CommTimeoutError,
// never hang; a counter written just before a waiter sleeps wakes it; mismatched calls and
// bad arguments are clear errors.
// ctest tier: ranks
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "engine/memory/caching_allocator.h"
#include "engine/parallel/comm_registry.h"
#include "engine/parallel/local_comm.h"
#include "tests/collective_suite.h"
#include "tests/cuda_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;
using namespace std::chrono_literals;

namespace oomlab {
// The wait / wake handshake from outside: local_comm.h's private counters and the world's
// before-sleep hook.
struct LocalCommTestPeer {
  static void before_sleep(LocalWorld& w, std::function<void()> f) { w.before_sleep_ = std::move(f); }
  static void wait_for_progress(LocalCommunicator& c, int peer, int64_t target) {
    c.wait_counter(c.world_->slots_[size_t(peer)].progress, target, peer, "to reach the test's step");
  }
  static void step_done(LocalCommunicator& c, int64_t step) { c.step_done(step); }
};
}  // namespace oomlab

namespace {
std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int r = 0; r < n; ++r) d.push_back(Device{DeviceType::cpu, r});
  return d;
}
std::vector<Device> metas(int n) {
  std::vector<Device> d;
  for (int r = 0; r < n; ++r) d.push_back(Device{DeviceType::meta, r});
  return d;
}
}  // namespace

TEST(LocalComm, AllReduceEveryDTypeOpWorldSizeAndAlgorithm) {
  for (AllReduceAlgo algo : {AllReduceAlgo::ring, AllReduceAlgo::parameter_server})
    for (int n : {1, 2, 3, 4, 7}) {
      SCOPED_TRACE(str_cat(all_reduce_algo_name(algo), " n=", n));
      run_local_ranks(cpus(n), algo, [](LocalCommunicator& c) { check_all_reduce(c); });
    }
}

TEST(LocalComm, BroadcastReduceAllGatherReduceScatter) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(str_cat("n=", n));
    run_local_ranks(cpus(n), AllReduceAlgo::ring, [](LocalCommunicator& c) {
      check_other_collectives(c);
      EXPECT_EQ(c.stats().calls.at("barrier"), 1);
    });
  }
}

// Real data, a different summation order per chunk: every rank holds the same bits (what
// data parallelism needs).
TEST(LocalComm, RanksEndBitIdenticalOnRandomData) {
  for (AllReduceAlgo algo : {AllReduceAlgo::ring, AllReduceAlgo::parameter_server}) {
    SCOPED_TRACE(all_reduce_algo_name(algo));
    run_local_ranks(cpus(4), algo, [](LocalCommunicator& c) { check_identical_results(c); });
  }
}

TEST(LocalComm, MaxPropagatesNaN) {
  for (AllReduceAlgo algo : {AllReduceAlgo::ring, AllReduceAlgo::parameter_server})
    run_local_ranks(cpus(3), algo, [](LocalCommunicator& c) { check_max_propagates_nan(c); });
}

// T7's claim in bytes: ring traffic per rank is 2(n-1)/n x size (flat in n); the server's
// is (n-1) x size (linear in n), and it holds (n-1) staging buffers while it reduces.
TEST(LocalComm, ByteCountsAndServerMemory) {
  const int64_t count = 1 << 16;   // divisible by every n below
  const int64_t size = count * 4;
  for (int n : {2, 4, 8, 16}) {
    std::vector<CommStats> ring(static_cast<size_t>(n)), ps(static_cast<size_t>(n));
    std::vector<int64_t> staging_peak(static_cast<size_t>(n));
    for (AllReduceAlgo algo : {AllReduceAlgo::ring, AllReduceAlgo::parameter_server}) {
      reset_allocators();
      run_local_ranks(metas(n), algo, [&](LocalCommunicator& c) {
        Tensor t = Tensor::empty({count}, DType::f32, c.device());
        allocator_for(c.device()).reset_peak_stats();
        c.all_reduce(t, ReduceOp::sum);
        const int64_t extra = allocator_for(c.device()).stat("allocated_bytes.all.peak") - int64_t(t.nbytes());
        if (algo == AllReduceAlgo::ring) {
          ring[size_t(c.rank())] = c.stats();
          EXPECT_EQ(extra, 0) << "ring allocates nothing, rank " << c.rank();
        } else {
          ps[size_t(c.rank())] = c.stats();
          staging_peak[size_t(c.rank())] = extra;
        }
      });
    }
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE(str_cat("n=", n, " rank ", r));
      EXPECT_EQ(ring[size_t(r)].bytes_sent, 2 * (n - 1) * size / n);
      EXPECT_EQ(ring[size_t(r)].bytes_received, 2 * (n - 1) * size / n);
      EXPECT_EQ(ps[size_t(r)].bytes_sent, r == 0 ? (n - 1) * size : size);
      EXPECT_EQ(ps[size_t(r)].bytes_received, r == 0 ? (n - 1) * size : size);
      EXPECT_EQ(staging_peak[size_t(r)], r == 0 ? (n - 1) * size : 0);
    }
  }
  reset_allocators();
}

// An unknown backend is one ValueError naming it and the backends this build has.
TEST(LocalComm, AnUnknownBackendNamesWhatTheBuildHas) {
  try {
    make_communicator("bogus", RankInfo{}, cpu_device());
    FAIL() << "made a 'bogus' communicator";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("communicator backend 'bogus' is not in this build (it has: local"), std::string::npos) << m;
  }
  try {
    require_comm_backend("bogus", "--backend");
    FAIL() << "accepted --backend bogus";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("--backend 'bogus' is not in this build"), std::string::npos) << e.what();
  }
}

TEST(LocalComm, AFailingRankBreaksTheWorldInsteadOfHanging) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> seen(3);
  try {
    run_local_ranks(cpus(3), AllReduceAlgo::ring, [&](LocalCommunicator& c) {
      Tensor t = Tensor::ones({64}, DType::f32, c.device());
      c.all_reduce(t, ReduceOp::sum);   // succeeds for everyone
      c.barrier();                      // everyone is past it
      if (c.rank() == 2) throw ValueError("rank 2 ran out of data");
      try {
        c.all_reduce(t, ReduceOp::sum);
      } catch (const CommError& e) {
        seen[size_t(c.rank())] = e.what();
        throw;
      }
    }, 60s);
    FAIL() << "expected rank 2's error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 ran out of data"), std::string::npos);   // the root cause
  }
  for (int r : {0, 1})
    EXPECT_NE(seen[size_t(r)].find("rank 2 failed: rank 2 ran out of data"), std::string::npos) << seen[size_t(r)];
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(LocalComm, ARankThatLeavesOrHangsIsNamed) {
  try {   // rank 1 returns without joining the collective: its communicator is gone
    run_local_ranks(cpus(2), AllReduceAlgo::parameter_server, [&](LocalCommunicator& c) {
      if (c.rank() == 1) return;
      Tensor t = Tensor::ones({8}, DType::f32, c.device());
      c.all_reduce(t, ReduceOp::sum);
    }, 60s);
    FAIL() << "expected a CommError";
  } catch (const CommTimeoutError&) {
    FAIL() << "a departed rank must not cost the whole timeout";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 left the world"), std::string::npos) << e.what();
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {   // rank 0 is stuck elsewhere: the others time out, naming it
    run_local_ranks(cpus(2), AllReduceAlgo::ring, [&](LocalCommunicator& c) {
      if (c.rank() == 0) { std::this_thread::sleep_for(1500ms); return; }
      Tensor t = Tensor::ones({8}, DType::f32, c.device());
      c.all_reduce(t, ReduceOp::sum);
    }, 300ms);
    FAIL() << "expected a timeout";
  } catch (const CommError& e) {
    const std::string w = e.what();
    EXPECT_TRUE(w.find("timed out after 0.3 s waiting for rank 0") != std::string::npos) << w;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

// A ring counter written (without the lock) after a waiter's last check but before it sleeps
// wakes it. Until 2026-12-03 a waiter counted itself a sleeper after its check, so the writer
// skipped the notify and the waiter slept its whole timeout, then went on: under load,
// experiment 11's DDP points on meta took 5 min instead of 3 s. Here the write happens while
// the waiter holds the lock in its last step before sleeping (the hook waits up to 200 ms for
// it; with the fix the writer's notify waits for the lock, so the hook gives up and returns).
TEST(LocalComm, ACounterWrittenJustBeforeAWaiterSleepsWakesIt) {
  auto world = std::make_shared<LocalWorld>(2);
  LocalCommunicator waiter(world, 0, meta_device(0)), writer(world, 1, meta_device(1));
  waiter.set_timeout(3s);
  std::atomic<bool> write{false}, written{false};
  std::thread peer([&] {
    while (!write) std::this_thread::yield();
    LocalCommTestPeer::step_done(writer, 1);   // progress 1, then the wake-up
    written = true;
  });
  bool first = true;
  LocalCommTestPeer::before_sleep(*world, [&] {
    if (!std::exchange(first, false)) return;
    write = true;
    for (auto until = std::chrono::steady_clock::now() + 200ms; !written && std::chrono::steady_clock::now() < until;)
      std::this_thread::yield();
  });
  const auto t0 = std::chrono::steady_clock::now();
  LocalCommTestPeer::wait_for_progress(waiter, 1, 1);
  const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  peer.join();
  EXPECT_FALSE(first);   // the hook ran: the waiter did go to sleep
  EXPECT_LT(waited_s, 1.5) << "the write before the sleep was missed: the waiter slept until its timeout";
}

// The data path a cuda rank takes (copy and collective kernels launched on its device,
// settle points, one ring segment), run by cpu ranks: the same suite, bit for bit.
TEST(LocalComm, AcceleratorDataPathOnCpuRanks) {
  LocalCommunicator::use_kernel_path_on_cpu_for_tests(true);
  for (int n : {1, 2, 3})
    for (AllReduceAlgo algo : {AllReduceAlgo::ring, AllReduceAlgo::parameter_server}) {
      SCOPED_TRACE(str_cat(n, " ranks, ", all_reduce_algo_name(algo)));
      run_local_ranks(cpus(n), algo, [](LocalCommunicator& c) {
        check_all_reduce(c);
        check_other_collectives(c);
        check_max_propagates_nan(c);
      });
    }
  run_local_ranks(cpus(4), AllReduceAlgo::ring, [](LocalCommunicator& c) { check_identical_results(c); });
  LocalCommunicator::use_kernel_path_on_cpu_for_tests(false);
}

// Logical cuda devices of one GPU (cuda:N runs on GPU N % count): the same suite on cuda ranks.
TEST(LocalComm, CollectiveSuiteOnLogicalCudaDevices) {
  OOMLAB_REQUIRE_CUDA();
  for (int n : {2, 3})
    for (AllReduceAlgo algo : {AllReduceAlgo::ring, AllReduceAlgo::parameter_server}) {
      SCOPED_TRACE(str_cat(n, " ranks, ", all_reduce_algo_name(algo)));
      std::vector<Device> d;
      for (int r = 0; r < n; ++r) d.push_back(Device{DeviceType::cuda, r});
      run_local_ranks(d, algo, [](LocalCommunicator& c) {
        check_all_reduce(c);
        check_other_collectives(c);
        check_max_propagates_nan(c);
        check_identical_results(c);
      });
    }
}

TEST(LocalComm, MismatchedCallsAndBadArgumentsAreClearErrors) {
  try {
    run_local_ranks(cpus(2), AllReduceAlgo::ring, [&](LocalCommunicator& c) {
      Tensor t = Tensor::ones({c.rank() == 0 ? 8 : 9}, DType::f32, c.device());
      c.all_reduce(t, ReduceOp::sum);
    }, 60s);
    FAIL() << "expected a CommError";
  } catch (const CommError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("collectives differ"), std::string::npos) << w;
    EXPECT_NE(w.find("all_reduce(float32 x 8, sum, ring)"), std::string::npos) << w;
    EXPECT_NE(w.find("all_reduce(float32 x 9, sum, ring)"), std::string::npos) << w;
  }
  run_local_ranks(cpus(1), AllReduceAlgo::ring, [&](LocalCommunicator& c) {
    EXPECT_THROW(c.all_reduce(Tensor::ones({4}), Tensor::ones({5}), ReduceOp::sum), ShapeError);
    EXPECT_THROW(c.all_reduce(Tensor::ones({4}), Tensor::ones({4}, DType::f64), ReduceOp::sum), DTypeError);
    EXPECT_THROW(c.all_reduce(Tensor::ones({4}, DType::u8), ReduceOp::sum), DTypeError);
    EXPECT_THROW(c.all_reduce(Tensor::ones({4, 4}).transpose(0, 1), ReduceOp::sum), ShapeError);
    EXPECT_THROW(c.all_reduce(Tensor::ones({4}, DType::f32, Device{DeviceType::meta, 0}), ReduceOp::sum), DeviceError);
    EXPECT_THROW(c.broadcast(Tensor::ones({4}), 1), ValueError);
    EXPECT_THROW(c.all_gather(Tensor::ones({4}), Tensor::ones({5})), ShapeError);
  });
  EXPECT_THROW(parse_reduce_op("mean"), ValueError);
  EXPECT_THROW(parse_all_reduce_algo("tree"), ValueError);
}
