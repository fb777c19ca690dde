// communicator.h — collectives between ranks (NCCL's and torch.distributed's vocabulary):
// all_reduce, broadcast, reduce, all_gather, reduce_scatter, barrier on float32, float64,
// float16, bfloat16 and int64 tensors.
// Contracts (every backend):
//  * Buffers are contiguous tensors on this rank's device, send and recv of one dtype.
//    In-place is the same tensor (or, for all_gather, send = recv's slice of this rank).
//    Sizes as in NCCL: all_reduce / broadcast / reduce: recv.numel() == send.numel();
//    all_gather: recv = world x send; reduce_scatter: send = world x recv. Violations throw
//    ShapeError / DTypeError / DeviceError before any rank is waited for.
//  * Every rank calls the same collectives in the same order with matching sizes; a backend
//    that can see a mismatch throws CommError naming both calls.
//  * avg = sum, then a division by the world size (integer division for int64); max on
//    int64 and floats (NaN propagates). float16 / bfloat16 accumulate in float32 inside one
//    reduction step and round once per step, as NCCL does per hop.
//  * After all_reduce and broadcast every rank holds bit-identical results.
//  * No hang: a wait longer than timeout() throws CommTimeoutError naming the collective and
//    the rank waited for; a peer that failed or left makes the others throw CommError naming
//    it. After either, the communicator is unusable (every call throws CommError).
//  * stats(): bytes this rank sent and received for the algorithm (a buffer that moves is
//    counted once at its sender and once at its receiver), and calls per collective.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "kernels/collective.h"

namespace oomlab {

struct CommError : Error { using Error::Error; };               // a peer failed, left or disagreed
struct CommTimeoutError : CommError { using CommError::CommError; };

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);   // "sum", "avg", "max"
ReduceOp parse_reduce_op(const std::string& s);   // ValueError naming the value otherwise

struct CommStats {
  int64_t bytes_sent = 0, bytes_received = 0;
  std::map<std::string, int64_t> calls;   // collective name -> count
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;       // "local", "gloo", "mpi", "nccl"
  virtual Device device() const = 0;             // where this rank's buffers live

  void all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op);
  void all_reduce(const Tensor& t, ReduceOp op) { all_reduce(t, t, op); }
  void broadcast(const Tensor& send, const Tensor& recv, int root);   // send read on root only
  void broadcast(const Tensor& t, int root) { broadcast(t, t, root); }
  void reduce(const Tensor& send, const Tensor& recv, ReduceOp op, int root);   // recv written on root only
  void all_gather(const Tensor& send, const Tensor& recv);
  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op);
  void barrier();

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  struct Buf {   // a checked contiguous buffer: data (nullptr on meta), elements, dtype
    void* data;
    int64_t count;
    DType dtype;
    size_t bytes() const { return size_t(count) * dtype_size(dtype); }
  };
  virtual void do_all_reduce(Buf send, Buf recv, ReduceOp op) = 0;
  virtual void do_broadcast(Buf send, Buf recv, int root) = 0;
  virtual void do_reduce(Buf send, Buf recv, ReduceOp op, int root) = 0;
  virtual void do_all_gather(Buf send, Buf recv) = 0;
  virtual void do_reduce_scatter(Buf send, Buf recv, ReduceOp op) = 0;
  virtual void do_barrier() = 0;

  // Byte counts of a backend whose algorithms are its library's own (mpi, gloo, nccl): what a
  // ring moves. count_ring_bytes: (n-1)/n of `full` each way (all_reduce: full = 2 x size;
  // all_gather / reduce_scatter: the whole buffer). count_rooted_bytes: size at each non-root,
  // (n-1) x size at the root (broadcast: from the root; reduce: to it).
  void count_ring_bytes(int64_t full);
  void count_rooted_bytes(int root, int64_t bytes, bool from_root);

  CommStats stats_;
  std::chrono::milliseconds timeout_{std::chrono::seconds(300)};

 private:
  Buf checked(const Tensor& t, const char* op, const char* what) const;
  void check_root(int root, const char* op) const;
};

// dst[i] = op(a[i], b[i]) for i < n (op sum or max; avg reduces as sum; max keeps a NaN of
// either side). cpu memory; dst may be a or b. reduce_into(dst, src) = reduce_to(dst, dst, src).
// Both run the collective family's CPU kernels (kernels/collective.h), which a rank on an
// accelerator runs on its device (local_comm.h).
PairOp pair_op(ReduceOp op);   // avg reduces as sum
void reduce_to(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, int64_t n);
inline void reduce_into(DType dtype, ReduceOp op, void* dst, const void* src, int64_t n) {
  reduce_to(dtype, op, dst, dst, src, n);
}
// avg's last step: p[i] /= world (floats: multiply by nothing, divide exactly; int64: truncate).
void divide_by_world(DType dtype, void* p, int64_t n, int world);

}  // namespace oomlab
