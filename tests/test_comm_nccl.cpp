// test_comm_nccl.cpp — the nccl communicator (kernels/cuda/nccl_comm.cpp), made through the
// registry as every process backend is (comm_registry.h). Without a GPU (CI) only the
// argument checks run: a non-cuda device and a cuda device without a usable GPU are
// DeviceErrors raised before any rendezvous. With one, the shared collective suite
// (tests/collective_suite.h: every dtype x sum/avg/max x in-place and out-of-place, the other
// collectives, bit-identical random all-reduce, NaN through max) runs on a world of one rank on
// cuda:0 — one GPU cannot hold two NCCL ranks; several ranks need one GPU each and a launcher
// (tests/ranks_collectives.cpp is the harness of that). Tests skip when this build has no
// nccl backend (CPU builds, or no NCCL under the CUDA prefix) or no usable GPU.
// The GPU tests have not run yet: written on a machine without a GPU.
// ctest tier: ranks gpu
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "engine/parallel/comm_registry.h"
#include "tests/collective_suite.h"
#include "tests/cuda_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
bool nccl_built() {
  const std::vector<std::string> b = comm_backends();
  return std::find(b.begin(), b.end(), "nccl") != b.end();
}

#define REQUIRE_NCCL() \
  if (!nccl_built())   \
  GTEST_SKIP() << "this build has no nccl backend (no CUDA backend, or no NCCL under the CUDA prefix)"

// Rank 0 of 1; each test its own rendezvous port (ctest may run the tests as parallel processes).
RankInfo solo(int port) {
  RankInfo r;
  r.rank = 0;
  r.world_size = 1;
  r.master_addr = "127.0.0.1";
  r.master_port = port;
  return r;
}
}  // namespace

TEST(NcclComm, RefusesANonCudaDevice) {
  REQUIRE_NCCL();
  EXPECT_THROW(make_communicator("nccl", solo(29590), cpu_device()), DeviceError);
  EXPECT_THROW(make_communicator("nccl", solo(29590), Device{DeviceType::meta, 0}), DeviceError);
}

TEST(NcclComm, WithoutAUsableGpuIsADeviceError) {
  REQUIRE_NCCL();
  if (cuda_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(make_communicator("nccl", solo(29590), cuda0()), DeviceError);
}

TEST(NcclComm, OneRankPassesTheCollectiveSuite) {
  REQUIRE_NCCL();
  OOMLAB_REQUIRE_CUDA();
  std::unique_ptr<Communicator> c = make_communicator("nccl", solo(29591), cuda0());
  EXPECT_EQ(c->backend(), "nccl");
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->world_size(), 1);
  EXPECT_EQ(c->device(), cuda0());
  check_all_reduce(*c);
  check_other_collectives(*c);
  check_identical_results(*c);
  check_max_propagates_nan(*c);
  EXPECT_EQ(c->stats().calls.at("barrier"), 1);
  EXPECT_EQ(c->stats().bytes_sent, 0) << "a world of one moves nothing";
  EXPECT_EQ(c->stats().bytes_received, 0);
}

TEST(NcclComm, BadArgumentsAreClearErrorsAndLeaveItUsable) {
  REQUIRE_NCCL();
  OOMLAB_REQUIRE_CUDA();
  std::unique_ptr<Communicator> c = make_communicator("nccl", solo(29592), cuda0());
  Tensor on_cpu = Tensor::ones({4}, DType::f32, cpu_device());
  EXPECT_THROW(c->all_reduce(on_cpu, ReduceOp::sum), DeviceError);
  Tensor t = Tensor::ones({4}, DType::f32, cuda0());
  EXPECT_THROW(c->all_reduce(t, Tensor::ones({5}, DType::f32, cuda0()), ReduceOp::sum), ShapeError);
  EXPECT_THROW(c->all_reduce(t, Tensor::ones({4}, DType::f64, cuda0()), ReduceOp::sum), DTypeError);
  EXPECT_THROW(c->broadcast(t, 1), ValueError);
  c->all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(values(t), std::vector<double>(4, 1.0));
  c->barrier();
}
