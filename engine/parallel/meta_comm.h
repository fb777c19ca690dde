// meta_comm.h — one rank of a world of any size on the meta device: every collective is
// checked as on a real communicator (communicator.h: sizes, dtypes, roots) and moves
// nothing, so a rank's allocator trace under DDP or ZeRO is known without the other ranks
// (`oomlab estimate --parallel ddp`, the planner). Bytes are counted as a ring moves them
// (all_reduce 2(n-1)/n x size; all_gather / reduce_scatter (n-1)/n x the full buffer;
// broadcast / reduce from / to the root), the volumes NCCL's ring would send.
#pragma once
#include <string>

#include "engine/core/error.h"
#include "engine/parallel/communicator.h"

namespace oomlab {

class MetaRankCommunicator : public Communicator {
 public:
  MetaRankCommunicator(int world, int rank) : world_(world), rank_(rank) {
    OOMLAB_CHECK(world >= 1 && rank >= 0 && rank < world, "meta communicator: rank ", rank, " of a world of ",
                 world, " does not exist");
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "meta"; }
  Device device() const override { return meta_device(); }

 protected:
  void do_all_reduce(Buf send, Buf, ReduceOp) override { count_ring_bytes(2 * int64_t(send.bytes())); }
  void do_broadcast(Buf send, Buf, int root) override { count_rooted_bytes(root, int64_t(send.bytes()), true); }
  void do_reduce(Buf send, Buf, ReduceOp, int root) override { count_rooted_bytes(root, int64_t(send.bytes()), false); }
  void do_all_gather(Buf, Buf recv) override { count_ring_bytes(int64_t(recv.bytes())); }
  void do_reduce_scatter(Buf send, Buf, ReduceOp) override { count_ring_bytes(int64_t(send.bytes())); }
  void do_barrier() override {}

 private:
  int world_, rank_;
};

}  // namespace oomlab
