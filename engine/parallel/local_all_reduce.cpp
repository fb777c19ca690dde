// local_all_reduce.cpp — the local backend's two all-reduce algorithms (local_comm.h).
// Ring, pipelined: the buffer is cut into segments of n slices (kRingSliceBytes each) and
// each segment goes through the whole ring — reduce-scatter (steps 0..n-2: reduce chunk
// rank-s-1 of the left neighbour into ours; after them this rank owns the finished chunk
// rank+1) then all-gather (steps n-1..2n-3: copy chunk rank-s from the left). Step 0 reads
// the left's send buffer (its own data), later steps its recv buffer; our own operand always
// comes from our send buffer, so out-of-place needs no initial copy. As NCCL's fused
// reduce-copy-send, the last reduce-scatter step also writes the finished chunk into the
// right neighbour's output, so the first all-gather step moves nothing (it only waits): at
// 2 ranks that saves a fifth of the memory traffic. Writing into the right's buffer is safe:
// its chunk rank+1 was last read (as rank+2's step-0 operand) before our step n-2 can start,
// and nobody else writes it. A segment is small, so what one rank writes is read by its
// neighbour while still in cache.
// Parameter server: rank 0 receives every worker's buffer into staging buffers of its own
// ((n-1) x size at once, as a server receiving from all workers holds), reduces, and the
// workers copy the result back.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/parallel/local_comm.h"
#include "engine/parallel/local_comm_util.h"

namespace oomlab {
using namespace local_detail;

void LocalCommunicator::do_all_reduce(Buf send, Buf recv, ReduceOp op) {
  if (algo_ == AllReduceAlgo::ring) ring_all_reduce(send, recv, op);
  else ps_all_reduce(send, recv, op);
}

void LocalCommunicator::ring_all_reduce(Buf send, Buf recv, ReduceOp op) {
  const int n = world_size();
  const DType d = recv.dtype;
  enter(call_text("all_reduce", recv.count, d, str_cat(reduce_op_name(op), ", ring")), send.data, recv.data);
  if (n == 1) {
    move(recv.data, send.data, recv.bytes());
    return;
  }
  const int left = (rank_ + n - 1) % n, right = (rank_ + 1) % n;
  const void *left_send, *left_recv;
  void* right_recv;
  {
    Lock lk(world_->mu_);
    const LocalWorld::Slot& L = peer(lk, left);
    left_send = L.send;
    left_recv = L.recv;
    right_recv = peer(lk, right).recv;
  }
  const LocalWorld::Slot& L = world_->slots_[size_t(left)];
  const LocalWorld::Slot& me = world_->slots_[size_t(rank_)];
  const int64_t slice = on_accelerator() ? std::max<int64_t>(1, (recv.count + n - 1) / n)   // one segment
                                         : std::max<int64_t>(1, kRingSliceBytes / int64_t(dtype_size(d)));
  const int64_t seg_len = slice * n;
  const int64_t segments = std::max<int64_t>(1, (recv.count + seg_len - 1) / seg_len);
  const int steps_per_segment = 2 * (n - 1);
  const int64_t base = steps_;
  for (int64_t g = 0; g < segments; ++g) {
    const int64_t lo = g * seg_len, hi = std::min(recv.count, lo + seg_len);
    for (int t = 0; t < steps_per_segment; ++t) {
      const int64_t step = base + g * steps_per_segment + t;
      const bool scatter = t < n - 1;
      const int s = scatter ? t : t - (n - 1);
      const int c_in = scatter ? (rank_ - s - 1 + 2 * n) % n : (rank_ - s + 2 * n) % n;
      const int c_out = scatter ? (rank_ - s + 2 * n) % n : (rank_ + 1 - s + 2 * n) % n;
      wait_counter(L.progress, step, left, "to finish its previous ring step");
      wait_counter(me.consumed, step, right, "to read this rank's previous chunk");
      const Range c = chunk(lo, hi, n, c_in);
      if (moves_data() && c.size() > 0) {
        char* dst = at(recv.data, c.lo, d);
        if (scatter) {
          const void* theirs = at(s == 0 ? left_send : left_recv, c.lo, d);
          reduce(d, op, dst, at(send.data, c.lo, d), theirs, c.size());
          if (s == n - 2) {   // this rank's finished chunk: also straight into the right's output
            if (op == ReduceOp::avg) divide(d, dst, c.size());
            move(at(right_recv, c.lo, d), dst, size_t(bytes_of(c.size(), d)));
          }
        } else if (s > 0) {   // all-gather step 0 was the left's push above
          move(dst, at(left_recv, c.lo, d), size_t(bytes_of(c.size(), d)));
        }
      }
      stats_.bytes_received += bytes_of(c.size(), d);
      stats_.bytes_sent += bytes_of(chunk(lo, hi, n, c_out).size(), d);
      step_done(step + 1, left);
    }
  }
  const int64_t end = base + segments * steps_per_segment;
  wait_counter(me.consumed, end, right, "to read this rank's last chunk");
  steps_ = end;
}

void LocalCommunicator::ps_all_reduce(Buf send, Buf recv, ReduceOp op) {
  const int n = world_size();
  if (rank_ == 0) move(recv.data, send.data, recv.bytes());
  enter(call_text("all_reduce", recv.count, recv.dtype, str_cat(reduce_op_name(op), ", ps")), send.data, recv.data);
  if (n == 1) return;
  const int64_t base = steps_, bytes = int64_t(recv.bytes());
  Lock lk(world_->mu_);
  if (rank_ == 0) {
    lk.unlock();
    std::vector<Tensor> staging;
    for (int w = 1; w < n; ++w) staging.push_back(Tensor::empty({recv.count}, recv.dtype, device_, "comm_staging"));
    lk.lock();
    for (int w = 1; w < n; ++w) {
      const void* src = peer(lk, w).send;
      lk.unlock();
      if (moves_data()) {
        void* st = staging[size_t(w - 1)].raw_data();
        move(st, src, size_t(bytes));
        reduce(recv.dtype, op, recv.data, recv.data, st, recv.count);
      }
      stats_.bytes_received += bytes;
      lk.lock();
    }
    if (op == ReduceOp::avg) divide(recv.dtype, recv.data, recv.count);
    set_progress_locked(base + 1);   // the result is ready; the workers' buffers are no longer read
    wait_readers_done(lk, others(n, 0), base + 1);
    stats_.bytes_sent += bytes * (n - 1);
  } else {
    const LocalWorld::Slot& server = peer(lk, 0);
    wait(lk, [&] { return server.progress.load() >= base + 1; }, 0, "to reduce (parameter server)");
    const void* result = server.recv;
    lk.unlock();
    move(recv.data, result, size_t(bytes));
    stats_.bytes_sent += bytes;
    stats_.bytes_received += bytes;
    lk.lock();
    set_progress_locked(base + 1);
  }
  finish(base + 1);
}

}  // namespace oomlab
